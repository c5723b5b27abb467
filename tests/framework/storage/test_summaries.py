"""Continuous curves across resumes: superseding, torn and damaged event files, fresh starts."""

import glob
import os

import tensorflow as tf

from framework.storage.event_reader import read_events, read_scalars
from framework.storage.summaries import SummaryWriters, set_aside_events, supersede_events_after


def _supersede(base_dir, step: int) -> None:
    supersede_events_after(str(base_dir), step, str(base_dir / "discarded" / "damaged"))


def _log(folder, steps, tag: str = "train/x") -> None:
    writers = SummaryWriters(str(folder))
    for step in steps:
        writers.scalars(step, {tag: float(step)})
    writers.close()


def _event_files(folder) -> list[str]:
    return sorted(glob.glob(os.path.join(str(folder), "*tfevents*")))


def test_pending_points_are_written_in_step_order_before_the_next_write_and_on_close(tmp_path):
    writers = SummaryWriters(str(tmp_path))
    for step in (3, 5):  # e.g. episodes that ended at these steps
        writers.pending_scalars(step, {"train/r": step / 10, "train/n": 1})
    writers.scalars(6, {"train/loss": 2.5})  # writes the pending points first
    writers.pending_scalars(7, {"train/r": 0.7, "train/n": 2})
    writers.scalars(7, {"eval/r": 0.4})  # every tag in one file: one TensorBoard run
    writers.pending_scalars(8, {"train/r": 0.8, "train/n": 1})
    writers.close()  # writes the rest
    (path,) = _event_files(tmp_path)
    written = [
        (event.step, value.tag, round(float(tf.make_ndarray(value.tensor)), 6))
        for event in read_events(path)[0]
        for value in event.summary.value
        if value.metadata.plugin_data.plugin_name == "scalars"  # as TensorBoard reads them
    ]
    assert written == [
        (3, "train/r", 0.3),
        (3, "train/n", 1.0),
        (5, "train/r", 0.5),
        (5, "train/n", 1.0),
        (6, "train/loss", 2.5),
        (7, "train/r", 0.7),
        (7, "train/n", 2.0),
        (7, "eval/r", 0.4),
        (8, "train/r", 0.8),
        (8, "train/n", 1.0),
    ]


def test_supersede_keeps_steps_up_to_the_resume_step_then_logging_continues(tmp_path):
    _log(tmp_path, range(1, 11))  # a killed run got to step 10; its checkpoint was at 5
    _supersede(tmp_path, 5)
    _log(tmp_path, range(6, 9))  # the resumed run logs 6, 7, 8 again
    steps = [step for step, _ in read_scalars(str(tmp_path))["train/x"]]
    assert sorted(steps) == list(range(1, 9))


def test_a_torn_last_record_is_normal_and_the_rest_is_kept(tmp_path):
    _log(tmp_path, range(1, 11))
    (path,) = _event_files(tmp_path)
    with open(path, "rb+") as f:
        f.truncate(os.path.getsize(path) - 7)  # the last record loses its end
    _, intact = read_events(path)
    assert intact
    _supersede(tmp_path, 100)
    steps = [step for step, _ in read_scalars(str(tmp_path))["train/x"]]
    assert steps == list(range(1, 10))
    assert not glob.glob(str(tmp_path / "discarded" / "**" / "*tfevents*"), recursive=True)


def test_a_damaged_record_moves_the_file_aside_instead_of_deleting_it(tmp_path):
    _log(tmp_path, range(1, 11))
    (path,) = _event_files(tmp_path)
    size = os.path.getsize(path)
    with open(path, "rb+") as f:  # flip a byte in the middle: a checksum fails
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    _, intact = read_events(path)
    assert not intact
    _supersede(tmp_path, 100)
    (kept,) = glob.glob(str(tmp_path / "discarded" / "damaged" / "*set-aside-events*"))
    assert os.path.getsize(kept) == size


def test_a_committed_merge_is_completed_by_the_next_start(tmp_path):
    _log(tmp_path, range(1, 11))
    pending = tmp_path / "events.merged.pending"
    # Simulate a start that wrote and committed its filtered copy, then died.
    _supersede(tmp_path, 4)
    (merged,) = _event_files(tmp_path)
    os.replace(merged, pending)
    _log(tmp_path, [])  # an unrelated empty file beside it, as a crashed writer may leave
    _supersede(tmp_path, 4)
    assert not pending.exists()
    steps = [step for step, _ in read_scalars(str(tmp_path))["train/x"]]
    assert steps == [1, 2, 3, 4]


def test_a_fresh_start_sets_earlier_events_aside(tmp_path):
    _log(tmp_path, range(1, 4))
    (path,) = _event_files(tmp_path)
    size = os.path.getsize(path)
    set_aside_events(str(tmp_path), str(tmp_path / "discarded" / "a"))
    assert _event_files(tmp_path) == []
    (moved,) = glob.glob(str(tmp_path / "discarded" / "a" / "*set-aside-events*"))
    assert os.path.getsize(moved) == size
    # Renamed: neither TensorBoard nor a recursive `*tfevents*` reader sees it as a run's.
    assert not glob.glob(str(tmp_path / "discarded" / "**" / "*tfevents*"), recursive=True)


def test_tensorboard_reads_every_kind_of_summary_written(tmp_path):
    """The writer builds TensorBoard's protos itself: TensorBoard's own loader must read them."""
    from tensorboard.backend.event_processing import plugin_event_accumulator

    writers = SummaryWriters(str(tmp_path))
    writers.scalars(7, {"train/loss": 2.5, "train/epsilon": 0.1})
    weights = tf.Variable(tf.reshape(tf.range(12, dtype=tf.float32), [3, 4]))
    writers.histograms(7, {"dense/kernel": weights})
    writers.text("config", "lr = 0.1")
    writers.close()
    accumulator = plugin_event_accumulator.EventAccumulator(
        str(tmp_path), size_guidance={plugin_event_accumulator.TENSORS: 0}
    )
    accumulator.Reload()
    assert accumulator.PluginTagToContent("scalars").keys() == {"train/loss", "train/epsilon"}
    (loss,) = accumulator.Tensors("train/loss")
    assert (loss.step, float(tf.make_ndarray(loss.tensor_proto))) == (7, 2.5)
    (histogram,) = accumulator.Tensors("weights/dense/kernel")
    buckets = tf.make_ndarray(histogram.tensor_proto)  # [left edge, right edge, count] rows
    assert buckets[:, 2].sum() == 12 and buckets[0, 0] == 0.0 and buckets[-1, 1] == 11.0
    assert "config" in accumulator.PluginTagToContent("text")
