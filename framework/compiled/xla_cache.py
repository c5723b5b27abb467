"""XLA's compiled programs kept on disk, so that a run loads what an earlier run compiled.

XLA compiles each learner call once per process, and on this project's CPUs that costs seconds
(docs/speed.md) which the same config pays again in every run, every seed of a
sweep and every resume. TensorFlow can keep the programs in a folder
(its flag `--tf_xla_persistent_cache_directory`), keyed by the program: a run whose program was
compiled before loads that machine code, so its numbers are the same bit for bit. The programs
do not depend on the seed or the weights (variables are inputs), so one compile serves them all.

`RLFRAME_XLA_CACHE` names the folder, or `off`; by default it is one per TensorFlow version
under the user's cache folder. Every process calls `enable()` (through `console.import_tensorflow`)
before TensorFlow compiles anything (TensorFlow reads the flag once, at its first XLA compile).

The cache is a speed-up only, so it never stops a run. TensorFlow fails every call whose program
it cannot write to the folder (read-only, full) or whose file it cannot parse, and it loads a
file whose machine code changed without a word; so `enable()` leaves the cache off (one warning)
where the folder cannot be written or its disk is nearly full, and loads only files whose
sha256, recorded right after TensorFlow wrote them (`record_new_entries`), still matches: any
other file is moved to `damaged/` and its program compiled again. The record catches every
change made to a file in place (a cut, a flipped byte: the write moves its time, so it is hashed
again); a file renamed into place while a process compiles is taken as TensorFlow's own write.
"""

import atexit
import contextlib
import dataclasses
import errno
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Mapping, MutableMapping

from absl import logging

ENVIRONMENT_VARIABLE = "RLFRAME_XLA_CACHE"
OFF = "off"
DAMAGED = "damaged"  # the sub-folder where files that may not be loaded are set aside
FREE_SPACE_KEPT = 64 * 2**20  # bytes; a program takes 0.01-2 MB, a run's checkpoints need room
_TENSORFLOW_FLAG = "--tf_xla_persistent_cache_directory"
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly")
_ENTRY_SUFFIX = ".pb"
_RECORD_SUFFIX = ".sha256"
# TensorFlow's errors for a file it cannot load: they do not name the file.
_LOAD_FAILURES = ("Failed to parse serialized", "Serialized HLO does not match")
_LOADABLE, _CHANGED, _UNRECORDED = "loadable", "changed", "unrecorded"


class XlaCacheError(OSError):
    """A compile that TensorFlow failed because of the cache folder (`filename`): one paragraph
    (`strerror`) saying what failed and how to go on without the cache."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def default_directory(environ: Mapping[str, str] = os.environ) -> str:
    """`$XDG_CACHE_HOME/rlframe/xla/tensorflow-<version>` (`~/.cache` without it): one folder per
    TensorFlow version, whose programs another version's XLA need not read."""
    cache_home = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "rlframe", "xla", f"tensorflow-{_tensorflow_version()}")


def enable(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Points TensorFlow's XLA flags (`TF_XLA_FLAGS`) at the cache folder, after setting aside
    its files that may not be loaded; returns the folder, or None where the cache is off.

    A folder that is a file, cannot be made or written, or whose disk has less than
    `FREE_SPACE_KEPT` free leaves the cache off with one warning, and `RLFRAME_XLA_CACHE=off`
    for the processes this one starts (the run's workers say nothing more). A cache folder
    already in `TF_XLA_FLAGS` (the user's, or this run's, inherited) is used as it is.
    """
    flags = environ.get("TF_XLA_FLAGS", "")
    already = _flag_directory(flags)
    if already is not None:
        return already
    directory = environ.get(ENVIRONMENT_VARIABLE) or default_directory(environ)
    if directory.lower() == OFF:
        return None
    problem = _unusable(directory)
    if problem is None:
        try:
            set_aside_unverified(directory)
        except OSError as error:
            problem = f"holds files that cannot be checked or set aside ({_reason(error)})"
    if problem is not None:
        logging.warning(
            "XLA's program cache is off for this run: %s %s. Programs compile as without it, "
            "to the same numbers; set %s to another folder, or to `off` to silence this.",
            directory,
            problem,
            ENVIRONMENT_VARIABLE,
        )
        environ[ENVIRONMENT_VARIABLE] = OFF
        return None
    environ["TF_XLA_FLAGS"] = f"{flags} {_TENSORFLOW_FLAG}={directory}".strip()
    return directory


def _unusable(directory: str) -> str | None:
    """Why TensorFlow could not write its programs to `directory`, or None."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        return "is a file, not a folder"
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        return f"cannot be made ({_reason(error)})"
    try:  # as TensorFlow writes: a new file, then its bytes (root ignores permission bits)
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(bytes(4096))
            probe.flush()
    except OSError as error:
        return f"cannot be written ({_reason(error)})"
    free = shutil.disk_usage(directory).free
    if free < FREE_SPACE_KEPT:
        return (
            f"is on a disk with {free / 2**20:.1f} MiB free, under the "
            f"{FREE_SPACE_KEPT // 2**20} MiB kept clear for the run's own files"
        )
    return None


def set_aside_unverified(directory: str) -> list[str]:
    """Moves the files that may not be loaded into `damaged/`, with their records: those whose
    sha256 differs from the one recorded when TensorFlow wrote them, and those without a record
    (written before records were kept, or by a process killed right after compiling). Returns
    their names; one warning says how many."""
    verdicts = {name: _verdict(os.path.join(directory, name)) for name in _entries(directory)}
    set_aside = sorted(name for name, verdict in verdicts.items() if verdict != _LOADABLE)
    if not set_aside:
        return []
    os.makedirs(os.path.join(directory, DAMAGED), exist_ok=True)
    for name in set_aside:
        for file_name in (name, name + _RECORD_SUFFIX):
            with contextlib.suppress(FileNotFoundError):  # or another process moved it first
                os.replace(
                    os.path.join(directory, file_name),
                    os.path.join(directory, DAMAGED, file_name),
                )
    logging.warning(
        "Set aside %d file(s) of XLA's program cache in %s (%d changed since TensorFlow wrote "
        "them, %d without a recorded sha256): their programs compile again.",
        len(set_aside),
        os.path.join(directory, DAMAGED),
        list(verdicts.values()).count(_CHANGED),
        list(verdicts.values()).count(_UNRECORDED),
    )
    return set_aside


def _verdict(path: str) -> str:
    """Whether the file at `path` may be loaded: the one TensorFlow wrote, as its record says."""
    record = _read_record(path)
    if record is None:
        return _UNRECORDED
    try:
        if record.matches(os.stat(path)):
            return _LOADABLE  # unchanged since it was hashed: its bytes too
        now = _Record.of(path)
    except FileNotFoundError:
        return _LOADABLE  # moved away by another process: nothing to load
    except OSError:
        return _CHANGED  # unreadable: TensorFlow could not load it either
    if now.digest != record.digest:
        return _CHANGED
    _write_record(path, now)  # copied or touched, the same bytes
    return _LOADABLE


def record_new_entries(environ: Mapping[str, str] = os.environ) -> None:
    """Records the sha256 of the cache's files that TensorFlow wrote since they were checked:
    called right after a compile and at exit. TensorFlow writes a file by renaming a whole one
    into place (a new inode); a file changed in place keeps its old record, so the next
    `enable()` sets it aside. Best effort: a file left without a record compiles again."""
    directory = _flag_directory(environ.get("TF_XLA_FLAGS", ""))
    if directory is None:
        return
    try:
        names = _entries(directory)
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        with contextlib.suppress(OSError):  # moved away, or no room for the record
            record = _read_record(path)
            if record is None or record.inode != os.stat(path).st_ino:
                _write_record(path, _Record.of(path))


def failure(error: Exception, environ: Mapping[str, str] = os.environ) -> XlaCacheError | None:
    """`error` (TensorFlow's, from a call that compiled) as an `XlaCacheError` where the cache
    caused it: TensorFlow could not write the folder (it filled or turned read-only after the
    run started) or load a file of it. None for any other error."""
    directory = _flag_directory(environ.get("TF_XLA_FLAGS", ""))
    message = " ".join(str(error).split())
    if directory is None:
        return None
    if os.path.join(directory, "") not in message and not any(
        failure in message for failure in _LOAD_FAILURES
    ):
        return None
    return XlaCacheError(
        errno.EIO,
        f"XLA's program cache in {directory} failed this compile ({message}). The run's last "
        "complete checkpoint is intact: start the same command again to resume; the next start "
        f"checks the folder and goes on without it where it cannot be used. "
        f"{ENVIRONMENT_VARIABLE}=off turns the cache off (and, for a folder set in TF_XLA_FLAGS, "
        f"remove {_TENSORFLOW_FLAG}).",
        directory,
    )


@dataclasses.dataclass(frozen=True)
class _Record:
    """A file's sha256, with the size, modification time and inode it had when hashed: while
    those stand, the file is the one hashed (a write changes the time) and is not read again."""

    digest: str
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: str) -> "_Record":
        with open(path, "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
            status = os.fstat(file.fileno())  # of the bytes hashed, even if renamed over since
        return cls(digest, status.st_size, status.st_mtime_ns, status.st_ino)

    def matches(self, status: os.stat_result) -> bool:
        now = (status.st_size, status.st_mtime_ns, status.st_ino)
        return (self.size, self.mtime_ns, self.inode) == now


def _read_record(path: str) -> _Record | None:
    """The record beside the file at `path`; None where there is none or it is garbled."""
    try:
        with open(path + _RECORD_SUFFIX) as file:
            digest, size, mtime_ns, inode = file.read().split()
        return _Record(digest, int(size), int(mtime_ns), int(inode))
    except (OSError, ValueError):
        return None


def _write_record(path: str, record: _Record) -> None:
    """Writes the record whole or not at all: a concurrent reader never sees half of one."""
    with tempfile.NamedTemporaryFile(
        "w", dir=os.path.dirname(path), prefix=".record-", delete=False
    ) as file:
        file.write(f"{record.digest} {record.size} {record.mtime_ns} {record.inode}\n")
    try:
        os.replace(file.name, path + _RECORD_SUFFIX)
    except OSError:
        os.remove(file.name)
        raise


def _entries(directory: str) -> list[str]:
    """The names of the programs' files in `directory` (TensorFlow names them `*.pb`)."""
    with os.scandir(directory) as found:
        return sorted(e.name for e in found if e.name.endswith(_ENTRY_SUFFIX) and e.is_file())


def _flag_directory(flags: str) -> str | None:
    """The cache folder set in a `TF_XLA_FLAGS` value (the last one wins), or None."""
    found = [flag for flag in flags.split() if flag.startswith(_TENSORFLOW_FLAG + "=")]
    return found[-1].split("=", 1)[1] if found else None


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _tensorflow_version() -> str:
    for distribution in _TENSORFLOW_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


atexit.register(record_new_entries)  # programs compiled outside `TracedCall`'s first call
