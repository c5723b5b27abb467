"""One nested state per checkpoint: exact round trips, fallbacks, structure and format checks."""

import glob
import hashlib
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.storage import atomic_files, checkpointing
from framework.storage.checkpointing import FORMAT_VERSION, CheckpointError


class _Counter(tf.Module):
    def __init__(self, value: int):
        super().__init__()
        self.count = tf.Variable(value, dtype=tf.int64)


def _store(directory: str, max_to_keep: int = 3) -> checkpointing.CheckpointStore:
    """A store whose damaged checkpoints go to `damaged/` inside it."""
    damaged = os.path.join(directory, "damaged")
    return checkpointing.CheckpointStore(directory, damaged, max_to_keep)


def _state(seed: int) -> dict:
    """Every leaf kind, with values that differ from seed to seed."""
    rng = np.random.default_rng(seed)
    network = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    network.set_weights([rng.standard_normal(w.shape).astype(np.float32) for w in network.weights])
    return {
        "agent": {"counter": _Counter(seed), "network": network},
        "replay": {
            "observations": rng.standard_normal((5, 3)).astype(np.float32),
            "actions": rng.integers(0, 4, size=5),
        },
        "runner": {
            "env_steps": 100 * seed,
            "rng": {"state": 2**100 + seed, "inc": 7},
            "ratio": 0.1 + seed,
            "name": f"seed{seed}",
            "done": bool(seed % 2),
            "nothing": None,
            "history": [seed, 2.5, "a", [True]],
        },
    }


def _listing(directory) -> dict[str, int]:
    paths = glob.glob(os.path.join(str(directory), "**"), recursive=True)
    return {p: os.path.getsize(p) for p in paths}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _assert_restored(state: dict, loaded: dict, saved: dict) -> None:
    """`state` (restored in place) and `loaded` hold exactly what `saved` held."""
    assert loaded["agent"]["counter"] is state["agent"]["counter"]
    assert int(state["agent"]["counter"].count) == int(saved["agent"]["counter"].count)
    weights = state["agent"]["network"].get_weights(), saved["agent"]["network"].get_weights()
    for restored, original in zip(*weights, strict=True):
        assert _same_bits(restored, original)
    for name, array in saved["replay"].items():
        assert _same_bits(loaded["replay"][name], array)
    assert loaded["runner"] == saved["runner"]


def _damage(path: str, how: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "garbage":
        data = os.urandom(64)
    else:  # alter one byte in the middle
        data = (
            data[: len(data) // 2]
            + bytes([data[len(data) // 2] ^ 0xFF])
            + data[len(data) // 2 + 1 :]
        )
    with open(path, "wb") as f:
        f.write(data)


def test_round_trip_restores_every_leaf_kind_bitwise(tmp_path):
    store = _store(str(tmp_path))
    saved = _state(1)
    assert store.save(7, saved) > 0
    state = _state(2)
    step, loaded = store.restore_latest(state)
    assert step == 7
    _assert_restored(state, loaded, saved)
    with open(tmp_path / "ckpt-7.complete") as f:
        assert json.load(f)["format"] == FORMAT_VERSION


def test_nothing_saved_restores_nothing(tmp_path):
    assert _store(str(tmp_path)).restore_latest(_state(1)) is None


@pytest.mark.parametrize(
    ("pattern", "how"),
    [
        ("ckpt-2.data-*", "truncate"),
        ("ckpt-2.complete", "garbage"),
        ("ckpt-2.arrays.npz", "alter"),
        ("ckpt-2.values.json", "alter"),
    ],
)
def test_damaged_newest_falls_back_to_previous_and_is_moved_aside(tmp_path, pattern, how, caplog):
    store = _store(str(tmp_path))
    first = _state(1)
    store.save(1, first)
    store.save(2, _state(2))
    (damaged,) = glob.glob(str(tmp_path / pattern))
    _damage(damaged, how)
    size = os.path.getsize(damaged)
    state = _state(3)
    step, loaded = store.restore_latest(state)
    assert step == 1
    _assert_restored(state, loaded, first)
    assert any("ckpt-2" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    (kept,) = glob.glob(str(tmp_path / "damaged" / "*" / os.path.basename(damaged)))
    assert os.path.getsize(kept) == size
    assert not glob.glob(str(tmp_path / "ckpt-2.*"))
    assert store.complete_steps() == [1]


def test_no_usable_checkpoint_is_an_error_that_moves_nothing(tmp_path):
    store = _store(str(tmp_path))
    store.save(1, _state(1))
    store.save(2, _state(2))
    for path in glob.glob(str(tmp_path / "*.arrays.npz")):
        _damage(path, "truncate")
    before = _listing(tmp_path)
    with pytest.raises(CheckpointError, match="No usable checkpoint") as error:
        store.restore_latest(_state(3))
    assert "ckpt-1" in str(error.value) and "ckpt-2" in str(error.value)
    assert _listing(tmp_path) == before


def test_a_structure_mismatch_is_a_problem_named_by_key_path(tmp_path):
    store = _store(str(tmp_path))
    store.save(1, _state(1))
    state = _state(2)
    state["replay"]["rewards"] = np.zeros(5)  # an extra key path
    del state["runner"]["name"]  # a missing one
    with pytest.raises(CheckpointError) as error:
        store.restore_latest(state)
    assert "replay/rewards (nothing saved, an array expected)" in str(error.value)
    assert "runner/name (a JSON value saved, nothing expected)" in str(error.value)


def test_an_unsavable_leaf_fails_before_anything_is_written(tmp_path):
    store = _store(str(tmp_path))
    state = {"runner": {"when": object()}}
    with pytest.raises(TypeError, match="runner/when"):
        store.save(1, state)
    assert os.listdir(tmp_path) == []


def test_only_the_newest_max_to_keep_are_kept(tmp_path):
    store = _store(str(tmp_path), max_to_keep=2)
    for step in range(1, 5):
        store.save(step, _state(step))
    assert store.complete_steps() == [4, 3]
    assert sorted({name.split(".")[0] for name in os.listdir(tmp_path)}) == ["ckpt-3", "ckpt-4"]


def test_a_folder_named_like_a_pattern_finds_prunes_tidies_and_restores_its_checkpoints(tmp_path):
    """`lr[0.01]*?` names a folder, never a pattern: a pattern built from it matched none of
    its checkpoints, so a resume started from step 0 and nothing was ever pruned."""
    directory = tmp_path / "lr[0.01]*?" / "checkpoints"
    store = _store(str(directory), max_to_keep=2)
    saved = {step: _state(step) for step in range(1, 5)}
    for step, state in saved.items():
        store.save(step, state)
    assert store.complete_steps() == [4, 3]
    assert sorted({name.split(".")[0] for name in os.listdir(directory)}) == ["ckpt-3", "ckpt-4"]
    _damage(str(directory / "ckpt-4.values.json"), "alter")
    (directory / "ckpt-5.index").write_bytes(b"an unfinished write")
    state = _state(9)
    step, loaded = store.restore_latest(state)
    assert step == 3
    _assert_restored(state, loaded, saved[3])
    (moved,) = os.listdir(directory / "damaged")  # the damaged one, all its files set aside
    suffixes = [".arrays.npz", ".complete", ".data-00000-of-00001", ".index", ".values.json"]
    assert sorted(os.listdir(directory / "damaged" / moved)) == [f"ckpt-4{s}" for s in suffixes]
    store.tidy()
    assert sorted(os.listdir(directory)) == [*(f"ckpt-3{s}" for s in suffixes), "damaged"]


def test_an_older_format_is_refused_without_reading_or_moving_anything(tmp_path):
    extras = tmp_path / "ckpt-5.extras"  # format 1: extras folder, marker without a version
    extras.mkdir()
    (extras / "runner_state.json").write_text('{"env_steps": 5}')
    digest = hashlib.sha256((extras / "runner_state.json").read_bytes()).hexdigest()
    marker = {"step": 5, "files": {"ckpt-5.extras/runner_state.json": digest}}
    (tmp_path / "ckpt-5.complete").write_text(json.dumps(marker))
    before = _listing(tmp_path)
    with pytest.raises(CheckpointError, match="older layout") as error:
        _store(str(tmp_path)).restore_latest(_state(1))
    assert "format 1" in str(error.value) and "new --base_dir" in str(error.value)
    assert _listing(tmp_path) == before


def test_a_crash_between_data_and_marker_leaves_the_previous_one_restorable(tmp_path, monkeypatch):
    store = _store(str(tmp_path))
    first = _state(1)
    store.save(1, first)
    write = atomic_files.atomic_write

    def killed_before_marker(path, data):
        if path.endswith(".complete"):
            raise KeyboardInterrupt  # the process dies here
        write(path, data)

    monkeypatch.setattr(checkpointing.atomic_files, "atomic_write", killed_before_marker)
    with pytest.raises(KeyboardInterrupt):
        store.save(2, _state(2))
    monkeypatch.undo()
    assert glob.glob(str(tmp_path / "ckpt-2.*"))  # its data is there, unmarked
    state = _state(3)
    step, loaded = store.restore_latest(state)
    assert step == 1
    _assert_restored(state, loaded, first)
    second = _state(4)
    store.save(2, second)  # the resumed run saves that step again, over the leftovers
    step, loaded = store.restore_latest(state)
    assert step == 2
    _assert_restored(state, loaded, second)


def _damage_member(archive_path: str, member: str) -> None:
    """Flips a byte inside one member's data of an (uncompressed) npz."""
    import zipfile

    with zipfile.ZipFile(archive_path) as archive:
        info = archive.getinfo(member + ".npy")
    with open(archive_path, "r+b") as f:
        f.seek(info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size - 1)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_partial_read_takes_a_part_reads_no_other_array_and_changes_nothing(tmp_path):
    store = _store(str(tmp_path))
    saved = _state(1)
    store.save(5, saved)
    _damage_member(str(tmp_path / "ckpt-5.arrays.npz"), "replay/observations")
    before = _listing(tmp_path)
    part = _state(2)
    wanted = {
        "agent": {"network": part["agent"]["network"]},
        "replay": {"actions": part["replay"]["actions"]},
    }
    loaded = store.read(5, wanted)
    assert _same_bits(loaded["replay"]["actions"], saved["replay"]["actions"])
    for mine, theirs in zip(
        part["agent"]["network"].weights, saved["agent"]["network"].weights, strict=True
    ):
        assert _same_bits(mine.numpy(), theirs.numpy())
    assert _listing(tmp_path) == before  # no quarantine, no tidying
    with pytest.raises(CheckpointError, match="ckpt-5 cannot be read: BadZipFile"):
        store.read(5, {"replay": {"observations": part["replay"]["observations"]}})
    with pytest.raises(CheckpointError, match="does not hold agent/other"):
        store.read(5, {"agent": {"other": _Counter(0)}})
    with pytest.raises(CheckpointError, match=r"arrays\.npz does not match its recorded hash"):
        store.restore_latest(_state(3))  # the whole state: every file checked
