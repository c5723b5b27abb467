"""n-step returns and GAE over a vector-env rollout [T, N], by hand, across dones; the rollout."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from framework.agent import VectorStep
from framework.parts.returns import GAE, NStepReturns, Rollout

# T = 4 steps of N = 3 sub-environments, gamma = 0.5. Columns are sub-environments:
#   env 0 runs through the whole rollout; env 1 terminates at t = 1 (its row 2 is the first of
#   a new episode, after the autoreset); env 2 is truncated at t = 2, and the value of its final
#   observation (handed in as V(s'_2)) is 6.
REWARDS = np.array([[1, 1, 1], [1, 2, 1], [1, 3, 1], [1, 4, 1]], np.float32)
TERMINATED = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]], np.float32)
TRUNCATED = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]], np.float32)
# V(s'_t): 100 where n-step returns must not read it (the episode carries on to row t + 1
# inside the rollout, or terminated); the rollout's last row bootstraps from 8, 40 and 2.
NEXT_VALUES = np.array([[100, 100, 100], [100, 100, 100], [100, 30, 6], [8, 40, 2]], np.float32)
VALUES = np.zeros((4, 3), np.float32)


def test_n_step_returns_by_hand_across_a_termination_a_truncation_and_the_rollout_end():
    returns, advantages = NStepReturns()(REWARDS, VALUES, NEXT_VALUES, TERMINATED, TRUNCATED, 0.5)
    # env 0: G_3 = 1 + .5 * 8 = 5, G_2 = 1 + .5 * 5 = 3.5, G_1 = 2.75, G_0 = 2.375.
    # env 1: G_1 = 2 (terminated: no bootstrap, nothing from the next episode), G_0 = 1 + 1 = 2;
    #        the new episode: G_3 = 4 + .5 * 40 = 24, G_2 = 3 + .5 * 24 = 15.
    # env 2: G_3 = 1 + .5 * 2 = 2; G_2 = 1 + .5 * 6 = 4 (the final observation, not row 3),
    #        G_1 = 1 + .5 * 4 = 3, G_0 = 1 + .5 * 3 = 2.5.
    expected = [[2.375, 2, 2.5], [2.75, 2, 3], [3.5, 15, 4], [5, 24, 2]]
    np.testing.assert_allclose(returns, expected, rtol=1e-6)
    np.testing.assert_allclose(advantages, expected, rtol=1e-6)  # V(s_t) = 0 here


def test_n_step_advantages_subtract_the_values():
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    returns, advantages = NStepReturns()(REWARDS, values, NEXT_VALUES, TERMINATED, TRUNCATED, 0.5)
    np.testing.assert_allclose(advantages, returns.numpy() - values, rtol=1e-6)


def test_gae_by_hand_across_a_termination_and_a_truncation():
    # T = 3, N = 2, gamma = 0.5, lambda = 0.5 (gamma * lambda = 0.25).
    rewards = np.array([[1, 0], [1, 2], [1, 0]], np.float32)
    values = np.array([[2, 1], [4, 2], [6, 3]], np.float32)
    terminated = np.array([[0, 0], [1, 0], [0, 0]], np.float32)
    truncated = np.array([[0, 1], [0, 0], [0, 0]], np.float32)
    # env 0 terminates at t = 1 (its final observation's 99 is never read); env 1 is truncated
    # at t = 0 with V(final observation) = 10. Elsewhere V(s'_t) = V(s_{t+1}), and the last
    # row bootstraps from 8 and 4.
    next_values = np.array([[4, 10], [99, 3], [8, 4]], np.float32)
    returns, advantages = GAE(lambda_=0.5)(rewards, values, next_values, terminated, truncated, 0.5)
    # env 0: delta = [1 + 2 - 2, 1 - 4, 1 + 4 - 6] = [1, -3, -1];
    #        A_2 = -1, A_1 = -3 (cut at the termination), A_0 = 1 + .25 * -3 = 0.25.
    # env 1: delta = [0 + 5 - 1, 2 + 1.5 - 2, 0 + 2 - 3] = [4, 1.5, -1];
    #        A_2 = -1, A_1 = 1.5 + .25 * -1 = 1.25, A_0 = 4 (cut at the truncation).
    np.testing.assert_allclose(advantages, [[0.25, 4], [-3, 1.25], [-1, -1]], rtol=1e-6)
    np.testing.assert_allclose(returns, [[2.25, 5], [1, 3.25], [5, 2]], rtol=1e-6)


def test_gae_with_lambda_one_is_the_n_step_return_and_zero_the_one_step_target():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(4, 3)).astype(np.float32)
    # Consistent next values: V(s'_t) = V(s_{t+1}) where the episode carries on.
    next_values = NEXT_VALUES.copy()
    carries_on = (TERMINATED[:-1] + TRUNCATED[:-1]) == 0
    next_values[:-1][carries_on] = values[1:][carries_on]
    args = (REWARDS, values, next_values, TERMINATED, TRUNCATED, 0.5)
    n_step, _ = NStepReturns()(*args)
    np.testing.assert_allclose(GAE(lambda_=1.0)(*args).returns, n_step, rtol=1e-5, atol=1e-6)
    one_step = REWARDS + 0.5 * (1 - TERMINATED) * next_values
    np.testing.assert_allclose(GAE(lambda_=0.0)(*args).returns, one_step, rtol=1e-6)


@pytest.mark.parametrize("part", [NStepReturns(), GAE()], ids=["n_step", "gae"])
def test_no_gradient_flows_into_returns_or_advantages(part):
    values = tf.Variable(np.ones((4, 3), np.float32))
    next_values = tf.Variable(NEXT_VALUES)
    with tf.GradientTape(persistent=True) as tape:
        returns, advantages = part(REWARDS, values, next_values, TERMINATED, TRUNCATED, 0.5)
        total = tf.reduce_sum(returns) + tf.reduce_sum(advantages)
    assert tape.gradient(total, [values, next_values]) == [None, None]


def test_gae_rejects_lambda_outside_the_unit_interval():
    with pytest.raises(ValueError, match=r"GAE\.lambda_"):
        GAE(lambda_=1.5)


def _step(t, num_envs=2):
    observation = np.full((num_envs, 2), t, np.float32)
    done = np.array([t == 1, False])
    return VectorStep(
        observation, np.full(num_envs, t), np.full(num_envs, float(t)), observation + 1,
        done, np.zeros(num_envs, bool),
    )  # fmt: skip


def test_rollout_fills_rows_takes_them_and_resumes_from_its_state():
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    rollout = Rollout(3, space)
    for t in range(2):
        rollout.add(_step(t))
    assert not rollout.full
    saved = rollout.state()
    resumed = Rollout(3, space)
    resumed.load_state(saved)
    for part in (rollout, resumed):
        part.add(_step(2))
        assert part.full
    batch, again = rollout.take(), resumed.take()
    assert rollout.steps == 0
    for name in Rollout.TRANSITION:
        np.testing.assert_array_equal(batch[name], again[name])
    assert batch["observation"].shape == (3, 2, 2)
    np.testing.assert_array_equal(batch["action"][:, 0], [0, 1, 2])
    np.testing.assert_array_equal(batch["terminated"][:, 0], [0, 1, 0])
    with pytest.raises(RuntimeError, match="1 of 3"):
        rollout.add(_step(0))
        rollout.take()


def test_interrupted_episodes_end_truncated_at_the_last_row_so_far():
    rollout = Rollout(3, gym.spaces.Box(-1, 1, (2,), np.float32))
    rollout.end_episodes()  # nothing stored: nothing to mark
    rollout.add(_step(0))
    rollout.add(_step(2))
    rollout.end_episodes()
    np.testing.assert_array_equal(rollout.state()["truncated"][:, 0], [0, 1, 0])
