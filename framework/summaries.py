"""TensorBoard output: one writer per split, and continuous curves across resumes."""

import dataclasses
import glob
import os
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import api as hp
from tensorboard.plugins.scalar import metadata as scalar_metadata

from framework import run_directory
from framework.event_reader import read_events

# "" is the run folder itself: it holds the run's HParams session, whose metrics live in eval/.
SPLITS = ("", "train", "eval")
_PENDING_SUFFIX = ".pending"  # no "tfevents" in the name: TensorBoard ignores it
# The HParams dashboard's metrics: the final and the best evaluation return.
HPARAMS_METRICS = (
    ("eval/episode_return", "final eval return"),
    ("eval/best_episode_return", "best eval return"),
)


@dataclasses.dataclass
class HParamsSession:
    """A run's entry in TensorBoard's HParams dashboard."""

    values: dict[str, bool | int | float | str]  # the hyperparameters the config binds
    group: str  # the session's name; the seeds of one configuration share it
    declare_columns: bool = True  # also write the dashboard's columns (a sweep does it once)


class SummaryWriters:
    """`train/` and `eval/` writers under a run's base directory; tags are written as given.

    Scalars go through one compiled call per batch of points (an eager `tf.summary.scalar`
    costs ~0.4 ms a tag, more than an environment step), and `pending_scalars` holds points
    back until the next write to their split, `flush`, `sync` or `close`: per-episode points
    then cost a list append each.
    """

    def __init__(self, base_dir: str):
        self._directories = [os.path.join(base_dir, split) for split in SPLITS]
        self._writers = {
            split: tf.summary.create_file_writer(directory)
            for split, directory in zip(SPLITS, self._directories, strict=True)
        }
        # (split, tags) -> the steps and values held back; split -> its traced writer
        self._pending: dict[tuple[str, tuple[str, ...]], list[tuple[int, list[float]]]] = {}
        self._compiled: dict[str, Callable] = {}

    def scalars(self, split: str, step: int, values: dict[str, float]) -> None:
        """Writes `values` at `step` now, after any points pending for `split`."""
        self._write_pending(split)
        self._write(split, tuple(values), [(step, list(values.values()))])

    def pending_scalars(self, split: str, step: int, values: dict[str, float]) -> None:
        """Holds `values` at `step` back, to be written with the next write to `split`."""
        self._pending.setdefault((split, tuple(values)), []).append((step, list(values.values())))

    def _write_pending(self, split: str | None = None) -> None:
        for key in [key for key in self._pending if split in (None, key[0])]:
            self._write(*key, self._pending[key])
            del self._pending[key]  # only once written: a failed write keeps them

    def _write(self, split: str, tags: tuple[str, ...], points: list[tuple[int, list]]) -> None:
        if split not in self._compiled:
            self._compiled[split] = _compiled_scalars(self._writers[split])
        steps = np.array([step for step, _ in points], np.int64)
        values = np.array([row for _, row in points], np.float32).reshape(len(points), len(tags))
        self._compiled[split](steps, np.array(tags, object), values)

    def histograms(self, step: int, variables: dict[str, tf.Variable]) -> None:
        with self._writers["train"].as_default(step=step):
            for name, variable in variables.items():
                tf.summary.histogram(f"weights/{name}", variable)

    def text(self, name: str, text: str, step: int = 0) -> None:
        with self._writers["train"].as_default(step=step):
            tf.summary.text(name, text)

    def hparams(self, session: HParamsSession) -> None:
        """The run's hyperparameters as an HParams session, with the eval returns (final and
        best) as its metrics, read from eval/."""
        with self._writers[""].as_default(step=0):
            if session.declare_columns:
                hp.hparams_config(
                    hparams=[hp.HParam(name) for name in sorted(session.values)],
                    metrics=[
                        hp.Metric(tag, group="eval", display_name=name)
                        for tag, name in HPARAMS_METRICS
                    ],
                )
            hp.hparams(session.values, trial_id=session.group)

    def flush(self) -> None:
        self._write_pending()
        for writer in self._writers.values():
            writer.flush()

    def sync(self) -> None:
        """Flushes and fsyncs every event file, before a checkpoint marks this step done."""
        self.flush()
        for directory in self._directories:
            for path in glob.glob(os.path.join(directory, "*tfevents*")):
                run_directory.fsync(path)

    def close(self) -> None:
        try:
            self._write_pending()
        finally:
            for writer in self._writers.values():
                writer.close()


def _compiled_scalars(writer) -> Callable:
    """`(steps [P], tags [T], values [P, T]) -> None`: writes P points of T tags in one call.

    The tags are an argument, so that a split's writer is traced once, whatever it logs.
    """

    # What `tf.summary.scalar` writes, without the name scope it would add inside the loop.
    metadata = scalar_metadata.create_summary_metadata(display_name=None, description=None)

    def write(steps: tf.Tensor, tags: tf.Tensor, values: tf.Tensor) -> None:
        num_tags = tf.size(tags)

        def write_one(index):
            point, column = index // num_tags, index % num_tags
            tf.summary.write(tags[column], values[point, column], steps[point], metadata)
            return index + 1

        with writer.as_default():
            tf.while_loop(lambda index: index < tf.size(values), write_one, [tf.constant(0)])

    signature = [
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None], tf.string),
        tf.TensorSpec([None, None], tf.float32),
    ]
    # Without AutoGraph, whose conversion costs more tracing time: the loop is a while_loop.
    return tf.function(write, input_signature=signature, autograph=False).get_concrete_function()


def set_aside_events(base_dir: str) -> None:
    """A run starting from scratch in a folder with event files (an earlier start that never
    completed a checkpoint, or a reused folder) moves them to `discarded/<time>/`, not away,
    renamed so that neither TensorBoard nor an event reader takes them for a run's events."""
    originals = [
        path for split in SPLITS for path in glob.glob(os.path.join(base_dir, split, "*tfevents*"))
    ]
    if not originals:
        return
    target = os.path.join(base_dir, "discarded", time.strftime("%Y%m%d-%H%M%S"))
    for path in originals:
        split = os.path.relpath(os.path.dirname(path), base_dir)
        _set_aside(path, os.path.join(target, split))
    logging.warning("Starting afresh: moved the earlier event files to %s.", target)


def _set_aside(path: str, folder: str) -> None:
    """Moves an event file into `folder`, its name no longer matching `*tfevents*`."""
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(path).replace("tfevents", "set-aside-events")
    os.replace(path, os.path.join(folder, name))


def supersede_events_after(base_dir: str, step: int) -> None:
    """Drops every logged event with a step after `step`, the step a run resumes from.

    What a killed run logged after its last checkpoint is logged again by the resumed run, so
    keeping it would give TensorBoard (and the analysis) two values at the same step. Each
    split's files are merged into one filtered file, written atomically under a pending name
    (the commit point: `run_directory.atomic_path`); only then are the old files removed and
    the pending one named as an event file. A crash at any point leaves either the
    old files or the complete filtered copy, never neither. A file with a damaged record (not
    just a torn end) is moved to `discarded/`, never deleted.
    """
    for split in SPLITS:
        directory = os.path.join(base_dir, split)
        pending = os.path.join(directory, f"events.merged{_PENDING_SUFFIX}")
        final = os.path.join(directory, f"events.out.tfevents.{step:012d}.resumed")
        originals = sorted(glob.glob(os.path.join(directory, "*tfevents*")))
        if os.path.exists(pending):  # committed by an earlier start that stopped right after
            for path in originals:
                os.remove(path)
            os.replace(pending, final)
            originals = [final]
        if not originals:
            continue
        kept, damaged = [], []
        for path in originals:
            events, intact = read_events(path)
            kept += [e for e in events if e.step <= step or e.HasField("file_version")]
            if not intact:
                damaged.append(path)
        kept.sort(key=lambda event: (event.step, event.wall_time))
        # TensorBoard's readers drop what a file logged after a START at an earlier step.
        kept.append(
            event_pb2.Event(
                wall_time=time.time(),
                step=step,
                session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START),
            )
        )
        with run_directory.atomic_path(pending) as temp, tf.io.TFRecordWriter(temp) as writer:
            for event in kept:
                writer.write(event.SerializeToString())
        for path in originals:
            if path in damaged:
                _set_aside(path, os.path.join(base_dir, "discarded", "damaged", split))
            else:
                os.remove(path)
        os.replace(pending, final)
