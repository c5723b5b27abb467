"""What a process prints: TensorFlow imported without its banners, Keras's unused optional
imports hidden only while TF loads, and one short log line format inside and outside absl apps."""

import importlib
import json
import logging
import os
import re
import subprocess
import sys

import pytest

from framework import console

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = re.compile(r"^[DIWEF] \d\d:\d\d:\d\d \S+\] ")


def _stderr_of(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_hidden_modules_fail_to_import_inside_the_block_and_import_normally_after():
    sys.modules.pop("wave", None)  # a standard module that nothing here imports
    with console._hidden_from_imports(("wave", "json")):
        with pytest.raises(ImportError):
            importlib.import_module("wave")
        assert importlib.import_module("json") is json  # already imported: left alone
    assert importlib.import_module("wave").open is not None


def test_the_short_format_says_severity_time_module_and_message():
    record = logging.LogRecord("absl", logging.WARNING, "/x/runner.py", 305, "a %s", ("b",), None)
    assert re.fullmatch(r"W \d\d:\d\d:\d\d runner\] a b", console.ShortFormatter().format(record))
    record.levelno = logging.CRITICAL
    assert console.ShortFormatter().format(record).startswith("F ")
    package = logging.LogRecord("absl", 20, "/x/experiments/__init__.py", 1, "m", (), None)
    assert console.ShortFormatter().format(package).endswith(" experiments] m")


def test_a_worker_imports_tensorflow_silently_and_logs_in_the_short_format():
    # A sweep's trial or a Ray worker: no absl app, so absl would log `INFO:absl:...`; TF's C++
    # start-up lines (CUDA probing, cuInit) go to the stderr descriptor before its logging starts.
    stderr = _stderr_of(
        "from framework import console\n"
        "console.import_tensorflow()\n"
        "from absl import logging\n"
        "logging.set_verbosity(logging.INFO)\n"
        "logging.info('step %d', 100)\n"
        "logging.warning('careful')\n"
    )
    lines = stderr.splitlines()
    assert len(lines) == 2, stderr
    assert LINE.match(lines[0]) and lines[0].endswith("] step 100"), lines
    assert LINE.match(lines[1]) and lines[1].startswith("W ") and lines[1].endswith("] careful")


def test_a_command_line_logs_in_the_same_format():
    stderr = _stderr_of(
        "from experiments import quiet\n"
        "quiet.import_tensorflow()\n"
        "from absl import app, logging\n"
        "def main(argv):\n"
        "    logging.info('step %d', 100)\n"
        "app.run(main, argv=['prog'])\n"
    )
    assert re.fullmatch(r"I \d\d:\d\d:\d\d <string>\] step 100\n", stderr), stderr


def test_rays_lines_go_to_the_given_file_and_the_console_keeps_its_own(tmp_path, capfd):
    ray_logger = logging.getLogger("ray")
    handlers = list(ray_logger.handlers)
    console_stream = sys.stdout  # handed out before the block, as a sweep's progress lines are
    path = tmp_path / "ray.log"

    with console.ray_lines_into(str(path)):
        ray_logger.warning("Token authentication is enabled for this Ray cluster.")
        print("Configuration for experiment")  # Tune's table, on stdout
        print("sweep: 1/2 finished", file=console_stream)

    assert ray_logger.handlers == handlers
    out, err = capfd.readouterr()
    assert out == "sweep: 1/2 finished\n" and err == ""
    logged = path.read_text()
    assert "WARNING ray] Token authentication is enabled" in logged
    assert "Configuration for experiment\n" in logged


class _FakeMuJoCo:
    """What `mujoco_model_warnings_quiet` uses of MuJoCo: its warning callback's setter."""

    def __init__(self):
        self.warn = None

    def set_mju_user_warning(self, callback):
        self.warn = callback


def test_mujocos_model_warnings_are_debug_lines_and_its_simulations_warnings(monkeypatch, caplog):
    mujoco = _FakeMuJoCo()
    monkeypatch.setitem(sys.modules, "mujoco", mujoco)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="absl")  # whatever level an earlier test left it at

    with console.mujoco_model_warnings_quiet():  # gymnasium builds the environment
        mujoco.warn("compiler attribute 'settotalmass' is deprecated")
    mujoco.warn("Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.")

    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "MuJoCo: compiler attribute 'settotalmass' is deprecated"),
        (
            logging.WARNING,
            "MuJoCo: Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.",
        ),
    ]
