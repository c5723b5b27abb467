"""XLA's compiled programs kept on disk, so that a run loads what an earlier run compiled.

XLA compiles each learner call once per process, and on this project's CPUs that costs seconds
(docs/speed.md) which the same config pays again in every run, every seed of a
sweep and every resume. TensorFlow can keep the programs in a folder
(its flag `--tf_xla_persistent_cache_directory`), keyed by the program: a run whose program was
compiled before loads that machine code, so its numbers are the same bit for bit. The programs
do not depend on the seed or the weights (variables are inputs), so one compile serves them all.

`RLFRAME_XLA_CACHE` names the folder, or `off`; by default it is one per TensorFlow version
under the user's cache folder. Every process calls `enable()` (through `console.import_tensorflow`)
before TensorFlow compiles anything (TensorFlow reads the flag at its first XLA compile).

TensorFlow fails a call whose cached file is damaged (a truncated file: "Read less bytes than
requested") rather than compiling it again, so `enable()` first removes the files that are not
whole protocol-buffer messages: a cache file costs only its compile to lose.
"""

import glob
import importlib.metadata
import os
from collections.abc import MutableMapping

from absl import logging

ENVIRONMENT_VARIABLE = "RLFRAME_XLA_CACHE"
OFF = "off"
_TENSORFLOW_FLAG = "--tf_xla_persistent_cache_directory"
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly")
_FIXED_SIZES = {1: 8, 5: 4}  # protocol buffers' wire types of 64- and 32-bit numbers: widths


def default_directory(environ: MutableMapping[str, str] = os.environ) -> str:
    """`$XDG_CACHE_HOME/rlframe/xla/tensorflow-<version>` (`~/.cache` without it): one folder per
    TensorFlow version, whose programs another version's XLA need not read."""
    cache_home = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "rlframe", "xla", f"tensorflow-{_tensorflow_version()}")


def enable(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Points TensorFlow's XLA flags (`TF_XLA_FLAGS`) at the cache folder; returns the folder,
    or None where the cache is off or the folder cannot be made (then XLA compiles as it would
    without it). A cache folder already set in `TF_XLA_FLAGS` is kept."""
    flags = environ.get("TF_XLA_FLAGS", "")
    already = [flag for flag in flags.split() if flag.startswith(_TENSORFLOW_FLAG + "=")]
    if already:
        return already[-1].split("=", 1)[1]
    directory = environ.get(ENVIRONMENT_VARIABLE) or default_directory(environ)
    if directory.lower() == OFF:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
        remove_damaged_files(directory)
    except OSError:
        return None
    environ["TF_XLA_FLAGS"] = f"{flags} {_TENSORFLOW_FLAG}={directory}".strip()
    return directory


def remove_damaged_files(directory: str) -> list[str]:
    """Removes the cache's files that are not whole serialised messages; returns their paths."""
    damaged = []
    for path in glob.glob(os.path.join(glob.escape(directory), "*.pb")):
        with open(path, "rb") as file:
            whole = is_whole_message(file.read())
        if not whole:
            os.remove(path)
            damaged.append(path)
            logging.warning("Removed a damaged file of XLA's program cache: %s", path)
    return damaged


def is_whole_message(data: bytes) -> bool:
    """Whether `data` splits into protocol-buffer fields (key, then a value of the key's wire
    type) that end exactly at its end: what a file cut inside a field (a cache entry's last
    field, the compiled program, is nearly all of it) or overwritten with other bytes almost
    never does. An empty file is not a cache entry either."""
    position = 0
    try:
        while position < len(data):
            key, position = _varint(data, position)
            wire_type = key & 7
            if key >> 3 == 0:  # field numbers start at 1
                return False
            if wire_type == 0:
                _, position = _varint(data, position)
            elif wire_type == 2:
                length, position = _varint(data, position)
                position += length
            elif wire_type in _FIXED_SIZES:
                position += _FIXED_SIZES[wire_type]
            else:
                return False
    except IndexError:
        return False
    return 0 < position == len(data)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    """The base-128 number at `position` and the position after it (IndexError past the end)."""
    value, shift = 0, 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _tensorflow_version() -> str:
    for distribution in _TENSORFLOW_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"
