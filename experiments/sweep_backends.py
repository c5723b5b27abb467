"""Where a sweep's runs train: fresh local processes (`--parallel` at once), or Ray Tune trials.
Either way a run is `experiments.trial.run` on a `Task`, and its outcome goes into the record."""

import dataclasses
import datetime
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

import numpy as np

from experiments import RunError
from experiments.sweep_record import (
    STATUS_RUNNING,
    Sweep,
    declare_columns,
    read_result,
    write_run_result,
)
from experiments.trial import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED, STATUS_PRUNED

_PROGRESS_SECONDS = 30.0


class SweepProgress:
    """The sweep's progress lines: runs finished, running, failed and pending, and an estimate
    of the time left from the runs that ended in this invocation."""

    def __init__(self, sweep: Sweep, parallel: int, out=sys.stdout):
        self.sweep, self.parallel, self.out = sweep, parallel, out
        self.start = time.monotonic()
        self.durations: list[float] = []
        self.last_line = 0.0

    def line(self, force: bool = True) -> None:
        if not force and time.monotonic() - self.last_line < _PROGRESS_SECONDS:
            return
        self.last_line = time.monotonic()
        sweep = self.sweep
        counts = {
            status: sum(run["status"] == status for run in sweep.runs)
            for status in (STATUS_FINISHED, STATUS_PRUNED, STATUS_RUNNING, STATUS_FAILED)
        }
        total = len(sweep.runs)
        head = "sweep:"
        if sweep.search is not None:  # its runs are made as its trials are suggested
            total = sweep.num_trials * len(sweep.seeds)
            head = f"search: {len(sweep.search_trials)}/{sweep.num_trials} trials suggested;"
        left = total - sum(counts.values())
        estimate = "time left unknown"
        if self.durations:
            remaining = left + counts[STATUS_RUNNING] / 2
            seconds = np.mean(self.durations) * remaining / max(1, self.parallel)
            estimate = f"~{_duration(seconds)} left"
        pruned = f"{counts[STATUS_PRUNED]} pruned, " if sweep.search is not None else ""
        print(
            f"{head} {counts[STATUS_FINISHED]}/{total} runs finished, {pruned}"
            f"{counts[STATUS_RUNNING]} running, {counts[STATUS_FAILED]} failed, {left} to run | "
            f"{_duration(time.monotonic() - self.start)} elapsed, {estimate}",
            file=self.out,
            flush=True,
        )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def start_run(sweep: Sweep, run: dict) -> None:
    declare_columns(sweep, run)
    run["status"] = STATUS_RUNNING
    run["attempts"] += 1
    run["error"] = None


def end_run(sweep: Sweep, run: dict, outcome: dict, seconds: float) -> None:
    """Records a run's outcome; a run that ended (finished, pruned or failed) gets its final
    metrics (and, in a search, its eval curve)."""
    run["seconds"] = round(run["seconds"] + seconds, 3)
    run["status"] = outcome["status"]
    run["error"] = outcome.get("error")
    if run["status"] == STATUS_PRUNED:
        run["pruned"] = {"step": outcome["pruned_at"], "why": outcome["why"]}
    if run["status"] in (STATUS_FINISHED, STATUS_FAILED, STATUS_PRUNED):
        run["result"] = read_result(sweep.run_folder(run), with_curve=sweep.search is not None)
        run["trial_key"] = sweep.run_folder(run).trial_key()  # framework/storage/trials.py
        write_run_result(sweep, run)


def _outcome(receiver: Any) -> Any:
    """What a run's process sent before it ended, or None: a process killed before it sent
    anything leaves a pipe that polls readable and then ends (EOFError), and its exit code says
    what happened."""
    try:
        return receiver.recv() if receiver.poll() else None
    except EOFError:
        return None


def run_local(sweep: Sweep, source, parallel: int, progress: SweepProgress) -> None:
    """Each run in a fresh spawned process, `parallel` at once, in the order `source` gives
    them (`sweep_search`: a planned sweep's queue, or a search's schedule)."""
    from multiprocessing.connection import wait

    from experiments import trial

    context = multiprocessing.get_context("spawn")
    active: dict[int, tuple] = {}  # sentinel -> (process, connection, run, start)
    try:
        while True:
            while len(active) < parallel and (run := source.next_run()) is not None:
                start_run(sweep, run)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(
                    target=trial.process_main,
                    args=(sweep.task(run), sender, os.getpid()),
                    name=f"sweep-{run['name']}",
                )
                process.start()
                sender.close()
                active[process.sentinel] = (process, receiver, run, time.monotonic())
                sweep.write()
                progress.line()
            if not active:  # nothing runs, and nothing more may start
                break
            ready = wait(list(active), timeout=_PROGRESS_SECONDS)
            for sentinel in ready:
                process, receiver, run, start = active.pop(sentinel)
                outcome = _outcome(receiver)
                process.join()
                receiver.close()
                seconds = time.monotonic() - start
                end_run(sweep, run, _classify(outcome, process.exitcode, sweep, run), seconds)
                progress.durations.append(seconds)
                source.run_ended(run)
                sweep.write()
                progress.line()
            if not ready:
                progress.line(force=False)
    except BaseException:  # Ctrl-C, SIGTERM: the runs stop with the driver, unfinished
        for process, *_ in active.values():
            process.terminate()
        for process, _, run, start in active.values():
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
            run["status"] = STATUS_INTERRUPTED
            run["error"] = "stopped with the sweep's driver"
            run["seconds"] = round(run["seconds"] + time.monotonic() - start, 3)
        sweep.write()
        raise


def _classify(outcome: dict | None, exitcode: int, sweep: Sweep, run: dict) -> dict:
    if outcome is not None:
        return outcome
    if exitcode is not None and exitcode < 0:  # a signal: unfinished, resumed next time
        name = signal.Signals(-exitcode).name
        return {"status": STATUS_INTERRUPTED, "error": f"stopped by {name}"}
    return {
        "status": STATUS_FAILED,
        "error": f"The run's process exited with code {exitcode} before reporting; its output "
        f"is in {sweep.log_path(run)}.",
    }


def ray_started(sweep: Sweep, address: str | None) -> str:
    """Ray, started (or joined, at `address`) with what it prints kept in the sweep's ray.log;
    returns that log's path. Tune's own TensorBoard logger stays off the runs' event files."""
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"  # keeps Tune's TB logger off ours
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    try:
        import ray
        from ray import tune  # noqa: F401  (the ray extra: Ray with Tune)
    except ImportError as error:
        raise RunError(
            "--backend=ray needs Ray Tune: pip install -e '.[ray]' (or '.[test]')."
        ) from error
    from framework import console

    ray_log = os.path.join(sweep.base_dir, "ray_results", "ray.log")  # what Ray prints
    os.makedirs(os.path.dirname(ray_log), exist_ok=True)
    if not ray.is_initialized():
        with console.ray_lines_into(ray_log):
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray_log


def run_ray(
    sweep: Sweep, todo: list[dict], parallel: int, address: str | None, progress: SweepProgress
) -> None:
    """The runs as Ray Tune trials: one trainable call per run, the same `trial.run` inside."""
    ray_started(sweep, address)
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from experiments import trial
    from framework import console

    ray_log = ray_started(sweep, address)
    by_name = {run["name"]: run for run in todo}
    starts: dict[str, float] = {}

    class Recorder(tune.Callback):
        """Keeps sweep.json and the progress lines current as Tune's trials start and end."""

        def on_trial_start(self, iteration, trials, trial, **info):
            run = by_name[trial.config["task"]["name"]]
            start_run(sweep, run)
            starts[run["name"]] = time.monotonic()
            sweep.write()
            progress.line()

        def on_trial_result(self, iteration, trials, trial, result, **info):
            run = by_name[trial.config["task"]["name"]]
            outcome = {"status": result["status"], "error": result.get("error")}
            self._end(run, outcome)

        def on_trial_error(self, iteration, trials, trial, **info):
            run = by_name[trial.config["task"]["name"]]
            error = f"Ray trial {trial.trial_id} failed; see {trial.local_path or 'its logs'}."
            self._end(run, {"status": STATUS_FAILED, "error": error})

        def _end(self, run, outcome):
            if run["status"] != STATUS_RUNNING:
                return
            seconds = time.monotonic() - starts.get(run["name"], time.monotonic())
            end_run(sweep, run, outcome, seconds)
            progress.durations.append(seconds)
            sweep.write()
            progress.line()

    tasks = [dataclasses.asdict(sweep.task(run)) for run in todo]
    tuner = tune.Tuner(
        tune.with_resources(trial.tune_trainable, {"cpu": 1}),
        param_space={"task": tune.grid_search(tasks)},
        tune_config=tune.TuneConfig(max_concurrent_trials=parallel),
        # Tune's own record of each trial's report (result.json in ray_results/), which its
        # results table reads when `fit` returns: without one it warns "Failed to fetch
        # metrics" for every trial.
        run_config=tune_run_config(sweep, "tune", [Recorder(), JsonLoggerCallback()]),
    )
    try:
        with console.ray_lines_into(ray_log):
            tuner.fit()
    finally:
        for run in todo:
            if run["status"] == STATUS_RUNNING:
                run["status"] = STATUS_INTERRUPTED
                run["error"] = "stopped before its Ray trial reported"
        sweep.write()


def tune_run_config(sweep: Sweep, prefix: str, callbacks: list) -> Any:
    """Tune's RunConfig of a sweep: its trials under `<base_dir>/ray_results/<prefix>-<time>`,
    the sweep's own callbacks, a failed trial left failed (the sweep records it), Tune quiet."""
    from ray import tune

    return tune.RunConfig(
        name=datetime.datetime.now().strftime(f"{prefix}-%Y%m%d-%H%M%S"),
        storage_path=os.path.join(sweep.base_dir, "ray_results"),
        callbacks=callbacks,
        failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
        verbose=0,
    )
