"""An adaptive search on Ray Tune: Tune's `OptunaSearch` suggests the trials (Optuna's TPE,
seeded by `--sweep_seed`, its study in the search's own storage) and its ASHA scheduler stops
those that fall behind at their runs' evaluations, with a checkpoint.

Each Tune trial is one run (`--seeds=1`: ASHA judges one stream of results a trial), trained in
a thread of the Tune actor behind a gate: at each evaluation the run reports to Tune and waits
for Tune's next step, or for its stop, which it obeys as a callback's stop (checkpointed, the
reason in its log and metadata.json).

What differs from the local search: Tune suggests and stops as results arrive, so the trials
depend on timing (not reproducible across `--parallel`); `--concurrent_trials` does not apply.
A killed Ray search started again loses no trial: the study already holds the ended ones (TPE
sees them), and those left running are suggested again first, with their own values, and
resume from their checkpoints in their own folders. A trial's folder is named by its values and
Tune's id for it (`lr=0.0012,tune=6f1c2a3b_seed0`).
"""

import math
import os
import queue
import threading
import time

from ray import tune
from ray.tune.schedulers import ASHAScheduler, TrialScheduler
from ray.tune.search.optuna import OptunaSearch

from experiments import RunError, search
from experiments.sweep_backends import SweepProgress, end_run, start_run, tune_run_config
from experiments.sweep_plan import parse_parameter, spec_text, values_name
from experiments.sweep_record import STATUS_RUNNING, Sweep, open_study
from experiments.sweep_search import close_trial, new_trial
from experiments.trial import (
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_PRUNED,
    Task,
    run_here,
)
from framework.callbacks import Callback

REDUCTION_FACTOR = 3  # ASHA keeps the top third of the trials at each rung


def run_ray_search(
    sweep: Sweep,
    parallel: int,
    address: str | None,
    progress: SweepProgress,
    timeout: float | None,
) -> str | None:
    """Runs the search's remaining trials as Tune trials; returns a note, or None."""
    from experiments.sweep_backends import ray_started

    if len(sweep.seeds) != 1:
        raise RunError(
            f"--backend=ray with --search=tpe runs one seed a trial (ASHA judges one stream of "
            f"results a trial); got --seeds={len(sweep.seeds)}. Give --seeds=1, or run the "
            "search locally, where a trial is judged on the mean over its seeds."
        )
    ray_log = ray_started(sweep, address)
    study = open_study(sweep)
    _end_stale_trials(study)
    left = [t for t in sweep.search_trials if t["state"] not in search.ENDED]
    samples = sweep.num_trials - len(sweep.search_trials) + len(left)
    if samples <= 0:
        return None
    num_steps = bound_num_steps(sweep)
    grace = max(1, math.ceil(sweep.search.min_prune_fraction * num_steps))
    searcher = OptunaSearch(
        space={_name(p): p.search_space() for p in sweep.parameters},
        metric="eval_return",
        mode="max",
        sampler=_sampler(sweep),
        storage=study._storage,  # the study open_study checked: this search's own
        study_name=sweep.study_name,
        points_to_evaluate=[_params(sweep, trial) for trial in left] or None,
    )
    scheduler = None
    if sweep.search.pruner != "none":
        scheduler = _RecordingASHA(
            sweep,
            time_attr="env_steps",
            max_t=num_steps,
            grace_period=grace,
            reduction_factor=REDUCTION_FACTOR,
        )
    recorder = _Recorder(sweep, progress)
    tuner = tune.Tuner(
        tune.with_resources(SearchTrial, {"cpu": 1}),
        param_space={
            "sweep": {
                "base_dir": sweep.base_dir,
                "gin_files": sweep.gin_files,
                "bindings": sweep.bindings,
                "parameters": [spec_text(p) for p in sweep.parameters],
                "seed": sweep.seeds[0],
                "strict": sweep.strict,
                "num_trials": sweep.num_trials,
                # The trials left running, by their values: suggested again first, each
                # resumes in its own folder.
                "resume": {_values_name(sweep, trial["texts"]): trial["trial"] for trial in left},
            },
        },
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=samples,
            max_concurrent_trials=parallel,
            time_budget_s=timeout,
        ),
        run_config=tune_run_config(sweep, "tune-search", [recorder]),
    )
    from framework import console

    try:
        with console.ray_lines_into(ray_log):
            tuner.fit()
    finally:
        recorder.close_all()
    unended = [t["trial"] for t in sweep.search_trials if t["state"] not in search.ENDED]
    if unended:
        return f"trials {', '.join(unended)} did not end; the same command resumes them."
    return None


def _sampler(sweep: Sweep):
    optuna = search.quiet_optuna()
    return optuna.samplers.TPESampler(
        n_startup_trials=sweep.search.n_startup_trials,
        seed=sweep.sweep_seed,
        multivariate=True,
    )


def _name(parameter) -> str:
    """A parameter's name in Tune's config: Tune would read a scope's '/' as nesting."""
    return parameter.key.replace("/", ":")


def _params(sweep: Sweep, trial: dict) -> dict:
    """A recorded trial's values as Optuna suggests them (numbers as numbers)."""
    values = {}
    for parameter, text in zip(sweep.parameters, trial["texts"], strict=True):
        values[_name(parameter)] = text if parameter.distribution is None else float(text)
        if parameter.distribution == "randint":
            values[_name(parameter)] = int(text)
    return values


def _end_stale_trials(study) -> None:
    """Trials a killed search left running in the study are over: they are suggested again."""
    optuna = search.quiet_optuna()
    for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)


def bound_num_steps(sweep: Sweep) -> int:
    """Runner.num_steps as the sweep's gin files and bindings set it (ASHA's horizon)."""
    import inspect

    import gin

    from experiments.sweep_plan import hparam_names  # noqa: F401  (imports the configurables)
    from framework import config
    from framework.runner import Runner

    gin.clear_config()
    try:
        config.parse(sweep.gin_files, sweep.bindings)
        try:
            return int(gin.query_parameter("Runner.num_steps"))
        except ValueError:  # not bound: the Runner's default
            return int(inspect.signature(Runner).parameters["num_steps"].default)
    finally:
        gin.clear_config()


def _values_name(sweep: Sweep, texts) -> str:
    return values_name(sweep.parameters, texts)


def _suggested(config: dict, trial_id: str) -> tuple[str, list[str]]:
    """A Tune trial's name and gin texts: a trial left running by a killed search, suggested
    again with its values, has its own name; a new one, its values and Tune's id for it."""
    parameters = [parse_parameter(spec) for spec in config["sweep"]["parameters"]]
    texts = [p.text(config[_name(p)]) for p in parameters]
    values = values_name(parameters, texts)
    return config["sweep"]["resume"].get(values, f"{values},tune={trial_id}"), texts


def _pruned_path(base_dir: str, name: str) -> str:
    """Where the driver's ASHA writes why it stopped a trial, for the trial's own run to read."""
    return os.path.join(base_dir, "search", name, "pruned.txt")


class TuneGate(Callback):
    """A run's evaluations handed to its Tune trial, which answers "go on" or "stop, because"."""

    in_checkpoint = False

    def __init__(self):
        self.reports: queue.Queue = queue.Queue()
        self.answers: queue.Queue = queue.Queue()
        self.stopped: tuple[int, str] | None = None

    def on_evaluation(self, run, evaluation) -> None:
        final = evaluation.step >= run.num_steps
        self.reports.put(("evaluation", evaluation.step, evaluation.mean_return, final))
        why = self.answers.get()
        if why is not None and evaluation.step < run.num_steps:
            self.stopped = (evaluation.step, why)
            run.stop(why)


class SearchTrial(tune.Trainable):
    """One search trial, one run: each `step` is the run's next evaluation."""

    def setup(self, config: dict) -> None:
        sweep = config["sweep"]
        self.name, texts = _suggested(config, self.trial_id)
        parameters = [parse_parameter(spec) for spec in sweep["parameters"]]
        run_name = f"{self.name}_seed{sweep['seed']}"
        self.base_dir = sweep["base_dir"]
        bindings = [f"{p.key} = {t}" for p, t in zip(parameters, texts, strict=True)]
        self.task = Task(
            name=run_name,
            gin_files=tuple(sweep["gin_files"]),
            bindings=tuple(sweep["bindings"] + bindings),
            base_dir=os.path.join(self.base_dir, run_name),
            seed=sweep["seed"],
            strict=sweep["strict"],
            log_path=os.path.join(self.base_dir, "logs", run_name + ".log"),
        )
        self.gate, self.outcome, self.waiting = TuneGate(), None, False
        self.last = {"eval_return": float("nan"), "env_steps": 0}
        self.thread = threading.Thread(target=self._train, daemon=True)
        self.thread.start()

    def _train(self) -> None:
        try:
            self.gate.reports.put(("end", run_here(self.task, [self.gate])))
        except BaseException as error:  # the trial fails, and Tune hears of it
            self.gate.reports.put(("end", {"status": STATUS_FAILED, "error": repr(error)}))

    def step(self) -> dict:
        if self.waiting:
            self.gate.answers.put(None)  # Tune asked for more: the run goes on
        kind, *rest = self.gate.reports.get()
        base = {"run": self.name}
        if kind == "evaluation":
            self.last = {"env_steps": rest[0], "eval_return": rest[1]}
            if not rest[2]:  # the last evaluation's result comes with the run's outcome
                self.waiting = True
                return {**base, **self.last}
            self.gate.answers.put(None)
            kind, *rest = self.gate.reports.get()
        self.waiting, self.outcome = False, rest[0]
        return {**base, **self.last, **_plain(self.outcome), "done": True}

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        """Tune's checkpoint of the trial: its run folder, which keeps the run's own."""
        return {"run_folder": self.task.base_dir}

    def load_checkpoint(self, checkpoint: dict) -> None:
        del checkpoint  # a trial resumes from its run folder's checkpoints

    def cleanup(self) -> None:
        """Tune stopped the trial: the run stops at the evaluation it waits at, checkpointed."""
        if self.waiting:
            path = _pruned_path(self.base_dir, self.name)
            why = "stopped by Ray Tune before it ended (the search was stopped)"
            if os.path.exists(path):
                with open(path) as f:
                    why = f.read()
            self.gate.answers.put(why)
        self.thread.join()


def _plain(outcome: dict) -> dict:
    return {key: value for key, value in outcome.items() if value is not None}


class _RecordingASHA(ASHAScheduler):
    """ASHA, which says why it stopped a trial where the trial's run reads it."""

    def __init__(self, sweep: Sweep, **kwargs):
        super().__init__(metric="eval_return", mode="max", **kwargs)
        self.base_dir, self.max_t = sweep.base_dir, kwargs["max_t"]

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.STOP and result.get("env_steps", 0) < self.max_t:
            path = _pruned_path(self.base_dir, result["run"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(
                    f"pruned at step {result['env_steps']} by Ray Tune's ASHA: its eval return "
                    f"{result['eval_return']:.4g} is outside the best 1/{REDUCTION_FACTOR} of "
                    "the trials that reached that step"
                )
        return decision


class _Recorder(tune.Callback):
    """The record of a Ray search: trials as Tune starts them, runs as they end."""

    def __init__(self, sweep: Sweep, progress: SweepProgress):
        self.sweep, self.progress = sweep, progress
        self.runs: dict[str, dict] = {}  # Tune trial id -> the record's run
        self.starts: dict[str, float] = {}
        self.ended: list[tuple[dict, dict, float]] = []  # (run, outcome, seconds)

    def on_trial_start(self, iteration, trials, trial, **info):
        name, texts = _suggested(trial.config, trial.trial_id)
        known = [t for t in self.sweep.search_trials if t["trial"] == name]
        number = len(self.sweep.search_trials)
        record = known[0] if known else new_trial(self.sweep, number, texts, name)
        run = next(r for r in self.sweep.runs if r["trial"] == record["trial"])
        start_run(self.sweep, run)
        self.runs[trial.trial_id], self.starts[trial.trial_id] = run, time.monotonic()
        self.sweep.write()
        self.progress.line()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, trial.last_result or {})

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, {"status": STATUS_FAILED, "error": f"Ray trial {trial.trial_id} failed"})

    def _end(self, trial, result: dict) -> None:
        run = self.runs.get(trial.trial_id)
        if run is None or run["status"] != STATUS_RUNNING:
            return
        status = result.get("status")
        path = _pruned_path(self.sweep.base_dir, result.get("run", ""))
        if status is None:  # stopped by Tune at an evaluation: by ASHA, or with the search
            status = STATUS_PRUNED if os.path.exists(path) else STATUS_INTERRUPTED
        outcome = {"status": status, "error": result.get("error")}
        if status == STATUS_PRUNED:
            with open(path) as f:
                outcome.update(pruned_at=result["env_steps"], why=f.read())
        seconds = time.monotonic() - self.starts[trial.trial_id]
        self.ended.append((run, outcome, seconds))  # its folder read once its actor let go
        run["status"] = outcome["status"]
        self.progress.durations.append(seconds)
        self.sweep.write()
        self.progress.line()

    def close_all(self) -> None:
        """After Tune's run (every actor has stopped): each ended run's result from its folder,
        and each trial whose run ended closed."""
        for run, outcome, seconds in self.ended:
            end_run(self.sweep, run, outcome, seconds)
        for run in self.sweep.runs:
            if run["status"] == STATUS_RUNNING:
                run["status"] = STATUS_INTERRUPTED
                run["error"] = "stopped before its Ray trial reported"
        for trial in self.sweep.search_trials:
            if trial["state"] not in search.ENDED:
                close_trial(self.sweep, trial)
        self.sweep.write()
