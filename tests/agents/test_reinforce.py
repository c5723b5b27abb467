"""REINFORCE: returns-to-go by hand, and learning that really happens (bandit, CartPole)."""

import numpy as np
import pytest

from agents.reinforce import discounted_returns
from framework.storage.event_reader import read_scalars
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
    # The config evaluates the policy itself: 100 pulls sampled from it, each counting its arm's
    # mean, estimate its expected payoff sum_a pi(a) mean(a).
    expected = sum(probabilities[f"policy/prob_{arm}"] * mean for arm, mean in enumerate(means))
    ((_, evaluated),) = runner.eval_returns
    assert evaluated == pytest.approx(expected, abs=0.1)


def test_a_learning_rate_sweep_on_the_bandit_evaluates_its_trials_apart(tmp_path):
    """A greedy evaluation of one sampled payoff gave every rate that soon prefers the best arm
    the same eval return; the policy's expected payoff tells a fast learner from a slow one."""
    short = ["Runner.num_steps = 300", "Runner.eval_interval = 300"]
    evaluated = {}
    for rate in (1e-2, 1e-4):
        runner = train(
            tmp_path / str(rate),
            ["gin_configs/reinforce/bandit.gin"],
            [*short, f"optimizers.Adam.learning_rate = {rate}"],
        )
        ((_, evaluated[rate]),) = runner.eval_returns
    assert evaluated[1e-2] > evaluated[1e-4] + 0.1, evaluated
    assert 0.2 < evaluated[1e-4] < evaluated[1e-2] < 0.9 + 1e-9  # the arms pay 0.2 to 0.9


def test_a_sampled_evaluation_draws_from_the_evaluation_generator():
    from agents.reinforce import ReinforceAgent
    from framework.parts.environments import MultiArmedBanditEnv

    env = MultiArmedBanditEnv()
    agent = ReinforceAgent(env.observation_space, env.action_space, 0, greedy_evaluation=False)
    observations = np.ones((200, 1), np.float32)  # the policy starts near uniform
    agent.seed_evaluation(7)
    first = agent.act(observations, explore=False)
    training = agent.rng.bit_generator.state
    agent.seed_evaluation(7)
    np.testing.assert_array_equal(agent.act(observations, explore=False), first)
    assert len(set(first.tolist())) == env.action_space.n  # sampled, not the argmax
    assert agent.rng.bit_generator.state == training  # training's generator untouched
    greedy = ReinforceAgent(env.observation_space, env.action_space, 0)
    assert len(set(greedy.act(observations, explore=False).tolist())) == 1


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
