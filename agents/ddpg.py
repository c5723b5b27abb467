"""DDPG (Lillicrap et al., 2015) and, as a configuration of it, TD3 (Fujimoto et al., 2018).

A deterministic actor mu(s) (tanh scaled to the Box's bounds) and one or more critics Q(s, a)
(the action joins at the second layer), each with a target copy. One learner call runs two
update groups per gradient step, each with its own optimizer:
  critic: TD-MSE of every critic to y = r + discount * min_i Q'_i(s', a'), a' = mu'(s'),
          the target a stop-gradient (the target part's and the loss's own);
  actor:  -mean Q_1(s, mu(s)) over the actor's variables; after it, the target actor and
          critics follow by `SoftUpdate` (EMA, decay = 1 - tau).
The targets move in the actor's group, so a delayed actor delays them with it, as in TD3.

TD3 is three settings of this agent (gin_configs/td3/): `num_critics = 2` (clipped double-Q),
`target_noise` (target policy smoothing: clipped Gaussian noise on a') and `actor_every = 2`
(the actor and targets update every 2nd step).

Acting: uniform random actions until `learning_starts`, then mu(s) plus exploration noise (a
part: Gaussian or Ornstein-Uhlenbeck, one process per sub-environment, restarted where an
episode ended), in units of the action half-range, clipped to the bounds; evaluation acts
with mu(s). Small MLP actors act from a numpy copy, refreshed after every learner call.
Learning: as every replay agent (`agents/off_policy.py`).
"""

from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.off_policy import ActorCriticReplayAgent
from framework.agent import State, VectorStep
from framework.learner import Learner, UpdateGroup
from framework.parts import acting, networks
from framework.parts.exploration import GaussianNoise
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import DeterministicPolicyLoss, TDMSELoss
from framework.parts.network_fit import Output, check_network
from framework.parts.replay import UniformReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.target_updaters import SoftUpdate, TargetUpdater
from framework.parts.targets import MinCriticTarget
from framework.validation import require_non_negative_number, require_positive


@gin.configurable
class DDPGAgent(ActorCriticReplayAgent):
    """DDPG (Lillicrap et al., 2015) for continuous actions; TD3 (Fujimoto et al., 2018) with
    `num_critics=2, target_noise=0.2, actor_every=2`.

    Parts left None: `DeterministicPolicyLoss`, `TDMSELoss`, `MinCriticTarget`, Adam(1e-3) for
    each group, `SoftUpdate(tau=0.005)` (over the actor and every critic), `GaussianNoise()`.

    Args (beyond the parts):
      num_critics: critics trained on one target, the minimum of their target copies.
      target_noise, target_noise_clip: target policy smoothing, in units of the action
        half-range: a' = clip(mu'(s') + clip(N(0, target_noise^2), +-clip), low, high).
      actor_every: the actor group (and with it the target updates) runs every n-th step.
      critic_l2: `critic_l2 * sum ||W||^2 / 2` over the critics' kernels joins their loss
        (the classic recipe's weight decay on Q).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        actor_network: Callable[..., keras.Model] = networks.actor_mlp,
        critic_network: Callable[..., keras.Model] = networks.critic_mlp,
        actor_loss: Callable | None = None,
        critic_loss: Callable | None = None,
        td_target: Callable | None = None,
        actor_optimizer: keras.optimizers.Optimizer | None = None,
        critic_optimizer: keras.optimizers.Optimizer | None = None,
        actor_gradient_processor: GradientProcessor | None = None,
        critic_gradient_processor: GradientProcessor | None = None,
        target_updater: TargetUpdater | None = None,
        replay: Callable[..., UniformReplay] = UniformReplay,
        noise: Callable | None = None,
        num_critics: int = 1,
        target_noise: float = 0.0,
        target_noise_clip: float = 0.5,
        actor_every: int = 1,
        critic_l2: float = 0.0,
        gamma: float = 0.99,
        n_step: int = 1,
        schedule: ReplaySchedule = ReplaySchedule(
            learning_starts=1_000, train_freq=1, gradient_steps=1, batch_size=256
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
        require_positive(self, num_critics=num_critics, actor_every=actor_every)
        require_non_negative_number(
            self,
            target_noise=target_noise,
            target_noise_clip=target_noise_clip,
            critic_l2=critic_l2,
        )
        self.target_noise = target_noise  # in units of the action half-range, as every noise
        self.target_noise_clip = target_noise_clip
        self.critic_l2 = critic_l2
        self.noise = noise or GaussianNoise()
        self.actor_loss = actor_loss or DeterministicPolicyLoss()
        self.critic_loss = critic_loss or TDMSELoss()
        self.td_target = td_target or MinCriticTarget()
        self.actor = actor_network(observation_space.shape, self.low, self.high)
        self.target_actor = actor_network(observation_space.shape, self.low, self.high)
        check_network(
            self,
            "actor_network",
            self.actor,
            Output("action", action_space.shape),
            "networks.actor_mlp",
        )
        self.make_critics(critic_network, num_critics)
        online = [*self.actor.weights, *(w for c in self.critics for w in c.weights)]
        target = [*self.target_actor.weights, *(w for c in self.target_critics for w in c.weights)]
        self.copy_to_targets(online, target)
        self.acting = acting.actor_forward(self.actor, observation_space)
        self.learner = Learner(
            [
                self.critic_group(
                    self._critic_loss,
                    critic_optimizer or keras.optimizers.Adam(1e-3),
                    critic_gradient_processor,
                ),
                UpdateGroup(
                    self._actor_loss,
                    self.actor.trainable_variables,
                    actor_optimizer or keras.optimizers.Adam(1e-3),
                    actor_gradient_processor,
                    target_updater or SoftUpdate(tau=0.005),
                    online_variables=online,
                    target_variables=target,
                    every=actor_every,
                    name="actor",
                ),
            ],
            batch_spec=self.batch_spec(tf.TensorSpec([self.action_size], tf.float32)),
            publish=self.acting.variables,
            loss_state=[self.tf_rng.state],  # target smoothing's noise
        )

    # ----- acting ------------------------------------------------------------------------------

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        if not explore:
            return self.acting(observations).astype(np.float32)  # [N, A]
        if self.steps < self.schedule.learning_starts:
            return self.warm_up_actions(observations)
        shape = (len(observations), self.action_size)
        noisy = self.acting(observations) + self.half_range * self.noise(self.rng, shape)
        return np.clip(noisy, self.low, self.high).astype(np.float32)  # [N, A]

    def observe(self, step: VectorStep) -> None:
        super().observe(step)
        self.noise.reset(step.terminated | step.truncated)

    def interrupt_episodes(self) -> None:
        super().interrupt_episodes()
        self.noise.reset()

    # ----- learning ----------------------------------------------------------------------------

    def exploration_metrics(self) -> dict[str, float]:
        return {"noise_scale": self.noise.scale}

    def _target_actions(self, next_observation: tf.Tensor) -> tf.Tensor:
        actions = self.target_actor(next_observation)  # [B, A]
        if not self.target_noise:
            return actions
        noise = self.target_noise * self.tf_rng.normal(tf.shape(actions))
        noise = tf.clip_by_value(noise, -self.target_noise_clip, self.target_noise_clip)
        return tf.clip_by_value(actions + self.half_range * noise, self.low, self.high)

    def _critic_loss(self, batch):
        next_observation = batch["next_observation"]
        next_actions = self._target_actions(next_observation)  # [B, A]
        next_q = [critic([next_observation, next_actions]) for critic in self.target_critics]
        targets = self.td_target(batch["reward"], batch["discount"], next_q)  # [B]
        losses, extras = zip(
            *(
                self.critic_loss(critic([batch["observation"], batch["action"]]), targets)
                for critic in self.critics
            ),
            strict=True,
        )
        loss = tf.add_n(losses)
        # Averaged over the critics: mean Q(s, a) on the batch and |TD error|.
        metrics = {key: tf.add_n([e[key] for e in extras]) / len(extras) for key in extras[0]}
        metrics["target_q"] = tf.reduce_mean(targets)
        if self.critic_l2:
            kernels = [
                layer.kernel
                for critic in self.critics
                for layer in critic.layers
                if isinstance(layer, keras.layers.Dense)
            ]
            metrics["l2"] = self.critic_l2 * tf.add_n([tf.nn.l2_loss(k) for k in kernels])
            metrics["td_loss"] = loss
            loss = loss + metrics["l2"]
        return loss, metrics

    def _actor_loss(self, batch):
        observation = batch["observation"]
        return self.actor_loss(self.critics[0]([observation, self.actor(observation)]))  # [B]

    # ----- persistence and diagnostics ---------------------------------------------------------

    def networks(self) -> dict:
        return {
            "actor": self.actor,
            "critics": self.critics,
            "target_actor": self.target_actor,
            "target_critics": self.target_critics,
            "tf_rng": self.tf_rng,
        }

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"action": self.actor(observations)}  # [N, A], within the bounds

    def state(self) -> State:
        return {**super().state(), "noise": self.noise.state()}

    def load_state(self, state: State) -> None:
        super().load_state(state)
        self.noise.load_state(state["noise"])

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        action = self.acting(observation[None])  # [1, A]
        q = self.critics[0]([tf.constant(observation[None]), tf.constant(action, tf.float32)])
        metrics = {"policy/q": float(q.numpy()[0])}
        if self.action_size <= 8:
            metrics.update({f"policy/action_{i}": float(a) for i, a in enumerate(action[0])})
        return metrics
