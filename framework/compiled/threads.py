"""The settings that decide how many threads TensorFlow's kernels and XLA's programs use, which a
speed figure needs beside it to be reproduced (each run's metadata.json holds them), and the
config's own say over TensorFlow's two thread pools (`tf_threads`)."""

import os

import gin
import tensorflow as tf
from absl import logging

# Environment variables read by TensorFlow, oneDNN, OpenMP or XLA at start.
_VARIABLES = ("OMP_NUM_THREADS", "TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS", "TF_XLA_FLAGS")


def settings() -> dict[str, str]:
    """Intra- and inter-op thread counts (0: TensorFlow's choice, one per core), the cores
    this process may use, and the variables above (`unset` where not set)."""
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    found = {
        "cpu_count": str(len(os.sched_getaffinity(0))),
        "tf_intra_op_threads": str(intra) if intra else "0 (TensorFlow's choice)",
        "tf_inter_op_threads": str(inter) if inter else "0 (TensorFlow's choice)",
    }
    return found | {name: os.environ.get(name, "unset") for name in _VARIABLES}


@gin.configurable
def tf_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Sizes TensorFlow's thread pools in this process, before its first op: `intra_op` threads
    split one kernel, `inter_op` run independent ops at once; 0 leaves TensorFlow's choice (one
    per core).

    A small network's step does not gain from two cores: MinAtar DQN's learner takes 1.35 ms on
    one thread against 1.5-1.7 ms on two, and two such runs side by side 1.4 ms each on one
    thread against 2.6 ms on TensorFlow's choice (docs/speed.md). A config meant to run several
    at once (a sweep's seeds) says 1. The count also orders some of TensorFlow's sums, so runs
    with different counts agree to the last bits only. A process that has run ops keeps its
    pools: then a warning says so, and the run goes on (a speed setting, not the algorithm's)."""
    threading = tf.config.threading
    for name, wanted in (("intra_op", intra_op), ("inter_op", inter_op)):
        if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 0:
            raise ValueError(
                f"tf_threads.{name} = {wanted!r}: give a whole number of threads >= 0 (0 "
                "leaves TensorFlow's choice, one per core)."
            )
        current = getattr(threading, f"get_{name}_parallelism_threads")()
        if wanted in (0, current):
            continue
        try:
            getattr(threading, f"set_{name}_parallelism_threads")(wanted)
        except RuntimeError:  # the pools exist once the process ran its first op
            logging.warning(
                "tf_threads.%s = %d is not applied: TensorFlow already runs in this process "
                "with %s %s threads, and its pools cannot be resized once it has run an op "
                "(another run trained in this process first). The run goes on with them "
                "(metadata.json records the counts); start it in a process of its own "
                "(experiments.run, a sweep) for the config's.",
                name,
                wanted,
                current or "its own choice of",
                name,
            )
