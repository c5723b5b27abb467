"""Tests for framework/parts/wide_dense.py: the same layer as Keras's Dense, gradients included,
whatever form its input gradient takes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.parts.wide_dense import WideInputDense


def _pair(units: int, inputs: int, dtype: str = "float32"):
    plain = keras.layers.Dense(units, activation="relu", dtype=dtype)
    wide = WideInputDense(units, activation="relu", dtype=dtype)
    plain.build((None, inputs))
    wide.build((None, inputs))
    wide.set_weights(plain.get_weights())
    return plain, wide


def _outputs_and_gradients(layer, features: tf.Tensor):
    with tf.GradientTape() as tape:
        tape.watch(features)
        outputs = layer(features)
        loss = tf.reduce_sum(
            tf.cast(outputs, tf.float32) * tf.range(outputs.shape[-1], dtype=tf.float32)
        )
    return outputs, tape.gradient(loss, [features, *layer.trainable_variables])


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(("batch", "inputs", "units"), [(32, 2304, 512), (5, 7, 3)])
def test_outputs_and_gradients_equal_keras_dense(batch, inputs, units, compiled):
    """The same numbers as Dense's to float32's rounding at any shape, in a tf.function as the
    learner runs it. At the Nature CNN's shape (DQN on Pong) they are equal bit for bit, so the
    learner takes the same steps as before; that holds for this machine's kernels (oneDNN on
    AVX-512), where both forms sum each product in the same order."""
    plain, wide = _pair(units, inputs)
    features = tf.constant(np.random.default_rng(0).normal(size=(batch, inputs)), tf.float32)
    run = tf.function(_outputs_and_gradients) if compiled else _outputs_and_gradients
    (expected, expected_gradients), (actual, actual_gradients) = (
        run(layer, features) for layer in (plain, wide)
    )
    assert len(actual_gradients) == 3  # the input's, the kernel's, the bias's
    pairs = [(actual, expected), *zip(actual_gradients, expected_gradients, strict=True)]
    for got, want in pairs:
        if batch == 32:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_inputs_of_more_than_two_axes_are_refused():
    """Its gradient is written for [batch, features]; Dense's own handles more axes."""
    with pytest.raises(ValueError, match=r"\[batch, features\] inputs; got shape \(2, 4, 5\)"):
        WideInputDense(3)(tf.zeros((2, 4, 5)))


def test_bfloat16_computes_in_bfloat16_and_keeps_float32_weights():
    plain, wide = _pair(4, 6, dtype="mixed_bfloat16")
    features = tf.constant(np.random.default_rng(1).normal(size=(3, 6)), tf.float32)
    (expected, expected_gradients), (actual, actual_gradients) = (
        _outputs_and_gradients(layer, features) for layer in (plain, wide)
    )
    assert actual.dtype == tf.bfloat16 and all(v.dtype == "float32" for v in wide.weights)
    np.testing.assert_array_equal(tf.cast(actual, tf.float32), tf.cast(expected, tf.float32))
    for got, want in zip(actual_gradients, expected_gradients, strict=True):
        np.testing.assert_allclose(
            tf.cast(got, tf.float32), tf.cast(want, tf.float32), rtol=1e-2, atol=1e-2
        )


def test_a_checkpoint_with_keras_dense_restores_into_it(tmp_path):
    """Pong checkpoints written before the Nature CNN's hidden layer took this form restore
    into it: a model's checkpoint keys its layers by position and their weights by name."""

    def model(dense_class):
        inputs = keras.Input((6,))
        outputs = keras.layers.Dense(2)(dense_class(4)(keras.layers.Dense(5)(inputs)))
        return keras.Model(inputs, outputs)

    before, after = model(keras.layers.Dense), model(WideInputDense)
    path = tf.train.Checkpoint(model=before).write(str(tmp_path / "checkpoint"))
    tf.train.Checkpoint(model=after).read(path).assert_consumed()
    for restored, saved in zip(after.get_weights(), before.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, saved)
