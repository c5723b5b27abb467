"""Sweeps over gin bindings and seeds: every trial run once per seed, locally or on Ray Tune.

  python -m experiments.sweep --gin_file=gin_configs/dqn/cartpole.gin \\
      --sweep='optimizers.Adam.learning_rate=[1e-3, 3e-4]' --sweep='SoftUpdate.tau=[0.005, 0.05]' \\
      --seeds=5 --base_dir=sweeps/cartpole_lr_tau

A grid sweep runs the product of the `--sweep` lists; with `--num_trials=N` it is a random
sweep instead: N trials, each binding drawn from its list or range (`uniform(a, b)`,
`loguniform(a, b)`, `randint(a, b)` with b excluded), from `--sweep_seed`. Every trial runs
once per seed (0..seeds-1): seeds are an axis of the sweep, and a trial's objective is the mean
over its seeds of the final eval return, never one seed's.

    <base_dir>/
      sweep.json                    the record: every run's bindings, seed, status, result, error
      events.out.tfevents.*.sweep   the HParams dashboard's columns, declared once for the sweep
      <trial>_seed<k>/              an ordinary run folder per trial and seed
      logs/<trial>_seed<k>.log      each run's output
      ray_results/                  Ray Tune's own records (--backend=ray)

Each run is a fresh process (`--parallel` at once, by default one per core), in the driver's
process group: a Ctrl-C or a killed driver stops them all. A failing run (a bad binding value,
a NaN, a crash) is recorded with its error and the others go on. Running the same command again
skips finished runs, resumes unfinished ones (stopped by a signal or a killed driver) from their
checkpoints, and retries failed ones. Then `python -m experiments.analyze <base_dir>`.
"""

import ast
import dataclasses
import datetime
import glob
import itertools
import json
import math
import multiprocessing
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from experiments import RunError
from experiments.trial import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED, Task

FORMAT_VERSION = 1
RECORD = "sweep.json"
STATUS_PENDING, STATUS_RUNNING = "pending", "running"
EVAL_TAG = "eval/episode_return"
# The sweep's own HParams metrics, written into each run folder once its run ends (failed too).
METRICS = (
    ("sweep/final_eval_return", "final eval return"),
    ("sweep/best_eval_return", "best eval return"),
    ("sweep/failed", "failed (1) or finished (0)"),
)
_EXPERIMENT_EVENTS = "events.out.tfevents.0000000000.sweep"
# Sorts after the run's own event files: TensorBoard reads a folder's files in name order.
_RESULT_EVENTS = "events.out.tfevents.9999999999.sweep"
_DISTRIBUTIONS = ("uniform", "loguniform", "randint")
_PROGRESS_SECONDS = 30.0


# ----- what to run ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One `--sweep` flag: a gin binding key and its values (a list) or a range."""

    key: str  # e.g. 'optimizers.Adam.learning_rate' or 'actor/optimizers.Adam.learning_rate'
    values: tuple[str, ...] = ()  # gin texts, for a list
    distribution: str | None = None  # for a range: one of _DISTRIBUTIONS
    low: float = 0.0
    high: float = 0.0
    hparam: str = ""  # its name in the runs' HParams sessions (`hparam_names`)

    def sample(self, rng: np.random.Generator) -> str:
        """One value's gin text, drawn for a random sweep."""
        if self.distribution is None:
            return self.values[int(rng.integers(len(self.values)))]
        if self.distribution == "randint":
            return str(int(rng.integers(int(self.low), int(self.high))))
        if self.distribution == "loguniform":
            return repr(float(math.exp(rng.uniform(math.log(self.low), math.log(self.high)))))
        return repr(float(rng.uniform(self.low, self.high)))

    def domain(self) -> dict:
        """The HParams domain of the values, as JSON: {"discrete": [...]} or {"interval": ...}."""
        if self.distribution == "randint":
            return {"type": "int", "min": int(self.low), "max": int(self.high) - 1}
        if self.distribution is not None:
            return {"type": "real", "min": float(self.low), "max": float(self.high)}
        return {"type": "discrete", "values": coerce_all([plain_value(v) for v in self.values])}


def plain_value(text: str) -> bool | int | float | str:
    """A gin value's text as a plain HParams value: numbers, booleans and strings as themselves,
    anything else (a tuple, a reference, a macro) as its text."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip()
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def coerce_all(values: list) -> list:
    """One type for a whole domain (HParams requires it): ints with floats become floats; any
    other mix becomes strings."""
    kinds = {type(v) for v in values}
    if kinds <= {int, float} and len(kinds) == 2:
        return [float(v) for v in values]
    if len(kinds) > 1:
        return [str(v) for v in values]
    return list(values)


def _usage(message: str) -> RunError:
    return RunError(" ".join(message.split()))


def parse_parameter(spec: str) -> Parameter:
    """`key=[v1, v2, ...]`, `key=uniform(a, b)`, `key=loguniform(a, b)` or `key=randint(a, b)`."""
    key, equals, text = spec.partition("=")
    key, text = key.strip(), text.strip()
    if not equals or not re.fullmatch(r"[\w./]+", key) or not text:
        raise _usage(
            f"--sweep={spec!r} is not 'binding=values'. Write a gin binding key and a list or a "
            "range, e.g. --sweep='optimizers.Adam.learning_rate=[1e-3, 3e-4]' or "
            "--sweep='optimizers.Adam.learning_rate=loguniform(1e-4, 1e-2)'."
        )
    match = re.fullmatch(r"(\w+)\((.*)\)", text)
    if match and match.group(1) in _DISTRIBUTIONS:
        name = match.group(1)
        try:
            low, high = (float(ast.literal_eval(part)) for part in match.group(2).split(","))
        except (ValueError, SyntaxError, TypeError):
            low = high = float("nan")
        valid = low < high and (name != "loguniform" or low > 0)
        if name == "randint":
            valid = valid and low == int(low) and high == int(high)
        if not valid:
            raise _usage(
                f"--sweep={spec!r}: {name} needs two numbers low < high"
                f"{' (both > 0)' if name == 'loguniform' else ''}"
                f"{' (integers; high is excluded)' if name == 'randint' else ''}."
            )
        return Parameter(key, distribution=name, low=low, high=high)
    if not (text.startswith("[") and text.endswith("]")):
        raise _usage(
            f"--sweep={spec!r}: the values must be a list [a, b, ...] or one of "
            f"{', '.join(d + '(low, high)' for d in _DISTRIBUTIONS)}."
        )
    values = tuple(_split_top_level(text[1:-1]))
    if not values or len(set(values)) != len(values):
        raise _usage(f"--sweep={spec!r}: the list must hold distinct values, at least one.")
    return Parameter(key, values=values)


def _split_top_level(text: str) -> list[str]:
    """Splits at the commas outside brackets and quotes: '(5, 5), (8, 8)' -> two values."""
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


@dataclasses.dataclass(frozen=True)
class Trial:
    name: str  # readable, from the bindings; the seeds of a trial share it
    texts: tuple[str, ...]  # the gin text of each parameter's value, in parameter order


def plan(
    parameters: Sequence[Parameter], num_trials: int | None, sweep_seed: int, config_name: str
) -> list[Trial]:
    """The grid (the product of the lists), or `num_trials` random draws."""
    if num_trials is None:
        ranges = [p.key for p in parameters if p.distribution is not None]
        if ranges:
            raise _usage(
                f"{', '.join(ranges)} {'is a range' if len(ranges) == 1 else 'are ranges'}: a "
                "range is sampled, so give --num_trials=N for a random sweep, or a list."
            )
        combos = list(itertools.product(*(p.values for p in parameters)))
        prefix = ""
    else:
        rng = np.random.default_rng(sweep_seed)
        combos = [tuple(p.sample(rng) for p in parameters) for _ in range(num_trials)]
        prefix = f"trial{{:0{len(str(num_trials - 1))}d}}"
    labels = _short_labels([p.key for p in parameters])
    trials, seen = [], set()
    for index, texts in enumerate(combos):
        parts = [prefix.format(index)] if prefix else []
        for label, parameter, text in zip(labels, parameters, texts, strict=True):
            parts.append(f"{label}={_value_label(parameter, text)}")
        name = _safe_name(",".join(p for p in parts if p) or config_name)
        if name in seen:
            name = _safe_name(f"trial{index},{name}")
        seen.add(name)
        trials.append(Trial(name, texts))
    return trials


def _short_labels(keys: Sequence[str]) -> list[str]:
    """The shortest unique tail of each key: 'learning_rate', else 'Adam.learning_rate', ..."""
    pieces = [re.split(r"[./]", key) for key in keys]
    for length in range(1, max((len(p) for p in pieces), default=1) + 1):
        labels = [".".join(p[-length:]) for p in pieces]
        if len(set(labels)) == len(labels):
            return labels
    return [key.replace("/", ".") for key in keys]


def _value_label(parameter: Parameter, text: str) -> str:
    if parameter.distribution in ("uniform", "loguniform"):
        return f"{float(text):.4g}"
    return text.replace(" ", "").strip("'\"")


def _safe_name(name: str) -> str:
    """A folder name: no separators, spaces or quotes; long names end in a short hash."""
    name = re.sub(r"[^\w.=,+\-@()]", "_", name.replace("/", "-"))
    if len(name) > 150:
        import hashlib

        name = name[:140] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def hparam_names(gin_files: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    """The name each swept binding has in the runs' own HParams sessions, asked of the code that
    names them (`framework.config.bound_hyperparameters`): the config is parsed with a probe value
    bound to the key, and the entry holding the probe is its name. A key that does not parse
    (a typo: every run then fails with gin's message) keeps its own text."""
    import gin

    import agents  # noqa: F401  (registers the agents' configurables)
    import framework.runner  # noqa: F401  (and the Runner's)
    from framework import config

    probe = "__sweep_probe__"
    names = {}
    for key in keys:
        gin.clear_config()
        try:
            config.parse(gin_files, [f"{key} = {probe!r}"])
            found = [n for n, v in config.bound_hyperparameters().items() if v == probe]
        except (ValueError, ImportError, TypeError):
            found = []
        names[key] = found[0] if len(found) == 1 else key
    gin.clear_config()
    return names


# ----- the record -------------------------------------------------------------------------------


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

    def identity(self) -> dict:
        """What makes two invocations the same sweep (not how they run it)."""
        return {
            "gin_files": self.gin_files,
            "bindings": self.bindings,
            "sweeps": [_spec_text(p) for p in self.parameters],
            "seeds": self.seeds,
            "num_trials": self.num_trials,
            "sweep_seed": self.sweep_seed,
            "strict": self.strict,
        }

    @property
    def record_path(self) -> str:
        return os.path.join(self.base_dir, RECORD)

    def folder(self, run: dict) -> str:
        return os.path.join(self.base_dir, run["name"])

    def log_path(self, run: dict) -> str:
        return os.path.join(self.base_dir, "logs", run["name"] + ".log")

    def task(self, run: dict) -> Task:
        return Task(
            name=run["name"],
            gin_files=tuple(self.gin_files),
            bindings=tuple(self.bindings + run["bindings"]),
            base_dir=self.folder(run),
            seed=run["seed"],
            strict=self.strict,
            log_path=self.log_path(run),
        )

    def trials(self) -> list[dict]:
        """Per trial: its values, how its seeds ended, and the objective over finished seeds."""
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

    def write(self) -> None:
        from framework.run_directory import atomic_write

        record = {
            "format": FORMAT_VERSION,
            **self.identity(),
            "parameters": [
                {"key": p.key, "hparam": p.hparam, "spec": _spec_text(p), "domain": p.domain()}
                for p in self.parameters
            ],
            "objective": {
                "metric": "final_eval_return",
                "aggregate": "mean over the trial's finished seeds",
            },
            "updated": datetime.datetime.now().isoformat(timespec="seconds"),
            "trials": self.trials(),
            "runs": self.runs,
        }
        atomic_write(self.record_path, json.dumps(record, indent=2) + "\n")


def _spec_text(parameter: Parameter) -> str:
    if parameter.distribution is None:
        return f"{parameter.key}=[{', '.join(parameter.values)}]"
    low, high = parameter.low, parameter.high
    if parameter.distribution == "randint":
        low, high = int(low), int(high)
    return f"{parameter.key}={parameter.distribution}({low!r}, {high!r})"


def define(
    gin_files: Sequence[str],
    bindings: Sequence[str] = (),
    sweeps: Sequence[str] = (),
    seeds: int | Sequence[int] = 1,
    base_dir: str | None = None,
    num_trials: int | None = None,
    sweep_seed: int = 0,
    strict: bool = False,
) -> Sweep:
    """The sweep these arguments describe, merged with the record in `base_dir` if it has one.

    Raises RunError for a malformed --sweep, or a folder that holds a different sweep.
    """
    from framework import config

    if not gin_files:
        raise _usage("Give at least one --gin_file.")
    try:
        resolved = [os.path.abspath(config.resolve_gin_file(path)) for path in gin_files]
    except config.ConfigError as error:
        raise RunError(str(error)) from error
    parameters = [parse_parameter(spec) for spec in sweeps]
    keys = [p.key for p in parameters]
    if len(set(keys)) != len(keys):
        raise _usage(f"Each binding may be swept once; got {keys}.")
    names = hparam_names(resolved, keys)
    parameters = [dataclasses.replace(p, hparam=names[p.key]) for p in parameters]
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise _usage(f"--seeds must give at least one seed, each once and >= 0; got {seeds}.")
    if num_trials is not None and num_trials < 1:
        raise _usage(f"--num_trials must be at least 1, got {num_trials}.")
    config_name = os.path.splitext(os.path.basename(resolved[-1]))[0]
    if base_dir is None:
        family = os.path.basename(os.path.dirname(resolved[-1]))
        base_dir = os.path.join("sweeps", f"{family}_{config_name}")
    sweep = Sweep(
        base_dir=os.path.abspath(base_dir),
        gin_files=resolved,
        bindings=list(bindings),
        parameters=parameters,
        seeds=seeds,
        num_trials=num_trials,
        sweep_seed=sweep_seed,
        strict=strict,
    )
    for trial in plan(parameters, num_trials, sweep_seed, config_name):
        values = {
            p.hparam: (float(t) if p.distribution in ("uniform", "loguniform") else plain_value(t))
            for p, t in zip(parameters, trial.texts, strict=True)
        }
        for seed in seeds:
            sweep.runs.append(
                {
                    "name": f"{trial.name}_seed{seed}",
                    "trial": trial.name,
                    "seed": seed,
                    "bindings": [
                        f"{p.key} = {t}" for p, t in zip(parameters, trial.texts, strict=True)
                    ],
                    "values": values,
                    "status": STATUS_PENDING,
                    "attempts": 0,
                    "seconds": 0.0,
                    "result": None,
                    "error": None,
                }
            )
    _merge_record(sweep)
    return sweep


def _merge_record(sweep: Sweep) -> None:
    """Takes each run's status from an earlier invocation's record in the same folder."""
    if not os.path.exists(sweep.record_path):
        return
    with open(sweep.record_path) as f:
        record = json.load(f)
    earlier = {key: record.get(key) for key in sweep.identity()}
    if earlier != sweep.identity():
        differences = [key for key in earlier if earlier[key] != sweep.identity()[key]]
        raise RunError(
            f"{sweep.base_dir} holds a different sweep (its {RECORD} differs in "
            f"{', '.join(differences)}: {', '.join(f'{k}={earlier[k]!r}' for k in differences)}). "
            "Give the same gin files, bindings, --sweep, --seeds, --num_trials and --sweep_seed "
            "to continue it, or another --base_dir for a new sweep."
        )
    previous = {run["name"]: run for run in record.get("runs", [])}
    for run in sweep.runs:
        if run["name"] in previous:
            old = previous[run["name"]]
            for key in ("status", "attempts", "seconds", "result", "error"):
                run[key] = old.get(key, run[key])


# ----- HParams ----------------------------------------------------------------------------------


def _hparams_api():
    from tensorboard.plugins.hparams import api as hp

    return hp


def _domain(domain: dict):
    hp = _hparams_api()
    if domain["type"] == "real":
        return hp.RealInterval(domain["min"], domain["max"])
    if domain["type"] == "int":
        return hp.IntInterval(domain["min"], domain["max"])
    return hp.Discrete(domain["values"])


def _write_events(path: str, summaries: Sequence[tuple[int, object]]) -> None:
    """An event file of `(step, Summary proto)`s, written atomically (no TF writer needed)."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    from framework.run_directory import atomic_path

    now = time.time()
    with atomic_path(path) as temp, open(temp, "wb") as f:
        writer = RecordWriter(f)
        writer.write(
            event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString()
        )
        for step, summary in summaries:
            event = event_pb2.Event(wall_time=now, step=step)
            event.summary.ParseFromString(summary.SerializeToString())  # TF's or TB's proto class
            writer.write(event.SerializeToString())
        writer.flush()


def write_experiment(sweep: Sweep) -> None:
    """Declares the dashboard's columns once for the whole sweep, before any run: the domain of
    every swept binding and the metrics (SB3#1099: columns a first run did not log vanish)."""
    hp = _hparams_api()
    hparams = [
        hp.HParam(p.hparam, _domain(p.domain()), display_name=p.key) for p in sweep.parameters
    ]
    metrics = [hp.Metric(tag, display_name=name) for tag, name in METRICS]
    os.makedirs(sweep.base_dir, exist_ok=True)
    _write_events(
        os.path.join(sweep.base_dir, _EXPERIMENT_EVENTS),
        [(0, hp.hparams_config_pb(hparams=hparams, metrics=metrics))],
    )


def write_run_result(sweep: Sweep, run: dict) -> None:
    """The run's final metrics as scalars in its folder (its HParams session's run), written
    whether it finished or failed; a run that failed before it logged its session (say, at a bad
    binding value) also gets one here, so the dashboard lists every run of the sweep."""
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import summary as hparams_summary
    from tensorboard.plugins.scalar import summary_v2 as scalar_summary

    import experiments

    folder = sweep.folder(run)
    result = run["result"] or {}
    step = int(result.get("eval_step") or 0)
    summaries = []
    if not _own_events(folder):
        group = experiments.hparams_group(folder)  # as the run itself names its session
        summaries.append((0, _hparams_api().hparams_pb(run["values"], trial_id=group)))
    failed = run["status"] == STATUS_FAILED
    for tag, value in (
        ("sweep/final_eval_return", result.get("final_eval_return")),
        ("sweep/best_eval_return", result.get("best_eval_return")),
        ("sweep/failed", float(failed)),
    ):
        value = float("nan") if value is None else value
        summaries.append((step, scalar_summary.scalar_pb(tag, value)))
    status = api_pb2.STATUS_FAILURE if failed else api_pb2.STATUS_SUCCESS
    summaries.append((step, hparams_summary.session_end_pb(status)))
    os.makedirs(folder, exist_ok=True)
    _write_events(os.path.join(folder, _RESULT_EVENTS), summaries)


def _own_events(folder: str) -> list[str]:
    """The event files the run itself wrote at its folder's top (its HParams session)."""
    paths = glob.glob(os.path.join(folder, "*tfevents*"))
    return [p for p in paths if os.path.basename(p) != _RESULT_EVENTS]


def clear_run_result(sweep: Sweep, run: dict) -> None:
    """Before a run starts again: its earlier result must not outlive it, nor be merged into
    the run's own events when it resumes."""
    path = os.path.join(sweep.folder(run), _RESULT_EVENTS)
    if os.path.exists(path):
        os.remove(path)


def read_result(folder: str) -> dict:
    """Final and best eval return, and the step of the final one, from the run's event files."""
    from framework.event_reader import read_scalars

    curve = (
        read_scalars(os.path.join(folder, "eval")).get(EVAL_TAG, [])
        if os.path.isdir(os.path.join(folder, "eval"))
        else []
    )
    if not curve:
        return {"final_eval_return": None, "best_eval_return": None, "eval_step": None}
    step, final = max(curve)
    best = max(value for _, value in curve)
    return {
        "final_eval_return": float(final) if math.isfinite(final) else None,  # JSON: no NaN
        "best_eval_return": float(best) if math.isfinite(best) else None,
        "eval_step": int(step),
    }


# ----- running ----------------------------------------------------------------------------------


class _Progress:
    """Progress lines: runs finished, running, failed and pending, and an estimate of the time
    left from the runs that ended in this invocation."""

    def __init__(self, sweep: Sweep, parallel: int, out=sys.stdout):
        self.sweep, self.parallel, self.out = sweep, parallel, out
        self.start = time.monotonic()
        self.durations: list[float] = []
        self.last_line = 0.0

    def line(self, force: bool = True) -> None:
        if not force and time.monotonic() - self.last_line < _PROGRESS_SECONDS:
            return
        self.last_line = time.monotonic()
        counts = {
            status: sum(run["status"] == status for run in self.sweep.runs)
            for status in (STATUS_FINISHED, STATUS_RUNNING, STATUS_FAILED)
        }
        left = len(self.sweep.runs) - sum(counts.values())
        estimate = "time left unknown"
        if self.durations:
            remaining = left + counts[STATUS_RUNNING] / 2
            seconds = np.mean(self.durations) * remaining / max(1, self.parallel)
            estimate = f"~{_duration(seconds)} left"
        print(
            f"sweep: {counts[STATUS_FINISHED]}/{len(self.sweep.runs)} finished, "
            f"{counts[STATUS_RUNNING]} running, {counts[STATUS_FAILED]} failed, {left} to run | "
            f"{_duration(time.monotonic() - self.start)} elapsed, {estimate}",
            file=self.out,
            flush=True,
        )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _start_run(sweep: Sweep, run: dict) -> None:
    clear_run_result(sweep, run)
    run["status"] = STATUS_RUNNING
    run["attempts"] += 1
    run["error"] = None


def _end_run(sweep: Sweep, run: dict, outcome: dict, seconds: float) -> None:
    """Records a run's outcome; a run that ended (finished or failed) gets its final metrics."""
    run["seconds"] = round(run["seconds"] + seconds, 3)
    run["status"] = outcome["status"]
    run["error"] = outcome.get("error")
    if run["status"] in (STATUS_FINISHED, STATUS_FAILED):
        run["result"] = read_result(sweep.folder(run))
        write_run_result(sweep, run)


def _run_local(sweep: Sweep, todo: list[dict], parallel: int, progress: _Progress) -> None:
    """Each run in a fresh spawned process, `parallel` at once."""
    from multiprocessing.connection import wait

    from experiments import trial

    context = multiprocessing.get_context("spawn")
    queue = list(todo)
    active: dict[int, tuple] = {}  # sentinel -> (process, connection, run, start)
    try:
        while queue or active:
            while queue and len(active) < parallel:
                run = queue.pop(0)
                _start_run(sweep, run)
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
            ready = wait(list(active), timeout=_PROGRESS_SECONDS)
            for sentinel in ready:
                process, receiver, run, start = active.pop(sentinel)
                outcome = receiver.recv() if receiver.poll() else None
                process.join()
                receiver.close()
                seconds = time.monotonic() - start
                _end_run(sweep, run, _classify(outcome, process.exitcode, sweep, run), seconds)
                progress.durations.append(seconds)
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


def _run_ray(
    sweep: Sweep, todo: list[dict], parallel: int, address: str | None, progress: _Progress
) -> None:
    """The runs as Ray Tune trials: one trainable call per run, the same `trial.run` inside."""
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"  # keeps Tune's TB logger off ours
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    try:
        import ray
        from ray import tune
    except ImportError as error:
        raise RunError(
            "--backend=ray needs Ray Tune: pip install -e '.[ray]' (or '.[test]')."
        ) from error

    from experiments import trial

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    by_name = {run["name"]: run for run in todo}
    starts: dict[str, float] = {}

    class Recorder(tune.Callback):
        """Keeps sweep.json and the progress lines current as Tune's trials start and end."""

        def on_trial_start(self, iteration, trials, trial, **info):
            run = by_name[trial.config["task"]["name"]]
            _start_run(sweep, run)
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
            _end_run(sweep, run, outcome, seconds)
            progress.durations.append(seconds)
            sweep.write()
            progress.line()

    tasks = [dataclasses.asdict(sweep.task(run)) for run in todo]
    tuner = tune.Tuner(
        tune.with_resources(trial.tune_trainable, {"cpu": 1}),
        param_space={"task": tune.grid_search(tasks)},
        tune_config=tune.TuneConfig(max_concurrent_trials=parallel),
        run_config=tune.RunConfig(
            name=datetime.datetime.now().strftime("tune-%Y%m%d-%H%M%S"),
            storage_path=os.path.join(sweep.base_dir, "ray_results"),
            callbacks=[Recorder()],
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
            verbose=0,
        ),
    )
    try:
        tuner.fit()
    finally:
        for run in todo:
            if run["status"] == STATUS_RUNNING:
                run["status"] = STATUS_INTERRUPTED
                run["error"] = "stopped before its Ray trial reported"
        sweep.write()


def run_sweep(
    sweep: Sweep,
    parallel: int | None = None,
    backend: str = "local",
    address: str | None = None,
    out=sys.stdout,
) -> Sweep:
    """Runs every run of `sweep` that is not finished; returns the updated sweep."""
    if backend not in ("local", "ray"):
        raise _usage(f"--backend must be 'local' or 'ray', got {backend!r}.")
    parallel = parallel or os.cpu_count() or 1
    os.makedirs(sweep.base_dir, exist_ok=True)
    write_experiment(sweep)
    todo = [run for run in sweep.runs if run["status"] != STATUS_FINISHED]
    for run in todo:
        if run["status"] == STATUS_RUNNING:  # an earlier driver died while it ran
            run["status"] = STATUS_INTERRUPTED
    sweep.write()
    progress = _Progress(sweep, parallel, out)
    done = len(sweep.runs) - len(todo)
    if not todo:
        print(f"sweep: all {done} runs are finished; nothing to do.", file=out, flush=True)
        return sweep
    again = sum(run["status"] == STATUS_FAILED for run in todo)
    resumed = sum(run["status"] == STATUS_INTERRUPTED for run in todo)
    print(
        f"sweep: {len(sweep.runs)} runs in {sweep.base_dir}: {done} finished, {resumed} to "
        f"resume, {again} failed to retry, {len(todo) - resumed - again} new; "
        f"{parallel} at once ({backend}).",
        file=out,
        flush=True,
    )
    runner: Callable = _run_local if backend == "local" else _run_ray
    args = (address,) if backend == "ray" else ()
    runner(sweep, todo, parallel, *args, progress)
    return sweep


def summary_table(sweep: Sweep) -> str:
    """A markdown table of the trials, best objective first."""
    rows = sorted(
        sweep.trials(),
        key=lambda t: -math.inf if t["objective"] is None else t["objective"],
        reverse=True,
    )
    lines = [
        "| trial | seeds finished | failed | final eval return (mean over seeds) |",
        "|---|---|---|---|",
    ]
    for t in rows:
        objective = "n/a" if t["objective"] is None else f"{t['objective']:.4g}"
        lines.append(
            f"| {t['trial']} | {t['finished']}/{t['runs']} | {t['failed']} | {objective} |"
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


# ----- the command line -------------------------------------------------------------------------


def _define_flags():
    from absl import flags

    import experiments

    flags.DEFINE_multi_string(
        "gin_file", [experiments.DEFAULT_GIN_FILE], "Gin config file(s); later ones win."
    )
    flags.DEFINE_multi_string("gin_bindings", [], "Bindings applied to every run.")
    flags.DEFINE_multi_string(
        "sweep",
        [],
        "A swept binding: 'key=[v1, v2]' (grid) or 'key=uniform(a, b)', 'key=loguniform(a, b)', "
        "'key=randint(a, b)' (random sweep, with --num_trials). Repeatable.",
    )
    flags.DEFINE_integer("seeds", 3, "Seeds per trial: 0..seeds-1.")
    flags.DEFINE_integer("num_trials", None, "A random sweep of this many trials (else a grid).")
    flags.DEFINE_integer("sweep_seed", 0, "Seed of a random sweep's draws.")
    flags.DEFINE_string(
        "base_dir", None, "The sweep's folder (default sweeps/<family>_<config>); again resumes."
    )
    flags.DEFINE_integer("parallel", None, "Runs at once (default: the number of cores).")
    flags.DEFINE_enum("backend", "local", ["local", "ray"], "Worker processes here, or Ray Tune.")
    flags.DEFINE_string("address", None, "Ray cluster address (--backend=ray); default local.")
    flags.DEFINE_bool("strict", False, "Fail a run, instead of warning, on unused bindings.")


def main(argv: list[str]) -> None:
    from absl import app, flags

    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    flag = flags.FLAGS
    try:
        sweep = define(
            flag.gin_file,
            flag.gin_bindings,
            flag.sweep,
            flag.seeds,
            flag.base_dir,
            flag.num_trials,
            flag.sweep_seed,
            flag.strict,
        )
        run_sweep(sweep, flag.parallel, flag.backend, flag.address)
    except RunError as error:
        print(f"experiments.sweep: error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the runs stopped with their checkpoints
        print(
            f"experiments.sweep: stopped; the unfinished runs are recorded in "
            f"{sweep.record_path}. Run the same command again to resume them.",
            file=sys.stderr,
        )
        sys.exit(130)
    print(summary_table(sweep), flush=True)
    print(f"Analyse it: python -m experiments.analyze {shlex.quote(sweep.base_dir)}", flush=True)
    report = failure_report(sweep)
    if report:
        print(f"experiments.sweep: error: {report}", file=sys.stderr)
        sys.exit(1)


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_main() -> None:
    from absl import app

    from experiments.analyze import quiet_tensorflow

    quiet_tensorflow()
    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # stops the runs as a Ctrl-C does
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run_main()
