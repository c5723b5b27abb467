"""What A2C and n-step Q-learning share: each full `Rollout` of `n_steps` vector steps is one
learner call, after which acting reads the new weights from the call's published copy."""

import abc

import keras
import numpy as np
import tensorflow as tf

from framework.agent import Agent, Health, Metrics, State, VectorStep
from framework.learner import Learner
from framework.parts.acting import ActingCopy
from framework.parts.returns import Rollout


class RolloutAgent(Agent):
    """Subclasses build `rollout`, `learner` (publishing the acting copy's variables) and
    `acting` (an `ActingCopy` of the network that acts), name their `networks()`, and add their
    own metrics in `rollout_metrics`; A3C's workers also read a `describe()` of their settings
    and pull `shared_variables`."""

    rollout: Rollout
    learner: Learner
    acting: ActingCopy
    # Whether an A3C worker can push one rollout's gradient of the agent's loss (PPO's
    # epochs of minibatches over a rollout cannot be one gradient).
    asynchronous_workers: bool = True

    def observe(self, step: VectorStep) -> None:
        self.rollout.add(step)

    def interrupt_episodes(self) -> None:
        self.rollout.end_episodes()

    def update(self, env_steps: int) -> tuple[Metrics, Health]:
        if not self.rollout.full:
            return {}, Health()
        metrics, health = self.learner.run(self.learner_batch(), env_steps)
        self.acting.refresh(self.learner.published)
        return metrics.with_values(self.rollout_metrics()), Health.from_tensor(health)

    def learner_batch(self) -> dict[str, np.ndarray]:
        """The learner's batch: the full rollout, as a stack of one `[1, T, N, ...]`."""
        return {name: array[None] for name, array in self.rollout.take().items()}

    @abc.abstractmethod
    def networks(self) -> dict[str, keras.Model]:
        """The agent's networks by checkpoint key."""

    @abc.abstractmethod
    def policy_networks(self) -> dict[str, keras.Model]:
        """The networks acting reads, by their keys in `networks()`."""

    @property
    def shared_variables(self) -> list[tf.Variable]:
        """What an A3C worker pulls from the global agent: every network's weights."""
        return [v for network in self.networks().values() for v in network.weights]

    def rollout_metrics(self) -> dict[str, float]:
        """Numbers of the agent's own to log with the learner's (none by default)."""
        return {}

    def weights_changed(self) -> None:
        """Call after changing the weights from outside (an A3C worker's pull, a restore):
        acting reads a copy of them."""
        self.acting.refresh()

    def state(self) -> State:
        """The rollout in progress is part of the state: a checkpoint falls anywhere in it."""
        return {
            **super().state(),
            **self.networks(),
            "learner": self.learner,
            "rollout": self.rollout.state(),
        }

    def load_state(self, state: State) -> None:
        super().load_state(state)
        self.rollout.load_state(state["rollout"])
        self.weights_changed()

    def policy_state(self) -> State:
        return self.policy_networks()

    def load_policy_state(self, state: State) -> None:
        del state  # networks only, restored in place
        self.weights_changed()
