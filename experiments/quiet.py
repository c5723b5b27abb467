"""Imports TensorFlow without its start-up banners, and keeps its chatter out of run logs.

Every entry point (run, benchmark workers, parts, sweep trials) calls `import_tensorflow()`
before anything else imports TensorFlow, so that a researcher sees progress and errors only.
"""

import contextlib
import os
import sys
from typing import Any

# Keras imports these at start-up, where installed (the analysis extra), only for features this
# framework never uses (image-gallery plots, slicing pandas frames): 0.9 s of a 3.7 s import.
_UNUSED_BY_KERAS = ("matplotlib", "matplotlib.pyplot", "pandas")


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


@contextlib.contextmanager
def _hidden_from_imports(names: tuple[str, ...]):
    """Makes `import name` fail (a None entry in sys.modules) until the block ends, for the
    modules not imported yet; importable again afterwards, e.g. by the analysis code."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


# TF modules that log through absl: "Sharding callback duration" at every checkpoint save; a
# SavedModel's renamed resource inputs and its fingerprint at every export.
_TENSORFLOW_INTERNALS = frozenset(
    {"functional_saver", "signature_serialization", "fingerprinting_utils"}
)


def _not_tensorflow_internals(record: Any) -> bool:
    return record.module not in _TENSORFLOW_INTERNALS


def import_tensorflow() -> Any:
    """TensorFlow, imported quietly; TF's own INFO lines are dropped from absl's log."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _native_stderr_silenced(), _hidden_from_imports(_UNUSED_BY_KERAS):
        import tensorflow as tf

        tf.config.list_physical_devices()  # device probing logs too; do it while silenced
    tf.get_logger().setLevel("ERROR")  # TF's Python-side INFO chatter
    from absl import logging

    absl_logger = logging.get_absl_logger()
    if _not_tensorflow_internals not in absl_logger.filters:
        absl_logger.addFilter(_not_tensorflow_internals)
    return tf
