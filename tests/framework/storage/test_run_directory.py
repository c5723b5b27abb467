"""The run folder's owner: atomic writes, the lock, start records and event writers."""

import glob
import json
import os
import re
import subprocess

import numpy as np
import pytest

from framework.storage.atomic_files import atomic_path, atomic_write
from framework.storage.event_reader import read_scalars
from framework.storage.run_directory import RunDirectory, RunFolderBusyError, RunFolderError
from framework.storage.summaries import SummaryWriters


def _log(base_dir, steps) -> None:
    writers = RunDirectory(str(base_dir)).open_writers(None)
    for step in steps:
        writers.scalars(step, {"train/x": float(step)})
    writers.close()


def test_atomic_write_replaces_the_content(tmp_path):
    path = str(tmp_path / "config.gin")
    atomic_write(path, "old")
    atomic_write(path, b"new")
    assert (tmp_path / "config.gin").read_text() == "new"
    assert os.listdir(tmp_path) == ["config.gin"]


def test_a_failed_atomic_write_keeps_the_old_content_and_no_temp_file(tmp_path, monkeypatch):
    path = str(tmp_path / "metadata.json")
    atomic_write(path, "old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, "new")
    assert (tmp_path / "metadata.json").read_text() == "old"
    assert os.listdir(tmp_path) == ["metadata.json"]


def test_atomic_path_keeps_the_old_file_when_the_writer_fails_midway(tmp_path):
    path = str(tmp_path / "events.merged.pending")
    atomic_write(path, "old")
    with pytest.raises(RuntimeError), atomic_path(path) as temp:
        with open(temp, "w") as f:
            f.write("half of the ne")
        raise RuntimeError("killed")
    assert (tmp_path / "events.merged.pending").read_text() == "old"
    assert os.listdir(tmp_path) == ["events.merged.pending"]


def test_atomic_path_suits_writers_that_add_an_extension(tmp_path):
    path = str(tmp_path / "arrays.npz")
    with atomic_path(path) as temp:
        np.savez(temp, x=np.arange(3))
    assert os.listdir(tmp_path) == ["arrays.npz"]
    with np.load(path) as arrays:
        assert arrays["x"].tolist() == [0, 1, 2]


def test_a_second_lock_on_the_folder_is_refused_naming_it(tmp_path):
    base = str(tmp_path / "run")
    with RunDirectory(base).lock():
        assert os.path.isdir(base)
        with pytest.raises(RunFolderBusyError, match=re.escape(base)), RunDirectory(base).lock():
            pass
    with RunDirectory(base).lock():  # released with the first
        pass


def test_record_start_keeps_a_changed_config_and_lists_every_start(tmp_path):
    run = RunDirectory(str(tmp_path))
    run.record_start("steps = 100\n", {"seed": 1}, None)
    run.record_start("steps = 200\n", {"seed": 1}, 100)
    run.record_start("steps = 200\n", {"seed": 1}, 200)  # unchanged: nothing more kept
    assert (tmp_path / "config.gin").read_text() == "steps = 200\n"
    assert (tmp_path / "config.before-start-2.gin").read_text() == "steps = 100\n"
    assert sorted(glob.glob(str(tmp_path / "config.before-start-*"))) == [
        str(tmp_path / "config.before-start-2.gin")
    ]
    starts = json.loads((tmp_path / "metadata.json").read_text())["starts"]
    assert [start["resumed_from_step"] for start in starts] == [None, 100, 200]
    assert all(start["seed"] == 1 for start in starts)
    run.write_config("steps = 200\nlate = 1\n")
    assert (tmp_path / "config.gin").read_text() == "steps = 200\nlate = 1\n"


def test_open_writers_from_scratch_sets_earlier_events_aside(tmp_path):
    _log(tmp_path, range(1, 4))
    writers = RunDirectory(str(tmp_path)).open_writers(None)
    writers.scalars(1, {"train/x": 10.0})
    writers.close()
    assert read_scalars(str(tmp_path))["train/x"] == [(1, 10.0)]
    assert glob.glob(str(tmp_path / "discarded" / "*" / "*set-aside-events*"))


def test_progress_csv_grows_its_columns_keeps_rows_on_resume_and_is_set_aside_afresh(tmp_path):
    folder = RunDirectory(str(tmp_path))
    table = folder.open_progress(None)
    table.add(5, {"train/x": 1.5, "train/episodes": 3})
    table.add(10, {"train/x": 2.0, "eval/y": -1.25})  # a new tag: the header widens
    table.add(15, {"train/x": 2.5})
    table.close()
    with open(folder.progress_path()) as f:
        assert f.read() == "step,train/x,train/episodes,eval/y\n5,1.5,3,\n10,2,,-1.25\n15,2.5,,\n"
    resumed = folder.open_progress(10)  # the rows after the step resumed from go
    resumed.add(15, {"train/x": 3.0})
    resumed.close()
    with open(folder.progress_path()) as f:
        assert f.read().splitlines()[1:] == ["5,1.5,3,", "10,2,,-1.25", "15,3,,"]
    folder.open_progress(None).close()  # from scratch: the earlier table set aside
    assert not os.path.exists(folder.progress_path())
    assert glob.glob(str(tmp_path / "discarded" / "*" / "progress.csv"))


def test_open_writers_on_resume_supersedes_later_steps(tmp_path):
    _log(tmp_path, range(1, 11))  # killed at step 10; its checkpoint was at 5
    writers = RunDirectory(str(tmp_path)).open_writers(5)
    for step in range(6, 9):
        writers.scalars(step, {"train/x": float(step)})
    writers.close()
    steps = [step for step, _ in read_scalars(str(tmp_path))["train/x"]]
    assert sorted(steps) == list(range(1, 9))
    assert len(glob.glob(str(tmp_path / "*tfevents*"))) == 2  # merged, and the new start's


def _files(folder) -> dict[str, int]:
    """Every file below `folder`, with its size."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_a_folder_of_the_retired_layout_is_refused_untouched_until_its_events_move_up(tmp_path):
    """One TensorBoard run per split kept a run's event files in train/ and eval/."""
    run = tmp_path / "run"
    for split, tag in (("train", "train/x"), ("eval", "eval/episode_return")):
        writers = SummaryWriters(str(run / split))
        for step in range(1, 11):
            writers.scalars(step, {tag: float(step)})
        writers.close()
    (run / "config.gin").write_text("Runner.num_steps = 10\n")  # as every run has
    before = _files(run)
    folder = RunDirectory(str(run))
    with pytest.raises(RunFolderError) as started, folder.lock():  # a start, or a resume
        pass
    with pytest.raises(RunFolderError) as read:  # analysis reads the curves
        folder.scalars()
    message = str(started.value)
    assert str(read.value) == message and "\n" not in message
    assert message.startswith(f"{run} is a run folder of the retired layout, one TensorBoard ")
    assert f"{run / 'train'} and {run / 'eval'}" in message and "Nothing was changed" in message
    assert _files(run) == before  # nothing moved, not even a lock file made
    (advice,) = re.findall(r"\((mv -n [^)]*)\)", message)
    subprocess.run(advice, shell=True, check=True)  # as the paragraph says
    with folder.lock():
        folder.open_writers(5).close()  # resumed from a checkpoint at step 5
    assert folder.scalars()["train/x"] == [(step, float(step)) for step in range(1, 6)]
    assert folder.eval_curve() == [(step, float(step)) for step in range(1, 6)]


def test_checkpoint_store_lives_in_the_checkpoints_folder(tmp_path):
    run = RunDirectory(str(tmp_path))
    store = run.checkpoint_store(max_to_keep=2)
    store.save(1, {"runner": {"steps": 1}})
    assert run.checkpoint_dir == str(tmp_path / "checkpoints")
    assert store.complete_steps() == [1]
    assert store.restore_latest({"runner": {"steps": 0}}) == (1, {"runner": {"steps": 1}})


def test_the_best_snapshot_replaces_the_last_only_once_complete_and_is_named(tmp_path):
    run = RunDirectory(str(tmp_path))
    run.save_best(100, 5.0, {"agent": {"steps": 100}})
    run.save_best(300, 9.0, {"agent": {"steps": 300}})
    assert sorted(os.listdir(run.best_dir)) == [
        f"ckpt-2.{kind}" for kind in ("complete", "values.json")
    ]
    assert run.best() == {"step": 300, "eval_return": 9.0, "snapshot": "best/ckpt-2"}
    read = run.read_policy("best", {"agent": {"steps": 0}})
    assert (read.step, read.eval_return, read.state, read.source) == (
        300,
        9.0,
        {"agent": {"steps": 300}},
        "best",
    )


def test_reading_the_latest_lists_again_when_the_newest_is_pruned_while_read(tmp_path, monkeypatch):
    """A run still training prunes its oldest checkpoint as a reader reads it."""
    run = RunDirectory(str(tmp_path))
    store = run.checkpoint_store(max_to_keep=2)
    for step in (10, 20):
        store.save(step, {"driver": {"steps": step}})
    original = type(store).read
    calls = []

    def read_as_training_goes_on(self, step, state):
        calls.append(step)
        if len(calls) == 1:  # the run saves 30 (pruning 10) and prunes 20 meanwhile
            store.save(30, {"driver": {"steps": 30}})
            os.remove(os.path.join(run.checkpoint_dir, "ckpt-20.complete"))
        return original(self, step, state)

    monkeypatch.setattr(type(store), "read", read_as_training_goes_on)
    read = run.read_policy("latest", {"steps": 0})
    assert (read.step, read.state) == (30, {"steps": 30}) and calls[0] == 20
