"""Tests for framework/targets.py: y = r + discount * next value, discount = gamma^n (1 - done)."""

import numpy as np
import pytest
import tensorflow as tf

from framework.parts.targets import DoubleQLearningTarget, QLearningTarget

GAMMA = 0.9


def test_one_step_target_and_terminal_ignores_next_q():
    rewards = tf.constant([1.0, 2.0])
    # discount = gamma^1 * (1 - terminated): the second transition ends the episode.
    discounts = tf.constant([GAMMA, 0.0])
    next_q = tf.constant([[1.0, 3.0], [1e6, -1e6]])  # [B, A]
    y = QLearningTarget()(rewards, discounts, next_q, next_q)
    # Row 0: 1 + 0.9 * max(1, 3) = 3.7.  Row 1 is terminal: y = r = 2, the 1e6 is ignored.
    np.testing.assert_allclose(y.numpy(), [3.7, 2.0], rtol=1e-6)


def test_n_step_target():
    # A 3-step return of rewards 1, 1, 1: 1 + 0.9 + 0.81 = 2.71, then discount 0.9^3 = 0.729.
    rewards = tf.constant([2.71, 2.71])
    discounts = tf.constant([GAMMA**3, 0.0])  # second row terminated within the 3 steps
    next_q = tf.constant([[10.0, 4.0], [10.0, 4.0]])
    y = QLearningTarget()(rewards, discounts, next_q, next_q)
    # Row 0: 2.71 + 0.729 * 10 = 10.0.  Row 1: 2.71.
    np.testing.assert_allclose(y.numpy(), [10.0, 2.71], rtol=1e-6)


def test_q_learning_target_uses_target_network_max_only():
    # The online values would pick action 0 and are ignored by plain Q-learning.
    y = QLearningTarget()(
        tf.constant([1.0]), tf.constant([0.5]), tf.constant([[5.0, 1.0]]), tf.constant([[2.0, 8.0]])
    )
    np.testing.assert_allclose(y.numpy(), [1.0 + 0.5 * 8.0])  # 5.0


def test_double_q_target_selects_with_online_evaluates_with_target():
    rewards = tf.constant([1.0, 0.0])
    discounts = tf.constant([0.5, 1.0])
    next_q_online = tf.constant([[5.0, 1.0], [0.0, 3.0]])  # argmax: 0, 1
    next_q_target = tf.constant([[2.0, 8.0], [7.0, 4.0]])  # max: 8, 7
    y = DoubleQLearningTarget()(rewards, discounts, next_q_online, next_q_target)
    # Row 0: 1 + 0.5 * Q_target[0] = 2 (plain max would give 1 + 0.5 * 8 = 5).
    # Row 1: 0 + 1.0 * Q_target[1] = 4 (plain max would give 7).
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0])
    plain = QLearningTarget()(rewards, discounts, next_q_online, next_q_target)
    np.testing.assert_allclose(plain.numpy(), [5.0, 7.0])


@pytest.mark.parametrize("target_fn", [QLearningTarget(), DoubleQLearningTarget()])
def test_targets_carry_no_gradient(target_fn):
    rewards = tf.constant([1.0])
    next_q = tf.constant([[1.0, 2.0]])
    with tf.GradientTape() as tape:
        tape.watch([rewards, next_q])
        y = target_fn(rewards, tf.constant([0.9]), next_q, next_q)
    for grad in tape.gradient(y, [rewards, next_q]):
        assert grad is None or not np.any(grad.numpy())
