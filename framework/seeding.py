"""One seed for everything, and the state of every random generator for checkpoints."""

import random

import keras
import numpy as np
import tensorflow as tf


def seed_everything(seed: int) -> None:
    """Seeds Python, numpy and TF, and makes TF ops deterministic (same seed, same numbers)."""
    keras.utils.set_random_seed(seed)
    tf.random.set_global_generator(tf.random.Generator.from_seed(seed))
    tf.config.experimental.enable_op_determinism()


def derived_seeds(seed: int, count: int) -> list[int]:
    """`count` independent seeds from one, so that no two generators share a stream.

    Seeding the agent, the environment and its action space all with `seed` itself would give
    each the very same PCG64 stream: the agent's first draws would equal the environment's.
    """
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(count)]


def global_rng_states() -> dict:
    """Python's and numpy's global generator states, as JSON-able values."""
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), position, has_gauss, cached],
    }


def set_global_rng_states(states: dict) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
