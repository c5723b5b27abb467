"""One contract over every driver: advance to the first count at or past a step, stop when asked,
and a state that round-trips through the checkpoint store bitwise (and, where the driver is
deterministic, continues exactly as the driver it was saved from)."""

import functools

import gymnasium as gym
import numpy as np
import pytest

from agents.a2c import A2CAgent
from agents.dqn import DQNAgent
from framework.drivers import backends
from framework.drivers.asynchronous import AsynchronousDriver
from framework.drivers.driver import Driver, Seeds
from framework.drivers.synchronous import SynchronousDriver
from framework.parts.environments import make_env
from framework.parts.replay_schedule import ReplaySchedule
from framework.storage.checkpointing import CheckpointStore
from tests.checkpoint_contents import assert_same_contents, saved_contents

CARTPOLE = functools.partial(make_env, "CartPole-v1", max_episode_steps=30)
SEEDS = Seeds(agent=11, env=12, reset=13)


class NaNRewards(gym.Wrapper):
    """CartPole whose every reward is NaN: any loss that reads one is NaN."""

    def step(self, action):
        observation, _, terminated, truncated, info = self.env.step(action)
        return observation, float("nan"), terminated, truncated, info


def _nan_cartpole() -> gym.Env:
    return NaNRewards(CARTPOLE())


# name -> (build from an env factory, transitions per unit of progress, deterministic)
DRIVERS = {
    "synchronous": (
        lambda env_factory: SynchronousDriver(
            functools.partial(
                DQNAgent,
                schedule=ReplaySchedule(
                    learning_starts=20, train_freq=8, gradient_steps=1, batch_size=8
                ),
            ),
            env_factory,
            num_envs=2,
            seeds=SEEDS,
        ),
        2,  # a vector step of 2 sub-environments
        True,
    ),
    "asynchronous, in turn": (
        lambda env_factory: AsynchronousDriver(
            A2CAgent, env_factory, 1, SEEDS, num_workers=2, backend=backends.RoundRobin
        ),
        5,  # a push: one rollout of 5 vector steps of 1 sub-environment
        True,
    ),
    "asynchronous, threads": (
        lambda env_factory: AsynchronousDriver(
            A2CAgent, env_factory, 1, SEEDS, num_workers=2, backend=backends.Threads
        ),
        5,
        False,
    ),
}


@pytest.fixture(params=sorted(DRIVERS))
def case(request):
    build, unit, deterministic = DRIVERS[request.param]
    drivers = []

    def new(env_factory=CARTPOLE) -> Driver:
        drivers.append(build(env_factory))
        return drivers[-1]

    yield new, unit, deterministic
    for driver in drivers:
        driver.close()


def _never() -> bool:
    return False


def test_advance_reaches_the_first_count_at_or_past_until(case):
    new, unit, _ = case
    driver = new()
    progress = driver.advance(0, 33, _never)
    assert 33 <= progress.env_steps < 33 + unit and progress.env_steps % unit == 0
    steps = [step for step, _ in progress.episodes]
    assert steps == sorted(steps) and all(0 < step <= progress.env_steps for step in steps)
    assert progress.health.gradient_steps > 0 and progress.health.nonfinite_steps == 0
    again = driver.advance(progress.env_steps, progress.env_steps + 1, _never)
    assert again.env_steps == progress.env_steps + unit  # a count already reached goes one on
    metrics = driver.take_metrics()
    assert "train/loss" in metrics and all(np.isfinite(value) for value in metrics.values())
    assert "train/loss" not in driver.take_metrics()  # taken: nothing new was learned since


def test_advance_returns_right_after_a_nonfinite_update(case):
    new, _, _ = case
    progress = new(_nan_cartpole).advance(0, 10_000, _never)
    assert progress.env_steps < 100, progress.env_steps  # the first update: the runner decides
    assert progress.last_update.nonfinite_steps > 0 and progress.last_update.nonfinite_losses > 0
    assert progress.health.applied_updates == 0  # nothing non-finite was applied


def test_advance_returns_after_one_unit_once_asked_to_stop(case):
    new, unit, _ = case
    progress = new().advance(0, 10_000, lambda: True)
    assert progress.env_steps == unit


def test_state_round_trips_through_the_checkpoint_store(case, tmp_path):
    new, _, deterministic = case
    saved = new()
    reached = saved.advance(0, 40, _never).env_steps
    store = CheckpointStore(str(tmp_path / "store"), str(tmp_path / "store" / "damaged"))
    store.save(reached, saved.state())
    restored = new()
    before = saved_contents(restored.state(), tmp_path / "before")
    step, state = store.restore_latest(restored.state())
    assert step == reached and restored.load_state(state, step) == deterministic
    expected = saved_contents(saved.state(), tmp_path / "expected")
    assert_same_contents(saved_contents(restored.state(), tmp_path / "restored"), expected)
    with pytest.raises(AssertionError):  # a check that can fail: training moved the weights
        assert_same_contents(before, expected)
    if deterministic:  # and it carries on as the driver it was saved from
        a, b = (driver.advance(reached, reached + 40, _never) for driver in (saved, restored))
        assert (a.env_steps, a.health) == (b.env_steps, b.health)
        assert [(s, e.returns.tolist()) for s, e in a.episodes] == [
            (s, e.returns.tolist()) for s, e in b.episodes
        ]
        assert_same_contents(
            saved_contents(restored.state(), tmp_path / "restored_later"),
            saved_contents(saved.state(), tmp_path / "expected_later"),
        )
