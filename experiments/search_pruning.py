"""A search trial's pruning, inside each of its runs: a callback that reports the run's
evaluations to the trial's folder in the sweep and stops the run once its trial is pruned.

The seeds of a trial run in processes of their own, at their own pace. Each seed writes its
eval curve to `<reports>/seed<k>.json` at each of its evaluations, then reads its siblings'
curves and asks `search.pruning_decision` about the steps that every seed has reached: the
seed that reaches a step last decides it, and one ahead of it stops at its next evaluation.
The decision is a function of those curves and of the finished trials the sweep's driver
handed over (`references`), so a resumed seed decides again what it decided before, and a
start of a pruned run stops it again before it trains (`on_start`). The callback keeps no state
in the checkpoints (`in_checkpoint = False`): its record is the sweep's, and a pruned run can
be resumed by hand without it.
"""

import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

from experiments import search
from framework.callbacks import Callback, RunView
from framework.loop import Evaluation
from framework.storage.atomic_files import atomic_write


class TrialPruner(Callback):
    """Stops a search trial's run when the trial is pruned; `pruned` is then (step, why)."""

    in_checkpoint = False

    def __init__(
        self,
        reports: str,
        seed: int,
        seeds: Sequence[int],
        references: Sequence[search.Curve],
        settings: Mapping,
    ):
        self.reports, self.seed, self.seeds = reports, seed, list(seeds)
        self.references = [[(int(s), float(v)) for s, v in curve] for curve in references]
        self.settings = search.SearchSettings(**settings)
        self.curve: list[tuple[int, float]] = []
        self.pruned: tuple[int, str] | None = None

    def on_start(self, run: RunView) -> None:
        # What this seed reported beyond the step it resumes from is evaluated again, alike.
        self.curve = [(s, v) for s, v in self._read(self.seed) if s <= run.env_steps]
        self._decide(run)

    def on_evaluation(self, run: RunView, evaluation: Evaluation) -> None:
        # As the event files keep it (float32), where the sweep reads the finished trials'
        # curves: a trial equal to one of them is not below it.
        value = float(np.float32(evaluation.mean_return))
        self.curve = [(s, v) for s, v in self.curve if s < evaluation.step]
        self.curve.append((evaluation.step, value))
        os.makedirs(self.reports, exist_ok=True)
        atomic_write(self._path(self.seed), json.dumps({"curve": self.curve}))
        self._decide(run)

    def _decide(self, run: RunView) -> None:
        curves = {seed: self._read(seed) for seed in self.seeds if seed != self.seed}
        curves[self.seed] = self.curve
        decision = search.pruning_decision(
            curves, self.seeds, self.references, self.settings, run.num_steps
        )
        if decision is None:
            return
        step, why = decision
        self.pruned = decision
        if run.env_steps > step:  # this seed ran ahead of the one that decided
            why = f"its trial was {why}; this seed had reached step {run.env_steps}"
        run.stop(why)

    def _path(self, seed: int) -> str:
        return os.path.join(self.reports, f"seed{seed}.json")

    def _read(self, seed: int) -> list[tuple[int, float]]:
        try:
            with open(self._path(seed)) as f:
                return [(int(s), float(v)) for s, v in json.load(f)["curve"]]
        except FileNotFoundError:
            return []
