"""What this machine reaches on a learner's own arithmetic, beside what the learner attains.

A learner compared only with a hand-written copy of itself (`learner_floor.py`) cannot see what
both leave on the table; this floor can: the time the step's matrix products and convolutions
(`op_census.py`) take on this CPU timed alone, with nothing around them (no elementwise work,
optimizer or call overhead; `op_timing.py`), so the learner's attained GFLOP/s over the floor's
is the share of the machine it uses. Thread counts are a process's: `--threads=1,2` measures
each in a child process (its `tf_threads` bindings, over the config's own), as TensorFlow fixes
them at start.

  python -m experiments.hardware_floor --gin_file=gin_configs/sac/pendulum.gin --threads=1,2

trains the config `--num_steps` environment steps, then prints, at each thread count, its
learner's seconds per gradient step in the loop (its first call, which traces and compiles, left
out), the step's FLOPs, the floor op by op, and the learner's attained GFLOP/s over the floor's.
"""

import subprocess
import sys

from absl import app, flags

from experiments import quiet

quiet.import_tensorflow()

from experiments.learner_report import report  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "gin_file", "gin_configs/sac/pendulum.gin", "The config whose learner to measure."
)
flags.DEFINE_multi_string("gin_bindings", [], "Extra bindings.")
flags.DEFINE_integer(
    "num_steps", 3000, "Environment steps trained before measuring.", lower_bound=1
)
flags.DEFINE_list(
    "threads", [], "Thread counts to measure at, each in its own process (empty: this one's)."
)
flags.DEFINE_integer("intra_op_threads", None, "Set by --threads for the child processes.")
flags.DEFINE_integer("calls", 20, "Timed calls per op and form.", lower_bound=2)


def main(argv: list[str]) -> None:
    del argv
    bindings = list(FLAGS.gin_bindings)
    if FLAGS.intra_op_threads is not None:  # over the config's own `tf_threads`, if it has one
        count = FLAGS.intra_op_threads
        bindings += [f"tf_threads.intra_op = {count}", f"tf_threads.inter_op = {count}"]
    if not FLAGS.threads or FLAGS.intra_op_threads is not None:
        try:
            text = report(FLAGS.gin_file, bindings, FLAGS.num_steps, FLAGS.calls)
        except ValueError as error:  # a config that made no gradient step to measure
            sys.exit(f"hardware_floor: {error}")
        print(text, flush=True)
        return
    for count in FLAGS.threads:  # TensorFlow fixes its threads at start: a process each
        command = [
            sys.executable,
            "-m",
            "experiments.hardware_floor",
            f"--intra_op_threads={count}",
        ]
        command += [f"--gin_file={FLAGS.gin_file}", f"--num_steps={FLAGS.num_steps}"]
        command += [f"--calls={FLAGS.calls}", *(f"--gin_bindings={b}" for b in FLAGS.gin_bindings)]
        if subprocess.run(command).returncode:  # it said why
            sys.exit(1)


if __name__ == "__main__":
    app.run(main)
