"""progress.csv: a run's scalars as one table, Stable-Baselines3's logger habit, for a quick look
or a notebook (`pandas.read_csv`) without reading event files.

One row per step that logged scalars (each log step, and each evaluation), `step` first, then
the tags in the order they first appeared; a cell is empty where its tag was not logged at that
step. A row is appended once its step is logged; a tag never seen before rewrites the file with
the wider header, atomically (`atomic_files`), so a kill leaves the old table or the new one. A
resumed run keeps the rows up to the step it resumes from and drops the later ones, which it
logs again, as its event files do (`summaries.supersede_events_after`); a row cut short by a
kill is no row. A table this code cannot have written (not UTF-8, no header) is
DamagedTableError. Where the file goes is the run folder's decision (`run_directory.py`).
"""

import csv
import io
import os
from collections.abc import Mapping

from absl import logging

from framework.storage import atomic_files

STEP = "step"


class DamagedTableError(ValueError):
    """The table is not one this code writes (not UTF-8 text, or its first line not the
    header); the message says what is wrong."""


class ProgressTable:
    """The table at `path`, continued from `resumed_step` (None: a new table); DamagedTableError
    where the table to continue cannot be read."""

    def __init__(self, path: str, resumed_step: int | None):
        self.path = path
        self.columns: list[str] = [STEP]
        self._file = None
        if resumed_step is not None and os.path.exists(path):
            columns, rows, intact = _read(path)
            kept = [row for row in rows if int(row[STEP]) <= resumed_step]
            if len(kept) != len(rows) or not intact:
                self._rewrite(columns, kept)
            self.columns = columns

    def add(self, step: int, values: Mapping[str, float]) -> None:
        """The row of `step`: `values` by tag."""
        row = {STEP: str(step), **{tag: _cell(value) for tag, value in values.items()}}
        new = [tag for tag in row if tag not in self.columns]
        if new:
            rows = _read(self.path)[1] if os.path.exists(self.path) else []
            self._rewrite([*self.columns, *new], [*rows, row])
            return
        if self._file is None:
            self._file = open(self.path, "a", newline="")  # noqa: SIM115  (closed by close())
        csv.DictWriter(self._file, self.columns, lineterminator="\n").writerow(row)
        self._file.flush()

    def sync(self) -> None:
        """Flushes the table to disk, before a checkpoint marks its step done."""
        if self._file is not None:
            self._file.flush()
            atomic_files.fsync(self.path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _rewrite(self, columns: list[str], rows: list[dict[str, str]]) -> None:
        self.close()
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_files.atomic_write(self.path, text.getvalue())
        self.columns = columns


def _cell(value: float) -> str:
    """A count as an integer, anything else as a float to float32's precision and beyond."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{float(value):.10g}"


def _read(path: str) -> tuple[list[str], list[dict[str, str]], bool]:
    """The header, the complete rows, and whether every line was one (a last line without its
    newline was cut short by a kill)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        lines = data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError as error:
        raise DamagedTableError(f"not UTF-8 text ({error.reason} at byte {error.start})") from None
    intact = True
    if lines and not lines[-1].endswith("\n"):
        lines, intact = lines[:-1], False
    reader = csv.reader(lines)
    columns = next(reader, [STEP])
    if columns[:1] != [STEP] or len(set(columns)) != len(columns):
        first = lines[0].strip()[:60]
        raise DamagedTableError(f"its first line is not the header (step, the tags): {first!r}")
    rows = []
    for cells in reader:
        if len(cells) != len(columns) or not cells[0].isdigit():
            intact = False
            continue
        rows.append(dict(zip(columns, cells, strict=True)))
    if not intact:
        logging.info("Dropped the rows of %s that a kill cut short.", path)
    return columns, rows, intact
