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
