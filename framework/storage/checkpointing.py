"""Checkpoints written as one complete unit, and resumed from the newest complete one.

What a checkpoint holds is one nested dict of string keys (the `state`); its leaves are TF
trackables, numpy arrays or JSON values, and each kind goes to one file. A checkpoint at step N
is, in `checkpoints/`:
  ckpt-N.index, ckpt-N.data-*   the trackables, in one TF checkpoint, named by key path
  ckpt-N.arrays.npz             the numpy arrays, named by key path ("replay/observations")
  ckpt-N.values.json            the JSON values by key path, and the key paths of every kind
  ckpt-N.complete               written last: the format version, the step, a sha256 per file
(the TF and numpy files only when the state has such leaves; tuples come back as lists).

Only a checkpoint with a marker whose hashes still match is restored; a crash or kill at any
moment leaves at worst an unmarked (ignored) newer checkpoint beside the last good one.
Damaged checkpoints are reported, skipped and moved to a folder of the caller's choosing (the run
folder names `checkpoints/damaged/`), never deleted.
A checkpoint of another format (an older layout of this code) is refused, never half-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import zipfile
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging

from framework.storage import atomic_files, file_names

# 3: the runner over a driver ("runner", "driver", "rngs"; A3C's state under the runner's).
FORMAT_VERSION = 3
_MARKER_SUFFIX = ".complete"
_ARRAYS_SUFFIX = ".arrays.npz"
_VALUES_SUFFIX = ".values.json"
_KINDS = ("trackables", "arrays", "values")


def complete_steps(directory: str) -> list[int]:
    """Steps of the checkpoints in `directory` that have a completion marker, newest first
    (marked, not yet verified)."""
    steps = []
    for marker in file_names.matching(directory, "ckpt-*" + _MARKER_SUFFIX):
        match = re.fullmatch(r"ckpt-(\d+)" + re.escape(_MARKER_SUFFIX), os.path.basename(marker))
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps, reverse=True)


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, ...): what, where, and what is intact."""


class CheckpointError(RuntimeError):
    """No usable checkpoint although some exist; the message lists each one and its problem."""


class CheckpointFormatError(CheckpointError):
    """A checkpoint written by another layout of this code (another format version)."""


class CheckpointMismatchError(CheckpointError):
    """An undamaged checkpoint that does not hold the state asked for, or not in its shapes."""


class _Unusable(Exception):
    """One checkpoint cannot be restored (damaged, or not this state's structure)."""


class _Mismatched(_Unusable):
    """Undamaged (its hashes checked out), but not the state asked for."""


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_is_json_value(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def _kind(path: str, leaf: Any) -> str:
    if isinstance(leaf, tf.__internal__.tracking.Trackable):
        return "trackables"
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.hasobject:
            raise TypeError(f"State leaf {path!r} is an object array, which cannot be saved.")
        return "arrays"
    if _is_json_value(leaf):
        return "values"
    raise TypeError(
        f"State leaf {path!r} is a {type(leaf).__name__}: a checkpoint holds TF trackables, "
        "numpy arrays and JSON values (tuples come back as lists)."
    )


def _children(value: Any) -> list[tuple[str, Any]] | None:
    """The items of a structure node, or None for a leaf. Dicts are always structure; a list
    or tuple is structure when it holds arrays or trackables (a list of environment layers),
    else one JSON value."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list | tuple) and not _is_json_value(value):
        return [(str(index), item) for index, item in enumerate(value)]
    return None


def _flatten(state: dict, prefix: str = "") -> dict[str, Any]:
    """Leaves by key path ("agent/online"); nested dicts are structure, never leaves."""
    leaves = {}
    for key, value in _children(state):
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(
                f"State key {key!r} under {prefix or 'the top'!r} must be a "
                "non-empty string without '/'."
            )
        path = f"{prefix}/{key}" if prefix else key
        if _children(value) is not None:
            leaves.update(_flatten(value, path))
        else:
            leaves[path] = value
    return leaves


def _split(state: dict) -> dict[str, dict[str, Any]]:
    """The state's leaves by kind, then by key path."""
    split: dict[str, dict[str, Any]] = {kind: {} for kind in _KINDS}
    for path, leaf in _flatten(state).items():
        split[_kind(path, leaf)][path] = leaf
    return split


def _rebuild(state: Any, saved: dict[str, Any], prefix: str = "") -> Any:
    """`state`'s structure with the leaves found in `saved` (by key path) replaced."""
    loaded = {}
    for key, value in _children(state):
        path = f"{prefix}/{key}" if prefix else key
        is_node = _children(value) is not None
        loaded[key] = _rebuild(value, saved, path) if is_node else saved.get(path, value)
    return loaded if isinstance(state, dict) else list(loaded.values())


def _tf_checkpoint(trackables: dict[str, Any]) -> tf.train.Checkpoint:
    """One TF checkpoint of the trackables by key path; under one dict, so that no key can
    clash with a tf.train.Checkpoint attribute ("write", "save_counter")."""
    return tf.train.Checkpoint(state=trackables)


def _call_restored_hooks(checkpoint: tf.train.Checkpoint) -> None:
    """Calls `restored()` on every restored object that has one (a learner takes its configured
    learning rates back: a constant rate is a variable of its optimizer, so the restore brought
    the saved one), so no agent has to remember. Found by duck typing: the run folder knows
    nothing of the update pipeline."""
    for trackable in tf.train.TrackableView(checkpoint).descendants():
        hook = getattr(trackable, "restored", None)
        if callable(hook):
            hook()


def _write_arrays(path: str, arrays: dict[str, np.ndarray]) -> None:
    """np.savez's format (np.load reads it), with any key path as a name, never pickled."""
    with atomic_files.atomic_path(path) as temp, zipfile.ZipFile(temp, "w") as archive:
        for name, array in arrays.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def _read_arrays(path: str, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of `names` (all by default); each member's CRC is checked as it is read."""
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in (archive.files if names is None else names)}


def _structure_problem(expected: dict[str, list[str]], saved: dict[str, list[str]]) -> str | None:
    """What differs between this state's key paths and the saved ones, by path; None if none."""
    expected_kinds = {path: kind for kind in _KINDS for path in expected[kind]}
    saved_kinds = {path: kind for kind in _KINDS for path in saved.get(kind, [])}
    differences = [
        f"{path} ({_describe(saved_kinds.get(path))} saved, "
        f"{_describe(expected_kinds.get(path))} expected)"
        for path in sorted(saved_kinds.keys() | expected_kinds.keys())
        if saved_kinds.get(path) != expected_kinds.get(path)
    ]
    if not differences:
        return None
    return "its state does not match the one to restore: " + ", ".join(differences)


def _missing(expected: dict[str, list[str]], saved: dict[str, list[str]]) -> str | None:
    """The key paths of this (partial) state that the saved one lacks or holds as another
    kind; None if it holds them all."""
    absent = [
        f"{path} ({_describe(kind)})"
        for kind in _KINDS
        for path in expected[kind]
        if path not in saved.get(kind, [])
    ]
    return f"it does not hold {', '.join(absent)}" if absent else None


def _describe(kind: str | None) -> str:
    return {"trackables": "a trackable", "arrays": "an array", "values": "a JSON value"}.get(
        kind, "nothing"
    )


class CheckpointStore:
    """Saves a nested state dict per step and restores the newest complete one into it."""

    def __init__(self, directory: str, damaged_directory: str, max_to_keep: int = 3):
        self.directory = directory
        self._damaged_directory = damaged_directory  # where damaged checkpoints are moved
        self._max_to_keep = max_to_keep

    def _prefix(self, step: int) -> str:
        return os.path.join(self.directory, f"ckpt-{step}")

    def save(self, step: int, state: dict) -> int:
        """Writes `state` for `step`, then the marker that makes it count.

        Returns the checkpoint's size in bytes.
        """
        split = _split(state)  # an unsavable leaf fails here, before anything is touched
        prefix = self._prefix(step)
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._remove(prefix)  # re-saving a step: unmark, then clear the old files
            files = self._write(prefix, step, split)
        except (OSError, tf.errors.OpError) as error:  # TF's own save: ResourceExhaustedError
            self._remove(prefix)  # nothing half written stays behind
            previous = [s for s in self.complete_steps() if s != step]
            intact = (
                f"the checkpoint at step {previous[0]} is intact"
                if previous
                else "no earlier checkpoint exists"
            )
            raise CheckpointWriteError(
                f"Could not write the checkpoint at step {step} in {self.directory}: "
                f"{_write_failure(error, prefix)}. Nothing of it was kept and {intact}; free the "
                "space (or fix the folder) and start the same command again to resume."
            ) from error
        self._prune(keep=step)
        return sum(os.path.getsize(path) for path in [*files, prefix + _MARKER_SUFFIX])

    def _write(self, prefix: str, step: int, split: dict[str, dict[str, Any]]) -> list[str]:
        """Data first, each file synced, then the marker that makes them count."""
        files = []
        if split["trackables"]:
            _tf_checkpoint(split["trackables"]).write(prefix)
            files += sorted(_files_of(prefix, ".index", ".data-*"))
            for path in files:
                atomic_files.fsync(path)
        if split["arrays"]:
            _write_arrays(prefix + _ARRAYS_SUFFIX, split["arrays"])
            files.append(prefix + _ARRAYS_SUFFIX)
        values = {kind: sorted(split[kind]) for kind in ("trackables", "arrays")}
        values["values"] = split["values"]
        atomic_files.atomic_write(prefix + _VALUES_SUFFIX, json.dumps(values))
        files.append(prefix + _VALUES_SUFFIX)
        marker = {
            "format": FORMAT_VERSION,
            "step": step,
            "files": {os.path.relpath(f, self.directory): _sha256(f) for f in files},
        }
        atomic_files.atomic_write(prefix + _MARKER_SUFFIX, json.dumps(marker))
        return files

    def tidy(self) -> None:
        """Finishes what a killed process left half done, so that the folder stays bounded:
        prunes complete checkpoints beyond `max_to_keep`, and removes the files of checkpoints
        that never completed (a killed write) or whose marker a prune had already removed.

        Call it once the run is known to be resumable or new: it never touches a complete
        checkpoint within `max_to_keep`, but unmarked files are all that is left of a folder
        whose markers were lost, which the caller must rule out first.
        """
        complete = self.complete_steps()
        if complete:
            self._prune(keep=complete[0])
        leftovers = file_names.matching(self.directory, "ckpt-*")
        leftovers += file_names.matching(self.directory, atomic_files.TEMP_PREFIX + "*")
        for path in leftovers:
            found = re.match(r"ckpt-(\d+)(_temp)?", os.path.basename(path))
            if found and int(found.group(1)) in complete and not found.group(2):
                continue
            logging.warning("Removing %s, left by an interrupted checkpoint write or prune.", path)
            _delete(path)

    def complete_steps(self) -> list[int]:
        return complete_steps(self.directory)

    def restore_latest(self, state: dict) -> tuple[int, dict] | None:
        """Restores the newest complete, undamaged checkpoint into `state`.

        Trackables are restored in place; returns (step, loaded), `loaded` being `state` with
        its array and JSON leaves replaced by the saved ones. Returns None when no checkpoint
        was ever completed; raises CheckpointError when some were but none is usable any more,
        or as soon as it meets one of another format.
        """
        split = _split(state)
        problems: list[_Unusable] = []
        damaged = []
        for step in self.complete_steps():
            prefix = self._prefix(step)
            try:
                saved = self._load(prefix, split, partial=False)
            except _Unusable as problem:
                logging.warning("Skipping damaged or mismatched checkpoint %s: %s", prefix, problem)
                problems.append(problem)
                damaged.append(prefix)
                continue
            self._quarantine(damaged)
            return step, _rebuild(state, saved)
        if problems:
            # Every one whole but not of this state: the config changed, not the files.
            kind = (
                CheckpointMismatchError
                if all(isinstance(problem, _Mismatched) for problem in problems)
                else CheckpointError
            )
            listed = "; ".join(f"{p}: {q}" for p, q in zip(damaged, problems, strict=True))
            raise kind(
                f"No usable checkpoint in {self.directory} ({listed}). Nothing was deleted: "
                "inspect or move the directory, or start the run in a new --base_dir."
            )
        unmarked = file_names.matching(self.directory, "ckpt-*" + _VALUES_SUFFIX)
        if unmarked:  # a run killed while writing its first checkpoint: that one never counted
            logging.warning("Ignoring unfinished checkpoint(s) %s; starting afresh.", unmarked)
        return None

    def read(self, step: int, state: dict) -> dict:
        """Reads the checkpoint at `step` into `state`, which may hold only part of what was
        saved (the policy out of a whole run's state), touching nothing on disk (no tidying,
        no quarantine): a run that is still training may be read.

        Only what is read is checked: the marker, the TF files and the JSON values by their
        hashes, the arrays it reads by their zip CRCs (the others, a replay, are never read).
        Returns `state` with its array and JSON leaves replaced by the saved ones; raises
        CheckpointError (CheckpointFormatError for another format) naming the problem.
        """
        prefix = self._prefix(step)
        try:
            saved = self._load(prefix, _split(state), partial=True)
        except _Unusable as problem:
            kind = CheckpointMismatchError if isinstance(problem, _Mismatched) else CheckpointError
            reason = str(problem).rstrip(".")
            raise kind(f"The checkpoint {prefix} cannot be read: {reason}.") from None
        return _rebuild(state, saved)

    def _load(self, prefix: str, split: dict[str, dict[str, Any]], partial: bool) -> dict[str, Any]:
        """Restores the trackables at `prefix` and returns the saved arrays and JSON values by
        key path; raises _Unusable with the reason. Trackables are restored last, once the hashes,
        the structure and the arrays have all checked out. `partial`: `split` may be a part of
        what was saved, and the arrays file is checked by its members' CRCs as they are read."""
        self._verify(prefix, self._read_marker(prefix), skip_arrays=partial)
        try:
            with open(prefix + _VALUES_SUFFIX) as f:
                values = json.load(f)
            expected = {k: list(v) for k, v in split.items()}
            check = _missing if partial else _structure_problem
            problem = check(expected, values)
            if problem:
                raise _Mismatched(problem)
            saved = values["values"]
            if split["arrays"]:
                names = list(split["arrays"]) if partial else None
                saved.update(_read_arrays(prefix + _ARRAYS_SUFFIX, names))
        except _Unusable:
            raise
        except Exception as error:  # any failure to read makes this one unusable
            raise _Unusable(f"{type(error).__name__}: {error}") from error
        if split["trackables"]:  # files whose hashes checked out: a failure is a misfit
            with file_names.tensorflow_readable(prefix) as readable:
                try:
                    checkpoint = _tf_checkpoint(split["trackables"])
                    status = checkpoint.read(readable)
                    status.assert_existing_objects_matched()
                    if partial:
                        status.expect_partial()  # the rest of the run's state stays unread
                    _call_restored_hooks(checkpoint)
                except Exception as error:
                    reason = str(error).replace(readable, prefix)  # the path the user knows
                    raise _Mismatched(f"{type(error).__name__}: {reason}") from error
        return saved

    def _read_marker(self, prefix: str) -> dict:
        """The marker at `prefix`; CheckpointError when another format wrote it."""
        try:
            with open(prefix + _MARKER_SUFFIX) as f:
                marker = json.load(f)
            found = marker.get("format", 1)  # format 1 markers had no version
        except (OSError, ValueError, AttributeError) as error:
            raise _Unusable(f"unreadable completion marker ({error})") from error
        if found != FORMAT_VERSION:
            age = "a newer" if isinstance(found, int) and found > FORMAT_VERSION else "an older"
            raise CheckpointFormatError(
                f"The checkpoint {prefix} was written by {age} layout of this framework "
                f"(checkpoint format {found}; this code reads format {FORMAT_VERSION}), so this "
                "code cannot resume or read it. Nothing was read, moved or deleted: start the "
                "run in a new --base_dir, or use this one with the code that wrote it."
            )
        return marker

    def _verify(self, prefix: str, marker: dict, skip_arrays: bool = False) -> None:
        """Raises _Unusable unless every file the marker lists is there with its hash (but
        the arrays file, with `skip_arrays`)."""
        files = marker.get("files")
        if not isinstance(files, dict):
            raise _Unusable(f"completion marker {prefix + _MARKER_SUFFIX} lists no files")
        for relative, expected in files.items():
            if skip_arrays and relative.endswith(_ARRAYS_SUFFIX):
                continue
            path = os.path.join(self.directory, relative)
            if not os.path.exists(path):
                raise _Unusable(f"missing file {path}")
            if _sha256(path) != expected:
                raise _Unusable(
                    f"file {path} does not match its recorded hash (truncated or altered)"
                )

    def _quarantine(self, prefixes: list[str]) -> None:
        """Moves damaged checkpoints into `<damaged_directory>/<time>-<pid>/`: kept for
        inspection, out of the way of the resumed run, which will save at the same steps
        again."""
        if not prefixes:
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = os.path.join(self._damaged_directory, f"{stamp}-{os.getpid()}")
        os.makedirs(target)
        for prefix in prefixes:
            for path in _files_of(prefix, ".*"):
                os.replace(path, os.path.join(target, os.path.basename(path)))
            logging.warning("Moved the damaged checkpoint %s to %s.", prefix, target)

    def _prune(self, keep: int) -> None:
        """Deletes complete checkpoints beyond `max_to_keep`, oldest first, never `keep`."""
        for step in self.complete_steps()[self._max_to_keep :]:
            if step != keep:
                self._remove(self._prefix(step))

    @staticmethod
    def _remove(prefix: str) -> None:
        """Unmarks the checkpoint at `prefix` first (a half-deleted one is then ignored), then
        deletes its files."""
        if os.path.exists(prefix + _MARKER_SUFFIX):
            os.remove(prefix + _MARKER_SUFFIX)
        for path in _files_of(prefix, ".*", "_temp*"):
            _delete(path)


def _files_of(prefix: str, *patterns: str) -> list[str]:
    """The files of the checkpoint at `prefix` whose names continue its name as one of
    `patterns` does (".*": all of them)."""
    folder, name = os.path.split(prefix)
    return [path for pattern in patterns for path in file_names.matching(folder, name + pattern)]


def _write_failure(error: OSError | tf.errors.OpError, prefix: str) -> str:
    """What failed, in words, with the file: the OS's reason, or TensorFlow's own (whose
    variable save reports a full disk as ResourceExhaustedError)."""
    if isinstance(error, tf.errors.OpError):
        reason = " ".join(error.message.split())
        if isinstance(error, tf.errors.ResourceExhaustedError):
            reason = f"the disk is full ({reason})"
        return f"{reason} ({prefix}.data-*, TensorFlow's variable save)"
    return f"{error.strerror or error} ({error.filename or prefix})"


def _delete(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
