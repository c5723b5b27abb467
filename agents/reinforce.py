"""REINFORCE (Williams, 1992) for discrete actions, with an optional learned baseline.

After each `episodes_per_update` episodes: returns-to-go `G_t = sum_k gamma^k r_{t+k}`,
optionally standardised, minus an optional state-value baseline V(s_t), weight the policy's
cross-entropy pseudo-loss; V is fitted to G_t by least squares in the same gradient step.
"""

import os
from collections.abc import Callable
from typing import NamedTuple

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.base import Agent, Transition
from framework.parts import networks
from framework.parts.gradient_processors import GradientProcessor
from framework.learner import Learner
from framework.parts.losses import PolicyGradientLoss
from framework.validation import require_discrete, require_positive, require_unit_interval

_PENDING_FILE = "pending_episodes.npz"


class Episode(NamedTuple):
    """One finished episode, as arrays over its steps."""

    observation: np.ndarray  # [T, *obs_shape] float32
    action: np.ndarray  # [T] int32
    reward: np.ndarray  # [T] float32


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Returns-to-go of one episode: G_t = r_t + gamma * G_{t+1}, G_T = 0."""
    returns = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns.astype(np.float32)


@gin.configurable
class ReinforceAgent(Agent):
    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        network: Callable[..., keras.Model] = networks.mlp,
        loss: PolicyGradientLoss | None = None,
        optimizer: keras.optimizers.Optimizer | None = None,
        gradient_processor: GradientProcessor | None = None,
        gamma: float = 0.99,
        use_baseline: bool = False,
        baseline_loss_coef: float = 0.5,
        normalize_returns: bool = False,
        episodes_per_update: int = 1,
    ):
        super().__init__(observation_space, action_space, seed)
        require_positive(self, episodes_per_update=episodes_per_update)
        require_unit_interval(self, gamma=gamma)
        self.num_actions = require_discrete(self, action_space)
        self.gamma = gamma
        self.normalize_returns = normalize_returns
        self.episodes_per_update = episodes_per_update
        self.baseline_loss_coef = baseline_loss_coef
        shape = observation_space.shape
        self.policy = network(shape, self.num_actions)
        self.baseline = network(shape, 1) if use_baseline else None
        self._policy_numpy = networks.acting_forward(self.policy)
        self.loss = loss or PolicyGradientLoss()
        variables = list(self.policy.trainable_variables)
        if self.baseline is not None:
            variables += self.baseline.trainable_variables
        self.learner = Learner(
            self._loss,
            variables,
            optimizer or keras.optimizers.Adam(1e-3),
            gradient_processor,
            batch_spec={  # one stack of one batch of any number of steps
                "observation": tf.TensorSpec([1, None, *shape], tf.float32),
                "action": tf.TensorSpec([1, None], tf.int32),
                "return": tf.TensorSpec([1, None], tf.float32),
            },
        )
        self._episode: list[Transition] = []  # the episode in progress
        self._finished: list[Episode] = []  # complete episodes waiting for the next update

    def act(self, observation: np.ndarray, explore: bool) -> int:
        logits = self._policy_numpy(observation[None])[0]  # [A]
        if not explore:
            return int(np.argmax(logits))
        probs = _softmax(logits)
        return int(self.rng.choice(self.num_actions, p=probs))

    def observe(self, transition: Transition) -> None:
        self._episode.append(transition)
        if transition.terminated or transition.truncated:
            self._finished.append(
                Episode(
                    observation=np.array([t.observation for t in self._episode], np.float32),
                    action=np.array([t.action for t in self._episode], np.int32),
                    reward=np.array([t.reward for t in self._episode], np.float32),
                )
            )
            self._episode = []

    def start_episode(self) -> None:
        self._episode = []  # an episode cut off by the end of a run has no returns to learn from

    def update(self) -> dict[str, tf.Tensor]:
        if len(self._finished) < self.episodes_per_update:
            return {}
        batch = self._batch(self._finished)
        self._finished = []
        metrics = self.learner.run(batch)
        self._policy_numpy.refresh()
        return metrics

    def _batch(self, episodes: list["Episode"]) -> dict[str, np.ndarray]:
        """Concatenated steps of the finished episodes, as a stack of one batch."""
        returns = np.concatenate([discounted_returns(ep.reward, self.gamma) for ep in episodes])
        if self.normalize_returns:
            returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        return {
            "observation": np.concatenate([ep.observation for ep in episodes])[None],
            "action": np.concatenate([ep.action for ep in episodes])[None],
            "return": returns[None],
        }

    def _loss(self, batch):
        logits = self.policy(batch["observation"])  # [T, A]
        returns = batch["return"]  # [T]
        if self.baseline is None:
            return self.loss(logits, batch["action"], returns)
        values = tf.squeeze(self.baseline(batch["observation"]), -1)  # [T]
        policy_loss, extras = self.loss(logits, batch["action"], returns - tf.stop_gradient(values))
        value_loss = tf.reduce_mean(tf.square(returns - values))
        extras = {**extras, "value_loss": value_loss, "mean_value": tf.reduce_mean(values)}
        return policy_loss + self.baseline_loss_coef * value_loss, extras

    def save_extras(self, directory: str) -> None:
        """Finished episodes still waiting for the next update are part of the state."""
        super().save_extras(directory)
        columns = {
            name: np.concatenate([getattr(ep, name) for ep in self._finished])
            if self._finished
            else np.zeros((0,), np.float32)
            for name in Episode._fields
        }
        lengths = np.array([len(ep.reward) for ep in self._finished], dtype=np.int64)
        np.savez(os.path.join(directory, _PENDING_FILE), lengths=lengths, **columns)

    def restore_extras(self, directory: str) -> None:
        super().restore_extras(directory)
        with np.load(os.path.join(directory, _PENDING_FILE)) as pending:
            lengths = pending["lengths"]
            columns = [np.split(pending[name], np.cumsum(lengths)[:-1]) for name in Episode._fields]
        # Splitting empty columns still yields one (empty) part: keep one part per length.
        self._finished = [Episode(*parts) for parts in zip(*columns, strict=True)][: len(lengths)]
        self._episode = []

    def checkpoint_items(self):
        items = {"policy": self.policy, "learner": self.learner}
        if self.baseline is not None:
            items["baseline"] = self.baseline
        return items

    def restored(self) -> None:
        self.learner.restored()
        self._policy_numpy.refresh()

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        probs = _softmax(self._policy_numpy(observation[None])[0])
        entropy = float(-np.sum(probs * np.log(probs + 1e-12)))
        metrics = {"policy/entropy": entropy}
        if self.num_actions <= 16:
            metrics.update({f"policy/prob_{i}": float(p) for i, p in enumerate(probs)})
        return metrics

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.policy.weights}


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()
