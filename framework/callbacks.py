"""The user's own code during training: callbacks the runner calls at its start, every few
environment steps, after each evaluation and checkpoint, and at its end.

Bind them in gin, `Runner.callbacks = [@EarlyStopping()]` (a callback of your own is a
`@gin.configurable` subclass of `Callback` in a module the gin file imports: `import
my_callbacks`), or pass instances to `experiments.train(..., callbacks=[...])`, which runs them
after the bound ones. Each hook receives a `RunView`: what the run has reached, for reading, and
two requests, `log` (scalars through the run's writers) and `stop` (end the run, finished).
`EarlyStopping` is one: it ends a run whose evaluations stopped improving.

Where they run: in the runner's process, always: under the asynchronous driver too (not in its
workers), and in a sweep's trial process or Ray trial, which builds the run from the gin files
and bindings alone. There, only callbacks bound in gin exist, and their module must be imported
by a gin file (`import my_callbacks`), as a part of your own is.
"""

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import gin
import numpy as np

from framework.agent import Agent
from framework.loop import EndedEpisodes, Evaluation


class Callback:
    """Hooks for code of your own; each does nothing unless overridden.

    `every_steps` (a class attribute, or set in `__init__`) is how often `on_step` is called:
    at the first vector step that reaches each multiple of it, counted in transitions like
    every cadence of the run; 1 calls it after every vector step, None (the default) never.

    A callback with state that must survive a resume (a count, a best value) returns it from
    `state()` as JSON values (dicts with string keys, lists, numbers, strings, booleans, None;
    tuples come back as lists) and takes it back in `load_state`: the runner keeps it in each
    checkpoint, so a resumed run continues as the uninterrupted one would, and a run resumed
    with other callbacks is refused as a changed config is. The runner keeps no stop: a run a
    callback stopped trains on at its next start unless the callback, its state restored, stops
    it again (in `on_start`, as `EarlyStopping` does).

    Callbacks read the run, never change it: mutating the agent, or drawing from the run's
    random generators (the global ones of `random` and `np.random`, the agent's `rng`), is not
    supported and breaks exact resume; keep a generator of your own (in your state) instead.

    `in_checkpoint = False` keeps a callback out of the checkpoints altogether: one whose
    decisions live outside the run (a search's pruner reads its trial's record in the sweep's
    folder) and that has no `state()` nor `every_steps`. A run it stopped can be resumed without
    it, by hand, as a run without callbacks resumes.
    """

    every_steps: int | None = None
    in_checkpoint: bool = True

    def on_start(self, run: "RunView") -> None:
        """A start is about to train (a fresh run at step 0, or a resumed one); `run.stop` ends
        it before any step."""

    def on_step(self, run: "RunView") -> None:
        """`every_steps` transitions more were taken; `run.ended_episodes` are the episodes
        that ended since this callback's previous `on_step`."""

    def on_evaluation(self, run: "RunView", evaluation: Evaluation) -> None:
        """The run evaluated its policy at `evaluation.step`."""

    def on_checkpoint(self, run: "RunView") -> None:
        """A checkpoint of `run.env_steps` is complete on disk (for work outside the run: a
        resumed run's checkpoints differ from an uninterrupted one's where a signal stopped
        it, so neither `log` nor `stop` nor state kept here would resume exactly)."""

    def on_end(self, run: "RunView") -> None:
        """The start ended: finished, stopped by a callback, `stop_at_return` or a signal (its
        checkpoint saved); not when it failed."""

    def state(self) -> dict:
        """What the callback must get back at a resume, as JSON values."""
        return {}

    def load_state(self, state: dict) -> None:
        """Takes back what `state()` returned."""
        del state


@gin.configurable
class EarlyStopping(Callback):
    """Stops the run once `patience` evaluations in a row did not raise the best mean eval
    return by more than `min_delta` (SB3's StopTrainingOnNoModelImprovement). Its best return
    and count survive a resume; a later start of a run it stopped stops again before training,
    unless `patience` was raised."""

    def __init__(self, patience: int, min_delta: float = 0.0):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"EarlyStopping.patience must be an integer >= 1, got {patience!r}.")
        if not min_delta >= 0.0:
            raise ValueError(f"EarlyStopping.min_delta must be >= 0, got {min_delta!r}.")
        self.patience, self.min_delta = patience, float(min_delta)
        self.best: float | None = None
        self.without_improvement = 0  # evaluations in a row

    def on_start(self, run: "RunView") -> None:
        if self.without_improvement >= self.patience:
            run.stop(self._why())

    def on_evaluation(self, run: "RunView", evaluation: Evaluation) -> None:
        if self.best is None or evaluation.mean_return > self.best + self.min_delta:
            self.best, self.without_improvement = evaluation.mean_return, 0
            return
        self.without_improvement += 1
        if self.without_improvement >= self.patience:
            run.stop(self._why())

    def _why(self) -> str:
        return (
            f"{self.without_improvement} evaluations in a row without raising the best eval "
            f"return {self.best:.6g} by more than {self.min_delta:g} (patience {self.patience})"
        )

    def state(self) -> dict:
        return {"best": self.best, "without_improvement": self.without_improvement}

    def load_state(self, state: dict) -> None:
        self.best, self.without_improvement = state["best"], state["without_improvement"]


class RunView:
    """What a callback reads of the run, and what it may ask of it: `log` and `stop`."""

    def __init__(self, hooks: "Hooks", index: int):
        self._hooks, self._index = hooks, index

    @property
    def env_steps(self) -> int:
        """Transitions taken so far, summed over the sub-environments."""
        return self._hooks.counts()[0]

    @property
    def episodes(self) -> int:
        """Training episodes ended so far."""
        return self._hooks.counts()[1]

    @property
    def num_steps(self) -> int:
        return self._hooks.num_steps

    @property
    def agent(self) -> Agent:
        """The agent being trained (the global one under the asynchronous driver), to read."""
        return self._hooks.agent

    @property
    def infos(self) -> dict | None:
        """The info dict of the last vector step (gymnasium's vector form: per key an array
        over the sub-environments and a `_key` mask; an ended episode's in `final_info`);
        None under the asynchronous driver, whose workers step elsewhere, and before a step."""
        return self._hooks.infos

    @property
    def ended_episodes(self) -> EndedEpisodes:
        """In `on_step`: the training episodes ended since this callback's previous `on_step`
        (their returns, lengths and `Runner.info_keys` values); empty for one without
        `every_steps`."""
        return _joined(self._hooks.windows[self._index])

    @property
    def evaluation(self) -> Evaluation | None:
        """The run's latest evaluation (None before its first)."""
        return self._hooks.evaluation

    def log(self, scalars: dict[str, float]) -> None:
        """Logs `scalars` (tag -> number) at this step: TensorBoard and a row of progress.csv,
        the step's row if it has one. Only in `on_step` and `on_evaluation`, whose steps every
        start of a run reaches alike, so a resumed run logs what the uninterrupted one does.
        A tag the run logs itself at that step is refused; a namespace of your own
        (`custom/...`) never meets one."""
        self._hooks.log(self._index, scalars)

    def stop(self, reason: str) -> None:
        """Ends the run after this step, checkpointed, as finished; `reason` goes to the log.
        In `on_start`, `on_step` and `on_evaluation`."""
        self._hooks.stop(self._index, reason)


_LOGS = ("on_step", "on_evaluation")  # the hooks that may log, and the ones that may stop
_STOPS = ("on_start", "on_step", "on_evaluation")


class Hooks:
    """The bound callbacks as the runner calls them: each hook in turn, `on_step` at each
    callback's own cadence, with the episodes that ended in between, and what they logged or
    asked for collected for the runner.

    `counts()` gives the run's (env_steps, episodes) at the moment.
    """

    def __init__(
        self,
        callbacks: Sequence[Callback],
        agent: Agent,
        num_steps: int,
        counts: Callable[[], tuple[int, int]],
    ):
        for callback in callbacks:
            _check(callback)
        self.callbacks = list(callbacks)
        self.agent, self.num_steps, self.counts = agent, num_steps, counts
        self.views = [RunView(self, index) for index in range(len(self.callbacks))]
        # The indices of the callbacks that checkpoints hold.
        self._saved = [i for i, callback in enumerate(self.callbacks) if callback.in_checkpoint]
        self.windows: list[list[EndedEpisodes]] = [[] for _ in self.callbacks]
        self._stepping = [i for i, c in enumerate(self.callbacks) if c.every_steps is not None]
        self._next: dict[int, int] = {}  # a stepping callback's next on_step, by index
        self.infos: dict | None = None  # the last vector step's, set by the runner
        self.evaluation: Evaluation | None = None
        self.stop_reason: str | None = None  # "<callback>: <reason>" once one asked
        self._hook: str | None = None  # the hook being called
        self._logged: dict[str, float] = {}

    # ----- the runner's calls ------------------------------------------------------------------

    def start(self) -> None:
        env_steps = self.counts()[0]
        for index in self._stepping:
            every = self.callbacks[index].every_steps
            self._next[index] = (env_steps // every + 1) * every
        self._call("on_start")
        self.state()  # a state that cannot be saved fails now, not at the first checkpoint

    @property
    def next_step(self) -> int:
        """The step of the next `on_step` due (`num_steps` if none steps)."""
        return min(self._next.values(), default=self.num_steps)

    def add_episodes(self, ended: EndedEpisodes) -> None:
        for index in self._stepping:
            self.windows[index].append(ended)

    def step(self) -> dict[str, float]:
        """`on_step` of each callback due at this step; returns what they logged."""
        env_steps, due = self.counts()[0], []
        for index in self._stepping:
            if env_steps >= self._next[index]:
                every = self.callbacks[index].every_steps
                self._next[index] = (env_steps // every + 1) * every
                due.append(index)
        return self._call("on_step", due, clear_windows=True)

    def evaluated(self, evaluation: Evaluation) -> dict[str, float]:
        self.evaluation = evaluation
        return self._call("on_evaluation", extra=(evaluation,))

    def checkpointed(self) -> None:
        self._call("on_checkpoint")

    def end(self) -> None:
        self._call("on_end")

    def _call(
        self,
        hook: str,
        indices: Sequence[int] | None = None,
        extra: tuple = (),
        clear_windows: bool = False,
    ) -> dict[str, float]:
        self._logged = {}
        for index in range(len(self.callbacks)) if indices is None else indices:
            self._hook = hook
            try:
                getattr(self.callbacks[index], hook)(self.views[index], *extra)
            finally:
                self._hook = None
            if clear_windows:
                self.windows[index] = []
        return self._logged

    # ----- the view's requests -----------------------------------------------------------------

    def log(self, index: int, scalars: dict[str, float]) -> None:
        name = _name(self.callbacks[index])
        if self._hook not in _LOGS:
            raise RuntimeError(
                f"{name} called run.log in {self._hook or 'no hook'}: logging is for on_step "
                "and on_evaluation, the steps every start of a run reaches alike (a resumed "
                "run would log points the uninterrupted one lacks)."
            )
        for tag, value in scalars.items():
            if not isinstance(tag, str) or not tag:
                raise ValueError(f"{name} logged the tag {tag!r}: a tag is a non-empty string.")
            if tag in self._logged:
                raise ValueError(f"{name} logged {tag!r}, logged already at this step.")
            try:
                self._logged[tag] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name} logged {tag!r} = {value!r}, not a number.") from None

    def stop(self, index: int, reason: str) -> None:
        name = _name(self.callbacks[index])
        if self._hook not in _STOPS:
            raise RuntimeError(
                f"{name} called run.stop in {self._hook or 'no hook'}: a callback stops the "
                "run in on_start, on_step or on_evaluation."
            )
        if self.stop_reason is None:
            self.stop_reason = f"{name}: {reason}"

    # ----- checkpoints -------------------------------------------------------------------------

    @property
    def in_checkpoint(self) -> bool:
        """Whether checkpoints hold the callbacks' record: some callback is `in_checkpoint`."""
        return bool(self._saved)

    def state(self) -> str:
        """Each callback's name, state and pending episodes, and the latest evaluation, as one
        JSON text: one checkpoint value, whatever the callbacks keep (those `in_checkpoint`)."""
        each = []
        for callback, window in zip(self.callbacks, self.windows, strict=True):
            if not callback.in_checkpoint:
                continue
            state = callback.state()
            _check_json(state, f"{_name(callback)}.state()")
            each.append({"name": _name(callback), "state": state, "ended": _to_json(window)})
        evaluation = None if self.evaluation is None else dataclasses.asdict(self.evaluation)
        return json.dumps({"callbacks": each, "evaluation": evaluation})

    def load_state(self, text: str) -> None:
        """Takes back what `state()` gave; a ValueError if other callbacks wrote it."""
        saved = json.loads(text)
        names = [entry["name"] for entry in saved["callbacks"]]
        bound = [_name(self.callbacks[index]) for index in self._saved]
        if names != bound:
            raise ValueError(
                f"it was written with the callbacks {names} and this run binds {bound}: "
                "resume with the same Runner.callbacks (and experiments.train callbacks)"
            )
        for index, entry in zip(self._saved, saved["callbacks"], strict=True):
            self.callbacks[index].load_state(entry["state"])
            self.windows[index] = _from_json(entry["ended"])
        evaluation = saved["evaluation"]
        if evaluation is not None:
            evaluation.update(
                returns=tuple(evaluation["returns"]), lengths=tuple(evaluation["lengths"])
            )
            self.evaluation = Evaluation(**evaluation)


def _check(callback: Any) -> None:
    if not isinstance(callback, Callback):
        raise ValueError(
            f"Runner.callbacks: {callback!r} is not a Callback; subclass "
            "framework.callbacks.Callback (and bind it as @YourCallback())."
        )
    every = callback.every_steps
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ValueError(
            f"{_name(callback)}.every_steps must be None (no on_step) or an integer >= 1 "
            f"(environment steps between two on_step calls), got {every!r}."
        )
    if not callback.in_checkpoint and every is not None:
        raise ValueError(
            f"{_name(callback)} has in_checkpoint = False and every_steps = {every}: the "
            "episodes pending for its next on_step live in the checkpoint; keep it in the "
            "checkpoint, or give it no on_step (every_steps = None)."
        )


def _name(callback: Callback) -> str:
    return type(callback).__name__


def _check_json(value: Any, where: str) -> None:
    """Raises TypeError unless `value` is made of JSON values (string keys)."""
    if value is None or isinstance(value, str | bool | int | float):
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has the key {key!r}: keys of a state are strings.")
            _check_json(item, where)
        return
    raise TypeError(
        f"{where} holds {value!r} ({type(value).__name__}): a callback's state is JSON values "
        "(dicts with string keys, lists, numbers, strings, booleans, None)."
    )


def _joined(batches: list[EndedEpisodes]) -> EndedEpisodes:
    """Several steps' ended episodes as one."""
    if not batches:
        return EndedEpisodes(np.zeros(0, np.float64), np.zeros(0, np.int64))
    if len(batches) == 1:
        return batches[0]
    return EndedEpisodes(
        np.concatenate([batch.returns for batch in batches]),
        np.concatenate([batch.lengths for batch in batches]),
        {key: np.concatenate([batch.infos[key] for batch in batches]) for key in batches[0].infos},
    )


def _to_json(batches: list[EndedEpisodes]) -> dict:
    episodes = _joined(batches)
    return {
        "returns": episodes.returns.tolist(),
        "lengths": episodes.lengths.tolist(),
        "infos": {key: values.tolist() for key, values in episodes.infos.items()},
    }


def _from_json(saved: dict) -> list[EndedEpisodes]:
    if not saved["returns"]:
        return []
    return [
        EndedEpisodes(
            np.array(saved["returns"], np.float64),
            np.array(saved["lengths"], np.int64),
            {key: np.array(values, np.float64) for key, values in saved["infos"].items()},
        )
    ]
