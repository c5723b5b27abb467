"""Checkpoints written as one complete unit, and resumed from the newest complete one.

A checkpoint at step N is three things in `checkpoints/`:
  ckpt-N.index, ckpt-N.data-*   the TF checkpoint (tf.train.CheckpointManager)
  ckpt-N.extras/                numpy-side state: replay, random generators, counters
  ckpt-N.complete               written last: JSON with the step and a sha256 of every file

Only a checkpoint with a marker whose hashes still match is restored; a crash or kill at any
moment leaves at worst an unmarked (ignored) newer checkpoint beside the last good one.
Damaged checkpoints are reported, skipped and moved to `checkpoints/damaged/`, never deleted.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from absl import logging

_MARKER_SUFFIX = ".complete"


def complete_steps(directory: str) -> list[int]:
    """Steps of the checkpoints in `directory` that have a completion marker, newest first
    (marked, not yet verified)."""
    steps = []
    for marker in glob.glob(os.path.join(directory, "ckpt-*" + _MARKER_SUFFIX)):
        match = re.fullmatch(r"ckpt-(\d+)" + re.escape(_MARKER_SUFFIX), os.path.basename(marker))
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps, reverse=True)


class CheckpointError(RuntimeError):
    """No usable checkpoint although some exist; the message lists each one and its problem."""


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """Saves and restores `trackables` (TF) plus extras written by callbacks."""

    def __init__(self, directory: str, trackables: dict[str, Any], max_to_keep: int = 3):
        self.directory = directory
        self._checkpoint = tf.train.Checkpoint(**trackables)
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, directory, max_to_keep=None, checkpoint_name="ckpt"
        )
        self._max_to_keep = max_to_keep

    def _prefix(self, step: int) -> str:
        return os.path.join(self.directory, f"ckpt-{step}")

    def save(self, step: int, write_extras: Callable[[str], None]) -> int:
        """Writes TF state and extras for `step`, then the marker that makes them count.

        Returns the checkpoint's size in bytes.
        """
        prefix = self._prefix(step)
        extras_dir = prefix + ".extras"
        if os.path.exists(prefix + _MARKER_SUFFIX):
            os.remove(prefix + _MARKER_SUFFIX)  # re-saving a step: unmark before rewriting
        shutil.rmtree(extras_dir, ignore_errors=True)
        self._manager.save(checkpoint_number=step)
        os.makedirs(extras_dir)
        write_extras(extras_dir)
        files = sorted(glob.glob(prefix + ".index") + glob.glob(prefix + ".data-*"))
        files += sorted(glob.glob(os.path.join(extras_dir, "*")))
        marker = {
            "step": step,
            "files": {os.path.relpath(f, self.directory): _sha256(f) for f in files},
        }
        for path in files:
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        tmp = prefix + _MARKER_SUFFIX + ".tmp"
        with open(tmp, "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, prefix + _MARKER_SUFFIX)
        _fsync_dir(self.directory)
        self._prune(keep=step)
        return sum(os.path.getsize(path) for path in files)

    def complete_steps(self) -> list[int]:
        return complete_steps(self.directory)

    def restore_latest(self, read_extras: Callable[[str], None]) -> int | None:
        """Restores the newest complete, undamaged checkpoint; returns its step.

        Returns None when no checkpoint was ever completed; raises CheckpointError when some
        were but none is usable any more.
        """
        problems, damaged = [], []
        for step in self.complete_steps():
            prefix = self._prefix(step)
            problem = self._verify(prefix)
            if problem is None:
                try:
                    self._checkpoint.restore(prefix).assert_existing_objects_matched()
                    read_extras(prefix + ".extras")
                except Exception as error:  # any failure to read makes this one unusable
                    problem = f"{type(error).__name__}: {error}"
                else:
                    self._quarantine(damaged)
                    return step
            logging.warning("Skipping damaged checkpoint %s: %s", prefix, problem)
            problems.append(f"{prefix}: {problem}")
            damaged.append(prefix)
        if problems:
            raise CheckpointError(
                f"No usable checkpoint in {self.directory} ({'; '.join(problems)}). Nothing was "
                "deleted: inspect or move the directory, or start the run in a new --base_dir."
            )
        unmarked = glob.glob(os.path.join(self.directory, "ckpt-*.index"))
        if unmarked:  # a run killed while writing its first checkpoint: that one never counted
            logging.warning("Ignoring unfinished checkpoint(s) %s; starting afresh.", unmarked)
        return None

    def _quarantine(self, prefixes: list[str]) -> None:
        """Moves damaged checkpoints into `damaged/<time>/`: kept for inspection, out of the
        way of the resumed run, which will save at the same steps again."""
        if not prefixes:
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = os.path.join(self.directory, "damaged", f"{stamp}-{os.getpid()}")
        os.makedirs(target)
        for prefix in prefixes:
            for path in glob.glob(prefix + ".*"):
                os.replace(path, os.path.join(target, os.path.basename(path)))
            logging.warning("Moved the damaged checkpoint %s to %s.", prefix, target)

    def _verify(self, prefix: str) -> str | None:
        """The reason the checkpoint at `prefix` is unusable, or None when its hashes match."""
        try:
            with open(prefix + _MARKER_SUFFIX) as f:
                marker = json.load(f)
            files = marker["files"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            return f"unreadable completion marker ({error})"
        for relative, expected in files.items():
            path = os.path.join(self.directory, relative)
            if not os.path.exists(path):
                return f"missing file {path}"
            if _sha256(path) != expected:
                return f"file {path} does not match its recorded hash (truncated or altered)"
        return None

    def _prune(self, keep: int) -> None:
        """Deletes complete checkpoints beyond `max_to_keep`, oldest first, never `keep`."""
        steps = self.complete_steps()
        for step in steps[self._max_to_keep :]:
            if step == keep:
                continue
            prefix = self._prefix(step)
            os.remove(prefix + _MARKER_SUFFIX)  # unmark first: a half-deleted one is ignored
            for path in glob.glob(prefix + ".index") + glob.glob(prefix + ".data-*"):
                os.remove(path)
            shutil.rmtree(prefix + ".extras", ignore_errors=True)
