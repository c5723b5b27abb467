"""The adaptive search's figures on DQN CartPole (issue 42's "what it must show"): for each sweep
seed, the same 24-trial TPE search with the median pruner and without it, and a random search of
as many trials, each of 1 seed a trial over the learning rate (log-uniform) and the target
period; each one's best.gin confirmed with 3 new seeds. Prints, per search, the environment
steps it used, its best trial and value, and the confirmed mean with its 95% interval; then in
how many of the sweep seeds each search's best.gin confirmed at --confirm_bar (the issue's 400).
`--prune_on=best` prunes on each trial's best eval return so far (Optuna's own median pruner)
instead of its latest, in folders of their own. `--objective=mean` runs the TPE searches on
each run's mean eval return (the area under its curve), `--objective=tail` on the mean of its
last quarter, in folders of their own, and confirms their best.gin by that and by the final
return; the random search, which picks by the final return, is the same one.
`--seeds_per_trial=2` judges each trial on the mean of two seeds (beyond the issue's one-seed
protocol), and `--searches=tpe_median` runs only the pruned search.

  python -m experiments.search_cartpole [--base_dir=searches] [--num_trials=24] ...

Every search is an ordinary sweep folder under --base_dir (resumed when started again, read by
`experiments.analyze`); the defaults are the issue's (50k steps, an evaluation every 5k).
"""

import os
import sys

from experiments import quiet

quiet.import_tensorflow()

from experiments import RunError, search, search_report  # noqa: E402
from experiments.sweep import run_sweep  # noqa: E402
from experiments.sweep_best import confirm, confirmation_text  # noqa: E402
from experiments.sweep_record import define, read_record  # noqa: E402

CONFIG = "gin_configs/dqn/cartpole.gin"
SPACE = [
    "optimizers.Adam.learning_rate=loguniform(1e-4, 1e-2)",
    "HardUpdate.period=[16, 64, 128, 256, 1024]",  # gradient steps between two copies
]
SEARCHES = {  # name: (--search, --pruner)
    "tpe_median": ("tpe", "median"),
    "tpe_none": ("tpe", "none"),
    "random": ("random", None),
}


def run_one(name: str, sweep_seed: int, flag) -> dict:
    """One search, run (or resumed) and confirmed; its figures."""
    kind, pruner = SEARCHES[name]
    settings = None
    if kind == "tpe":
        settings = search.SearchSettings(
            pruner=pruner, prune_on=flag.prune_on, objective=flag.objective
        )
        if pruner != "none" and flag.prune_on != search.SearchSettings.prune_on:
            name = f"{name}_{flag.prune_on}"
        if flag.objective != "final":
            name = f"{name}_{flag.objective}"
    if flag.seeds_per_trial != 1:
        name = f"{name}_{flag.seeds_per_trial}seeds"
    # A random search picks its best by the final return whatever --objective: one folder.
    base_dir = os.path.join(flag.base_dir, f"{name}_seed{sweep_seed}")
    bindings = [
        f"Runner.num_steps = {flag.num_steps}",
        f"Runner.eval_interval = {flag.eval_interval}",
    ]
    sweep = define(
        [CONFIG],
        bindings,
        SPACE,
        seeds=flag.seeds_per_trial,
        base_dir=base_dir,
        num_trials=flag.num_trials,
        sweep_seed=sweep_seed,
        search_kind=kind,
        settings=settings,
    )
    run_sweep(sweep, parallel=flag.parallel)
    confirmed = confirm(sweep, flag.confirm_seeds, run_sweep, parallel=flag.parallel)
    print(f"{name}, sweep seed {sweep_seed}: {confirmation_text(confirmed)}", flush=True)
    return {
        "search": name,
        "sweep_seed": sweep_seed,
        "env_steps": search_report.env_steps_used(read_record(sweep.base_dir)),
        **confirmed,
    }


def table(rows: list[dict], bar: float = 400.0) -> str:
    """The searches' figures a row each; the share of steps the pruner saved per sweep seed; and,
    per search, in how many sweep seeds its best.gin's confirmed final return reached `bar`."""
    lines = [
        "| search | sweep seed | env steps | best trial | its value (its seeds) | "
        "confirmed: mean [95% CI] (new seeds) | confirmed final return |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['search']} | {row['sweep_seed']} | {row['env_steps']:,} | {row['trial']} | "
            f"{row['estimate']:.1f} ({row['metric']}) | {_interval(row)} "
            f"({len(row['scores'])}) | {_interval(row.get('final', row))} |"
        )
    for seed in sorted({row["sweep_seed"] for row in rows}):
        steps = {row["search"]: row["env_steps"] for row in rows if row["sweep_seed"] == seed}
        pruned = next((s for name, s in steps.items() if name.startswith("tpe_median")), None)
        unpruned = next((s for name, s in steps.items() if name.startswith("tpe_none")), None)
        if pruned is None or unpruned is None:
            continue
        lines.append(
            f"\nSweep seed {seed}: TPE with the median pruner used {pruned / unpruned:.0%} of "
            "the environment steps of the same search without it."
        )
    reached: dict[str, tuple[int, int]] = {}  # search: (sweep seeds at the bar, sweep seeds)
    for row in rows:
        hits, seeds = reached.get(row["search"], (0, 0))
        reached[row["search"]] = (hits + (row.get("final", row)["mean"] >= bar), seeds + 1)
    counts = ", ".join(f"{name} {hits}/{seeds}" for name, (hits, seeds) in reached.items())
    lines.append(f"\nConfirmed mean final return >= {bar:g}, in sweep seeds: {counts}.")
    return "\n".join(lines)


def _interval(figures: dict) -> str:
    return f"{figures['mean']:.1f} [{figures['low']:.1f}, {figures['high']:.1f}]"


def _define_flags():
    from absl import flags

    flags.DEFINE_string("base_dir", "searches/dqn_cartpole", "Where the searches' folders go.")
    flags.DEFINE_integer("num_trials", 24, "Trials of each search.")
    flags.DEFINE_integer("num_steps", 50_000, "Runner.num_steps of each run.")
    flags.DEFINE_integer("eval_interval", 5_000, "Runner.eval_interval of each run.")
    flags.DEFINE_list("sweep_seeds", ["0", "1"], "The sweep seeds, one search of each kind each.")
    flags.DEFINE_integer("confirm_seeds", 3, "New seeds for each search's best.gin.")
    flags.DEFINE_integer(
        "seeds_per_trial",
        1,
        "Seeds of each trial, judged on their mean (the issue's protocol: 1); the searches' "
        "folders are named by it when it is not 1.",
    )
    flags.DEFINE_list(
        "searches", list(SEARCHES), f"Which searches to run, of {', '.join(SEARCHES)}."
    )
    flags.DEFINE_float(
        "confirm_bar", 400.0, "The confirmed mean final return the table counts sweep seeds at."
    )
    flags.DEFINE_integer("parallel", None, "Runs at once (default: one per core).")
    flags.DEFINE_enum(
        "prune_on",
        search.SearchSettings.prune_on,
        list(search.PRUNE_ON),
        "What the median pruner compares (a trial's latest or best eval return); the pruned "
        "searches' folders are named by it when it is not the default.",
    )
    flags.DEFINE_enum(
        "objective",
        "final",
        list(search.OBJECTIVES),
        "The TPE searches' objective (each seed's final eval return, the mean of its curve's "
        "last quarter or of its whole curve); their folders are named by it when it is not "
        "final.",
    )


def main(argv: list[str]) -> None:
    from absl import flags

    del argv
    flag = flags.FLAGS
    from experiments.analyze import require_analysis_extra

    try:
        require_analysis_extra()  # the confirmation's intervals
        unknown = sorted(set(flag.searches) - set(SEARCHES))
        if unknown:
            raise RunError(
                f"--searches names {', '.join(unknown)}, which this script does not run; it "
                f"runs {', '.join(SEARCHES)} (a comma-separated list of them)."
            )
        rows = [
            run_one(name, int(seed), flag) for seed in flag.sweep_seeds for name in flag.searches
        ]
    except RunError as error:
        print(f"experiments.search_cartpole: error: {error}", file=sys.stderr)
        sys.exit(1)
    print(table(rows, flag.confirm_bar), flush=True)


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main)
