"""SAC (Haarnoja et al., 2018): a squashed Gaussian actor, twin soft critics, a learned
temperature.

The actor gives the mean and log std of a Gaussian per action dimension; the policy is its
tanh (`SquashedGaussian`), in [-1, 1] and scaled to the Box's bounds to act. The critics see
actions in that [-1, 1] space (replayed actions are unscaled back into it), as SB3's do. One
learner call runs three update groups per gradient step, each with its own Adam:
  critic:      0.5 * sum_i mean (Q_i(s, a) - y)^2, the soft target
               y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s');
  actor:       mean(alpha * log pi(a~|s) - min_i Q_i(s, a~)), a~ ~ pi(.|s) reparameterised,
               against the critics just updated; after it the target critics follow by
               `SoftUpdate` (EMA, decay = 1 - tau);
  temperature: -log_alpha * (mean log pi(a~|s) + target_entropy) (SB3's form), with the actor
               step's own a~ from before that step; target entropy -dim(A) by default.
alpha = exp(log_alpha) in both the critic's and the actor's loss is the value before this
step's temperature update.

This is Stable-Baselines3's order of one gradient step (temperature, critics with the
pre-update alpha, actor against the updated critics, targets) with the temperature's apply
moved last: SB3 updates the temperature first, from the log-probabilities of the sample its
actor loss then reuses, and uses the alpha read before that update in both other losses; here
the temperature reads the same sample's log-probabilities from the actor group's loss extras of
the same step (`UpdateGroup.reads`), so every loss sees exactly the values it sees in SB3, while
the actor's forward pass on s runs once per step, not twice. (tests/agents/test_sac.py replays one
step in SB3's written order and compares every variable.) The temperature group runs last also
because the reward reaches only the critic group, first, as the agent contract expects.

Acting: uniform random actions until `learning_starts`, then a sample of the squashed Gaussian
(its noise from the agent's generator); evaluation acts with tanh(mean), scaled. Small MLP
actors act from a numpy copy, refreshed after every learner call. Learning: as every replay
agent (`agents/off_policy.py`).
"""

import math
from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf
from absl import logging

from agents.off_policy import ActorCriticReplayAgent
from framework.compiled.step_wrappers import PER_SAMPLE
from framework.learner import Learner, UpdateGroup
from framework.parts import acting, networks
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import SoftPolicyLoss, TDMSELoss, TemperatureLoss
from framework.parts.network_fit import check_network
from framework.parts.optimizers import TorchAdam
from framework.parts.replay import UniformReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.squashed_gaussian import SquashedGaussian
from framework.parts.target_updaters import SoftUpdate, TargetUpdater
from framework.parts.targets import MinCriticTarget
from framework.validation import require_positive, require_positive_number

# The actor step's log pi(a~|s) [B], in its loss extras, which the temperature group reads.
LOG_PROBS = PER_SAMPLE + "log_prob"


@gin.configurable
class SACAgent(ActorCriticReplayAgent):
    """SAC (Haarnoja et al., 2018) for continuous actions, with SB3's defaults.

    Parts left None: `SquashedGaussian()` (log std in [-20, 2]), `SoftPolicyLoss`, `TDMSELoss`
    (SB3's 0.5 * sum over the critics of their MSE), `MinCriticTarget` (over the target critics,
    the entropy term subtracted from each), `TemperatureLoss`, `TorchAdam(3e-4)` (torch's Adam,
    epsilon 1e-8) for each group, `SoftUpdate(tau=0.005)` over the critics.

    Args (beyond the parts):
      num_critics: critics trained on one soft target, the minimum of their target copies.
      initial_temperature: alpha at the start (log alpha = log of it).
      learn_temperature: False keeps alpha at `initial_temperature` (no temperature group).
      target_entropy: the entropy the temperature steers to; None: -dim(A) (SB3's "auto"). A
        number other than -dim(A) is said at build: a config moved to another action space
        keeps the number bound for its old one.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        actor_network: Callable[..., keras.Model] = networks.gaussian_actor_mlp,
        critic_network: Callable[..., keras.Model] = networks.critic_mlp,
        distribution: SquashedGaussian | None = None,
        actor_loss: Callable | None = None,
        critic_loss: Callable | None = None,
        td_target: Callable | None = None,
        temperature_loss: Callable | None = None,
        actor_optimizer: keras.optimizers.Optimizer | None = None,
        critic_optimizer: keras.optimizers.Optimizer | None = None,
        temperature_optimizer: keras.optimizers.Optimizer | None = None,
        actor_gradient_processor: GradientProcessor | None = None,
        critic_gradient_processor: GradientProcessor | None = None,
        target_updater: TargetUpdater | None = None,
        replay: Callable[..., UniformReplay] = UniformReplay,
        num_critics: int = 2,
        initial_temperature: float = 1.0,
        learn_temperature: bool = True,
        target_entropy: float | None = None,
        gamma: float = 0.99,
        n_step: int = 1,
        schedule: ReplaySchedule = ReplaySchedule(
            learning_starts=100, train_freq=1, gradient_steps=1, batch_size=256
        ),
    ):
        super().__init__(
            observation_space,
            action_space,
            seed,
            replay,
            gamma=gamma,
            n_step=n_step,
            schedule=schedule,
        )
        require_positive(self, num_critics=num_critics)
        require_positive_number(self, initial_temperature=initial_temperature)
        if target_entropy is None:
            target_entropy = -float(self.action_size)
        if not isinstance(target_entropy, int | float) or isinstance(target_entropy, bool):
            raise ValueError(
                f"SACAgent.target_entropy must be a number or None (-dim(A)), got "
                f"{target_entropy!r}."
            )
        self.target_entropy = float(target_entropy)
        if self.target_entropy != -self.action_size:  # a bound value, maybe of another space's
            logging.warning(
                "%s.target_entropy = %g differs from -dim(A) = %d, the default for this "
                "%d-dimensional action space (SB3's 'auto'); unbind it to use the default.",
                type(self).__name__,
                self.target_entropy,
                -self.action_size,
                self.action_size,
            )
        self.distribution = distribution or SquashedGaussian()
        self.actor_loss = actor_loss or SoftPolicyLoss()
        self.critic_loss = critic_loss or TDMSELoss()
        self.td_target = td_target or MinCriticTarget()
        self.temperature_loss = temperature_loss or TemperatureLoss()
        self.actor = actor_network(observation_space.shape, self.action_size)
        check_network(
            self,
            "actor_network",
            self.actor,
            self.distribution.network_outputs(action_space),
            "networks.gaussian_actor_mlp",
        )
        self.make_critics(critic_network, num_critics)
        online = [w for c in self.critics for w in c.weights]
        target = [w for c in self.target_critics for w in c.weights]
        self.copy_to_targets(online, target)
        self.log_alpha = tf.Variable(
            math.log(initial_temperature), trainable=learn_temperature, name="log_alpha"
        )
        self.acting = acting.gaussian_actor_forward(self.actor, observation_space)
        groups = [
            self.critic_group(
                self._critic_loss,
                critic_optimizer or TorchAdam(3e-4),
                critic_gradient_processor,
            ),
            UpdateGroup(
                self._actor_loss,
                self.actor.trainable_variables,
                actor_optimizer or TorchAdam(3e-4),
                actor_gradient_processor,
                target_updater or SoftUpdate(tau=0.005),
                online_variables=online,
                target_variables=target,
                name="actor",
            ),
        ]
        if learn_temperature:
            groups.append(
                UpdateGroup(
                    self._temperature_loss,
                    [self.log_alpha],
                    temperature_optimizer or TorchAdam(3e-4),
                    name="temperature",
                    reads=("actor",),
                )
            )
        self.learner = Learner(
            groups,
            batch_spec=self.batch_spec(tf.TensorSpec([self.action_size], tf.float32)),
            publish=self.acting.variables,
            loss_state=[self.tf_rng.state],
        )

    # ----- acting ------------------------------------------------------------------------------

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        if explore and self.steps < self.schedule.learning_starts:
            return self.warm_up_actions(observations)
        mean, log_std = self.acting(observations)  # [N, A] each
        if explore:
            noise = self.rng.standard_normal(mean.shape)
            unit = self.distribution.sample_numpy(mean, log_std, noise)
        else:
            unit = self.distribution.mode(mean)
        return self._to_bounds(unit).astype(np.float32)  # [N, A]

    def _to_bounds(self, unit: np.ndarray) -> np.ndarray:
        """[-1, 1] -> [low, high], per dimension (tanh may round to +-1 exactly: clipped)."""
        return np.clip(self.low + (unit + 1.0) * self.half_range, self.low, self.high)

    # ----- learning ----------------------------------------------------------------------------

    @property
    def alpha(self) -> tf.Tensor:
        return tf.exp(self.log_alpha)

    def _policy_sample(self, observation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`(a [B, A] in [-1, 1], log pi(a|s) [B])`, the noise from the agent's TF generator."""
        mean, log_std = self.actor(observation)
        return self.distribution.sample(mean, log_std, self.tf_rng.normal(tf.shape(mean)))

    def _critic_loss(self, batch):
        next_observation = batch["next_observation"]
        next_actions, next_log_probs = self._policy_sample(next_observation)  # [B, A], [B]
        entropy_bonus = self.alpha * next_log_probs  # [B]: alpha before this step's update
        next_q = [
            critic([next_observation, next_actions]) - entropy_bonus
            for critic in self.target_critics
        ]
        targets = self.td_target(batch["reward"], batch["discount"], next_q)  # [B]
        actions = (batch["action"] - self.low) / self.half_range - 1.0  # [B, A] in [-1, 1]
        losses, extras = zip(
            *(
                self.critic_loss(critic([batch["observation"], actions]), targets)
                for critic in self.critics
            ),
            strict=True,
        )
        # SB3's scale: 0.5 * the sum over the critics of each one's mean squared error.
        loss = 0.5 * tf.add_n(losses)
        metrics = {key: tf.add_n([e[key] for e in extras]) / len(extras) for key in extras[0]}
        metrics["target_q"] = tf.reduce_mean(targets)
        return loss, metrics

    def _actor_loss(self, batch):
        observation = batch["observation"]
        actions, log_probs = self._policy_sample(observation)  # [B, A], [B]
        policy_q = tf.reduce_min(
            tf.stack([critic([observation, actions]) for critic in self.critics]), axis=0
        )  # [B]
        loss, metrics = self.actor_loss(log_probs, policy_q, self.alpha)
        return loss, {**metrics, LOG_PROBS: log_probs}

    def _temperature_loss(self, batch, earlier):
        del batch  # the actor step's sample is the temperature's
        log_probs = earlier["actor"][LOG_PROBS]  # [B], without gradient
        return self.temperature_loss(self.log_alpha, log_probs, self.target_entropy)

    # ----- persistence and diagnostics ---------------------------------------------------------

    def networks(self) -> dict:
        return {
            "actor": self.actor,
            "critics": self.critics,
            "target_critics": self.target_critics,
            "log_alpha": self.log_alpha,
            "tf_rng": self.tf_rng,
        }

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        mean, _ = self.actor(observations)
        unit = self.distribution.mode(mean)  # [N, A]: tanh(mean)
        return {
            "action": tf.clip_by_value(
                self.low + (unit + 1.0) * self.half_range, self.low, self.high
            )
        }

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        mean, log_std = self.acting(observation[None])  # [1, A] each
        unit = np.tanh(mean).astype(np.float32)
        q = self.critics[0]([tf.constant(observation[None]), tf.constant(unit)])
        metrics = {"policy/q": float(q.numpy()[0])}
        if self.action_size <= 8:
            action = self._to_bounds(unit)[0]
            metrics.update({f"policy/action_{i}": float(a) for i, a in enumerate(action)})
            metrics.update({f"policy/log_std_{i}": float(s) for i, s in enumerate(log_std[0])})
        return metrics
