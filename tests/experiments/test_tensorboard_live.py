"""A TensorBoard left open across a kill and a resume shows the resumed run's points only."""

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars
from tests.experiments import cli
from tests.experiments.cli import steps_of

BANDIT = "gin_configs/reinforce/bandit.gin"
BINDINGS = [  # long enough to be killed mid-run however fast the machine
    "Runner.num_steps = 6000",
    "Runner.checkpoint_interval = 500",
    "Runner.eval_interval = 500",
    "Runner.eval_episodes = 2",
    "Runner.log_interval = 20",
]
TAGS = ("train/episode_return", "train/loss", "eval/episode_return")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _points(port: int, run: str, tag: str) -> list[tuple[int, float]] | None:
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return [(int(step), value) for _, step, value in json.load(response)]
    except (urllib.error.URLError, ConnectionError, ValueError):
        return None  # not serving yet, or the tag not loaded yet


def _runs(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5) as response:
        return json.load(response)


def _wait_until(condition, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    return condition()


def _kill_once_it_logged_past_a_checkpoint(process: subprocess.Popen, run) -> None:
    """SIGKILLs the run soon after its event files show a point past its newest checkpoint (a
    fixed delay races the run's speed), well before the next checkpoint is due."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before it logged past a checkpoint"
        checkpoints = complete_steps(str(run / "checkpoints"))
        scalars = read_scalars(run) if checkpoints else {}
        if "train/episode_return" in scalars:
            last = max(steps_of(scalars, "train/episode_return"))
            if max(checkpoints) < last < max(checkpoints) + 200:  # the interval is 500
                process.send_signal(signal.SIGKILL)
                process.wait()
                return
        time.sleep(0.05)
    raise AssertionError("the run never logged past a checkpoint")


def test_a_live_tensorboard_drops_what_the_killed_run_logged_after_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    _kill_once_it_logged_past_a_checkpoint(cli.start(run, BANDIT, BINDINGS), run)
    checkpointed = max(complete_steps(str(run / "checkpoints")))  # where the resume starts
    logged = steps_of(read_scalars(run), "train/episode_return")
    assert max(logged) > checkpointed, "the killed run wrote nothing past its last checkpoint"
    port = _free_port()
    command = [sys.executable, "-m", "tensorboard.main", f"--logdir={tmp_path}"]
    command += [f"--port={port}", "--host=127.0.0.1", "--reload_interval=1"]
    command += ["--samples_per_plugin=scalars=100000"]  # every point: a bandit ends 6000 episodes
    board = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def shows_the_killed_run():  # up to its last point, past the checkpoint
            points = _points(port, "run", "train/episode_return")
            return points if points and max(points)[0] == max(logged) else None

        before = _wait_until(shows_the_killed_run)
        assert before, "TensorBoard never served the killed run up to its last point"
        stderr = cli.finish(cli.start(run, BANDIT, BINDINGS))
        resumed_at = int(re.search(r"at environment step (\d+)", stderr).group(1))
        assert max(before)[0] > resumed_at  # TensorBoard had shown points that are superseded
        expected = read_scalars(run)  # the event files: one clean curve per tag

        def shows_the_resumed_run():
            for tag in TAGS:
                served = _points(port, "run", tag)
                if served is None or served != [(s, float(v)) for s, v in expected[tag]]:
                    return False
            return True

        assert _wait_until(shows_the_resumed_run), {
            tag: (_points(port, "run", tag) or [])[-5:] for tag in TAGS
        }
        # One training run is one TensorBoard run: its splits, and the killed start's
        # set-aside files (if any), are not runs of their own.
        assert _runs(port) == ["run"], _runs(port)
    finally:
        board.terminate()
        board.wait(timeout=30)
