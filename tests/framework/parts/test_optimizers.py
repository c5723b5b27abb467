"""Tests for framework/optimizers.py: Keras optimizers and schedules bound through gin."""

import gin
import keras
import numpy as np
import pytest

import framework.parts.optimizers  # noqa: F401  (registers the Keras configurables)


@gin.configurable(module="test_optimizers")
def make_test_optimizer(optimizer=None):
    return optimizer


@pytest.mark.parametrize(
    ("name", "cls", "extra_binding", "attribute", "value"),
    [
        ("Adam", keras.optimizers.Adam, "beta_1 = 0.5", "beta_1", 0.5),
        ("RMSprop", keras.optimizers.RMSprop, "rho = 0.8", "rho", 0.8),
        ("SGD", keras.optimizers.SGD, "momentum = 0.7", "momentum", 0.7),
    ],
)
def test_optimizer_bound_in_gin(name, cls, extra_binding, attribute, value):
    gin.parse_config(
        f"""
        make_test_optimizer.optimizer = @{name}()
        {name}.learning_rate = 0.01
        {name}.{extra_binding}
        """
    )
    optimizer = make_test_optimizer()
    assert isinstance(optimizer, cls)
    np.testing.assert_allclose(float(optimizer.learning_rate), 0.01, rtol=1e-6)
    assert getattr(optimizer, attribute) == pytest.approx(value)


def test_rmsprop_with_staircase_exponential_decay():
    gin.parse_config(
        """
        make_test_optimizer.optimizer = @RMSprop()
        RMSprop.learning_rate = @ExponentialDecay()
        ExponentialDecay.initial_learning_rate = 0.00025
        ExponentialDecay.decay_steps = 10000  # optimizer steps
        ExponentialDecay.decay_rate = 0.96
        ExponentialDecay.staircase = True
        """
    )
    optimizer = make_test_optimizer()
    rates = []
    for iteration in (0, 9999, 10000, 20000):
        optimizer.iterations.assign(iteration)
        rates.append(float(optimizer.learning_rate))
    # lr0 * 0.96^floor(iteration / 10000): factors 1, 1, 0.96, 0.96^2 = 0.9216.
    np.testing.assert_allclose(rates, [0.00025 * f for f in (1.0, 1.0, 0.96, 0.9216)], rtol=1e-5)
