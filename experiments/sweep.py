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
checkpoints, and retries failed ones. Then `python -m experiments.analyze <base_dir>`.
"""

import os
import shlex
import signal
import sys
from collections.abc import Callable

from experiments import quiet

quiet.import_tensorflow()  # the record reads and writes event files: TF, without its banners

from experiments import RunError  # noqa: E402
from experiments.sweep_backends import SweepProgress, run_local, run_ray  # noqa: E402
from experiments.sweep_plan import usage_error  # noqa: E402
from experiments.sweep_record import (  # noqa: E402
    STATUS_RUNNING,
    Sweep,
    define,
    failure_report,
    summary_table,
)
from experiments.trial import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED  # noqa: E402


def run_sweep(
    sweep: Sweep,
    parallel: int | None = None,
    backend: str = "local",
    address: str | None = None,
    out=sys.stdout,
) -> Sweep:
    """Runs every run of `sweep` that is not finished; returns the updated sweep."""
    if backend not in ("local", "ray"):
        raise usage_error(f"--backend must be 'local' or 'ray', got {backend!r}.")
    if parallel is not None and parallel < 1:
        raise usage_error(
            f"--parallel must be >= 1 (runs at once), got {parallel}; leave it out for one "
            "per core."
        )
    parallel = parallel or os.cpu_count() or 1
    os.makedirs(sweep.base_dir, exist_ok=True)
    todo = [run for run in sweep.runs if run["status"] != STATUS_FINISHED]
    for run in todo:
        if run["status"] == STATUS_RUNNING:  # an earlier driver died while it ran
            run["status"] = STATUS_INTERRUPTED
    sweep.write()
    progress = SweepProgress(sweep, parallel, out)
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
    runner: Callable = run_local if backend == "local" else run_ray
    args = (address,) if backend == "ray" else ()
    runner(sweep, todo, parallel, *args, progress)
    return sweep


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

    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # stops the runs as a Ctrl-C does
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run_main()
