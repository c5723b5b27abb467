"""The squashed Gaussian against a numerical change of variables, at moderate and extreme u."""

import math

import numpy as np
import pytest
import tensorflow as tf

from framework.parts.squashed_gaussian import SquashedGaussian


def _numerical_log_density(action: float, mean: float, std: float, h: float = 1e-6) -> float:
    """log p_A(a) for A = tanh(U), U ~ N(mean, std^2), from the CDF alone: P(A <= a) =
    Phi((atanh(a) - mean) / std), differentiated by a central difference (Python floats: a
    numpy float32 would pull the arithmetic down to float32)."""

    def cdf(a):
        return 0.5 * (1.0 + math.erf((math.atanh(a) - mean) / (std * math.sqrt(2.0))))

    return math.log((cdf(action + h) - cdf(action - h)) / (2.0 * h))


def test_log_prob_is_the_change_of_variables_of_the_gaussian():
    mean = np.array([[0.3, -1.2], [1.5, 0.0]], np.float32)  # [B=2, A=2]
    log_std = np.array([[-0.5, 0.2], [-1.0, 0.7]], np.float32)
    noise = np.array([[0.8, -0.4], [-1.1, 1.3]], np.float32)
    actions, log_prob = SquashedGaussian().sample(mean, log_std, noise)
    u = mean + np.exp(log_std) * noise
    np.testing.assert_allclose(actions.numpy(), np.tanh(u), rtol=1e-6)
    expected = [
        sum(
            _numerical_log_density(
                math.tanh(float(u[b, i])), float(mean[b, i]), math.exp(float(log_std[b, i]))
            )
            for i in range(2)
        )
        for b in range(2)
    ]  # independent dimensions: the log-densities add
    np.testing.assert_allclose(log_prob.numpy(), expected, rtol=1e-4)


def test_log_prob_stays_finite_and_right_where_tanh_rounds_to_one():
    # u = 12: tanh(u) is 1.0 in float32 and log(1 - tanh^2) would be -inf. By hand:
    # log(1 - tanh(u)^2) = log(4 / (e^u + e^-u)^2) = 2 log 2 - 2u - 2 log(1 + e^-2u),
    # and log N(u; 12 - 0.5, 0.5) at noise 1: -1/2 - log 0.5 - log(2 pi) / 2.
    actions, log_prob = SquashedGaussian().sample(
        tf.constant([[11.5]]), tf.constant([[math.log(0.5)]]), tf.constant([[1.0]])
    )
    assert actions.numpy()[0, 0] == 1.0
    gaussian = -0.5 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    correction = 2 * math.log(2) - 24.0 - 2 * math.log1p(math.exp(-24.0))
    np.testing.assert_allclose(log_prob.numpy(), [gaussian - correction], rtol=1e-6)


def test_log_std_is_clamped_and_the_clamp_passes_no_gradient():
    distribution = SquashedGaussian(log_std_min=-3.0, log_std_max=1.0)
    log_std = tf.Variable([[5.0, -7.0, 0.5]])
    with tf.GradientTape() as tape:
        actions, _ = distribution.sample(tf.zeros((1, 3)), log_std, tf.ones((1, 3)))
    # u = exp(clamped log std) * 1: e^1, e^-3, e^0.5
    np.testing.assert_allclose(actions.numpy(), np.tanh([[math.e, math.exp(-3), math.exp(0.5)]]))
    gradient = tape.gradient(actions, log_std).numpy()[0]
    assert gradient[0] == gradient[1] == 0.0 and gradient[2] > 0.0
    numpy_actions = distribution.sample_numpy(np.zeros((1, 3)), log_std.numpy(), np.ones((1, 3)))
    np.testing.assert_allclose(numpy_actions, actions.numpy(), rtol=1e-6)


def test_rejects_an_empty_log_std_range():
    with pytest.raises(ValueError, match="log_std_min < log_std_max"):
        SquashedGaussian(log_std_min=2.0, log_std_max=2.0)
