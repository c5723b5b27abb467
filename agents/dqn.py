"""DQN (Mnih et al., 2015) from pluggable parts: network, TD target, loss, target updater,
gradient processor, optimizer, replay and exploration schedule are each one gin binding.

Acting: epsilon-greedy on the online network. Small MLPs act from a numpy copy of the weights
(refreshed after every learner call); other networks through one compiled forward pass.
Learning: every `train_freq` steps after `learning_starts`, `gradient_steps` batches are sampled
at once and the learner runs them all in one compiled call.
"""

from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.base import Agent, Transition
from framework.parts import networks
from framework.parts.exploration import LinearSchedule
from framework.parts.gradient_processors import GradientProcessor
from framework.learner import Learner
from framework.parts.losses import TDHuberLoss
from framework.parts.replay import UniformReplay
from framework.parts.target_updaters import HardUpdate, TargetUpdater
from framework.parts.targets import QLearningTarget
from framework.validation import (
    require_discrete,
    require_non_negative,
    require_positive,
    require_unit_interval,
)


@gin.configurable
class DQNAgent(Agent):
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
        batch_size: int = 64,
        learning_starts: int = 1_000,
        train_freq: int = 4,
        gradient_steps: int = 1,
    ):
        super().__init__(observation_space, action_space, seed)
        require_positive(
            self,
            batch_size=batch_size,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            n_step=n_step,
        )
        require_non_negative(self, learning_starts=learning_starts)
        require_unit_interval(self, gamma=gamma, eval_epsilon=eval_epsilon)
        self.num_actions = require_discrete(self, action_space)
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.train_freq = train_freq
        self.gradient_steps = gradient_steps
        self.epsilon = epsilon or LinearSchedule()
        self.eval_epsilon = eval_epsilon
        self.loss = loss or TDHuberLoss()
        self.td_target = td_target or QLearningTarget()
        shape = observation_space.shape
        self.online = network(shape, self.num_actions)
        self.target = network(shape, self.num_actions)
        self.target.set_weights(self.online.get_weights())
        self.replay = replay(
            observation_shape=shape,
            observation_dtype=observation_space.dtype,
            n_step=n_step,
            gamma=gamma,
        )
        self.learner = Learner(
            self._loss,
            self.online.trainable_variables,
            optimizer or keras.optimizers.Adam(1e-4),
            gradient_processor,
            target_updater or HardUpdate(),
            online_variables=self.online.weights,
            target_variables=self.target.weights,
        )
        self._q_values = networks.acting_forward(self.online)
        self.steps = 0  # transitions observed; drives epsilon and the training schedule

    def act(self, observation: np.ndarray, explore: bool) -> int:
        epsilon, rng = (
            (self.epsilon(self.steps), self.rng) if explore else (self.eval_epsilon, self.eval_rng)
        )
        if epsilon > 0 and rng.random() < epsilon:
            return int(rng.integers(self.num_actions))
        return int(np.argmax(self._q_values(observation[None])[0]))

    def observe(self, transition: Transition) -> None:
        self.replay.add(*transition)
        self.steps += 1

    def start_episode(self) -> None:
        self.replay.end_episode()

    def update(self) -> dict[str, tf.Tensor]:
        due = self.steps >= self.learning_starts and self.steps % self.train_freq == 0
        if not due or len(self.replay) == 0:  # n-step windows fill only after n steps
            return {}
        batches = self.replay.sample_stack(self.gradient_steps, self.batch_size, self.rng)
        metrics = self.learner.run(batches)
        self._q_values.refresh()
        return {
            **metrics,
            "epsilon": self.epsilon(self.steps),
            "replay_size": float(len(self.replay)),
        }

    def _loss(self, batch):
        q_values = self.online(batch["observation"])  # [B, A]
        q_selected = tf.gather(q_values, tf.cast(batch["action"], tf.int32), axis=-1, batch_dims=1)
        next_observation = batch["next_observation"]
        targets = self.td_target(
            batch["reward"],
            batch["discount"],
            self.online(next_observation),
            self.target(next_observation),
        )  # [B]
        return self.loss(q_selected, targets)

    def checkpoint_items(self):
        return {"online": self.online, "target": self.target, "learner": self.learner}

    def restored(self) -> None:
        self.learner.restored()
        self._q_values.refresh()

    def extra_state(self):
        return {**super().extra_state(), "steps": self.steps}

    def load_extra_state(self, state) -> None:
        super().load_extra_state(state)
        self.steps = state["steps"]

    def save_extras(self, directory: str) -> None:
        super().save_extras(directory)
        self.replay.save(f"{directory}/replay.npz")

    def restore_extras(self, directory: str) -> None:
        super().restore_extras(directory)
        self.replay.load(f"{directory}/replay.npz")

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        q_values = self._q_values(observation[None])[0]
        metrics = {"policy/max_q": float(q_values.max())}
        if self.num_actions <= 16:
            metrics.update({f"policy/q_{i}": float(q) for i, q in enumerate(q_values)})
        return metrics

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.online.weights}
