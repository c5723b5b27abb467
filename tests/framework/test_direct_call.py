import numpy as np
import pytest
import tensorflow as tf

from framework.direct_call import DirectCall


def _counting_function(jit_compile: bool):
    """A traced function that reads and writes a variable, takes a nested batch of two dtypes
    and returns a nested structure: what a learner's call does."""
    total = tf.Variable(tf.zeros([3]))
    steps = tf.Variable(0, dtype=tf.int64)
    spec = {"x": tf.TensorSpec([None, 3], tf.float32), "n": tf.TensorSpec([], tf.int64)}

    @tf.function(jit_compile=jit_compile, input_signature=[spec])
    def step(batch):
        total.assign_add(tf.reduce_sum(batch["x"], axis=0))
        steps.assign_add(batch["n"])
        return {"scaled": batch["x"] * total, "steps": steps.read_value()}, tf.reduce_sum(total)

    return step.get_concrete_function(), total, steps


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_direct_call_computes_what_the_ordinary_call_computes(jit_compile):
    rng = np.random.default_rng(0)
    batches = [
        {"x": rng.normal(size=(rows, 3)).astype(np.float32), "n": np.int64(rows)}
        for rows in (2, 5, 2)
    ]
    ordinary, ordinary_total, _ = _counting_function(jit_compile)
    direct_function, direct_total, direct_steps = _counting_function(jit_compile)
    direct = DirectCall(direct_function)
    for batch in batches:
        expected = ordinary(batch)
        got = direct(batch)
        assert tf.nest.map_structure(lambda t: t.dtype, got) == tf.nest.map_structure(
            lambda t: t.dtype, expected
        )
        for want, have in zip(tf.nest.flatten(expected), tf.nest.flatten(got), strict=True):
            np.testing.assert_allclose(have.numpy(), want.numpy(), rtol=1e-6)
    # The variables moved once per call, in both.
    np.testing.assert_allclose(direct_total.numpy(), ordinary_total.numpy(), rtol=1e-6)
    assert direct_steps.numpy() == 9


def test_a_direct_call_converts_numpy_to_the_signature_dtype():
    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def double(x):
        return 2.0 * x

    direct = DirectCall(double.get_concrete_function())
    result = direct(np.array([1, 2], dtype=np.int64))  # converted, as the ordinary call would
    assert result.dtype == tf.float32
    np.testing.assert_array_equal(result.numpy(), [2.0, 4.0])


@pytest.mark.parametrize(
    "outputs",
    [
        lambda x: (x, 2.0 * x, tf.reduce_sum(x)),  # flat: returned as a tuple without packing
        lambda x: [x, (2.0 * x,)],
        lambda x: x,
    ],
)
def test_a_direct_call_returns_the_structure_of_the_ordinary_call(outputs):
    function = tf.function(outputs, input_signature=[tf.TensorSpec([2], tf.float32)])
    concrete = function.get_concrete_function()
    x = np.array([1.0, -3.0], np.float32)
    expected, got = concrete(x), DirectCall(concrete)(x)
    assert type(got) is type(expected)
    tf.nest.assert_same_structure(got, expected)
    for want, have in zip(tf.nest.flatten(expected), tf.nest.flatten(got), strict=True):
        np.testing.assert_array_equal(have.numpy(), want.numpy())


def test_a_direct_call_refuses_non_tensor_arguments():
    @tf.function
    def scale(x, factor):
        return x * factor

    function = scale.get_concrete_function(tf.TensorSpec([2], tf.float32), 3.0)
    with pytest.raises(ValueError, match="tensor arguments only"):
        DirectCall(function)
