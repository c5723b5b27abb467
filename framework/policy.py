"""A trained agent's policy, read from a run folder for use: act, evaluate, record, export.

Loading reads only what acting needs (the driver's `policy_state()`: the acting networks, the
counts exploration reads, the observation statistics) from a checkpoint or the best snapshot,
and writes nothing (`RunDirectory.read_policy`). `experiments.load` builds one from a run's
own config.
"""

import dataclasses
import functools

import gymnasium as gym
import numpy as np

from framework import loop
from framework.agent import Agent
from framework.parts import wrappers


@dataclasses.dataclass
class Policy:
    """`act(observations [N, ...]) -> actions [N, ...]`, numpy in and out, and the agent behind
    it (`agent`: its networks, `agent.policy_outputs` as TensorFlow ops).

    `act` takes observations as the run's environment gives them before its observation
    normalisation (gymnasium's own environment, where the run does not normalise), and
    normalises them itself with the run's statistics; `env` is the run's evaluation
    environment, normalising with them frozen, as the runner's evaluations did.
    """

    agent: Agent
    env: gym.Env  # the run's evaluation environment, its statistics loaded and frozen
    step: int  # the environment step the policy was saved at
    source: str  # "checkpoint" or "best"
    eval_return: float | None  # the evaluation that made it the best, for "best"
    eval_seed: int  # the run's evaluation seed: an evaluation at `step` used eval_seed + step
    eval_episodes: int  # the run's episodes per evaluation

    @functools.cached_property
    def normalize(self) -> wrappers.ObservationNormalizer | None:
        """The run's observation normalisation, if it has one (ValueError where another
        wrapper changes the observations after it)."""
        return wrappers.observation_normalizer(self.env)

    @property
    def observation_space(self) -> gym.Space:
        """What `act` takes, one observation."""
        return self.normalize.raw_space if self.normalize else self.env.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.env.action_space

    def act(self, observations: np.ndarray, explore: bool = False) -> np.ndarray:
        """Actions `[N, *action_shape]` for observations `[N, *obs_shape]`: the evaluation
        policy (greedy, DQN's `eval_epsilon`, or REINFORCE's sampled one where its
        `greedy_evaluation = False`), or with `explore` the training one."""
        observations = np.asarray(observations)
        if self.normalize is not None:
            observations = self.normalize(observations)
        return self.agent.act(observations, explore)

    def evaluate(
        self, episodes: int | None = None, seed: int | None = None, explore: bool = False
    ) -> loop.Evaluation:
        """`episodes` episodes on `env` (the run's `eval_episodes` by default). With no `seed`,
        seeded as the run's evaluation at `step` was: a checkpoint written at an evaluation
        step, evaluated with the run's episodes, returns that evaluation exactly."""
        episodes = self.eval_episodes if episodes is None else episodes
        if not (isinstance(episodes, int) and episodes >= 1):
            raise ValueError(f"The number of episodes must be an integer >= 1, got {episodes!r}.")
        if seed is not None and not 0 <= seed < 2**32:
            raise ValueError(f"The seed must be in [0, 2**32), got {seed}.")
        base, offset = (self.eval_seed, self.step) if seed is None else (seed, 0)
        self.agent.seed_evaluation(base + offset)
        if explore:
            self.agent.rng = np.random.default_rng(base + offset)
        return loop.evaluate(
            self.env,
            lambda observation: self.agent.act(observation[None], explore)[0],
            episodes,
            base,
            offset,
        )

    def close(self) -> None:
        self.env.close()
