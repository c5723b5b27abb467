"""Trains configs in the test process (one TF import for the whole session)."""

import experiments
from framework.runner import Runner


def train(base_dir, gin_files=(), bindings=()) -> Runner:
    """Trains a fresh gin config into `base_dir` and returns the finished runner."""
    return experiments.train(list(gin_files), list(bindings), str(base_dir)).runner
