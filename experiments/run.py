"""Train and evaluate an agent from gin configs: `python -m experiments.run --gin_file=...`.

With no flags it trains the default config (DQN on CartPole) into a fresh folder under runs/.
Starting it again on the same --base_dir resumes from the newest complete checkpoint.
"""

import contextlib
import fcntl
import os
import sys


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


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
with _native_stderr_silenced():
    import tensorflow as tf

    tf.config.list_physical_devices()  # device probing logs too; do it while silenced
tf.get_logger().setLevel("ERROR")  # TF's Python-side INFO chatter (checkpoint sharding, ...)

import datetime  # noqa: E402
import json  # noqa: E402

import gin  # noqa: E402
import gymnasium as gym  # noqa: E402
from absl import app, flags, logging  # noqa: E402

import agents  # noqa: E402,F401  (registers every agent's configurables)
from framework import config  # noqa: E402
from framework.checkpointing import CheckpointError  # noqa: E402
from framework.runner import NonFiniteError, Runner  # noqa: E402

DEFAULT_GIN_FILE = "gin_configs/dqn/cartpole.gin"

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", [DEFAULT_GIN_FILE], "Gin config file(s); later ones win.")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. 'Runner.num_steps = 1000'.")
flags.DEFINE_string("base_dir", None, "The run's folder (default: a fresh one under runs/).")
flags.DEFINE_integer("seed", None, "Seed for everything; overrides Runner.seed.")
flags.DEFINE_bool("dry_run", False, "Parse, build env and agent, print the config, and exit.")
flags.DEFINE_bool("strict", False, "Fail, instead of warning, on bindings that nothing used.")


class UsageError(Exception):
    """Bad input, reported as one paragraph and a non-zero exit."""


def _default_base_dir() -> str:
    """A new folder per invocation: config name, seed, time to the microsecond."""
    name = os.path.splitext(os.path.basename(FLAGS.gin_file[-1]))[0]
    family = os.path.basename(os.path.dirname(FLAGS.gin_file[-1])) or "run"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    seed = "" if FLAGS.seed is None else f"_seed{FLAGS.seed}"
    return os.path.join("runs", f"{family}_{name}{seed}_{stamp}")


@contextlib.contextmanager
def _exclusive(base_dir: str):
    """Holds a lock on the run folder: two processes must never train into the same one."""
    with open(os.path.join(base_dir, ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise UsageError(
                f"Another process is training in {base_dir}; wait for it to finish, or choose "
                "another --base_dir."
            ) from error
        yield


def build_runner(base_dir: str) -> Runner:
    """Parses the flags' gin config and builds the runner (environment and agent), or raises."""
    bindings = list(FLAGS.gin_bindings)
    if FLAGS.seed is not None:
        bindings.append(f"Runner.seed = {FLAGS.seed}")
    try:
        config.parse(FLAGS.gin_file, bindings)
        runner = Runner(base_dir)
    except (ValueError, ImportError, TypeError, gym.error.Error) as error:
        raise UsageError(" ".join(str(error).split())) from error
    unused = config.unused_bindings()
    for binding in unused:
        logging.warning("Binding %s was never used by any part this config builds.", binding)
    if unused and FLAGS.strict:
        raise UsageError(
            f"--strict: these bindings were never used: {', '.join(unused)}. Check their "
            "spelling and scope, or remove them."
        )
    return runner


def train(base_dir: str) -> None:
    runner = build_runner(base_dir)
    if FLAGS.dry_run:
        print(gin.operative_config_str())
        return
    os.makedirs(base_dir, exist_ok=True)
    logging.info("Run folder: %s (tensorboard --logdir %s)", base_dir, base_dir)
    with _exclusive(base_dir):
        _train_locked(runner, base_dir)
    logging.info("Done: %s", base_dir)


def _train_locked(runner: Runner, base_dir: str) -> None:
    try:
        resumed_step = runner.restore()
        metadata = config.run_metadata(runner.seed)
        _record_invocation(base_dir, metadata, resumed_step)
        texts = {
            "config": gin.markdown(gin.operative_config_str()),
            "metadata": "\n\n".join(f"{key}: {value}" for key, value in metadata.items()),
        }
        try:
            runner.run(texts, config.operative_hyperparameters())
        finally:  # parts first called during training now appear in the operative config
            _write_atomically(os.path.join(base_dir, "config.gin"), gin.operative_config_str())
    except (NonFiniteError, CheckpointError) as error:
        raise UsageError(str(error)) from error


def _record_invocation(base_dir: str, metadata: dict, resumed_step: int | None) -> None:
    """config.gin and metadata.json describe the latest start; earlier ones are kept.

    A start whose config changed (say, a larger Runner.num_steps to train longer) keeps the
    previous config as config.before-start-<N>.gin; metadata.json lists every start.
    """
    config_path = os.path.join(base_dir, "config.gin")
    metadata_path = os.path.join(base_dir, "metadata.json")
    operative = gin.operative_config_str()
    starts = []
    if os.path.exists(metadata_path):
        with open(metadata_path) as f:
            starts = json.load(f).get("starts", [])
    if os.path.exists(config_path):
        with open(config_path) as f:
            previous = f.read()
        if previous != operative:
            kept = os.path.join(base_dir, f"config.before-start-{len(starts) + 1}.gin")
            _write_atomically(kept, previous)
    starts.append({**metadata, "resumed_from_step": resumed_step})
    _write_atomically(metadata_path, json.dumps({"starts": starts}, indent=2))
    _write_atomically(config_path, operative)


def _write_atomically(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        train(FLAGS.base_dir or _default_base_dir())
    except UsageError as error:
        print(f"experiments.run: error: {error}", file=sys.stderr)
        sys.exit(1)


def run_main() -> None:
    app.run(main)


if __name__ == "__main__":
    run_main()
