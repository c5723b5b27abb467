"""Runs and sweeps read back into tables with confidence intervals, and plots.

  python -m experiments.analyze sweeps/cartpole_lr_tau [more folders ...] [--threshold=475]

A folder is a sweep (its sweep.json names the trials, seeds and swept values), one run folder,
or any folder holding run folders, grouped into trials by their trial key (storage/trials.py:
the operative config without the seed and the cadences), whatever the folders are called. Every
scalar is read at full resolution from the event files, with each run's config.gin. Per trial, over
its seeds (runs aligned on environment steps):

  final eval return    mean and IQM, each with a stratified-bootstrap 95% interval (rliable)
  AUC                  the eval curve's average over training (trapezoids), mean and interval
  steps to threshold   the first step whose eval return reaches --threshold (default: the
                       environment's registered reward_threshold), median over the seeds that
                       reach it, and how many do
  wall time            training seconds per run (from the logged throughput; restarts excluded)

Printed as markdown, saved as CSV (trials.csv, runs.csv) with PNG plots in --output_dir (default
<first folder>/analysis): learning_curves.png (IQM over seeds, 95% band), for a sweep
final_vs_<binding>.png per swept binding, and with two trials (or --compare=A,B)
comparison.png with the probability that B improves on A. On an adaptive search it adds
search.md (`search_report.py`): every trial with its state, the environment steps used and
Optuna's parameter importances; its pruned and failed trials stay out of the tables above.
"""

import dataclasses
import importlib
import math
import numbers
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from experiments import RunError, search_report, tables

if TYPE_CHECKING:  # imported where used: reading a run needs TensorFlow
    from framework.storage.run_directory import RunDirectory

# What the analysis imports beyond the default install: the analysis extra (setup.cfg).
_ANALYSIS_MODULES = ("pandas", "matplotlib", "rliable.library")
EVAL_TAG = "eval/episode_return"
SPEED_TAG = "train/steps_per_second"
# A sweep's own, beside its run folders.
_SWEEP_FOLDERS = {"logs", "ray_results", "analysis", "search"}


@dataclasses.dataclass
class Run:
    """One run folder: its trial, seed, config and every scalar it logged."""

    name: str
    trial: str
    seed: int | None
    folder: str
    config: str  # config.gin
    values: dict  # the swept bindings' values (a sweep's record), else {}
    scalars: dict[str, list[tuple[int, float]]]
    key: str | None = None  # its trial's key (framework/storage/trials.py); None without a config
    started: str = ""  # when its latest start began: the newest of a seed's runs counts

    def curve(self, tag: str = EVAL_TAG) -> tuple[np.ndarray, np.ndarray]:
        points = sorted(self.scalars.get(tag, []))
        return np.array([s for s, _ in points], float), np.array([v for _, v in points], float)

    def wall_time(self) -> float:
        """Training seconds: each logged interval's steps over its steps/s, summed (the time
        between a kill and a resume does not count)."""
        points = sorted(self.scalars.get(SPEED_TAG, []))
        seconds, previous = 0.0, 0
        for step, speed in points:
            if speed > 0:
                seconds += (step - previous) / speed
            previous = step
        return seconds if points else float("nan")

    def env_id(self) -> str | None:
        match = re.search(r"^make_env\.env_id\s*=\s*['\"]([^'\"]+)['\"]", self.config, re.M)
        return match.group(1) if match else None

    def frames_per_step(self) -> int:
        """Emulator frames an agent step: an Atari config's frame skip, else 1."""
        match = re.search(r"^make_atari_env\.frame_skip\s*=\s*(\d+)", self.config, re.M)
        return int(match.group(1)) if match else 1


def _seed_of(folder: "RunDirectory", config: str) -> int | None:
    """The seed its records name; else the config's (a folder without metadata.json)."""
    seed = folder.seed()
    if seed is not None:
        return seed
    match = re.search(r"^Runner\.seed\s*=\s*(\d+)", config, re.M)
    return int(match.group(1)) if match else None


def _run_folders(root: str) -> list[str]:
    from framework.storage.run_directory import RunDirectory

    if RunDirectory.holds_run(root):
        return [root]
    found = []
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and entry not in _SWEEP_FOLDERS | RunDirectory.FOLDERS:
            found += _run_folders(path)
    return found


def require_analysis_extra() -> None:
    """Raises RunError, in one paragraph, where a module of the analysis extra is missing (the
    quick start's `pip install -e .` installs what training needs, not this)."""
    missing = []
    for name in _ANALYSIS_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            missing.append((error.name or name).split(".")[0])  # or rliable's: scipy, arch
    if missing:
        names = ", ".join(repr(name) for name in dict.fromkeys(missing))
        raise RunError(
            f"The analysis needs the analysis extra (pandas, matplotlib and rliable), and this "
            f"Python ({sys.executable}) has no module named {names}. Install it with `pip "
            "install -e '.[analysis]'` in the repository (or `pip install 'pandas<3' matplotlib "
            "rliable`); training and sweeps run without it."
        )


def load(paths: Sequence[str], finished_only: bool = True) -> tuple[list[Run], list[str]]:
    """Every run under `paths`, with its scalars (all tags, every step) and config, in trials;
    and what was said about them (a seed run twice in a trial).

    Runs are one trial when their configs make one trial key (`storage/trials.py`: the same
    operative config but for the seed and the cadences), whatever their folders are called.
    A trial is named after its sweep trial or its folders (without seed and time stamp), with
    the bindings that tell it apart where two trials would share a name. With several paths,
    each trial's name starts with its folder's name, so that equal trial names stay apart.
    Runs of a sweep come with the values of its record; with `finished_only`, runs the record
    does not list as finished are left out.
    """
    from framework import console

    console.import_tensorflow()  # reading runs needs it: without its banners, as `train`
    import agents  # noqa: F401  (trial keys read defaults from the parts' signatures)
    import framework.runner  # noqa: F401
    from experiments.sweep_record import read_record
    from framework.storage.trials import readable_name

    runs = []
    for path in paths:
        path = os.path.abspath(path)
        if not os.path.isdir(path):
            raise RunError(f"{path} is not a folder: give run folders or sweep folders.")
        prefix = os.path.basename(path.rstrip(os.sep)) + "/" if len(paths) > 1 else ""
        record = read_record(path)
        if record is not None:
            # A search's pruned or failed trials are listed apart (`search_report`), their
            # finished seeds too: a trial's statistics never mix a pruned seed's curve.
            states = search_report.trial_states(record)
            entries = [
                (os.path.join(path, r["name"]), r["trial"], r["seed"], r["values"])
                for r in record["runs"]
                if not finished_only
                or (r["status"] == "finished" and states.get(r["trial"], "finished") == "finished")
            ]
        else:
            entries = [(folder, readable_name(folder), None, {}) for folder in _run_folders(path)]
        trial_runs = [_read_run(f, prefix + t, s, v) for f, t, s, v in entries if os.path.isdir(f)]
        runs += _in_trials(trial_runs)
    if not runs:
        raise RunError(
            f"No runs found under {', '.join(paths)}: a run folder has config.gin and "
            "TensorBoard event files; a sweep folder has sweep.json."
        )
    runs, notes = _newest_of_each_seed(runs)
    return sorted(runs, key=_table_order), notes


def _table_order(run: Run) -> tuple:
    """Trials by their swept values as numbers, then by name (its numbers by value); a trial's
    runs by seed."""
    values = tuple(tables.order(value) for value in run.values.values())
    return values, tables.natural(run.trial), tables.order(run.seed)


def _read_run(folder: str, name: str, seed: int | None, values: dict) -> Run:
    from framework.storage.run_directory import DamagedRecordError, RunDirectory, RunFolderError

    run_folder = RunDirectory(folder)
    try:  # a retired layout, a damaged record: each one's paragraph says what to do
        config = run_folder.read_config() or ""
        return Run(
            name=os.path.basename(folder),
            trial=name,
            seed=seed if seed is not None else _seed_of(run_folder, config),
            folder=folder,
            config=config,
            values=values,
            scalars=run_folder.scalars(),
            key=run_folder.trial_key(),
            started=run_folder.started(),
        )
    except (RunFolderError, DamagedRecordError) as error:
        raise RunError(str(error)) from None


def _in_trials(runs: list[Run]) -> list[Run]:
    """Names each run's trial: runs of one key share the name most of them were found under;
    where two keys would share a name, each gets the bindings that tell them apart (its key,
    where a config is missing to tell them by)."""
    from framework.storage import trials

    by_key: dict[str, list[Run]] = {}
    for run in runs:
        by_key.setdefault(run.key or f"name:{run.trial}", []).append(run)
    names = {}
    for key, members in by_key.items():
        found = [run.trial for run in members]
        names[key] = max(sorted(set(found)), key=found.count)
    for name in set(names.values()):
        keys = [key for key in by_key if names[key] == name]
        if len(keys) < 2:
            continue
        configs = [by_key[key][0].config for key in keys]
        parsed = [trials.trial_of(config) if config else None for config in configs]
        differing = trials.differences([p for p in parsed if p is not None])
        for key, trial in zip(keys, parsed, strict=True):
            if trial is None or not differing:
                names[key] = f"{name}[key={key}]"
            else:
                told = ", ".join(f"{n}={trial.bindings.get(n, 'default')}" for n in differing)
                names[key] = f"{name}[{told}]"
    for key, members in by_key.items():
        for run in members:
            run.trial = names[key]
    return runs


def _newest_of_each_seed(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """One run per seed and trial: the one started last counts (by the start time its records
    hold, else by folder name, which a default folder stamps with its time); the others are
    said, once per seed."""
    slots: dict[tuple[str, str | None, int], list[Run]] = {}
    for run in runs:
        if run.seed is not None:
            slots.setdefault((run.trial, run.key, run.seed), []).append(run)
    kept, notes = set(), []
    for (trial, _, seed), members in slots.items():
        newest = max(members, key=lambda run: (run.started, run.name))
        kept.add(id(newest))
        if len(members) > 1:
            others = ", ".join(run.folder for run in members if run is not newest)
            notes.append(
                f"Trial {trial} holds {len(members)} runs of seed {seed}: only the newest "
                f"counts, {newest.folder} (not {others})."
            )
    return [run for run in runs if run.seed is None or id(run) in kept], notes


def membership(runs: Sequence[Run]) -> str:
    """Which runs each trial holds, as lines for the console."""
    lines = []
    for trial in dict.fromkeys(run.trial for run in runs):
        members = [r for r in runs if r.trial == trial]
        listed = ", ".join(f"{r.name} (seed {r.seed})" for r in members)
        count = f"{len(members)} run{'s' if len(members) > 1 else ''}"
        lines.append(f"{trial} ({count}): {listed}")
    return "\n".join(lines)


def default_threshold(runs: Sequence[Run]) -> float | None:
    """The environment's registered reward_threshold (CartPole-v1: 475), if all runs share one."""
    import gymnasium

    import framework.parts.environments  # noqa: F401  (registers the bandit)

    thresholds = set()
    for run in runs:
        env_id = run.env_id()
        try:
            thresholds.add(gymnasium.spec(env_id).reward_threshold if env_id else None)
        except gymnasium.error.Error:
            thresholds.add(None)
    return thresholds.pop() if len(thresholds) == 1 else None


def run_table(runs: Sequence[Run], threshold: float | None, tag: str = EVAL_TAG):
    """One row per run: final and best eval return, AUC, steps to threshold, wall time."""
    import pandas as pd

    from experiments import statistics

    rows = []
    for run in runs:
        steps, values = run.curve(tag)
        rows.append(
            {
                "trial": run.trial,
                "seed": run.seed,
                "folder": run.folder,
                **run.values,
                "final_eval_return": statistics.final_value(steps, values),
                "best_eval_return": float(np.max(values)) if len(values) else math.nan,
                "auc": statistics.area_under_curve(steps, values),
                "steps_to_threshold": (
                    math.nan
                    if threshold is None
                    else statistics.steps_to_threshold(steps, values, threshold)
                ),
                "final_step": float(steps.max()) if len(steps) else math.nan,
                "wall_time_s": run.wall_time(),
            }
        )
    return pd.DataFrame(rows)


def trial_table(runs_frame, reps: int = 20_000, seed: int = 0):
    """One row per trial over its seeds: final eval return (mean and IQM, 95% CIs), AUC (mean,
    95% CI), steps to threshold (median over the seeds that reach it, and how many), wall time."""
    import pandas as pd

    from experiments import statistics

    rows = []
    for trial, group in runs_frame.groupby("trial", sort=False):
        final = group["final_eval_return"].to_numpy(float)
        mean = statistics.bootstrap_interval(final, statistics.mean, reps, seed)
        iqm = statistics.bootstrap_interval(final, statistics.iqm, reps, seed)
        auc = statistics.bootstrap_interval(
            group["auc"].to_numpy(float), statistics.mean, reps, seed
        )
        reached = group["steps_to_threshold"].to_numpy(float)
        reached = reached[np.isfinite(reached)]
        values = {
            key: group[key].iloc[0]
            for key in group.columns
            if key not in _RUN_COLUMNS and not key.startswith("_")
        }
        rows.append(
            {
                "trial": trial,
                **values,
                "seeds": int(np.isfinite(final).sum()),
                "final_mean": mean[0],
                "final_mean_low": mean[1],
                "final_mean_high": mean[2],
                "final_iqm": iqm[0],
                "final_iqm_low": iqm[1],
                "final_iqm_high": iqm[2],
                "auc_mean": auc[0],
                "auc_mean_low": auc[1],
                "auc_mean_high": auc[2],
                "steps_to_threshold_median": float(np.median(reached))
                if len(reached)
                else math.nan,
                "seeds_reaching_threshold": len(reached),
                "wall_time_s_mean": float(group["wall_time_s"].mean()),
            }
        )
    return pd.DataFrame(rows)


_RUN_COLUMNS = {
    "trial",
    "seed",
    "folder",
    "final_eval_return",
    "best_eval_return",
    "auc",
    "steps_to_threshold",
    "final_step",
    "wall_time_s",
}


def markdown(trials, threshold: float | None) -> str:
    """The trial table as markdown, intervals in brackets, figures to four significant digits;
    a trial with too few seeds for its intervals to mean much is marked, and the mark said."""
    from experiments import statistics

    def interval(row, name) -> str:
        point, low, high = (tables.significant(row[name + end]) for end in ("", "_low", "_high"))
        return f"{point} [{low}, {high}]"

    swept = [c for c in trials.columns if c not in _TRIAL_COLUMNS]
    head = [
        "trial",
        *swept,
        "seeds",
        "final return: mean [95% CI]",
        "IQM [95% CI]",
        "AUC [95% CI]",
        f"steps to {tables.significant(threshold)} (median, reached)",
        "wall time (s)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in trials.iterrows():
        few = row["seeds"] < statistics.FEW_SEEDS
        steps = tables.significant(row["steps_to_threshold_median"])
        cells = [
            str(row["trial"]),
            *[tables.cell(row[c]) for c in swept],
            f"{row['seeds']}{_TOO_FEW if few else ''}",
            interval(row, "final_mean"),
            interval(row, "final_iqm"),
            interval(row, "auc_mean"),
            f"{steps} ({row['seeds_reaching_threshold']}/{row['seeds']})",
            tables.significant(row["wall_time_s_mean"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if (trials["seeds"] < statistics.FEW_SEEDS).any():
        lines += ["", too_few_seeds_note()]
    return "\n".join(lines)


_TOO_FEW = " (too few)"


def too_few_seeds_note() -> str:
    """What a trial marked "too few" means (experiments/statistics.py, FEW_SEEDS)."""
    from experiments import statistics

    return (
        f"Seeds marked{_TOO_FEW}: fewer than {statistics.FEW_SEEDS}, and a 95% bootstrap interval "
        "over so few values holds the true value far less often than 95% of the time (over 1 "
        "seed it is the value itself; over 2, their range, right half the time; over 4, about "
        "78%). Read it as the range seen, not as confidence, or run "
        f"{statistics.FEW_SEEDS} seeds or more."
    )


_TRIAL_COLUMNS = {
    "trial",
    "seeds",
    *(f"{m}{s}" for m in ("final_mean", "final_iqm", "auc_mean") for s in ("", "_low", "_high")),
    "steps_to_threshold_median",
    "seeds_reaching_threshold",
    "wall_time_s_mean",
}


# ----- plots ------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _trial_curves(runs: Sequence[Run], trial: str, tag: str):
    from experiments import statistics

    curves = [r.curve(tag) for r in runs if r.trial == trial and len(r.curve(tag)[0])]
    return statistics.align(curves)


def plot_learning_curves(
    runs: Sequence[Run], trials: Sequence[str], path: str, threshold=None, tag=EVAL_TAG, title=""
) -> None:
    """Per trial: the IQM over seeds at each environment step, with its 95% bootstrap band."""
    from experiments import statistics

    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for trial in trials:
        steps, values = _trial_curves(runs, trial, tag)
        if not len(steps):
            continue
        centre, low, high = statistics.curve_band(values)
        (line,) = axes.plot(steps, centre, label=f"{trial} ({len(values)} seeds)")
        axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    if threshold is not None:
        axes.axhline(threshold, color="gray", linestyle="--", linewidth=1, label="threshold")
    axes.set_xlabel("environment steps")
    frames_axis(axes, {run.frames_per_step() for run in runs if run.trial in trials})
    axes.set_ylabel(f"{tag} (IQM over seeds, 95% CI)")
    axes.set_title(title)
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def frames_axis(axes, frame_skips: set[int]):
    """A top axis in emulator frames where every plotted run skips the same number of frames
    a step (Atari's 4): the peers' Atari curves are read against frames, ours against agent
    steps. None where the runs differ or skip none."""
    if len(frame_skips) != 1 or (skip := next(iter(frame_skips))) == 1:
        return None
    top = axes.secondary_xaxis("top", functions=(lambda s: s * skip, lambda f: f / skip))
    top.set_xlabel(f"emulator frames ({skip} a step)")
    return top


def parameter_axis(values: Sequence) -> str:
    """How a swept binding's values are plotted: "log" where they are positive numbers that
    span a decade or more (a learning rate of 1e-3 and 1e-2: a linear axis would crowd the small
    ones at its left edge), "linear" for other numbers, else "categories" (strings, booleans,
    references)."""
    numeric = all(
        isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_) and math.isfinite(v)
        for v in values
    )
    if not numeric:
        return "categories"
    if min(values) > 0 and max(values) / min(values) >= 10:
        return "log"
    return "linear"


def plot_final_vs_parameter(runs_frame, trials_frame, parameter: str, path: str) -> None:
    """Every run's final eval return against one swept binding (dots), and each trial's IQM
    with its 95% interval (bars); a log axis when the values span a decade or more."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    values = list(trials_frame[parameter])
    axis = parameter_axis(values)
    if axis == "categories":
        categories = sorted({str(v) for v in values})
        x_of = {v: categories.index(str(v)) for v in values}
        axes.set_xticks(range(len(categories)), categories, rotation=30, ha="right")
    else:
        x_of = {v: float(v) for v in values}
        if axis == "log":
            axes.set_xscale("log")
            ticks = sorted(set(x_of.values()))
            if len(ticks) <= 8:  # a grid's values, each labelled (a random sweep's: decades)
                axes.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
                axes.minorticks_off()
    axes.scatter(
        [x_of[v] for v in runs_frame[parameter]],
        runs_frame["final_eval_return"],
        s=12,
        color="gray",
        alpha=0.6,
        label="runs",
    )
    x = np.array([x_of[v] for v in trials_frame[parameter]])
    centre = trials_frame["final_iqm"].to_numpy(float)
    errors = np.abs(
        np.stack([centre - trials_frame["final_iqm_low"], trials_frame["final_iqm_high"] - centre])
    )
    axes.errorbar(x, centre, yerr=errors, fmt="o", capsize=4, label="trial IQM, 95% CI")
    axes.set_xlabel(parameter)
    axes.set_ylabel("final eval return")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def compare(runs_frame, a: str, b: str, reps: int = 20_000, seed: int = 0):
    """P(B > A) on the final eval return, (point, low, high)."""
    from experiments import statistics

    scores = {
        t: runs_frame.loc[runs_frame["trial"] == t, "final_eval_return"].to_numpy(float)
        for t in (a, b)
    }
    return statistics.probability_of_improvement(scores[b], scores[a], reps, seed)


# ----- the whole analysis -----------------------------------------------------------------------


@dataclasses.dataclass
class Analysis:
    runs: list[Run]
    runs_frame: object  # pandas.DataFrame
    trials_frame: object
    threshold: float | None
    table: str
    files: list[str]
    comparison: tuple[str, str, tuple[float, float, float]] | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # duplicated seeds, said
    searches: list[str] = dataclasses.field(default_factory=list)  # a search's trials, each


def analyze(
    paths: Sequence[str],
    output_dir: str | None = None,
    threshold: float | None = None,
    compare_trials: Sequence[str] = (),
    reps: int = 20_000,
    seed: int = 0,
    tag: str = EVAL_TAG,
) -> Analysis:
    """Tables and plots for the runs under `paths`, written to `output_dir`."""
    require_analysis_extra()
    from experiments import statistics

    runs, notes = load(paths)
    threshold = threshold if threshold is not None else default_threshold(runs)
    runs_frame = run_table(runs, threshold, tag)
    trials_frame = trial_table(runs_frame, reps, seed)
    output_dir = output_dir or os.path.join(paths[0], "analysis")
    _make_output_dir(output_dir)
    files = [os.path.join(output_dir, name) for name in ("runs.csv", "trials.csv")]
    runs_frame.to_csv(files[0], index=False)
    trials_frame.to_csv(files[1], index=False)
    trial_names = list(trials_frame["trial"])
    curves = os.path.join(output_dir, "learning_curves.png")
    plot_learning_curves(runs, trial_names, curves, threshold, tag, os.path.basename(paths[0]))
    files.append(curves)
    swept = [c for c in trials_frame.columns if c not in _TRIAL_COLUMNS]
    for parameter in swept:
        safe = re.sub(r"[^\w.-]", "_", parameter)
        path = os.path.join(output_dir, f"final_vs_{safe}.png")
        plot_final_vs_parameter(runs_frame, trials_frame, parameter, path)
        files.append(path)
    comparison = None
    if compare_trials or len(trial_names) == 2:
        a, b = compare_trials or trial_names
        unknown = [t for t in (a, b) if t not in trial_names]
        if unknown:
            raise RunError(
                f"--compare names {', '.join(unknown)}, which no run belongs to; the trials "
                f"are: {', '.join(trial_names)}."
            )
        comparison = (a, b, compare(runs_frame, a, b, reps, seed))
        seeds = trials_frame.set_index("trial")["seeds"]
        if min(seeds[a], seeds[b]) < statistics.FEW_SEEDS:
            plural = "s" if seeds[b] != 1 else ""
            notes.append(
                f"P({b} > {a}) compares {seeds[b]} seed{plural} with {seeds[a]}: too few for "
                "its interval to mean much (see the note below the table)."
            )
        point, low, high = comparison[2]
        path = os.path.join(output_dir, "comparison.png")
        plot_learning_curves(
            runs,
            [a, b],
            path,
            threshold,
            tag,
            f"P({b} > {a}) = {point:.2f} [{low:.2f}, {high:.2f}]",
        )
        files.append(path)
    table = markdown(trials_frame, threshold)
    with open(os.path.join(output_dir, "trials.md"), "w") as f:
        f.write(table + "\n")
    files.append(os.path.join(output_dir, "trials.md"))
    searches = _search_sections(paths)
    if searches:
        path = os.path.join(output_dir, "search.md")
        with open(path, "w") as f:
            f.write("\n\n".join(searches) + "\n")
        files.append(path)
    return Analysis(
        runs, runs_frame, trials_frame, threshold, table, files, comparison, notes, searches
    )


def _search_sections(paths: Sequence[str]) -> list[str]:
    """For each path holding an adaptive search: its trials, states, steps and importances."""
    from experiments.sweep_record import read_record

    sections = []
    for path in paths:
        record = read_record(os.path.abspath(path))
        if record is not None and record.get("search_trials"):
            title = f"Search {os.path.basename(os.path.abspath(path).rstrip(os.sep))}"
            sections.append(f"{title}:\n\n{search_report.search_section(path, record)}")
    return sections


def _make_output_dir(output_dir: str) -> None:
    """The folder for the tables and plots, made where missing; RunError where it cannot be."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        reason = "it is a file"
    else:
        try:
            os.makedirs(output_dir, exist_ok=True)
            return
        except OSError as error:
            reason = f"{error.strerror or error} ({error.filename or output_dir})"
    raise RunError(
        f"--output_dir={output_dir} cannot hold the analysis's tables and plots: {reason}. "
        "Give a folder (made if missing) where this user may write; nothing was written."
    )


def _define_flags():
    from absl import flags

    flags.DEFINE_float("threshold", None, "Eval return that counts as solved (default: the env's).")
    flags.DEFINE_string(
        "output_dir", None, "Where tables and plots go (default <folder>/analysis)."
    )
    flags.DEFINE_list("compare", [], "Two trials A,B: plots both and P(B > A).")
    flags.DEFINE_integer("reps", 20_000, "Bootstrap replications.")
    flags.DEFINE_integer("bootstrap_seed", 0, "Seed of the bootstrap (fixed: same CIs each time).")
    flags.DEFINE_string("tag", EVAL_TAG, "The scalar to analyse.")


def main(argv: list[str]) -> None:
    from absl import app, flags

    flag = flags.FLAGS
    if len(argv) < 2:
        raise app.UsageError("Give one or more run or sweep folders.")
    if flag.compare and len(flag.compare) != 2:
        raise app.UsageError(f"--compare takes two trials A,B; got {flag.compare}.")
    try:
        result = analyze(
            argv[1:],
            flag.output_dir,
            flag.threshold,
            flag.compare,
            flag.reps,
            flag.bootstrap_seed,
            flag.tag,
        )
    except RunError as error:
        print(f"experiments.analyze: error: {error}", file=sys.stderr)
        sys.exit(1)
    print(result.table)
    print("\nTrials and their runs:\n" + membership(result.runs))
    for note in result.notes:
        print(f"\nNote: {note}")
    for section in result.searches:
        print(f"\n{section}")
    if result.comparison:
        a, b, (point, low, high) = result.comparison
        print(f"\nP({b} > {a}) on the final eval return: {point:.3f} [{low:.3f}, {high:.3f}]")
    print("\nWrote: " + ", ".join(result.files))


def run_main() -> None:
    from absl import app, logging

    logging.set_verbosity(logging.WARNING)  # rliable logs a line per bootstrap
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run_main()
