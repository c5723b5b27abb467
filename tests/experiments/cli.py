"""Runs `python -m experiments.run` in a subprocess, for tests of the command line itself."""

import csv
import os
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from framework.storage import file_names
from framework.storage.checkpointing import complete_steps

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(base_dir, gin_file: str, bindings=()) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "experiments.run",
        f"--gin_file={gin_file}",
        f"--base_dir={base_dir}",
    ]
    return args + [f"--gin_bindings={b}" for b in bindings]


def start(base_dir, gin_file: str, bindings=(), own_group: bool = False) -> subprocess.Popen:
    """The run in a subprocess; with `own_group`, in a process group of its own, which a test
    can signal as a terminal's Ctrl-C signals its foreground group."""
    return subprocess.Popen(
        command(base_dir, gin_file, bindings),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_group,
    )


def finish(process: subprocess.Popen, timeout: float = 240) -> str:
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-3000:]
    return stderr


def wait_for_first_checkpoint(process: subprocess.Popen, base_dir) -> None:
    checkpoints = os.path.join(str(base_dir), "checkpoints")
    deadline = time.monotonic() + 240
    while not complete_steps(checkpoints):
        assert process.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)


def kill_after_first_checkpoint(process: subprocess.Popen, base_dir, delay: float = 0.0) -> int:
    """SIGKILLs `process` `delay` seconds after a complete checkpoint exists."""
    wait_for_first_checkpoint(process, base_dir)
    time.sleep(delay)
    assert process.poll() is None, "the run ended before it was killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    return process.returncode


def final_weights(base_dir) -> dict[str, np.ndarray]:
    """Every variable of the newest complete checkpoint, by checkpoint key."""
    directory = os.path.join(str(base_dir), "checkpoints")
    prefix = os.path.join(directory, f"ckpt-{complete_steps(directory)[0]}")
    with file_names.tensorflow_readable(prefix) as readable:  # a folder named lr[0.01] too
        reader = tf.train.load_checkpoint(readable)
        return {
            key: reader.get_tensor(key)
            for key in reader.get_variable_to_shape_map()
            if key != "_CHECKPOINTABLE_OBJECT_GRAPH"
        }


def steps_of(scalars: dict[str, list[tuple[int, float]]], tag: str) -> list[int]:
    return [step for step, _ in scalars[tag]]


def assert_no_step_twice(scalars: dict[str, list[tuple[int, float]]]) -> None:
    for tag in scalars:
        steps = steps_of(scalars, tag)
        assert len(steps) == len(set(steps)), f"{tag} has a step twice: {steps}"


def progress_rows(base_dir) -> list[dict[str, str]]:
    """progress.csv's rows, without the column that measures time (steps per second)."""
    with open(os.path.join(str(base_dir), "progress.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return [
        {tag: value for tag, value in row.items() if tag != "train/steps_per_second"}
        for row in rows
    ]
