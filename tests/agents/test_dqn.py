"""DQN: the composition's gradients, learning on CartPole, the soft-target swap, Pong, and one
MinAtar update against the paper's computed independently."""

import gin
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import experiments
from agents.dqn import DQNAgent
from framework.agent import VectorStep
from framework.loop import make_vector_env
from framework.parts.environments import make_env
from framework.parts.exploration import LinearSchedule
from framework.parts.replay import FrameReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.target_updaters import SoftUpdate
from framework.storage.event_reader import read_scalars
from tests.runs import train


def _agent_with_replay(num_envs: int = 1, steps: int = 200, **kwargs) -> DQNAgent:
    envs = make_vector_env(lambda: make_env("CartPole-v1"), num_envs)
    agent = DQNAgent(envs.single_observation_space, envs.single_action_space, seed=0, **kwargs)
    observations, _ = envs.reset(seed=0)
    for _ in range(steps // num_envs):
        actions = agent.act(observations, explore=True)
        next_observations, rewards, terminated, truncated, infos = envs.step(actions)
        final = np.array(next_observations)
        for index in np.flatnonzero(terminated | truncated):
            final[index] = infos["final_obs"][index]
        agent.observe(VectorStep(observations, actions, rewards, final, terminated, truncated))
        observations = np.array(next_observations)
    return agent


def _one_step(observation, action, reward, terminated=False) -> VectorStep:
    return VectorStep(
        observation[None],
        np.array([action]),
        np.array([reward]),
        observation[None],
        np.array([terminated]),
        np.array([False]),
    )


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
    agent = _agent_with_replay(
        schedule=ReplaySchedule(
            learning_starts=100, train_freq=100, gradient_steps=4, batch_size=64
        )
    )
    agent.update(agent.steps)  # changes the weights; the numpy copy must follow
    observations = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    greedy = agent.act(observations, explore=False)  # one batched call for all 8
    np.testing.assert_array_equal(greedy, np.argmax(agent.online(observations).numpy(), axis=-1))


def test_training_is_due_every_train_freq_steps_after_warmup():
    agent = _agent_with_replay(
        schedule=ReplaySchedule(learning_starts=100, train_freq=50, gradient_steps=3, batch_size=64)
    )
    # Multiples of 50 crossed in 200 steps, from 100 on: 100, 150, 200 -> 3 calls' worth.
    _, health = agent.update(agent.steps)
    assert health.applied_updates == 9
    agent.observe(_one_step(np.zeros(4, np.float32), 0, 1.0))  # step 201: nothing due
    assert agent.update(agent.steps)[1].gradient_steps == 0


def test_a_vector_step_crossing_several_train_freq_multiples_trains_for_each():
    # 4 envs, train_freq 2, learning_starts 0: each vector step of 4 transitions crosses two
    # multiples of 2, so every update runs 2 * gradient_steps = 6 gradient steps, as 4 single
    # steps with N = 1 would (gradient steps per transition kept).
    agent = _agent_with_replay(
        num_envs=4,
        steps=8,
        schedule=ReplaySchedule(learning_starts=0, train_freq=2, gradient_steps=3, batch_size=64),
    )
    agent.update(agent.steps)  # trains for what the first 8 transitions made due
    agent.observe(
        VectorStep(
            np.zeros((4, 4), np.float32),
            np.zeros(4, np.int64),
            np.ones(4),
            np.zeros((4, 4), np.float32),
            np.zeros(4, bool),
            np.zeros(4, bool),
        )
    )
    assert agent.update(agent.steps)[1].gradient_steps == 6


@pytest.mark.parametrize("num_envs", [1, 4])
def test_cartpole_return_rises_well_above_random(tmp_path, num_envs):
    # A uniformly random policy averages ~22 steps on CartPole-v1.
    runner = train(
        tmp_path,
        ["gin_configs/dqn/cartpole.gin"],
        [
            "Runner.num_steps = 12000",
            "Runner.eval_interval = 3000",
            "Runner.eval_episodes = 5",
            f"Runner.num_envs = {num_envs}",
        ],
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
    assert isinstance(runner.agent.learner.groups[0].target_updater, SoftUpdate)
    scalars = read_scalars(tmp_path)
    # Training calls at 1024 and 1280 of 128 gradient steps each; the EMA target moves after
    # every one of the 256.
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
            "ReplaySchedule.learning_starts = 100",
            "FrameReplay.capacity = 1000",
        ],
    )
    assert isinstance(runner.driver.loop.envs.single_action_space, gym.spaces.Discrete)
    assert isinstance(runner.agent.replay, FrameReplay)  # each frame stored once
    stored = runner.agent.replay.sample(4, np.random.default_rng(0))["observation"]
    assert stored.dtype == np.uint8 and stored.shape == (4, 80, 80, 4)
    scalars = read_scalars(tmp_path)
    assert np.isfinite(scalars["train/loss"][-1][1])
    assert scalars["train/applied_updates"][-1][1] > 0
    assert "eval/episode_return" in scalars


def test_evaluation_uses_eval_epsilon_and_training_the_schedule():
    agent = _agent_with_replay(eval_epsilon=1.0)
    observations = np.zeros((200, 4), np.float32)
    greedy = int(np.argmax(agent.online(observations[:1]).numpy()))
    # eval_epsilon = 1: evaluation acts uniformly at random, so both actions appear.
    assert set(agent.act(observations, explore=False).tolist()) == {0, 1}
    agent.eval_epsilon = 0.0
    assert set(agent.act(observations, explore=False).tolist()) == {greedy}
    # Training after the 200 observed steps: epsilon = 1 - 200/10000 * 0.95 = 0.981.
    assert agent.epsilon(agent.steps) == pytest.approx(0.981)


def test_prioritized_replay_s_beta_spans_the_run_and_epsilon_keeps_its_own_8000_steps():
    import framework.runner  # noqa: F401  (registers the runner's bindings)
    from framework import config

    config.parse(["gin_configs/dqn/cartpole_per.gin"], [])
    cartpole = make_env("CartPole-v1")
    agent = DQNAgent(cartpole.observation_space, cartpole.action_space, seed=0)
    (note,) = agent.follow_run(50_000)
    assert note.startswith(
        "Schedule of the epsilon (train/epsilon): its LinearSchedule.duration is 8000 "
        "environment steps, and the run is 50000 steps long"
    )
    assert agent.epsilon.length == 8000 and agent.replay.beta.length == 50_000
    written_out = LinearSchedule(start=0.4, end=1.0, duration=50_000)  # the config before
    assert all(agent.replay.beta(s) == written_out(s) for s in range(0, 60_000, 499))
    assert agent.state()["run_length"] == 50_000
    assert any(line.startswith("prioritized replay's beta: ") for line in agent.schedules())


def test_interrupted_episodes_are_closed_in_replay():
    agent = _agent_with_replay(n_step=3)
    agent.interrupt_episodes()  # the 200 steps may have stopped mid-episode too
    stored = len(agent.replay)
    observation = np.zeros(4, np.float32)
    for _ in range(2):  # two steps of an episode the run then stops in
        agent.observe(_one_step(observation, 0, 1.0))
    assert len(agent.replay) == stored  # a 3-step window is still open
    agent.interrupt_episodes()
    assert len(agent.replay) == stored + 2


def test_checkpoint_replay_false_leaves_the_replay_out_and_resumes_empty():
    agent = _agent_with_replay(checkpoint_replay=False)
    state = agent.state()
    assert "replay" not in state
    resumed = _agent_with_replay(steps=0, checkpoint_replay=False)
    resumed.load_state(state)
    assert len(resumed.replay) == 0 and resumed.steps == agent.steps
    assert "replay" in _agent_with_replay(steps=0).state()  # kept by default


def test_acting_copy_follows_the_learner_after_an_update():
    agent = _agent_with_replay(
        schedule=ReplaySchedule(
            learning_starts=100, train_freq=100, gradient_steps=4, batch_size=64
        )
    )
    agent.update(agent.steps)  # 200 steps: two calls due
    observations = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(
        agent.acting(observations), agent.online(observations).numpy(), rtol=1e-5, atol=1e-6
    )


def _minatar_q_values(weights: list[tf.Tensor], planes: tf.Tensor) -> tf.Tensor:
    """MinAtar's examples/dqn.py QNetwork written out in raw ops: a 3x3 conv of 16 (stride 1,
    no padding), ReLU, a 128-unit ReLU layer on the flattened maps, then one Q-value an action."""
    conv_kernel, conv_bias, hidden_kernel, hidden_bias, out_kernel, out_bias = weights
    maps = tf.nn.relu(
        tf.nn.conv2d(tf.cast(planes, tf.float32), conv_kernel, 1, "VALID") + conv_bias
    )
    hidden = tf.nn.relu(tf.reshape(maps, [planes.shape[0], -1]) @ hidden_kernel + hidden_bias)
    return hidden @ out_kernel + out_bias


def test_one_minatar_update_is_the_paper_s_update_computed_independently(tmp_path):
    # The MinAtar paper's DQN step (examples/dqn.py): smooth_l1_loss (mean) between Q(s, a)
    # and r + 0.99 * (1 - done) * max_a' Q_target(s', a'), then torch's centred RMSprop
    # (lr 2.5e-4, alpha 0.95, eps 0.01 outside the root) from zero statistics. Here in raw TF
    # ops and numpy, against dqn/minatar_breakout.gin's agent on the same weights and batch.
    runner = experiments.build(
        ["gin_configs/dqn/minatar_breakout.gin"], base_dir=str(tmp_path), strict=True
    ).runner
    agent = runner.agent
    batch_size, gamma = 32, 0.99
    assert gin.query_parameter("DQNAgent.gamma") == gamma  # the batch's discounts are built here
    rng = np.random.default_rng(0)
    planes = rng.random((2, batch_size, 10, 10, 4)) < 0.1  # s and s'
    action = rng.integers(0, 6, batch_size)
    reward = rng.choice([0.0, 1.0, 3.0], batch_size).astype(np.float32)  # 3: Huber's linear part
    done = rng.random(batch_size) < 0.2
    online = [tf.constant(w) for w in agent.online.get_weights()]
    # A target unlike the online network, as after 1,000 steps, so that it is read.
    target = [tf.constant(w + rng.normal(0, 0.05, w.shape).astype(np.float32)) for w in online]
    agent.target.set_weights([w.numpy() for w in target])

    next_q = _minatar_q_values(target, tf.constant(planes[1]))
    y = reward + gamma * (1 - done) * tf.reduce_max(next_q, axis=1)
    with tf.GradientTape() as tape:
        tape.watch(online)
        q = tf.gather(_minatar_q_values(online, tf.constant(planes[0])), action, batch_dims=1)
        error = tf.abs(q - y)
        loss = tf.reduce_mean(tf.where(error < 1, 0.5 * error**2, error - 0.5))
    assert 0 < np.mean(error.numpy() > 1) < 1  # both of Huber's parts are in the batch
    gradients = [g.numpy() for g in tape.gradient(loss, online)]
    # One torch RMSprop(centered=True) step from zero square and gradient averages.
    expected = [
        w.numpy() - 2.5e-4 * g / (np.sqrt(0.05 * g**2 - (0.05 * g) ** 2) + 0.01)
        for w, g in zip(online, gradients, strict=True)
    ]

    batch = {
        "observation": planes[0],
        "action": action,
        "reward": reward,
        "discount": (gamma * (1 - done)).astype(np.float32),
        "next_observation": planes[1],
    }
    metrics, _ = agent.learner.run({k: tf.constant(v[None]) for k, v in batch.items()})  # 1 step
    assert float(metrics["loss"]) == pytest.approx(float(loss), rel=1e-5)
    for name, got, want, before in zip(
        ("conv kernel", "conv bias", "hidden kernel", "hidden bias", "Q kernel", "Q bias"),
        agent.online.get_weights(),
        expected,
        online,
        strict=True,
    ):
        assert np.abs(want - before.numpy()).max() > 1e-5, name  # the step moved it
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7, err_msg=name)
    runner.close()
