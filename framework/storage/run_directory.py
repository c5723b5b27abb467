"""The run folder's one owner: its layout, lock, config and metadata, checkpoints and event
files, and the readers that analysis and sweeps use. Nothing else decides a path inside it.

    <base_dir>/
      .lock                         held (flock) by the one process training here
      config.gin                    the operative config of the latest start
      config.before-start-<N>.gin   the config start N replaced, when it changed
      config-changes.diff           how the config of a start refused for not fitting the
                                    checkpoints differed from config.gin
      metadata.json                 {"starts": [...], "last_checkpoint": N}; a start a
                                    callback ended says where and why ("stopped")
      progress.csv                  the scalars of every log step as one table
                                    (progress_csv.py), continued across resumes; a damaged
                                    one is set aside and a new one begun
      checkpoints/                  complete-or-ignored checkpoints (checkpointing.py)
      checkpoints/damaged/          damaged checkpoints, set aside, never deleted
      best/                         the best evaluation's policy alone (weights and observation
                                    statistics; no replay, no optimizer), outside the resume path:
                                    a damaged one is set aside, and the run resumes all the same
      evaluations/<time>-<which>/   what `experiments.evaluate --log` wrote (evaluate/ tags):
                                    its own TensorBoard run, never read as the run's curves
      events.out.tfevents.*         the run's event files: one TensorBoard run, its tags
                                    namespaced (train/, eval/, ...), one curve per tag across
                                    resumes, and its HParams session
      events.out.tfevents.9999999999.sweep   a sweep's record: its HParams columns, the result
      discarded/                    event files and checkpoints set aside, never deleted

A folder of the retired layout (one TensorBoard run per split: event files in train/ and eval/)
is refused, untouched, by a start (`lock`) and by the analysis (`scalars`).

Every file is written through `atomic_files.py`: a crash or kill at any moment leaves
it either as it was or as it was meant to be.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shlex
import time
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from absl import logging

from framework import config_sources
from framework.storage import checkpointing, file_names, progress_csv, summaries, trials
from framework.storage.atomic_files import atomic_write
from framework.storage.event_reader import read_scalars

_CONFIG = "config.gin"
_CONFIG_CHANGES = "config-changes.diff"  # a start whose config the checkpoints did not fit
_METADATA = "metadata.json"
_LOCK = ".lock"
# Sorts after the run's own event files: TensorBoard reads a folder's files in name order.
_RESULT_EVENTS = f"events.out.tfevents.9999999999{summaries.SWEEP_SUFFIX}"
EVAL_RETURN = "eval/episode_return"
_RETIRED_EVENT_FOLDERS = ("train", "eval")  # one TensorBoard run per split: refused
_BEST = "best"
_PROGRESS = "progress.csv"
_EVALUATIONS = "evaluations"


class PolicyRead(NamedTuple):
    """A policy read from a run folder: its environment step, and eval return where known."""

    step: int
    eval_return: float | None  # the best snapshot's evaluation
    state: dict  # the driver's policy_state(), as saved
    source: str  # "checkpoint" or "best"


class RunFolderBusyError(RuntimeError):
    """Another process holds the run folder's lock."""


class RunFolderError(OSError):
    """The run folder cannot be created, written or used as it is; the message names it, why,
    and what to do."""


class DamagedRecordError(ValueError):
    """config.gin or metadata.json cannot be read as what it should be; the message names the
    file, what is wrong and what to do (the checkpoints are never touched)."""


# The fields of a start's record that this code reads as text (`starts()`' users).
_START_TEXTS = ("command", "working_folder", "started", "trial")


def _reason(error: OSError) -> str:
    """What went wrong, in words, with the path that failed."""
    reasons = {
        errno.EEXIST: "a file of that name is in the way",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EROFS: "it is on a read-only filesystem",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOSPC: "the disk is full",
    }
    reason = reasons.get(error.errno, error.strerror or str(error))
    return f"{reason} ({error.filename})" if error.filename else reason


def _holds_event_files(folder: str) -> bool:
    return os.path.isdir(folder) and any(
        name.startswith("events.out.tfevents.") for name in os.listdir(folder)
    )


class RunDirectory:
    """Everything a run keeps under `base_dir`. Building one touches nothing on disk."""

    # what it holds
    FOLDERS = frozenset({"checkpoints", "discarded", _BEST, _EVALUATIONS})

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.checkpoint_dir = os.path.join(base_dir, "checkpoints")
        self.best_dir = os.path.join(base_dir, _BEST)

    @staticmethod
    def holds_run(path: str) -> bool:
        """Whether `path` looks like a run folder: a config or records (every run written by
        this framework has them), or a run's own event files (a sweep's are not a run)."""
        records = any(os.path.exists(os.path.join(path, name)) for name in (_CONFIG, _METADATA))
        events = file_names.matching(path, "*tfevents*")
        return records or any(not event.endswith(summaries.SWEEP_SUFFIX) for event in events)

    # ----- the training process's side -------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Holds the folder for this process: two processes must never train into one folder.

        The lock belongs to an open file (flock), so the kernel releases it when the process
        dies, however it dies. A folder of the retired layout is refused before anything is made.
        """
        self._refuse_retired_layout()
        lock_path = os.path.join(self.base_dir, _LOCK)
        try:
            os.makedirs(self.base_dir, exist_ok=True)
            lock_file = open(lock_path, "a")  # noqa: SIM115
        except IsADirectoryError:
            raise RunFolderError(
                f"The run folder's lock file {lock_path} is a folder, which this framework never "
                f"makes (made by hand, or by another tool?). Nothing was changed: remove it "
                f"(rmdir {lock_path}) and start the same command again."
            ) from None
        except OSError as error:
            raise RunFolderError(
                f"Cannot use {self.base_dir!r} as the run folder: {_reason(error)}. Choose a "
                "--base_dir that is a folder (or can be created) where this user may write."
            ) from error
        with lock_file:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as error:
                raise RunFolderBusyError(
                    f"Another process is training in {self.base_dir}; wait for it to finish, "
                    "or choose another --base_dir."
                ) from error
            yield

    def record_start(self, operative_config: str, metadata: dict, resumed_step: int | None) -> None:
        """config.gin and metadata.json describe the latest start; earlier ones are kept.

        A start whose config changed (say, a larger Runner.num_steps to train longer) keeps the
        previous config as config.before-start-<N>.gin; metadata.json lists every start.
        """
        starts = self.starts()
        if resumed_step is not None and not os.path.exists(os.path.join(self.base_dir, _METADATA)):
            logging.warning(
                "%s has no metadata.json: the records of the run's earlier starts are gone. "
                "Resuming from its checkpoint; this start's records are written anew.",
                self.base_dir,
            )
        previous = self.read_config()
        if previous is not None and previous != operative_config:
            kept = os.path.join(self.base_dir, f"config.before-start-{len(starts) + 1}.gin")
            atomic_write(kept, previous)
        starts.append({**metadata, "resumed_from_step": resumed_step})
        self._write_metadata(starts=starts, best=self.best())
        self.write_config(operative_config)

    def record_stop(self, step: int, reason: str) -> None:
        """Notes in the latest start's record that a callback ended it at `step`, and why (a
        search's pruner: "pruned at step N, ..."); a later start (a resume by hand) is a record
        of its own, without it. A runner used without the records of a start notes nothing."""
        starts = self.starts()
        if starts:
            starts[-1]["stopped"] = {"step": step, "reason": reason}
            self._write_metadata(starts=starts)

    def record_checkpoint(self, step: int) -> None:
        """Notes outside checkpoints/ that a checkpoint completed, so that a folder which later
        lost them is never silently trained again from step 0 (`last_checkpoint`)."""
        self._write_metadata(last_checkpoint=step)

    def last_checkpoint(self) -> int | None:
        """The step of the last checkpoint this folder's records say was completed."""
        return self._metadata().get("last_checkpoint")

    def set_aside_checkpoints(self) -> str:
        """Moves checkpoints/, best/ and evaluations/ (whatever is left of them) to
        discarded/<time>/; returns where."""
        target = self._made_discarded()
        for folder in (self.checkpoint_dir, self.best_dir, self._evaluations_dir()):
            if os.path.exists(folder):
                os.replace(folder, os.path.join(target, os.path.basename(folder)))
        self._write_metadata(last_checkpoint=None, best=None)
        return target

    def save_best(self, step: int, eval_return: float, template: dict) -> str:
        """Keeps `template` (a driver's `policy_state()`) as the best evaluation's, replacing
        the one before only once it is complete, and names it in metadata.json; returns where.

        Snapshots are numbered by write, not by step: a resumed run that evaluates a step
        again never unmarks the snapshot it is replacing. The snapshot itself records its step
        and return (`best()`), so a kill before metadata.json names it loses nothing.
        """
        store = self._best_store()
        written = store.complete_steps()
        number = written[0] + 1 if written else 1
        store.save(number, {"step": step, "eval_return": eval_return, "driver": template})
        self._write_metadata(best=self.best())
        return os.path.join(self.base_dir, _BEST, f"ckpt-{number}")

    def keep_best_of(self, step: int | None) -> None:
        """A run resumed from `step` (None: from scratch) has a history up to it alone: a best
        snapshot taken after it is of a history it no longer has, and is set aside (the run
        keeps its own best again as it evaluates; `record_start` names the one kept). So is a
        damaged one, with a warning: the run never depends on it."""
        best, problem = self._best_snapshot()
        if problem is not None:
            target = self._made_discarded()
            os.replace(self.best_dir, os.path.join(target, _BEST))
            logging.warning(
                "The best policy's snapshot is damaged: %s Set it aside in %s. The run does not "
                "depend on it and goes on; --checkpoint=best reads a new one once an evaluation "
                "improves on the best return so far.",
                problem,
                target,
            )
        elif best is not None and (step is None or best["step"] > step):
            target = self._made_discarded()
            os.replace(self.best_dir, os.path.join(target, _BEST))
            logging.info(
                "Set the best policy of step %d aside in %s: this start continues from %s.",
                best["step"],
                target,
                "step 0" if step is None else f"step {step}",
            )

    def holds_checkpoints(self) -> bool:
        """Whether checkpoints/ has a complete checkpoint (marked, not yet verified)."""
        return bool(checkpointing.complete_steps(self.checkpoint_dir))

    def write_config_changes(self, text: str) -> str:
        """The difference between config.gin and a config that does not fit its checkpoints;
        returns the file's path."""
        path = os.path.join(self.base_dir, _CONFIG_CHANGES)
        atomic_write(path, text)
        return path

    def write_config(self, operative_config: str) -> None:
        """The final config.gin: parts first called during training appear only at the end."""
        atomic_write(os.path.join(self.base_dir, _CONFIG), operative_config)

    def checkpoint_store(self, max_to_keep: int) -> checkpointing.CheckpointStore:
        return checkpointing.CheckpointStore(
            self.checkpoint_dir, os.path.join(self.checkpoint_dir, "damaged"), max_to_keep
        )

    def _best_store(self) -> checkpointing.CheckpointStore:
        return checkpointing.CheckpointStore(
            self.best_dir, os.path.join(self.best_dir, "damaged"), max_to_keep=1
        )

    def open_writers(
        self,
        resumed_step: int | None,
        texts: dict[str, str] | None = None,
        hparams: summaries.HParamsSession | None = None,
    ) -> summaries.SummaryWriters:
        """Writers for the event files that continue the curves of the restored step.

        What was logged after `resumed_step` is logged again from there on, so it is dropped;
        a start from scratch (None) sets every earlier event file aside instead and writes the
        run's `texts` and HParams session (a resumed run keeps those of its start).
        """
        if resumed_step is not None:
            damaged = os.path.join(self.base_dir, "discarded", "damaged")
            summaries.supersede_events_after(self.base_dir, resumed_step, damaged)
            return summaries.SummaryWriters(self.base_dir)
        summaries.set_aside_events(self.base_dir, self._discarded())
        writers = summaries.SummaryWriters(self.base_dir)
        for name, text in (texts or {}).items():
            writers.text(name, text)
        if hparams:
            writers.hparams(hparams, trials.readable_name(self.base_dir))
        return writers

    def open_progress(self, resumed_step: int | None) -> progress_csv.ProgressTable:
        """progress.csv, continued as `open_writers` continues the event files: the rows up to
        `resumed_step` are kept and the later ones dropped; a start from scratch (None) sets an
        earlier start's table aside, beside its event files. A damaged table (not UTF-8, no
        header) is set aside with a warning and a new one begun: its numbers are all in the
        event files too, so nothing is lost, and a start never stops for want of it."""
        path = self.progress_path()
        if resumed_step is None and os.path.exists(path):
            os.replace(path, os.path.join(self._made_discarded(), _PROGRESS))
        try:
            return progress_csv.ProgressTable(path, resumed_step)
        except progress_csv.DamagedTableError as error:
            target = self._made_discarded()
            os.replace(path, os.path.join(target, _PROGRESS))
            logging.warning(
                "%s is damaged: %s. Set it aside in %s; the new progress.csv holds the rows this "
                "start logs, after step %d, and the earlier ones are in the run's event files "
                "(TensorBoard, experiments.analyze) and in the file set aside.",
                path,
                error,
                target,
                resumed_step,
            )
            return progress_csv.ProgressTable(path, resumed_step)

    def progress_path(self) -> str:
        """Where the run's progress.csv is."""
        return os.path.join(self.base_dir, _PROGRESS)

    # ----- a sweep's record of the run ------------------------------------------------------

    def write_result_events(self, results: Sequence[tuple[int, object]]) -> None:
        """A sweep's record of the run (its HParams columns, and once it ended its result),
        replacing the last one; the run's own event files never take it in."""
        os.makedirs(self.base_dir, exist_ok=True)
        summaries.write_event_file(os.path.join(self.base_dir, _RESULT_EVENTS), results)

    def logged_its_session(self) -> bool:
        """Whether the run wrote its own HParams session (it got as far as starting)."""
        paths = file_names.matching(self.base_dir, "*tfevents*")
        return any(os.path.basename(path) != _RESULT_EVENTS for path in paths)

    # ----- readers -----------------------------------------------------------------------------

    def read_config(self) -> str | None:
        """config.gin as the latest start wrote it, or None; DamagedRecordError where gin cannot
        read it."""
        path = os.path.join(self.base_dir, _CONFIG)
        text = self._read(path)
        if text is not None:
            try:
                config_sources.statements(text, "the file")
            except ValueError as error:
                reason = str(error).rstrip(".")
                raise self._damaged(path, f"gin cannot read it ({reason})") from None
        return text

    def starts(self) -> list[dict]:
        """Every start's metadata (command, seed, versions, the step it resumed from)."""
        return self._metadata().get("starts", [])

    def seed(self) -> int | None:
        """The seed of the latest start, as its records say."""
        starts = self.starts()
        seed = str(starts[-1].get("seed", "")) if starts else ""
        return int(seed) if seed.isdigit() else None

    def started(self) -> str:
        """When the latest start began (ISO time in UTC), so that of two runs the newer can be
        told; "" for runs that predate the record."""
        starts = self.starts()
        return starts[-1].get("started", "") if starts else ""

    def trial_key(self) -> str | None:
        """The trial key of the latest start (`framework/storage/trials.py`): as recorded, or from
        config.gin for a run that predates the record; None without either."""
        starts = self.starts()
        if starts and starts[-1].get("trial"):
            return starts[-1]["trial"]
        config = self.read_config()
        return None if config is None else trials.trial_of(config).key

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """Every scalar the run logged, as tag -> [(step, value)] (not `evaluate --log`'s).
        Raises RunFolderError for a folder of the retired layout, whose curves it cannot give."""
        self._refuse_retired_layout()
        return read_scalars(self.base_dir)

    def eval_curve(self) -> list[tuple[int, float]]:
        """The evaluation return at each step it was taken, in step order."""
        return sorted(read_scalars(self.base_dir, tags={EVAL_RETURN}).get(EVAL_RETURN, []))

    def best(self) -> dict | None:
        """The best evaluation's step, return and snapshot (read from the snapshot), or None:
        none yet, or a damaged one (which `keep_best_of` sets aside)."""
        return self._best_snapshot()[0]

    def _best_snapshot(self) -> tuple[dict | None, str | None]:
        """`best()`, and what is wrong with the snapshot (a sentence) where it cannot be read:
        its files are checked against their hashes, the policy's weights left unread."""
        store = self._best_store()
        numbers = store.complete_steps()
        if not numbers:
            return None, None
        try:
            values = store.read(numbers[0], {"step": 0, "eval_return": 0.0})
        except checkpointing.CheckpointError as error:
            return None, " ".join(str(error).split())
        snapshot = os.path.join(_BEST, f"ckpt-{numbers[0]}")
        best = {"step": values["step"], "eval_return": values["eval_return"], "snapshot": snapshot}
        return best, None

    def read_policy(self, which: str | int, template: dict) -> PolicyRead:
        """Reads a driver's `policy_state()` (`template`) from the newest complete checkpoint
        ("latest"), the best snapshot ("best") or the checkpoint of a step, touching nothing:
        no lock, no tidying, no quarantine, so that a run still training can be read.

        "latest" passes over a damaged checkpoint to the one before (saying so) and over one
        pruned while it was read. Raises CheckpointError, naming what is there instead.
        """
        if which == "best":
            return self._read_best(template)
        store = self.checkpoint_store(max_to_keep=1)  # only read: never saves, never prunes
        while True:
            steps = store.complete_steps()
            if not steps:
                raise checkpointing.CheckpointError(
                    f"{self.base_dir} holds no complete checkpoint yet (none in "
                    f"{self.checkpoint_dir}): wait for the run's first one "
                    "(Runner.checkpoint_interval), or read its best evaluation with "
                    "--checkpoint=best once it has evaluated."
                )
            if which == "latest":
                read = self._read_newest(store, steps, template)
                if read is not None:
                    return read
                continue  # the newest was pruned while it was read: list again
            if which not in steps:
                raise checkpointing.CheckpointError(
                    f"{self.base_dir} has no complete checkpoint at step {which}: it holds "
                    f"steps {', '.join(map(str, sorted(steps)))} (older ones are pruned, "
                    "Runner.max_checkpoints_to_keep). Choose one of those, latest or best."
                )
            loaded = store.read(which, {"driver": template})["driver"]
            return PolicyRead(which, None, loaded, "checkpoint")

    def _read_newest(
        self, store: checkpointing.CheckpointStore, steps: list[int], template: dict
    ) -> PolicyRead | None:
        """The newest readable of `steps`, passing over damaged ones (not ones that do not fit:
        the next would not either); None if one vanished while read (list again)."""
        problems = []
        for step in steps:
            try:
                loaded = store.read(step, {"driver": template})["driver"]
            except (checkpointing.CheckpointFormatError, checkpointing.CheckpointMismatchError):
                raise
            except checkpointing.CheckpointError as error:
                if step not in store.complete_steps():
                    return None  # pruned by the training run meanwhile
                logging.warning("Passing over a damaged checkpoint: %s", error)
                problems.append(str(error))
                continue
            return PolicyRead(step, None, loaded, "checkpoint")
        raise checkpointing.CheckpointError(
            f"No complete checkpoint of {self.base_dir} can be read ({' '.join(problems)}) "
            "Nothing was changed."
        )

    def _read_best(self, template: dict) -> PolicyRead:
        store = self._best_store()
        while True:
            numbers = store.complete_steps()
            if not numbers:
                raise checkpointing.CheckpointError(
                    f"{self.base_dir} has no best-policy snapshot (in {self.best_dir}) yet: "
                    "one is written at the run's first evaluation (Runner.eval_interval). "
                    "Read --checkpoint=latest meanwhile."
                )
            snapshot = {"step": 0, "eval_return": 0.0, "driver": template}
            try:
                loaded = store.read(numbers[0], snapshot)
            except (checkpointing.CheckpointFormatError, checkpointing.CheckpointMismatchError):
                raise
            except checkpointing.CheckpointError:
                if numbers[0] not in store.complete_steps():
                    continue  # replaced by a better one while it was read
                raise
            return PolicyRead(loaded["step"], loaded["eval_return"], loaded["driver"], "best")

    # ----- the layout ------------------------------------------------------------------------

    def _refuse_retired_layout(self) -> None:
        """Raises RunFolderError, changing nothing, where event files lie in train/ or eval/:
        the layout of one TensorBoard run per split, which is neither read nor continued."""
        folders = [os.path.join(self.base_dir, name) for name in _RETIRED_EVENT_FOLDERS]
        held = [folder for folder in folders if _holds_event_files(folder)]
        if not held:
            return
        sources = " ".join(f"{shlex.quote(folder)}/events.out.tfevents.*" for folder in held)
        raise RunFolderError(
            f"{self.base_dir} is a run folder of the retired layout, one TensorBoard run per "
            f"split: event files in {' and '.join(held)}, where a run now keeps them in its "
            "folder itself. Nothing was changed. Move them up into the run folder (mv -n "
            f"{sources} {shlex.quote(self.base_dir)}/) and the run reads, and resumes from its "
            "checkpoints, as one TensorBoard run (TensorBoard's HParams dashboard then shows its "
            "hyperparameters without its metrics); or train it again in a fresh --base_dir."
        )

    def evaluation_log_dir(self, label: str) -> str:
        """A new folder for one `experiments.evaluate --log`: its own TensorBoard run, which
        neither analysis nor the run's curves read."""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        return os.path.join(self._evaluations_dir(), f"{stamp}-{label}")

    def _evaluations_dir(self) -> str:
        return os.path.join(self.base_dir, _EVALUATIONS)

    def _discarded(self) -> str:
        return os.path.join(self.base_dir, "discarded", time.strftime("%Y%m%d-%H%M%S"))

    def _made_discarded(self) -> str:
        """`_discarded()`, made."""
        target = self._discarded()
        os.makedirs(target, exist_ok=True)
        return target

    def _metadata(self) -> dict:
        path = os.path.join(self.base_dir, _METADATA)
        text = self._read(path)
        if text is None:
            return {"starts": []}
        try:
            metadata = json.loads(text)
        except ValueError as error:
            raise self._damaged(path, f"not JSON ({error})") from None
        if not isinstance(metadata, dict):
            raise self._damaged(path, f"JSON, but {_json_kind(metadata)}, not an object")
        problem = _metadata_problem(metadata)
        if problem:
            raise self._damaged(path, f"JSON, but {problem}")
        return metadata

    def _damaged(self, path: str, what: str) -> DamagedRecordError:
        """One paragraph: which record, what is wrong with it, and the way on."""
        name = os.path.basename(path)
        meaning = {
            _METADATA: "the records of the run's starts and its last checkpoint",
            _CONFIG: "the config of the run's latest start",
        }[name]
        return DamagedRecordError(
            f"{path} is damaged: {what}. It holds {meaning}; the checkpoints in "
            f"{self.checkpoint_dir} do not depend on it and nothing was changed. Move it aside "
            f"(mv {path} {path}.damaged) and start the run's training command again: it resumes "
            "from its newest checkpoint (a finished run stops there) and writes a new one."
        )

    def _write_metadata(self, **fields) -> None:
        metadata = self._metadata()
        metadata.update(fields)
        atomic_write(os.path.join(self.base_dir, _METADATA), json.dumps(metadata, indent=2))

    def _read(self, path: str) -> str | None:
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            data = f.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            where = f"{error.reason} at byte {error.start}"
            raise self._damaged(path, f"not UTF-8 text ({where})") from None


def _json_kind(value: object) -> str:
    """A JSON value's kind in words ("a list", "a number")."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


def _metadata_problem(metadata: dict) -> str | None:
    """Where metadata.json's object is not what this code writes (in the fields it reads), in
    words; None if nowhere."""
    starts = metadata.get("starts", [])
    if not isinstance(starts, list):
        return f'its "starts" is {_json_kind(starts)}, not a list of objects'
    for index, start in enumerate(starts):
        if not isinstance(start, dict):
            return f'its "starts" holds {_json_kind(start)} at position {index + 1}, not an object'
        for field in _START_TEXTS:
            if not isinstance(start.get(field, ""), str):
                return f'start {index + 1}\'s "{field}" is {_json_kind(start[field])}, not text'
    last = metadata.get("last_checkpoint")
    if last is not None and (type(last) is not int or last < 0):
        return f'its "last_checkpoint" is {last!r}, not an environment step'
    return None
