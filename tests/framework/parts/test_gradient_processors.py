"""Tests for framework/gradient_processors.py: clipping, accumulation and chaining."""

import numpy as np
import pytest
import tensorflow as tf

from framework.parts.gradient_processors import (
    Accumulate,
    Chain,
    ClipByGlobalNorm,
    ClipByValue,
    Identity,
    global_norm,
)


def _variables():
    return [tf.Variable([0.0, 0.0]), tf.Variable([0.0])]


def _grads(first, second):
    return [tf.constant(first, tf.float32), tf.constant(second, tf.float32)]


def _numpy(grads):
    return [g.numpy() for g in grads]


@pytest.mark.parametrize("jit_compile", [False, True])
def test_global_norm_is_tensorflows_over_tensors_of_every_rank(jit_compile):
    rng = np.random.default_rng(0)
    shapes = [(), (7,), (4, 256), (3, 3, 4, 8)]
    tensors = [tf.constant(rng.normal(size=shape), tf.float32) for shape in shapes]
    norm = tf.function(global_norm, jit_compile=jit_compile)(tensors)
    expected = np.sqrt(sum(np.sum(np.square(t.numpy(), dtype=np.float64)) for t in tensors))
    np.testing.assert_allclose(norm.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(norm.numpy(), tf.linalg.global_norm(tensors).numpy(), rtol=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e20])  # 1e20: its square overflows
def test_global_norm_is_not_finite_where_an_element_or_its_square_is_not(bad):
    grad = np.ones((4, 3), np.float32)
    grad[2, 1] = bad
    norm = global_norm([tf.constant([1.0, 2.0]), tf.constant(grad)])
    assert not np.isfinite(norm.numpy())


def test_identity_passes_through_and_applies():
    grads, apply_now, metrics = Identity()(_grads([3.0, 4.0], [12.0]), _variables())
    np.testing.assert_array_equal(grads[0].numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(grads[1].numpy(), [12.0])
    assert bool(apply_now)
    assert metrics == {}


def test_clip_by_global_norm_rescales_above_max_norm():
    # Global norm of [3, 4] and [12] = sqrt(9 + 16 + 144) = 13; max_norm 6.5 scales by 1/2.
    grads, apply_now, metrics = ClipByGlobalNorm(max_norm=6.5)(
        _grads([3.0, 4.0], [12.0]), _variables()
    )
    np.testing.assert_allclose(grads[0].numpy(), [1.5, 2.0], rtol=1e-6)
    np.testing.assert_allclose(grads[1].numpy(), [6.0], rtol=1e-6)
    assert bool(apply_now)
    np.testing.assert_allclose(metrics["clip_global_norm/norm_after"], 6.5, rtol=1e-6)
    assert set(metrics) == {"clip_global_norm/norm_after"}  # the norm before is grad_norm


def test_clip_by_global_norm_leaves_small_gradients():
    grads, _, metrics = ClipByGlobalNorm(max_norm=20.0)(_grads([3.0, 4.0], [12.0]), _variables())
    np.testing.assert_allclose(grads[0].numpy(), [3.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(grads[1].numpy(), [12.0], rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_global_norm/norm_after"], 13.0, rtol=1e-6)


def test_clip_by_value_clips_each_element():
    grads, apply_now, metrics = ClipByValue(clip_value=1.0)(
        _grads([3.0, -0.5], [-2.0]), _variables()
    )
    np.testing.assert_array_equal(grads[0].numpy(), [1.0, -0.5])
    np.testing.assert_array_equal(grads[1].numpy(), [-1.0])
    assert bool(apply_now)
    # After: sqrt(1 + 0.25 + 1) = 1.5.
    np.testing.assert_allclose(metrics["clip_value/norm_after"], 1.5, rtol=1e-6)


def test_accumulate_releases_the_sum_every_k_calls_and_resets():
    variables = _variables()
    accumulate = Accumulate(steps=3)
    accumulate.build(variables)
    step = tf.function(lambda grads: accumulate(grads, variables))
    parts = [
        ([1.0, 2.0], [3.0]),
        ([10.0, 20.0], [30.0]),
        ([100.0, 200.0], [300.0]),
        ([1000.0, 2000.0], [3000.0]),  # second cycle
        ([-1.0, -1.0], [-1.0]),
        ([0.5, 0.5], [0.5]),
    ]
    results = [step(_grads(*part)) for part in parts]
    assert [bool(apply_now) for _, apply_now, _ in results] == [False, False, True] * 2
    # First cycle: [1 + 10 + 100, 2 + 20 + 200], [3 + 30 + 300].
    np.testing.assert_allclose(_numpy(results[2][0])[0], [111.0, 222.0])
    np.testing.assert_allclose(_numpy(results[2][0])[1], [333.0])
    # Second cycle starts from zero: [1000 - 1 + 0.5, 2000 - 1 + 0.5], [3000 - 1 + 0.5].
    np.testing.assert_allclose(_numpy(results[5][0])[0], [999.5, 1999.5])
    np.testing.assert_allclose(_numpy(results[5][0])[1], [2999.5])
    assert step.experimental_get_tracing_count() == 1


def test_accumulate_calls_metric_counts_the_cycle():
    variables = _variables()
    accumulate = Accumulate(steps=3)
    accumulate.build(variables)
    step = tf.function(lambda grads: accumulate(grads, variables))
    calls = [int(step(_grads([1.0, 1.0], [1.0]))[2]["accumulate/calls"]) for _ in range(6)]
    assert calls == [1, 2, 3] * 2  # the releasing call has accumulated 3 parts


def test_accumulate_one_step_applies_every_call():
    variables = _variables()
    accumulate = Accumulate(steps=1)
    accumulate.build(variables)
    for value in (1.0, 5.0):  # no carry-over: each call returns its own gradient
        grads, apply_now, _ = accumulate(_grads([value, value], [value]), variables)
        assert bool(apply_now)
        np.testing.assert_array_equal(grads[0].numpy(), [value, value])


def test_accumulate_without_build_raises():
    with pytest.raises(ValueError, match="build"):
        Accumulate(steps=2)(_grads([1.0, 1.0], [1.0]), _variables())


def test_chain_applies_when_all_agree_and_clips_the_sum():
    variables = _variables()
    chain = Chain([Accumulate(steps=2), ClipByGlobalNorm(max_norm=6.5)])
    chain.build(variables)
    step = tf.function(lambda grads: chain(grads, variables))
    _, first_apply, _ = step(_grads([1.0, 1.0], [5.0]))
    grads, second_apply, metrics = step(_grads([2.0, 3.0], [7.0]))
    assert not bool(first_apply)
    assert bool(second_apply)
    # Sum: [3, 4], [12] with global norm 13, clipped to 6.5: halved.
    np.testing.assert_allclose(grads[0].numpy(), [1.5, 2.0], rtol=1e-6)
    np.testing.assert_allclose(grads[1].numpy(), [6.0], rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_global_norm/norm_after"], 6.5, rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ClipByGlobalNorm(max_norm=0.0),
        lambda: ClipByValue(clip_value=-1.0),
        lambda: Accumulate(steps=0),
    ],
)
def test_bad_arguments_raise(make):
    with pytest.raises(ValueError):
        make()
