"""Steps a vector environment with an agent: act, step, observe. It knows no algorithm and no disk.

A single environment is a vector environment with `num_envs = 1`. Sub-environments reset in the
same step that ends their episode (gymnasium's `AutoresetMode.SAME_STEP`), so every step the
agent observes is a real transition: its `next_observation` is the episode's final observation
where an episode ended (from `infos["final_obs"]`), while the loop carries on from the reset
one. With gymnasium's default `NEXT_STEP` mode the step after a done would be a reset dressed as
a transition (Gymnasium#1103); this loop never sees one.

Where the environment records its games beneath layers that end the learner's episodes sooner
or change its rewards (`GameScore` under the Atari protocol's life loss and reward clipping),
the loop reports the games, with their own scores, as the episodes that ended, and an
evaluation plays whole games, resetting after each of the learner's episodes within them.

Where the agent learns from scaled rewards (`NormalizeReward`), the returns the loop reports sum
the environment's own rewards, which each step carries in its info.

Evaluation episodes run on an environment of their own (`evaluate`). An evaluation is seeded by
the step it is taken at, so it depends on nothing that came before and never changes the
training run. An environment that knows each step's expected reward says
so in `info["expected_reward"]` (the bandit: the mean of the arm pulled), and an evaluation
sums that instead of the sampled reward: its return is then the policy's expected return for
the actions it took, not that plus the reward's noise (a greedy bandit policy's evaluation is
its arm's mean, whatever the draws). Training learns from the sampled rewards as ever.
"""

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import gin
import gymnasium as gym
import numpy as np

from framework import env_state
from framework.agent import Agent, State, VectorStep
from framework.parts import atari, wrappers

AUTORESET_MODE = gym.vector.AutoresetMode.SAME_STEP


@gin.configurable(allowlist=["vector_env"])
def make_vector_env(
    env_factory: Callable[[], gym.Env],
    num_envs: int,
    vector_env: Callable[[Callable[[], gym.Env], int], gym.vector.VectorEnv] | None = None,
) -> gym.vector.VectorEnv:
    """`num_envs` copies of `env_factory()` stepped in turn in this process, or, with
    `vector_env`, `vector_env(env_factory, num_envs)`: the same environment vectorised natively
    (e.g. `vectorised_cartpole`), which must autoreset in the same step and have the spaces of
    `env_factory()`, the environment that evaluations use."""
    if vector_env is None:
        return gym.vector.SyncVectorEnv(
            [env_factory] * num_envs, copy=False, autoreset_mode=AUTORESET_MODE
        )
    envs = vector_env(env_factory, num_envs)
    problem = _unfit_vector_env(envs, env_factory, num_envs)
    if problem:
        envs.close()
        raise ValueError(
            f"make_vector_env.vector_env: {type(envs).__name__} {problem}. Give a vector env "
            "of the same environment that resets an ended episode in the step that ends it "
            "(e.g. vectorised_cartpole for CartPole-v1), or leave vector_env unset to "
            "step num_envs copies of env_factory in turn."
        )
    return envs


def _unfit_vector_env(
    envs: gym.vector.VectorEnv, env_factory: Callable[[], gym.Env], num_envs: int
) -> str | None:
    """What keeps `envs` from standing in for `num_envs` copies of `env_factory()`, if anything."""
    mode = envs.metadata.get("autoreset_mode")
    if mode is None:
        return f"declares no autoreset_mode in its metadata, where the loop needs {AUTORESET_MODE}"
    if mode != AUTORESET_MODE:
        return f"autoresets in mode {mode}, where the loop needs {AUTORESET_MODE}"
    if envs.num_envs != num_envs:
        return f"has {envs.num_envs} sub-environments where {num_envs} were asked for"
    single = env_factory()
    single.close()
    if (envs.single_observation_space, envs.single_action_space) != (
        single.observation_space,
        single.action_space,
    ):
        return (
            f"has spaces {envs.single_observation_space} and {envs.single_action_space}, but "
            f"the evaluation environment (env_factory) has {single.observation_space} and "
            f"{single.action_space}"
        )
    return None


class InfoKeyError(ValueError):
    """An ended episode's last step lacks an info key the run was asked to log, or its value is
    not a number."""


@dataclasses.dataclass
class EndedEpisodes:
    """The episodes that ended in one vector step."""

    returns: np.ndarray  # [E] float64
    lengths: np.ndarray  # [E] int64
    # The chosen keys of each episode's last info (`EnvironmentLoop.info_keys`): key -> [E]
    infos: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


class EnvironmentLoop:
    """Owns the training vector env, the current observations and per-env episode tallies.

    `seconds` splits the time spent so far between the environment, acting and observing;
    `infos` is the last vector step's info dict (the vector env's own, not a copy). Where
    `info_keys` are set, each ended episode reports the values of those keys in its last
    step's info (`EndedEpisodes.infos`; SAME_STEP autoreset keeps them in
    `infos["final_info"]`), and an episode whose info lacks one is an `InfoKeyError`.
    """

    def __init__(self, envs: gym.vector.VectorEnv, agent: Agent):
        self.envs = envs
        self.agent = agent
        self.num_envs = envs.num_envs
        self.observations: np.ndarray | None = None
        self.returns = np.zeros(self.num_envs, np.float64)
        self.lengths = np.zeros(self.num_envs, np.int64)
        self.seconds = {"environment": 0.0, "acting": 0.0, "observing": 0.0}
        self.saved_as, self.why = env_state.how_saved(envs)
        self.infos: dict[str, Any] | None = None
        self.info_keys: tuple[str, ...] = ()
        sub_envs = getattr(envs, "envs", [])  # a vector env stepped natively has none
        self.counts_games = bool(sub_envs) and atari.records_games(sub_envs[0])
        self.scales_rewards = bool(sub_envs) and wrappers.scales_rewards(sub_envs[0])

    def reset(self, seed: int | None) -> None:
        """Starts a fresh episode in every sub-env; a seed makes the resets reproducible."""
        observations, _ = self.envs.reset(seed=seed)
        self.observations = np.array(observations)
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def step(self) -> EndedEpisodes | None:
        """One vector step: N transitions handed to the agent; the episodes that ended in it."""
        start = time.perf_counter()
        actions, extras = self.agent.act_with_extras(self.observations)
        acted = time.perf_counter()
        next_observations, rewards, terminated, truncated, infos = self.envs.step(actions)
        next_observations = np.array(next_observations)  # the env reuses its buffer
        stepped = time.perf_counter()
        done = terminated | truncated
        any_done = np.count_nonzero(done) > 0  # a quarter of `done.any()`'s cost on small arrays
        final_observations = next_observations
        if any_done:
            final_observations = next_observations.copy()
            for index in np.flatnonzero(done):
                final_observations[index] = infos["final_obs"][index]
        self.agent.observe(
            VectorStep(
                self.observations,
                actions,
                rewards,
                final_observations,
                terminated,
                truncated,
                extras,
            )
        )
        self.observations, self.infos = next_observations, infos
        self.returns += self._raw_rewards(infos, done, any_done) if self.scales_rewards else rewards
        self.lengths += 1
        ended = None
        if any_done:
            ended = self._ended(infos, done)
            self.returns[done] = 0.0
            self.lengths[done] = 0
        observed = time.perf_counter()
        self.seconds["acting"] += acted - start
        self.seconds["environment"] += stepped - acted
        self.seconds["observing"] += observed - stepped
        return ended

    @staticmethod
    def _raw_rewards(infos: dict[str, Any], done: np.ndarray, any_done: bool) -> np.ndarray:
        """The env's own rewards of a step whose rewards are scaled: an ended episode's is in
        its last step's info (`final_info`), the others' in `infos`."""
        key = wrappers.RAW_REWARD
        raw = np.zeros(len(done), np.float64)
        if key in infos:  # absent where every sub-env reset in this step
            raw[:] = infos[key]
        if any_done:
            raw[done] = infos["final_info"][key][done]
        return raw

    def _ended(self, infos: dict[str, Any], done: np.ndarray) -> EndedEpisodes | None:
        """The episodes that ended in this step: by the loop's own tallies, or, where the
        environment records its games, the games that ended (a lost life ends none), with the
        scores and lengths the game counts."""
        if self.counts_games:
            final = infos.get("final_info", {})
            done = done & final.get(f"_{atari.GAME_SCORE}", np.zeros_like(done))
            if not np.count_nonzero(done):
                return None
            returns = np.asarray(final[atari.GAME_SCORE][done], np.float64)
            lengths = np.asarray(final[atari.GAME_LENGTH][done], np.int64)
        else:
            returns, lengths = self.returns[done].copy(), self.lengths[done].copy()
        ended = EndedEpisodes(returns, lengths)
        if self.info_keys:
            ended.infos = self._final_infos(infos, done)
        return ended

    def _final_infos(self, infos: dict[str, Any], done: np.ndarray) -> dict[str, np.ndarray]:
        """The values of `info_keys` in the last info of each episode ended (`done`)."""
        final = infos.get("final_info", {})
        values = {}
        for key in self.info_keys:
            present = final.get(f"_{key}")
            if present is None or not present[done].all():
                keys = sorted(name for name in final if not name.startswith("_"))
                has = f"whose keys are {keys}" if keys else "which has no keys"
                raise InfoKeyError(
                    f"Runner.info_keys: an episode ended without {key!r} in its last step's "
                    f"info, {has}. Log a key the environment puts in the info of an episode's "
                    "last step, or leave it out of Runner.info_keys."
                )
            column = final[key]  # an array over the sub-environments; a dict for a dict
            try:
                values[key] = np.asarray(column[done], np.float64)
            except (TypeError, ValueError, IndexError):
                value = (
                    column[np.flatnonzero(done)[0]] if isinstance(column, np.ndarray) else column
                )
                raise InfoKeyError(
                    f"Runner.info_keys: {key!r} in an episode's last info is {value!r}, not a "
                    "number to average."
                ) from None
        return values

    def inexact_resume(self) -> str | None:
        """Why a run resumed from `state()` would not continue exactly, if it would not."""
        if self.saved_as != "none":
            return None
        return (
            f"The environment's state cannot be saved ({self.why}): a resumed run starts new "
            "episodes where it resumes, so it is not an exact continuation."
        )

    def state(self) -> State:
        """The observations, tallies and environments, so that a resume is exact; without the
        environments where they cannot be saved (see `saved_as`)."""
        state = {
            "observations": self.observations,
            "returns": self.returns.copy(),
            "lengths": self.lengths.copy(),
        }
        if self.saved_as != "none":
            state["envs"] = env_state.pack(env_state.capture(self.envs))
        return state

    def load_state(self, state: State, reset_seed: int) -> bool:
        """Continues exactly where `state` was taken (True), or, where the environments could
        not be saved, closes the agent's episodes in flight and starts new ones (False)."""
        if "envs" not in state:
            self.agent.interrupt_episodes()
            self.reset(reset_seed)
            return False
        env_state.restore(self.envs, env_state.unpack(state["envs"]))
        self.observations = np.array(state["observations"])
        self.returns[:] = state["returns"]
        self.lengths[:] = state["lengths"]
        return True

    def close(self) -> None:
        self.envs.close()


@dataclasses.dataclass(frozen=True)
class Evaluation:
    step: int
    mean_return: float
    std_return: float
    mean_length: float
    returns: tuple[float, ...]  # of each episode
    lengths: tuple[int, ...]


def evaluate(
    env: gym.Env, act: Callable[[np.ndarray], Any], episodes: int, seed: int, step: int
) -> Evaluation:
    """`episodes` episodes of the policy `act(observation) -> action`, the environment's
    generator seeded once with `seed + step`; each step counts its expected reward where the
    environment gives one (`info["expected_reward"]`), else its reward. Where the environment
    records its games (`GameScore`), an episode is a whole game and its return the game's
    score, as the game counts it."""
    env.reset(seed=seed + step)
    play = _game if atari.records_games(env) else _episode
    returns, lengths = [], []
    for _ in range(episodes):
        total, length = play(env, act)
        returns.append(total)
        lengths.append(length)
    return Evaluation(
        step,
        float(np.mean(returns)),
        float(np.std(returns)),
        float(np.mean(lengths)),
        tuple(returns),
        tuple(lengths),
    )


def _episode(env: gym.Env, act: Callable[[np.ndarray], Any]) -> tuple[float, int]:
    """One episode: its return (of expected rewards where given) and its length."""
    observation, _ = env.reset()
    total, length, done = 0.0, 0, False
    while not done:
        observation, reward, terminated, truncated, info = env.step(act(observation))
        reward = info.get("expected_reward", reward)
        total, length, done = total + float(reward), length + 1, terminated or truncated
    return total, length


def _game(env: gym.Env, act: Callable[[np.ndarray], Any]) -> tuple[float, int]:
    """One game, however many of the learner's episodes it holds: its score and length as
    `GameScore` counts them."""
    observation, _ = env.reset()
    while True:
        observation, _, terminated, truncated, info = env.step(act(observation))
        if atari.GAME_SCORE in info:
            return float(info[atari.GAME_SCORE]), int(info[atari.GAME_LENGTH])
        if terminated or truncated:  # a lost life: the game goes on
            observation, _ = env.reset()
