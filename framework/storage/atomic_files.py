"""Writes that a crash or kill at any moment leaves either as they were or as they were meant to
be: every file of a run folder (config, metadata, checkpoints, event files) goes through these."""

import contextlib
import os
from collections.abc import Iterator

TEMP_PREFIX = ".tmp."  # hidden, and keeps the extension (np.savez appends one otherwise)


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
    temp = os.path.join(folder, TEMP_PREFIX + name)
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
