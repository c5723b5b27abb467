"""Shared fixtures: every test starts and ends with an empty gin config."""

import os

# Quiet TensorFlow's C++ start-up banner; set before any test module imports TensorFlow.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin
import pytest


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
