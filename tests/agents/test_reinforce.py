"""REINFORCE: returns-to-go by hand, and learning that really happens (bandit, CartPole)."""

import numpy as np
import pytest

from agents.reinforce import discounted_returns
from framework.event_reader import read_scalars
from tests.runs import train


def test_discounted_returns_by_hand():
    # gamma = 0.5, rewards 1, 2, 4: G_2 = 4, G_1 = 2 + 0.5 * 4 = 4, G_0 = 1 + 0.5 * 4 = 3.
    np.testing.assert_allclose(discounted_returns(np.array([1.0, 2.0, 4.0]), 0.5), [3.0, 4.0, 4.0])


@pytest.mark.parametrize(
    "means",
    [
        [0.2, 0.5, 0.9, 0.4],
        [1.0, 0.0, -0.5, 0.3],  # best arm first
        [-1.0, -0.5, -0.2, -2.0],  # every payoff negative
        [0.5, 0.7, 0.1, 0.8],  # two close arms: 0.7 and 0.8, std 0.5
    ],
)
def test_bandit_policy_moves_mass_to_best_arm(tmp_path, means):
    runner = train(
        tmp_path,
        ["gin_configs/reinforce/bandit.gin"],
        [f"MultiArmedBanditEnv.means = {means}", "Runner.eval_interval = 5000"],
    )
    probabilities = runner.agent.diagnostics(np.ones(1, np.float32))
    best = int(np.argmax(means))
    assert probabilities[f"policy/prob_{best}"] > 0.9, probabilities


@pytest.mark.parametrize("num_envs", [1, 8])
def test_cartpole_return_rises_well_above_random(tmp_path, num_envs):
    # A uniformly random policy averages ~22 steps on CartPole-v1.
    runner = train(
        tmp_path,
        ["gin_configs/reinforce/cartpole.gin"],
        [
            "Runner.num_steps = 30000",
            "Runner.eval_interval = 10000",
            f"Runner.num_envs = {num_envs}",
        ],
    )
    best_eval = max(value for _, value in runner.eval_returns)
    assert best_eval > 150, runner.eval_returns
    train_returns = [value for _, value in read_scalars(tmp_path)["train/episode_return"]]
    assert np.mean(train_returns[-20:]) > 3 * np.mean(train_returns[:20])
