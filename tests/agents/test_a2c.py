"""A2C: its loss by hand on a constant network, no gradient into targets, learning on CartPole,
one trace, and an exact resume from inside a rollout and an episode."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents.a2c import ActorCriticLoss
from framework.parts import networks
from framework.parts.losses import PolicyGradientLoss, TDMSELoss
from framework.parts.returns import GAE, NStepReturns
from framework.storage.event_reader import read_scalars
from tests.runs import train

CARTPOLE_A2C = ["gin_configs/a2c/cartpole.gin"]


def _constant_network() -> tf.keras.Model:
    """No hidden layers, zero kernels: logits (0, ln 3), so pi = (1/4, 3/4), and V = 1 in
    every state."""
    model = networks.actor_critic_mlp((2,), 2, hidden_units=())
    logits, value = model.get_layer("logits"), model.get_layer("value")
    logits.kernel.assign(tf.zeros_like(logits.kernel))
    logits.bias.assign([0.0, np.log(3.0)])
    value.kernel.assign(tf.zeros_like(value.kernel))
    value.bias.assign([1.0])
    return model


def _rollout(actions) -> dict[str, tf.Tensor]:
    """T = 2 steps of N = 1 sub-environment, reward 1 each, no done."""
    observations = tf.ones([2, 1, 2])
    return {
        "observation": observations,
        "action": tf.constant(actions, tf.int32)[:, None],
        "reward": tf.ones([2, 1]),
        "next_observation": observations,
        "terminated": tf.zeros([2, 1]),
        "truncated": tf.zeros([2, 1]),
    }


def test_loss_by_hand_on_a_constant_network():
    network = _constant_network()
    loss = ActorCriticLoss(
        network, NStepReturns(), PolicyGradientLoss(entropy_coef=0.1), TDMSELoss(), 0.5, 0.5
    )
    with tf.GradientTape() as tape:
        total, extras = loss(_rollout([1, 0]))
    # gamma = 0.5, V = 1: G_1 = 1 + .5 * 1 = 1.5, G_0 = 1 + .5 * 1.5 = 1.75; A = G - 1 =
    # (0.75, 0.5). Actions (1, 0): -log pi = (-ln .75, -ln .25) = (0.287682, 1.386294).
    # policy loss = (0.287682 * 0.75 + 1.386294 * 0.5) / 2 = 0.454454
    # value loss = (0.75^2 + 0.5^2) / 2 = 0.40625
    # entropy = -(.25 ln .25 + .75 ln .75) = 0.562335
    # loss = 0.454454 - 0.1 * 0.562335 + 0.5 * 0.40625 = 0.601346
    np.testing.assert_allclose(extras["policy_loss"], 0.454454, rtol=1e-5)
    np.testing.assert_allclose(extras["value_loss"], 0.40625, rtol=1e-5)
    np.testing.assert_allclose(extras["entropy"], 0.562335, rtol=1e-5)
    np.testing.assert_allclose(total, 0.601346, rtol=1e-5)
    np.testing.assert_allclose(extras["advantage_mean"], 0.625, rtol=1e-5)
    np.testing.assert_allclose(extras["advantage_std"], 0.125, rtol=1e-5)
    np.testing.assert_allclose(extras["mean_return"], 1.625, rtol=1e-5)
    # The value bias gets its gradient through the prediction only: d/dV [0.5 * mean((G -
    # V)^2)] = -mean(G - V) = -0.625. A gradient through the bootstrapped returns (they read
    # V too) or through the advantage in the policy loss would change it.
    value_bias = network.get_layer("value").bias
    np.testing.assert_allclose(tape.gradient(total, value_bias), [-0.625], rtol=1e-5)


@pytest.mark.parametrize("returns", [NStepReturns(), GAE(0.9)], ids=["n_step", "gae"])
def test_policy_loss_moves_no_value_weight_and_value_loss_no_policy_weight(returns):
    network = _constant_network()
    batch = _rollout([1, 0])
    value_vars = network.get_layer("value").trainable_variables
    logit_vars = network.get_layer("logits").trainable_variables
    with tf.GradientTape(persistent=True) as tape:
        logits, values = network(tf.reshape(batch["observation"], [2, 2]))
        returns_, advantages = returns(
            batch["reward"], tf.reshape(values, [2, 1]), tf.reshape(values, [2, 1]),
            batch["terminated"], batch["truncated"], 0.5,
        )  # fmt: skip
        policy_loss, _ = PolicyGradientLoss()(logits, [1, 0], tf.reshape(advantages, [-1]))
        value_loss, _ = TDMSELoss()(values, tf.reshape(returns_, [-1]))
    assert all(g is None for g in tape.gradient(policy_loss, value_vars))
    assert all(g is None for g in tape.gradient(value_loss, logit_vars))


def test_value_loss_sends_no_gradient_into_its_target_by_itself():
    # TDMSELoss's own stop_gradient: a target that depends on a variable gets no gradient.
    weight = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        loss, _ = TDMSELoss()(tf.constant([1.0, 1.0]), weight * tf.constant([1.0, 3.0]))
    assert tape.gradient(loss, weight) is None


def test_cartpole_improves_within_a_small_budget_with_one_trace(tmp_path):
    # A uniformly random policy averages ~22 steps on CartPole-v1.
    runner = train(
        tmp_path,
        CARTPOLE_A2C,
        ["Runner.num_steps = 20000", "Runner.eval_interval = 10000", "Runner.eval_episodes = 5"],
    )
    best_eval = max(value for _, value in runner.eval_returns)
    assert best_eval > 150, runner.eval_returns
    scalars = read_scalars(tmp_path)
    returns = [value for _, value in scalars["train/episode_return"]]
    assert np.mean(returns[-20:]) > 3 * np.mean(returns[:20])
    for tag in ("policy_loss", "value_loss", "entropy", "advantage_mean", "advantage_std"):
        assert f"train/{tag}" in scalars, tag
    assert "train/grad_norm" in scalars and "train/clip_global_norm/norm_after" in scalars
    # 20000 steps / (5 vector steps of 8 envs) = 500 updates, one trace.
    assert int(runner.agent.learner.applied_updates.numpy()) == 500
    assert runner.agent.learner.tracing_count == 1


SHORT = [  # 3 envs, rollouts of 5 vector steps (15 transitions), episodes of at most 20 steps
    "Runner.num_envs = 3",
    "A2CAgent.n_steps = 5",
    "make_env.max_episode_steps = 20",
    "Runner.eval_interval = 150",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 30",
    "optimizers.RMSprop.learning_rate = 0.005",  # moves the weights visibly in a short run
]


def test_resume_inside_a_rollout_and_an_episode_is_exact(tmp_path):
    total = 450
    expected = train(tmp_path / "whole", CARTPOLE_A2C, [*SHORT, f"Runner.num_steps = {total}"])
    whole = read_scalars(tmp_path / "whole")
    ended = {step for step, _ in whole["train/episode_return"]}
    # Inside a rollout (not a multiple of 15 transitions) and no episode ended at that step,
    # with an episode truncated at 20 steps later on.
    stop = next(s for s in range(201, total, 3) if s % 15 and s not in ended)
    assert any(length == 20 for step, length in whole["train/episode_length"] if step > stop)
    folder = tmp_path / "resumed"
    train(folder, CARTPOLE_A2C, [*SHORT, f"Runner.num_steps = {stop}"])  # checkpoint at stop
    resumed = train(folder, CARTPOLE_A2C, [*SHORT, f"Runner.num_steps = {total}"])
    assert resumed.restored_step == stop
    assert int(resumed.agent.learner.applied_updates.numpy()) == total // 15
    scalars = read_scalars(folder)
    for tag in ("train/episode_return", "train/episode_length"):
        assert scalars[tag] == whole[tag], tag
    for tag in ("train/loss", "train/value_loss"):  # the stopped run also logged at its end
        assert [point for point in scalars[tag] if point[0] != stop] == whole[tag], tag
    mine, theirs = resumed.agent.network.get_weights(), expected.agent.network.get_weights()
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_rejects_continuous_actions():
    from agents.a2c import A2CAgent

    with pytest.raises(ValueError, match="A2CAgent needs a Discrete"):
        A2CAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), 0)


def test_config_builds_and_every_binding_is_used(tmp_path):
    import experiments

    experiments.build(CARTPOLE_A2C, base_dir=str(tmp_path), strict=True)


def test_a2c_learns_from_minatar_planes_through_the_shared_conv_torso(tmp_path):
    runner = train(
        tmp_path,
        CARTPOLE_A2C,
        [
            "make_env.env_id = 'MinAtar/Breakout-v0'",
            "make_vector_env.vector_env = None",
            "Runner.num_envs = 2",
            "Runner.num_steps = 300",
            "Runner.eval_interval = 300",
            "Runner.eval_episodes = 1",
            "Runner.log_interval = 100",
            "A2CAgent.network = @networks.actor_critic_cnn",
            "networks.actor_critic_cnn.conv_layers = ((16, 3, 1),)",
            "networks.actor_critic_cnn.hidden_units = (128,)",
            "networks.actor_critic_cnn.input_max = 1.0",
        ],
    )
    assert runner.agent.network.name == "actor_critic_cnn"
    assert runner.agent.observation_space.dtype == bool
    # 300 transitions in rollouts of 5 x 2 = 10: 30 updates, each from the boolean planes.
    assert int(runner.agent.learner.applied_updates.numpy()) == 30
    scalars = read_scalars(tmp_path)
    assert np.isfinite(scalars["train/loss"][-1][1])
