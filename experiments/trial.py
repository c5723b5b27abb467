"""One run of a sweep (a trial's bindings with one seed), trained wherever a sweep puts it: a
fresh local worker process, or a Ray Tune trial.

Gin state does not travel to another process by itself, so a `Task` carries everything a run
needs explicitly (absolute gin files, bindings, run folder, seed); `run` clears gin and parses
them again, so a process (a reused Ray worker) that ran another trial leaks nothing into this one.
Importing this module is cheap: TensorFlow is imported inside `run`.
"""

import contextlib
import dataclasses
import os
import signal
import sys
import traceback
from collections.abc import Sequence

from framework import processes

STATUS_FINISHED, STATUS_FAILED, STATUS_INTERRUPTED = "finished", "failed", "interrupted"
STATUS_PRUNED = "pruned"  # a search's pruner stopped it (checkpointed): its trial fell behind
_MAX_ERROR_CHARS = 2000  # a one-paragraph error; the traceback goes to the run's log


@dataclasses.dataclass(frozen=True)
class Task:
    """Everything one run needs, as plain values that pickle (spawn, Ray)."""

    name: str
    gin_files: tuple[str, ...]  # absolute paths
    bindings: tuple[str, ...]  # the sweep's fixed bindings, then the trial's
    base_dir: str  # absolute: the run folder
    seed: int
    strict: bool = False
    log_path: str | None = None  # where the run's output goes (append); None: inherited
    pruning: dict | None = None  # a search trial's: `search_pruning.TrialPruner`'s arguments


def run(task: Task, callbacks: Sequence = ()) -> dict:
    """Trains `task` into its run folder (resuming from its newest complete checkpoint);
    returns {"status": "finished"}, or {"status": "failed", "error": one paragraph}, or
    {"status": "interrupted", ...} when a signal stopped it (it checkpointed; resumed later),
    or {"status": "pruned", "pruned_at": step, "why": ...} when its search trial was pruned.
    `callbacks` run after the task's pruner (a Ray search's reporter to Tune).

    Any exception is a failure of this run alone (its traceback goes to the log).
    """
    import gin

    import experiments

    pruner = None
    if task.pruning is not None:
        from experiments.search_pruning import TrialPruner

        pruner = TrialPruner(seed=task.seed, **task.pruning)
    gin.clear_config()
    try:
        experiments.train(
            list(task.gin_files),
            list(task.bindings),
            task.base_dir,
            task.seed,
            task.strict,
            callbacks=[pruner, *callbacks] if pruner else list(callbacks),
        )
    except experiments.RunStopped as stop:  # SIGTERM/SIGINT: checkpointed, to be resumed
        return {"status": STATUS_INTERRUPTED, "error": _paragraph(str(stop))}
    except experiments.RunError as error:
        return {"status": STATUS_FAILED, "error": _paragraph(str(error))}
    except Exception as error:
        traceback.print_exc()
        return {"status": STATUS_FAILED, "error": _paragraph(f"{type(error).__name__}: {error}")}
    finally:
        gin.clear_config()
    if pruner is not None and pruner.pruned is not None:
        step, why = pruner.pruned
        return {"status": STATUS_PRUNED, "pruned_at": step, "why": why}
    return {"status": STATUS_FINISHED}


def _paragraph(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def process_main(task: Task, connection, parent_pid: int) -> None:
    """The entry point of a local worker process: one run, its outcome sent to the driver.

    The worker dies with its driver: it is in the driver's process group (a Ctrl-C or a kill
    of the group reaches it), and on Linux the kernel sends it SIGTERM when the driver dies
    however it dies, so no orphan keeps training (and holding its run folder's lock).
    """
    processes.die_with_parent(parent_pid, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C stops the run: unfinished, resumed
    _start(task)
    outcome = run(task)
    sys.stdout.flush()
    sys.stderr.flush()
    report(connection, outcome, task)


def report(connection, outcome: dict, task: Task) -> None:
    """Sends the run's outcome to the sweep's driver, which may be gone (killed): its next
    start finds the run in its folder, so that is said, not a BrokenPipeError."""
    from absl import logging

    try:
        connection.send(outcome)
        connection.close()
    except OSError:
        logging.warning(
            "The sweep that started this run is gone; the run's outcome (%s) stays in %s, "
            "and the sweep's next start takes it from there.",
            outcome["status"],
            task.base_dir,
        )


def _start(task: Task) -> None:
    """A run's process, local or Ray's, as the command line is: its output in the run's log,
    TensorFlow imported quietly, progress logged in the short line format."""
    if task.log_path:
        _redirect_output(task.log_path)
    from absl import logging

    from experiments import quiet

    quiet.import_tensorflow()
    logging.set_verbosity(logging.INFO)
    logging.info("Run %s (seed %d) in %s", task.name, task.seed, task.base_dir)


def _redirect_output(path: str) -> None:
    """Points this process's stdout and stderr (Python's and native code's) at `path`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def tune_trainable(config: dict) -> None:
    """A Ray Tune function trainable: the run in `config["task"]`, its outcome reported. The
    run's log receives this worker's output while the run lasts only: what the worker prints as
    it exits after the trial (Python's shutdown warnings, such as an "Exception ignored in"
    a weak set's callback) goes to Ray's own worker logs, not into the run's log."""
    from ray import tune

    task = Task(**{**config["task"], "gin_files": tuple(config["task"]["gin_files"])})
    tune.report(run_here(task))


def run_here(task: Task, callbacks: Sequence = ()) -> dict:
    """`run` in a process that lives on after it (a Ray worker): its output goes to the run's
    log while it lasts, and back where it went before."""
    with _output_restored_after():
        _start(task)
        return run(task, callbacks)


@contextlib.contextmanager
def _output_restored_after():
    """Puts this process's stdout and stderr descriptors back where they pointed before the block
    (which may redirect them) when it ends."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {1: os.dup(1), 2: os.dup(2)}
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for descriptor, copy in saved.items():
            os.dup2(copy, descriptor)
            os.close(copy)
