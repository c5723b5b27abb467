"""DQN (Mnih et al., 2015) from pluggable parts: network, TD target, loss, target updater,
gradient processor, optimizer, replay and exploration schedule are each one gin binding.

Acting: epsilon-greedy on the online network, batched over the sub-environments. Small MLPs act
from a numpy copy of the weights (refreshed after every learner call); other networks through
one compiled forward pass.
Learning: as every replay agent (`agents/off_policy.py`). A categorical network (C51: `mlp`
with a `support`) with a categorical target and `CategoricalCrossEntropyLoss` is bound like
any other network, target and loss: the agent acts on its expected values. A prioritized
replay's importance weights go into the loss, and its per-sample errors back to the replay.
Checkpoints hold the replay unless `checkpoint_replay=False` (Atari: a full replay is GBs). A
run resumed from such a checkpoint starts with an empty replay and trains again once it holds
a transition, from fewer and newer ones than the uninterrupted run would: not an exact
continuation.
"""

from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.off_policy import ReplayAgent
from framework.learner import Learner, UpdateGroup
from framework.parts import (
    acting,
    networks,
    prioritized_replay,  # noqa: F401  (registers PrioritizedReplay with gin)
)
from framework.parts.exploration import (
    LinearSchedule,
    check_probability_schedule,
    epsilon_greedy,
    q_value_diagnostics,
)
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import TDHuberLoss
from framework.parts.network_fit import check_network, q_outputs
from framework.parts.replay import UniformReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.run_length import RunLengthSchedule
from framework.parts.target_updaters import HardUpdate, TargetUpdater
from framework.parts.targets import QLearningTarget
from framework.validation import (
    require_box_observations,
    require_discrete,
    require_positive,
    require_unit_interval,
)


@gin.configurable
class DQNAgent(ReplayAgent):
    """Deep Q-learning (Mnih et al., 2015) from a replay, acting epsilon-greedily on its Q-network.

    Parts left None: `TDHuberLoss`, `QLearningTarget`, Adam(1e-4), `HardUpdate()` and a
    `LinearSchedule()` of epsilon. `eval_epsilon`: the evaluation policy's epsilon (0: greedy).
    """

    takes_prioritized_replay = True

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        network: Callable[..., keras.Model] = networks.mlp,
        loss: Callable | None = None,
        td_target: Callable | None = None,
        optimizer: keras.optimizers.Optimizer | None = None,
        gradient_processor: GradientProcessor | None = None,
        target_updater: TargetUpdater | None = None,
        replay: Callable[..., UniformReplay] = UniformReplay,
        epsilon: Callable[[int], float] | None = None,
        eval_epsilon: float = 0.0,
        gamma: float = 0.99,
        n_step: int = 1,
        schedule: ReplaySchedule = ReplaySchedule(
            learning_starts=1_000, train_freq=4, gradient_steps=1, batch_size=64
        ),
        checkpoint_replay: bool = True,
    ):
        super().__init__(observation_space, action_space, seed, schedule, checkpoint_replay)
        require_positive(self, n_step=n_step)
        require_unit_interval(self, gamma=gamma, eval_epsilon=eval_epsilon)
        self.num_actions = require_discrete(self, action_space)
        require_box_observations(self, observation_space)
        self.epsilon = epsilon or LinearSchedule()
        check_probability_schedule("DQNAgent.epsilon", self.epsilon)
        self.eval_epsilon = eval_epsilon
        self.loss = loss or TDHuberLoss()
        self.td_target = td_target or QLearningTarget()
        shape = observation_space.shape
        self.online = network(shape, self.num_actions)
        self.target = network(shape, self.num_actions)
        self.target.set_weights(self.online.get_weights())
        check_network(
            self, "network", self.online, q_outputs(self.online, self.num_actions), "networks.mlp"
        )
        self.replay = replay(
            observation_shape=shape,
            observation_dtype=observation_space.dtype,
            n_step=n_step,
            gamma=gamma,
        )
        self.check_replay()
        self.acting = acting.forward(self.online, observation_space)
        # A prioritized replay's batches carry importance weights: [gradient steps, batch].
        weight = {"weight": tf.TensorSpec([None, schedule.batch_size], tf.float32)}
        self.learner = Learner(
            UpdateGroup(
                self._loss,
                self.online.trainable_variables,
                optimizer or keras.optimizers.Adam(1e-4),
                gradient_processor,
                target_updater or HardUpdate(),
                online_variables=self.online.weights,
                target_variables=self.target.weights,
            ),
            batch_spec={
                **self.batch_spec(tf.TensorSpec([], tf.int64)),
                **(weight if self.replay.prioritized else {}),
            },
            publish=self.acting.variables,
            per_sample=self.replay.prioritized,
        )

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        def greedy() -> np.ndarray:
            return np.argmax(self.acting(observations), axis=-1)  # [N]

        epsilon, rng = (
            (self.epsilon(self.steps), self.rng) if explore else (self.eval_epsilon, self.eval_rng)
        )
        return epsilon_greedy(greedy, len(observations), epsilon, self.num_actions, rng)

    def exploration_metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon(self.steps)}

    def named_schedules(self) -> dict[str, RunLengthSchedule]:
        """The learner's, epsilon's and a prioritized replay's beta (those that may span the
        run: a generic epsilon callable has no length)."""
        beta = getattr(self.replay, "beta", None)  # a prioritized replay's
        parts = {"epsilon (train/epsilon)": self.epsilon, "prioritized replay's beta": beta}
        return super().named_schedules() | {
            name: part for name, part in parts.items() if isinstance(part, RunLengthSchedule)
        }

    def _loss(self, batch):
        # Q-values [B, A], or a categorical network's logits [B, A, Z]: the taken action's
        # [B] or [B, Z], and a target of the same shape.
        outputs = self.online(batch["observation"])
        selected = tf.gather(outputs, tf.cast(batch["action"], tf.int32), axis=1, batch_dims=1)
        next_observation = batch["next_observation"]
        targets = self.td_target(
            batch["reward"],
            batch["discount"],
            self.online(next_observation),
            self.target(next_observation),
        )
        return self.loss(selected, targets, batch.get("weight"))

    def networks(self) -> dict[str, keras.Model]:
        return {"online": self.online, "target": self.target}

    def policy_networks(self) -> dict[str, keras.Model]:
        return {"online": self.online}

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        """Greedy on the online network's Q-values (a categorical network's expected values;
        an export leaves `eval_epsilon` out)."""
        q_values = networks.q_values(self.online, self.online(observations))  # [N, A]
        return {"action": tf.argmax(q_values, axis=-1), "q_values": q_values}

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        return q_value_diagnostics(self.acting(observation[None])[0])

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.online.weights}
