"""A user's folder is a name, never a pattern: its files found by a pattern of their names alone.

A pattern joined onto the folder's path (the folder, then `ckpt-*`) reads the folder's own `[`,
`]`, `*` and `?` as pattern characters: in a `--base_dir` of `runs/lr[0.01]` it matched nothing,
and a finished run started again trained from step 0 over its own history. TensorFlow's
checkpoint reader does the same with the path it is given; `tensorflow_readable` gives it one
without them.
"""

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterator

# What TensorFlow's file systems read as a pattern (GetMatchingPaths): glob's, and "\".
_TENSORFLOW_PATTERN_CHARACTERS = "*?[\\"


def matching(folder: str | os.PathLike, pattern: str) -> list[str]:
    """The paths of the entries of `folder` whose names match the shell pattern `pattern` (`*`,
    `?`, `[...]`; a name starting with "." only where the pattern does), in name order; none
    where `folder` does not exist."""
    folder = os.fspath(folder)
    return [os.path.join(folder, name) for name in sorted(glob.glob(pattern, root_dir=folder))]


@contextlib.contextmanager
def tensorflow_readable(prefix: str) -> Iterator[str]:
    """The checkpoint `prefix` (a plain name, `ckpt-N`, in any folder) as TensorFlow's reader
    finds it, for the block. That reader (behind `tf.train.Checkpoint.read`) looks for the
    index file by pattern, so in a folder named `lr[0.01]` it finds none ("Failed to find any
    matching files")."""
    folder, name = os.path.split(os.path.abspath(prefix))
    with tensorflow_readable_folder(folder) as readable:
        yield os.path.join(readable, name)


@contextlib.contextmanager
def tensorflow_readable_folder(folder: str) -> Iterator[str]:
    """`folder` as TensorFlow's readers find the files in it (a checkpoint's, a SavedModel's),
    for the block: itself where its path holds no pattern character, else a symbolic link of a
    plain name in a temporary folder, removed after the block."""
    folder = os.path.abspath(folder)
    if not any(character in folder for character in _TENSORFLOW_PATTERN_CHARACTERS):
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="rlframe-readable-") as temporary:
        link = os.path.join(temporary, "folder")
        os.symlink(folder, link)
        yield link
