"""The interface between the runner and what trains: advance to a step, report, save, restore.

The runner owns every cadence (evaluate, log, checkpoint, stop) and asks a driver to advance to
the next one; a driver knows no files and no schedule, only how to take environment steps and
learn from them. Every count is in transitions summed over all sub-environments.
"""

import abc
import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import gymnasium as gym

from framework.agent import Agent, Health, State
from framework.loop import EndedEpisodes


class Seeds(NamedTuple):
    """The runner's seeds for what a driver builds, each from its own stream."""

    agent: int  # the agent's generators and weights
    env: int  # the training environments' first reset
    reset: int  # a fresh reset after a resume whose environments could not be saved


@dataclasses.dataclass
class DriverProgress:
    """What one `Driver.advance` did."""

    env_steps: int  # the transition count reached
    episodes: list[tuple[int, EndedEpisodes]]  # episodes that ended, with the count they ended at
    health: Health  # of every update made, summed
    last_update: Health  # of the last update alone: the culprit when a non-finite one ended it
    infos: dict | None = None  # the last vector step's info, where the driver steps one here


AgentFactory = Callable[..., Agent]  # (observation_space, action_space, seed, **overrides)


class Driver(abc.ABC):
    """Takes environment steps and updates `agent` from them.

    Built by the runner as `driver(agent, env_factory, num_envs, seeds)`, `agent` being an
    `AgentFactory` (an agent class) and `env_factory` what builds one (sub-)environment.
    """

    agent: Agent  # what the runner evaluates, logs and saves: acting reads its current weights

    @abc.abstractmethod
    def advance(self, env_steps: int, until: int, stop: Callable[[], bool]) -> DriverProgress:
        """Trains on from `env_steps` to the first count at or past `until`.

        Returns early once `stop()` is true after a step, and right after an update that
        reported a non-finite loss, gradient or variable, so that the runner acts on it at the
        step it happened.
        """

    @abc.abstractmethod
    def take_metrics(self) -> dict[str, float]:
        """What to log at this log step (the learner's latest metrics, the driver's own); the
        next call reports what came after."""

    @abc.abstractmethod
    def evaluate_with(self, evaluation_env: gym.Env) -> None:
        """Lets `evaluation_env` (built by the same factory) read what the training
        environments keep, frozen: the running statistics of observation and reward
        normalisation (evaluation's rewards stay unscaled)."""

    def log_info_keys(self, keys: tuple[str, ...]) -> None:
        """Has each ended episode report the values of `keys` in its last step's info."""
        if keys:
            raise ValueError(
                f"Runner.info_keys = {list(keys)}: {type(self).__name__} does not report its "
                "environments' infos; log them under the synchronous driver (leave "
                "Runner.driver unset)."
            )

    def diagnostics(self) -> dict[str, float]:
        """The agent's policy diagnostics at an observation of the driver's choosing."""
        return {}

    def take_compile_seconds(self) -> float:
        """Seconds the learner spent in its first calls (tracing and XLA compiling) since the
        last call, which the log line of the interval they slowed down says."""
        return 0.0

    def texts(self) -> dict[str, str]:
        """TensorBoard texts of the driver's own (say, what each worker was built with)."""
        return {}

    def inexact_resume(self) -> str | None:
        """Why a run resumed from this driver's state would not continue exactly, if so."""
        return None

    @abc.abstractmethod
    def state(self) -> State:
        """Everything the driver and its agent need to continue after a restart."""

    @abc.abstractmethod
    def policy_state(self) -> State:
        """What acting needs, a subset of `state()` under the same keys: the agent's
        `policy_state()` (and the observation statistics evaluation reads)."""

    @abc.abstractmethod
    def load_state(self, state: State, step: int) -> bool:
        """Takes back what `state()` gave at `step`; whether the continuation is exact."""

    @abc.abstractmethod
    def time_split(self) -> dict[str, float]:
        """Seconds spent so far in each part of the driver's work, for the benchmark."""

    @abc.abstractmethod
    def close(self) -> None:
        """Releases environments, threads and processes."""
