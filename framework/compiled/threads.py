"""The settings that decide how many threads TensorFlow's kernels and XLA's programs use, which a
speed figure needs beside it to be reproduced (each run's metadata.json holds them)."""

import os

import tensorflow as tf

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
