"""The interface between an agent and the runner, which knows no algorithm."""

import abc
import json
import os
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import tensorflow as tf


class Transition(NamedTuple):
    """One environment step, as the runner hands it to `Agent.observe`."""

    observation: np.ndarray
    action: Any
    reward: float
    next_observation: np.ndarray
    terminated: bool  # the MDP ended: do not bootstrap
    truncated: bool  # cut short (time limit): bootstrap from next_observation


class Agent(tf.Module, abc.ABC):
    """An agent acts, observes transitions and updates itself.

    TensorFlow state (networks, optimizer, counters) lives in `checkpoint_items()`; numpy-side
    state (random generator, replay) is written by `save_extras` and read by `restore_extras`.
    Both are saved as one checkpoint by the runner.
    """

    _STATE_FILE = "agent_state.json"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int):
        super().__init__(name=type(self).__name__)
        self.observation_space = observation_space
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)  # training: exploration, sampling
        self.eval_rng = np.random.default_rng(seed)  # evaluation only; see seed_evaluation

    @abc.abstractmethod
    def act(self, observation: np.ndarray, explore: bool) -> Any:
        """The action for one observation; `explore=False` is the evaluation policy."""

    @abc.abstractmethod
    def observe(self, transition: Transition) -> None:
        """Stores one step of experience."""

    @abc.abstractmethod
    def update(self) -> dict[str, tf.Tensor]:
        """Runs the learner if it is due; returns its metrics, or {} when it did not run."""

    @abc.abstractmethod
    def checkpoint_items(self) -> dict[str, Any]:
        """Trackables to save in the TF checkpoint (networks, optimizer, counters)."""

    def seed_evaluation(self, seed: int) -> None:
        """Evaluation draws from its own generator, reseeded for each evaluation, so that how
        often and how long one evaluates never changes the training run."""
        self.eval_rng = np.random.default_rng(seed)

    def start_episode(self) -> None:
        """A new episode starts; drop what is left of one that never ended (the run stopped
        mid-episode and was resumed to train longer). A no-op after a normal episode end."""

    def restored(self) -> None:
        """Called after a checkpoint restore: refresh anything derived from the variables."""

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        """Scalars that describe the current policy at `observation` (e.g. action probs)."""
        del observation
        return {}

    def histogram_variables(self) -> dict[str, tf.Variable]:
        """Variables to log as weight histograms, by name."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """JSON-able numpy-side state; subclasses add their counters."""
        return {"rng": self.rng.bit_generator.state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]

    def save_extras(self, directory: str) -> None:
        with open(os.path.join(directory, self._STATE_FILE), "w") as f:
            json.dump(self.extra_state(), f)

    def restore_extras(self, directory: str) -> None:
        with open(os.path.join(directory, self._STATE_FILE)) as f:
            self.load_extra_state(json.load(f))
