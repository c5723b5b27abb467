"""A sweep's definition and its record (sweep.json, the one file its driver owns), the HParams
columns it declares once, and each run's result as the run folder's owner records it."""

import dataclasses
import datetime
import json
import math
import os
from collections.abc import Sequence

import numpy as np

from experiments import RunError, search, tables
from experiments.search import SearchSettings
from experiments.sweep_plan import (
    Parameter,
    hparam_names,
    parse_parameter,
    plain_value,
    plan,
    spec_text,
    usage_error,
)
from experiments.trial import STATUS_FAILED, STATUS_FINISHED, STATUS_PRUNED, Task
from framework.storage.atomic_files import atomic_write
from framework.storage.run_directory import RunDirectory
from framework.storage.summaries import TRIAL_COLUMN, hparam_value

FORMAT_VERSION = 1
RECORD = "sweep.json"
STORAGE = "search.db"  # an adaptive search's Optuna study (SQLite), beside the record
SEARCHES = ("grid", "random", "tpe")
STATUS_PENDING, STATUS_RUNNING = "pending", "running"
# The sweep's own HParams metrics, written into each run folder once its run ends (failed too).
METRICS = (
    ("sweep/final_eval_return", "final eval return"),
    ("sweep/best_eval_return", "best eval return"),
    ("sweep/failed", "failed (1) or finished (0)"),
)
# And an adaptive search's, per trial: its objective over its seeds, whether it was pruned.
SEARCH_METRICS = (
    ("sweep/objective", "the trial's objective over its seeds"),
    ("sweep/pruned", "pruned (1) or not (0)"),
)


@dataclasses.dataclass
class Sweep:
    """A sweep's definition and its record (sweep.json), the one file the driver owns."""

    base_dir: str
    gin_files: list[str]
    bindings: list[str]
    parameters: list[Parameter]
    seeds: list[int]
    num_trials: int | None = None
    sweep_seed: int = 0
    strict: bool = False
    runs: list[dict] = dataclasses.field(default_factory=list)
    search: SearchSettings | None = None  # an adaptive search's (--search=tpe)
    storage: str | None = None  # its Optuna storage URL
    # Its trials as suggested, in order: number, name, texts, values, state, value, curve, ...
    search_trials: list[dict] = dataclasses.field(default_factory=list)

    def identity(self) -> dict:
        """What makes two invocations the same sweep (not how they run it)."""
        return {
            "gin_files": self.gin_files,
            "bindings": self.bindings,
            "sweeps": [spec_text(p) for p in self.parameters],
            "seeds": self.seeds,
            "num_trials": self.num_trials,
            "sweep_seed": self.sweep_seed,
            "strict": self.strict,
            "search": None if self.search is None else dataclasses.asdict(self.search),
        }

    @property
    def study_name(self) -> str:
        """The name of a search's study in its storage: the sweep folder's."""
        return os.path.basename(self.base_dir)

    @property
    def kind(self) -> str:
        """grid, random or tpe."""
        if self.search is not None:
            return self.search.sampler
        return "grid" if self.num_trials is None else "random"

    @property
    def record_path(self) -> str:
        return os.path.join(self.base_dir, RECORD)

    def folder(self, run: dict) -> str:
        return os.path.join(self.base_dir, run["name"])

    def run_folder(self, run: dict) -> RunDirectory:
        return RunDirectory(self.folder(run))

    def log_path(self, run: dict) -> str:
        return os.path.join(self.base_dir, "logs", run["name"] + ".log")

    def reports_dir(self, trial: str) -> str:
        """Where a search trial's runs report their evaluations to each other (its pruner's)."""
        return os.path.join(self.base_dir, "search", trial)

    def search_trial(self, name: str) -> dict:
        return next(trial for trial in self.search_trials if trial["trial"] == name)

    def task(self, run: dict) -> Task:
        return Task(
            name=run["name"],
            gin_files=tuple(self.gin_files),
            bindings=tuple(self.bindings + run["bindings"]),
            base_dir=self.folder(run),
            seed=run["seed"],
            strict=self.strict,
            log_path=self.log_path(run),
            pruning=self._pruning(run),
        )

    def _pruning(self, run: dict) -> dict | None:
        """A search run's pruner: its trial's folder of reports, and the finished trials it is
        compared with (those it was suggested from: their records are final)."""
        if self.search is None or self.search.pruner == "none":
            return None
        trial = self.search_trial(run["trial"])
        before = self.search_trials[: search.first_dependent(trial["number"], self.search)]
        return {
            "reports": self.reports_dir(run["trial"]),
            "seeds": list(self.seeds),
            "references": [t["curve"] for t in before if t["state"] == STATUS_FINISHED],
            "settings": dataclasses.asdict(self.search),
        }

    def mean_eval_return(self, trial: str) -> float:
        """The mean over the trial's finished runs of each run's mean eval return (-inf if none
        recorded it): what breaks a tie on the objective."""
        means = [
            run["result"].get("mean_eval_return")
            for run in self.runs
            if run["trial"] == trial and run["status"] == STATUS_FINISHED and run.get("result")
        ]
        means = [m for m in means if m is not None]
        return float(np.mean(means)) if means else -math.inf

    def trials(self) -> list[dict]:
        """Per trial: its values, how its seeds ended, and the objective over finished seeds
        (a search's: its state and its objective as `search.objective` gives it)."""
        if self.search is not None:
            return [self._search_summary(trial) for trial in self.search_trials]
        summary = {}
        for run in self.runs:
            entry = summary.setdefault(
                run["trial"],
                {"trial": run["trial"], "values": run["values"], "runs": 0, "finished": 0},
            )
            entry["runs"] += 1
            entry["finished"] += run["status"] == STATUS_FINISHED
            entry.setdefault("failed", 0)
            entry["failed"] += run["status"] == STATUS_FAILED
        for entry in summary.values():
            finals = [
                r["result"]["final_eval_return"]
                for r in self.runs
                if r["trial"] == entry["trial"] and r["status"] == STATUS_FINISHED
            ]
            finals = [f for f in finals if f is not None and math.isfinite(f)]
            entry["objective"] = float(np.mean(finals)) if finals else None
        return list(summary.values())

    def _search_summary(self, trial: dict) -> dict:
        runs = [run for run in self.runs if run["trial"] == trial["trial"]]
        return {
            "trial": trial["trial"],
            "number": trial["number"],
            "values": trial["values"],
            "state": trial["state"],
            "runs": len(runs),
            "finished": sum(run["status"] == STATUS_FINISHED for run in runs),
            "pruned": sum(run["status"] == STATUS_PRUNED for run in runs),
            "failed": sum(run["status"] == STATUS_FAILED for run in runs),
            "objective": trial["value"],
            "pruned_at": trial.get("pruned_at"),
        }

    def objective_text(self) -> dict:
        if self.search is None:
            return {
                "metric": "final_eval_return",
                "aggregate": "final eval return, mean over the trial's finished seeds",
            }
        return {
            "metric": f"{self.search.objective}_eval_return",
            "aggregate": search.describe_objective(self.search.objective, len(self.seeds)),
        }

    def write(self) -> None:
        record = {
            "format": FORMAT_VERSION,
            **self.identity(),
            "parameters": [
                {"key": p.key, "hparam": p.hparam, "spec": spec_text(p), "domain": p.domain()}
                for p in self.parameters
            ],
            "objective": self.objective_text(),
            "updated": datetime.datetime.now().isoformat(timespec="seconds"),
            "trials": self.trials(),
            "runs": self.runs,
        }
        if self.search is not None:
            record["search_trials"] = self.search_trials
            record["storage"] = self.storage
            record["study"] = self.study_name
        atomic_write(self.record_path, json.dumps(record, indent=2) + "\n")


def define(
    gin_files: Sequence[str],
    bindings: Sequence[str] = (),
    sweeps: Sequence[str] = (),
    seeds: int | Sequence[int] = 1,
    base_dir: str | None = None,
    num_trials: int | None = None,
    sweep_seed: int = 0,
    strict: bool = False,
    search_kind: str | None = None,
    settings: SearchSettings | None = None,
    storage: str | None = None,
) -> Sweep:
    """The sweep these arguments describe, merged with the record in `base_dir` if it has one.

    `search_kind` is grid (the product of the lists; no `num_trials`), random (`num_trials`
    draws) or tpe (`num_trials` trials suggested by Optuna's TPE from the ones before, with
    `settings`, its study in `storage`, by default `<base_dir>/search.db`); left out, it is
    random with `num_trials` and grid without. Raises RunError for a malformed --sweep, a
    search without what it needs, or a folder or storage that holds a different sweep.
    """
    from framework import config

    if not gin_files:
        raise usage_error("Give at least one --gin_file.")
    try:
        resolved = [os.path.abspath(config.resolve_gin_file(path)) for path in gin_files]
    except config.ConfigError as error:
        raise RunError(str(error)) from error
    parameters = [parse_parameter(spec) for spec in sweeps]
    keys = [p.key for p in parameters]
    if len(set(keys)) != len(keys):
        raise usage_error(f"Each binding may be swept once; got {keys}.")
    search_kind = _search_kind(search_kind, num_trials, parameters)
    names = hparam_names(resolved, keys)
    parameters = [dataclasses.replace(p, hparam=names[p.key]) for p in parameters]
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise usage_error(f"--seeds must give at least one seed, each once and >= 0; got {seeds}.")
    config_name = os.path.splitext(os.path.basename(resolved[-1]))[0]
    if base_dir is None:
        family = os.path.basename(os.path.dirname(resolved[-1]))
        base_dir = os.path.join("sweeps", f"{family}_{config_name}")
    if os.path.exists(base_dir) and not os.path.isdir(base_dir):
        raise usage_error(
            f"--base_dir {base_dir!r} is a file, not a folder: a sweep keeps its record and "
            "one folder per run there. Choose a folder (a new one starts a sweep, an existing "
            "sweep's resumes it)."
        )
    base_dir = os.path.abspath(base_dir)
    sweep = Sweep(
        base_dir=base_dir,
        gin_files=resolved,
        bindings=list(bindings),
        parameters=parameters,
        seeds=seeds,
        num_trials=num_trials,
        sweep_seed=sweep_seed,
        strict=strict,
    )
    if search_kind == "tpe":
        search.require_optuna()
        sweep.search = settings or SearchSettings()
        sweep.storage = storage or f"sqlite:///{os.path.join(base_dir, STORAGE)}"
    else:
        for trial in plan(parameters, num_trials, sweep_seed, config_name):
            sweep.runs += new_runs(sweep, trial.name, trial.texts)
    _merge_record(sweep)
    if sweep.search is not None and _storage_exists(sweep.storage):
        open_study(sweep)  # another search's storage is refused before anything starts
    return sweep


def _search_kind(kind: str | None, num_trials: int | None, parameters: list[Parameter]) -> str:
    """The kind of sweep, checked against --num_trials and the --sweep flags."""
    if kind is None:
        kind = "grid" if num_trials is None else "random"
    if kind not in SEARCHES:
        raise usage_error(f"--search must be one of {', '.join(SEARCHES)}, got {kind!r}.")
    if num_trials is not None and num_trials < 1:
        raise usage_error(f"--num_trials must be at least 1, got {num_trials}.")
    if kind == "grid" and num_trials is not None:
        raise usage_error(
            f"--search=grid runs every combination of the lists; --num_trials={num_trials} is "
            "for --search=random or --search=tpe."
        )
    if kind != "grid" and num_trials is None:
        raise usage_error(f"--search={kind} needs --num_trials=N: how many trials to run.")
    if kind == "tpe" and not parameters:
        raise usage_error(
            "--search=tpe needs a space to search: give at least one --sweep, a range such as "
            "'optimizers.Adam.learning_rate=loguniform(1e-4, 1e-2)' or a list of choices."
        )
    return kind


def new_runs(sweep: Sweep, trial: str, texts: Sequence[str]) -> list[dict]:
    """The runs of one trial, one per seed, pending."""
    parameters = sweep.parameters
    values = {
        p.hparam: (float(t) if p.distribution in ("uniform", "loguniform") else plain_value(t))
        for p, t in zip(parameters, texts, strict=True)
    }
    return [
        {
            "name": f"{trial}_seed{seed}",
            "trial": trial,
            "seed": seed,
            "bindings": [f"{p.key} = {t}" for p, t in zip(parameters, texts, strict=True)],
            "values": values,
            "status": STATUS_PENDING,
            "attempts": 0,
            "seconds": 0.0,
            "result": None,
            "trial_key": None,  # once it ran: its config's (framework/storage/trials.py)
            "error": None,
        }
        for seed in sweep.seeds
    ]


def _storage_exists(storage: str) -> bool:
    """Whether there is a study to check: an SQLite file that exists, or any other storage."""
    prefix = "sqlite:///"
    return not storage.startswith(prefix) or os.path.exists(storage[len(prefix) :])


def open_study(sweep: Sweep):
    """The search's Optuna study (made where missing), holding every ended trial of the record."""
    study = search.open_study(sweep.storage, sweep.study_name, sweep.identity())
    search.record_in_study(study, sweep.parameters, sweep.search_trials)
    return study


def read_record(base_dir: str) -> dict | None:
    """The record (sweep.json) of the sweep in `base_dir`, or None if it holds none."""
    path = os.path.join(base_dir, RECORD)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _merge_record(sweep: Sweep) -> None:
    """Takes each run's status from an earlier invocation's record in the same folder."""
    record = read_record(sweep.base_dir)
    if record is None:
        return
    earlier = {key: record.get(key) for key in sweep.identity()}
    if earlier != sweep.identity():
        differences = [key for key in earlier if earlier[key] != sweep.identity()[key]]
        raise RunError(
            f"{sweep.base_dir} holds a different sweep (its {RECORD} differs in "
            f"{', '.join(differences)}: {', '.join(f'{k}={earlier[k]!r}' for k in differences)}). "
            "Give the same gin files, bindings, --sweep, --seeds, --num_trials, --sweep_seed and "
            "search flags to continue it, or another --base_dir for a new sweep."
        )
    if sweep.search is not None:  # its trials were suggested as it went: all in the record
        sweep.runs = record["runs"]
        sweep.search_trials = record.get("search_trials", [])
        return
    previous = {run["name"]: run for run in record.get("runs", [])}
    for run in sweep.runs:
        if run["name"] in previous:
            old = previous[run["name"]]
            for key in ("status", "attempts", "seconds", "result", "error", "trial_key"):
                run[key] = old.get(key, run[key])


def _hparams_api():
    from tensorboard.plugins.hparams import api as hp

    return hp


def _domain(domain: dict):
    """A recorded domain as the dashboard's, its integers as the runs' sessions hold them: as
    their digits (`summaries.hparam_value`)."""
    hp = _hparams_api()
    if domain["type"] == "real":
        return hp.RealInterval(domain["min"], domain["max"])
    if domain["type"] == "int":
        return hp.Discrete([str(value) for value in range(domain["min"], domain["max"] + 1)])
    return hp.Discrete([hparam_value(value) for value in domain["values"]])


def _columns(sweep: Sweep):
    """The dashboard's columns for the whole sweep: its trials' names, the domain of every swept
    binding and the metrics, declared in every run's folder before the run starts (SB3#1099:
    columns a first run did not log vanish), and not in a folder of its own (TensorBoard would
    list it as a run beside the training runs)."""
    hp = _hparams_api()
    if sweep.search is None:
        names = sorted({run["trial"] for run in sweep.runs}, key=tables.natural)
        hparams = [hp.HParam(TRIAL_COLUMN, hp.Discrete(names))]
    else:  # a search's trials are named as they are suggested: no list of them beforehand
        hparams = [hp.HParam(TRIAL_COLUMN)]
    # Named as every run's own HParams session names them (`bound_hyperparameters`).
    hparams += [hp.HParam(p.hparam, _domain(p.domain())) for p in sweep.parameters]
    metrics = [hp.Metric(tag, display_name=name) for tag, name in _metrics(sweep)]
    return hp.hparams_config_pb(hparams=hparams, metrics=metrics)


def _metrics(sweep: Sweep) -> tuple[tuple[str, str], ...]:
    return METRICS + (SEARCH_METRICS if sweep.search is not None else ())


def declare_columns(sweep: Sweep, run: dict) -> None:
    """Before a run starts (again): the sweep's record in its folder holds the columns and no
    result, so an earlier result neither outlives the run nor mixes with a resumed one."""
    sweep.run_folder(run).write_result_events([(0, _columns(sweep))])


def write_run_result(sweep: Sweep, run: dict) -> None:
    """The run's final metrics as scalars in its folder (its HParams session's run), written
    whether it finished or failed; a run that failed before it logged its session (say, at a bad
    binding value) also gets one here, so the dashboard lists every run of the sweep."""
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import summary as hparams_summary
    from tensorboard.plugins.scalar import summary_v2 as scalar_summary

    folder = sweep.run_folder(run)
    result = run["result"] or {}
    step = int(result.get("eval_step") or 0)
    results = [(0, _columns(sweep))]
    if not folder.logged_its_session():  # grouped as the run groups its own: by trial key
        group = run.get("trial_key") or run["trial"]  # no key if it never got to start
        values = {TRIAL_COLUMN: run["trial"]}
        values |= {name: hparam_value(value) for name, value in run["values"].items()}
        results.append((0, _hparams_api().hparams_pb(values, trial_id=group)))
    failed = run["status"] == STATUS_FAILED
    scalars = [
        ("sweep/final_eval_return", result.get("final_eval_return")),
        ("sweep/best_eval_return", result.get("best_eval_return")),
        ("sweep/failed", float(failed)),
    ]
    if sweep.search is not None:  # the trial's, once it ended; NaN before
        trial = sweep.search_trial(run["trial"])
        scalars += [
            ("sweep/objective", trial["value"]),
            ("sweep/pruned", float(trial["state"] == STATUS_PRUNED)),
        ]
    for tag, value in scalars:
        value = float("nan") if value is None else value
        results.append((step, scalar_summary.scalar_pb(tag, value)))
    status = api_pb2.STATUS_FAILURE if failed else api_pb2.STATUS_SUCCESS
    results.append((step, hparams_summary.session_end_pb(status)))
    folder.write_result_events(results)


def read_result(folder: RunDirectory, with_curve: bool = False) -> dict:
    """Final, best and mean eval return, and the step of the final one, from the run's event
    files; `with_curve` adds the eval curve (a search's trials are judged on it)."""
    curve = folder.eval_curve()
    result = {
        "final_eval_return": None,
        "best_eval_return": None,
        "mean_eval_return": None,
        "eval_step": None,
    }
    if curve:
        step, final = curve[-1]
        values = list(dict(curve).values())  # a step logged again after a resume, once
        result = {
            "final_eval_return": _number(final),  # JSON: no NaN
            "best_eval_return": _number(max(values)),
            "mean_eval_return": _number(float(np.mean(values))),
            "eval_step": int(step),
        }
    if with_curve:
        result["curve"] = [[int(s), float(v) if math.isfinite(v) else None] for s, v in curve]
    return result


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def summary_table(sweep: Sweep) -> str:
    """A markdown table of the trials, best objective first (trials without one last), ties as
    `sweep_best.best_trial` breaks them, then in the order of their swept values as numbers."""
    rows = sorted(
        sweep.trials(),
        key=lambda t: (
            math.inf if t["objective"] is None else -t["objective"],
            -sweep.mean_eval_return(t["trial"]),
            *(tables.order(value) for value in t["values"].values()),
        ),
    )
    if sweep.search is not None:
        objective = sweep.objective_text()
        lines = [
            f"| trial | state | objective ({objective['aggregate']}) | pruned at step |",
            "|---|---|---|---|",
        ]
        for t in rows:
            lines.append(
                f"| {t['trial']} | {t['state']} | {tables.significant(t['objective'])} | "
                f"{t['pruned_at'] if t['pruned_at'] is not None else ''} |"
            )
        return "\n".join(lines)
    lines = [
        "| trial | seeds finished | failed | final eval return (mean over seeds) |",
        "|---|---|---|---|",
    ]
    for t in rows:
        lines.append(
            f"| {t['trial']} | {t['finished']}/{t['runs']} | {t['failed']} | "
            f"{tables.significant(t['objective'])} |"
        )
    return "\n".join(lines)


def failure_report(sweep: Sweep) -> str | None:
    failed = [run for run in sweep.runs if run["status"] == STATUS_FAILED]
    if not failed:
        return None
    listing = "; ".join(f"{run['name']}: {run['error']}" for run in failed)
    return (
        f"{len(failed)} of {len(sweep.runs)} runs failed ({listing}). The others are recorded in "
        f"{sweep.record_path}; run the same command again to retry only the failed ones."
    )
