"""Keras optimizers bound through gin; schedules that count environment steps or updates."""

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.learner import Learner, UpdateGroup
from framework.parts import optimizers


@gin.configurable(module="test_optimizers")
def make_test_optimizer(optimizer=None):
    return optimizer


@pytest.mark.parametrize(
    ("name", "cls", "extra_binding", "attribute", "value"),
    [
        ("Adam", keras.optimizers.Adam, "beta_1 = 0.5", "beta_1", 0.5),
        ("RMSprop", keras.optimizers.RMSprop, "rho = 0.8", "rho", 0.8),
        ("SGD", keras.optimizers.SGD, "momentum = 0.7", "momentum", 0.7),
        ("TorchAdam", optimizers.TorchAdam, "epsilon = 1e-5", "epsilon", 1e-5),
        ("TorchRMSprop", optimizers.TorchRMSprop, "centered = True", "centered", True),
        ("FusedRMSprop", optimizers.FusedRMSprop, "centered = True", "centered", True),
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


def _torch_adam_steps(start, gradients, learning_rate, epsilon, beta_1=0.9, beta_2=0.999):
    """torch.optim.Adam's update in float64: epsilon added to sqrt(v) / sqrt(1 - beta_2^t)."""
    x, m, v = np.array(start, np.float64), 0.0, 0.0
    for t, g in enumerate(gradients, 1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        denominator = np.sqrt(v) / np.sqrt(1 - beta_2**t) + epsilon
        x = x - learning_rate / (1 - beta_1**t) * m / denominator
    return x


def test_torch_adam_places_epsilon_as_torch_does_and_keras_adam_does_not():
    # Gradients near epsilon, where the placement decides the step (PPO's policy torso).
    start = [1.0, -2.0, 0.5]
    gradients = [np.array(g, np.float32) for g in ([1e-5, -3e-6, 0.2], [2e-5, 1e-6, -0.1])]
    expected = _torch_adam_steps(start, gradients, 1e-3, 1e-5)
    moved = {}
    for name, optimizer in (
        ("torch", optimizers.TorchAdam(1e-3, epsilon=1e-5)),
        ("keras", keras.optimizers.Adam(1e-3, epsilon=1e-5)),
    ):
        variable = tf.Variable(start)
        for gradient in gradients:
            optimizer.apply_gradients([(tf.constant(gradient), variable)])
        moved[name] = variable.numpy()
    np.testing.assert_allclose(moved["torch"], expected, rtol=0, atol=1e-7)
    # Keras's epsilon weighs ~32x / ~22x more at steps 1 and 2: the small gradients' steps
    # come out several times shorter; the large gradient's step within 1% of torch's.
    torch_steps, keras_steps = np.abs(expected - start), np.abs(moved["keras"] - start)
    assert np.all(keras_steps[:2] < 0.5 * torch_steps[:2]), (keras_steps, torch_steps)
    np.testing.assert_allclose(keras_steps[2], torch_steps[2], rtol=1e-2)
    with pytest.raises(ValueError, match="no amsgrad"):
        optimizers.TorchAdam(amsgrad=True)


def _torch_rmsprop_steps(start, gradients, learning_rate, rho, epsilon):
    """torch.optim.RMSprop(centered=True) in float64: epsilon added to sqrt(v - m^2)."""
    x, v, m = np.array(start, np.float64), 0.0, 0.0
    for g in gradients:
        v = rho * v + (1 - rho) * g * g
        m = rho * m + (1 - rho) * g
        x = x - learning_rate * g / (np.sqrt(v - m * m) + epsilon)
    return x


def test_torch_rmsprop_is_minatar_s_centred_rmsprop_and_keras_s_takes_steps_ten_times_smaller():
    # MinAtar's DQN optimizer, on gradients whose spread is far below epsilon = 0.01 (from 0:
    # float32 keeps the small steps exactly enough to compare).
    start = [0.0, 0.0]
    gradients = [np.array(g, np.float32) for g in ([1e-4, -2e-4], [3e-4, 1e-4], [-1e-4, 2e-4])]
    expected = _torch_rmsprop_steps(start, gradients, 2.5e-4, 0.95, 0.01)
    # By hand, the first step of the first weight: v = 0.05 * 1e-8 = 5e-10, m = 0.05 * 1e-4
    # = 5e-6, sqrt(v - m^2) = sqrt(4.75e-10) = 2.179e-5; 2.5e-4 * 1e-4 / (0.01 + 2.179e-5)
    # = 2.4946e-6.
    np.testing.assert_allclose(
        _torch_rmsprop_steps(start, gradients[:1], 2.5e-4, 0.95, 0.01)[0], -2.4946e-6, rtol=1e-4
    )
    moved = {}
    for name, optimizer in (
        ("torch", optimizers.TorchRMSprop(2.5e-4, rho=0.95, epsilon=0.01, centered=True)),
        ("keras", keras.optimizers.RMSprop(2.5e-4, rho=0.95, epsilon=0.01, centered=True)),
    ):
        variable = tf.Variable(start)
        for gradient in gradients:
            optimizer.apply_gradients([(tf.constant(gradient), variable)])
        moved[name] = variable.numpy()
    np.testing.assert_allclose(moved["torch"], expected, rtol=1e-5)
    # Keras: lr g / sqrt(v - m^2 + 0.01), a denominator of ~0.1 against torch's ~0.01.
    ratio = moved["keras"] / expected
    np.testing.assert_allclose(ratio, 0.1, rtol=0.05)


def test_torch_rmsprop_momentum_is_torch_s_buffer_of_steps():
    # Uncentred, momentum 0.5: b1 = g1 / (sqrt(v1) + eps), b2 = 0.5 b1 + g2 / (sqrt(v2) + eps).
    optimizer = optimizers.TorchRMSprop(0.1, rho=0.9, epsilon=1e-8, momentum=0.5)
    variable = tf.Variable([0.0])
    for gradient in (1.0, 1.0):
        optimizer.apply_gradients([(tf.constant([gradient]), variable)])
    first = 1.0 / (np.sqrt(0.1) + 1e-8)  # v1 = 0.1
    second = 0.5 * first + 1.0 / (np.sqrt(0.19) + 1e-8)  # v2 = 0.9 * 0.1 + 0.1 = 0.19
    np.testing.assert_allclose(variable.numpy(), [-0.1 * (first + second)], rtol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize(
    "settings",
    [
        dict(rho=0.95, epsilon=1e-5, centered=True),  # Dopamine's Nature DQN
        dict(rho=0.9, epsilon=1e-7),
        dict(rho=0.9, epsilon=1e-7, momentum=0.5),
        dict(rho=0.9, epsilon=1e-7, momentum=0.5, centered=True),
    ],
)
def test_fused_rmsprop_takes_keras_s_rmsprop_steps(settings, jit_compile):
    rng = np.random.default_rng(0)
    start = rng.standard_normal([4, 3]).astype(np.float32)
    gradients = [rng.standard_normal([4, 3]).astype(np.float32) for _ in range(5)]
    fused = optimizers.FusedRMSprop(0.01, **settings)
    moved = {}
    for name, optimizer in (
        ("fused", fused),
        ("keras", keras.optimizers.RMSprop(0.01, **settings)),
    ):
        variable = tf.Variable(start)
        apply = tf.function(
            lambda g, o=optimizer, v=variable: o.apply_gradients([(g, v)]),
            jit_compile=jit_compile,
        )
        for gradient in gradients:
            apply(tf.constant(gradient))
        moved[name] = variable.numpy()
    assert not np.allclose(moved["keras"], start, atol=1e-2)  # five real steps
    # The kernel's momentum buffer is an optimizer variable, so checkpoints carry it.
    assert any("momentum" in v.path for v in fused.variables)
    assert int(fused.iterations) == len(gradients)  # Keras's own count goes on
    np.testing.assert_allclose(moved["fused"], moved["keras"], rtol=1e-5, atol=1e-6)


def test_staircase_exponential_decay_counting_updates():
    gin.parse_config(
        """
        make_test_optimizer.optimizer = @RMSprop()
        RMSprop.learning_rate = @ExponentialDecay()
        ExponentialDecay.initial_learning_rate = 0.00025
        ExponentialDecay.decay_steps = 10000  # applied updates
        ExponentialDecay.decay_rate = 0.96
        ExponentialDecay.staircase = True
        ExponentialDecay.unit = 'updates'
        """
    )
    optimizer = make_test_optimizer()
    rates = []
    for iteration in (0, 9999, 10000, 20000):
        optimizer.iterations.assign(iteration)
        rates.append(float(optimizer.learning_rate))
    # lr0 * 0.96^floor(iteration / 10000): factors 1, 1, 0.96, 0.96^2 = 0.9216.
    np.testing.assert_allclose(rates, [0.00025 * f for f in (1.0, 1.0, 0.96, 0.9216)], rtol=1e-5)


def test_schedules_counting_environment_steps_follow_the_count_their_learner_is_given():
    decay = optimizers.ExponentialDecay(1.0, decay_steps=100, decay_rate=0.5, staircase=True)
    w = tf.Variable(0.0)
    loss = UpdateGroup(lambda b: (w * tf.reduce_sum(b["x"]), {}), [w], keras.optimizers.SGD(decay))
    learner = Learner(loss)
    linear = optimizers.LinearDecay(1.0, 0.0, duration=400)
    rates = []
    for step in (0, 99, 100, 250, 400, 1000):  # one update each: updates do not matter here
        metrics, _ = learner.run({"x": np.ones((1, 2), np.float32)}, environment_steps=step)
        linear.environment_steps.assign(step)
        rates.append((float(metrics["learning_rate"]), float(linear(tf.constant(7)))))
    # 0.5^floor(step / 100) and 1 - step / 400, floored at 0.
    expected = [(1, 1), (1, 0.7525), (0.5, 0.75), (0.25, 0.375), (0.0625, 0), (0.0009765625, 0)]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    with pytest.raises(ValueError, match=r"learner.run\(batches, environment_steps\)"):
        learner.run({"x": np.ones((1, 2), np.float32)})  # the count left out: said, not frozen
    described = {name: schedule.describe() for name, schedule in learner.named_schedules().items()}
    assert described == {
        "learning rate (train/learning_rate)": "ExponentialDecay(initial_learning_rate=1.0, "
        "decay_steps=100, decay_rate=0.5, staircase=True) counting environment steps"
    }


def test_a_schedule_names_its_unit_and_rejects_another():
    schedule = optimizers.LinearDecay(1e-3, 1e-4, duration=1000, unit="updates")
    assert schedule.describe() == (
        "LinearDecay(initial_learning_rate=0.001, final_learning_rate=0.0001, duration=1000) "
        "counting updates"
    )
    with pytest.raises(ValueError, match=r"LinearDecay\.unit must be one of"):
        optimizers.LinearDecay(1e-3, 1e-4, duration=1000, unit="episodes")


@pytest.mark.parametrize(
    "schedule_of",
    [
        lambda length: optimizers.LinearDecay(1e-3, 0.0, duration=length),
        lambda length: optimizers.ExponentialDecay(7e-4, decay_steps=length, decay_rate=0.1),
    ],
)
def test_a_schedule_left_without_a_length_spans_the_run_as_that_length_written_out(schedule_of):
    own, following = schedule_of(100_000), schedule_of(None)
    assert following.follows_run and not own.follows_run
    with pytest.raises(ValueError, match=r"= None follows the run's length, which it was not"):
        following(tf.constant(0))  # never a silent value before the runner gives the length
    following.set_run_length(100_000)
    own.set_run_length(20_000)  # a length of its own stays
    assert own.length == following.length == 100_000
    for step in (0, 1, 256, 33_333, 99_999, 100_000, 150_000):
        own.environment_steps.assign(step)
        following.environment_steps.assign(step)
        # The same float32 numbers as the length written out: a shipped config keeps its run.
        assert following(tf.constant(0)).numpy().tobytes() == own(tf.constant(0)).numpy().tobytes()
    assert following.describe().endswith(
        "counting environment steps, over the run's length (100000 environment steps)"
    )
    assert "over the run" not in own.describe()


def test_a_linear_decay_over_a_short_run_reaches_its_final_value_at_the_run_s_end():
    decay = optimizers.LinearDecay(1e-3, 0.0)  # RL-Zoo's lin_1e-3
    decay.set_run_length(20_000)
    rates = []
    for step in (5_000, 20_000, 30_000):
        decay.environment_steps.assign(step)
        rates.append(float(decay(tf.constant(0))))
    # 1e-3 * (1 - 5000 / 20000) = 7.5e-4, then 0 from the run's end on.
    np.testing.assert_allclose(rates, [7.5e-4, 0.0, 0.0], rtol=1e-6)


def test_a_schedule_counting_updates_needs_a_length_of_its_own():
    with pytest.raises(ValueError, match=r"unit = 'updates' needs a length of its own"):
        optimizers.LinearDecay(1e-3, 0.0, unit="updates")
    with pytest.raises(ValueError, match=r"ExponentialDecay\.decay_steps must be an integer >= 1"):
        optimizers.ExponentialDecay(1e-3, decay_steps=0, decay_rate=0.5)
