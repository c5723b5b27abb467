"""The synchronous driver: one vector environment stepped with the agent, which updates itself
in the same thread after every vector step (`agent.update(env_steps)`: zero or more learner
calls)."""

import time
from collections.abc import Callable

import gin
import gymnasium as gym

from framework.agent import Health, Metrics, State
from framework.drivers.driver import AgentFactory, Driver, DriverProgress, Seeds
from framework.loop import EnvironmentLoop, make_vector_env
from framework.parts import wrappers


@gin.configurable(denylist=["agent", "env_factory", "num_envs", "seeds"])
class SynchronousDriver(Driver):
    """`num_envs` copies of `env_factory()` in one vector env, and the agent learning from them
    as often as it says it is due: DQN, DDPG/TD3, REINFORCE, A2C, n-step Q."""

    def __init__(
        self,
        agent: AgentFactory,
        env_factory: Callable[[], gym.Env],
        num_envs: int,
        seeds: Seeds,
    ):
        envs = make_vector_env(env_factory, num_envs)
        # Normalisation statistics: one set for all sub-environments, before they first reset.
        self._statistics = wrappers.share_statistics(getattr(envs, "envs", []))
        self.agent = agent(envs.single_observation_space, envs.single_action_space, seeds.agent)
        # Seeded once; every later reset draws from the sub-environments' own generators,
        # whose states each checkpoint saves.
        self.loop = EnvironmentLoop(envs, self.agent)
        self.loop.reset(seeds.env)
        self._reset_seed = seeds.reset
        self._unlogged: Metrics = {}  # the latest learner metrics, logged at the next log step
        self._learner_seconds = 0.0
        self._compile_seconds_taken = 0.0

    def advance(self, env_steps: int, until: int, stop: Callable[[], bool]) -> DriverProgress:
        loop, agent, clock = self.loop, self.agent, time.perf_counter
        episodes, health, last_update = [], Health(), Health()
        while env_steps < until:
            ended = loop.step()
            env_steps += loop.num_envs
            if ended is not None:
                episodes.append((env_steps, ended))
            start = clock()
            metrics, update = agent.update(env_steps)
            self._learner_seconds += clock() - start
            if update.gradient_steps:
                health, last_update = health + update, update
                # A call whose every step was skipped has no metrics worth logging (zeros).
                if update.nonfinite_steps < update.gradient_steps:
                    self._unlogged = metrics
                if update.nonfinite_steps or update.nonfinite_variables:
                    break
            if stop():
                break
        return DriverProgress(env_steps, episodes, health, last_update, loop.infos)

    def take_metrics(self) -> dict[str, float]:
        metrics, self._unlogged = self._unlogged, {}
        return {f"train/{name}": float(value) for name, value in metrics.items()}

    def take_compile_seconds(self) -> float:
        learner = getattr(self.agent, "learner", None)
        total = 0.0 if learner is None else learner.first_call_seconds
        new, self._compile_seconds_taken = total - self._compile_seconds_taken, total
        return new

    def evaluate_with(self, evaluation_env: gym.Env) -> None:
        self._statistics.read_frozen(evaluation_env)

    def log_info_keys(self, keys: tuple[str, ...]) -> None:
        self.loop.info_keys = keys

    def diagnostics(self) -> dict[str, float]:
        return self.agent.diagnostics(self.loop.observations[0])

    def inexact_resume(self) -> str | None:
        return self.loop.inexact_resume()

    def state(self) -> State:
        return {
            # (name, value) pairs: one JSON value, whichever metrics are pending.
            "unlogged_metrics": [[name, float(value)] for name, value in self._unlogged.items()],
            "loop": self.loop.state(),
            "agent": self.agent.state(),
            "statistics": self._statistics.state(),  # empty without normalisation
        }

    def policy_state(self) -> State:
        return {"agent": self.agent.policy_state(), "statistics": self._statistics.state()}

    def load_state(self, state: State, step: int) -> bool:
        self._unlogged = dict(state["unlogged_metrics"])
        self._statistics.load_state(state["statistics"])
        self.agent.load_state(state["agent"])
        return self.loop.load_state(state["loop"], reset_seed=self._reset_seed + step)

    def time_split(self) -> dict[str, float]:
        return {**self.loop.seconds, "learner": self._learner_seconds}

    def close(self) -> None:
        self.loop.close()
