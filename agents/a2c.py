"""A2C: synchronous n-step advantage actor-critic (Mnih et al., 2016) over a vector environment.

Acting: each of the N sub-environments samples from the softmax policy, in numpy for small nets
(one uniform draw per sub-environment); evaluation takes the most probable action.
Learning: every `n_steps` vector steps the rollout `[T, N]` goes to the learner in one compiled
call, which evaluates V(s_t) and V(s'_t) with the current network, forms returns G and
advantages A with the `returns` part (`NStepReturns` or `GAE`, cut at every done, bootstrapped
from the final observation where truncated) and minimises

    loss = PolicyGradientLoss(logits, a, A) + value_loss_coef * TDMSELoss(V(s), G)

(the entropy bonus is `PolicyGradientLoss.entropy_coef`) with one optimizer. `ActorCriticLoss` is
the loss of one rollout for any network: an A3C worker builds the same one on its local copy.
"""

from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.on_policy import RolloutAgent
from framework.agent import Metrics
from framework.learner import Batch, Learner, UpdateGroup
from framework.parts import acting, exploration, networks
from framework.parts.distributions import Categorical
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import PolicyGradientLoss, TDMSELoss
from framework.parts.network_fit import VALUE, check_network
from framework.parts.returns import NStepReturns, Rollout, merge_time_and_envs
from framework.validation import (
    require_discrete,
    require_non_negative_number,
    require_positive,
    require_unit_interval,
)


class ActorCriticLoss:
    """The loss of one rollout batch `[T, N, ...]` (a `Rollout`'s arrays) for `network`,
    `s -> (logits [B, A], V(s) [B])`; returns `(loss, extras)` as every loss does."""

    def __init__(
        self,
        network: keras.Model,
        returns: Callable,
        policy_loss: PolicyGradientLoss,
        value_loss: TDMSELoss,
        value_loss_coef: float,
        gamma: float,
    ):
        self.network = network
        self.returns = returns
        self.policy_loss = policy_loss
        self.value_loss = value_loss
        self.value_loss_coef = value_loss_coef
        self.gamma = gamma

    def __call__(self, batch: Batch) -> tuple[tf.Tensor, Metrics]:
        rows = tf.shape(batch["reward"])  # [T, N]
        size = tf.size(batch["reward"])  # T * N
        flat = merge_time_and_envs
        # One forward pass for V(s_t) and V(s'_t) (s'_t: the final observation where done).
        observations = tf.concat([flat(batch["observation"]), flat(batch["next_observation"])], 0)
        logits, values = self.network(observations)  # [2TN, A], [2TN]
        logits, next_values, values = logits[:size], values[size:], values[:size]
        returns, advantages = self.returns(
            batch["reward"],
            tf.reshape(values, rows),
            tf.reshape(next_values, rows),
            batch["terminated"],
            batch["truncated"],
            self.gamma,
        )  # [T, N] each, no gradient
        returns, advantages = tf.reshape(returns, [-1]), tf.reshape(advantages, [-1])  # [TN]
        policy_loss, extras = self.policy_loss(logits, flat(batch["action"]), advantages)
        value_loss, _ = self.value_loss(values, returns)
        extras = {
            **extras,  # policy_loss, entropy
            "value_loss": value_loss,
            "mean_value": tf.reduce_mean(values),
            "mean_return": tf.reduce_mean(returns),
            "advantage_mean": tf.reduce_mean(advantages),
            "advantage_std": tf.math.reduce_std(advantages),
        }
        return policy_loss + self.value_loss_coef * value_loss, extras


@gin.configurable
class A2CAgent(RolloutAgent):
    """Synchronous advantage actor-critic (Mnih et al., 2016): a softmax policy and V(s) learned
    from rollouts of `n_steps` vector steps.

    Parts left None: `NStepReturns`, `PolicyGradientLoss`, `TDMSELoss` (V's, weighted by
    `value_loss_coef`) and RMSprop(7e-4, rho=0.99, epsilon=1e-5). Evaluation acts greedily.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        network: Callable[..., keras.Model] = networks.actor_critic_mlp,
        returns: Callable | None = None,
        policy_loss: PolicyGradientLoss | None = None,
        value_loss: TDMSELoss | None = None,
        value_loss_coef: float = 0.5,
        optimizer: keras.optimizers.Optimizer | None = None,
        gradient_processor: GradientProcessor | None = None,
        gamma: float = 0.99,
        n_steps: int = 5,
    ):
        super().__init__(observation_space, action_space, seed)
        require_positive(self, n_steps=n_steps)
        require_unit_interval(self, gamma=gamma)
        require_non_negative_number(self, value_loss_coef=value_loss_coef)
        self.num_actions = require_discrete(self, action_space)
        self.network = network(observation_space.shape, self.num_actions)
        needs = (Categorical().network_outputs(action_space), VALUE)
        check_network(self, "network", self.network, needs, "networks.actor_critic_mlp")
        self.loss = ActorCriticLoss(
            self.network,
            returns or NStepReturns(),
            policy_loss or PolicyGradientLoss(),
            value_loss or TDMSELoss(),
            value_loss_coef,
            gamma,
        )
        self.rollout = Rollout(n_steps, observation_space)
        self.acting = acting.actor_critic_forward(self.network, observation_space)
        self.learner = Learner(
            UpdateGroup(
                self.loss,
                self.network.trainable_variables,
                optimizer or keras.optimizers.RMSprop(7e-4, rho=0.99, epsilon=1e-5),
                gradient_processor,
            ),
            batch_spec=self.rollout.spec(),  # one trace for the whole run
            publish=self.acting.variables,
        )

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        logits = self.acting.logits(observations)  # [N, A]
        if not explore:
            return np.argmax(logits, axis=-1)
        return exploration.sample_softmax(logits, self.rng)

    def networks(self) -> dict[str, keras.Model]:
        return {"network": self.network}

    def policy_networks(self) -> dict[str, keras.Model]:
        return self.networks()

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        logits, values = self.network(observations)  # [N, A], [N]
        return {"action": tf.argmax(logits, axis=-1), "logits": logits, "value": values}

    def describe(self) -> dict:
        return {
            "n_steps": self.rollout.n_steps,
            "gamma": self.loss.gamma,
            "entropy_coef": self.loss.policy_loss.entropy_coef,
        }

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        probs = exploration.softmax(self.acting.logits(observation[None]))[0]
        metrics = {
            "policy/entropy_at_observation": float(-np.sum(probs * np.log(probs + 1e-12))),
            "policy/value": float(self.acting.values(observation[None])[0]),
        }
        if self.num_actions <= 16:
            metrics.update({f"policy/prob_{i}": float(p) for i, p in enumerate(probs)})
        return metrics

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.network.weights}
