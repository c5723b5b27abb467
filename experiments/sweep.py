"""Sweeps over gin bindings and seeds: every trial run once per seed, locally or on Ray Tune;
a grid, a random sweep, or an adaptive search that prunes the trials falling behind.

  python -m experiments.sweep --gin_file=gin_configs/dqn/cartpole.gin \\
      --sweep='optimizers.Adam.learning_rate=[1e-3, 3e-4]' --sweep='SoftUpdate.tau=[0.005, 0.05]' \\
      --seeds=5 --base_dir=sweeps/cartpole_lr_tau

A grid sweep (`--search=grid`) runs the product of the `--sweep` lists; with `--num_trials=N`
it is a random sweep instead (`--search=random`): N trials, each binding drawn from its list or
range (`uniform(a, b)`, `loguniform(a, b)`, `randint(a, b)` with b excluded), from
`--sweep_seed`. `--search=tpe --num_trials=N` is an adaptive search (`search.py`): each trial
suggested by Optuna's TPE from the trials before it (a list is a categorical choice), pruned at
its own evaluations when it falls behind (`--pruner=median`), reproducible whatever `--parallel`
is and resumed exactly after a kill (`sweep_search.py`). Every trial runs once per seed
(0..seeds-1): seeds are an axis of the sweep, and a trial's objective is over its seeds (the
mean of the final eval return; a search's `--objective`), never one seed's. The best trial is
written as `best.gin`; `--confirm_seeds=N` trains it again with N new seeds.

    <base_dir>/
      sweep.json                    the record: every run's bindings, seed, status, result, error
                                    (a search's: its trials, their states, values and curves)
      best.gin                      the best trial, for experiments.run
      search.db                     a search's Optuna study (optuna-dashboard reads it)
      search/<trial>/seed<k>.json   a search trial's eval curves, read by its seeds' pruners
      confirm_<trial>/              --confirm_seeds: a sweep of best.gin on new seeds
      <trial>_seed<k>/              an ordinary run folder per trial and seed (one TensorBoard
                                    run each), with the sweep's record of it: the HParams
                                    columns of the whole sweep and, once it ended, its result
      logs/<trial>_seed<k>.log      each run's output
      ray_results/                  Ray Tune's own records (--backend=ray), and ray.log: what
                                    Ray and Tune print, kept off the console

Each run is a fresh process (`--parallel` at once, by default one per core), in the driver's
process group: a Ctrl-C or a killed driver stops them all. A failing run (a bad binding value,
a NaN, a crash) is recorded with its error and the others go on. Running the same command again
skips finished runs, resumes unfinished ones (stopped by a signal or a killed driver) from their
checkpoints, and retries failed ones (a search's failed trials stay failed: the trials after
them were suggested knowing it). Then `python -m experiments.analyze <base_dir>`.
"""

import os
import shlex
import signal
import sys

from experiments import quiet

quiet.import_tensorflow()  # the record reads and writes event files: TF, without its banners

from experiments import RunError, search  # noqa: E402
from experiments.sweep_backends import SweepProgress, run_local, run_ray  # noqa: E402
from experiments.sweep_best import confirm, confirmation_text, write_best_gin  # noqa: E402
from experiments.sweep_plan import usage_error  # noqa: E402
from experiments.sweep_record import (  # noqa: E402
    STATUS_RUNNING,
    Sweep,
    define,
    failure_report,
    summary_table,
)
from experiments.sweep_search import RunQueue, SearchSchedule  # noqa: E402
from experiments.trial import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED  # noqa: E402


def run_sweep(
    sweep: Sweep,
    parallel: int | None = None,
    backend: str = "local",
    address: str | None = None,
    out=sys.stdout,
    timeout: float | None = None,
) -> Sweep:
    """Runs every run of `sweep` that is not finished (a search: until its --num_trials trials
    have ended, or `timeout` seconds); returns the updated sweep."""
    if backend not in ("local", "ray"):
        raise usage_error(f"--backend must be 'local' or 'ray', got {backend!r}.")
    if parallel is not None and parallel < 1:
        raise usage_error(
            f"--parallel must be >= 1 (runs at once), got {parallel}; leave it out for one "
            "per core."
        )
    if timeout is not None and (sweep.search is None or timeout <= 0):
        raise usage_error(
            f"--timeout={timeout} is for --search=tpe, in seconds > 0: no trial is suggested "
            "after it (the running ones finish)."
        )
    parallel = parallel or os.cpu_count() or 1
    os.makedirs(sweep.base_dir, exist_ok=True)
    for run in sweep.runs:
        if run["status"] == STATUS_RUNNING:  # an earlier driver died while it ran
            run["status"] = STATUS_INTERRUPTED
    sweep.write()
    progress = SweepProgress(sweep, parallel, out)
    if sweep.search is not None:
        return _run_search(sweep, parallel, backend, address, progress, timeout)
    todo = [run for run in sweep.runs if run["status"] != STATUS_FINISHED]
    done = len(sweep.runs) - len(todo)
    if not todo:
        print(f"sweep: all {done} runs are finished; nothing to do.", file=out, flush=True)
        write_best_gin(sweep)
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
    if backend == "ray":
        run_ray(sweep, todo, parallel, address, progress)
    else:
        run_local(sweep, RunQueue(todo), parallel, progress)
    write_best_gin(sweep)
    return sweep


def _run_search(
    sweep: Sweep,
    parallel: int,
    backend: str,
    address: str | None,
    progress: SweepProgress,
    timeout: float | None,
) -> Sweep:
    """An adaptive search: its trials suggested and pruned as `sweep_search` says (local), or
    by Ray Tune's OptunaSearch and ASHA (`sweep_ray_search`)."""
    trials = sweep.search_trials
    ended = sum(trial["state"] in search.ENDED for trial in trials)
    resumed = sum(run["status"] == STATUS_INTERRUPTED for run in sweep.runs)
    print(
        f"search: {sweep.num_trials} trials in {sweep.base_dir} ({sweep.search.describe()}, "
        f"{describe_seeds(sweep)}): {ended} ended, {resumed} run{'' if resumed == 1 else 's'} "
        f"to resume; {parallel} runs at once, {sweep.search.concurrent_trials} trials at a "
        f"time ({backend}).",
        file=progress.out,
        flush=True,
    )
    if backend == "ray":
        from experiments.sweep_ray_search import run_ray_search

        note = run_ray_search(sweep, parallel, address, progress, timeout)
    else:
        schedule = SearchSchedule(sweep, timeout)
        run_local(sweep, schedule, parallel, progress)
        note = schedule.note()
    if note:
        print(f"search: {note}", file=progress.out, flush=True)
    write_best_gin(sweep)
    return sweep


def describe_seeds(sweep: Sweep) -> str:
    count = len(sweep.seeds)
    return f"{count} seed{'s' if count > 1 else ''} a trial"


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
    flags.DEFINE_enum(
        "search",
        None,
        ["grid", "random", "tpe"],
        "grid: every combination of the lists (no --num_trials); random: --num_trials draws; "
        "tpe: --num_trials trials, each suggested by Optuna's TPE from the ones before it. "
        "Default: random with --num_trials, else grid.",
    )
    flags.DEFINE_integer("num_trials", None, "Trials of a random sweep or a search.")
    flags.DEFINE_integer("sweep_seed", 0, "Seed of a random sweep's draws, a search's suggestions.")
    # An adaptive search's (--search=tpe); part of what makes it the same search.
    defaults = search.SearchSettings()
    flags.DEFINE_enum(
        "pruner",
        defaults.pruner,
        list(search.PRUNERS),
        "median: stop a trial whose mean eval return over its seeds falls below the median of "
        "the finished trials at the same step; none: run every trial to its end.",
    )
    flags.DEFINE_enum(
        "prune_on",
        defaults.prune_on,
        list(search.PRUNE_ON),
        "What the median pruner compares: a trial's latest eval return (RL curves also fall), "
        "or its best so far (Optuna's own median pruner).",
    )
    flags.DEFINE_integer(
        "n_startup_trials",
        defaults.n_startup_trials,
        "Random trials before TPE models the others (--num_trials or more: a random search).",
    )
    flags.DEFINE_integer(
        "prune_after_trials",
        defaults.prune_after_trials,
        "Finished trials a trial is compared with before the median pruner may stop it.",
    )
    flags.DEFINE_integer(
        "concurrent_trials",
        defaults.concurrent_trials,
        "Trial k is suggested once trials 0..k-this have ended: at most this many trials run "
        "at once, whatever --parallel is, so the suggestions do not depend on it.",
    )
    flags.DEFINE_enum(
        "objective",
        defaults.objective,
        list(search.OBJECTIVES),
        "A trial's value: each seed's final eval return, the mean of its curve's last quarter "
        "(tail) or of its whole curve (mean), then their mean (their IQM "
        f"from {search.IQM_SEEDS} seeds).",
    )
    flags.DEFINE_float(
        "min_prune_fraction",
        defaults.min_prune_fraction,
        "No prune before this fraction of Runner.num_steps.",
    )
    flags.DEFINE_float(
        "timeout", None, "Seconds after which a search suggests no more trials (this start)."
    )
    flags.DEFINE_string(
        "storage", None, "The search's Optuna storage URL (default sqlite:///<base_dir>/search.db)."
    )
    flags.DEFINE_integer(
        "confirm_seeds",
        None,
        "After the sweep, train its best.gin with this many new seeds and report their mean and "
        "95% CI beside the sweep's estimate (the analysis extra).",
    )
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
    sweep = None
    try:
        _check_search_flags(flag)
        settings = None
        if flag.search == "tpe":
            settings = search.SearchSettings(
                pruner=flag.pruner,
                prune_on=flag.prune_on,
                n_startup_trials=flag.n_startup_trials,
                prune_after_trials=flag.prune_after_trials,
                concurrent_trials=flag.concurrent_trials,
                objective=flag.objective,
                min_prune_fraction=flag.min_prune_fraction,
            )
        sweep = define(
            flag.gin_file,
            flag.gin_bindings,
            flag.sweep,
            flag.seeds,
            flag.base_dir,
            flag.num_trials,
            flag.sweep_seed,
            flag.strict,
            flag.search,
            settings,
            flag.storage,
        )
        how = {"parallel": flag.parallel, "backend": flag.backend, "address": flag.address}
        run_sweep(sweep, timeout=flag.timeout, **how)
        confirmation = None
        if flag.confirm_seeds:
            confirmation = confirm(sweep, flag.confirm_seeds, run_sweep, **how)
    except RunError as error:
        print(f"experiments.sweep: error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the runs stopped with their checkpoints
        where = f"in {sweep.record_path}" if sweep else "nowhere: none had started"
        print(
            f"experiments.sweep: stopped; the unfinished runs are recorded {where}. Run the "
            "same command again to resume them.",
            file=sys.stderr,
        )
        sys.exit(130)
    print(summary_table(sweep), flush=True)
    if confirmation:
        print(f"Confirmed: {confirmation_text(confirmation)}", flush=True)
    print(f"Analyse it: python -m experiments.analyze {shlex.quote(sweep.base_dir)}", flush=True)
    report = failure_report(sweep)
    finished = any(t["objective"] is not None for t in sweep.trials())
    if report and sweep.search is not None and finished:  # failed trials are the search's own
        print(f"experiments.sweep: note: {report}", file=sys.stderr)
    elif report:
        print(f"experiments.sweep: error: {report}", file=sys.stderr)
        sys.exit(1)


_SEARCH_FLAGS = (
    "pruner",
    "prune_on",
    "n_startup_trials",
    "prune_after_trials",
    "concurrent_trials",
    "objective",
    "min_prune_fraction",
    "timeout",
    "storage",
)


def _check_search_flags(flag) -> None:
    """The search's own flags, given without --search=tpe, would be ignored: refused instead.
    --confirm_seeds needs the analysis extra (its interval): checked before anything runs."""
    given = [name for name in _SEARCH_FLAGS if flag[name].present]
    if given and flag.search != "tpe":
        raise usage_error(
            f"{', '.join('--' + name for name in given)} {'is' if len(given) == 1 else 'are'} "
            f"for an adaptive search: add --search=tpe (this is a "
            f"{flag.search or ('random sweep' if flag.num_trials else 'grid')})."
        )
    if flag.confirm_seeds is not None:
        if flag.confirm_seeds < 1:
            raise usage_error(f"--confirm_seeds must be >= 1, got {flag.confirm_seeds}.")
        from experiments.analyze import require_analysis_extra

        require_analysis_extra()


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_main() -> None:
    from absl import app

    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # stops the runs as a Ctrl-C does
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run_main()
