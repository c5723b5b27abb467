"""XLA's program cache: where `enable()` points TensorFlow, the damaged files it removes, and a
second run that loads the first run's program and computes the same numbers."""

import os
import pathlib
import subprocess
import sys

from google.protobuf import descriptor_pb2

from framework.compiled import xla_cache
from framework.storage.event_reader import read_scalars

REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[3])
FLAG = "--tf_xla_persistent_cache_directory"


def _message() -> tuple[bytes, set[int]]:
    """A serialised message with fields of several wire types (strings, a nested message), and
    the lengths at which a field ends (where a cut leaves a shorter whole message)."""
    proto = descriptor_pb2.FileDescriptorProto(name="a.proto")
    ends = {0, len(proto.SerializeToString())}
    proto.package = "p"
    ends.add(len(proto.SerializeToString()))
    proto.message_type.add(name="M").field.add(name="x", number=3)
    return proto.SerializeToString(), ends


def test_the_default_folder_is_one_per_tensorflow_version_under_the_users_cache(tmp_path):
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    folder = xla_cache.enable(environ)
    version = xla_cache._tensorflow_version()
    assert version != "unknown"
    assert folder == str(tmp_path / "rlframe" / "xla" / f"tensorflow-{version}")
    assert os.path.isdir(folder)
    assert environ["TF_XLA_FLAGS"] == f"{FLAG}={folder}"


def test_the_variable_names_the_folder_keeps_other_flags_or_turns_the_cache_off(tmp_path):
    environ = {"RLFRAME_XLA_CACHE": str(tmp_path / "c"), "TF_XLA_FLAGS": "--tf_xla_auto_jit=0"}
    assert xla_cache.enable(environ) == str(tmp_path / "c")
    assert environ["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=0 {FLAG}={tmp_path / 'c'}"
    assert xla_cache.enable(environ) == str(tmp_path / "c")  # a second call adds nothing
    assert environ["TF_XLA_FLAGS"].count(FLAG) == 1
    off = {"RLFRAME_XLA_CACHE": "off"}
    assert xla_cache.enable(off) is None and "TF_XLA_FLAGS" not in off
    own = {"TF_XLA_FLAGS": f"{FLAG}=/somewhere", "RLFRAME_XLA_CACHE": str(tmp_path)}
    assert xla_cache.enable(own) == "/somewhere"  # the user's own flag wins
    assert own["TF_XLA_FLAGS"] == f"{FLAG}=/somewhere"


def test_a_folder_that_cannot_be_made_leaves_the_cache_off(tmp_path):
    (tmp_path / "file").write_text("")
    environ = {"RLFRAME_XLA_CACHE": str(tmp_path / "file" / "cache")}
    assert xla_cache.enable(environ) is None
    assert "TF_XLA_FLAGS" not in environ


def test_whole_messages_pass_and_files_cut_inside_a_field_empty_or_foreign_do_not():
    data, field_ends = _message()
    assert xla_cache.is_whole_message(data)
    for end in set(range(len(data))) - field_ends:  # every cut inside a field
        assert not xla_cache.is_whole_message(data[:end]), end
    assert not xla_cache.is_whole_message(b"")
    assert not xla_cache.is_whole_message(b"\x00\x01")  # field number 0
    assert not xla_cache.is_whole_message(b"\x0b")  # wire type 3 (groups) never written here
    assert not xla_cache.is_whole_message(b"text format: 1\n")


def test_enable_removes_damaged_cache_files_and_keeps_whole_ones(tmp_path):
    data, _ = _message()
    (tmp_path / "whole.pb").write_bytes(data)
    (tmp_path / "cut.pb").write_bytes(data[:-3])
    (tmp_path / "empty.pb").write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"not the cache's")
    assert xla_cache.enable({"RLFRAME_XLA_CACHE": str(tmp_path)}) == str(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "whole.pb"]


def _train(cache: str, base_dir: str) -> subprocess.CompletedProcess:
    """A PPO CartPole run of two learner calls (XLA-compiled) with `cache` as its XLA cache."""
    drop = ("TF_XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")  # the command line's own defaults
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    environ["RLFRAME_XLA_CACHE"] = cache
    bindings = ["Runner.num_steps = 512", "Runner.eval_interval = 512", "Runner.eval_episodes = 1"]
    completed = subprocess.run(
        [sys.executable, "-m", "experiments.run", "--gin_file=gin_configs/ppo/cartpole.gin"]
        + [f"--gin_bindings={line}" for line in bindings]
        + ["--seed=3", f"--base_dir={base_dir}"],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def _learning_scalars(base_dir: str) -> dict:
    scalars = read_scalars(base_dir)
    return {tag: values for tag, values in scalars.items() if tag.startswith(("train/", "eval/"))}


def _files(folder) -> dict[str, tuple[int, int]]:
    return {
        name: (os.stat(folder / name).st_mtime_ns, os.stat(folder / name).st_size)
        for name in os.listdir(folder)
    }


def test_a_second_run_loads_the_first_runs_program_and_learns_the_same_numbers(tmp_path):
    cache = tmp_path / "cache"
    first = _train(str(cache), str(tmp_path / "first"))
    compiled = _files(cache)
    assert compiled and all(name.endswith(".pb") for name in compiled), compiled
    second = _train(str(cache), str(tmp_path / "second"))
    assert _files(cache) == compiled  # read, not compiled and written again
    expected = _learning_scalars(str(tmp_path / "first"))
    expected.pop("train/steps_per_second")
    loaded = _learning_scalars(str(tmp_path / "second"))
    loaded.pop("train/steps_per_second")
    assert expected and loaded == expected  # bit for bit
    for run in (first, second):  # the reader's text-format attempt stays out of the log
        assert "text_format" not in run.stderr and "E0000" not in run.stderr, run.stderr

    # A damaged file is removed and compiled again, where TensorFlow would fail the call.
    (name,) = compiled
    (cache / name).write_bytes((cache / name).read_bytes()[:100])
    third = _train(str(cache), str(tmp_path / "third"))
    assert "Removed a damaged file of XLA's program cache" in third.stderr
    assert xla_cache.is_whole_message((cache / name).read_bytes())
    assert _learning_scalars(str(tmp_path / "third")).get("train/loss") == expected["train/loss"]
