"""Shared fixtures: every test starts and ends with an empty gin config."""

import atexit
import os
import shutil
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
