"""What the checkpoint store writes of a state, by key path, for tests that a state round-trips
bitwise (drivers, agents)."""

import os

import numpy as np
import tensorflow as tf

from framework.storage.checkpointing import CheckpointStore


def saved_contents(state: dict, folder) -> dict:
    """All the checkpoint store writes of `state`: each variable's value, each array, each JSON
    value, by key path."""
    store = CheckpointStore(str(folder), str(folder / "damaged"))
    store.save(1, state)
    prefix = os.path.join(str(folder), "ckpt-1")
    reader = tf.train.load_checkpoint(prefix)
    saved = {
        key: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key != "_CHECKPOINTABLE_OBJECT_GRAPH"
    }
    _, loaded = store.restore_latest(state)  # arrays and JSON values, as the store reads them
    saved.update((path, value) for path, value in _leaves(loaded) if not _restored_in_place(value))
    return saved


def _restored_in_place(value) -> bool:
    """A trackable, or a list of them (DDPG's critics): the variables above hold their values."""
    values = value if isinstance(value, list) else [value]
    return any(isinstance(x, tf.__internal__.tracking.Trackable) for x in values)


def _leaves(node, path: str = ""):
    """(key path, leaf) of a nested state; a list of plain values is one leaf."""
    if isinstance(node, dict):
        children = node.items()
    elif isinstance(node, list) and any(isinstance(x, dict | list | np.ndarray) for x in node):
        children = enumerate(node)
    else:
        yield path, node
        return
    for key, child in children:
        yield from _leaves(child, f"{path}/{key}")


def assert_same_contents(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
