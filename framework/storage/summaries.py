"""TensorBoard output: one event file per start of a run, and continuous curves across resumes.

The only code that writes event files. A run is one TensorBoard run: every tag of a start goes
to one file in the run's folder, the tags namespaced (`train/`, `eval/`, `losses/`, ...), and
where that folder is, is the run folder's decision (`framework/storage/run_directory.py`).
"""

import dataclasses
import itertools
import numbers
import os
import socket
import time
from collections.abc import Sequence

import tensorflow as tf
from absl import logging
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.plugins.histogram import summary_v2 as histogram_summary
from tensorboard.plugins.hparams import api as hp
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import summary_v2 as text_summary

from framework.storage import atomic_files, file_names, trials
from framework.storage.event_reader import read_events

_PENDING_SUFFIX = ".pending"  # no "tfevents" in the name: TensorBoard ignores it
# A sweep's records in a run's folder (its HParams columns, the run's result): the sweep's to
# write and replace, never merged into or set aside with the run's own event files.
SWEEP_SUFFIX = ".sweep"
# The HParams column of the trial's readable name (`trials.readable_name`), beside the session
# group's name, its key.
TRIAL_COLUMN = "trial"


@dataclasses.dataclass
class HParamsSession:
    """A run's entry in TensorBoard's HParams dashboard.

    A run declares no columns: TensorBoard then makes one of each binding of the runs it shows,
    typed by their values, marks those whose values differ between the runs and lists them
    first (its dashboard shows the first five), with every scalar as a metric (the eval ones
    first). A run's own declaration could not know the runs shown beside it: TensorBoard took
    the first it found, one config's every binding, for a folder of unrelated runs. A sweep
    declares its swept bindings' domains and its metrics for its runs (`sweep_record.py`).
    """

    values: dict[str, bool | int | float | str]  # the hyperparameters the config binds
    group: str  # the session group's name, the trial's key: the seeds of one trial share it


def hparam_value(value: bool | int | float | str) -> bool | float | str:
    """A value as the HParams dashboard shows it: an integer as its digits ("64"), which
    TensorBoard would keep as a float and print as 64.000 (it has no integer type); the rest as
    itself."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(value)
    return value


class SummaryWriters:
    """One event file in `folder`; tags are written as given.

    Every summary is TensorBoard's own proto (`scalar_pb`'s layout, `histogram_pb`, `text_pb`,
    `hparams_pb`) appended by TF's record writer: `tf.summary`'s ops, eager or compiled, cost
    more than a log step's worth of environment steps, tens of times what a tag costs here
    (docs/speed.md). `pending_scalars` holds points back until the next `scalars`, `flush`,
    `sync` or `close`: per-episode points then cost a list append each.
    """

    def __init__(self, folder: str):
        self._file = _EventFile(folder)
        self._pending: dict[tuple[str, ...], list[tuple[int, list[float]]]] = {}  # by tags

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """Writes `values` at `step` now, after any points pending."""
        self._write_pending()
        self._write(tuple(values), [(step, list(values.values()))])

    def pending_scalars(self, step: int, values: dict[str, float]) -> None:
        """Holds `values` at `step` back, to be written with the next write."""
        self._pending.setdefault(tuple(values), []).append((step, list(values.values())))

    def _write_pending(self) -> None:
        for tags in list(self._pending):
            self._write(tags, self._pending[tags])
            del self._pending[tags]  # only once written: a failed write keeps them

    def _write(self, tags: tuple[str, ...], points: list[tuple[int, list]]) -> None:
        for step, row in points:
            values = [_scalar_value(tag, value) for tag, value in zip(tags, row, strict=True)]
            self._file.add(step, summary_pb2.Summary(value=values))

    def histograms(self, step: int, variables: dict[str, tf.Variable]) -> None:
        for name, variable in variables.items():
            self._file.add(
                step, histogram_summary.histogram_pb(f"weights/{name}", variable.numpy())
            )

    def text(self, name: str, text: str, step: int = 0) -> None:
        self._file.add(step, text_summary.text_pb(name, text))

    def hparams(self, session: HParamsSession, trial_name: str) -> None:
        """The run's HParams session: its trial's readable name and its hyperparameters, but
        for the seed and the cadences (not part of a trial: its seeds share one group)."""
        values = {TRIAL_COLUMN: trial_name}
        for name, value in sorted(session.values.items()):
            if not trials.is_seed_or_cadence(name):
                values[name] = hparam_value(value)
        self._file.add(0, hp.hparams_pb(values, trial_id=session.group))

    def flush(self) -> None:
        self._write_pending()
        self._file.flush()

    def sync(self) -> None:
        """Flushes and fsyncs the event file (and its folder's entry for it), before a
        checkpoint marks this step done."""
        self.flush()
        atomic_files.fsync(self._file.path)
        atomic_files.fsync(os.path.dirname(self._file.path))

    def close(self) -> None:
        try:
            self._write_pending()
        finally:
            self._file.close()


_SCALAR_METADATA = scalar_metadata.create_summary_metadata(display_name=None, description=None)
_file_ids = itertools.count()


def _scalar_value(tag: str, value: float) -> summary_pb2.Summary.Value:
    """What TensorBoard's `scalar_pb` makes (a float32 scalar tensor), built directly: its
    general tensor conversion costs several times a whole tag's write here (docs/speed.md)."""
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[float(value)])
    tensor.tensor_shape.SetInParent()  # a scalar: a shape with no dimensions
    return summary_pb2.Summary.Value(tag=tag, metadata=_SCALAR_METADATA, tensor=tensor)


class _EventFile:
    """One event file, named and begun as TensorFlow's writer does. TF's record writer rather
    than TensorBoard's: its checksums are computed in C++ (TensorBoard's in Python, at several
    times a whole tag's write here; docs/speed.md)."""

    def __init__(self, directory: str):
        os.makedirs(directory, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_file_ids)}.v2"
        )
        self.path = os.path.join(directory, name)
        self._records = tf.io.TFRecordWriter(self.path)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, step: int, summary: summary_pb2.Summary) -> None:
        self._write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _write(self, event: event_pb2.Event) -> None:
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        self._records.close()


def write_event_file(path: str, summaries: Sequence[tuple[int, summary_pb2.Summary]]) -> None:
    """A whole event file of `(step, summary)`s at `path`, written atomically: what a sweep adds
    to a folder (its HParams columns, a run's result) beside the runs' own streams."""
    with atomic_files.atomic_path(path) as temp, tf.io.TFRecordWriter(temp) as records:
        now = time.time()
        records.write(
            event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString()
        )
        for step, summary in summaries:
            event = event_pb2.Event(wall_time=now, step=step)
            event.summary.ParseFromString(summary.SerializeToString())  # TF's or TB's proto
            records.write(event.SerializeToString())


def set_aside_events(folder: str, target: str) -> None:
    """A run starting from scratch in a folder with event files (an earlier start that never
    completed a checkpoint, or a reused folder) moves them to `target`, not away, renamed so
    that neither TensorBoard nor an event reader takes them for a run's events."""
    originals = _event_files(folder)
    if not originals:
        return
    for path in originals:
        _set_aside(path, target)
    logging.warning("Starting afresh: moved the earlier event files to %s.", target)


def _event_files(folder: str) -> list[str]:
    """The run's own event files in `folder` (not a sweep's records)."""
    paths = file_names.matching(folder, "*tfevents*")
    return sorted(path for path in paths if not path.endswith(SWEEP_SUFFIX))


def _set_aside(path: str, folder: str) -> None:
    """Moves an event file into `folder`, its name no longer matching `*tfevents*`."""
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(path).replace("tfevents", "set-aside-events")
    os.replace(path, os.path.join(folder, name))


def supersede_events_after(folder: str, step: int, damaged: str) -> None:
    """Merges the event files of `folder` into one, without any event with a step after
    `step`, the step a run resumes from.

    What a killed run logged after its last checkpoint is logged again by the resumed run, so
    keeping it would give TensorBoard (and the analysis) two values at the same step. The
    merged file is written atomically under a pending name (the commit point:
    `atomic_files.atomic_path`); only then are the old files removed and the pending one named
    as an event file. A crash at any point leaves either the old files or the complete merged
    copy, never neither. A file with a damaged record (not just a torn end) is moved to
    `damaged`, never deleted.
    """
    _complete_committed_merge(folder)  # by an earlier start that stopped right after
    pending = os.path.join(folder, f"events.merged{_PENDING_SUFFIX}")
    final = os.path.join(folder, f"events.out.tfevents.{step:012d}.resumed")
    originals = _event_files(folder)
    if not originals:
        return
    kept, unreadable = [], []
    for path in originals:
        events, intact = read_events(path)
        kept += [e for e in events if e.step <= step or e.HasField("file_version")]
        if not intact:
            unreadable.append(path)
    kept.sort(key=lambda event: (event.step, event.wall_time))
    # TensorBoard's readers drop what a file logged after a START at an earlier step.
    kept.append(
        event_pb2.Event(
            wall_time=time.time(),
            step=step,
            session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START),
        )
    )
    with atomic_files.atomic_path(pending) as temp, tf.io.TFRecordWriter(temp) as writer:
        for event in kept:
            writer.write(event.SerializeToString())
    for path in originals:
        if path in unreadable:
            _set_aside(path, damaged)
        else:
            os.remove(path)
    os.replace(pending, final)


def _complete_committed_merge(folder: str) -> None:
    """A pending merged file is the commit point: the files it replaces go, it takes their
    place."""
    pending = os.path.join(folder, f"events.merged{_PENDING_SUFFIX}")
    if not os.path.exists(pending):
        return
    for path in _event_files(folder):
        os.remove(path)
    os.replace(pending, os.path.join(folder, "events.out.tfevents.000000000000.resumed"))
