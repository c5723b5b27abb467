"""The run folder's one owner: its lock, config and metadata, checkpoints, event files, and the
atomic writes every file in it goes through.

    <base_dir>/
      .lock                         held (flock) by the one process training here
      config.gin                    the operative config of the latest start
      config.before-start-<N>.gin   the config start N replaced, when it changed
      metadata.json                 {"starts": [...]}: every start's metadata and resumed step
      checkpoints/                  complete-or-ignored checkpoints (framework/checkpointing.py)
      train/ eval/                  event files, one curve per tag across resumes
      discarded/                    event files set aside, never deleted (framework/summaries.py)

A crash or kill at any moment leaves every file either as it was or as it was meant to be.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator

from framework import checkpointing, summaries

_TEMP_PREFIX = ".tmp."  # hidden, and keeps the extension (np.savez appends one otherwise)


def fsync(path: str) -> None:
    """Flushes a file's data, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path beside `path` for writers that need a path (TFRecordWriter, np.savez).

    Once the block succeeds the file is flushed to disk and renamed onto `path`, so a reader
    sees the old file or the whole new one, never part; if the block fails it is removed.
    """
    folder, name = os.path.split(os.path.abspath(path))
    temp = os.path.join(folder, _TEMP_PREFIX + name)
    try:
        yield temp
        fsync(temp)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)
        raise
    fsync(folder)


def atomic_write(path: str, data: str | bytes) -> None:
    """Replaces `path` with `data` (str as UTF-8) in one step that survives a crash."""
    content = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as temp, open(temp, "wb") as f:
        f.write(content)


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
    """Everything a run keeps under `base_dir`; the only code that decides its layout."""

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.checkpoint_dir = os.path.join(base_dir, "checkpoints")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Holds the folder for this process: two processes must never train into one folder.

        The lock belongs to an open file (flock), so the kernel releases it when the process
        dies, however it dies.
        """
        try:
            os.makedirs(self.base_dir, exist_ok=True)
            lock_file = open(os.path.join(self.base_dir, ".lock"), "a")  # noqa: SIM115
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
        starts = self._starts()
        previous = self._read(self._config_path)
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
        text = self._read(self._metadata_path)
        return None if text is None else json.loads(text).get("last_checkpoint")

    def set_aside_checkpoints(self) -> str:
        """Moves checkpoints/ (whatever is left of it) to discarded/<time>/; returns where."""
        target = os.path.join(self.base_dir, "discarded", time.strftime("%Y%m%d-%H%M%S"))
        os.makedirs(target, exist_ok=True)
        if os.path.exists(self.checkpoint_dir):
            os.replace(self.checkpoint_dir, os.path.join(target, "checkpoints"))
        self._write_metadata(last_checkpoint=None)
        return target

    def _write_metadata(self, **fields) -> None:
        text = self._read(self._metadata_path)
        metadata = {"starts": []} if text is None else json.loads(text)
        metadata.update(fields)
        atomic_write(self._metadata_path, json.dumps(metadata, indent=2))

    def read_config(self) -> str | None:
        """config.gin as the latest start wrote it, or None."""
        return self._read(self._config_path)

    def write_config(self, operative_config: str) -> None:
        """The final config.gin: parts first called during training appear only at the end."""
        atomic_write(self._config_path, operative_config)

    def checkpoint_store(self, max_to_keep: int) -> checkpointing.CheckpointStore:
        return checkpointing.CheckpointStore(self.checkpoint_dir, max_to_keep=max_to_keep)

    def open_writers(
        self,
        resumed_step: int | None,
        texts: dict[str, str] | None = None,
        hparams: summaries.HParamsSession | None = None,
    ) -> summaries.SummaryWriters:
        """Writers for train/ and eval/ that continue the curves of the restored step.

        What was logged after `resumed_step` is logged again from there on, so it is dropped;
        a start from scratch (None) sets every earlier event file aside instead and writes the
        run's `texts` and HParams session (a resumed run keeps those of its start).
        """
        if resumed_step is not None:
            summaries.supersede_events_after(self.base_dir, resumed_step)
            return summaries.SummaryWriters(self.base_dir)
        summaries.set_aside_events(self.base_dir)
        writers = summaries.SummaryWriters(self.base_dir)
        for name, text in (texts or {}).items():
            writers.text(name, text)
        if hparams:
            writers.hparams(hparams)
        return writers

    @property
    def _config_path(self) -> str:
        return os.path.join(self.base_dir, "config.gin")

    @property
    def _metadata_path(self) -> str:
        return os.path.join(self.base_dir, "metadata.json")

    def _starts(self) -> list[dict]:
        text = self._read(self._metadata_path)
        return [] if text is None else json.loads(text).get("starts", [])

    @staticmethod
    def _read(path: str) -> str | None:
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()
