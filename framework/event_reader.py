"""Reads a run's TensorBoard event files back into numbers (tests, benchmarks, analysis)."""

import glob
import os
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.compat.proto import event_pb2


def iterate_events(path: str) -> Iterator[event_pb2.Event]:
    """The events of one file; a torn last record (the writer was killed) ends the file."""
    try:
        for record in tf.data.TFRecordDataset(path):
            yield event_pb2.Event.FromString(record.numpy())
    except tf.errors.DataLossError:
        logging.warning("Ignoring a torn record at the end of %s.", path)


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar under `run_dir` (all splits), as tag -> [(step, value)] in file order."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    paths = sorted(glob.glob(os.path.join(run_dir, "**", "*tfevents*"), recursive=True))
    for path in paths:
        for event in iterate_events(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "scalars":
                    continue
                number = float(tf.make_ndarray(value.tensor))
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars


def read_tags(run_dir: str) -> set[str]:
    """Every summary tag (scalars, histograms, text) under `run_dir`."""
    tags = set()
    for path in glob.glob(os.path.join(run_dir, "**", "*tfevents*"), recursive=True):
        for event in iterate_events(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def final_value(scalars: dict[str, list[tuple[int, float]]], tag: str) -> float:
    """The value at the largest step of `tag`."""
    return float(max(scalars[tag])[1]) if scalars.get(tag) else float(np.nan)
