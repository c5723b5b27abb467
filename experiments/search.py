"""An adaptive search's decisions, each a pure function of what earlier trials showed: the next
trial's values (Optuna's TPE sampler), whether a running trial is pruned (Optuna's median
pruner), a trial's objective over its seeds; and the Optuna study kept for Optuna's own tools
(parameter importances, optuna-dashboard).

Reproducible by construction: trial k is suggested from trials 0..k-C alone (C is
`concurrent_trials`), all ended, by a sampler seeded from (sweep_seed, k), in a study rebuilt
in memory from the sweep's record. Whatever `--parallel` is, and however often the search was
killed, trial k gets the same values; its pruning compares it with those same earlier trials.
Importing this module is cheap: Optuna is imported where it is used.
"""

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

from experiments.sweep_plan import Parameter, usage_error

Curve = Sequence[tuple[int, float]]  # (environment step, mean eval return), by step
PRUNERS = ("median", "none")
# What of a running trial's curve the median pruner compares: its latest evaluation, or its best
# so far (Optuna's own median pruner, made for curves that only rise).
PRUNE_ON = ("last", "best")
OBJECTIVES = ("final", "tail", "mean")
# `tail`: the mean of a curve's last quarter, where a run ends, read off more than one evaluation
# (a single last evaluation of an unstable learner is luck; the whole curve's mean favours fast
# learners over ones that end well).
TAIL_FRACTION = 0.25
IQM_SEEDS = 4  # from this many seeds the objective is their IQM (one trimmed from each end)
ENDED = ("finished", "pruned", "failed")  # a search trial's states once it ran


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """How a search chooses and stops trials: what makes two invocations the same search."""

    sampler: str = "tpe"
    pruner: str = "median"  # or "none"
    prune_on: str = "last"  # the trial's latest evaluation, or its best so far
    n_startup_trials: int = 5  # random trials before TPE models the others
    prune_after_trials: int = 5  # finished trials a trial is compared with before any prune
    concurrent_trials: int = 2  # trial k is suggested once trials 0..k-this have ended
    objective: str = "final"  # each seed's final, tail or mean eval return, over the seeds
    min_prune_fraction: float = 0.2  # no prune before this fraction of Runner.num_steps

    def __post_init__(self):
        if self.pruner not in PRUNERS:
            raise usage_error(f"--pruner must be one of {PRUNERS}, got {self.pruner!r}.")
        if self.prune_on not in PRUNE_ON:
            raise usage_error(
                f"--prune_on must be 'last' (a trial's latest eval return) or 'best' (its best "
                f"so far), got {self.prune_on!r}."
            )
        if self.objective not in OBJECTIVES:
            raise usage_error(
                f"--objective must be 'final' (each seed's last eval return), 'tail' (the mean "
                f"of its curve's last quarter) or 'mean' (the mean of its eval curve), got "
                f"{self.objective!r}."
            )
        for name in ("n_startup_trials", "prune_after_trials"):
            if getattr(self, name) < 0:
                raise usage_error(f"--{name} must be >= 0, got {getattr(self, name)}.")
        if self.concurrent_trials < 1:
            raise usage_error(
                f"--concurrent_trials must be >= 1 (trials suggested before the ones before "
                f"them end), got {self.concurrent_trials}."
            )
        if not 0.0 <= self.min_prune_fraction < 1.0:
            raise usage_error(
                "--min_prune_fraction must be in [0, 1) (the fraction of Runner.num_steps "
                f"before any prune), got {self.min_prune_fraction}."
            )

    def describe(self) -> str:
        pruner = "no pruner"
        if self.pruner != "none":
            pruner = f"{self.pruner} pruner on each trial's {self.prune_on} eval return"
        return f"{self.sampler.upper()} sampler, {pruner}, objective: {self.objective} eval return"


def trial_seed(sweep_seed: int, number: int) -> int:
    """The seed of trial `number`'s suggestion: its own stream of the sweep's seed."""
    return int(np.random.SeedSequence([sweep_seed, number]).generate_state(1)[0])


def first_dependent(number: int, settings: SearchSettings) -> int:
    """The number of trials that must have ended before trial `number` is suggested."""
    return max(0, number - settings.concurrent_trials + 1)


def require_optuna() -> None:
    """A RunError, in one paragraph, where Optuna (the search extra) is missing."""
    from experiments import RunError

    try:
        import optuna  # noqa: F401
    except ImportError as error:
        raise RunError(
            "--search=tpe needs Optuna, which this Python does not have: pip install -e "
            "'.[search]' (or '.[test]') in the repository, or pip install optuna. Grids and "
            "random sweeps run without it."
        ) from error


def quiet_optuna():
    """Optuna, without its INFO line per study made."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _frozen(parameters: Sequence[Parameter], trial: Mapping):
    """A record's ended trial as Optuna's: its values, state, objective and curve."""
    optuna = quiet_optuna()
    state = {
        "finished": optuna.trial.TrialState.COMPLETE,
        "pruned": optuna.trial.TrialState.PRUNED,
        "failed": optuna.trial.TrialState.FAIL,
    }[trial["state"]]
    space = {p.key: p.search_space() for p in parameters}
    params = {}
    for parameter, text in zip(parameters, trial["texts"], strict=True):
        params[parameter.key] = text if parameter.distribution is None else float(text)
        if parameter.distribution == "randint":
            params[parameter.key] = int(text)
    return optuna.trial.create_trial(
        state=state,
        value=trial["value"] if state == optuna.trial.TrialState.COMPLETE else None,
        params=params,
        distributions=space,
        intermediate_values={int(step): float(value) for step, value in trial["curve"]},
        user_attrs={"trial": trial["trial"], "number": trial["number"]},
    )


def _study(parameters: Sequence[Parameter], history: Sequence[Mapping], sampler=None):
    optuna = quiet_optuna()
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for trial in history:
        study.add_trial(_frozen(parameters, trial))
    return study


def suggest(
    parameters: Sequence[Parameter],
    history: Sequence[Mapping],
    settings: SearchSettings,
    sweep_seed: int,
    number: int,
) -> tuple[str, ...]:
    """Trial `number`'s gin texts, from the ended trials `history` (0..k-C, in order)."""
    optuna = quiet_optuna()
    sampler = optuna.samplers.TPESampler(
        n_startup_trials=settings.n_startup_trials,
        seed=trial_seed(sweep_seed, number),
        multivariate=True,  # RL Zoo's choice: the parameters' interactions, not each alone
    )
    study = _study(parameters, history, sampler)
    trial = study.ask({p.key: p.search_space() for p in parameters})
    return tuple(p.text(trial.params[p.key]) for p in parameters)


def trial_curve(seed_curves: Mapping[int, Curve], seeds: Sequence[int]) -> list[list]:
    """The trial's curve: at each step every seed reached, the mean over its seeds."""
    by_seed = [dict(seed_curves.get(seed, ())) for seed in seeds]
    common = sorted(set.intersection(*(set(curve) for curve in by_seed))) if by_seed else []
    return [[int(step), float(np.mean([curve[step] for curve in by_seed]))] for step in common]


def pruning_decision(
    seed_curves: Mapping[int, Curve],
    seeds: Sequence[int],
    references: Sequence[Curve],
    settings: SearchSettings,
    num_steps: int,
) -> tuple[int, str] | None:
    """The first step at which the median pruner stops the trial, and why in words; None while
    it does not. The trial is judged at each step every one of its seeds reached, on the mean
    over them (its value there, or its best up to there: `settings.prune_on`); `references`
    are the curves of the finished trials it is compared with.

    "last" is the default because RL curves fall as well as rise: a DQN run that touched the
    cap once and collapsed is not promising, yet Optuna's best-so-far never stops it. It is
    also what ASHA, the Ray search's scheduler, compares."""
    if settings.pruner == "none":
        return None
    optuna = quiet_optuna()
    warmup = math.ceil(settings.min_prune_fraction * num_steps)
    pruner = optuna.pruners.MedianPruner(
        n_startup_trials=settings.prune_after_trials, n_warmup_steps=warmup
    )
    history = [
        {"state": "finished", "value": 0.0, "curve": curve, "texts": [], "trial": "", "number": i}
        for i, curve in enumerate(references)
    ]
    study = _study([], history)
    curve = trial_curve(seed_curves, seeds)
    for index, (step, _) in enumerate(curve):
        first = 0 if settings.prune_on == "best" else index
        judged = dict(curve[first : index + 1])
        trial = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING, intermediate_values=judged
        )
        if pruner.prune(study, trial):
            at_step = [dict(r)[step] for r in references if step in dict(r)]
            plural = "s" if len(seeds) > 1 else ""
            value = max(judged.values())
            judged_as = f"{value:.4g} at"
            if settings.prune_on == "best":
                judged_as = f"at best {value:.4g} up to"
            return step, (
                f"pruned at step {step}: the mean eval return over its {len(seeds)} seed{plural}, "
                f"{judged_as} that step, is below the median "
                f"{float(np.median(at_step)):.4g} of the {len(at_step)} finished trials before "
                f"it at that step (median pruner, no prune before step {warmup})"
            )
    return None


def _iqm(scores: np.ndarray) -> float:
    """The interquartile mean, as `experiments.statistics.iqm` computes it (floor(n / 4)
    trimmed from each end), without scipy, which a sweep does not need."""
    ordered = np.sort(scores)
    cut = len(ordered) // 4
    return float(np.mean(ordered[cut : len(ordered) - cut]))


def objective(seed_curves: Mapping[int, Curve], kind: str) -> float | None:
    """A trial's value over its seeds: each seed's final (`kind="final"`) eval return, the mean
    of its last `TAIL_FRACTION` of evaluations (at least one; `"tail"`) or of its whole curve
    (`"mean"`), then their mean, or their IQM from `IQM_SEEDS` seeds on; None where a seed has
    no finite value (it failed)."""
    scores = []
    for curve in seed_curves.values():
        values = [value for _, value in sorted(curve)]
        if not values:
            return None
        scores.append(_curve_score(values, kind))
    scores = np.asarray(scores, float)
    if not len(scores) or not np.all(np.isfinite(scores)):
        return None
    return _iqm(scores) if len(scores) >= IQM_SEEDS else float(np.mean(scores))


def _curve_score(values: list[float], kind: str) -> float:
    if kind == "final":
        return values[-1]
    if kind == "tail":
        return float(np.mean(values[-math.ceil(TAIL_FRACTION * len(values)) :]))
    return float(np.mean(values))


def describe_objective(kind: str, seeds: int) -> str:
    aggregate = "IQM" if seeds >= IQM_SEEDS else "mean"
    return f"{kind} eval return, {aggregate} over {seeds} seed{'s' if seeds > 1 else ''}"


# ----- the study in the storage (Optuna's tools read it) ----------------------------------------


def open_study(storage: str, name: str, identity: dict):
    """The search's study in `storage` (an Optuna storage URL), made if missing; a RunError, in
    one paragraph, for a storage that is not Optuna's or whose study of that name is another
    search's."""
    from experiments import RunError

    optuna = quiet_optuna()
    text = json.dumps(identity, sort_keys=True)
    try:
        study = optuna.create_study(
            storage=storage, study_name=name, direction="maximize", load_if_exists=True
        )
        recorded = study.user_attrs.get("search")
    except Exception as error:  # SQLAlchemy's and Optuna's many kinds: a file it cannot read
        raise RunError(
            f"The search's storage {storage} cannot be opened as an Optuna study "
            f"({type(error).__name__}: {' '.join(str(error).split())[:300]}). Give another "
            "--storage, or remove that file if it is not needed; nothing was started."
        ) from None
    if recorded is None and not study.trials:
        study.set_user_attr("search", text)
    elif recorded != text:
        raise RunError(
            f"The storage {storage} holds a study named {name!r} of another search (its "
            "settings, config or --sweep differ from this one's). Give this search another "
            "--storage or --base_dir; nothing was started."
        )
    return study


def record_in_study(study, parameters: Sequence[Parameter], trials: Sequence[Mapping]) -> None:
    """Adds each ended trial the study does not hold yet (a kill between the record and the
    study loses nothing: the next start adds it)."""
    held = {trial.user_attrs.get("number") for trial in study.trials}
    for trial in trials:
        if trial["state"] in ENDED and trial["number"] not in held:
            study.add_trial(_frozen(parameters, trial))


def importances(study) -> dict[str, float] | None:
    """Optuna's parameter importances (PED-ANOVA), or None with fewer than two finished
    trials or one parameter, where there is nothing to apportion."""
    optuna = quiet_optuna()
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    if len(finished) < 2 or len(study.trials[0].distributions) < 2:
        return None
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()  # needs no scikit-learn
    return optuna.importance.get_param_importances(study, evaluator=evaluator)
