"""TensorBoard output: one writer per split, and continuous curves across resumes."""

import glob
import os
import time

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.plugins.hparams import api as hp

from framework import run_directory
from framework.event_reader import read_events

SPLITS = ("train", "eval")
_PENDING_SUFFIX = ".pending"  # no "tfevents" in the name: TensorBoard ignores it


class SummaryWriters:
    """`train/` and `eval/` writers under a run's base directory; tags are written as given."""

    def __init__(self, base_dir: str):
        self._writers = {
            split: tf.summary.create_file_writer(os.path.join(base_dir, split)) for split in SPLITS
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

    def hparams(self, values: dict[str, bool | int | float | str]) -> None:
        """The run's hyperparameters, for comparing runs in TensorBoard's HParams dashboard."""
        with self._writers["train"].as_default(step=0):
            hp.hparams(values)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


def set_aside_events(base_dir: str) -> None:
    """A run starting from scratch in a folder with event files (an earlier start that never
    completed a checkpoint, or a reused folder) moves them to `discarded/<time>/`, not away."""
    originals = glob.glob(os.path.join(base_dir, "*", "*tfevents*"))
    originals = [p for p in originals if os.path.basename(os.path.dirname(p)) in SPLITS]
    if not originals:
        return
    target = os.path.join(base_dir, "discarded", time.strftime("%Y%m%d-%H%M%S"))
    for path in originals:
        split_dir = os.path.join(target, os.path.basename(os.path.dirname(path)))
        os.makedirs(split_dir, exist_ok=True)
        os.replace(path, os.path.join(split_dir, os.path.basename(path)))
    logging.warning("Starting afresh: moved the earlier event files to %s.", target)


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
        with run_directory.atomic_path(pending) as temp, tf.io.TFRecordWriter(temp) as writer:
            for event in kept:
                writer.write(event.SerializeToString())
        for path in originals:
            if path in damaged:
                target = os.path.join(base_dir, "discarded", "damaged", split)
                os.makedirs(target, exist_ok=True)
                os.replace(path, os.path.join(target, os.path.basename(path)))
            else:
                os.remove(path)
        os.replace(pending, final)


def to_floats(metrics: dict[str, tf.Tensor]) -> dict[str, float]:
    """Metric tensors as Python floats, for the writer and the progress line."""
    return {name: float(np.asarray(value)) for name, value in metrics.items()}
