"""framework/compiled/batch_packing.py: a batch crosses into a compiled call as one array."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.compiled.batch_packing import PackedBatch
from framework.learner import Learner, UpdateGroup

SPEC = {  # DQN's shapes: [steps, batch, ...], the steps varying
    "observation": tf.TensorSpec([None, 3, 2, 2], tf.float32),
    "action": tf.TensorSpec([None, 3], tf.int64),
    "reward": tf.TensorSpec([None, 3], tf.float32),
    "count": tf.TensorSpec([None, 3, 2], tf.int32),
}


def _batch(steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "observation": rng.normal(size=(steps, 3, 2, 2)).astype(np.float32),
        "action": rng.integers(-(2**24) + 1, 2**24, size=(steps, 3)),  # the extremes, exact
        "reward": rng.normal(size=(steps, 3)).astype(np.float32),
        "count": rng.integers(0, 100, size=(steps, 3, 2)).astype(np.int32),
    }


@pytest.mark.parametrize("steps", [1, 4])
def test_unpack_gives_back_every_array_exactly_in_its_shape_and_type(steps):
    packing = PackedBatch(SPEC)
    batch = _batch(steps)
    packed = packing.pack(batch)
    assert packed.dtype == np.float32 and packed.shape == (steps, 3, 4 + 1 + 1 + 2)
    unpacked = tf.function(packing.unpack, input_signature=[packing.spec])(packed)
    for name, array in batch.items():
        assert unpacked[name].dtype == SPEC[name].dtype
        np.testing.assert_array_equal(unpacked[name].numpy(), array)


def test_integers_that_float32_would_round_are_refused():
    batch = _batch(1)
    batch["action"][0, 1] = 2**24 + 1
    with pytest.raises(ValueError, match=r"'action'.*2\*\*24"):
        PackedBatch(SPEC).pack(batch)


def test_a_field_of_the_wrong_shape_is_refused_not_scrambled():
    batch = _batch(4)
    batch["count"] = batch["count"].transpose(1, 0, 2)  # [3, 4, 2]: same size, other layout
    with pytest.raises(ValueError, match=r"'count' has shape \(3, 4, 2\); expected \(4, 3, 2\)"):
        PackedBatch(SPEC).pack(batch)


def test_only_numeric_batches_with_shared_leading_axes_are_packed():
    assert PackedBatch.supports(SPEC)
    frames = {**SPEC, "observation": tf.TensorSpec([None, 3, 84, 84, 4], tf.uint8)}
    assert not PackedBatch.supports(frames)  # 4x the bytes as float32: passed as they are
    assert not PackedBatch.supports({"a": tf.TensorSpec([None, 3]), "b": tf.TensorSpec([2, 3])})
    unknown_width = {"a": tf.TensorSpec([None, 3, None]), "b": tf.TensorSpec([None, 3])}
    assert not PackedBatch.supports(unknown_width)


def _weighted_squared_error(w):
    def loss(batch):
        error = tf.squeeze(batch["x"] @ w, -1) - batch["y"]
        return tf.reduce_mean(tf.cast(batch["weight"], tf.float32) * error**2), {}

    return loss


def test_a_packed_learner_takes_exactly_the_steps_of_an_unpacked_one():
    rng = np.random.default_rng(1)
    batch = {
        "x": rng.normal(size=(3, 4, 2)).astype(np.float32),
        "y": rng.normal(size=(3, 4)).astype(np.float32),
        "weight": rng.integers(1, 4, size=(3, 4)),
    }
    spec = {
        "x": tf.TensorSpec([None, 4, 2], tf.float32),
        "y": tf.TensorSpec([None, 4], tf.float32),
        "weight": tf.TensorSpec([None, 4], tf.int64),
    }
    assert PackedBatch.supports(spec)
    weights = {}
    for name, batch_spec in [("packed", spec), ("as they are", None)]:
        w = tf.Variable([[0.5], [-0.25]])
        group = UpdateGroup(_weighted_squared_error(w), [w], keras.optimizers.SGD(0.1))
        Learner(group, batch_spec=batch_spec).run(batch)
        weights[name] = w.numpy()
    np.testing.assert_array_equal(weights["packed"], weights["as they are"])
    assert not np.allclose(weights["packed"], [[0.5], [-0.25]])  # three steps were taken
