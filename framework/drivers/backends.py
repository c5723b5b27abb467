"""Where the asynchronous driver's workers run: in turn, in threads, in processes, or as Ray actors.

A worker (`framework/drivers/asynchronous.py`) is any object with `work() -> WorkResult` (act
until its gradient processor releases a push), `pull(values)` (take the global parameters) and
`describe() -> dict`. A backend runs `num_workers` of them and hands their results to the
driver, which applies each push to the global learner and tells the backend whether that
worker pulls before its next `work`:

  - `RoundRobin`: one after the other in a fixed order, in the driver's thread. Deterministic:
    the same seed gives the same weights, bitwise, and a resumed run continues exactly.
  - `Threads` (the default): one thread per worker in this process. TensorFlow releases the
    GIL inside its ops, where a worker spends most of its time (a `WorkerGradients` call,
    tens of CartPole steps' worth of Python; docs/speed.md), a pull copies the global
    variables in one compiled call, and nothing is pickled or started. On 2 cores threads,
    processes and Ray actors all reach about the same speed, since the cores are the limit;
    but threads start in under a second, where each process or actor first imports
    TensorFlow and traces its functions (seconds). With more cores than the
    GIL can feed, `Processes` or `RayActors` win.
  - `Processes`: one spawned process per worker (each imports TensorFlow and parses the
    config again); gradients and parameters travel pickled. The workers ignore SIGINT and
    SIGTERM, so that a Ctrl-C at the terminal (which reaches the whole process group) stops
    the driver with a checkpoint rather than killing its workers under it; they die with it.
  - `RayActors`: one Ray actor per worker (`pip install -e '.[ray]'`), on a local Ray or a
    cluster; `ray.init()` is called if nothing initialised Ray before.

Gin bindings do not reach a spawned process or a Ray actor by themselves (gin#31): a remote
worker gets the whole parsed config (`framework.config.Snapshot`: the files and every binding,
the command line's included, the modules that register its parts, and the folders beside a gin
file that a module of the user's came from), which it parses again before building its worker.

Asynchronous backends are not reproducible bitwise: which push the driver applies first
depends on timing. Only `RoundRobin` is.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import gin
import numpy as np

from framework import console, processes
from framework.agent import Health
from framework.config import Snapshot, read_bindings

Arrays = list[np.ndarray]


# A remote worker's description carries the bindings its process read, under this key.
BINDINGS_READ = "bindings_read"


class Backend(Protocol):
    """What the asynchronous driver asks of where its workers run."""

    def describe(self) -> list[dict]:
        """Each worker's `describe()`, in index order."""

    def submit(self, index: int) -> None:
        """Starts worker `index`'s next `work()` (after its pull, if the driver asked one)."""

    def next_result(self) -> tuple[int, WorkResult]:
        """The next finished `work()`, and whose: waits for one."""

    def pull(self, index: int, global_variables: Sequence) -> None:
        """Worker `index` takes the global parameters before its next `work()`."""

    def states(self) -> dict | None:
        """Every worker's state where they are between two `work()` calls, else None."""

    def load_states(self, states: dict, step: int) -> bool:
        """Takes back `states()`; whether every worker continues exactly."""

    def inexact_resume(self) -> str | None:
        """Why a run resumed from a checkpoint would not continue exactly, if so."""

    def close(self) -> None:
        """Stops the workers once their work in flight is done."""


@dataclasses.dataclass
class WorkResult:
    """What one `work()` call did: rollouts up to one push, and what the driver logs."""

    gradients: list[Arrays]  # per update group, in the order of its variables (the push)
    env_steps: int  # transitions, summed over the worker's sub-environments
    metrics: dict[str, float]  # averaged over the gradient computations of this call
    health: Health  # summed over them
    episode_returns: list[float]  # episodes that ended during the call
    episode_lengths: list[int]
    pushed: bool = True  # False: the call ended without a release (nothing to apply)


# ----- workers in this process ---------------------------------------------------------------


class _InProcess:
    """Workers built here; the driver pulls for them (`copy_variables` on live variables)."""

    def __init__(self, factory: Callable[..., Any], arguments: Sequence[tuple]):
        self.workers = [factory(*args) for args in arguments]

    def describe(self) -> list[dict]:
        return [worker.describe() for worker in self.workers]

    def inexact_resume(self) -> str | None:
        return _ASYNCHRONOUS_RESUME

    def pull(self, index: int, global_variables: Sequence) -> None:
        self.workers[index].pull(global_variables)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


@gin.configurable
class RoundRobin(_InProcess):
    """Every worker in turn, in index order, in the caller's thread: deterministic."""

    def __init__(self, factory, arguments, config: Snapshot):
        del config  # built in this process: the config is already parsed
        super().__init__(factory, arguments)
        self._next = 0

    def submit(self, index: int) -> None:
        del index  # `next_result` runs the next worker in order

    def next_result(self) -> tuple[int, WorkResult]:
        index = self._next
        self._next = (index + 1) % len(self.workers)
        return index, self.workers[index].work()

    def states(self) -> dict:
        """Every worker is between two `work` calls: their states make an exact resume."""
        return {"next": self._next, "workers": [worker.state() for worker in self.workers]}

    def inexact_resume(self) -> str | None:
        problems = [worker.inexact_resume() for worker in self.workers]
        return next((problem for problem in problems if problem), None)

    def load_states(self, states: dict, step: int) -> bool:
        self._next = int(states["next"])
        exact = [
            worker.load_state(state, step)
            for worker, state in zip(self.workers, states["workers"], strict=True)
        ]
        return all(exact)


@gin.configurable
class Threads(_InProcess):
    """One thread per worker; the driver applies pushes and pulls in its own thread."""

    def __init__(self, factory, arguments, config: Snapshot):
        del config
        super().__init__(factory, arguments)
        self._executor = concurrent.futures.ThreadPoolExecutor(len(self.workers), "async-worker")
        self._futures: dict[concurrent.futures.Future, int] = {}

    def submit(self, index: int) -> None:
        self._futures[self._executor.submit(self.workers[index].work)] = index

    def next_result(self) -> tuple[int, WorkResult]:
        return _first_done(self._futures)

    def states(self) -> None:
        return None  # workers are mid-rollout at any moment: only the global state is saved

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        super().close()


# ----- workers elsewhere ---------------------------------------------------------------------


class RemoteWorker:
    """Builds a worker from the parsed config in a fresh interpreter (a process, an actor).

    TensorFlow is imported first, quietly and with the framework's log format
    (`framework.console`). `worker` is the pickled `(factory, arguments)`, unpickled once the
    config is applied: its modules imported (the folders beside a gin file that some came from
    on `sys.path`), so that an agent or environment of the user's own module, named in the
    arguments, imports too.
    """

    def __init__(self, config: Snapshot, worker: bytes):
        tf = console.import_tensorflow()
        # Small networks: one op thread each, so that workers do not fight over the cores.
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        config.apply()
        factory, arguments = pickle.loads(worker)
        self.worker = factory(*arguments)

    def work(self, values: Arrays | None) -> WorkResult:
        """Pulls `values` (the global parameters) if given, then works until a push."""
        if values is not None:
            self.worker.pull(values)
        return self.worker.work()

    def describe(self) -> dict:
        # The bindings this process read: the driver's process never builds a worker's parts.
        return {**self.worker.describe(), BINDINGS_READ: read_bindings()}

    def close(self) -> None:
        self.worker.close()


class _Remote:
    """Workers elsewhere: a pull is the global parameters, sent with the next `work` call."""

    def __init__(self, num_workers: int):
        self._futures: dict[concurrent.futures.Future, int] = {}
        self._values: list[Arrays | None] = [None] * num_workers

    def pull(self, index: int, global_variables: Sequence) -> None:
        self._values[index] = [variable.numpy() for variable in global_variables]

    def submit(self, index: int) -> None:
        values, self._values[index] = self._values[index], None
        self._futures[self._work(index, values)] = index

    def next_result(self) -> tuple[int, WorkResult]:
        return _first_done(self._futures)

    def states(self) -> None:
        return None

    def inexact_resume(self) -> str | None:
        return _ASYNCHRONOUS_RESUME


_PROCESS_WORKER: RemoteWorker | None = None  # the one worker of a `Processes` child


def _start_process_worker(config: Snapshot, worker: bytes) -> None:
    """A `Processes` child, once it dies with the driver (`processes.start_child`): deaf to the
    terminal's Ctrl-C and to a process group's SIGTERM (the driver stops it once it has saved)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    global _PROCESS_WORKER
    _PROCESS_WORKER = RemoteWorker(config, worker)


def _call_process_worker(method: str, *arguments):
    return getattr(_PROCESS_WORKER, method)(*arguments)


@gin.configurable
class Processes(_Remote):
    """One spawned process per worker (fork is unsafe once TensorFlow runs threads), killed by
    the kernel when the driver dies, from before it imports TensorFlow."""

    def __init__(self, factory, arguments, config: Snapshot):
        super().__init__(len(arguments))
        context = multiprocessing.get_context("spawn")
        self._executors = [
            concurrent.futures.ProcessPoolExecutor(
                1,
                context,
                initializer=processes.start_child,
                initargs=(
                    os.getpid(),
                    signal.SIGKILL,
                    pickle.dumps((_start_process_worker, (config, pickle.dumps((factory, args))))),
                ),
            )
            for args in arguments
        ]

    def _work(self, index, values):
        return self._executors[index].submit(_call_process_worker, "work", values)

    def describe(self) -> list[dict]:
        futures = [e.submit(_call_process_worker, "describe") for e in self._executors]
        return [future.result() for future in futures]

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=True, cancel_futures=True)


@gin.configurable
class RayActors(_Remote):
    """One Ray actor per worker. `num_cpus`: what each actor reserves (0.5 packs two workers
    on a core)."""

    def __init__(self, factory, arguments, config: Snapshot, num_cpus: float = 1.0):
        import ray

        super().__init__(len(arguments))
        if not ray.is_initialized():  # a cluster's address from RAY_ADDRESS, else a local one
            with console.ray_lines_into(os.devnull):  # a run has no log file to keep them
                ray.init()
        cpus = ray.cluster_resources().get("CPU", 0.0)
        # Ray counts resources in units of 1e-4; actors beyond the cluster wait forever, silently.
        if round(len(arguments) * num_cpus * 1e4) > round(cpus * 1e4):
            fits = math.floor(cpus / len(arguments) * 1e4) / 1e4
            raise ValueError(
                f"{len(arguments)} Ray actors (AsynchronousDriver.num_workers) of "
                f"RayActors.num_cpus = {num_cpus} CPU each do not fit the Ray cluster's "
                f"{cpus:g} CPUs: the run would hang waiting for them. Lower "
                "AsynchronousDriver.num_workers or RayActors.num_cpus (at most "
                f"{fits:g} for {len(arguments)} actors), or add nodes to the cluster."
            )
        actor = ray.remote(num_cpus=num_cpus)(RemoteWorker)
        self._actors = [actor.remote(config, pickle.dumps((factory, args))) for args in arguments]

    def _work(self, index, values):
        return self._actors[index].work.remote(values).future()

    def describe(self) -> list[dict]:
        import ray

        return ray.get([actor.describe.remote() for actor in self._actors])

    def close(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)


_ASYNCHRONOUS_RESUME = (
    "Asynchronous workers are mid-rollout at any moment, so a checkpoint holds the global "
    "networks, optimizer and counters only: a resumed run starts fresh workers from them, not "
    "an exact continuation (AsynchronousDriver.backend = @RoundRobin resumes exactly)."
)


def _first_done(futures: dict[concurrent.futures.Future, int]) -> tuple[int, WorkResult]:
    """The lowest-index worker among those done (waits for one); a worker's error raises."""
    done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
    future = min(done, key=futures.__getitem__)
    return futures.pop(future), future.result()
