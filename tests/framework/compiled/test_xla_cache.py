"""XLA's program cache: where `enable()` points TensorFlow, the folders it leaves off with one
warning, the files it sets aside, and runs that load, recompile or go without it and learn the
same numbers."""

import contextlib
import logging
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from framework.compiled import xla_cache
from framework.compiled.steps import TracedCall
from framework.storage.event_reader import read_scalars

REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[3])
FLAG = "--tf_xla_persistent_cache_directory"
ENTRY = "xla_compile_cache__1__2__XLA_CPU_JIT.pb"  # TensorFlow's way of naming a program's file


@pytest.fixture
def warnings(caplog):
    """The warnings logged (absl's logger propagates to the root, where caplog listens)."""
    caplog.set_level(logging.WARNING)
    return lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _full(folder: pathlib.Path) -> pathlib.Path:
    """`folder` (a small tmpfs) with every byte taken by a file."""
    with open(folder / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(bytes(4096))
    assert shutil.disk_usage(folder).free == 0
    return folder


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


def _assert_off_with_one_warning(environ: dict, warnings, says: str) -> None:
    """The cache is off, for this process and those it starts, and one warning says why."""
    assert xla_cache.enable(environ) is None
    assert "TF_XLA_FLAGS" not in environ
    assert environ["RLFRAME_XLA_CACHE"] == "off"  # the run's workers say nothing more
    (warning,) = warnings()
    assert warning.startswith("XLA's program cache is off for this run: ") and says in warning
    assert xla_cache.enable(environ) is None and len(warnings()) == 1


def test_a_variable_naming_a_file_or_a_folder_that_cannot_be_made_leaves_the_cache_off(
    tmp_path, caplog, warnings
):
    (tmp_path / "file").write_text("")
    environ = {"RLFRAME_XLA_CACHE": str(tmp_path / "file")}
    _assert_off_with_one_warning(environ, warnings, f"{tmp_path / 'file'} is a file, not a folder")
    assert (tmp_path / "file").read_text() == ""
    caplog.clear()
    environ = {"RLFRAME_XLA_CACHE": str(tmp_path / "file" / "cache")}
    assert xla_cache.enable(environ) is None
    assert "cannot be made (Not a directory)" in warnings()[-1]


def test_a_read_only_folder_leaves_the_cache_off_with_one_warning(tmpfs, warnings):
    folder = tmpfs("read_only", "size=1m,ro")
    environ = {"RLFRAME_XLA_CACHE": str(folder)}
    _assert_off_with_one_warning(environ, warnings, "cannot be written (Read-only file system)")


def test_a_full_or_nearly_full_disk_leaves_the_cache_off_with_one_warning(tmpfs, caplog, warnings):
    full = _full(tmpfs("full", "size=64k"))
    environ = {"RLFRAME_XLA_CACHE": str(full)}
    _assert_off_with_one_warning(environ, warnings, "cannot be written (No space left on device)")
    caplog.clear()
    small = tmpfs("small", "size=1m")  # writable, but the run's own files need the room
    environ = {"RLFRAME_XLA_CACHE": str(small)}
    _assert_off_with_one_warning(environ, warnings, "a disk with 1.0 MiB free, under the 64 MiB")


def _written_by_tensorflow(folder: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    """A program's file as TensorFlow writes it (a whole file renamed into place), recorded as
    after its compile."""
    (folder / (name + ".tmp")).write_bytes(data)
    os.replace(folder / (name + ".tmp"), folder / name)
    xla_cache.record_new_entries({"TF_XLA_FLAGS": f"{FLAG}={folder}"})
    return folder / name


def _flipped(path: pathlib.Path, offset: int) -> None:
    """One byte XOR 0xFF, written in place (a fault, not TensorFlow: it renames new files)."""
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 0xFF]))


def test_files_changed_after_tensorflow_wrote_them_or_without_a_record_are_set_aside(
    tmp_path, warnings
):
    data = bytes(range(256)) * 40
    names = [f"xla_compile_cache__{i}__0__XLA_CPU_JIT.pb" for i in range(5)]
    for name in names:
        _written_by_tensorflow(tmp_path, name, data)
    for name, offset in zip(names[:3], (0, len(data) // 2, len(data) - 1), strict=True):
        _flipped(tmp_path / name, offset)  # the first byte, the middle one, the last one
    os.utime(tmp_path / names[3], ns=(1, 1))  # touched (or copied): its bytes unchanged
    (tmp_path / "xla_compile_cache__9__0__XLA_CPU_JIT.pb").write_bytes(data)  # no record
    (tmp_path / "notes.txt").write_bytes(b"not the cache's")

    assert xla_cache.enable({"RLFRAME_XLA_CACHE": str(tmp_path)}) == str(tmp_path)

    set_aside = [*names[:3], "xla_compile_cache__9__0__XLA_CPU_JIT.pb"]
    damaged = tmp_path / xla_cache.DAMAGED
    assert sorted(os.listdir(damaged)) == sorted(
        [*set_aside, *(name + ".sha256" for name in names[:3])]
    )
    kept = names[3:]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [xla_cache.DAMAGED, "notes.txt", *kept, *(name + ".sha256" for name in kept)]
    )
    (warning,) = warnings()
    assert f"Set aside 4 file(s) of XLA's program cache in {damaged} " in warning
    assert "(3 changed since TensorFlow wrote them, 1 without a recorded sha256)" in warning
    assert xla_cache.enable({"RLFRAME_XLA_CACHE": str(tmp_path)}) == str(tmp_path)
    assert len(warnings()) == 1  # the touched file's record was brought up to date


def test_a_file_renamed_into_place_is_recorded_again_and_one_changed_in_place_is_not(tmp_path):
    path = _written_by_tensorflow(tmp_path, ENTRY, b"first compile")
    _written_by_tensorflow(tmp_path, ENTRY, b"another process's compile")  # renamed over it
    assert xla_cache.set_aside_unverified(str(tmp_path)) == []
    _flipped(path, 3)
    xla_cache.record_new_entries({"TF_XLA_FLAGS": f"{FLAG}={tmp_path}"})  # a run's next compile
    assert xla_cache.set_aside_unverified(str(tmp_path)) == [ENTRY]


# TensorFlow 2.21's errors for a cache it could not use (seen with a 2x2 jit_compile function).
_TENSORFLOW_ERRORS = {
    tf.errors.ResourceExhaustedError: "{folder}/" + ENTRY + "vm-1-2-3.tmp; No space left on device",
    tf.errors.PermissionDeniedError: "{folder}/" + ENTRY + "vm-1-2-3.tmp; Read-only file system",
    tf.errors.DataLossError: "Can't parse {folder}/" + ENTRY + " as binary proto",
    tf.errors.InternalError: "Failed to parse serialized CpuAotCompilationResult.",
}


def test_tensorflows_errors_for_the_cache_become_one_paragraph_naming_it_and_the_way_out():
    folder = "/cache/xla"
    environ = {"TF_XLA_FLAGS": f"{FLAG}={folder}"}
    for kind, message in _TENSORFLOW_ERRORS.items():
        tensorflows = kind(None, None, message.format(folder=folder) + " [Op:__inference_f_13]")
        explained = xla_cache.failure(tensorflows, environ)
        assert isinstance(explained, OSError) and explained.filename == folder
        assert explained.strerror.startswith(
            f"XLA's program cache in {folder} failed this compile ("
        )
        assert message.format(folder=folder) in explained.strerror
        assert "RLFRAME_XLA_CACHE=off turns the cache off" in explained.strerror
        assert "\n" not in str(explained)
        assert xla_cache.failure(tensorflows, {}) is None  # no cache: not the cache's doing
    other = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating /cache/xlaa")
    assert xla_cache.failure(other, environ) is None


def test_a_traced_call_raises_the_caches_failure_and_records_what_its_compile_wrote(
    tmp_path, monkeypatch
):
    # TensorFlow reads TF_XLA_FLAGS once: a compile first, so that it keeps the session's folder.
    tf.function(lambda: tf.constant(1.0) + 1, jit_compile=True)()
    monkeypatch.setenv("TF_XLA_FLAGS", f"{FLAG}={tmp_path}")  # the folder the calls look at

    def compile_failed(batch):
        message = f"{tmp_path}/{ENTRY}vm.tmp; No space left on device"
        tf.debugging.assert_equal(batch["x"][0, 0], -1.0, message=message)
        return batch["x"]

    spec = {"x": tf.TensorSpec([1, 2], tf.float32)}
    for batch_spec in (spec, None):  # the first call of a traced one, any call of the other
        call = TracedCall(compile_failed, batch_spec, jit_compile=False, use_direct_call=False)
        with pytest.raises(xla_cache.XlaCacheError) as raised:
            call({"x": tf.zeros([1, 2])})
        assert raised.value.filename == str(tmp_path)

    (tmp_path / ENTRY).write_bytes(b"written by this call's compile")
    call = TracedCall(lambda batch: batch["x"] + 1, spec, jit_compile=False, use_direct_call=False)
    call({"x": tf.zeros([1, 2])})
    assert (tmp_path / (ENTRY + ".sha256")).exists()
    assert xla_cache.set_aside_unverified(str(tmp_path)) == []


def _run(
    cache: str | None, base_dir: str, environ: dict | None = None
) -> subprocess.CompletedProcess:
    """A PPO CartPole run of two learner calls (XLA-compiled) with `cache` as its XLA cache."""
    drop = ("TF_XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL", "RLFRAME_XLA_CACHE")  # the command's own
    environ = {k: v for k, v in os.environ.items() if k not in drop} | (environ or {})
    if cache is not None:
        environ["RLFRAME_XLA_CACHE"] = cache
    bindings = ["Runner.num_steps = 512", "Runner.eval_interval = 512", "Runner.eval_episodes = 1"]
    return subprocess.run(
        [sys.executable, "-m", "experiments.run", "--gin_file=gin_configs/ppo/cartpole.gin"]
        + [f"--gin_bindings={line}" for line in bindings]
        + ["--seed=3", f"--base_dir={base_dir}"],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _train(cache: pathlib.Path | str, base_dir: pathlib.Path) -> tuple[dict, list[str]]:
    """The run's learning scalars and the warnings it gave about XLA's program cache."""
    completed = _run(str(cache), str(base_dir))
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr, completed.stderr
    # The reader's text-format attempt stays out of the log.
    assert "text_format" not in completed.stderr and "E0000" not in completed.stderr
    scalars = read_scalars(str(base_dir))
    scalars.pop("train/steps_per_second")
    learned = {tag: v for tag, v in scalars.items() if tag.startswith(("train/", "eval/"))}
    warned = [line for line in completed.stderr.splitlines() if "XLA's program cache" in line]
    return learned, warned


def _files(folder: pathlib.Path) -> dict[str, tuple[int, int, int]]:
    return {
        entry.name: (entry.stat().st_mtime_ns, entry.stat().st_size, entry.stat().st_ino)
        for entry in os.scandir(folder)
    }


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    """A cache holding the program of a first run (compiled then), and that run's numbers."""
    folder = tmp_path_factory.mktemp("compiled")
    learned, warned = _train(folder / "cache", folder / "first")
    assert learned and warned == []
    return folder / "cache", learned


@pytest.mark.process
def test_a_second_run_loads_the_first_runs_program_and_learns_the_same_numbers(compiled, tmp_path):
    cache, expected = compiled
    files = _files(cache)
    programs = [name for name in files if name.endswith(".pb")]
    assert programs and sorted(files) == sorted([*programs, *(p + ".sha256" for p in programs)])
    assert _train(cache, tmp_path / "second") == (expected, [])  # bit for bit
    assert _files(cache) == files  # read, not compiled and written or recorded again


@pytest.mark.process
def test_a_run_sets_a_damaged_program_aside_and_compiles_it_to_the_same_numbers(compiled, tmp_path):
    cache, expected = tmp_path / "cache", compiled[1]
    shutil.copytree(compiled[0], cache)  # new inodes: the records are checked, then renewed
    (name,) = [name for name in os.listdir(cache) if name.endswith(".pb")]
    # The last byte flipped: TensorFlow would fail the first learner call of every run
    # ("Failed to parse serialized CpuAotCompilationResult").
    _flipped(cache / name, os.path.getsize(cache / name) - 1)
    damaged = (cache / name).read_bytes()
    learned, (warning,) = _train(cache, tmp_path / "run")
    assert learned == expected
    assert f"Set aside 1 file(s) of XLA's program cache in {cache / 'damaged'}" in warning
    assert (cache / xla_cache.DAMAGED / name).read_bytes() == damaged
    assert xla_cache.set_aside_unverified(str(cache)) == []  # the new one is recorded


@pytest.mark.process
def test_runs_with_a_read_only_or_full_cache_folder_train_on_to_the_same_numbers(
    compiled, tmp_path, tmpfs
):
    for folder in (tmpfs("read_only", "size=1m,ro"), _full(tmpfs("full", "size=64k"))):
        learned, (warning,) = _train(folder, tmp_path / "runs" / folder.name)
        assert learned == compiled[1]
        assert f"XLA's program cache is off for this run: {folder} cannot be written" in warning


@pytest.mark.process
def test_a_cache_that_fails_a_compile_stops_the_run_with_one_paragraph(tmp_path, tmpfs):
    # A cache folder set in TF_XLA_FLAGS is used as it is: full, it fails XLA's compile as a
    # cache that fills during a run would.
    full = _full(tmpfs("full", "size=64k"))
    run = _run(None, str(tmp_path / "run"), {"TF_XLA_FLAGS": f"{FLAG}={full}"})
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr
    (error,) = [line for line in run.stderr.splitlines() if "error:" in line]
    assert error.startswith(f"experiments.run: error: XLA's program cache in {full} failed")
    assert "No space left on device" in error and "RLFRAME_XLA_CACHE=off" in error
    assert "checkpoint is intact" in error
