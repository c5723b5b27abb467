"""A uniformly random policy on a config's evaluation environment: the expected return it must
give where the maths knows it, reproducible by its seed, and bad input in one paragraph."""

import numpy as np
import pytest

from experiments import RunError
from experiments.random_baseline import random_returns

BANDIT = "gin_configs/reinforce/bandit.gin"
MEANS = [0.2, 0.5, 0.9, 0.4]  # the config's arms: an evaluation counts the pulled arm's mean


def test_a_random_policy_on_the_bandit_earns_the_mean_of_its_arms():
    result = random_returns(BANDIT, [], episodes=4000, seed=0)
    returns = np.array(result.returns)
    assert set(np.round(returns, 6)) == set(MEANS)  # one pull an episode, its arm's mean
    shares = [np.mean(np.isclose(returns, arm)) for arm in MEANS]
    np.testing.assert_allclose(shares, 0.25, atol=0.03)  # each arm a quarter of the pulls
    # Expected 0.5 = mean(MEANS); the std of one pull's mean is 0.255, over 4,000 pulls 0.004.
    assert result.mean_return == pytest.approx(np.mean(MEANS), abs=0.02)


def test_the_same_seed_gives_the_same_episodes_and_another_seed_others():
    first, again = (random_returns(BANDIT, [], episodes=50, seed=3) for _ in range(2))
    other = random_returns(BANDIT, [], episodes=50, seed=4)
    assert first.returns == again.returns
    assert first.returns != other.returns


def test_an_unknown_environment_is_one_paragraph():
    with pytest.raises(RunError, match=r"Unknown environment id 'Nope-v0'"):
        random_returns(BANDIT, ["make_env.env_id = 'Nope-v0'"], episodes=1, seed=0)
