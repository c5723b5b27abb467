"""Reads a run's TensorBoard event files back into numbers (tests, benchmarks, analysis).

A script's first call may be one of these: TensorFlow is imported as `train()` imports it
(`framework/console.py`), without its C++ start-up banner.
"""

import os
import struct

import numpy as np
from absl import logging
from tensorboard.compat.proto import event_pb2

from framework.console import import_tensorflow
from framework.storage import file_names

tf = import_tensorflow()

_HEADER_BYTES, _FOOTER_BYTES = 12, 4  # TFRecord: length (8) + its CRC (4); data CRC (4)


def read_events(path: str) -> tuple[list[event_pb2.Event], bool]:
    """The events of one file, and whether everything in it was read.

    A torn last record (the writer was killed mid-write) simply ends the file: that is normal.
    A complete record that fails its checksum is damage, and the file is reported not intact.
    """
    events, consumed = [], 0
    try:
        for record in tf.data.TFRecordDataset(path):
            data = record.numpy()
            events.append(event_pb2.Event.FromString(data))
            consumed += _HEADER_BYTES + len(data) + _FOOTER_BYTES
    except tf.errors.DataLossError:
        with open(path, "rb") as f:
            f.seek(consumed)
            header = f.read(8)
            remaining = os.path.getsize(path) - consumed
        length = struct.unpack("<Q", header)[0] if len(header) == 8 else remaining
        if _HEADER_BYTES + length + _FOOTER_BYTES <= remaining:
            logging.warning("Damaged record after %d events in %s.", len(events), path)
            return events, False
        logging.warning("Ignoring a torn record at the end of %s.", path)
    return events, True


def read_scalars(run_dir: str, tags: set[str] | None = None) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of `run_dir`'s own event files (one TensorBoard run: not those of folders
    below it), or those of `tags`, as tag -> [(step, value)] in file order."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in _event_files(run_dir):
        for event in read_events(path)[0]:
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "scalars":
                    continue
                if tags is not None and value.tag not in tags:
                    continue
                number = float(tf.make_ndarray(value.tensor))
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars


def read_tags(run_dir: str) -> set[str]:
    """Every summary tag (scalars, histograms, text) of `run_dir`'s own event files."""
    tags = set()
    for path in _event_files(run_dir):
        for event in read_events(path)[0]:
            tags.update(value.tag for value in event.summary.value)
    return tags


def _event_files(run_dir: str) -> list[str]:
    """The event files in `run_dir` itself, in name order (TensorBoard's)."""
    return file_names.matching(run_dir, "*tfevents*")


def final_value(scalars: dict[str, list[tuple[int, float]]], tag: str) -> float:
    """The value at the largest step of `tag`."""
    return float(max(scalars[tag])[1]) if scalars.get(tag) else float(np.nan)
