"""Tests for framework/target_updaters.py: the (tau, period) family and its argument checks."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.parts.target_updaters import HardUpdate, NoUpdate, SoftUpdate, TargetUpdater


def _step(n: int) -> tf.Tensor:
    return tf.constant(n, tf.int64)


def test_hard_update_copies_only_every_period():
    online, target = tf.Variable(0.0), tf.Variable(-1.0)
    updater = HardUpdate(period=3)
    returned, targets = [], []
    for n in range(1, 8):
        online.assign(float(n))  # the online value moves every step
        returned.append(bool(updater([online], [target], _step(n))))
        targets.append(float(target.numpy()))
    # Copies on steps 3 and 6 only: the target holds -1 until step 3, then 3, then 6.
    assert returned == [False, False, True, False, False, True, False]
    assert targets == [-1.0, -1.0, 3.0, 3.0, 3.0, 6.0, 6.0]


def test_soft_update_matches_closed_form():
    # With a fixed online value o, t_{k} = (1 - tau) t_{k-1} + tau o, so
    # t_k = o + (1 - tau)^k (t0 - o) = 10 + 0.9^5 * (0 - 10) = 10 - 5.9049 = 4.0951.
    online, target = tf.Variable([10.0, -2.0]), tf.Variable([0.0, 2.0])
    updater = SoftUpdate(tau=0.1)
    for n in range(1, 6):
        assert bool(updater([online], [target], _step(n)))  # period 1: every step
    # Second element: -2 + 0.9^5 * (2 - (-2)) = -2 + 2.36196 = 0.36196.
    np.testing.assert_allclose(target.numpy(), [4.0951, 0.36196], rtol=1e-5)
    np.testing.assert_array_equal(online.numpy(), [10.0, -2.0])  # the source is untouched


def test_tau_and_period_combined():
    online, target = tf.Variable(4.0), tf.Variable(0.0)
    updater = TargetUpdater(tau=0.5, period=2)
    returned, targets = [], []
    for n in range(1, 5):
        returned.append(bool(updater([online], [target], _step(n))))
        targets.append(float(target.numpy()))
    # Step 2: 0.5 * 0 + 0.5 * 4 = 2; step 4: 0.5 * 2 + 0.5 * 4 = 3.
    assert returned == [False, True, False, True]
    assert targets == [0.0, 2.0, 2.0, 3.0]


def test_no_update_never_changes_the_target():
    online, target = tf.Variable(4.0), tf.Variable(0.0)
    updater = NoUpdate()
    for n in range(1, 4):
        assert not bool(updater([online], [target], _step(n)))
    assert float(target.numpy()) == 0.0


def test_updates_inside_tf_function():
    online, target = tf.Variable(4.0), tf.Variable(0.0)
    updater = TargetUpdater(tau=0.25, period=1)
    update = tf.function(lambda step: updater([online], [target], step))
    update(_step(1))  # 0.75 * 0 + 0.25 * 4 = 1
    update(_step(2))  # 0.75 * 1 + 0.25 * 4 = 1.75
    np.testing.assert_allclose(target.numpy(), 1.75)


def test_check_accepts_matching_separate_lists():
    TargetUpdater().check(
        [tf.Variable(1.0), tf.Variable([1.0])], [tf.Variable(0.0), tf.Variable([0.0])]
    )


def test_check_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="1 online variables but 2 target"):
        HardUpdate().check([tf.Variable(1.0)], [tf.Variable(1.0), tf.Variable(2.0)])


def test_check_rejects_shape_mismatch_keras_variables():
    online = keras.Variable(np.zeros((2, 3), np.float32), name="online_kernel")
    target = keras.Variable(np.zeros((3, 2), np.float32), name="target_kernel")
    with pytest.raises(ValueError, match="shape mismatch"):
        SoftUpdate().check([online], [target])


def test_check_rejects_shape_mismatch_tf_variables():
    with pytest.raises(ValueError, match="shape mismatch"):
        SoftUpdate().check([tf.Variable([1.0, 2.0])], [tf.Variable([1.0, 2.0, 3.0])])


def test_check_rejects_variable_shared_at_same_position():
    shared = keras.Variable(np.zeros((2,), np.float32), name="shared")
    with pytest.raises(ValueError, match="shared"):
        TargetUpdater().check([shared], [shared])


def test_check_rejects_variable_shared_at_different_positions():
    a = keras.Variable(np.zeros((2,), np.float32), name="a")
    b = keras.Variable(np.zeros((2,), np.float32), name="b")
    c = keras.Variable(np.zeros((2,), np.float32), name="c")
    with pytest.raises(ValueError, match="shared"):
        TargetUpdater().check([a, b], [c, a])  # `a` is online and target at once


@pytest.mark.parametrize(
    "make",
    [
        lambda: TargetUpdater(tau=0.0),
        lambda: TargetUpdater(tau=-0.1),
        lambda: TargetUpdater(tau=1.5),
        lambda: TargetUpdater(period=0),
        lambda: SoftUpdate(tau=0.0),
        lambda: SoftUpdate(tau=2.0),
        lambda: HardUpdate(period=0),
        lambda: HardUpdate(period=-3),
    ],
)
def test_bad_arguments_raise(make):
    with pytest.raises(ValueError):
        make()
