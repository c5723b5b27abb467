"""Tests for framework/losses.py against values worked out by hand in the comments."""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from framework.parts.losses import (
    DeterministicPolicyLoss,
    PolicyGradientLoss,
    SoftPolicyLoss,
    TDHuberLoss,
    TDMSELoss,
    TemperatureLoss,
)
from framework.parts.targets import DoubleQLearningTarget, MinCriticTarget, QLearningTarget

LN3 = math.log(3.0)


def _pg_batch():
    # Both rows have logits [0, ln 3]: softmax = [1/(1+3), 3/(1+3)] = [1/4, 3/4].
    logits = tf.constant([[0.0, LN3], [0.0, LN3]])  # [B=2, A=2]
    actions = tf.constant([1, 0])
    returns = tf.constant([2.0, 1.0])
    return logits, actions, returns


# -log pi(a|s) * G: row 0 takes a=1 (p=3/4) with G=2, row 1 takes a=0 (p=1/4) with G=1.
POLICY_LOSS = (2.0 * math.log(4.0 / 3.0) + 1.0 * math.log(4.0)) / 2.0
# H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 1/4 ln 4 + 3/4 ln 4/3, the same for both rows.
ENTROPY = 0.25 * math.log(4.0) + 0.75 * math.log(4.0 / 3.0)


def test_policy_gradient_loss_is_mean_neg_log_prob_times_return():
    loss, extras = PolicyGradientLoss()(*_pg_batch())
    np.testing.assert_allclose(loss.numpy(), POLICY_LOSS, rtol=1e-6)
    np.testing.assert_allclose(extras["policy_loss"].numpy(), POLICY_LOSS, rtol=1e-6)
    np.testing.assert_allclose(extras["entropy"].numpy(), ENTROPY, rtol=1e-6)


def test_policy_gradient_entropy_bonus_is_subtracted():
    loss, _ = PolicyGradientLoss(entropy_coef=0.1)(*_pg_batch())
    np.testing.assert_allclose(loss.numpy(), POLICY_LOSS - 0.1 * ENTROPY, rtol=1e-6)


def test_policy_gradient_wrt_logits_and_none_wrt_returns():
    logits, actions, returns = _pg_batch()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([logits, returns])
        loss, _ = PolicyGradientLoss()(logits, actions, returns)
    # d/dlogits of -log softmax(logits)[a] * G / B = (softmax - onehot(a)) * G / B:
    # row 0: ([1/4, 3/4] - [0, 1]) * 2 / 2 = [0.25, -0.25]
    # row 1: ([1/4, 3/4] - [1, 0]) * 1 / 2 = [-0.375, 0.375]
    np.testing.assert_allclose(
        tape.gradient(loss, logits).numpy(), [[0.25, -0.25], [-0.375, 0.375]], atol=1e-6
    )
    returns_grad = tape.gradient(loss, returns)
    assert returns_grad is None or not np.any(returns_grad.numpy())


def test_td_mse_loss_and_extras():
    q_selected = tf.constant([1.0, 2.0, 3.0])
    targets = tf.constant([2.0, 2.0, 0.0])
    loss, extras = TDMSELoss()(q_selected, targets)
    # td = targets - q = [1, 0, -3]; mean(td^2) = (1 + 0 + 9) / 3.
    np.testing.assert_allclose(loss.numpy(), 10.0 / 3.0, rtol=1e-6)
    np.testing.assert_allclose(extras["mean_q"].numpy(), 2.0, rtol=1e-6)  # (1 + 2 + 3) / 3
    np.testing.assert_allclose(extras["mean_abs_td_error"].numpy(), 4.0 / 3.0, rtol=1e-6)


@pytest.mark.parametrize(
    ("td_error", "delta", "expected"),
    [
        (0.5, 1.0, 0.125),  # quadratic: 0.5 * 0.5^2
        (-0.5, 1.0, 0.125),  # symmetric
        (3.0, 1.0, 2.5),  # linear: 0.5 * 1^2 + 1 * (3 - 1)
        (-3.0, 1.0, 2.5),
        (1.5, 2.0, 1.125),  # quadratic under a wider delta: 0.5 * 1.5^2
        (5.0, 2.0, 8.0),  # linear: 0.5 * 2^2 + 2 * (5 - 2)
    ],
)
def test_td_huber_loss_both_regimes(td_error, delta, expected):
    loss, extras = TDHuberLoss(delta=delta)(tf.constant([0.0]), tf.constant([td_error]))
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(extras["mean_abs_td_error"].numpy(), abs(td_error), rtol=1e-6)


def test_td_huber_gradient_is_clipped_to_delta():
    q_selected = tf.constant([0.0, 0.0])
    targets = tf.constant([0.5, -3.0])
    with tf.GradientTape() as tape:
        tape.watch(q_selected)
        loss, extras = TDHuberLoss(delta=1.0)(q_selected, targets)
    # dL/dq per element, over B=2: inside delta -td = -0.5; outside -delta * sign(td) = +1.
    np.testing.assert_allclose(tape.gradient(loss, q_selected).numpy(), [-0.25, 0.5], atol=1e-6)
    np.testing.assert_allclose(loss.numpy(), (0.125 + 2.5) / 2, rtol=1e-6)
    np.testing.assert_allclose(extras["mean_q"].numpy(), 0.0)


@pytest.mark.parametrize("target_fn", [QLearningTarget(), DoubleQLearningTarget()])
@pytest.mark.parametrize(
    ("loss_fn", "expected_w00_grad"),
    [
        (TDMSELoss(), -4.0),  # d/dq (y - q)^2 = -2 (y - q) = -2 * (3 - 1); times s[0] = 1
        (TDHuberLoss(delta=1.0), -1.0),  # |y - q| = 2 > delta: -delta * sign(2) * s[0]
    ],
)
def test_gradient_flows_to_online_weights_only(target_fn, loss_fn, expected_w00_grad):
    # Linear Q-networks Q(s) = s @ W with W [2 features, 2 actions].
    online = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    target = tf.Variable([[0.0, 0.0], [5.0, 6.0]])
    states = tf.constant([[1.0, 0.0]])  # Q_online(s) = [1, 2]; action 0 -> q = 1
    next_states = tf.constant([[0.0, 1.0]])  # Q_online(s') = [3, 4], Q_target(s') = [5, 6]
    with tf.GradientTape(persistent=True) as tape:
        q_selected = tf.gather(states @ online, [0], axis=-1, batch_dims=1)  # [B]
        # Both targets pick action 1 (max of target, argmax of online): y = 0 + 0.5 * 6 = 3.
        y = target_fn(
            tf.constant([0.0]), tf.constant([0.5]), next_states @ online, next_states @ target
        )
        loss, _ = loss_fn(q_selected, y)
    np.testing.assert_allclose(y.numpy(), [3.0])
    target_grad = tape.gradient(loss, target)
    assert target_grad is None or not np.any(target_grad.numpy())
    np.testing.assert_allclose(
        tape.gradient(loss, online).numpy(), [[expected_w00_grad, 0.0], [0.0, 0.0]], atol=1e-6
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: PolicyGradientLoss(entropy_coef=-0.1),
        lambda: TDHuberLoss(delta=0.0),
        lambda: TDHuberLoss(delta=-1.0),
    ],
)
def test_bad_constructor_arguments_raise(make):
    with pytest.raises(ValueError):
        make()


def test_a_loss_is_its_hyperparameters():
    # Frozen dataclasses: equal by value, shown with their fields, unchanged once built.
    assert TDHuberLoss(delta=2.0) == TDHuberLoss(delta=2.0) != TDHuberLoss(delta=1.0)
    assert repr(PolicyGradientLoss(entropy_coef=0.1)) == "PolicyGradientLoss(entropy_coef=0.1)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        TDHuberLoss().delta = 3.0


# Every TD-style loss: TD-MSE (DQN's option, and the DDPG/TD3 critics' loss), Huber (DQN).
TD_LOSSES = [TDMSELoss(), TDHuberLoss(delta=1.0)]


@pytest.mark.parametrize("loss_fn", TD_LOSSES)
def test_td_losses_stop_the_gradient_into_their_target_on_their_own(loss_fn):
    # A target computed from a variable with no stop_gradient of its own (a bare r + w * q'):
    # only the loss's stop_gradient keeps the gradient out of w.
    w = tf.Variable(2.0)
    q_selected = tf.Variable([1.0, -1.0])
    with tf.GradientTape() as tape:
        targets = tf.constant([0.5, 0.0]) + w * tf.constant([1.0, 1.0])  # [2.5, 2]
        loss, _ = loss_fn(q_selected, targets)
    w_grad, q_grad = tape.gradient(loss, [w, q_selected])
    assert w_grad is None or w_grad.numpy() == 0.0
    assert np.all(q_grad.numpy() != 0.0)  # the prediction still learns


def test_critic_target_and_loss_give_no_gradient_into_the_target_critics():
    # DDPG/TD3's critic: y = r + discount * min_i Q'_i, with Q'_i = v_i * [1, 1] from
    # variables; TD-MSE of Q = [1, 1] to y.
    v1, v2 = tf.Variable(2.0), tf.Variable(3.0)
    q = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        next_q = [v1 * tf.ones(2), v2 * tf.ones(2)]  # min is Q'_1 = [2, 2]
        y = MinCriticTarget()(tf.constant([1.0, 0.0]), tf.constant([0.5, 0.0]), next_q)
        loss, _ = TDMSELoss()(q, y)
    # y = [1 + 0.5 * 2, 0 + 0 * 2] = [2, 0]; y - q = [1, -1]; mean square 1.
    np.testing.assert_allclose(y.numpy(), [2.0, 0.0])
    np.testing.assert_allclose(loss.numpy(), 1.0, rtol=1e-6)
    grads = tape.gradient(loss, [v1, v2, q])
    assert all(g is None or g.numpy() == 0.0 for g in grads[:2])
    # dL/dq = -2 (y - q) / B = [-1, 1]
    np.testing.assert_allclose(grads[2].numpy(), [-1.0, 1.0], rtol=1e-6)


def test_deterministic_policy_loss_is_minus_mean_q_and_ascends_q():
    policy_q = tf.Variable([1.0, 2.0, 6.0])  # Q(s, mu(s)) for a batch of 3
    with tf.GradientTape() as tape:
        loss, extras = DeterministicPolicyLoss()(policy_q)
    np.testing.assert_allclose(loss.numpy(), -3.0, rtol=1e-6)  # -(1 + 2 + 6) / 3
    np.testing.assert_allclose(extras["mean_q"].numpy(), 3.0, rtol=1e-6)
    # dL/dQ = -1/B each: descending the loss raises every Q(s, mu(s)).
    np.testing.assert_allclose(tape.gradient(loss, policy_q).numpy(), [-1 / 3] * 3, rtol=1e-6)


@pytest.mark.parametrize(
    ("loss", "per_sample"),
    # TD errors (prediction - target) [0.5, 2]. Huber (delta 1): [0.5 * 0.25, 2 - 0.5] =
    # [0.125, 1.5]; MSE: [0.25, 4].
    [(TDHuberLoss(), [0.125, 1.5]), (TDMSELoss(), [0.25, 4.0])],
)
def test_td_losses_weigh_samples_and_return_each_ones_td_error(loss, per_sample):
    q, targets = tf.constant([1.5, 3.0]), tf.constant([1.0, 1.0])
    unweighted, extras = loss(q, targets)
    np.testing.assert_allclose(unweighted.numpy(), np.mean(per_sample), rtol=1e-6)
    np.testing.assert_allclose(extras["per_sample/error"].numpy(), [0.5, 2.0], rtol=1e-6)
    weighted, _ = loss(q, targets, tf.constant([1.0, 0.5]))
    np.testing.assert_allclose(
        weighted.numpy(), (per_sample[0] + 0.5 * per_sample[1]) / 2, rtol=1e-6
    )


def test_temperature_loss_gradient_sign_and_size():
    # SB3's form: L = -log_alpha * (mean log pi + target_entropy). Sampled entropy H = -mean
    # log pi = -(-0.5 + 0.1) / 2 = 0.2, above the target -1, so alpha must fall: dL/dlog_alpha
    # = -(mean log pi + target) = -(-0.2 - 1) = +1.2 (gradient descent lowers log alpha).
    # L = -ln(0.5) * (-1.2) = 1.2 ln 0.5. (CleanRL's -alpha * (...) would give alpha * 1.2 = 0.6.)
    log_alpha = tf.Variable(math.log(0.5))
    log_probs = tf.constant([-0.5, 0.1])
    with tf.GradientTape() as tape:
        tape.watch(log_probs)
        loss, extras = TemperatureLoss()(log_alpha, log_probs, -1.0)
    gradient, log_prob_gradient = tape.gradient(loss, [log_alpha, log_probs])
    np.testing.assert_allclose(gradient.numpy(), 1.2, rtol=1e-6)
    np.testing.assert_allclose(loss.numpy(), 1.2 * math.log(0.5), rtol=1e-6)
    np.testing.assert_allclose(extras["alpha"].numpy(), 0.5, rtol=1e-6)
    np.testing.assert_allclose(extras["entropy"].numpy(), 0.2, rtol=1e-6)
    assert log_prob_gradient is None or not np.any(log_prob_gradient.numpy())
    # Below the target (H = -2 < -1) the sign turns: alpha rises.
    with tf.GradientTape() as tape:
        loss, _ = TemperatureLoss()(log_alpha, tf.constant([2.0, 2.0]), -1.0)
    np.testing.assert_allclose(tape.gradient(loss, log_alpha).numpy(), -1.0, rtol=1e-6)


def test_soft_policy_loss_by_hand_and_no_gradient_into_alpha():
    # mean(alpha log pi - Q) with alpha 0.5: (0.5 * -1 - 3 + 0.5 * 2 - 1) / 2 = -1.75.
    log_probs, policy_q, alpha = tf.constant([-1.0, 2.0]), tf.constant([3.0, 1.0]), tf.Variable(0.5)
    with tf.GradientTape() as tape:
        tape.watch(log_probs)
        loss, extras = SoftPolicyLoss()(log_probs, policy_q, alpha)
    np.testing.assert_allclose(loss.numpy(), -1.75, rtol=1e-6)
    np.testing.assert_allclose(extras["entropy"].numpy(), -0.5, rtol=1e-6)  # -mean log pi
    np.testing.assert_allclose(extras["mean_q"].numpy(), 2.0, rtol=1e-6)
    log_prob_gradient, alpha_gradient = tape.gradient(loss, [log_probs, alpha])
    np.testing.assert_allclose(log_prob_gradient.numpy(), [0.25, 0.25], rtol=1e-6)  # alpha / B
    assert alpha_gradient is None
