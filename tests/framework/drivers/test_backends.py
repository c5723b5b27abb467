"""A worker in a process of its own imports TensorFlow quietly, before anything it is built from
(whose unpickling imports TensorFlow) is unpickled; its log lines take the framework's format."""

import os
import re
import subprocess
import sys

import tensorflow as tf
from absl import logging

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class TensorFlowWorker:
    """A worker whose module imports TensorFlow, as every real one's does."""

    def __init__(self, message: str):
        logging.warning(message)
        self.value = float(tf.constant(2.0).numpy())

    def describe(self) -> dict:
        return {"value": self.value}

    def close(self) -> None:
        pass


def test_a_process_worker_prints_no_tensorflow_start_up_lines():
    # The driver imports TF quietly, as every entry point does; the worker's process is spawned,
    # and before the fix unpickled its factory (importing TF, loudly) before anything else ran.
    script = (
        "from framework import console\n"
        "console.import_tensorflow()\n"
        "from framework.config import Snapshot\n"
        "from framework.drivers.backends import Processes\n"
        "from tests.framework.drivers.test_backends import TensorFlowWorker\n"
        "backend = Processes(TensorFlowWorker, [('built',)], Snapshot('', ()))\n"
        "print(backend.describe())\n"
        "backend.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # Its description, and the bindings its process read (none: the snapshot binds nothing).
    assert done.stdout == "[{'value': 2.0, 'bindings_read': []}]\n"
    # One line, the worker's own, in the framework's format: no CUDA probing, no cuInit.
    assert re.fullmatch(r"W \d\d:\d\d:\d\d test_backends\] built\n", done.stderr), done.stderr
