"""The op census counts what a traced step computes, at its shapes (numbers from the shapes),
and the hardware floor runs each counted op as the op it is."""

import numpy as np
import pytest
import tensorflow as tf

from experiments import op_census, op_timing
from framework.compiled import threads


def _dense_step(batch: int, inputs: int, hidden: int):
    """A traced gradient step of a two-layer network (no biases): loss = sum(relu(x W1) W2)."""
    w1 = tf.Variable(tf.ones([inputs, hidden]))
    w2 = tf.Variable(tf.ones([hidden, 1]))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.relu(x @ w1) @ w2)
        for variable, grad in zip([w1, w2], tape.gradient(loss, [w1, w2]), strict=True):
            variable.assign_sub(0.1 * grad)
        return loss

    return step.get_concrete_function(tf.TensorSpec([batch, inputs]))


def test_a_dense_step_counts_two_forward_products_and_three_gradient_products():
    b, i, h = 8, 3, 5
    counted = op_census.census(_dense_step(b, i, h)).per_step()
    by_shape = {(op.shapes, op.attributes): n for op, n in counted.items()}
    false = (("transpose_a", False), ("transpose_b", False))
    assert by_shape[(((b, i), (i, h)), false)] == 1  # x W1
    assert by_shape[(((b, h), (h, 1)), false)] == 1  # h W2
    # dW2 = h^T g, dH = g W2^T, dW1 = x^T dH; no dX: nothing needs the input's gradient.
    assert by_shape[(((b, h), (b, 1)), (("transpose_a", True), ("transpose_b", False)))] == 1
    assert by_shape[(((b, 1), (h, 1)), (("transpose_a", False), ("transpose_b", True)))] == 1
    assert by_shape[(((b, i), (b, h)), (("transpose_a", True), ("transpose_b", False)))] == 1
    assert len(counted) == 5
    census = op_census.census(_dense_step(b, i, h))
    assert census.flops() == 2 * (b * i * h + b * h + b * h + b * h + b * i * h)


def test_a_global_norms_products_with_ones_are_left_out():
    """Traced for XLA, a global norm (twice: TensorFlow numbers the second scope
    `global_norm_1`) sums by matrix-vector products; the census counts the step's two."""
    from framework.parts.gradient_processors import global_norm

    w = tf.Variable(tf.ones([3, 5]))

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(x @ w)
        grad = tape.gradient(loss, w)
        w.assign_sub(grad / global_norm([grad]) + global_norm([grad, w]))
        return loss

    traced = step.get_concrete_function(tf.TensorSpec([4, 3]))
    products = [op for op in traced.graph.get_operations() if op.type == "MatMul"]
    assert len(products) == 2 + 3  # the norms' three tensors summed by products
    counted = op_census.census(traced).per_step()
    assert sorted(op.shapes for op in counted) == [((4, 3), (3, 5)), ((4, 3), (4, 5))]


def test_convolution_flops_are_the_same_for_the_forward_and_both_gradients():
    image = tf.Variable(tf.ones([2, 84, 84, 4]))
    kernel = tf.Variable(tf.ones([8, 8, 4, 32]))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.conv2d(image, kernel, strides=4, padding="VALID"))
        grads = tape.gradient(loss, [image, kernel])
        image.assign_sub(grads[0])
        kernel.assign_sub(grads[1])
        return loss

    counted = op_census.census(step.get_concrete_function()).per_step()
    assert sorted(op.type for op in counted) == [
        "Conv2D",
        "Conv2DBackpropFilter",
        "Conv2DBackpropInput",
    ]
    forward = 2 * 2 * 20 * 20 * 32 * (8 * 8 * 4)  # 20 = (84 - 8) / 4 + 1 positions a side
    assert {op.flops for op in counted} == {forward}


def test_a_group_that_runs_every_second_step_weighs_half():
    w = tf.Variable(tf.ones([4, 4]))

    @tf.function
    def step(x, due):
        with tf.name_scope("critic"):
            loss = tf.reduce_sum(x @ w)
        with tf.name_scope("actor"):
            extra = tf.cond(due, lambda: tf.reduce_sum(x @ w @ w), lambda: 0.0)
        return loss + extra

    census = op_census.census(step.get_concrete_function(tf.TensorSpec([2, 4]), tf.constant(True)))
    product = 2 * 2 * 4 * 4
    assert census.flops() == 3 * product
    assert census.flops({"actor": 0.5}) == 2 * product


def test_an_op_outside_the_step_loop_counts_once_a_call():
    w = tf.Variable(tf.ones([4, 4]))

    @tf.function
    def call(x):  # a value pass over the rollout, then 5 steps
        values = tf.reduce_sum(x @ w)
        return tf.while_loop(
            lambda i, t: i < 5, lambda i, t: (i + 1, t + tf.reduce_sum(x @ w)), (0, values)
        )

    census = op_census.census(call.get_concrete_function(tf.TensorSpec([2, 4])))
    product = 2 * 2 * 4 * 4
    assert census.flops(steps_per_call=5) == pytest.approx(product + product / 5)


@pytest.mark.parametrize(
    "op_type", ["MatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"]
)
def test_the_floor_runs_each_counted_op_as_the_op_the_step_ran(op_type):
    image = tf.Variable(np.random.default_rng(0).normal(size=[2, 12, 12, 3]).astype(np.float32))
    kernel = tf.Variable(np.random.default_rng(1).normal(size=[3, 3, 3, 4]).astype(np.float32))
    matrix = tf.Variable(np.random.default_rng(2).normal(size=[3, 4]).astype(np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            features = tf.nn.conv2d(image, kernel, strides=2, padding="SAME")
            loss = tf.reduce_sum(tf.reduce_mean(features, axis=[1, 2]) @ tf.transpose(matrix))
        grads = tape.gradient(loss, [image, kernel, matrix])
        for variable, grad in zip([image, kernel, matrix], grads, strict=True):
            variable.assign_sub(grad)
        return loss

    traced_ops = [
        o for o in step.get_concrete_function().graph.get_operations() if o.type == op_type
    ]
    assert traced_ops
    for traced in traced_ops:
        apply, shapes = op_timing._runnable(op_census._op_of(traced))
        rng = np.random.default_rng(3)
        operands = [tf.constant(rng.normal(size=shape), tf.float32) for shape in shapes]
        names = {
            "MatMul": ["a", "b"],
            "Conv2D": ["input", "filter"],
            "Conv2DBackpropInput": ["filter", "out_backprop"],
            "Conv2DBackpropFilter": ["input", "out_backprop"],
        }[op_type]
        arguments = dict(zip(names, operands, strict=True))
        if op_type.startswith("Conv2DBackprop"):
            sizes = "filter_sizes" if op_type == "Conv2DBackpropFilter" else "input_sizes"
            arguments[sizes] = tf.constant(traced.outputs[0].shape.as_list())
        for name in op_census._ATTRIBUTES[op_type]:
            arguments[name] = traced.get_attr(name)
        expected = getattr(tf.raw_ops, op_type)(**arguments)
        np.testing.assert_allclose(apply(*operands).numpy(), expected.numpy(), rtol=1e-5)


def test_an_op_timed_alone_reports_its_flops_over_its_seconds():
    op = op_census.Op(
        "MatMul", ((64, 64), (64, 64)), (("transpose_a", False), ("transpose_b", False))
    )
    timing = op_timing.time_op(op, calls=3)
    assert timing.xla_seconds > 0 and timing.kernel_seconds > 0
    floor = op_timing.Floor({op: 3}, {op: timing})
    assert floor.seconds == pytest.approx(3 * timing.best_seconds)
    assert floor.rate == pytest.approx(op.flops / timing.best_seconds / 1e9)


def test_thread_settings_name_the_counts_and_the_variables(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    found = threads.settings()
    assert found["OMP_NUM_THREADS"] == "1" and found["XLA_FLAGS"] == "unset"
    assert int(found["cpu_count"]) >= 1
    assert found["tf_intra_op_threads"].split()[0].isdigit()


def test_a_bfloat16_torso_s_convolutions_are_counted_and_timed_in_bfloat16():
    # As Keras's mixed_bfloat16 policy runs a torso: bfloat16 convolutions, a float32 head.
    image = tf.Variable(tf.ones([2, 12, 12, 3], tf.bfloat16))
    kernel = tf.Variable(tf.ones([3, 3, 3, 4], tf.bfloat16))
    head = tf.Variable(tf.ones([4, 2]))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            features = tf.nn.conv2d(image, kernel, strides=2, padding="SAME")
            pooled = tf.cast(tf.reduce_mean(features, axis=[1, 2]), tf.float32)
            loss = tf.reduce_sum(pooled @ head)
        grads = tape.gradient(loss, [kernel, head])
        kernel.assign_sub(grads[0])
        head.assign_sub(grads[1])
        return loss

    counted = op_census.census(step.get_concrete_function()).per_step()
    assert {(op.type, op.dtype) for op in counted} == {
        ("Conv2D", "bfloat16"),
        ("Conv2DBackpropFilter", "bfloat16"),
        ("MatMul", "float32"),
    }
    convolution = next(op for op in counted if op.type == "Conv2D")
    assert "Conv2D bfloat16 [2, 12, 12, 3]" in convolution.describe()
    _, shapes = op_timing._runnable(convolution)
    assert {v.dtype for v in op_timing._operands(convolution, shapes, seed=0)} == {tf.bfloat16}
    timing = op_timing.time_op(convolution, calls=2)
    assert timing.xla_seconds > 0 and timing.kernel_seconds > 0
