"""Imports TensorFlow without its start-up banners, and keeps its chatter out of run logs.

Every entry point (run, benchmark workers, parts, sweep trials) calls `import_tensorflow()`
before anything else imports TensorFlow, so that a researcher sees progress and errors only.
"""

import contextlib
import os
from typing import Any


@contextlib.contextmanager
def _native_stderr_silenced():
    """Hides what TF's C++ core prints while it loads (oneDNN, CUDA probing).

    TF 2.21 writes these before its logging is initialised, so TF_CPP_MIN_LOG_LEVEL does not
    reach them; Python errors raised inside still print, after the descriptor is restored.
    """
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _not_tensorflow_internals(record: Any) -> bool:
    """TF's checkpoint code logs "Sharding callback duration" through absl at every save."""
    return record.module != "functional_saver"


def import_tensorflow() -> Any:
    """TensorFlow, imported quietly; TF's own INFO lines are dropped from absl's log."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _native_stderr_silenced():
        import tensorflow as tf

        tf.config.list_physical_devices()  # device probing logs too; do it while silenced
    tf.get_logger().setLevel("ERROR")  # TF's Python-side INFO chatter
    from absl import logging

    absl_logger = logging.get_absl_logger()
    if _not_tensorflow_internals not in absl_logger.filters:
        absl_logger.addFilter(_not_tensorflow_internals)
    return tf
