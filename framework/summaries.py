"""TensorBoard output: one writer per split, and continuous curves across resumes."""

import dataclasses
import glob
import os
import time

import tensorflow as tf
from absl import logging
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import api as hp

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
    """`train/` and `eval/` writers under a run's base directory; tags are written as given."""

    def __init__(self, base_dir: str):
        self._directories = [os.path.join(base_dir, split) for split in SPLITS]
        self._writers = {
            split: tf.summary.create_file_writer(directory)
            for split, directory in zip(SPLITS, self._directories, strict=True)
        }

    def scalars(self, split: str, step: int, values: dict[str, float]) -> None:
        with self._writers[split].as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)

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
        for writer in self._writers.values():
            writer.flush()

    def sync(self) -> None:
        """Flushes and fsyncs every event file, before a checkpoint marks this step done."""
        self.flush()
        for directory in self._directories:
            for path in glob.glob(os.path.join(directory, "*tfevents*")):
                run_directory.fsync(path)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


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
