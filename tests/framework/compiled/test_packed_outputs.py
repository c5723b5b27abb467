"""What a learner call returns: three tensors, sliced into its metrics and published weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.compiled.packed_outputs import FlatLayout, PackedMetrics
from framework.learner import Learner, UpdateGroup


def test_a_flattened_mapping_splits_back_into_its_values_and_shapes():
    tensors = {
        "loss": tf.constant(2.5),
        "per_action": tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
        "count": tf.constant(7, tf.int64),
    }
    layout, vector = FlatLayout.flatten(tensors)
    assert vector.shape == [1 + 6 + 1]
    loss, per_action, count = layout.split(vector.numpy())
    assert loss.shape == () and float(loss) == 2.5
    np.testing.assert_array_equal(per_action, tensors["per_action"].numpy())
    assert int(count) == 7


class _CountingVector:
    """Stands for the call's output tensor; counts its crossings into numpy."""

    def __init__(self, values):
        self.values, self.reads = np.asarray(values, np.float32), 0

    def numpy(self):
        self.reads += 1
        return self.values


def test_metrics_cross_into_python_once_and_only_when_read():
    vector = _CountingVector([0.5, 3.0])
    metrics = PackedMetrics(vector, FlatLayout(["loss", "grad_norm"], [(), ()]))
    merged = metrics.with_values({"epsilon": 0.1})
    assert list(merged) == ["loss", "grad_norm", "epsilon"] and len(merged) == 3
    assert merged["epsilon"] == 0.1 and vector.reads == 0  # added values need no read
    assert float(merged["grad_norm"]) == 3.0 and float(merged["loss"]) == 0.5
    assert vector.reads == 1
    with pytest.raises(KeyError):
        merged["missing"]


def test_a_learner_call_returns_three_tensors_however_many_metrics_and_weights():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])

    def loss_fn(batch):
        out = model(batch["x"])
        extras = {f"metric_{i}": tf.reduce_mean(out) * i for i in range(6)}
        return tf.reduce_mean(tf.square(out)), extras

    learner = Learner(
        UpdateGroup(loss_fn, model.trainable_variables, keras.optimizers.SGD(0.1)),
        batch_spec={"x": tf.TensorSpec([None, 5, 3], tf.float32)},
        publish=model.weights,
    )
    batch = {"x": np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)}
    metrics, _ = learner.run(batch)
    (traced,) = learner.calls.traced
    outputs = traced.function.get_concrete_function().structured_outputs
    assert len(tf.nest.flatten(outputs)) == 3  # metrics, health, weights
    assert len(metrics) == 2 + 6 + 1  # loss, grad_norm, the extras, learning_rate
    np.testing.assert_allclose(metrics["metric_3"], 3 * metrics["metric_1"], rtol=1e-6)
    for published, variable in zip(learner.published, model.weights, strict=True):
        np.testing.assert_array_equal(published, variable.numpy())  # after the update


def test_publish_refuses_variables_that_float32_would_not_carry_exactly():
    w = tf.Variable(1.0)
    group = UpdateGroup(lambda b: (w * tf.reduce_sum(b["x"]), {}), [w], keras.optimizers.SGD())
    with pytest.raises(ValueError, match="float32 variables only"):
        Learner(group, publish=[tf.Variable(1, dtype=tf.int64)])
