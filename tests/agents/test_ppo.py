"""PPO: its parts by hand (the clipped surrogate on both sides of the clip for both signs of the
advantage, value clipping, the Gaussian's log-probability and entropy, the minibatches), the
advantages it forms from the values it acted with, the target-KL stop, the clip-range schedule
read inside the call, and learning on CartPole with one trace."""

import csv
import logging
import math

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents.ppo import PPOAgent
from framework.agent import VectorStep
from framework.parts.distributions import Categorical, DiagonalGaussian
from framework.parts.minibatches import ShuffledMinibatches
from framework.parts.optimizers import LinearDecay
from framework.parts.policy_losses import ClippedSurrogateLoss, EntropyBonus, ValueLoss
from framework.parts.returns import GAE
from tests.runs import train

CARTPOLE = gym.make("CartPole-v1")
PENDULUM = gym.make("Pendulum-v1")


def _surrogate(log_prob, old_log_prob, advantages, **kwargs):
    log_prob = tf.Variable(log_prob, dtype=tf.float32)
    loss_part = ClippedSurrogateLoss(**kwargs)
    with tf.GradientTape() as tape:
        loss, extras = loss_part(log_prob, tf.constant(old_log_prob), tf.constant(advantages))
    return loss, extras, tape.gradient(loss, log_prob)


def test_clipped_surrogate_by_hand_on_both_sides_of_the_clip_for_both_signs():
    # Ratios 1.5, 0.5, 1.5, 0.5, 1.1 (log-probabilities against old ones of 0); clip 0.2.
    ratios = np.array([1.5, 0.5, 1.5, 0.5, 1.1])
    advantages = np.array([2.0, 2.0, -2.0, -2.0, 1.0], np.float32)
    loss, extras, grad = _surrogate(
        np.log(ratios), np.zeros(5, np.float32), advantages, normalize_advantage=False
    )
    # min(r A, clip(r, 0.8, 1.2) A): A > 0, r = 1.5 -> 1.2 A = 2.4 (clipped: no gradient);
    # A > 0, r = 0.5 -> 0.5 A = 1.0; A < 0, r = 1.5 -> 1.5 A = -3.0; A < 0, r = 0.5 -> 0.8 A =
    # -1.6 (clipped); r = 1.1 inside the clip -> 1.1.
    surrogate = [2.4, 1.0, -3.0, -1.6, 1.1]
    np.testing.assert_allclose(loss, -np.mean(surrogate), rtol=1e-6)
    # d(-mean(r A))/d log pi = -r A / 5 where the unclipped term is the minimum, else 0.
    expected_grad = [0.0, -0.5 * 2 / 5, 1.5 * 2 / 5, 0.0, -1.1 / 5]
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
    assert float(extras["clip_fraction"]) == pytest.approx(4 / 5)
    kl = np.mean((ratios - 1) - np.log(ratios))
    assert float(extras["approx_kl"]) == pytest.approx(kl, rel=1e-5)


def test_advantages_are_standardised_per_minibatch_with_the_unbiased_std():
    advantages = np.array([1.0, 2.0, 3.0, 6.0], np.float32)
    zeros = np.zeros(4, np.float32)
    loss, _, _ = _surrogate(zeros, zeros, advantages)  # r = 1: loss = -mean(normalised A) = 0
    normalised = (advantages - 3.0) / (np.std(advantages, ddof=1) + 1e-8)
    _, _, grad = _surrogate(zeros, zeros, advantages)
    np.testing.assert_allclose(grad, -normalised / 4, rtol=1e-5)
    assert abs(float(loss)) < 1e-6


def test_value_loss_clips_around_the_behaviour_value_as_sb3_does():
    values = tf.Variable([2.0, 1.2, -1.0])
    old, returns = tf.constant([1.0, 1.0, 1.0]), tf.constant([3.0, 3.0, 0.0])
    with tf.GradientTape() as tape:
        loss, _ = ValueLoss(clip_range=0.5)(values, old, returns)
    # 2.0 -> 1.5 (clipped: no gradient), 1.2 stays, -1.0 -> 0.5 (clipped).
    np.testing.assert_allclose(loss, np.mean([1.5**2, 1.8**2, 0.5**2]), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, values), [0.0, 2 * -1.8 / 3, 0.0], rtol=1e-6)
    unclipped, _ = ValueLoss()(values, old, returns)
    np.testing.assert_allclose(unclipped, np.mean([1.0, 1.8**2, 1.0]), rtol=1e-6)


def test_gaussian_log_probability_and_entropy_by_hand_and_numpy_matches_tensorflow():
    mean = np.array([[0.0, 1.0]], np.float32)
    log_std = np.array([[0.0, math.log(2.0)]], np.float32)
    action = np.array([[1.0, 2.0]], np.float32)
    gaussian = DiagonalGaussian()
    # z = (1, 0.5): sum of -z^2/2 - log sigma - log(2 pi)/2.
    log_2pi = math.log(2 * math.pi)
    expected = (-0.5 - 0.5 * log_2pi) + (-0.125 - math.log(2.0) - 0.5 * log_2pi)
    np.testing.assert_allclose(gaussian.log_prob((mean, log_std), action), [expected], rtol=1e-6)
    entropy = (0.5 + 0.5 * log_2pi) * 2 + math.log(2.0)
    np.testing.assert_allclose(gaussian.entropy((mean, log_std)), [entropy], rtol=1e-6)
    rng = np.random.default_rng(0)
    parameters = (rng.normal(size=(100, 3)).astype(np.float32), np.full((100, 3), -0.5, np.float32))
    samples, log_prob = gaussian.sample_numpy(parameters, rng)
    np.testing.assert_allclose(log_prob, gaussian.log_prob(parameters, samples), rtol=1e-5)
    np.testing.assert_allclose(np.std(samples - parameters[0]), math.exp(-0.5), rtol=0.05)


def test_categorical_sample_log_probability_matches_tensorflow_and_entropy_by_hand():
    logits = np.log(np.array([[0.25, 0.75], [0.5, 0.5]], np.float32))
    categorical = Categorical()
    actions, log_prob = categorical.sample_numpy(logits, np.random.default_rng(0))
    np.testing.assert_allclose(log_prob, categorical.log_prob(logits, actions), rtol=1e-6)
    entropy = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2.0)]
    np.testing.assert_allclose(categorical.entropy(logits), entropy, rtol=1e-6)
    bonus, _ = EntropyBonus(coef=0.1)(categorical.entropy(logits))
    np.testing.assert_allclose(bonus, -0.1 * np.mean(entropy), rtol=1e-6)


def test_minibatches_are_a_fresh_permutation_every_epoch_and_refuse_a_remainder():
    minibatches = ShuffledMinibatches(n_epochs=3, batch_size=4)
    order = minibatches.order(8, np.random.default_rng(0))
    assert order.shape == (6, 4) and order.dtype == np.int32
    epochs = order.reshape(3, 8)
    for epoch in epochs:
        assert sorted(epoch) == list(range(8))
    assert len({tuple(epoch) for epoch in epochs}) == 3
    samples = {"x": tf.range(10, 18)}
    np.testing.assert_array_equal(minibatches.gather(samples, order)["x"], order + 10)
    with pytest.raises(ValueError, match=r"12 samples .*batch_size = 5.*\(e\.g\. 4\)"):
        ShuffledMinibatches(batch_size=5).order(12, np.random.default_rng(0))


def _agent(space=CARTPOLE, **kwargs) -> PPOAgent:
    kwargs.setdefault("minibatches", ShuffledMinibatches(n_epochs=1, batch_size=3))
    return PPOAgent(space.observation_space, space.action_space, seed=0, n_steps=3, **kwargs)


def _observe(agent: PPOAgent, rewards, truncated, values=None) -> None:
    """One sub-environment for `len(rewards)` steps of random observations; `values`, where
    given, replace the V(s) the agent computed while acting."""
    rng = np.random.default_rng(1)
    for t, reward in enumerate(rewards):
        observation = rng.normal(size=(1, *agent.observation_space.shape)).astype(np.float32)
        actions, extras = agent.act_with_extras(observation)
        if values is not None:
            extras = {**extras, "value": np.array([values[t]], np.float32)}
        step = VectorStep(
            observation,
            actions,
            np.array([reward], np.float32),
            observation + 1.0,
            np.array([False]),
            np.array([truncated[t]]),
            extras,
        )
        agent.observe(step)


def test_advantages_use_the_values_of_acting_and_bootstrap_ends_from_the_network_now():
    agent = _agent(returns=GAE(lambda_=1.0), gamma=0.5)
    # Truncated at t = 1; t = 2 is the rollout's last row. Stored values V(s_t) = 10, 20, 30.
    _observe(agent, rewards=[1.0, 1.0, 1.0], truncated=[False, True, False], values=[10, 20, 30])
    batch = agent.learner_batch()
    batch["order"] = np.array([[[0, 1, 2]]], np.int32)  # the samples in time order
    minibatch = agent._minibatches({k: tf.constant(v) for k, v in batch.items()})
    final_values = agent.network(batch["next_observation"][0, :, 0])[1].numpy()
    # V(s'_0) = the stored V(s_1) = 20; V(s'_1), V(s'_2) from the network's final observations.
    delta = [1 + 0.5 * 20 - 10, 1 + 0.5 * final_values[1] - 20, 1 + 0.5 * final_values[2] - 30]
    advantages = [delta[0] + 0.5 * delta[1], delta[1], delta[2]]  # cut at the truncation
    np.testing.assert_allclose(minibatch["advantage"][0], advantages, rtol=1e-5)
    np.testing.assert_allclose(minibatch["return"][0], np.add(advantages, [10, 20, 30]), rtol=1e-5)
    np.testing.assert_array_equal(minibatch["value"][0], [10, 20, 30])


def test_continuous_actions_are_clipped_for_the_env_and_learned_from_unclipped():
    agent = _agent(PENDULUM)
    observations = np.zeros((500, 3), np.float32)
    actions, extras = agent.act_with_extras(observations)
    assert np.all(np.abs(actions) <= 2.0) and np.any(np.abs(extras["sample"]) > 2.0)
    np.testing.assert_array_equal(actions, np.clip(extras["sample"], -2.0, 2.0))
    logits_free = agent.distribution.log_prob(
        agent.network(observations)[0], extras["sample"]
    ).numpy()
    np.testing.assert_allclose(extras["log_prob"], logits_free, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(agent.act(observations, explore=False), np.zeros((500, 1)))


def test_target_kl_stops_the_remaining_steps_and_applies_none_of_the_stopping_one():
    # The first minibatch's ratio is exactly 1 (KL 0): it applies; the second's KL is positive
    # after that update, past 1.5 x 1e-9: it stops, unapplied, and 4 more steps never run.
    agent = _agent(target_kl=1e-9, minibatches=ShuffledMinibatches(n_epochs=2, batch_size=1))
    _observe(agent, rewards=[1.0, 0.0, 1.0], truncated=[False, False, False])
    metrics, health = agent.update(env_steps=3)
    assert (health.gradient_steps, health.applied_updates) == (2, 1)
    assert float(metrics["steps_run"]) == 2.0
    assert int(agent.learner.steps.numpy()) == 2
    never = _agent(minibatches=ShuffledMinibatches(n_epochs=2, batch_size=1))
    _observe(never, rewards=[1.0, 0.0, 1.0], truncated=[False, False, False])
    assert never.update(env_steps=3)[1].applied_updates == 6


def test_clip_range_and_learning_rate_follow_their_schedules_over_environment_steps():
    clip = LinearDecay(initial_learning_rate=0.2, final_learning_rate=0.0, duration=1000)
    rate = LinearDecay(initial_learning_rate=1e-3, final_learning_rate=0.0, duration=1000)
    agent = _agent(
        surrogate_loss=ClippedSurrogateLoss(clip_range=clip),
        optimizer=tf.keras.optimizers.Adam(rate),
    )
    for env_steps in (250, 750):
        _observe(agent, rewards=[1.0, 0.0, 1.0], truncated=[False, False, False])
        metrics, _ = agent.update(env_steps)
        fraction_left = 1 - env_steps / 1000
        assert float(metrics["clip_range"]) == pytest.approx(0.2 * fraction_left)
        assert float(metrics["learning_rate"]) == pytest.approx(1e-3 * fraction_left)
    assert any("LinearDecay" in line for line in agent.schedules())
    with pytest.raises(ValueError, match="clip range's schedule must count environment steps"):
        ClippedSurrogateLoss(clip_range=LinearDecay(0.2, 0.0, 100, unit="updates"))


def _following_agent() -> PPOAgent:
    """RL-Zoo's lin_1e-3 and lin_0.2: a rate and a clip range that span the run."""
    return _agent(
        surrogate_loss=ClippedSurrogateLoss(clip_range=LinearDecay(0.2, 0.0)),
        optimizer=tf.keras.optimizers.Adam(LinearDecay(1e-3, 0.0)),
    )


def test_the_shipped_cartpole_schedules_span_its_run_as_the_100000_steps_it_wrote_out():
    import framework.runner  # noqa: F401  (registers the runner's bindings)
    from framework import config

    config.parse(["gin_configs/ppo/cartpole.gin"], [])
    agent = PPOAgent(CARTPOLE.observation_space, CARTPOLE.action_space, seed=0)
    assert agent.follow_run(100_000) == []  # both span the run: nothing to say
    written_out = {  # the config before its schedules followed the run
        "learning rate (train/learning_rate)": LinearDecay(1e-3, 0.0, duration=100_000),
        "clip range (train/clip_range)": LinearDecay(0.2, 0.0, duration=100_000),
    }
    schedules = agent.named_schedules()
    assert schedules.keys() == written_out.keys()
    for name, schedule in schedules.items():
        for step in (0, 256, 33_280, 99_840, 100_000):
            schedule.environment_steps.assign(step)
            written_out[name].environment_steps.assign(step)
            now, before = (s(tf.constant(0)).numpy() for s in (schedule, written_out[name]))
            assert now.tobytes() == before.tobytes(), (name, step)


def test_a_resume_that_trains_longer_keeps_the_first_start_s_schedules_and_says_so():
    first = _following_agent()
    assert first.follow_run(1000) == []
    state = first.state()
    assert state["run_length"] == 1000  # in every checkpoint
    resumed = _following_agent()
    resumed.load_state(state)  # a restore comes before the runner's call
    (note,) = resumed.follow_run(4000)
    assert "clip range (train/clip_range) keep the run's length as its first start" in note
    assert "end at environment step 1000" in note and "Runner.num_steps is 4000 now" in note
    assert [s.length for s in resumed.named_schedules().values()] == [1000, 1000]
    _observe(resumed, rewards=[1.0, 0.0, 1.0], truncated=[False, False, False])
    metrics, _ = resumed.update(env_steps=2000)  # past the first start's end: the final values
    assert (float(metrics["learning_rate"]), float(metrics["clip_range"])) == (0.0, 0.0)
    fresh = _following_agent()
    assert fresh.follow_run(4000) == [] and fresh.run_length == 4000  # a first start: its own


def test_a_length_of_its_own_stays_and_the_log_says_where_it_is_not_the_run_s():
    agent = _agent(optimizer=tf.keras.optimizers.Adam(LinearDecay(1e-3, 0.0, duration=100_000)))
    (note,) = agent.follow_run(20_000)
    assert note == (
        "Schedule of the learning rate (train/learning_rate): its LinearDecay.duration is 100000 "
        "environment steps, and the run is 20000 steps long (Runner.num_steps; duration = None "
        "would span the run)."
    )
    assert agent.named_schedules()["learning rate (train/learning_rate)"].length == 100_000
    assert "run_length" not in agent.state()  # nothing follows the run: checkpoints as before
    assert agent.follow_run(100_000) == []


@pytest.mark.integration
def test_a_short_run_ends_its_schedules_at_its_own_end_and_a_longer_resume_keeps_them(
    tmp_path, caplog
):
    """RL-Zoo's lin_ schedules on a run of 1024 steps: the last update's rate and clip range are
    0, where the 100000 steps the config once wrote out left 99% of them. Trained on to 1536
    steps, the run keeps them (at 0) and says so."""
    short = ["Runner.eval_interval = 512", "Runner.eval_episodes = 1", "Runner.log_interval = 256"]
    cartpole = ["gin_configs/ppo/cartpole.gin"]
    runner = train(tmp_path, cartpole, [*short, "Runner.num_steps = 1024"])
    assert runner.agent.run_length == 1024
    caplog.set_level(logging.INFO)
    longer = train(tmp_path, cartpole, [*short, "Runner.num_steps = 1536"])
    assert longer.restored_step == 1024 and longer.agent.run_length == 1024
    (kept,) = [r.getMessage() for r in caplog.records if "first start" in r.getMessage()]
    assert "end at environment step 1024" in kept and "Runner.num_steps is 1536 now" in kept
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = {int(row["step"]): row for row in csv.DictReader(f) if row["train/learning_rate"]}
    for step in (1024, 1280, 1536):
        assert float(rows[step]["train/learning_rate"]) == 0.0, step
        assert float(rows[step]["train/clip_range"]) == 0.0, step
    # Before the end: 1e-3 * (1 - 768 / 1024), at the update at step 768.
    assert float(rows[768]["train/learning_rate"]) == pytest.approx(2.5e-4)


def test_cartpole_is_solved_within_its_budget_with_one_trace(tmp_path):
    # The first 40000 steps of the shipped 100000-step run: its schedules span those 100000.
    shipped_schedules = [
        "lr/optimizers.LinearDecay.duration = 100000",
        "clip/optimizers.LinearDecay.duration = 100000",
    ]
    runner = train(
        tmp_path,
        ["gin_configs/ppo/cartpole.gin"],
        [
            "Runner.num_steps = 40000",
            "Runner.eval_interval = 10000",
            "Runner.eval_episodes = 5",
            *shipped_schedules,
        ],
    )
    assert max(value for _, value in runner.eval_returns) >= 475, runner.eval_returns
    assert runner.agent.learner.tracing_count == 1
    # 40000 steps / 256 a rollout = 156 calls of 20 epochs x 1 minibatch.
    assert int(runner.agent.learner.steps.numpy()) == 156 * 20
