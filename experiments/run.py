"""Train and evaluate an agent from gin configs: `python -m experiments.run --gin_file=...`.

With no flags it trains the default config (DQN on CartPole) into a fresh folder under runs/.
Starting it again on the same --base_dir resumes from the newest complete checkpoint.
"""

import contextlib
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

import gin  # noqa: E402
from absl import app, flags  # noqa: E402

import experiments  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_multi_string(
    "gin_file", [experiments.DEFAULT_GIN_FILE], "Gin config file(s); later ones win."
)
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. 'Runner.num_steps = 1000'.")
flags.DEFINE_string("base_dir", None, "The run's folder (default: a fresh one under runs/).")
flags.DEFINE_integer("seed", None, "Seed for everything; overrides Runner.seed.")
flags.DEFINE_bool("dry_run", False, "Parse, build env and agent, print the config, and exit.")
flags.DEFINE_bool("strict", False, "Fail, instead of warning, on bindings that nothing used.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        runner = experiments.build(
            FLAGS.gin_file, FLAGS.gin_bindings, FLAGS.base_dir, FLAGS.seed, FLAGS.strict
        )
        if FLAGS.dry_run:
            print(gin.operative_config_str())
            return
        experiments.run(runner)
    except experiments.RunError as error:
        print(f"experiments.run: error: {error}", file=sys.stderr)
        sys.exit(1)


def run_main() -> None:
    app.run(main)


if __name__ == "__main__":
    run_main()
