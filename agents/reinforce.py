"""REINFORCE (Williams, 1992) for discrete actions, with an optional learned baseline.

Each sub-environment collects its own episode; after `episodes_per_update` finished episodes
(over all sub-environments, in the order they ended): returns-to-go `G_t = sum_k gamma^k r_{t+k}`,
optionally standardised, minus an optional state-value baseline V(s_t), weight the policy's
cross-entropy pseudo-loss; V is fitted to G_t by least squares in the same gradient step.
"""

from collections.abc import Callable
from typing import NamedTuple

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from framework.agent import Agent, Health, Metrics, State, VectorStep
from framework.learner import Learner, UpdateGroup
from framework.parts import acting, exploration, networks
from framework.parts.distributions import Categorical
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import PolicyGradientLoss
from framework.parts.network_fit import Output, check_network
from framework.validation import (
    require_box_observations,
    require_discrete,
    require_positive,
    require_unit_interval,
)


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
    """REINFORCE (Williams, 1992): a softmax policy learned from whole episodes' returns-to-go,
    with an optional learned baseline V(s).

    Parts left None: `PolicyGradientLoss` and Adam(1e-3). One update per `episodes_per_update`
    finished episodes; `normalize_returns` standardises the returns of an update.
    `greedy_evaluation = False` evaluates the policy itself, sampling its actions (from the
    evaluation's own generator), not its most probable action: on a bandit, where every policy
    that learns soon prefers the best arm, an evaluation then tells how sure it is.
    """

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
        greedy_evaluation: bool = True,
    ):
        super().__init__(observation_space, action_space, seed)
        require_positive(self, episodes_per_update=episodes_per_update)
        require_unit_interval(self, gamma=gamma)
        self.num_actions = require_discrete(self, action_space)
        require_box_observations(self, observation_space)
        self.gamma = gamma
        self.normalize_returns = normalize_returns
        self.episodes_per_update = episodes_per_update
        self.greedy_evaluation = greedy_evaluation
        self.baseline_loss_coef = baseline_loss_coef
        shape = observation_space.shape
        self.policy = network(shape, self.num_actions)
        self.baseline = network(shape, 1) if use_baseline else None
        logits = Categorical().network_outputs(action_space)
        check_network(self, "network", self.policy, logits, "networks.mlp")
        if self.baseline is not None:
            check_network(self, "network", self.baseline, Output("V(s)", (1,)), "networks.mlp")
        self._policy_numpy = acting.forward(self.policy, observation_space)
        self.loss = loss or PolicyGradientLoss()
        variables = list(self.policy.trainable_variables)
        if self.baseline is not None:
            variables += self.baseline.trainable_variables
        self.learner = Learner(
            UpdateGroup(
                self._loss, variables, optimizer or keras.optimizers.Adam(1e-3), gradient_processor
            ),
            batch_spec={  # one stack of one batch of any number of steps
                "observation": tf.TensorSpec([1, None, *shape], tf.float32),
                "action": tf.TensorSpec([1, None], tf.int32),
                "return": tf.TensorSpec([1, None], tf.float32),
            },
            publish=self._policy_numpy.variables,
        )
        self._episodes: list[list[tuple]] = []  # per sub-env: the episode in progress
        self._finished: list[Episode] = []  # complete episodes waiting for the next update

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        logits = self._policy_numpy(observations)  # [N, A]
        if explore:
            return exploration.sample_softmax(logits, self.rng)
        if self.greedy_evaluation:
            return np.argmax(logits, axis=-1)
        return exploration.sample_softmax(logits, self.eval_rng)

    def observe(self, step: VectorStep) -> None:
        if not self._episodes:
            self._episodes = [[] for _ in range(step.num_envs)]
        for index, episode in enumerate(self._episodes):
            episode.append((step.observation[index], step.action[index], step.reward[index]))
            if step.terminated[index] or step.truncated[index]:
                self._finished.append(_as_episode(episode))
                self._episodes[index] = []

    def interrupt_episodes(self) -> None:
        """An episode cut off without a done has no returns to learn from: drop it."""
        self._episodes = [[] for _ in self._episodes]

    def update(self, env_steps: int) -> tuple[Metrics, Health]:
        if len(self._finished) < self.episodes_per_update:
            return {}, Health()
        batch = self._batch(self._finished)
        self._finished = []
        metrics, health = self.learner.run(batch, env_steps)
        self._policy_numpy.refresh(self.learner.published)
        return metrics, Health.from_tensor(health)

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

    def state(self) -> State:
        """Finished episodes waiting for the next update and the episodes in progress are part
        of the state: a checkpoint falls anywhere inside an episode."""
        in_progress = [_as_episode(episode) for episode in self._episodes]
        items = {
            **super().state(),
            "policy": self.policy,
            "learner": self.learner,
            "finished": _episodes_state(self._finished, self.observation_space.shape),
            "in_progress": _episodes_state(in_progress, self.observation_space.shape),
        }
        if self.baseline is not None:
            items["baseline"] = self.baseline
        return items

    def load_state(self, state: State) -> None:
        super().load_state(state)
        self._finished = _episodes_from_state(state["finished"])
        self._episodes = [
            list(zip(*episode, strict=True))
            for episode in _episodes_from_state(state["in_progress"])
        ]
        self._policy_numpy.refresh()

    def policy_state(self) -> State:
        return {"policy": self.policy}

    def load_policy_state(self, state: State) -> None:
        del state  # the policy network, restored in place
        self._policy_numpy.refresh()

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        logits = self.policy(observations)  # [N, A]
        return {"action": tf.argmax(logits, axis=-1), "logits": logits}

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        probs = exploration.softmax(self._policy_numpy(observation[None]))[0]
        entropy = float(-np.sum(probs * np.log(probs + 1e-12)))
        # At one observation (the first sub-env's); train/entropy is the batch mean in updates.
        metrics = {"policy/entropy_at_observation": entropy}
        if self.num_actions <= 16:
            metrics.update({f"policy/prob_{i}": float(p) for i, p in enumerate(probs)})
        return metrics

    def histogram_variables(self) -> dict[str, tf.Variable]:
        networks = {"policy": self.policy, "baseline": self.baseline}
        return {
            f"{name}/{v.path}": v
            for name, network in networks.items()
            if network is not None
            for v in network.weights
        }


def _as_episode(steps: list[tuple]) -> Episode:
    observations, actions, rewards = zip(*steps, strict=True) if steps else ((), (), ())
    return Episode(
        observation=np.array(observations, np.float32),
        action=np.array(actions, np.int32),
        reward=np.array(rewards, np.float32),
    )


def _episodes_state(episodes: list[Episode], observation_shape: tuple[int, ...]) -> State:
    """Episodes as concatenated columns plus their lengths (arrays the checkpoint stores)."""
    return {
        "lengths": np.array([len(ep.reward) for ep in episodes], np.int64),
        "observation": np.concatenate(
            [ep.observation.reshape(-1, *observation_shape) for ep in episodes]
            or [np.zeros((0, *observation_shape), np.float32)]
        ),
        "action": np.concatenate([ep.action for ep in episodes] or [np.zeros(0, np.int32)]),
        "reward": np.concatenate([ep.reward for ep in episodes] or [np.zeros(0, np.float32)]),
    }


def _episodes_from_state(state: State) -> list[Episode]:
    bounds = np.cumsum(state["lengths"])[:-1]
    columns = [np.split(state[name], bounds) for name in Episode._fields]
    return [Episode(*parts) for parts in zip(*columns, strict=True)][: len(state["lengths"])]
