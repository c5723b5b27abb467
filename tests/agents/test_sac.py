"""SAC: the soft target and the min over twin critics by hand, one step against SB3's written
order, acting within the bounds, the config, and a short learning run."""

import functools
import math

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf

import experiments
from agents.sac import SACAgent
from framework.agent import VectorStep
from framework.parts import networks
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.target_updaters import SoftUpdate
from tests.runs import train

OBSERVATION_SPACE = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
ACTION_SPACE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _tiny_agent(learning_starts: int = 100, **kwargs) -> SACAgent:
    """1-d states, actions in [-2, 2] (unit actions a / 2), batches of 2, constant weights:

    actor: mean = atanh(0.5), log std = log 0.1 (zero kernels), so tanh(mean) = 0.5;
    Q_1 = Q_2 = relu(relu(s) + a): unit kernels, zero biases;
    Q'_1 = 2 * relu(relu(s) + a); Q'_2 = relu(relu(s) + a + 2) (a bias of 2 in hidden_1).
    """
    agent = SACAgent(
        OBSERVATION_SPACE,
        ACTION_SPACE,
        seed=0,
        actor_network=functools.partial(networks.gaussian_actor_mlp, hidden_units=(1,)),
        critic_network=functools.partial(networks.critic_mlp, hidden_units=(1, 1)),
        schedule=ReplaySchedule(
            learning_starts=learning_starts, train_freq=1, gradient_steps=1, batch_size=2
        ),
        **kwargs,
    )
    agent.actor.get_layer("hidden_0").set_weights([np.zeros((1, 1)), np.zeros(1)])
    agent.actor.get_layer("mean").set_weights([np.zeros((1, 1)), np.array([math.atanh(0.5)])])
    agent.actor.get_layer("log_std").set_weights([np.zeros((1, 1)), np.array([math.log(0.1)])])
    for critic, (bias, output) in zip(
        [*agent.critics, *agent.target_critics], [(0, 1), (0, 1), (0, 2), (2, 1)], strict=True
    ):
        critic.get_layer("hidden_0").set_weights([np.ones((1, 1)), np.zeros(1)])
        critic.get_layer("hidden_1").set_weights([np.ones((2, 1)), np.array([bias])])
        critic.get_layer("output").set_weights([np.array([[output]]), np.zeros(1)])
    agent.log_alpha.assign(math.log(0.5))
    agent.load_state(agent.state())  # refreshes the numpy copy that acts
    return agent


def _batch(stacked: bool = False) -> dict[str, tf.Tensor]:
    batch = {
        "observation": np.array([[1.0], [2.0]], np.float32),  # s
        "action": np.array([[0.5], [-1.0]], np.float32),  # a, in [-2, 2]: unit [0.25, -0.5]
        "reward": np.array([1.0, 0.0], np.float32),
        "discount": np.array([0.5, 0.4], np.float32),
        "next_observation": np.array([[3.0], [1.0]], np.float32),  # s'
    }
    return {k: tf.constant(v[None] if stacked else v) for k, v in batch.items()}


def test_soft_target_and_the_min_over_twin_critics_by_hand():
    agent = _tiny_agent()
    # The next actions and their log-probabilities, fixed: a' = [0.5, -0.5], log pi = [-1, 0.5].
    agent._policy_sample = lambda observation: (
        tf.constant([[0.5], [-0.5]]),
        tf.constant([-1.0, 0.5]),
    )
    loss, metrics = agent._critic_loss(_batch())
    # Q'_1(s', a') = 2 relu(3 + 0.5), 2 relu(1 - 0.5) = [7, 1];
    # Q'_2(s', a') = relu(3 + 0.5 + 2), relu(1 - 0.5 + 2) = [5.5, 2.5]: min [5.5, 1], one from
    # each critic. Minus alpha log pi = 0.5 * [-1, 0.5]: [6, 0.75].
    # y = r + discount * that = [1 + 0.5 * 6, 0 + 0.4 * 0.75] = [4, 0.3].
    # Q_1 = Q_2 = relu(1 + 0.25), relu(2 - 0.5) = [1.25, 1.5]; Q - y = [-2.75, 1.2];
    # each critic's MSE (7.5625 + 1.44) / 2 = 4.50125; SB3's 0.5 * (sum of the two) = 4.50125.
    np.testing.assert_allclose(metrics["target_q"], 2.15, rtol=1e-6)  # mean(4, 0.3)
    np.testing.assert_allclose(metrics["mean_q"], 1.375, rtol=1e-6)
    np.testing.assert_allclose(loss.numpy(), 4.50125, rtol=1e-6)


def test_actor_loss_uses_the_min_over_the_online_critics():
    agent = _tiny_agent()
    # Critic 2 reads 1 less than critic 1 where the actor acts: the minimum is critic 2's.
    agent.critics[1].get_layer("output").set_weights([np.array([[1.0]]), np.array([-1.0])])
    loss, metrics = agent._actor_loss(_batch())
    # Log std = log 0.1, so the sampled unit actions lie near tanh(mean) = 0.5 (within ~0.3);
    # Q_2(s, a~) = relu(s + a~) - 1, the minimum: mean_q = mean(s) + mean(a~) - 1 = 0.5 + a~.
    mean_action = metrics["mean_q"].numpy() - 0.5
    assert 0.2 < mean_action < 0.8
    # loss = mean(alpha log pi - min Q) = 0.5 * mean log pi - mean_q, mean log pi = -entropy.
    np.testing.assert_allclose(
        loss.numpy(), -0.5 * metrics["entropy"].numpy() - metrics["mean_q"].numpy(), rtol=1e-5
    )
    # The temperature reads the log-probabilities of this very sample, from the actor's extras.
    log_probs = metrics["per_sample/log_prob"].numpy()  # [B]
    np.testing.assert_allclose(-np.mean(log_probs), metrics["entropy"].numpy(), rtol=1e-6)
    _, temperature = agent._temperature_loss(_batch(), {"actor": metrics})
    np.testing.assert_allclose(temperature["entropy"], metrics["entropy"], rtol=1e-6)


def _clone(model: keras.Model) -> keras.Model:
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    return copy


def test_one_step_is_sb3s_order_temperature_critics_actor_targets():
    # SGD and large rates make every dependency visible: an alpha read after the temperature
    # step, or an actor step against the critics before theirs, would move other weights.
    rates = {"critic": 0.1, "actor": 0.1, "temperature": 0.5}
    agent = SACAgent(
        OBSERVATION_SPACE,
        ACTION_SPACE,
        seed=3,
        actor_network=functools.partial(networks.gaussian_actor_mlp, hidden_units=(8, 8)),
        critic_network=functools.partial(networks.critic_mlp, hidden_units=(8, 8)),
        critic_optimizer=keras.optimizers.SGD(rates["critic"]),
        actor_optimizer=keras.optimizers.SGD(rates["actor"]),
        temperature_optimizer=keras.optimizers.SGD(rates["temperature"]),
        target_updater=SoftUpdate(tau=0.25),
        initial_temperature=0.5,
        schedule=ReplaySchedule(learning_starts=100, train_freq=1, gradient_steps=1, batch_size=2),
    )
    actor = _clone(agent.actor)
    critics = [_clone(c) for c in agent.critics]
    targets = [_clone(c) for c in agent.target_critics]
    log_alpha = tf.Variable(agent.log_alpha.numpy())
    generator = tf.random.Generator.from_state(agent.tf_rng.state.numpy(), agent.tf_rng.algorithm)
    batch = {k: v[0] for k, v in _batch(stacked=True).items()}
    agent.learner.run(_batch(stacked=True))

    # The agent draws the next actions' noise (critic loss), then the policy's (actor loss).
    next_noise, policy_noise = generator.normal([2, 1]), generator.normal([2, 1])
    distribution = agent.distribution
    s, s_next = batch["observation"], batch["next_observation"]
    unit_actions = batch["action"] / 2.0

    def sgd(loss_fn, variables, rate):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        for variable, gradient in zip(variables, tape.gradient(loss, variables), strict=True):
            variable.assign_sub(rate * gradient)

    # SB3, as written: 1. the temperature, from the policy's sample before any step.
    _, log_probs = distribution.sample(*actor(s), policy_noise)
    alpha = tf.exp(log_alpha).numpy()  # read before the temperature's step, used by both below
    sgd(lambda: -log_alpha * (tf.reduce_mean(log_probs) - 1.0), [log_alpha], rates["temperature"])
    # 2. the critics, on the soft target with that alpha.
    next_actions, next_log_probs = distribution.sample(*actor(s_next), next_noise)
    next_q = tf.reduce_min([t([s_next, next_actions]) for t in targets], axis=0)
    y = batch["reward"] + batch["discount"] * (next_q - alpha * next_log_probs)
    critic_variables = [v for c in critics for v in c.trainable_variables]
    sgd(
        lambda: 0.5 * sum(tf.reduce_mean(tf.square(c([s, unit_actions]) - y)) for c in critics),
        critic_variables,
        rates["critic"],
    )

    # 3. the actor, against the critics after their step, with the same alpha and sample.
    def actor_loss():
        actions, log_probs = distribution.sample(*actor(s), policy_noise)
        q = tf.reduce_min([c([s, actions]) for c in critics], axis=0)
        return tf.reduce_mean(alpha * log_probs - q)

    sgd(actor_loss, actor.trainable_variables, rates["actor"])
    # 4. the targets: one EMA step towards the critics, decay 1 - tau = 0.75.
    for target, critic in zip(targets, critics, strict=True):
        pairs = zip(target.get_weights(), critic.get_weights(), strict=True)
        target.set_weights([0.75 * t + 0.25 * c for t, c in pairs])

    np.testing.assert_allclose(agent.log_alpha.numpy(), log_alpha.numpy(), rtol=1e-6)
    mine = [agent.actor, *agent.critics, *agent.target_critics]
    for model, reference in zip(mine, [actor, *critics, *targets], strict=True):
        for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=model.name)


def _vector_step(num_envs: int) -> VectorStep:
    rng = np.random.default_rng(0)
    return VectorStep(
        rng.normal(size=(num_envs, 1)).astype(np.float32),
        rng.uniform(-2.0, 2.0, size=(num_envs, 1)).astype(np.float32),
        rng.normal(size=num_envs),
        rng.normal(size=(num_envs, 1)).astype(np.float32),
        np.zeros(num_envs, bool),
        np.zeros(num_envs, bool),
    )


def test_acting_warm_up_samples_and_evaluation_within_the_bounds():
    agent = _tiny_agent(learning_starts=4)
    observations = np.zeros((2000, 1), np.float32)
    warm_up = agent.act(observations, explore=True)  # uniform in [-2, 2] before 4 steps
    assert warm_up.dtype == np.float32 and warm_up.shape == (2000, 1)
    assert -2.0 <= warm_up.min() < -1.9 and 1.9 < warm_up.max() <= 2.0
    # Evaluation: tanh(mean) = 0.5 scaled to [-2, 2]: -2 + 1.5 * 2 = 1, and so the export.
    np.testing.assert_allclose(agent.act(observations[:3], explore=False), 1.0, rtol=1e-6)
    exported = agent.policy_outputs(tf.constant(observations[:3]))["action"]
    np.testing.assert_allclose(exported.numpy(), 1.0, rtol=1e-6)
    agent.observe(_vector_step(num_envs=4))  # 4 steps: warm-up over
    sampled = agent.act(observations, explore=True)
    # 2 * tanh(atanh(0.5) + 0.1 * eps) + 0 (the centre): the median 1, the spread of the
    # linearised 2 * (1 - 0.25) * 0.1 = 0.15.
    assert np.all(np.abs(sampled) <= 2.0)
    np.testing.assert_allclose(np.median(sampled), 1.0, atol=0.02)
    np.testing.assert_allclose(np.std(sampled), 0.15, rtol=0.1)
    # The agent's generator draws the noise: from the same state, the same actions.
    state = agent.rng.bit_generator.state
    first = agent.act(observations, explore=True)
    agent.rng.bit_generator.state = state
    np.testing.assert_array_equal(agent.act(observations, explore=True), first)


def test_rejects_discrete_actions_and_bad_temperatures():
    with pytest.raises(ValueError, match="Box"):
        SACAgent(OBSERVATION_SPACE, gym.spaces.Discrete(3), seed=0)
    with pytest.raises(ValueError, match="initial_temperature"):
        SACAgent(OBSERVATION_SPACE, ACTION_SPACE, seed=0, initial_temperature=0.0)
    with pytest.raises(ValueError, match="target_entropy"):
        SACAgent(OBSERVATION_SPACE, ACTION_SPACE, seed=0, target_entropy="auto")


def test_a_fixed_temperature_has_no_temperature_group():
    agent = _tiny_agent(learn_temperature=False)
    assert [group.name for group in agent.learner.groups] == ["critic", "actor"]
    assert not agent.log_alpha.trainable


def test_the_config_builds_at_sb3s_settings(tmp_path):
    built = experiments.build(["gin_configs/sac/pendulum.gin"], base_dir=str(tmp_path), strict=True)
    agent = getattr(built, "runner", built).agent
    assert isinstance(agent, SACAgent) and len(agent.critics) == 2
    assert [group.name for group in agent.learner.groups] == ["critic", "actor", "temperature"]
    assert agent.target_entropy == -1.0 and agent.alpha.numpy() == 1.0
    assert agent.schedule == ReplaySchedule(
        learning_starts=100, train_freq=1, gradient_steps=1, batch_size=256
    )
    assert agent.replay.capacity == 1_000_000 and agent.learner.jit_compile
    for group in agent.learner.groups:
        np.testing.assert_allclose(group.optimizer.learning_rate.numpy(), 1e-3)
    assert agent.critics[0].get_layer("hidden_0").kernel.shape == (3 + 1, 256)


def test_a_run_traces_its_learner_once(tmp_path):
    runner = train(
        tmp_path,
        ["gin_configs/sac/pendulum.gin"],
        [
            "networks.gaussian_actor_mlp.hidden_units = (16, 16)",
            "networks.critic_mlp.hidden_units = (16, 16)",
            "ReplaySchedule.batch_size = 32",
            "Runner.num_steps = 300",
            "Runner.eval_interval = 300",
            "Runner.eval_episodes = 1",
        ],
    )
    # A call at every step from the 100th (the warm-up's end) to the 300th, one trace.
    assert int(runner.agent.learner.steps.numpy()) == 201
    assert runner.agent.learner.tracing_count == 1


@pytest.mark.slow
def test_pendulum_return_rises(tmp_path):
    runner = train(
        tmp_path,
        ["gin_configs/sac/pendulum.gin"],
        [
            "networks.gaussian_actor_mlp.hidden_units = (64, 64)",
            "networks.critic_mlp.hidden_units = (64, 64)",
            "ReplaySchedule.batch_size = 64",
            "Runner.num_steps = 2500",
            "Runner.eval_interval = 500",
            "Runner.eval_episodes = 2",
        ],
    )
    # Random actions score about -1200 to -1600; swinging up and holding, above -400.
    (_, start), *_, (_, end) = runner.eval_returns
    assert end > start + 700 and end > -500, runner.eval_returns
    assert runner.agent.alpha.numpy() < 0.5  # the temperature fell from 1 as entropy fell
