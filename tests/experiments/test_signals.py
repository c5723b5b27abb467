"""Pre-emption loses nothing: SIGTERM and SIGINT checkpoint the step reached and exit cleanly."""

import concurrent.futures
import glob
import os
import random
import re
import signal
import time

import numpy as np
import pytest

from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars
from tests.experiments import cli

GIN_FILE = "gin_configs/dqn/cartpole.gin"
BINDINGS = [
    "Runner.num_steps = 5000",
    "Runner.checkpoint_interval = 1500",
    "Runner.eval_interval = 1000",
    "Runner.eval_episodes = 3",
    "Runner.log_interval = 500",
    "ReplaySchedule.train_freq = 128",
    "ReplaySchedule.gradient_steps = 16",
]


def _signal_at_a_random_step(process, base_dir, signals, seed) -> str:
    """Sends `signals` (in quick succession) a random moment after the first checkpoint."""
    cli.wait_for_first_checkpoint(process, base_dir)
    time.sleep(random.Random(seed).uniform(0.0, 0.5))
    for number in signals:
        process.send_signal(number)
    _, stderr = process.communicate(timeout=120)
    return stderr


def _check_stop(process, stderr: str, signals, exit_code: int) -> tuple[int, str]:
    """The exit code, no traceback, one last line saying where it stopped; (step, folder)."""
    assert process.returncode == exit_code, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    last_line = stderr.rstrip().splitlines()[-1]
    stopped = re.fullmatch(
        rf"experiments\.run: stopped by {signals[0].name} at environment step (\d+); its "
        r"checkpoint is in (\S+) \(saving took [\d.]+ s\)\. Run the same command again to "
        r"resume from there\.",
        last_line,
    )
    assert stopped, last_line
    step, checkpoints = int(stopped.group(1)), stopped.group(2)
    assert 1500 <= step < 5000
    # A second SIGINT arrived during the save: the checkpoint is complete all the same.
    assert complete_steps(checkpoints)[0] == step
    return step, checkpoints


def test_sigterm_and_sigint_checkpoint_the_step_reached_and_resume_bitwise(tmp_path):
    uninterrupted = cli.start(tmp_path / "uninterrupted", GIN_FILE, BINDINGS)
    cases = {"sigterm": ([signal.SIGTERM], 143), "sigint": ([signal.SIGINT, signal.SIGINT], 130)}
    processes = {name: cli.start(tmp_path / name, GIN_FILE, BINDINGS) for name in cases}
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        stderrs = {
            name: pool.submit(
                _signal_at_a_random_step, processes[name], tmp_path / name, signals, seed
            )
            for seed, (name, (signals, _)) in enumerate(cases.items())
        }
        stops = {
            name: _check_stop(processes[name], stderrs[name].result(), *cases[name])
            for name in cases
        }
    restarted = {name: cli.start(tmp_path / name, GIN_FILE, BINDINGS) for name in cases}
    for name, (step, checkpoints) in stops.items():
        resumed = cli.finish(restarted[name])
        assert f"Resumed from {checkpoints} at environment step {step} " in resumed
    cli.finish(uninterrupted)

    expected = read_scalars(tmp_path / "uninterrupted")
    expected_weights = cli.final_weights(tmp_path / "uninterrupted")
    expected_rows = cli.progress_rows(tmp_path / "uninterrupted")
    for name in cases:
        scalars = read_scalars(tmp_path / name)
        cli.assert_no_step_twice(scalars)
        for tag in ("eval/episode_return", "train/episode_return", "train/loss"):
            assert scalars[tag] == expected[tag], (name, tag)
        # Its means of the episodes since the last log too, although the signal fell between.
        assert cli.progress_rows(tmp_path / name) == expected_rows, name
        weights = cli.final_weights(tmp_path / name)
        for key, value in expected_weights.items():
            np.testing.assert_array_equal(weights[key], value, err_msg=f"{name}: {key}")


def test_ctrl_c_stops_the_processes_backend_with_a_checkpoint_and_resumes(tmp_path):
    """A terminal's Ctrl-C reaches the whole foreground process group: the driver's worker
    processes too. They must outlive it until the driver has saved, then go with it."""
    gin_file = "gin_configs/a3c/cartpole.gin"
    bindings = [
        "AsynchronousDriver.backend = @Processes",
        "AsynchronousDriver.num_workers = 2",
        "Runner.num_steps = 3000",
        "Runner.checkpoint_interval = 200",
        "Runner.eval_interval = 3000",
        "Runner.eval_episodes = 1",
        "Runner.log_interval = 200",
    ]
    process = cli.start(tmp_path, gin_file, bindings, own_group=True)
    cli.wait_for_first_checkpoint(process, tmp_path)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "BrokenProcessPool" not in stderr, stderr[-3000:]
    stopped = re.search(r"stopped by SIGINT at environment step (\d+); its checkpoint", stderr)
    assert stopped, stderr[-2000:]
    step = int(stopped.group(1))
    assert complete_steps(str(tmp_path / "checkpoints"))[0] == step < 3000
    assert not _still_running_in_group(process.pid)  # no worker outlived the driver
    resumed = cli.finish(cli.start(tmp_path, gin_file, bindings))
    assert f"at environment step {step} " in resumed
    assert read_scalars(tmp_path)["eval/episode_return"][-1][0] >= 3000


def _still_running_in_group(group: int, seconds: float = 10.0) -> list[int]:
    """Processes of process group `group` still running `seconds` after the driver exited:
    the kernel's kill of a worker whose parent died, and multiprocessing's resource tracker
    (which exits when its pipe from the driver closes), take effect a moment later."""
    deadline = time.monotonic() + seconds
    while (running := _running_in_group(group)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return running


def _running_in_group(group: int) -> list[int]:
    """Processes of process group `group` that still run (zombies waiting to be reaped by
    init are gone for good and do not count)."""
    running = []
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                state, _, process_group = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):  # it ended while we looked
            continue
        if int(process_group) == group and state != "Z":
            running.append(int(path.split("/")[2]))
    return running


def test_a_signal_during_start_up_stops_before_anything_is_written(tmp_path):
    """TensorFlow's import and the agent's building take seconds: a Ctrl-C then is not lost."""
    cases = {"sigint": (signal.SIGINT, 1.0, 130), "sigterm": (signal.SIGTERM, 2.0, 143)}
    processes = {name: cli.start(tmp_path / name, GIN_FILE, BINDINGS) for name in cases}
    started = time.monotonic()
    for name, (number, delay, _) in sorted(cases.items(), key=lambda case: case[1][1]):
        time.sleep(max(0.0, started + delay - time.monotonic()))
        processes[name].send_signal(number)
    for name, (number, _, exit_code) in cases.items():
        _, stderr = processes[name].communicate(timeout=120)
        assert processes[name].returncode == exit_code, stderr[-3000:]
        assert stderr.rstrip().splitlines()[-1] == (
            f"experiments.run: stopped by {signal.Signals(number).name} during start-up, "
            "before training began; nothing was written."
        )
        assert "Traceback" not in stderr
        assert not os.path.exists(tmp_path / name)


@pytest.mark.process
def test_a_signal_after_the_done_line_leaves_the_finished_run_exiting_0(tmp_path):
    """A job scheduler may signal a run that has just finished: after its `Done:` line the
    process shuts down for a few seconds (where Python no longer runs handlers), and a
    signal then must not turn a finished run into a killed one (exit -15)."""
    bindings = ["Runner.num_steps = 100", "Runner.eval_interval = 100", "Runner.eval_episodes = 1"]
    process = cli.start(tmp_path, "gin_configs/reinforce/bandit.gin", bindings)
    for line in process.stderr:
        if "Done:" in line:
            break
    else:
        raise AssertionError(f"no Done line; exit {process.wait()}")
    signals = 0
    while process.poll() is None:  # at every moment of the shutdown
        process.send_signal(signal.SIGINT if signals % 2 else signal.SIGTERM)
        signals += 1
        time.sleep(0.05)
    rest = process.stderr.read()
    assert process.returncode == 0, rest[-3000:]
    assert signals > 0
    assert rest.strip() == "", rest  # no "stopping" line: there was nothing to stop
