"""A sweep's outcome as a file: `best.gin`, the best trial ready for `experiments.run`, and its
confirmation with seeds the sweep never used (`--confirm_seeds`), beside the sweep's estimate.

The best trial's objective is a maximum over trials, so it overestimates what its values give
(the winner's curse, worst with one seed a trial): the confirmation runs it again on new seeds.
"""

import math
import os
import sys

import numpy as np

from experiments import RunError
from experiments.sweep_record import Sweep, define
from experiments.trial import STATUS_FINISHED

BEST_GIN = "best.gin"


def best_trial(sweep: Sweep) -> dict | None:
    """The trial with the highest objective (a search's: among its finished trials). Ties go to
    the higher mean eval return over the run: a final return at the task's cap (CartPole's 500)
    ties many trials of one seed, and the one that got there sooner and stayed is the better
    bet; among equals, the first trial."""
    trials = [
        t
        for t in sweep.trials()
        if t["objective"] is not None and t.get("state", STATUS_FINISHED) == STATUS_FINISHED
    ]
    if not trials:
        return None
    return max(trials, key=lambda t: (t["objective"], sweep.mean_eval_return(t["trial"])))


def write_best_gin(sweep: Sweep) -> str | None:
    """`<base_dir>/best.gin`: the sweep's gin files as includes, its fixed --gin_bindings and
    the best trial's values, and nothing else; None while no trial has an objective."""
    best = best_trial(sweep)
    if best is None or not sweep.parameters:
        return None
    run = next(r for r in sweep.runs if r["trial"] == best["trial"])
    aggregate = sweep.objective_text()["aggregate"]
    path = os.path.join(sweep.base_dir, BEST_GIN)
    lines = [
        f"# The best trial of the sweep in {sweep.base_dir}:",
        f"# {best['trial']}, objective {best['objective']:.6g} ({aggregate}).",
        f"# Train it: python -m experiments.run --gin_file={path}",
        "",
        *[f"include '{path}'" for path in sweep.gin_files],
    ]
    if sweep.bindings:
        lines += ["", "# The sweep's --gin_bindings, which every trial had.", *sweep.bindings]
    lines += ["", "# The trial's values.", *run["bindings"]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def confirm(
    sweep: Sweep,
    num_seeds: int,
    run_sweep,
    out=sys.stdout,
    **how,
) -> dict:
    """Trains best.gin with `num_seeds` seeds the sweep did not use (a sweep of its own in
    `<base_dir>/confirm_<trial>/`, resumed like any) and returns the sweep's estimate beside the
    confirmed mean of the same objective, with its 95% bootstrap interval (and of the final
    eval return, under `final`, where the objective is another)."""
    best = best_trial(sweep)
    path = write_best_gin(sweep)
    if path is None:
        raise RunError(
            "--confirm_seeds: no trial of the sweep has an objective (every one failed or was "
            "pruned), so there is nothing to confirm."
        )
    first = max(sweep.seeds) + 1
    seeds = list(range(first, first + num_seeds))
    folder = os.path.join(sweep.base_dir, f"confirm_{best['trial']}")
    confirmation = define([path], [], [], seeds, folder, strict=sweep.strict)
    print(f"confirm: {best['trial']} with seeds {seeds} in {folder}", file=out, flush=True)
    run_sweep(confirmation, out=out, **how)
    kind = sweep.search.objective if sweep.search is not None else "final"
    curves = [
        confirmation.run_folder(run).eval_curve()
        for run in confirmation.runs
        if run["status"] == STATUS_FINISHED
    ]
    result = {
        "trial": best["trial"],
        "estimate": best["objective"],
        "estimate_seeds": len(sweep.seeds),
        "seeds": seeds,
        **_confirmed(curves, kind),
        "best_gin": path,
    }
    if kind != "final":  # a search on the curve's mean or tail is still judged by where it ends
        result["final"] = _confirmed(curves, "final")
    return result


def _confirmed(curves: list, kind: str) -> dict:
    """The confirming runs' scores by `kind` (final, tail or mean eval return), their mean and its
    95% bootstrap interval."""
    from experiments import search, statistics

    scores = [search.objective({0: curve}, kind) for curve in curves]
    scores = [s for s in scores if s is not None and math.isfinite(s)]
    point, low, high = statistics.bootstrap_interval(np.asarray(scores), statistics.mean)
    return {
        "scores": scores,
        "mean": point,
        "low": low,
        "high": high,
        "metric": f"{kind} eval return",
    }


def confirmation_text(result: dict) -> str:
    seeds = result["estimate_seeds"]
    return (
        f"{result['trial']}: the sweep's estimate {result['estimate']:.4g} ({result['metric']} "
        f"over {seeds} seed{'s' if seeds > 1 else ''}); confirmed over {len(result['scores'])} "
        f"new seeds {result['seeds']}: mean {result['mean']:.4g} [95% CI {result['low']:.4g}, "
        f"{result['high']:.4g}]{_final_text(result)}. best.gin: {result['best_gin']}"
    )


def _final_text(result: dict) -> str:
    final = result.get("final")
    if final is None:
        return ""
    return (
        f"; their final eval return: mean {final['mean']:.4g} [95% CI {final['low']:.4g}, "
        f"{final['high']:.4g}]"
    )
