"""The order in which a sweep's runs start: a grid's or random sweep's as planned (`RunQueue`),
an adaptive search's as its trials may be suggested (`SearchSchedule`).

A search suggests trial k once trials 0..k-C have ended (C = `--concurrent_trials`), from those
trials alone, so its suggestions do not depend on `--parallel` nor on when it was killed: a
search started again resumes the runs left unfinished under their own trials, then suggests
what an uninterrupted search would have. When every run of a trial has ended, the trial is
closed: finished with its objective over its seeds, pruned at the step its runs stopped, or
failed; the record, the runs' HParams results and the Optuna study take it in.
"""

import time

import numpy as np

from experiments import search
from experiments.sweep_plan import search_trial_name
from experiments.sweep_record import (
    STATUS_PENDING,
    Sweep,
    new_runs,
    open_study,
    write_run_result,
)
from experiments.trial import STATUS_FAILED, STATUS_INTERRUPTED, STATUS_PRUNED


class RunQueue:
    """A planned sweep's runs, in their order."""

    def __init__(self, runs: list[dict]):
        self.queue = list(runs)

    def next_run(self) -> dict | None:
        return self.queue.pop(0) if self.queue else None

    def run_ended(self, run: dict) -> None:
        del run

    def note(self) -> str | None:
        return None


class SearchSchedule:
    """An adaptive search's runs: those left unfinished first, then each new trial's seeds, as
    soon as the trials it is suggested from have ended and until `num_trials` or `timeout`
    seconds (of this invocation) are reached."""

    def __init__(self, sweep: Sweep, timeout: float | None = None):
        self.sweep, self.settings = sweep, sweep.search
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.timed_out = False
        self.study = open_study(sweep)
        self.pending = [
            run for run in sweep.runs if run["status"] in (STATUS_PENDING, STATUS_INTERRUPTED)
        ]
        for trial in sweep.search_trials:  # a kill between a trial's last run and its close
            if trial["state"] == "running":
                self._close_if_ended(trial)

    def next_run(self) -> dict | None:
        if not self.pending:
            self._suggest()
        return self.pending.pop(0) if self.pending else None

    def run_ended(self, run: dict) -> None:
        self._close_if_ended(self.sweep.search_trial(run["trial"]))

    def note(self) -> str | None:
        """Why the search stopped short of --num_trials, if it did."""
        left = self.sweep.num_trials - len(self.sweep.search_trials)
        if self.timed_out:
            return (
                f"--timeout reached: no trial suggested after it; {left} of "
                f"{self.sweep.num_trials} trials not run. The same command continues the search."
            )
        unended = [t["trial"] for t in self.sweep.search_trials if t["state"] not in search.ENDED]
        if unended:
            return (
                f"trials {', '.join(unended)} did not end (a run was stopped by a signal); the "
                "same command resumes them, then suggests the rest."
            )
        return None

    def _suggest(self) -> None:
        sweep, trials = self.sweep, self.sweep.search_trials
        number = len(trials)
        if number >= sweep.num_trials:
            return
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = True
            return
        before = trials[: search.first_dependent(number, self.settings)]
        if any(trial["state"] not in search.ENDED for trial in before):
            return  # suggested from these alone, once they have ended
        texts = search.suggest(sweep.parameters, before, self.settings, sweep.sweep_seed, number)
        trial = new_trial(sweep, number, texts)
        self.pending += [run for run in sweep.runs if run["trial"] == trial["trial"]]

    def _close_if_ended(self, trial: dict) -> None:
        if close_trial(self.sweep, trial):
            search.record_in_study(self.study, self.sweep.parameters, [trial])


def close_trial(sweep: Sweep, trial: dict) -> bool:
    """Once every run of `trial` has ended: its state, objective and curve into the record, and
    its objective into its runs' HParams results. Whether it was closed."""
    runs = [run for run in sweep.runs if run["trial"] == trial["trial"]]
    if any(run["status"] not in search.ENDED for run in runs):
        return False
    curves = {
        run["seed"]: [
            (step, np.nan if value is None else value)
            for step, value in (run["result"] or {}).get("curve", [])
        ]
        for run in runs
    }
    pruned = [run["pruned"] for run in runs if run["status"] == STATUS_PRUNED]
    curve = search.trial_curve(curves, sweep.seeds)
    if any(run["status"] == STATUS_FAILED for run in runs):
        failed = next(run for run in runs if run["status"] == STATUS_FAILED)
        trial.update(state="failed", why=f"{failed['name']}: {failed['error']}")
        curve = []
    elif pruned:
        step = min(p["step"] for p in pruned)
        why = next(p["why"] for p in pruned if p["step"] == step)
        curve = [point for point in curve if point[0] <= step]
        trial.update(state="pruned", pruned_at=step, why=why)
    else:
        value = search.objective(curves, sweep.search.objective)
        trial.update(state="finished" if value is not None else "failed", value=value)
        if value is None:
            trial["why"] = "its eval return is not a finite number (NaN)"
    trial["curve"] = curve
    for run in runs:
        write_run_result(sweep, run)
    sweep.write()
    return True


def new_trial(sweep: Sweep, number: int, texts, name: str | None = None) -> dict:
    """Trial `number` of a search with the values `texts`, and its runs, into the record;
    named 'trial<number>,<values>' unless `name` is given."""
    name = name or search_trial_name(sweep.parameters, number, sweep.num_trials, texts)
    runs = new_runs(sweep, name, texts)
    trial = {
        "number": number,
        "trial": name,
        "texts": list(texts),
        "values": runs[0]["values"],
        "state": "running",
        "value": None,
        "curve": [],
        "pruned_at": None,
        "why": None,
    }
    sweep.search_trials.append(trial)
    sweep.runs += runs
    return trial
