"""Statistics over seeds for learning curves: final return, area under the curve, steps to a
threshold, and mean/IQM with stratified-bootstrap confidence intervals (Agarwal et al., 2021).

Pure numpy functions of curves (`steps [T]`, `values [T]`) and of scores over seeds (`[n]`);
the bootstrap intervals come from `rliable` (`pip install -e '.[analysis]'`), imported on use.
"""

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
# Below this many seeds a trial's intervals are said to mean little. The percentile bootstrap
# (rliable's) resamples the n scores themselves, so its 95% interval is far narrower than 95%
# with few of them: with 2 seeds the resampled means are x1, (x1 + x2) / 2 and x2 (chances
# 1/4, 1/2, 1/4), the interval is their range [min, max], and it holds the true mean half the
# time; with normally distributed scores, about 75% of the time with 3 seeds, 78% with 4, 83%
# with 5 and 90% with 10 (simulated, 2,000 draws each). 5 is the fewest seeds at which it is
# right four times in five.
FEW_SEEDS = 5


@contextlib.contextmanager
def _reproducible(seed: int) -> Iterator[np.random.RandomState]:
    """A fixed bootstrap: rliable 1.2 draws its resamples from numpy's global generator (its
    `random_state` reaches `arch` but not the draws), so that is seeded here and restored."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():  # arch deprecates the RandomState that rliable passes
            warnings.simplefilter("ignore", FutureWarning)
            yield np.random.RandomState(seed)
    finally:
        np.random.set_state(saved)


def iqm(scores: Sequence[float]) -> float:
    """The interquartile mean: the mean of the middle 50% (25% trimmed from each end).

    With n scores, scipy trims floor(0.25 n) from each end; e.g. 1..8 -> mean(3, 4, 5, 6) = 4.5.
    """
    return float(scipy.stats.trim_mean(np.asarray(scores, float), 0.25, axis=None))


def final_value(steps: Sequence[int], values: Sequence[float]) -> float:
    """The value at the largest step (NaN for an empty curve)."""
    if len(steps) == 0:
        return float("nan")
    return float(np.asarray(values, float)[int(np.argmax(steps))])


def area_under_curve(steps: Sequence[int], values: Sequence[float]) -> float:
    """The curve's average over the steps it covers, by trapezoids:

        AUC = integral of value d(step) / (last step - first step)

    in the units of the value (a return), so that runs of different lengths compare; a single
    point is its own value. A policy that learns sooner has the larger AUC at equal final return.
    """
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    if len(steps) == 0:
        return float("nan")
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    if steps[-1] == steps[0]:
        return float(values[-1])
    return float(np.trapezoid(values, steps) / (steps[-1] - steps[0]))


def steps_to_threshold(steps: Sequence[int], values: Sequence[float], threshold: float) -> float:
    """The first step whose value reaches `threshold` (>=); NaN if the curve never does."""
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    order = np.argsort(steps, kind="stable")
    reached = np.flatnonzero(values[order] >= threshold)
    return float(steps[order][reached[0]]) if len(reached) else float("nan")


def align(
    curves: Sequence[tuple[Sequence[int], Sequence[float]]],
) -> tuple[np.ndarray, np.ndarray]:
    """Runs aligned on environment steps: the common grid and the values `[runs, steps]`.

    Runs of one config evaluate at the same steps, and then the grid is exactly those steps.
    Otherwise (say, different `num_envs` crossing cadences at different steps) the grid is the
    union of their steps within the range that every run covers, each run interpolated linearly.
    """
    if not curves:
        return np.zeros(0), np.zeros((0, 0))
    sorted_curves = []
    for steps, values in curves:
        steps, values = np.asarray(steps, float), np.asarray(values, float)
        order = np.argsort(steps, kind="stable")
        sorted_curves.append((steps[order], values[order]))
    if all(np.array_equal(s, sorted_curves[0][0]) for s, _ in sorted_curves):
        return sorted_curves[0][0], np.stack([v for _, v in sorted_curves])
    low = max(s[0] for s, _ in sorted_curves if len(s))
    high = min(s[-1] for s, _ in sorted_curves if len(s))
    grid = np.unique(np.concatenate([s for s, _ in sorted_curves]))
    grid = grid[(grid >= low) & (grid <= high)]
    return grid, np.stack([np.interp(grid, s, v) for s, v in sorted_curves])


def bootstrap_interval(
    scores: Sequence[float],
    aggregate: Callable[[np.ndarray], float],
    reps: int = 20_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The aggregate of `scores` over seeds and its stratified-bootstrap 95% percentile interval
    (rliable: seeds resampled with replacement, `reps` times, with a fixed `seed`).

    Returns (point, low, high); with fewer than two scores the interval is the point itself.
    """
    scores = np.asarray(scores, float)
    scores = scores[np.isfinite(scores)]
    if len(scores) == 0:
        return float("nan"), float("nan"), float("nan")
    point = float(aggregate(scores))
    if len(scores) < 2:
        return point, point, point
    from rliable import library

    with _reproducible(seed) as random_state:
        _, intervals = library.get_interval_estimates(
            {"x": scores[:, None]},  # [runs, tasks]: one task, the seeds as runs
            lambda x: np.array([aggregate(x[:, 0])]),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
            random_state=random_state,
        )
    low, high = intervals["x"][:, 0]
    return point, float(low), float(high)


def mean(scores: np.ndarray) -> float:
    return float(np.mean(scores))


def probability_of_improvement(
    x: Sequence[float], y: Sequence[float], reps: int = 20_000, seed: int = 0
) -> tuple[float, float, float]:
    """P(X > Y): the chance that a run of X scores higher than a run of Y (ties count half,
    the Mann-Whitney U statistic over the pairs), with its stratified-bootstrap 95% interval
    (X's and Y's seeds resampled independently). Returns (point, low, high)."""
    from rliable import library, metrics

    x, y = np.asarray(x, float), np.asarray(y, float)
    x, y = x[np.isfinite(x)][:, None], y[np.isfinite(y)][:, None]
    if len(x) == 0 or len(y) == 0:
        return float("nan"), float("nan"), float("nan")
    point = float(metrics.probability_of_improvement(x, y))
    if len(x) < 2 or len(y) < 2:
        return point, point, point
    with _reproducible(seed) as random_state:
        _, intervals = library.get_interval_estimates(
            {"x_over_y": [x, y]},
            lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
            random_state=random_state,
        )
    low, high = intervals["x_over_y"][:, 0]
    return point, float(low), float(high)


def curve_band(
    values: np.ndarray,
    aggregate: Callable[..., np.ndarray] = lambda v, axis: scipy.stats.trim_mean(v, 0.25, axis),
    reps: int = 2_000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A learning curve's aggregate over seeds (`values [runs, steps]`; IQM by default) with a
    95% bootstrap band. Each replicate resamples whole runs (the same seeds at every step), so
    the band reflects seed-to-seed variation of entire curves. Returns (centre, low, high)."""
    values = np.asarray(values, float)
    centre = aggregate(values, axis=0)
    if values.shape[0] < 2:
        return centre, centre, centre
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.shape[0], size=(reps, values.shape[0]))  # [reps, runs]
    replicates = aggregate(values[picks], axis=1)  # [reps, steps]
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail], axis=0)
    return centre, low, high
