"""DQN: the composition's gradients, learning on CartPole, the soft-target swap, and Pong."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents.base import Transition
from agents.dqn import DQNAgent
from framework.parts.environments import make_env
from framework.event_reader import read_scalars
from framework.parts.target_updaters import SoftUpdate
from tests.runs import train


def _agent_with_replay(**kwargs) -> DQNAgent:
    env = make_env("CartPole-v1")
    agent = DQNAgent(env.observation_space, env.action_space, seed=0, **kwargs)
    observation, _ = env.reset(seed=0)
    for _ in range(200):
        action = agent.act(observation, explore=True)
        next_observation, reward, terminated, truncated, _ = env.step(action)
        agent.observe(
            Transition(observation, action, reward, next_observation, terminated, truncated)
        )
        observation = env.reset()[0] if terminated or truncated else next_observation
    return agent


def test_loss_gives_zero_gradient_to_target_network_and_nonzero_to_online():
    agent = _agent_with_replay()
    batch = agent.replay.sample(32, np.random.default_rng(0))
    with tf.GradientTape() as tape:
        loss, _ = agent._loss(batch)
    online, target = agent.online.trainable_variables, agent.target.trainable_variables
    grads = tape.gradient(loss, [*online, *target])
    online_grads, target_grads = grads[: len(online)], grads[len(online) :]
    assert all(g is None or not np.any(g.numpy()) for g in target_grads)
    assert all(np.any(g.numpy()) for g in online_grads)


def test_acting_path_matches_the_network():
    agent = _agent_with_replay(learning_starts=100, train_freq=100, gradient_steps=4)
    agent.update()  # changes the weights; the numpy copy must follow
    observations = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    greedy = [agent.act(o, explore=False) for o in observations]
    np.testing.assert_array_equal(greedy, np.argmax(agent.online(observations).numpy(), axis=-1))


def test_training_is_due_every_train_freq_steps_after_warmup():
    agent = _agent_with_replay(learning_starts=100, train_freq=50, gradient_steps=3)
    # 200 steps observed: due at 200 (a multiple of 50, past 100 warm-up).
    metrics = agent.update()
    assert float(metrics["applied_updates"]) == 3.0
    agent.steps += 1
    assert agent.update() == {}


def test_cartpole_return_rises_well_above_random(tmp_path):
    # A uniformly random policy averages ~22 steps on CartPole-v1.
    runner = train(
        tmp_path,
        ["gin_configs/dqn/cartpole.gin"],
        ["Runner.num_steps = 12000", "Runner.eval_interval = 3000", "Runner.eval_episodes = 5"],
    )
    assert max(value for _, value in runner.eval_returns) > 100, runner.eval_returns
    scalars = read_scalars(tmp_path)
    for tag in ("train/loss", "train/mean_q", "train/epsilon", "train/replay_size"):
        assert tag in scalars, sorted(scalars)


def test_soft_target_config_swaps_the_updater_and_updates_every_step(tmp_path):
    runner = train(
        tmp_path,
        ["gin_configs/dqn/cartpole_soft_target.gin"],
        ["Runner.num_steps = 1300", "Runner.eval_interval = 1300", "Runner.eval_episodes = 1"],
    )
    assert isinstance(runner.agent.learner.target_updater, SoftUpdate)
    scalars = read_scalars(tmp_path)
    # Since the log at step 1000: training calls at 1024 and 1280 of 128 gradient steps each;
    # the EMA target moves after every one of the 256.
    assert scalars["train/target_updates"][-1][1] == 256.0
    online = runner.agent.online.get_weights()
    target = runner.agent.target.get_weights()
    assert all(o.shape == t.shape for o, t in zip(online, target, strict=True))
    assert any(not np.allclose(o, t) for o, t in zip(online, target, strict=True))


def test_pong_pixel_path_runs(tmp_path):
    runner = train(
        tmp_path,
        ["gin_configs/dqn/pong.gin"],
        [
            "Runner.num_steps = 300",
            "Runner.eval_interval = 300",
            "Runner.eval_episodes = 1",
            "Runner.log_interval = 100",
            "make_atari_env.max_episode_steps = 100",
            "DQNAgent.learning_starts = 100",
            "UniformReplay.capacity = 1000",
        ],
    )
    assert isinstance(runner.env.action_space, gym.spaces.Discrete)
    stored = runner.agent.replay.sample(4, np.random.default_rng(0))["observation"]
    assert stored.dtype == np.uint8 and stored.shape == (4, 80, 80, 4)
    scalars = read_scalars(tmp_path)
    assert np.isfinite(scalars["train/loss"][-1][1])
    assert scalars["train/applied_updates"][-1][1] > 0
    assert "eval/episode_return" in scalars


def test_evaluation_uses_eval_epsilon_and_training_the_schedule():
    agent = _agent_with_replay(eval_epsilon=1.0)
    observation = np.zeros(4, np.float32)
    greedy = int(np.argmax(agent.online(observation[None]).numpy()))
    # eval_epsilon = 1: evaluation acts uniformly at random, so both actions appear.
    assert {agent.act(observation, explore=False) for _ in range(200)} == {0, 1}
    agent.eval_epsilon = 0.0
    assert {agent.act(observation, explore=False) for _ in range(50)} == {greedy}
    # Training after the 200 observed steps: epsilon = 1 - 200/10000 * 0.95 = 0.981.
    assert agent.epsilon(agent.steps) == pytest.approx(0.981)


def test_start_episode_closes_a_cut_off_episode_in_replay():
    agent = _agent_with_replay(n_step=3)
    agent.start_episode()  # the 200 steps may have stopped mid-episode too
    stored = len(agent.replay)
    observation = np.zeros(4, np.float32)
    for _ in range(2):  # two steps of an episode the run then stops in
        agent.observe(Transition(observation, 0, 1.0, observation, False, False))
    agent.start_episode()
    assert len(agent.replay) == stored + 2
