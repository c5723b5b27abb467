"""What `experiments.analyze` adds for an adaptive search: every trial with its state (finished,
pruned at step N, failed), the environment steps the search used, and Optuna's parameter
importances. Pruned and failed trials are listed here only: their curves end where they were
stopped, so the statistics of the finished trials never take them in."""

import os
from collections.abc import Mapping

from experiments import search, tables


def trial_states(record: Mapping) -> dict[str, str]:
    """Each search trial's state, by name; empty for a grid or a random sweep."""
    return {trial["trial"]: trial["state"] for trial in record.get("search_trials", [])}


def env_steps_used(record: Mapping) -> int:
    """The environment steps a search's runs took: each run's last evaluation (a pruned run
    stops at one; a finished run's last is at Runner.num_steps)."""
    return sum(int((run["result"] or {}).get("eval_step") or 0) for run in record["runs"])


def search_section(base_dir: str, record: Mapping) -> str:
    """The search's trials as markdown, in the order suggested, its steps and importances."""
    keys = [parameter["hparam"] for parameter in record["parameters"]]
    head = ["trial", *keys, "state", "objective", "pruned at step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for trial in record["search_trials"]:
        cells = [
            trial["trial"],
            *[tables.cell(trial["values"].get(key)) for key in keys],
            trial["state"],
            tables.significant(trial["value"]),
            "" if trial.get("pruned_at") is None else str(trial["pruned_at"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    counts = {state: 0 for state in search.ENDED}
    for trial in record["search_trials"]:
        counts[trial["state"]] = counts.get(trial["state"], 0) + 1
    lines += [
        "",
        f"{len(record['search_trials'])} trials: {counts['finished']} finished, "
        f"{counts['pruned']} pruned, {counts['failed']} failed; "
        f"{env_steps_used(record):,} environment steps in all. The tables above hold the "
        "finished trials only: a pruned trial's curve ends at the step it was pruned, and is "
        "not mixed into their statistics.",
    ]
    weights = importances(base_dir, record)
    if weights:
        listed = ", ".join(f"{key} {weight:.2f}" for key, weight in weights.items())
        lines += ["", f"Parameter importances (Optuna, PED-ANOVA over finished trials): {listed}."]
    return "\n".join(lines)


def importances(base_dir: str, record: Mapping) -> dict[str, float] | None:
    """Optuna's importances from the search's study, or None where Optuna or the study is
    missing or there is too little to apportion."""
    storage = record.get("storage")
    path = storage[len("sqlite:///") :] if storage and storage.startswith("sqlite:///") else None
    if not storage or (path is not None and not os.path.exists(path)):
        return None
    try:
        import optuna
    except ImportError:
        return None
    search.quiet_optuna()
    name = record.get("study") or os.path.basename(base_dir)
    study = optuna.load_study(study_name=name, storage=storage)
    return search.importances(study)
