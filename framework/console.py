"""What a person reads from any process of a run: TensorFlow imported without its start-up
banners, the framework's log in one short line format, and no line of Ray's or MuJoCo's own.

Every entry point (through `experiments.quiet`) and every worker in a process of its own (a
sweep's trial, the asynchronous driver's process and Ray workers) calls `import_tensorflow()`
before anything imports TensorFlow, so that a researcher sees progress and errors only, in the
same lines everywhere:

    I 23:05:10 runner] step 1000/3000 | return (last 20 episodes) 21.4 | 1850 steps/s

Importing this module is cheap: it imports neither TensorFlow nor any part of the framework
that does.
"""

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from absl import logging as absl_logging

from framework.compiled import xla_cache

# Keras imports these at start-up, where installed (the analysis extra), only for features this
# framework never uses (image-gallery plots, slicing pandas frames): a good part of the import.
_UNUSED_BY_KERAS = ("matplotlib", "matplotlib.pyplot", "pandas")


@contextlib.contextmanager
def native_stderr_silenced():
    """Hides what native code prints to the stderr descriptor in the block (TF's C++ core while
    it loads: oneDNN, CUDA probing, cuInit).

    TF 2.21 writes these before its logging is initialised, so TF_CPP_MIN_LOG_LEVEL does not
    reach them; Python errors raised inside still print, after the descriptor is restored.
    """
    sys.stderr.flush()
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
    """TensorFlow, imported quietly; TF's own INFO lines are dropped from absl's log, and the
    log is set to the short line format (`use_short_log_format`). XLA's compiled programs are
    kept in `xla_cache`'s folder.

    TF's C++ log keeps its fatal lines only: its errors reach Python as exceptions with their
    message, and the one error line a healthy run met was the XLA cache's reader trying text
    format before binary on every file it loads.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    use_short_log_format()
    xla_cache.enable()
    with native_stderr_silenced(), _hidden_from_imports(_UNUSED_BY_KERAS):
        import tensorflow as tf

        tf.config.list_physical_devices()  # device probing logs too; do it while silenced
    tf.get_logger().setLevel("ERROR")  # TF's Python-side INFO chatter
    absl_logger = absl_logging.get_absl_logger()
    if _not_tensorflow_internals not in absl_logger.filters:
        absl_logger.addFilter(_not_tensorflow_internals)
    return tf


class ShortFormatter(logging.Formatter):
    """`I 23:05:10 runner] message`: the severity's letter, the local time and the module that
    logged, then the message (and a traceback, if the record has one). absl's own prefix
    (`I1125 23:05:10.876218 140589450201984 runner.py:305]`) says the same in 50 characters."""

    _LETTERS = {logging.CRITICAL: "F"}  # absl's FATAL

    def __init__(self):
        super().__init__("%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        letter = self._LETTERS.get(record.levelno, record.levelname[:1])
        when = self.formatTime(record, "%H:%M:%S")
        return f"{letter} {when} {_module_of(record)}] {super().format(record)}"


def _module_of(record: logging.LogRecord) -> str:
    """The module that logged; a package's `__init__.py` by the package's name."""
    if record.module == "__init__":
        return os.path.basename(os.path.dirname(record.pathname)) or record.module
    return record.module


_HANDLER_NAME = "rlframe-console"


def use_short_log_format() -> None:
    """Puts every absl log line of this process in `ShortFormatter`'s format.

    Under `absl.app.run` (the command lines) lines go through absl's handler, which gets the
    formatter. Outside an absl app (a sweep's trial process, a worker) absl would otherwise
    configure Python logging's `INFO:absl:` format on first use: a stderr handler with the
    formatter takes its place, where the process has set up no logging of its own. Idempotent.
    """
    formatter = ShortFormatter()
    absl_handler = absl_logging.get_absl_handler()
    absl_handler.setFormatter(formatter)
    root = logging.getLogger()
    if root.handlers:  # absl's (app.run), ours, or the process's own logging: left as it is
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root.addHandler(handler)


@contextlib.contextmanager
def ray_lines_into(path: str) -> Iterator[None]:
    """Ray's own lines into `path` (`os.devnull`: nowhere) for the block, off the console,
    where a run's or a sweep's lines alone belong: its logger's (the token authentication
    WARNING, "Started a local Ray instance", Tune's result files) and what Tune prints on stdout
    (its experiment table). A stream handed out before the block keeps its lines."""
    ray_logger = logging.getLogger("ray")  # with Ray's own handler, which prints to stderr
    with open(path, "a") as log:
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s] %(message)s"))
        handlers, ray_logger.handlers = ray_logger.handlers, [handler]
        try:
            with contextlib.redirect_stdout(log):
                yield
        finally:
            ray_logger.handlers = handlers


_building_models = 0  # environments being built now: MuJoCo's warnings are their models'


@contextlib.contextmanager
def mujoco_model_warnings_quiet() -> Iterator[None]:
    """MuJoCo prints its warnings itself, on stderr and into MUJOCO_LOG.TXT in the working
    folder. Those of compiling a model in the block (gymnasium's HalfCheetah: "compiler
    attribute 'settotalmass' is deprecated", at every environment built) concern the model's
    authors: logged at DEBUG. A simulation's later ones (unstable, its state reset) are the
    run's warnings. Without MuJoCo installed, nothing changes (gymnasium says what to install
    as it builds the environment)."""
    global _building_models
    try:
        import mujoco
    except ImportError:
        mujoco = None
    if mujoco is not None:
        mujoco.set_mju_user_warning(_mujoco_warning)
    _building_models += 1
    try:
        yield
    finally:
        _building_models -= 1


def _mujoco_warning(message: str) -> None:
    log = absl_logging.debug if _building_models else absl_logging.warning
    log("MuJoCo: %s", message)
