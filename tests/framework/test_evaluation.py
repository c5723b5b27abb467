"""Evaluation episodes (framework/loop.py's `evaluate`): an environment's expected reward, where it
gives one, counts instead of the sampled reward."""

import gymnasium

from framework import loop
from framework.parts.environments import MultiArmedBanditEnv


class _SampledOnly(gymnasium.Wrapper):
    """The bandit without its expected reward in `info`."""

    def step(self, action):
        observation, reward, terminated, truncated, _ = self.env.step(action)
        return observation, reward, terminated, truncated, {}


def test_an_evaluation_counts_the_expected_reward_where_the_environment_gives_one():
    bandit = MultiArmedBanditEnv(means=(0.2, 0.5, 0.9, 0.4), stds=0.5)
    for seed in (0, 1):  # whatever the draws: arm 2 pays 0.9 in expectation
        result = loop.evaluate(bandit, lambda observation: 2, 5, seed, step=100)
        assert result.returns == (0.9,) * 5 and result.std_return == 0.0
    # Without it, the sampled payoffs (std 0.5 about 0.9) as before.
    sampled = loop.evaluate(_SampledOnly(bandit), lambda observation: 2, 5, 0, step=100)
    assert len(set(sampled.returns)) == 5 and 0.9 not in sampled.returns
