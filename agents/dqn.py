"""DQN (Mnih et al., 2015) from pluggable parts: network, TD target, loss, target updater,
gradient processor, optimizer, replay and exploration schedule are each one gin binding.

Acting: epsilon-greedy on the online network, batched over the sub-environments. Small MLPs act
from a numpy copy of the weights (refreshed after every learner call); other networks through
one compiled forward pass.
Learning: `gradient_steps` for every multiple of `train_freq` transitions crossed after
`learning_starts` (a vector step of N transitions may cross several), all batches sampled at
once and run by the learner in one compiled call.
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

from framework.agent import Agent, Health, Metrics, State, VectorStep, training_calls_due
from framework.learner import Learner, UpdateGroup
from framework.parts import networks
from framework.parts.exploration import LinearSchedule, epsilon_greedy, q_value_diagnostics
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import TDHuberLoss
from framework.parts.replay import UniformReplay
from framework.parts.target_updaters import HardUpdate, TargetUpdater
from framework.parts.targets import QLearningTarget
from framework.validation import (
    require_box_observations,
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
        checkpoint_replay: bool = True,
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
        require_box_observations(self, observation_space)
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.train_freq = train_freq
        self.gradient_steps = gradient_steps
        self.checkpoint_replay = checkpoint_replay
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
        if self.replay.capacity < batch_size:
            raise ValueError(
                f"The replay's capacity ({self.replay.capacity}) is below "
                f"DQNAgent.batch_size ({batch_size}): every batch would repeat transitions. "
                "Raise UniformReplay.capacity or lower the batch size."
            )
        observation_dtype = tf.as_dtype(observation_space.dtype)
        self._q_values = networks.acting_forward(self.online)
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
            batch_spec={  # [gradient steps, batch, ...]: any number of steps, one trace
                "observation": tf.TensorSpec([None, batch_size, *shape], observation_dtype),
                "action": tf.TensorSpec([None, batch_size], tf.int64),
                "reward": tf.TensorSpec([None, batch_size], tf.float32),
                "discount": tf.TensorSpec([None, batch_size], tf.float32),
                "next_observation": tf.TensorSpec([None, batch_size, *shape], observation_dtype),
            },
            publish=self._q_values.variables,
        )
        self.steps = 0  # transitions observed; drives epsilon and the training schedule
        self._due_calls = 0  # training calls due since the last update

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        greedy = np.argmax(self._q_values(observations), axis=-1)  # [N]
        epsilon, rng = (
            (self.epsilon(self.steps), self.rng) if explore else (self.eval_epsilon, self.eval_rng)
        )
        return epsilon_greedy(greedy, epsilon, self.num_actions, rng)

    def observe(self, step: VectorStep) -> None:
        self.replay.add(step)
        before, self.steps = self.steps, self.steps + step.num_envs
        self._due_calls += training_calls_due(
            before, self.steps, self.train_freq, self.learning_starts
        )

    def interrupt_episodes(self) -> None:
        self.replay.end_episodes()

    def update(self) -> tuple[Metrics, Health]:
        calls, self._due_calls = self._due_calls, 0
        if not calls or len(self.replay) == 0:  # n-step windows fill only after n steps
            return {}, Health()
        batches = self.replay.sample_stack(calls * self.gradient_steps, self.batch_size, self.rng)
        metrics, health = self.learner.run(batches)
        self._q_values.refresh(self.learner.published)
        metrics = metrics.with_values(
            {"epsilon": self.epsilon(self.steps), "replay_size": len(self.replay)}
        )
        return metrics, Health.from_tensor(health)

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

    def state(self) -> State:
        return {
            **super().state(),
            "steps": self.steps,
            "online": self.online,
            "target": self.target,
            "learner": self.learner,
            **({"replay": self.replay.state()} if self.checkpoint_replay else {}),
        }

    def load_state(self, state: State) -> None:
        super().load_state(state)
        self.steps = state["steps"]
        if self.checkpoint_replay:
            self.replay.load_state(state["replay"])
        self.learner.restored()
        self._q_values.refresh()

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        return q_value_diagnostics(self._q_values(observation[None])[0])

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.online.weights}
