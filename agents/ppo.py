"""PPO: proximal policy optimisation with the clipped surrogate (Schulman et al., 2017).

Acting: each sub-environment samples from the policy (a softmax over discrete actions, or a
diagonal Gaussian with one learned log std, clipped to the action bounds for the environment),
in numpy for small nets; the log-probability of the sample, V(s) and, for continuous actions,
the unclipped sample come back with the transition (`act_with_extras`) into the rollout.
Evaluation takes the mode (the most probable action, or the clipped mean).
Learning: every `n_steps` vector steps, one learner call over the rollout `[T, N]`:
  1. GAE from the values computed while acting (V(s'_t) of the final observation where an
     episode was cut short, and of the rollout's last next observation, computed now, with the
     weights that acted);
  2. `n_epochs` passes over the T * N samples in shuffled minibatches (`ShuffledMinibatches`),
     one gradient step each, on
        loss = ClippedSurrogateLoss + value_loss_coef * ValueLoss + EntropyBonus
     with one optimizer over the policy and value networks;
  3. with `target_kl`, the call's remaining steps are skipped once a minibatch's approximate
     KL passes 1.5 x target_kl, that minibatch not applied (SB3's rule).
The clip range and learning rate may follow schedules over environment steps.
"""

from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.on_policy import RolloutAgent
from framework.agent import Extras, Metrics
from framework.compiled.step_wrappers import StopWhen
from framework.learner import Batch, Learner, UpdateGroup
from framework.parts import acting, exploration, networks
from framework.parts.distributions import Categorical, DiagonalGaussian
from framework.parts.gradient_processors import ClipByGlobalNorm, GradientProcessor
from framework.parts.minibatches import ShuffledMinibatches
from framework.parts.network_fit import VALUE, check_network
from framework.parts.optimizers import Schedule, TorchAdam
from framework.parts.policy_losses import ClippedSurrogateLoss, EntropyBonus, ValueLoss
from framework.parts.returns import GAE, Rollout, merge_time_and_envs
from framework.validation import (
    require_box_observations,
    require_non_negative_number,
    require_positive,
    require_positive_number,
    require_unit_interval,
)

# The policy's own per-step numbers, kept with each transition.
_EXTRAS = {"log_prob": tf.TensorSpec((), tf.float32), "value": tf.TensorSpec((), tf.float32)}


class PPOLoss:
    """One minibatch's loss for `network`, `s -> (policy parameters, V(s))`: the parts' sum."""

    def __init__(
        self,
        network: keras.Model,
        distribution: Categorical | DiagonalGaussian,
        surrogate_loss: ClippedSurrogateLoss,
        value_loss: ValueLoss,
        value_loss_coef: float,
        entropy_bonus: EntropyBonus,
    ):
        self.network = network
        self.distribution = distribution
        self.surrogate_loss = surrogate_loss
        self.value_loss = value_loss
        self.value_loss_coef = value_loss_coef
        self.entropy_bonus = entropy_bonus

    def __call__(self, batch: Batch) -> tuple[tf.Tensor, Metrics]:
        parameters, values = self.network(batch["observation"])
        log_prob = self.distribution.log_prob(parameters, batch["action"])
        policy_loss, policy_extras = self.surrogate_loss(
            log_prob, batch["log_prob"], batch["advantage"]
        )
        value_loss, value_extras = self.value_loss(values, batch["value"], batch["return"])
        bonus, bonus_extras = self.entropy_bonus(self.distribution.entropy(parameters))
        loss = policy_loss + self.value_loss_coef * value_loss + bonus
        return loss, {**policy_extras, **value_extras, **bonus_extras}


@gin.configurable
class PPOAgent(RolloutAgent):
    """PPO (Schulman et al., 2017) for discrete or continuous (Box) actions.

    Parts left None are SB3's defaults: the distribution of the action space (`Categorical`
    or `DiagonalGaussian`), `GAE(0.95)`, `ClippedSurrogateLoss(0.2)`, `ValueLoss()`
    (unclipped), `EntropyBonus(0.0)`, `ShuffledMinibatches(10 epochs, 64)`,
    `TorchAdam(3e-4, epsilon=1e-5)` (torch's Adam: a PPO update equals SB3's to float32
    rounding), `ClipByGlobalNorm(0.5)`; the network `actor_critic_mlp` (discrete) or
    `gaussian_actor_critic_mlp` (Box): separate 64x64 tanh torsos, orthogonal init.

    Args (beyond the parts):
      n_steps: vector steps per rollout (T * num_envs samples a learner call).
      target_kl: stop a rollout's remaining epochs once a minibatch's approximate KL passes
        1.5 x this (None: never).
    """

    asynchronous_workers = False

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        network: Callable[..., keras.Model] | None = None,
        distribution: Categorical | DiagonalGaussian | None = None,
        returns: Callable | None = None,
        surrogate_loss: ClippedSurrogateLoss | None = None,
        value_loss: ValueLoss | None = None,
        value_loss_coef: float = 0.5,
        entropy_bonus: EntropyBonus | None = None,
        minibatches: ShuffledMinibatches | None = None,
        target_kl: float | None = None,
        optimizer: keras.optimizers.Optimizer | None = None,
        gradient_processor: GradientProcessor | None = None,
        gamma: float = 0.99,
        n_steps: int = 2048,
    ):
        super().__init__(observation_space, action_space, seed)
        require_positive(self, n_steps=n_steps)
        require_unit_interval(self, gamma=gamma)
        require_box_observations(self, observation_space)
        require_non_negative_number(self, value_loss_coef=value_loss_coef)
        if target_kl is not None:  # None: no early stop
            require_positive_number(self, target_kl=target_kl)
        self.continuous = isinstance(action_space, gym.spaces.Box)
        if self.continuous:
            outputs = int(np.prod(action_space.shape))
            kind, network = DiagonalGaussian, network or networks.gaussian_actor_critic_mlp
            extras = {**_EXTRAS, "sample": tf.TensorSpec(action_space.shape, tf.float32)}
        elif isinstance(action_space, gym.spaces.Discrete):
            outputs = int(action_space.n)
            kind, network = Categorical, network or networks.actor_critic_mlp
            extras = _EXTRAS
        else:
            raise ValueError(f"PPOAgent acts in Discrete or Box action spaces, got {action_space}.")
        self.distribution = distribution or kind()
        if not isinstance(self.distribution, kind):
            raise ValueError(
                f"PPOAgent.distribution = {type(self.distribution).__name__} cannot act in "
                f"{action_space}: use {kind.__name__} (or leave it unset)."
            )
        self.network = network(observation_space.shape, outputs)
        fits = "gaussian_actor_critic_mlp" if self.continuous else "actor_critic_mlp"
        needs = (self.distribution.network_outputs(action_space), VALUE)
        check_network(self, "network", self.network, needs, f"networks.{fits}")
        self.gamma = gamma
        self.returns = returns or GAE(0.95)
        self.minibatches = minibatches or ShuffledMinibatches()
        self.target_kl = target_kl
        surrogate_loss = surrogate_loss or ClippedSurrogateLoss()
        value_loss = value_loss or ValueLoss()
        self.loss = PPOLoss(
            self.network,
            self.distribution,
            surrogate_loss,
            value_loss,
            value_loss_coef,
            entropy_bonus or EntropyBonus(),
        )
        self.rollout = Rollout(n_steps, observation_space, action_space, extras)
        self.acting = acting.actor_critic_forward(self.network, observation_space)
        clip_ranges = {"clip_range": surrogate_loss.clip_range}
        clip_ranges["value_clip_range"] = value_loss.clip_range
        schedules = {name: clip for name, clip in clip_ranges.items() if isinstance(clip, Schedule)}
        self.learner = Learner(
            UpdateGroup(
                self.loss,
                self.network.trainable_variables,
                optimizer or TorchAdam(3e-4, epsilon=1e-5),
                gradient_processor or ClipByGlobalNorm(0.5),
            ),
            # One trace for the whole run: the rollout, and the minibatches' order.
            batch_spec={**self.rollout.spec(), "order": self.minibatches.spec()},
            publish=self.acting.variables,
            prepare=self._minibatches,
            schedules=schedules,
            stop=None if target_kl is None else StopWhen(self._kl_too_large),
        )

    def _kl_too_large(self, extras: Metrics) -> tf.Tensor:
        return extras["approx_kl"] > 1.5 * self.target_kl

    def _minibatches(self, batches: Batch) -> Batch:
        """A rollout `[1, T, N, ...]` as epochs of minibatches `[E * K, B, ...]` of samples
        with their advantages and returns (inside the learner's compiled call)."""
        rollout = {name: values[0] for name, values in batches.items()}  # [T, N, ...]
        order = rollout.pop("order")  # [E * K, B]
        rows = tf.shape(rollout["reward"])
        values = rollout["value"]
        final_values = tf.reshape(
            self.network(merge_time_and_envs(rollout["next_observation"]))[1], rows
        )
        # V(s'_t) is V(s_{t+1}) as computed while acting, except where the episode ended at t
        # (the final observation's) and at the last row (the next rollout's first state).
        ended = tf.logical_or(rollout["terminated"] > 0, rollout["truncated"] > 0)
        last_row = tf.one_hot(rows[0] - 1, rows[0], on_value=True, off_value=False)[:, None]
        following = tf.concat([values[1:], values[-1:]], 0)
        next_values = tf.where(tf.logical_or(ended, last_row), final_values, following)
        returns, advantages = self.returns(
            rollout["reward"],
            values,
            next_values,
            rollout["terminated"],
            rollout["truncated"],
            self.gamma,
        )
        samples = {
            "observation": rollout["observation"],
            "action": rollout["sample" if self.continuous else "action"],
            "log_prob": rollout["log_prob"],
            "value": values,
            "advantage": advantages,
            "return": returns,
        }
        flat = {name: merge_time_and_envs(array) for name, array in samples.items()}
        return self.minibatches.gather(flat, order)

    def act_with_extras(self, observations: np.ndarray) -> tuple[np.ndarray, Extras]:
        parameters, values = self.acting.policy_and_values(observations)  # one conv net call
        samples, log_prob = self.distribution.sample_numpy(parameters, self.rng)
        extras = {"log_prob": log_prob, "value": values}
        if not self.continuous:
            return samples, extras
        return self._clipped(samples), {**extras, "sample": samples}

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        parameters = self._parameters(observations)
        if explore:
            actions, _ = self.distribution.sample_numpy(parameters, self.rng)
        else:
            actions = self.distribution.mode_numpy(parameters)
        return self._clipped(actions) if self.continuous else actions

    def _parameters(self, observations: np.ndarray):
        if self.continuous:
            return self.acting.gaussian_parameters(observations)
        return self.acting.logits(observations)

    def _clipped(self, actions: np.ndarray) -> np.ndarray:
        space = self.action_space
        return np.clip(actions, space.low, space.high).astype(space.dtype)

    def learner_batch(self) -> dict[str, np.ndarray]:
        """The rollout, and the order of its minibatches, drawn from the agent's generator."""
        samples = self.rollout.n_steps * self.rollout.num_envs
        order = self.minibatches.order(samples, self.rng)
        return {**super().learner_batch(), "order": order[None]}

    def networks(self) -> dict[str, keras.Model]:
        return {"network": self.network}

    def policy_networks(self) -> dict[str, keras.Model]:
        return self.networks()

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        parameters, values = self.network(observations)
        if not self.continuous:
            return {"action": tf.argmax(parameters, axis=-1), "logits": parameters, "value": values}
        low, high = self.action_space.low, self.action_space.high
        mean, log_std = parameters
        return {
            "action": tf.clip_by_value(mean, low, high),
            "mean": mean,
            "log_std": log_std,
            "value": values,
        }

    def describe(self) -> dict:
        return {
            "n_steps": self.rollout.n_steps,
            "gamma": self.gamma,
            "n_epochs": self.minibatches.n_epochs,
            "batch_size": self.minibatches.batch_size,
        }

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        batch = observation[None]
        metrics = {"policy/value": float(self.acting.values(batch)[0])}
        if self.continuous:
            _, log_std = self.acting.gaussian_parameters(batch)
            metrics["policy/std_mean"] = float(np.exp(log_std).mean())
        else:
            probs = exploration.softmax(self.acting.logits(batch))[0]
            metrics["policy/entropy_at_observation"] = float(-np.sum(probs * np.log(probs + 1e-12)))
        return metrics

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.network.weights}
