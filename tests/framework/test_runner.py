"""The runner: same seed, same numbers; a different seed, different numbers; no retracing."""

import numpy as np

from framework.event_reader import read_scalars
from tests.runs import train

CARTPOLE_DQN = ["gin_configs/dqn/cartpole.gin"]
SHORT_DQN = [
    "Runner.num_steps = 2000",
    "Runner.eval_interval = 1000",
    "Runner.eval_episodes = 2",
    "DQNAgent.train_freq = 100",
    "DQNAgent.gradient_steps = 8",
]


def _returns_and_weights(base_dir, seed):
    runner = train(base_dir, CARTPOLE_DQN, [*SHORT_DQN, f"Runner.seed = {seed}"])
    returns = read_scalars(base_dir)["train/episode_return"]
    return runner, returns, runner.agent.online.get_weights()


def test_same_seed_same_returns_and_weights_different_seed_differs(tmp_path):
    _, returns_a, weights_a = _returns_and_weights(tmp_path / "a", seed=7)
    _, returns_b, weights_b = _returns_and_weights(tmp_path / "b", seed=7)
    _, returns_c, weights_c = _returns_and_weights(tmp_path / "c", seed=8)
    assert returns_a == returns_b
    for a, b in zip(weights_a, weights_b, strict=True):
        np.testing.assert_array_equal(a, b)
    assert returns_a != returns_c
    assert not np.array_equal(weights_a[0], weights_c[0])


def test_learner_traces_once_over_a_whole_run(tmp_path):
    runner, _, _ = _returns_and_weights(tmp_path, seed=0)
    # 2000 steps, training every 100 after 1000 warm-up steps: 11 learner calls, one trace.
    assert int(runner.agent.learner.applied_updates.numpy()) == 11 * 8
    assert runner.agent.learner.tracing_count == 1


def test_reinforce_learner_traces_once_despite_varying_episode_lengths(tmp_path):
    runner = train(
        tmp_path,
        ["gin_configs/reinforce/cartpole.gin"],
        ["Runner.num_steps = 3000", "Runner.eval_interval = 3000", "Runner.eval_episodes = 1"],
    )
    assert int(runner.agent.learner.applied_updates.numpy()) > 10
    assert runner.agent.learner.tracing_count == 1
