"""The vectorised CartPole: CartPole-v1 step for step with same-step resets, an exact resume
from a captured state, and the refusals of what it cannot stand in for."""

import gymnasium
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv

from framework import env_state
from framework.loop import make_vector_env
from framework.parts.environments import (
    SameStepCartPoleVectorEnv,
    make_env,
    vectorised_cartpole,
)


def _cartpole(limit: int = 30):
    return lambda: make_env("CartPole-v1", max_episode_steps=limit)


def test_steps_as_cartpole_v1_and_resets_in_the_step_that_ends_an_episode():
    factory = _cartpole(limit=30)
    vector = vectorised_cartpole(factory, 3)
    assert vector.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    singles = [factory() for _ in range(3)]
    observations, _ = vector.reset(seed=0)
    for index, env in enumerate(singles):
        env.reset(seed=index)
        env.unwrapped.state = vector.state[:, index].copy()  # the same start, then on their own
    rng = np.random.default_rng(0)
    ended = {"terminated": 0, "truncated": 0}
    for _ in range(300):
        # Sub-env 0 balances (its episodes reach the time limit), the others act at random.
        actions = rng.integers(0, 2, 3)
        actions[0] = int(observations[0, 3] > 0)
        observations, rewards, terminated, truncated, infos = vector.step(actions)
        for index, env in enumerate(singles):
            single, reward, term, trunc, _ = env.step(int(actions[index]))
            assert (rewards[index], terminated[index], truncated[index]) == (reward, term, trunc)
            if term or trunc:
                assert infos["_final_obs"][index]
                np.testing.assert_array_equal(infos["final_obs"][index], single)
                ended["terminated" if term else "truncated"] += 1
                # The new episode starts where CartPole's reset distribution puts it.
                assert np.all(np.abs(observations[index]) <= 0.05)
                env.reset()
                env.unwrapped.state = vector.state[:, index].copy()
            else:
                assert "_final_obs" not in infos or not infos["_final_obs"][index]
                np.testing.assert_array_equal(observations[index], single)
    assert ended["terminated"] > 5 and ended["truncated"] > 3, ended


def test_takes_the_reward_and_the_tightest_time_limit_of_the_factory():
    def factory():
        env = gymnasium.make("CartPole-v1", max_episode_steps=9, sutton_barto_reward=True)
        return gymnasium.wrappers.TimeLimit(env, max_episode_steps=1000)

    envs = vectorised_cartpole(factory, 2)
    assert envs.max_episode_steps == 9
    envs.reset(seed=0)
    steps = [envs.step(np.array([0, 1])) for _ in range(9)]
    *_, terminated, truncated, _ = steps[-1]
    assert np.all(terminated | truncated)
    rewards = np.array([step[1] for step in steps])
    terminations = np.array([step[2] for step in steps])
    np.testing.assert_array_equal(rewards, -terminations.astype(np.float32))  # Sutton & Barto


def _run(envs, actions):
    return [envs.step(action) for action in actions]


@pytest.mark.parametrize("right_after_an_end", [False, True])
def test_a_captured_state_resumes_exactly(right_after_an_end):
    factory = _cartpole(limit=25)
    envs = vectorised_cartpole(factory, 4)
    envs.reset(seed=3)
    rng = np.random.default_rng(1)
    for _ in range(17):
        *_, terminated, truncated, _ = envs.step(rng.integers(0, 2, 4))
    while right_after_an_end and not np.any(terminated | truncated):
        *_, terminated, truncated, _ = envs.step(rng.integers(0, 2, 4))
    assert env_state.how_saved(envs)[0] == "data"
    saved = env_state.unpack(env_state.pack(env_state.capture(envs)))
    actions = rng.integers(0, 2, (60, 4))
    expected = _run(envs, actions)
    other = vectorised_cartpole(factory, 4)
    other.reset(seed=99)
    env_state.restore(other, saved)
    got = _run(other, actions)
    assert sum(bool(np.any(step[2] | step[3])) for step in expected) > 3  # resets happened
    for want, have in zip(expected, got, strict=True):
        for a, b in zip(want[:4], have[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        assert want[4].keys() == have[4].keys()
        for key in want[4]:
            np.testing.assert_array_equal(want[4][key], have[4][key])


class _HeavyCartPole(CartPoleEnv):
    def __init__(self):
        super().__init__()
        self.gravity = 20.0


def _changed_gravity():
    env = make_env("CartPole-v1")
    env.unwrapped.gravity = 20.0
    return env


@pytest.mark.parametrize(
    "factory, named",
    [
        (lambda: make_env("MountainCar-v0"), "MountainCarEnv"),
        (lambda: gymnasium.wrappers.ClipReward(make_env("CartPole-v1"), 0, 0.5), "ClipReward"),
        (lambda: gymnasium.wrappers.TimeLimit(_HeavyCartPole(), 100), "_HeavyCartPole"),
        (_changed_gravity, r"differs from gymnasium's CartPole in \['gravity'\]"),
        (lambda: CartPoleEnv(), "has no time limit"),
    ],
)
def test_refuses_what_is_not_cartpole_as_gymnasium_builds_it(factory, named):
    with pytest.raises(ValueError, match=f"{named}.*vectorises only a CartPole"):
        vectorised_cartpole(factory, 2)


class _Undeclared(SameStepCartPoleVectorEnv):
    metadata = {}


@pytest.mark.parametrize(
    "vector_class, message",
    [
        (CartPoleVectorEnv, "CartPoleVectorEnv autoresets in mode .*NEXT_STEP"),
        (_Undeclared, "_Undeclared declares no autoreset_mode"),
    ],
)
def test_make_vector_env_refuses_a_vector_env_that_does_not_reset_in_the_same_step(
    vector_class, message
):
    with pytest.raises(ValueError, match=message):
        make_vector_env(_cartpole(), 2, vector_env=lambda _, n: vector_class(n))


def test_make_vector_env_refuses_a_vector_env_of_another_size():
    with pytest.raises(ValueError, match="has 3 sub-environments where 2 were asked for"):
        make_vector_env(_cartpole(), 2, vector_env=lambda _, n: SameStepCartPoleVectorEnv(n + 1))


def test_make_vector_env_refuses_a_vector_env_of_another_environment():
    with pytest.raises(ValueError, match=r"has spaces .* but the evaluation environment"):
        make_vector_env(
            lambda: make_env("MountainCar-v0"),
            2,
            vector_env=lambda _, n: SameStepCartPoleVectorEnv(n),
        )


def test_make_vector_env_builds_the_vectorised_cartpole_with_the_factory_time_limit():
    envs = make_vector_env(_cartpole(limit=7), 5, vector_env=vectorised_cartpole)
    assert isinstance(envs, SameStepCartPoleVectorEnv) and envs.num_envs == 5
    envs.reset(seed=0)
    for _ in range(6):
        *_, truncated, _ = envs.step(np.zeros(5, np.int64))  # the 6th step of each episode
    assert not truncated.any()
    *_, terminated, truncated, _ = envs.step(np.zeros(5, np.int64))
    assert np.all(truncated | terminated) and truncated.any()
