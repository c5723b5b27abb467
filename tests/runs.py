"""Trains configs in the test process (one TF import for the whole session)."""

import gin

from framework import config
from framework.runner import Runner


def train(base_dir, gin_files=(), bindings=()) -> Runner:
    """Parses a fresh gin config, trains it into `base_dir` and returns the finished runner."""
    gin.clear_config()
    config.parse(list(gin_files), list(bindings))
    runner = Runner(str(base_dir))
    runner.run()
    return runner
