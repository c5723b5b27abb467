"""The asynchronous driver: workers compute gradients on their own environments and copies of
the networks, and the driver applies them to the global networks (Mnih et al., 2016).

With `Runner.agent = @A2CAgent` this is A3C; with `@NStepQAgent`, asynchronous n-step
Q-learning. A worker is a local copy of the agent (its network, loss, rollout and a learner
whose gradient processor decides when to push, e.g. `Accumulate(k)`) with its own vector
environment. Any agent with a `Rollout` (`rollout`), a `learner`, the variables a worker pulls
(`shared_variables`), `weights_changed()` and `describe()` serves: `NStepQAgent` pulls its
target network too, which the global learner's target updater moves as pushes are applied.
`work()` runs n-step rollouts and `WorkerGradients` on each until the processor releases
their (summed, maybe clipped) gradients: that is one push. The driver applies each push with
the global optimizer (`GlobalApply`, the same non-finite guard as every update), then the
worker copies the global parameters back before its next rollout. Staleness is the number of
global updates between a worker's pull and its push.

Where the workers run is one binding (`AsynchronousDriver.backend`, `backends.py`): `@Threads`
(the default), `@Processes`, `@RayActors`, or `@RoundRobin`, which runs them one after the other
in a fixed order and is the only bitwise-reproducible one: asynchronous runs apply pushes in the
order they arrive, which depends on timing.

The driver's state holds the global agent (networks, optimizer slots, counters), its own
counters and what the next log averages; with `RoundRobin` also every worker (local network,
accumulated gradients, rollout, environments, generators), so its resume is exact. Other
backends resume with fresh workers that pull the restored global parameters.
"""

import dataclasses
import functools
import json
import time
from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
from absl import logging

from framework import config
from framework.agent import Health, State
from framework.drivers import backends
from framework.drivers.driver import AgentFactory, Driver, DriverProgress, Seeds
from framework.drivers.gradient_halves import GlobalApply
from framework.drivers.worker import Worker
from framework.loop import EndedEpisodes
from framework.parts import wrappers
from framework.parts.gradient_processors import Identity
from framework.seeding import derived_seeds
from framework.validation import require_positive

# What the driver and its workers use of an agent, besides the Agent interface.
_WORKER_AGENT = ("shared_variables", "weights_changed", "describe")


@dataclasses.dataclass
class AsynchronousCounters:
    """The driver's own counts, saved with every checkpoint."""

    global_updates: int = 0  # pushes applied to the global networks
    parameter_syncs: int = 0  # pulls of the global parameters by a worker
    worker_env_steps: list[int] = dataclasses.field(default_factory=list)
    pulled_at: list[int] = dataclasses.field(default_factory=list)  # global_updates at pull


@gin.configurable(denylist=["agent", "env_factory", "num_envs", "seeds"])
class AsynchronousDriver(Driver):
    """`num_workers` workers, each stepping `envs_per_worker` copies of `env_factory()`, whose
    pushes `optimizer` applies to the global agent.

    Args:
      num_workers: workers computing gradients at once.
      envs_per_worker: sub-environments each worker steps together (`Runner.num_envs` is the
        synchronous driver's and stays 1 here).
      backend: where the workers run (`backends.py`): `Threads`, `Processes`, `RayActors`, or
        `RoundRobin` (deterministic).
      optimizer: the global optimizer, which applies every push (default: RMSprop(7e-4)).
    """

    def __init__(
        self,
        agent: AgentFactory,
        env_factory: Callable[[], gym.Env],
        num_envs: int,
        seeds: Seeds,
        num_workers: int = 2,
        envs_per_worker: int = 1,
        backend: Callable[..., backends.Backend] = backends.Threads,
        optimizer: keras.optimizers.Optimizer | None = None,
    ):
        require_positive(self, num_workers=num_workers, envs_per_worker=envs_per_worker)
        if num_envs != 1:
            raise ValueError(
                f"Runner.num_envs = {num_envs} sets the synchronous driver's vector "
                "environment; under Runner.driver = @AsynchronousDriver each worker steps "
                "AsynchronousDriver.envs_per_worker sub-environments. Leave Runner.num_envs "
                "unset and bind AsynchronousDriver.envs_per_worker (and num_workers) instead."
            )
        agent_class = agent.func if isinstance(agent, functools.partial) else agent
        missing = [name for name in _WORKER_AGENT if not hasattr(agent_class, name)]
        if missing:
            raise ValueError(
                f"AsynchronousDriver needs an agent that learns from its own n-step rollouts "
                f"(A2CAgent, NStepQAgent); {getattr(agent_class, '__name__', agent_class)} "
                f"has no {', '.join(missing)}. Train it with the synchronous driver (leave "
                "Runner.driver unset)."
            )
        if not getattr(agent_class, "asynchronous_workers", True):
            raise ValueError(
                f"AsynchronousDriver's workers push one rollout's gradient each, and "
                f"{agent_class.__name__} learns from several epochs of minibatches over each "
                "rollout, which is not one gradient. Train it with the synchronous driver "
                "(leave Runner.driver unset)."
            )
        probe = env_factory()
        if wrappers.has_statistics(probe):
            probe.close()
            raise ValueError(
                "The environment normalises with running statistics (NormalizeObservation or "
                "NormalizeReward), which the asynchronous driver's workers would each keep "
                "apart from evaluation's. Train it with the synchronous driver (leave "
                "Runner.driver unset), or leave the normalisation out."
            )
        # An observation to show the policy's diagnostics at, the same all run long.
        self._probe_observation = probe.reset(seed=seeds.env)[0]
        self.agent = agent(  # the global networks; only their learner's apply runs
            probe.observation_space,
            probe.action_space,
            seeds.agent,
            optimizer=optimizer or keras.optimizers.RMSprop(7e-4, rho=0.99, epsilon=1e-5),
            gradient_processor=Identity(),  # the workers' processors made the push
        )
        probe.close()
        self.global_apply = GlobalApply(self.agent.learner)
        arguments = [
            (index, worker_seed, env_factory, envs_per_worker, agent)
            for index, worker_seed in enumerate(derived_seeds(seeds.env, num_workers))
        ]
        self.backend = backend(Worker, arguments, config=config.snapshot())
        self.worker_descriptions = self.backend.describe()
        for description in self.worker_descriptions:
            config.note_read_elsewhere(description.pop(backends.BINDINGS_READ, ()))
            logging.info("Worker: %s", description)
        self.counters = AsynchronousCounters(
            worker_env_steps=[0] * num_workers, pulled_at=[0] * num_workers
        )
        self._interval = _new_interval()
        self._workers_restored = False
        self._started = False
        self._seconds = dict.fromkeys(("workers", "global updates and syncs"), 0.0)

    def advance(self, env_steps: int, until: int, stop: Callable[[], bool]) -> DriverProgress:
        if not self._started:
            self._start_workers()
        episodes, health, last_update, applied = [], Health(), Health(), False
        seconds, clock = self._seconds, time.perf_counter
        while env_steps < until:
            start = clock()
            index, result = self.backend.next_result()
            seconds["workers"] += clock() - start
            env_steps += result.env_steps
            self.counters.worker_env_steps[index] += result.env_steps
            health += result.health
            self._add_to_interval(result)
            if result.episode_returns:
                ended = EndedEpisodes(
                    np.array(result.episode_returns, np.float64),
                    np.array(result.episode_lengths, np.int64),
                )
                episodes.append((env_steps, ended))
            start = clock()
            if result.pushed:
                pushed = self._apply(index, result, env_steps)
                health += pushed
                applied = True
                self._pull(index)
            else:
                pushed = Health()
            self.backend.submit(index)
            seconds["global updates and syncs"] += clock() - start
            last_update = result.health + pushed
            if last_update.nonfinite_steps or last_update.nonfinite_variables or stop():
                break
        if applied:
            self.agent.weights_changed()  # acting (evaluation, diagnostics) reads a copy
        return DriverProgress(env_steps, episodes, health, last_update)

    def _start_workers(self) -> None:
        """Fresh workers start from the global parameters; restored ones (`RoundRobin`) from
        where they were."""
        for index in range(len(self.counters.pulled_at)):
            if not self._workers_restored:
                self._pull(index)
            self.backend.submit(index)
        self._started = True

    def _apply(self, index: int, result: backends.WorkResult, env_steps: int) -> Health:
        """One push: the global optimizer applies the worker's gradients."""
        counters, interval = self.counters, self._interval
        staleness = counters.global_updates - counters.pulled_at[index]
        health = Health.from_tensor(self.global_apply(result.gradients, env_steps))
        counters.global_updates += 1
        interval["pushes"] += 1
        interval["staleness_sum"] += staleness
        interval["staleness_max"] = max(interval["staleness_max"], staleness)
        for group, gradients in zip(self.agent.learner.groups, result.gradients, strict=True):
            norm = float(np.sqrt(sum(np.sum(np.square(g)) for g in gradients)))
            name = f"{group.prefix}pushed_grad_norm"
            interval["metrics"][name] = interval["metrics"].get(name, 0.0) + norm
            interval["norm_counts"][name] = interval["norm_counts"].get(name, 0) + 1
        return health

    def _pull(self, index: int) -> None:
        """Worker `index` copies the global parameters before its next rollout."""
        self.backend.pull(index, self.agent.shared_variables)
        self.counters.pulled_at[index] = self.counters.global_updates
        self.counters.parameter_syncs += 1
        self._interval["syncs"] += 1

    def _add_to_interval(self, result: backends.WorkResult) -> None:
        interval = self._interval
        for name, value in result.metrics.items():
            interval["metrics"][name] = interval["metrics"].get(name, 0.0) + value
        interval["results"] += 1

    def take_metrics(self) -> dict[str, float]:
        """The workers' metrics averaged over their results, pushed gradient norms over pushes,
        staleness and syncs since the last log, and each worker's transitions."""
        counters, interval = self.counters, self._interval
        metrics = {
            f"train/{name}": value / interval["norm_counts"].get(name, interval["results"])
            for name, value in interval["metrics"].items()
        }
        learning_rate = self.agent.learner.groups[0].optimizer.learning_rate
        metrics.update(
            {
                "train/learning_rate": float(learning_rate),
                "async/global_updates": counters.global_updates,
                "async/parameter_syncs": counters.parameter_syncs,
                "async/syncs_in_interval": interval["syncs"],
                "async/staleness_mean": interval["staleness_sum"] / max(interval["pushes"], 1),
                "async/staleness_max": interval["staleness_max"],
            }
        )
        for index, steps in enumerate(counters.worker_env_steps):
            metrics[f"workers/worker_{index}_env_steps"] = steps
        self._interval = _new_interval()
        return metrics

    def evaluate_with(self, evaluation_env: gym.Env) -> None:
        del evaluation_env  # it keeps nothing: normalisation is refused when building

    def diagnostics(self) -> dict[str, float]:
        return self.agent.diagnostics(self._probe_observation)

    def texts(self) -> dict[str, str]:
        return {"workers": "\n\n".join(map(str, self.worker_descriptions))}

    def inexact_resume(self) -> str | None:
        return self.backend.inexact_resume()

    def state(self) -> State:
        state = {
            "counters": dataclasses.asdict(self.counters),
            "interval": json.dumps(self._interval),  # what the next log averages
            "agent": self.agent.state(),
        }
        workers = self.backend.states()  # RoundRobin only: the workers, for an exact resume
        if workers is not None:
            state["workers"] = workers
        return state

    def policy_state(self) -> State:
        return {"agent": self.agent.policy_state()}  # no statistics: normalisation is refused

    def load_state(self, state: State, step: int) -> bool:
        counters = AsynchronousCounters(**state["counters"])
        saved, now = len(counters.pulled_at), len(self.counters.pulled_at)
        if saved != now:
            raise ValueError(
                f"it was written by {saved} workers and AsynchronousDriver.num_workers is {now} "
                f"now: resume with num_workers = {saved}"
            )
        self.counters = counters
        self._interval = json.loads(state["interval"])
        self.agent.load_state(state["agent"])
        if "workers" not in state:
            return False  # fresh workers start from the restored global networks
        self._workers_restored = True
        return self.backend.load_states(state["workers"], step)

    def time_split(self) -> dict[str, float]:
        """Waiting for the workers' rollouts and gradients; the global applies and pulls."""
        return dict(self._seconds)

    def close(self) -> None:
        self.backend.close()


def _new_interval() -> dict:
    """What the next log averages: JSON values, so that a checkpoint holds them."""
    return {
        "metrics": {},  # sums: the workers' metrics per result, pushed norms per push
        "norm_counts": {},
        "results": 0,
        "pushes": 0,
        "syncs": 0,
        "staleness_sum": 0,
        "staleness_max": 0,
    }
