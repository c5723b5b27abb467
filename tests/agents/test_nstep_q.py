"""n-step Q-learning: the loss against returns worked out step by step (cut at terminations,
bootstrapped from the target network where truncated and at the rollout's end), no gradient
into the target network, each worker's final epsilon, and asynchronous n-step Q-learning on
the asynchronous driver's workers: pulls bring the target network too, and the global learner
moves it."""

import gin
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import experiments
from agents.nstep_q import NStepQAgent
from framework.parts.losses import TDMSELoss
from framework.runner import Runner

CONFIG = "gin_configs/a3c/cartpole_nstep_q.gin"
OBSERVATIONS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _agent(**kwargs) -> NStepQAgent:
    gin.clear_config()
    return NStepQAgent(OBSERVATIONS, gym.spaces.Discrete(2), seed=0, **kwargs)


def _rollout(rng, steps=4, envs=2) -> dict[str, np.ndarray]:
    """Env 0 terminates at t=1 and is truncated at t=3 (its last row); env 1 runs on."""
    terminated = np.zeros((steps, envs), np.float32)
    truncated = np.zeros((steps, envs), np.float32)
    terminated[1, 0], truncated[3, 0] = 1.0, 1.0
    return {
        "observation": rng.normal(size=(steps, envs, 3)).astype(np.float32),
        "action": rng.integers(2, size=(steps, envs)).astype(np.int32),
        "reward": rng.normal(size=(steps, envs)).astype(np.float32),
        "next_observation": rng.normal(size=(steps, envs, 3)).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
    }


def test_loss_against_n_step_returns_worked_out_step_by_step():
    agent = _agent(loss=TDMSELoss(), gamma=0.9)
    # A target network unlike the online one: the bootstrap must read the target's.
    agent.target.set_weights([w + 0.5 for w in agent.online.get_weights()])
    batch = _rollout(np.random.default_rng(3))
    steps, envs = batch["reward"].shape
    q = agent.online(batch["observation"].reshape(-1, 3)).numpy().reshape(steps, envs, 2)
    next_q = agent.target(batch["next_observation"].reshape(-1, 3)).numpy().max(-1)
    next_q = next_q.reshape(steps, envs)
    expected = []
    for env in range(envs):
        returns = [0.0] * steps
        for t in reversed(range(steps)):
            reward = batch["reward"][t, env]
            if batch["terminated"][t, env]:
                returns[t] = reward
            elif batch["truncated"][t, env] or t == steps - 1:
                returns[t] = reward + 0.9 * next_q[t, env]
            else:
                returns[t] = reward + 0.9 * returns[t + 1]
        for t in range(steps):
            expected.append((returns[t] - q[t, env, batch["action"][t, env]]) ** 2)
    loss, _ = agent._loss({name: tf.constant(value) for name, value in batch.items()})
    np.testing.assert_allclose(loss.numpy(), np.mean(expected), rtol=1e-5)


def test_no_gradient_reaches_the_target_network():
    agent = _agent()
    batch = {k: tf.constant(v) for k, v in _rollout(np.random.default_rng(0)).items()}
    with tf.GradientTape(persistent=True) as tape:
        loss, _ = agent._loss(batch)
    assert all(g is None for g in tape.gradient(loss, agent.target.trainable_variables))
    online = tape.gradient(loss, agent.online.trainable_variables)
    assert all(g is not None and np.any(g.numpy() != 0) for g in online)


def test_each_agent_draws_its_final_epsilon_and_anneals_to_it():
    finals = {
        NStepQAgent(OBSERVATIONS, gym.spaces.Discrete(2), seed=s, epsilon_duration=100).epsilon.end
        for s in range(12)
    }
    assert finals == {0.1, 0.01, 0.5}
    agent = _agent(epsilon_duration=100, final_epsilons=(0.2,), final_epsilon_probs=(1.0,))
    assert agent.epsilon(0) == 1.0 and agent.epsilon(50) == pytest.approx(0.6)
    assert agent.epsilon(1000) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="final_epsilon_probs"):
        _agent(final_epsilons=(0.1, 0.2), final_epsilon_probs=(1.0,))


def _bindings(bindings=()) -> list[str]:
    return ["AsynchronousDriver.backend = @RoundRobin", "Runner.log_interval = 100", *bindings]


def test_a_pull_brings_online_and_target_and_the_global_learner_moves_the_target(tmp_path):
    runner = experiments.build([CONFIG], _bindings(["HardUpdate.period = 3"]), str(tmp_path)).runner
    driver, global_agent = runner.driver, runner.agent
    worker = driver.backend.workers[1]
    initial_target = [w.numpy() for w in global_agent.target.weights]
    for push in range(1, 4):
        driver._pull(1)
        driver._apply(1, worker.work(), env_steps=20 * push)
        moved = any(
            not np.array_equal(w.numpy(), v)
            for w, v in zip(global_agent.target.weights, initial_target, strict=True)
        )
        assert moved == (push == 3)  # copied from the online network at the 3rd push only
    for online, target in zip(
        global_agent.online.weights, global_agent.target.weights, strict=True
    ):
        np.testing.assert_array_equal(online.numpy(), target.numpy())
    driver._pull(1)
    for local, shared in zip(
        worker.agent.shared_variables, global_agent.shared_variables, strict=True
    ):
        np.testing.assert_array_equal(local.numpy(), shared.numpy())
    runner.close()


def test_round_robin_resume_is_exact_for_online_target_optimizer_and_workers(tmp_path):
    def train(folder, num_steps) -> Runner:
        bindings = _bindings([f"Runner.num_steps = {num_steps}", "HardUpdate.period = 2"])
        return experiments.train([CONFIG], bindings, str(folder)).runner

    whole = train(tmp_path / "whole", 1200)
    train(tmp_path / "resumed", 560)  # stops mid-way, with a checkpoint at 560
    resumed = train(tmp_path / "resumed", 1200)
    assert resumed.restored_step == 560 and whole.driver.counters.global_updates == 1200 // 20
    for a, b in zip(whole.agent.shared_variables, resumed.agent.shared_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # online and target networks
    optimizers = [run.agent.learner.groups[0].optimizer.variables for run in (whole, resumed)]
    for a, b in zip(*optimizers, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    workers = (whole.driver.backend.workers, resumed.driver.backend.workers)
    for a, b in zip(*workers, strict=True):
        assert a.agent.steps == b.agent.steps  # each worker's epsilon schedule, restored


def test_asynchronous_n_step_q_learning_improves_on_cartpole(tmp_path):
    bindings = [
        "Runner.num_steps = 40000",
        "Runner.eval_interval = 5000",
        "Runner.eval_episodes = 3",
    ]
    runner = experiments.train([CONFIG], _bindings(bindings), str(tmp_path)).runner
    # A uniformly random policy averages ~22 steps on CartPole-v1 (its greedy one about 10).
    assert max(value for _, value in runner.eval_returns) > 150, runner.eval_returns


def test_config_builds_and_every_binding_is_used(tmp_path):
    experiments.build([CONFIG], base_dir=str(tmp_path), strict=True).runner.close()


def test_the_runner_trains_it_synchronously_over_a_vector_env(tmp_path):
    bindings = [
        "Runner.agent = @NStepQAgent",
        "Runner.env_factory = @make_env",
        "make_env.env_id = 'CartPole-v1'",
        "Runner.num_envs = 8",
        "Runner.num_steps = 2000",
        "Runner.eval_interval = 2000",
        "Runner.eval_episodes = 1",
    ]
    result = experiments.train(["gin_configs/dqn/cartpole.gin"], bindings, str(tmp_path), 0)
    assert result.runner.state.gradient_steps == 2000 // (8 * 5)  # one per 5-step rollout
    assert [step for step, _ in result.eval_returns] == [2000]
