"""DDPG and TD3 (a configuration of the same agent): losses by hand, the EMA targets, the delayed
actor, acting within the bounds, a short learning run, exact resume and the configs."""

import functools
import math

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import experiments
from agents.ddpg import DDPGAgent
from framework.agent import VectorStep
from framework.parts import networks
from framework.parts.exploration import GaussianNoise, OrnsteinUhlenbeckNoise
from framework.parts.prioritized_replay import PrioritizedReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.target_updaters import SoftUpdate
from framework.storage.event_reader import read_scalars
from tests.runs import train

OBSERVATION_SPACE = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
ACTION_SPACE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _tiny_agent(num_critics: int = 1, learning_starts: int = 1_000, **kwargs) -> DDPGAgent:
    """Constant weights, 1-d states and actions in [-2, 2], batches of 2.

    mu(s) = mu'(s) = -2 + (tanh(atanh(0.5)) + 1) * 4 / 2 = 1: zero kernels, bias atanh(0.5).
    Q(s, a) = relu(relu(s) + a): unit kernels, zero biases.
    Q'_i(s, a) = c_i * relu(relu(s) + a), c = (2, 1.5): the target critics' output kernels.
    """
    agent = DDPGAgent(
        OBSERVATION_SPACE,
        ACTION_SPACE,
        seed=0,
        actor_network=functools.partial(networks.actor_mlp, hidden_units=(1,)),
        critic_network=functools.partial(networks.critic_mlp, hidden_units=(1, 1)),
        num_critics=num_critics,
        schedule=ReplaySchedule(
            learning_starts=learning_starts, train_freq=1, gradient_steps=1, batch_size=2
        ),
        **kwargs,
    )
    for actor in (agent.actor, agent.target_actor):
        actor.get_layer("hidden_0").set_weights([np.zeros((1, 1)), np.zeros(1)])
        actor.get_layer("output").set_weights([np.zeros((1, 1)), np.array([math.atanh(0.5)])])
    outputs = [1.0] * num_critics + [2.0, 1.5][:num_critics]
    for critic, output in zip([*agent.critics, *agent.target_critics], outputs, strict=True):
        critic.get_layer("hidden_0").set_weights([np.ones((1, 1)), np.zeros(1)])
        critic.get_layer("hidden_1").set_weights([np.ones((2, 1)), np.zeros(1)])
        critic.get_layer("output").set_weights([np.array([[output]]), np.zeros(1)])
    agent.load_state(agent.state())  # refreshes the numpy copy that acts
    return agent


def _batch(stacked: bool = False) -> dict[str, tf.Tensor]:
    batch = {
        "observation": np.array([[1.0], [2.0]], np.float32),  # s
        "action": np.array([[0.5], [-1.0]], np.float32),  # a
        "reward": np.array([1.0, 0.0], np.float32),
        "discount": np.array([0.5, 0.0], np.float32),  # the second transition terminated
        "next_observation": np.array([[3.0], [1.0]], np.float32),  # s'
    }
    return {k: tf.constant(v[None] if stacked else v) for k, v in batch.items()}


def test_critic_loss_by_hand():
    loss, metrics = _tiny_agent()._critic_loss(_batch())
    # Q(s, a) = relu(1 + 0.5), relu(2 - 1) = [1.5, 1]. a' = mu'(s') = 1, so
    # Q'(s', a') = 2 * relu(3 + 1), 2 * relu(1 + 1) = [8, 4];
    # y = [1 + 0.5 * 8, 0 + 0 * 4] = [5, 0]; y - Q = [3.5, -1]; mean((y - Q)^2) = 13.25 / 2.
    np.testing.assert_allclose(loss.numpy(), 6.625, rtol=1e-6)
    np.testing.assert_allclose(metrics["target_q"], 2.5, rtol=1e-6)  # mean(5, 0)
    np.testing.assert_allclose(metrics["mean_q"], 1.25, rtol=1e-6)  # mean(1.5, 1)


def test_twin_critics_regress_on_the_minimum_of_the_target_critics():
    loss, metrics = _tiny_agent(num_critics=2)._critic_loss(_batch())
    # Q'_1(s', a') = [8, 4], Q'_2 = 1.5 * [4, 2] = [6, 3]: min [6, 3], y = [1 + 0.5 * 6, 0] =
    # [4, 0]. Both critics are Q = [1.5, 1]: each (2.5^2 + 1^2) / 2 = 3.625, summed 7.25.
    np.testing.assert_allclose(metrics["target_q"], 2.0, rtol=1e-6)
    np.testing.assert_allclose(loss.numpy(), 7.25, rtol=1e-6)


def test_actor_loss_and_its_gradient_by_hand():
    agent = _tiny_agent()
    bias = agent.actor.get_layer("output").bias
    with tf.GradientTape() as tape:
        loss, metrics = agent._actor_loss(_batch())
    # mu(s) = 1: Q(s, mu(s)) = relu(1 + 1), relu(2 + 1) = [2, 3]; loss = -mean = -2.5.
    np.testing.assert_allclose(loss.numpy(), -2.5, rtol=1e-6)
    np.testing.assert_allclose(metrics["mean_q"], 2.5, rtol=1e-6)
    # dL/db = -mean(dQ/da * dmu/db) = -(1 * 2 (1 - tanh(b)^2)) = -2 * 0.75 = -1.5 per row.
    np.testing.assert_allclose(tape.gradient(loss, bias).numpy(), [-1.5], rtol=1e-5)


def test_critic_loss_gives_no_gradient_to_the_actor_or_any_target():
    agent = _tiny_agent(num_critics=2, target_noise=0.2)
    others = [
        *agent.actor.trainable_variables,
        *agent.target_actor.trainable_variables,
        *(v for c in agent.target_critics for v in c.trainable_variables),
    ]
    critics = [v for c in agent.critics for v in c.trainable_variables]
    with tf.GradientTape() as tape:
        loss, _ = agent._critic_loss(_batch())
    grads = tape.gradient(loss, [*others, *critics])
    assert all(g is None or not np.any(g.numpy()) for g in grads[: len(others)])
    assert any(g is not None and np.any(g.numpy()) for g in grads[len(others) :])


def _weights(models) -> list[np.ndarray]:
    return [w for model in models for w in model.get_weights()]


def test_delayed_actor_and_targets_then_exactly_the_ema_step():
    # TD3's schedule: learner step 1 trains the critics only; step 2 the critics, then the
    # actor, then the targets by one EMA step. (With actor_every = 1, DDPG, every step is 2.)
    agent = _tiny_agent(num_critics=2, actor_every=2, target_updater=SoftUpdate(tau=0.25))
    actor = _weights([agent.actor])
    targets = _weights([agent.target_actor, *agent.target_critics])
    critics = _weights(agent.critics)
    metrics, _ = agent.learner.run(_batch(stacked=True))
    # The critics' loss before their step, as worked out in the twin-critic test: 7.25.
    np.testing.assert_allclose(metrics["critic/loss"], 7.25, rtol=1e-6)
    assert not np.array_equal(_weights(agent.critics)[-2], critics[-2])  # the critics moved
    for now, before in zip(
        _weights([agent.actor, agent.target_actor, *agent.target_critics]),
        actor + targets,
        strict=True,
    ):
        np.testing.assert_array_equal(now, before)  # the actor and the targets did not
    assert int(metrics["actor/target_updates"]) == 0
    assert float(metrics["actor/loss"]) == 0.0  # the actor did not run: nothing to average

    metrics, _ = agent.learner.run(_batch(stacked=True))
    assert int(metrics["actor/target_updates"]) == 1
    online = _weights([agent.actor, *agent.critics])
    assert not np.array_equal(online[-1], actor[-1])  # the actor moved
    for target, before, after in zip(
        _weights([agent.target_actor, *agent.target_critics]), targets, online, strict=True
    ):
        # decay = 1 - tau = 0.75: target' = 0.75 * target + 0.25 * online (after its step)
        np.testing.assert_allclose(target, 0.75 * before + 0.25 * after, rtol=1e-6, atol=1e-7)


def test_target_policy_smoothing_noise_is_clipped_in_units_of_the_half_range():
    agent = _tiny_agent(target_noise=100.0, target_noise_clip=0.5)
    actions = agent._target_actions(tf.zeros((1000, 1))).numpy()
    # mu'(s') = 1; noise ~ N(0, 100^2) clipped to +-0.5 half-ranges = +-1 N m: a' in {0, 2}
    # almost always (|noise| < 0.5 has probability ~0.004).
    assert actions.min() >= 0.0 and actions.max() <= 2.0
    assert np.mean((actions == 0.0) | (actions == 2.0)) > 0.98
    assert {0.0, 2.0} <= set(np.unique(actions).tolist())


def test_acting_warm_up_noise_and_evaluation_stay_within_the_bounds():
    agent = _tiny_agent(learning_starts=4, noise=GaussianNoise(stddev=10.0))
    observations = np.zeros((500, 1), np.float32)
    warm_up = agent.act(observations, explore=True)  # uniform in [-2, 2] before 4 steps
    assert warm_up.dtype == np.float32 and warm_up.shape == (500, 1)
    assert -2.0 <= warm_up.min() < -1.5 and 1.5 < warm_up.max() <= 2.0
    np.testing.assert_allclose(agent.act(observations, explore=False), 1.0, rtol=1e-6)  # mu
    agent.observe(_vector_step(num_envs=4, done=[False] * 4))  # 4 steps: warm-up over
    noisy = agent.act(observations, explore=True)
    # mu + 2 * N(0, 10^2), clipped: nearly all at a bound, none beyond.
    assert noisy.min() == -2.0 and noisy.max() == 2.0
    assert np.mean(np.abs(noisy) == 2.0) > 0.9


def _vector_step(num_envs: int, done: list[bool], seed: int = 0) -> VectorStep:
    """Random states, actions and rewards."""
    rng = np.random.default_rng(seed)
    return VectorStep(
        rng.normal(size=(num_envs, 1)).astype(np.float32),
        rng.uniform(-2.0, 2.0, size=(num_envs, 1)).astype(np.float32),
        rng.normal(size=num_envs),
        rng.normal(size=(num_envs, 1)).astype(np.float32),
        np.zeros(num_envs, bool),
        np.array(done),
    )


def test_ou_noise_restarts_where_an_episode_ended():
    agent = _tiny_agent(learning_starts=0, noise=OrnsteinUhlenbeckNoise())
    agent.act(np.zeros((3, 1), np.float32), explore=True)  # the 3 processes step once
    assert np.all(agent.noise.state()["x"] != 0.0)
    agent.observe(_vector_step(num_envs=3, done=[False, True, False]))
    x = agent.noise.state()["x"]
    assert x[1, 0] == 0.0 and x[0, 0] != 0.0 and x[2, 0] != 0.0


def test_rejects_discrete_and_unbounded_action_spaces():
    with pytest.raises(ValueError, match="Box"):
        DDPGAgent(OBSERVATION_SPACE, gym.spaces.Discrete(3), seed=0)
    with pytest.raises(ValueError, match="finite"):
        DDPGAgent(OBSERVATION_SPACE, gym.spaces.Box(-np.inf, np.inf, (1,)), seed=0)


def test_refuses_a_prioritized_replay_that_its_losses_cannot_feed():
    with pytest.raises(ValueError, match="does not take a prioritized replay"):
        DDPGAgent(OBSERVATION_SPACE, ACTION_SPACE, seed=0, replay=PrioritizedReplay)


CONFIGS = [
    "gin_configs/ddpg/pendulum.gin",
    "gin_configs/ddpg/pendulum_classic.gin",
    "gin_configs/td3/pendulum.gin",
]


@pytest.mark.parametrize(
    ("config", "num_critics", "actor_every", "noise"),
    [
        (CONFIGS[0], 1, 1, GaussianNoise),
        (CONFIGS[1], 1, 1, OrnsteinUhlenbeckNoise),
        (CONFIGS[2], 2, 2, GaussianNoise),
    ],
)
def test_configs_build(tmp_path, config, num_critics, actor_every, noise):
    built = experiments.build([config], base_dir=str(tmp_path), strict=True)
    agent = getattr(built, "runner", built).agent  # build returns the runner or a wrapper
    assert isinstance(agent, DDPGAgent) and isinstance(agent.noise, noise)
    assert len(agent.critics) == num_critics
    critic, actor = agent.learner.groups
    assert (critic.name, actor.name, actor.every) == ("critic", "actor", actor_every)
    assert isinstance(actor.target_updater, SoftUpdate)


# Small networks and batches keep these runs to a few seconds.
SMALL = [
    "networks.actor_mlp.hidden_units = (64, 64)",
    "networks.critic_mlp.hidden_units = (64, 64)",
    "ReplaySchedule.batch_size = 128",
]


def test_ddpg_pendulum_return_rises_well_above_the_start(tmp_path):
    runner = train(
        tmp_path,
        [CONFIGS[0]],
        [
            *SMALL,
            "Runner.num_steps = 3000",
            "Runner.eval_interval = 500",
            "Runner.eval_episodes = 2",
            "ReplaySchedule.learning_starts = 500",
            "ReplaySchedule.train_freq = 250",
            "ReplaySchedule.gradient_steps = 500",  # 2 per transition: learns in 3000 steps
        ],
    )
    # After the 500-step warm-up the untrained actor scores about -1300 to -1600; a policy
    # that swings the pendulum up and holds it scores above -400 (seed 0: about -200).
    (_, start), *_, (_, end) = runner.eval_returns
    assert end > start + 700 and end > -500, runner.eval_returns
    # The numpy copy that acts followed the actor through the last update.
    agent = runner.agent
    observations = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(
        agent.act(observations, explore=False), agent.actor(observations), rtol=1e-5, atol=1e-6
    )
    scalars = read_scalars(tmp_path)
    for tag in (
        "train/critic/loss",
        "train/critic/mean_q",
        "train/actor/loss",
        "train/actor/mean_q",
        "train/actor/target_updates",
        "train/noise_scale",
        "policy/q",
    ):
        assert tag in scalars, sorted(scalars)


RESUME = [
    "networks.actor_mlp.hidden_units = (16, 16)",
    "networks.critic_mlp.hidden_units = (16, 16)",
    "ReplaySchedule.batch_size = 32",
    "ReplaySchedule.learning_starts = 300",
    "ReplaySchedule.train_freq = 50",
    "ReplaySchedule.gradient_steps = 10",
    "DDPGAgent.noise = @OrnsteinUhlenbeckNoise()",  # a noise with state to carry over
    "Runner.eval_interval = 400",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 100",
    "Runner.num_envs = 2",
]


def test_exact_resume_mid_episode(tmp_path):
    # TD3 (twin critics, delayed actor, target smoothing from the agent's TF generator) with
    # OU noise. Pendulum's episodes last 200 steps; 2 envs stop at 530 transitions, 65 steps
    # into their second episodes, with training calls (at 300, ..., 500) and noise state
    # behind them and four more (550, ..., 700) ahead.
    total, stop = 700, 530
    expected = train(tmp_path / "whole", [CONFIGS[2]], [*RESUME, f"Runner.num_steps = {total}"])
    train(tmp_path / "resumed", [CONFIGS[2]], [*RESUME, f"Runner.num_steps = {stop}"])
    resumed = train(tmp_path / "resumed", [CONFIGS[2]], [*RESUME, f"Runner.num_steps = {total}"])
    assert resumed.restored_step == stop
    whole, again = read_scalars(tmp_path / "whole"), read_scalars(tmp_path / "resumed")
    for tag in ("train/episode_return", "train/critic/loss", "train/actor/loss"):
        assert again[tag] == whole[tag], tag
    # The stopped run also evaluated at its last step; evaluations never touch training.
    assert [point for point in again["eval/episode_return"] if point[0] != stop] == whole[
        "eval/episode_return"
    ]
    for name in ("actor", "target_actor", "critics", "target_critics"):
        mine, theirs = (_as_list(getattr(runner.agent, name)) for runner in (resumed, expected))
        for a, b in zip(_weights(mine), _weights(theirs), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)


def _as_list(models) -> list:
    return models if isinstance(models, list) else [models]
