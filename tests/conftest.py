"""Shared fixtures (every test starts and ends with an empty gin config; one Ray instance; the
trained runs), each test's tier (tests/tiers.py) and, where CI asks, no unexplained skip."""

import atexit
import fnmatch
import os
import pathlib
import shutil
import subprocess
import tempfile

# TensorFlow's C++ log at the command line's level (fatal lines only), here and in the runs the
# tests start: set before any test module imports TensorFlow.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# XLA's programs cached in a folder of this session's own, shared by its tests and the runs
# they start (the same programs load across tests): the user's cache stays untouched.
if "RLFRAME_XLA_CACHE" not in os.environ:
    os.environ["RLFRAME_XLA_CACHE"] = tempfile.mkdtemp(prefix="rlframe-xla-tests-")
    atexit.register(shutil.rmtree, os.environ["RLFRAME_XLA_CACHE"], ignore_errors=True)

import gin
import pytest

from framework.compiled import xla_cache
from tests import tiers
from tests.trained import TrainedRuns

xla_cache.enable()


@pytest.fixture(autouse=True)
def _clear_gin_config():
    """Bindings parsed by one test must not leak into the next."""
    yield
    gin.clear_config()


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray instance for every Ray test of the session (Ray 2.60 has no local_mode)."""
    ray = pytest.importorskip("ray")
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory) -> TrainedRuns:
    """Short runs of every agent (tests/trained.py), each trained once per test process."""
    return TrainedRuns(tmp_path_factory.mktemp("trained"))


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the marks given here
def pytest_collection_modifyitems(config, items):
    """Marks each test with its one tier; a contradiction or a stale row stops the run."""
    problems, modules = [], {}
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix()
        modules[path] = item.module
        marks = {mark.name for mark in item.iter_markers() if mark.name in tiers.TIERS}
        name = getattr(item, "originalname", item.name)
        try:
            tier = tiers.tier_of(path, name, marks, item.fixturenames)
        except tiers.TierError as error:
            problems.append(f"{item.nodeid}: {error}")
            continue
        if tier not in marks:
            item.add_marker(tier)
    problems += tiers.rows_naming_nothing(config.rootpath, modules.items())
    if problems:
        raise pytest.UsageError("Test tiers (tests/tiers.py):\n  " + "\n  ".join(problems))


# Skips that CI accepts (RLFRAME_REFUSE_SKIPS=1, as .ci/run sets): (test id pattern, the skip
# reason's start, why the machine may lack it). Any other skip fails the run: a test extra's
# package missing, say, must not pass unnoticed.
ALLOWED_SKIPS = [
    (
        "tests/experiments/test_faults.py::*",
        "mounting a tmpfs is not permitted here",
        "mounting a tmpfs needs root (CAP_SYS_ADMIN), which a CI runner may not have",
    ),
    (
        "tests/framework/compiled/test_xla_cache.py::*",
        "mounting a tmpfs is not permitted here",
        "the same: a read-only or full cache folder is a small tmpfs",
    ),
    (
        "tests/experiments/test_use_trained.py::*",
        "root writes into a read-only folder",
        "permission bits do not stop root; a --video path under a file is the case root meets",
    ),
]
_refused_skips: list[str] = []


def _skip_allowed(nodeid: str, reason: str) -> bool:
    return any(
        fnmatch.fnmatch(nodeid, pattern) and reason.startswith(start)
        for pattern, start, _ in ALLOWED_SKIPS
    )


def pytest_runtest_logreport(report):
    refusing = os.environ.get("RLFRAME_REFUSE_SKIPS") == "1"
    if refusing and report.skipped and "PYTEST_XDIST_WORKER" not in os.environ:  # its controller
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not _skip_allowed(report.nodeid, reason):
            _refused_skips.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter):
    if _refused_skips:
        terminalreporter.section("skips CI does not accept (tests/conftest.py's ALLOWED_SKIPS)")
        for line in _refused_skips:
            terminalreporter.line(line)


def pytest_sessionfinish(session):
    if _refused_skips and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def tmpfs(tmp_path):
    """`mount(name, options)`: a tmpfs with those options on a new folder of `tmp_path` (a small,
    read-only or full filesystem; mounting needs root on Linux, the test is skipped elsewhere),
    unmounted at the end."""
    mounted = []

    def mount(name: str, options: str) -> pathlib.Path:
        folder = tmp_path / name
        folder.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture(autouse=True)
def absl_log_level():
    """absl's logger level as each test found it: a command's main, a sweep's probe or a
    trial sets it for its process, and a later test in the same worker that reads the log
    (caplog) would otherwise see only what that level lets through."""
    from absl import logging as absl_logging

    logger = absl_logging.get_absl_logger()
    level = logger.level
    yield
    logger.setLevel(level)
