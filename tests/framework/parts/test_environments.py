"""Tests for framework/environments.py: the bandit, the id check and the Atari preprocessing."""

import os
import re
import subprocess
import sys
import warnings

import gin
import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from framework import env_state
from framework.parts.environments import (
    BANDIT_ID,
    MultiArmedBanditEnv,
    UnknownEnvironmentError,
    make_atari_env,
    make_env,
)

# The spec asks for Box(low=1, high=1): the constant observation is the point, not a bug.
_EQUAL_BOUNDS = "ignore:.*maximum and minimum values are equal"


@pytest.fixture
def clean_gin():
    """Leaves no binding behind for the other tests, whatever this one parsed."""
    gin.clear_config()
    yield
    gin.clear_config()


def _rewards(env: gymnasium.Env, seed: int, actions: list[int]) -> list[float]:
    """One reward per episode, seeding only the first reset, as a training loop does."""
    env.reset(seed=seed)
    rewards = []
    for action in actions:
        _, reward, _, _, _ = env.step(action)
        rewards.append(reward)
        env.reset()
    return rewards


@pytest.mark.filterwarnings(_EQUAL_BOUNDS)
@pytest.mark.filterwarnings("ignore:.*alternative render modes")
def test_bandit_passes_check_env():
    check_env(MultiArmedBanditEnv())
    check_env(gymnasium.make(BANDIT_ID).unwrapped)


def test_bandit_observation_is_constant_and_one_step_terminates():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a one-point Box on purpose: no checker to warn of it
        env = make_env(BANDIT_ID)
        env.reset(seed=0)
        env.step(0)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [1.0])
    for arm in range(env.action_space.n):
        obs, reward, terminated, truncated, info = env.step(arm)
        np.testing.assert_array_equal(obs, [1.0])
        assert obs.dtype == np.float32
        assert isinstance(reward, float)
        assert terminated and not truncated
        assert info["arm_mean"] == info["expected_reward"] == env.unwrapped.means[arm]
        env.reset()


def test_bandit_seeding_is_reproducible():
    actions = [i % 4 for i in range(200)]
    first = _rewards(MultiArmedBanditEnv(), seed=7, actions=actions)
    assert first == _rewards(MultiArmedBanditEnv(), seed=7, actions=actions)
    assert first != _rewards(MultiArmedBanditEnv(), seed=8, actions=actions)


def test_bandit_arm_rewards_match_configured_means():
    means, stds, pulls = [0.1, -0.5, 0.9, 0.3], [1.0, 0.5, 2.0, 0.0], 2000
    env = MultiArmedBanditEnv(means=means, stds=stds)
    for arm, (mean, std) in enumerate(zip(means, stds, strict=True)):
        rewards = _rewards(env, seed=arm, actions=[arm] * pulls)
        # Means are at least 0.2 apart, more than 4 standard errors (std / sqrt(2000) <= 0.045) of
        # any arm, so a reward drawn from the wrong arm's mean fails this check.
        standard_error = std / np.sqrt(pulls)
        assert abs(np.mean(rewards) - mean) <= 4 * standard_error + 1e-12
        assert np.std(rewards) == pytest.approx(std, rel=0.1)


def test_bandit_gin_bindings_reach_make_env(clean_gin):
    gin.parse_config(
        """
        MultiArmedBanditEnv.means = [0.1, 0.5, 0.2, 0.9, 0.3]
        MultiArmedBanditEnv.stds = 0.0
        """
    )
    env = make_env(BANDIT_ID)
    assert env.action_space.n == 5
    env.reset(seed=0)
    _, reward, *_ = env.step(3)
    assert reward == 0.9


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"means": [0.5]}, "[0.5]"),
        ({"stds": [1.0, 1.0]}, "[1.0, 1.0]"),
        ({"stds": [1.0, -0.1, 1.0, 1.0]}, "-0.1"),
        ({"stds": -1.0}, "-1.0"),
    ],
)
def test_bandit_rejects_bad_arguments(kwargs, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        MultiArmedBanditEnv(**kwargs)


def test_bandit_rejects_action_outside_arms():
    env = MultiArmedBanditEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action=4"):
        env.step(4)


def test_make_env_applies_max_episode_steps():
    env = make_env("CartPole-v1", max_episode_steps=5)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(4):
        *_, truncated, _ = env.step(0)
        assert not truncated
    *_, truncated, _ = env.step(0)
    # Pushing left for 5 steps cannot topple the pole, so the episode ends by the time limit.
    assert truncated


def test_a_mujoco_model_builds_without_a_line_from_mujoco(tmp_path, monkeypatch, capfd):
    """Gymnasium's HalfCheetah model sets `settotalmass`, which MuJoCo 3.x deprecates: it printed
    its warning at every environment built, and appended it to MUJOCO_LOG.TXT in the working
    folder."""
    pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)

    env = make_env("HalfCheetah-v5")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()

    out, err = capfd.readouterr()
    assert "settotalmass" not in out + err
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.parametrize(
    ("env_id", "suggested"), [("CartPol-v1", "CartPole-v1"), ("ALE/Pongg-v5", "ALE/Pong-v5")]
)
def test_unknown_id_names_it_and_suggests_matches(env_id, suggested):
    with pytest.raises(UnknownEnvironmentError) as raised:
        make_env(env_id)
    message = str(raised.value)
    assert repr(env_id) in message
    assert repr(suggested) in message
    assert "gymnasium.pprint_registry()" in message
    assert isinstance(raised.value, ValueError)


def test_make_atari_env_rejects_unknown_id():
    with pytest.raises(UnknownEnvironmentError, match="ALE/Pong-v5"):
        make_atari_env("ALE/Pongg-v5")


def _run_atari(seed: int, steps: int) -> list[np.ndarray]:
    env = make_atari_env("ALE/Pong-v5")
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    observations = [obs]
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
        observations.append(obs)
    env.close()
    return observations


def test_atari_observations_are_stacked_uint8_channels_last():
    observations = _run_atari(seed=0, steps=30)
    for obs in observations:
        assert obs.shape == (80, 80, 4)
        assert obs.dtype == np.uint8
    assert make_atari_env().observation_space.shape == (80, 80, 4)
    # After some steps the paddles and ball have moved, so the stacked frames must differ.
    last = observations[-1]
    assert any(not np.array_equal(last[..., i], last[..., -1]) for i in range(3))
    # Channel i holds the frame that was newest (channel 3) 3 - i steps ago: oldest first, and
    # an axis mix-up (stacking rows or columns) breaks this.
    for t in range(3, len(observations)):
        for i in range(3):
            np.testing.assert_array_equal(observations[t][..., i], observations[t - 3 + i][..., 3])


def test_atari_seeding_is_reproducible():
    first = _run_atari(seed=3, steps=20)
    second = _run_atari(seed=3, steps=20)
    for obs_a, obs_b in zip(first, second, strict=True):
        np.testing.assert_array_equal(obs_a, obs_b)


def test_building_an_atari_env_prints_no_banner_and_its_errors_still_surface():
    # ALE prints its banner from C++ at the first emulator a process builds: a fresh process.
    script = (
        "from framework.parts.environments import make_atari_env\n"
        "make_atari_env('ALE/Pong-v5').reset(seed=0)\n"
        "print('built')\n"
        "make_atari_env('ALE/Pong-v5', env_kwargs={'mode': 99})\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.stdout == "built\n"
    assert "A.L.E" not in done.stderr and "Stella" not in done.stderr, done.stderr
    assert done.returncode != 0 and "Invalid game mode requested" in done.stderr


# ----- MinAtar ---------------------------------------------------------------------------------


def test_minatar_ids_register_give_boolean_planes_and_take_the_paper_s_settings(recwarn):
    env = make_env(
        "MinAtar/Asterix-v0", env_kwargs={"sticky_action_prob": 0.1, "difficulty_ramping": True}
    )
    observation, _ = env.reset(seed=0)
    assert observation.dtype == bool and observation.shape == (10, 10, 4)
    assert env.action_space == gymnasium.spaces.Discrete(6)  # -v0: all 6 actions
    game = env.unwrapped.game
    assert game.sticky_action_prob == 0.1 and game.env.ramping is True  # Breakout has no ramp
    assert make_env("MinAtar/Breakout-v1").action_space == gymnasium.spaces.Discrete(3)  # minimal
    # gymnasium's "out of date" warning for -v0 (the full action set, not an older -v1): off.
    assert not [w for w in recwarn if "out of date" in str(w.message)]


def test_minatar_resumes_exactly_from_its_state_saved_as_data(tmp_path):
    def build():
        return make_env("MinAtar/Asterix-v0", env_kwargs={"sticky_action_prob": 0.1})

    env = build()
    env.reset(seed=0)
    assert env_state.how_saved(env)[0] == "data"
    actions = np.random.default_rng(0).integers(0, 6, 400)
    for action in actions[:150]:
        if env.step(action)[2]:
            env.reset()
    state = env_state.unpack(env_state.pack(env_state.capture(env)))
    fresh = build()
    fresh.reset(seed=9)
    env_state.restore(fresh, state)
    # The game and MinAtar's wrapper around it share one RandomState, restored in place.
    game = fresh.unwrapped.game
    assert game.random is game.env.random
    for action in actions[150:]:
        expected, got = env.step(action), fresh.step(action)
        np.testing.assert_array_equal(expected[0], got[0])
        assert expected[1:3] == got[1:3]
        if expected[2]:
            np.testing.assert_array_equal(env.reset()[0], fresh.reset()[0])
