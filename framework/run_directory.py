"""The run folder's one owner: its layout, lock, config and metadata, checkpoints and event
files, and the readers that analysis and sweeps use. Nothing else decides a path inside it.

    <base_dir>/
      .lock                         held (flock) by the one process training here
      config.gin                    the operative config of the latest start
      config.before-start-<N>.gin   the config start N replaced, when it changed
      metadata.json                 {"starts": [...], "last_checkpoint": N}
      checkpoints/                  complete-or-ignored checkpoints (framework/checkpointing.py)
      checkpoints/damaged/          damaged checkpoints, set aside, never deleted
      events.out.tfevents.*         the run's event files: one TensorBoard run, its tags
                                    namespaced (train/, eval/, ...), one curve per tag across
                                    resumes, and its HParams session
      events.out.tfevents.9999999999.sweep   a sweep's record: its HParams columns, the result
      discarded/                    event files and checkpoints set aside, never deleted
      train/ eval/                  the event files of runs written before one TensorBoard run
                                    per training run: read as they are, merged on a resume

Every file is written through `framework/atomic_files.py`: a crash or kill at any moment leaves
it either as it was or as it was meant to be.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import time
from collections.abc import Iterator, Sequence

from absl import logging

from framework import checkpointing, summaries, trials
from framework.atomic_files import atomic_write
from framework.event_reader import read_scalars

_CONFIG = "config.gin"
_METADATA = "metadata.json"
_LOCK = ".lock"
# Sorts after the run's own event files: TensorBoard reads a folder's files in name order.
_RESULT_EVENTS = f"events.out.tfevents.9999999999{summaries.SWEEP_SUFFIX}"
EVAL_RETURN = "eval/episode_return"
_OLD_EVENT_FOLDERS = ("train", "eval")  # a TensorBoard run per split, before one per run


class RunFolderBusyError(RuntimeError):
    """Another process holds the run folder's lock."""


class RunFolderError(OSError):
    """The run folder cannot be created or written; the message names it and why."""


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


class RunDirectory:
    """Everything a run keeps under `base_dir`. Building one touches nothing on disk."""

    FOLDERS = frozenset({"checkpoints", "discarded", *_OLD_EVENT_FOLDERS})  # what it holds

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.checkpoint_dir = os.path.join(base_dir, "checkpoints")

    @staticmethod
    def holds_run(path: str) -> bool:
        """Whether `path` looks like a run folder: a config or records (every run written by
        this framework has them), or a run's own event files (a sweep's are not a run)."""
        records = any(os.path.exists(os.path.join(path, name)) for name in (_CONFIG, _METADATA))
        events = glob.glob(os.path.join(path, "*tfevents*"))
        return records or any(not event.endswith(summaries.SWEEP_SUFFIX) for event in events)

    # ----- the training process's side -------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Holds the folder for this process: two processes must never train into one folder.

        The lock belongs to an open file (flock), so the kernel releases it when the process
        dies, however it dies.
        """
        try:
            os.makedirs(self.base_dir, exist_ok=True)
            lock_file = open(os.path.join(self.base_dir, _LOCK), "a")  # noqa: SIM115
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
        previous = self.read_config()
        if previous is not None and previous != operative_config:
            kept = os.path.join(self.base_dir, f"config.before-start-{len(starts) + 1}.gin")
            atomic_write(kept, previous)
        starts.append({**metadata, "resumed_from_step": resumed_step})
        self._write_metadata(starts=starts)
        self.write_config(operative_config)

    def record_checkpoint(self, step: int) -> None:
        """Notes outside checkpoints/ that a checkpoint completed, so that a folder which later
        lost them is never silently trained again from step 0 (`last_checkpoint`)."""
        self._write_metadata(last_checkpoint=step)

    def last_checkpoint(self) -> int | None:
        """The step of the last checkpoint this folder's records say was completed."""
        return self._metadata().get("last_checkpoint")

    def set_aside_checkpoints(self) -> str:
        """Moves checkpoints/ (whatever is left of it) to discarded/<time>/; returns where."""
        target = self._discarded()
        os.makedirs(target, exist_ok=True)
        if os.path.exists(self.checkpoint_dir):
            os.replace(self.checkpoint_dir, os.path.join(target, "checkpoints"))
        self._write_metadata(last_checkpoint=None)
        return target

    def write_config(self, operative_config: str) -> None:
        """The final config.gin: parts first called during training appear only at the end."""
        atomic_write(os.path.join(self.base_dir, _CONFIG), operative_config)

    def checkpoint_store(self, max_to_keep: int) -> checkpointing.CheckpointStore:
        return checkpointing.CheckpointStore(
            self.checkpoint_dir, os.path.join(self.checkpoint_dir, "damaged"), max_to_keep
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
        folders = [self.base_dir, *self._old_event_folders()]
        if resumed_step is not None:
            damaged = os.path.join(self.base_dir, "discarded", "damaged")
            summaries.supersede_events_after(folders, resumed_step, damaged)
            self._remove_old_event_folders(merged=True)
            return summaries.SummaryWriters(self.base_dir)
        summaries.set_aside_events(folders, self._discarded())
        self._remove_old_event_folders(merged=False)
        writers = summaries.SummaryWriters(self.base_dir)
        for name, text in (texts or {}).items():
            writers.text(name, text)
        if hparams:
            writers.hparams(hparams)
        return writers

    # ----- a sweep's record of the run ------------------------------------------------------

    def write_result_events(self, results: Sequence[tuple[int, object]]) -> None:
        """A sweep's record of the run (its HParams columns, and once it ended its result),
        replacing the last one; the run's own event files never take it in."""
        os.makedirs(self.base_dir, exist_ok=True)
        summaries.write_event_file(os.path.join(self.base_dir, _RESULT_EVENTS), results)

    def logged_its_session(self) -> bool:
        """Whether the run wrote its own HParams session (it got as far as starting)."""
        paths = glob.glob(os.path.join(self.base_dir, "*tfevents*"))
        return any(os.path.basename(path) != _RESULT_EVENTS for path in paths)

    # ----- readers -----------------------------------------------------------------------------

    def read_config(self) -> str | None:
        """config.gin as the latest start wrote it, or None."""
        return self._read(os.path.join(self.base_dir, _CONFIG))

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
        """The trial key of the latest start (`framework/trials.py`): as recorded, or from
        config.gin for a run that predates the record; None without either."""
        starts = self.starts()
        if starts and starts[-1].get("trial"):
            return starts[-1]["trial"]
        config = self.read_config()
        return None if config is None else trials.trial_of(config).key

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """Every scalar the run logged, as tag -> [(step, value)]."""
        return read_scalars(self.base_dir)

    def eval_curve(self) -> list[tuple[int, float]]:
        """The evaluation return at each step it was taken, in step order."""
        return sorted(read_scalars(self.base_dir, tags={EVAL_RETURN}).get(EVAL_RETURN, []))

    # ----- the layout ------------------------------------------------------------------------

    def _old_event_folders(self) -> list[str]:
        """The folders of the older layout that still hold event files (or a merge of them)."""
        folders = [os.path.join(self.base_dir, name) for name in _OLD_EVENT_FOLDERS]
        return [folder for folder in folders if glob.glob(os.path.join(folder, "*events*"))]

    def _remove_old_event_folders(self, merged: bool) -> None:
        """Once their events are merged (or set aside: `merged` False), the older layout's
        folders go; said once."""
        emptied = []
        for name in _OLD_EVENT_FOLDERS:
            folder = os.path.join(self.base_dir, name)
            if os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
                emptied.append(name)
        if emptied and merged:
            logging.info(
                "Merged the event files of %s into the run folder itself: a run is one "
                "TensorBoard run from now on, its tags keeping their namespaces.",
                " and ".join(f"{name}/" for name in emptied),
            )

    def _discarded(self) -> str:
        return os.path.join(self.base_dir, "discarded", time.strftime("%Y%m%d-%H%M%S"))

    def _metadata(self) -> dict:
        text = self._read(os.path.join(self.base_dir, _METADATA))
        return {"starts": []} if text is None else json.loads(text)

    def _write_metadata(self, **fields) -> None:
        metadata = self._metadata()
        metadata.update(fields)
        atomic_write(os.path.join(self.base_dir, _METADATA), json.dumps(metadata, indent=2))

    @staticmethod
    def _read(path: str) -> str | None:
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()
