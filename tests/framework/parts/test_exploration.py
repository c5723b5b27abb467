"""Tests for framework/exploration.py: the linear schedule and the action noises."""

import math

import numpy as np
import pytest

from framework.parts.exploration import (
    GaussianNoise,
    LinearSchedule,
    OrnsteinUhlenbeckNoise,
    check_probability_schedule,
    epsilon_greedy,
)


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (0, 1.0),
        (50, 0.55),  # halfway: 1 + 0.5 * (0.1 - 1)
        (100, 0.1),  # the end of the ramp
        (1000, 0.1),  # constant beyond
        (-5, 1.0),  # steps before 0 clamp to the start
    ],
)
def test_linear_schedule_decreasing(step, expected):
    assert LinearSchedule(start=1.0, end=0.1, duration=100)(step) == pytest.approx(expected)


def test_linear_schedule_increasing():
    schedule = LinearSchedule(start=0.0, end=2.0, duration=8)
    assert [schedule(step) for step in (0, 2, 8, 9)] == pytest.approx([0.0, 0.5, 2.0, 2.0])


def test_a_delayed_schedule_holds_its_start_then_ramps_as_minatar_s_epsilon():
    # MinAtar's DQN: epsilon 1 until the replay starts at 5,000, then 1 -> 0.1 over 100,000:
    # at 55,000, halfway, 1 + 0.5 * (0.1 - 1) = 0.55; 0.1 from 105,000 on.
    schedule = LinearSchedule(start=1.0, end=0.1, duration=100_000, delay=5000)
    steps = (0, 5000, 55_000, 105_000, 200_000)
    assert [schedule(step) for step in steps] == pytest.approx([1.0, 1.0, 0.55, 0.1, 0.1])
    assert "delay=5000" in schedule.describe()
    with pytest.raises(ValueError, match="delay"):
        LinearSchedule(delay=-1)


@pytest.mark.parametrize("duration", [0, -1])
def test_linear_schedule_rejects_short_duration(duration):
    with pytest.raises(ValueError):
        LinearSchedule(duration=duration)


def test_gaussian_noise_draws_from_the_generator_with_its_stddev():
    noise = GaussianNoise(stddev=0.3)
    draws = noise(np.random.default_rng(0), (4000, 2))
    assert draws.shape == (4000, 2)
    np.testing.assert_array_equal(
        draws, np.random.default_rng(0).normal(0.0, 0.3, size=(4000, 2))
    )  # the same generator, the same draws: reproducible from the agent's rng
    assert noise.scale == 0.3
    assert abs(draws.std() - 0.3) < 0.01  # 8000 draws: the std's std is ~0.3 / sqrt(16000)
    assert noise.state() == {}


def test_ou_noise_follows_its_recurrence_by_hand():
    noise = OrnsteinUhlenbeckNoise(theta=0.5, sigma=0.2, dt=0.25)
    eps = np.random.default_rng(3).normal(size=(3, 2, 1))  # the draws it makes, in order
    rng = np.random.default_rng(3)
    # x1 = 0 - 0.5 * 0 * 0.25 + 0.2 * sqrt(0.25) * eps0 = 0.1 * eps0
    x1 = noise(rng, (2, 1))
    np.testing.assert_allclose(x1, 0.1 * eps[0], rtol=1e-12)
    # x2 = x1 - 0.5 * 0.25 * x1 + 0.1 * eps1 = 0.875 * x1 + 0.1 * eps1
    x2 = noise(rng, (2, 1))
    np.testing.assert_allclose(x2, 0.875 * x1 + 0.1 * eps[1], rtol=1e-12)
    noise.reset(np.array([True, False]))  # env 0's episode ended: it restarts from 0
    x3 = noise(rng, (2, 1))
    np.testing.assert_allclose(x3[0], 0.1 * eps[2][0], rtol=1e-12)
    np.testing.assert_allclose(x3[1], 0.875 * x2[1] + 0.1 * eps[2][1], rtol=1e-12)


def test_ou_noise_stationary_statistics():
    noise = OrnsteinUhlenbeckNoise(theta=0.15, sigma=0.2)  # the classic DDPG values, dt = 1
    # An AR(1) process x' = 0.85 x + 0.2 eps: Var = 0.2^2 / (1 - 0.85^2) = 0.04 / 0.2775,
    # std 0.3797; lag-1 autocorrelation 0.85.
    assert noise.scale == pytest.approx(math.sqrt(0.04 / 0.2775))
    rng = np.random.default_rng(0)
    for _ in range(60):  # 0.85^60 ~ 6e-5: the start at 0 is forgotten
        noise(rng, (4000, 1))
    previous = noise(rng, (4000, 1))
    current = noise(rng, (4000, 1))
    assert current.std() == pytest.approx(0.3797, rel=0.05)
    correlation = np.corrcoef(previous[:, 0], current[:, 0])[0, 1]
    assert correlation == pytest.approx(0.85, abs=0.02)


def test_ou_noise_state_round_trip_continues_the_same_draws():
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    noise = OrnsteinUhlenbeckNoise()
    noise(rng_a, (3, 2))
    noise(rng_b, (3, 2))  # both generators stay in step
    restored = OrnsteinUhlenbeckNoise()
    restored.load_state(noise.state())
    np.testing.assert_array_equal(noise(rng_a, (3, 2)), restored(rng_b, (3, 2)))
    noise.reset()  # None: every process restarts
    np.testing.assert_array_equal(noise.state()["x"], np.zeros((3, 2)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: GaussianNoise(stddev=-0.1),
        lambda: OrnsteinUhlenbeckNoise(sigma=-0.1),
        lambda: OrnsteinUhlenbeckNoise(theta=0.0),
        lambda: OrnsteinUhlenbeckNoise(theta=2.0, dt=1.0),  # 1 - theta dt = -1: not stationary
    ],
)
def test_noise_rejects_bad_arguments(make):
    with pytest.raises(ValueError):
        make()


def test_linear_schedule_without_a_duration_spans_the_run_it_is_given():
    schedule = LinearSchedule(start=0.4, end=1.0, duration=None)  # PER's beta over the run
    with pytest.raises(ValueError, match=r"LinearSchedule\.duration = None follows the run's"):
        schedule(0)
    schedule.set_run_length(50_000)
    # 0.4 + (step / 50000) * 0.6: 0.7 halfway, 1 from the end on.
    assert [schedule(s) for s in (0, 25_000, 50_000, 60_000)] == pytest.approx([0.4, 0.7, 1, 1])
    written_out = LinearSchedule(start=0.4, end=1.0, duration=50_000)
    assert all(schedule(s) == written_out(s) for s in range(0, 60_000, 997))  # the same floats
    own = LinearSchedule(start=1.0, end=0.04, duration=8000)
    own.set_run_length(50_000)  # a duration of its own stays: 1 + 0.5 * (0.04 - 1) at 4000
    assert own(4000) == pytest.approx(0.52)


def test_an_exploration_probability_is_checked_at_its_ends_before_the_run_s_length_is_known():
    check_probability_schedule("DQNAgent.epsilon", LinearSchedule(1.0, 0.05, duration=None))
    with pytest.raises(ValueError, match=r"probability of 2 at the run's end"):
        check_probability_schedule("DQNAgent.epsilon", LinearSchedule(1.0, 2.0, duration=None))


class _CountedGreedy:
    """A network's greedy actions, counting how often it is run."""

    def __init__(self, actions: np.ndarray):
        self.actions, self.calls = actions, 0

    def __call__(self) -> np.ndarray:
        self.calls += 1
        return self.actions.copy()


@pytest.mark.parametrize("num_envs", [1, 5])
@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0])
def test_epsilon_greedy_draws_as_if_the_network_always_ran(num_envs, epsilon):
    """Skipping the network while every sub-environment explores leaves the actions and the
    generator exactly where computing the greedy actions first would."""
    greedy = np.argmax(np.eye(3)[np.arange(num_envs) % 3], axis=-1)  # a network's argmax
    rng, reference_rng = np.random.default_rng(7), np.random.default_rng(7)
    for _ in range(50):
        actions = epsilon_greedy(_CountedGreedy(greedy), num_envs, epsilon, 4, rng)
        expected = greedy.copy()
        if epsilon > 0:
            explores = reference_rng.random(num_envs) < epsilon
            expected[explores] = reference_rng.integers(4, size=np.count_nonzero(explores))
        np.testing.assert_array_equal(actions, expected)
        assert actions.dtype == expected.dtype
    assert rng.random() == reference_rng.random()


def test_epsilon_greedy_runs_the_network_only_when_an_action_is_greedy():
    rng = np.random.default_rng(0)
    network = _CountedGreedy(np.zeros(3, dtype=np.int64))
    for _ in range(20):
        epsilon_greedy(network, 3, 1.0, 4, rng)
    assert network.calls == 0
    epsilon_greedy(network, 3, 0.0, 4, rng)
    assert network.calls == 1
    # At epsilon 0.5 a step runs it unless all three explore (1 in 8 on average).
    calls = []
    for _ in range(400):
        before = network.calls
        epsilon_greedy(network, 3, 0.5, 4, rng)
        calls.append(network.calls - before)
    assert set(calls) == {0, 1}
    assert 0.05 < calls.count(0) / len(calls) < 0.2
