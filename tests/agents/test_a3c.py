"""A3C (A2C's agent on the asynchronous driver): a worker's push is the sum of its rollouts'
gradients, a pull makes it equal to the global networks, round-robin runs are deterministic and
resume exactly, the Ray path (remote workers see the command line's bindings), learning on
CartPole, and checkpoints of the global state."""

import dataclasses
import glob
import time

import gin
import numpy as np
import pytest
import tensorflow as tf

import experiments
from agents.a2c import A2CAgent
from framework import config
from framework.drivers.worker import Worker
from framework.parts.environments import make_env
from framework.runner import Runner
from framework.storage.event_reader import read_scalars, read_tags
from tests.experiments import cli

CONFIG = "gin_configs/a3c/cartpole.gin"
SHORT = [  # 2 workers of 2 sub-environments, pushes of 2 rollouts of 5 vector steps (20 steps)
    "AsynchronousDriver.num_workers = 2",
    "Runner.eval_interval = 100000",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 100",
    "make_env.max_episode_steps = 30",
    "optimizers.ExponentialDecay.initial_learning_rate = 0.005",  # visible moves, short runs
]


def _bindings(bindings, base) -> list[str]:
    """In turn (`RoundRobin`) unless `bindings` choose another backend."""
    if not any(binding.startswith("AsynchronousDriver.backend") for binding in bindings):
        bindings = ["AsynchronousDriver.backend = @RoundRobin", *bindings]
    return [*base, *bindings]


def _a3c(base_dir, bindings=(), base=SHORT) -> Runner:
    return experiments.build([CONFIG], _bindings(bindings, base), str(base_dir)).runner


def _train(base_dir, bindings=(), base=SHORT) -> Runner:
    return experiments.train([CONFIG], _bindings(bindings, base), str(base_dir)).runner


def _resume(runner: Runner) -> Runner:
    """Trains a runner that was built (and maybe restored) by hand, as `train` would."""
    prepared = experiments.PreparedRun(runner, runner.run_directory, command="test")
    return experiments.train_prepared(prepared).runner


def _weights(runner: Runner) -> list[np.ndarray]:
    return [v.numpy() for v in runner.agent.shared_variables]


def _optimizer_variables(runner: Runner) -> list[np.ndarray]:
    return [v.numpy() for v in runner.agent.learner.groups[0].optimizer.variables]


def test_a_push_is_the_sum_of_its_rollouts_gradients():
    gin.clear_config()
    config.parse(
        [CONFIG],
        ["A2CAgent.gradient_processor = @Accumulate()", "Accumulate.steps = 3"],  # no clipping
    )
    worker = Worker(0, seed=1, env_factory=make_env, num_envs=2, agent=A2CAgent)
    batches = []
    compute = worker.gradients

    def recording(batch):
        batches.append({name: np.array(array) for name, array in batch.items()})
        return compute(batch)

    worker.gradients = recording
    result = worker.work()
    assert len(batches) == 3 and result.pushed and result.env_steps == 3 * 5 * 2
    # Each rollout's gradient on its own, by a tape on the same loss and (unchanged) weights.
    variables = worker.agent.network.trainable_variables
    expected = [np.zeros(v.shape, np.float32) for v in variables]
    for batch in batches:
        with tf.GradientTape() as tape:
            loss, _ = worker.agent.loss({name: array[0] for name, array in batch.items()})
        for total, gradient in zip(expected, tape.gradient(loss, variables), strict=True):
            total += gradient.numpy()
    [pushed] = result.gradients
    for got, want in zip(pushed, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert result.health.gradient_steps == 3 and result.metrics["accumulate/calls"] == 2.0
    worker.close()


def test_a_pull_makes_a_workers_weights_equal_to_the_global_ones(tmp_path):
    a3c = _a3c(tmp_path)
    a3c.agent.follow_run(a3c.num_steps)  # as `Runner.run` does before training: the decay's length
    driver = a3c.driver
    worker = driver.backend.workers[1]
    driver._pull(1)
    driver._apply(1, worker.work(), env_steps=20)  # the global networks move, the worker's don't
    local = worker.agent.network.weights
    assert not all(np.array_equal(v, g) for v, g in zip(local, _weights(a3c), strict=True))
    driver._pull(1)
    for variable, expected in zip(local, _weights(a3c), strict=True):
        np.testing.assert_array_equal(variable.numpy(), expected)
    # Acting reads the pulled weights too; and a remote pull (values, not variables) as well.
    observation = np.array([0.1, -0.2, 0.05, 0.3], np.float32)
    logits, value = a3c.agent.network(observation[None])
    diagnostics = worker.agent.diagnostics(observation)
    np.testing.assert_allclose(diagnostics["policy/value"], value[0], rtol=1e-5)
    probs = [diagnostics["policy/prob_0"], diagnostics["policy/prob_1"]]
    np.testing.assert_allclose(probs, tf.nn.softmax(logits[0]), rtol=1e-5)
    other = driver.backend.workers[0]
    other.pull([value * 2 for value in _weights(a3c)])
    for variable, expected in zip(other.agent.network.weights, _weights(a3c), strict=True):
        np.testing.assert_array_equal(variable.numpy(), expected * 2)
    assert driver.counters.pulled_at == [0, 1] and driver.counters.global_updates == 1
    a3c.close()


def test_round_robin_runs_are_deterministic(tmp_path):
    first = _train(tmp_path / "first", ["Runner.num_steps = 400"])
    second = _train(tmp_path / "second", ["Runner.num_steps = 400"])
    assert first.driver.counters.global_updates == 400 // 20
    for a, b in zip(_weights(first), _weights(second), strict=True):
        np.testing.assert_array_equal(a, b)
    assert first.state == second.state and first.driver.counters == second.driver.counters


def test_round_robin_resume_is_exact_and_restores_networks_optimizer_and_counters(tmp_path):
    # The rate's decay spans the run as its first start had it (320 steps, below), so the
    # uninterrupted run writes that length out.
    whole = _train(
        tmp_path / "whole",
        ["Runner.num_steps = 600", "optimizers.ExponentialDecay.decay_steps = 320"],
    )
    # Stopped at 320 steps (a checkpoint there, mid-episode for some sub-environments), then
    # started again on the same folder with the full budget.
    part = _train(tmp_path / "resumed", ["Runner.num_steps = 320"])
    saved = (_weights(part), _optimizer_variables(part), part.state, part.driver.counters)
    resumed = _a3c(tmp_path / "resumed", ["Runner.num_steps = 600"])
    assert resumed.restore() == 320
    restored = _weights(resumed) + _optimizer_variables(resumed)
    for a, b in zip(saved[0] + saved[1], restored, strict=True):
        np.testing.assert_array_equal(a, b)
    assert (resumed.state, resumed.driver.counters) == saved[2:]
    assert resumed.driver.counters.global_updates == 16
    _resume(resumed)
    for a, b in zip(_weights(whole), _weights(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
    assert _optimizer_variables(whole)[0] == _optimizer_variables(resumed)[0]  # iterations
    # Evaluated at 320 too (the end of the first start), so only the best eval return differs.
    assert dataclasses.replace(whole.state, best_eval_return=None) == dataclasses.replace(
        resumed.state, best_eval_return=None
    )
    assert whole.driver.counters == resumed.driver.counters


def test_resuming_with_another_number_of_workers_is_one_paragraph(tmp_path):
    threads = "AsynchronousDriver.backend = @Threads"  # workers are not in its checkpoints
    _train(tmp_path, ["Runner.num_steps = 100", threads])
    with pytest.raises(experiments.RunError) as raised:
        more = ["Runner.num_steps = 200", "AsynchronousDriver.num_workers = 3", threads]
        _train(tmp_path, more, base=SHORT[1:])  # SHORT[0] binds num_workers = 2
    message = str(raised.value)
    assert "written by 2 workers and AsynchronousDriver.num_workers is 3" in message, message
    assert "+AsynchronousDriver.num_workers = 3" in message  # the config change, named


def test_threads_resume_from_the_global_networks_optimizer_and_counters(tmp_path):
    first = _train(tmp_path, ["AsynchronousDriver.backend = @Threads", "Runner.num_steps = 300"])
    # Which thread takes how many rollouts is up to the scheduler; together they took 300.
    assert first.driver.counters.global_updates >= 300 // 20
    assert sum(first.driver.counters.worker_env_steps) == first.state.env_steps == 300
    resumed = _a3c(tmp_path, ["AsynchronousDriver.backend = @Threads", "Runner.num_steps = 500"])
    assert resumed.restore() == first.state.env_steps
    for a, b in zip(_weights(first), _weights(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_optimizer_variables(first), _optimizer_variables(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
    assert resumed.state == first.state and resumed.driver.counters == first.driver.counters
    _resume(resumed)
    assert resumed.state.env_steps >= 500 and resumed.driver.counters.global_updates >= 500 // 20


@pytest.fixture(scope="module")
def ray_run(local_ray, tmp_path_factory):
    """2 Ray actors, a few pushes; bindings given to the entry as on a command line."""
    base_dir = tmp_path_factory.mktemp("ray")
    bindings = [
        "AsynchronousDriver.backend = @RayActors",
        "RayActors.num_cpus = 0.5",
        "Runner.num_steps = 300",
        "A2CAgent.n_steps = 3",  # pushes of 2 rollouts of 3 vector steps (12 steps)
        "PolicyGradientLoss.entropy_coef = 0.0123",
    ]
    runner = _train(base_dir, bindings)
    gin.clear_config()
    return runner, base_dir


def test_ray_actors_push_and_pull(ray_run):
    runner, base_dir = ray_run
    counters = runner.driver.counters
    assert runner.state.env_steps >= 300 and counters.global_updates >= 300 // 12
    # Both actors were built (each described itself); under load one may do every push.
    assert len(runner.driver.worker_descriptions) == 2
    assert sum(counters.worker_env_steps) == runner.state.env_steps
    assert counters.parameter_syncs == counters.global_updates + 2  # + the first pulls
    scalars = read_scalars(base_dir)
    for tag in ("async/staleness_mean", "async/parameter_syncs", "train/policy_loss"):
        assert tag in scalars, tag


def test_remote_workers_see_the_command_lines_bindings(ray_run):
    runner, _ = ray_run
    for index, description in enumerate(runner.driver.worker_descriptions):
        assert description["worker"] == index
        assert description["n_steps"] == 3 and description["entropy_coef"] == 0.0123
        assert description["gradient_processor"].startswith("Chain(Accumulate(steps=2)")


def test_cartpole_improves_within_a_small_budget(tmp_path):
    # A uniformly random policy averages ~22 steps on CartPole-v1.
    runner = _train(
        tmp_path,
        [
            "AsynchronousDriver.num_workers = 2",
            "Runner.num_steps = 6000",
            "Runner.eval_interval = 3000",
            "Runner.eval_episodes = 3",
            "Runner.log_interval = 1000",
            "Runner.histogram_interval = 3000",
            "optimizers.ExponentialDecay.initial_learning_rate = 0.002",
        ],
        base=[],
    )
    # Over seeds 0-3 the best evaluation here was 88, 232, 419 and 163: more than 3x random.
    assert max(value for _, value in runner.eval_returns) > 75, runner.eval_returns
    scalars = read_scalars(tmp_path)
    returns = [value for _, value in scalars["train/episode_return"]]
    assert np.mean(returns[-10:]) > 2 * np.mean(returns[:10])
    for tag in (
        "train/policy_loss",
        "train/value_loss",
        "train/entropy",
        "train/advantage_mean",
        "train/advantage_std",
        "train/grad_norm",
        "train/pushed_grad_norm",
        "train/learning_rate",
        "async/staleness_max",
        "async/global_updates",
        "workers/worker_1_env_steps",
        "train/applied_updates",  # what the runner gives every run, this driver's too
        "policy/prob_1",
        "policy/value",
    ):
        assert tag in scalars, tag
    assert any(tag.startswith("weights/") for tag in read_tags(tmp_path))  # histograms
    # In turn, a worker pulls right after its push: the other worker's one push in between.
    assert [value for _, value in scalars["async/staleness_max"]][-1] == 1


def test_ray_actors_that_cannot_all_start_are_refused_not_waited_for(local_ray, tmp_path):
    bindings = [
        "AsynchronousDriver.backend = @RayActors",
        "RayActors.num_cpus = 1.5",
        "Runner.num_steps = 30",
    ]
    with pytest.raises(
        experiments.RunError, match=r"2 Ray actors .* RayActors.num_cpus = 1.5 .* 2 CPUs.* hang"
    ):
        _train(tmp_path, bindings)  # 2 x 1.5 CPUs on 2: Ray would wait for the second forever
    gin.clear_config()


def _processes() -> dict[int, int]:
    """Every running process (not a zombie) -> its parent."""
    parents = {}
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):  # it ended while we looked
            continue
        if state != "Z":
            parents[int(path.split("/")[2])] = int(parent)
    return parents


def _descendants(pid: int) -> list[int]:
    """The running processes `pid` started, and theirs."""
    parents = _processes()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, its_parent in parents.items() if its_parent == parent]
        found += children
        todo += children
    return found


@pytest.mark.process
@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_process_workers_end_with_a_killed_run(tmp_path, delay):
    """SIGKILLed while its workers start (as they spawn; a second later, while they import
    TensorFlow), the run leaves no worker running: each dies with it within about a second.
    They used to unpickle their work (seconds of imports) before asking the kernel to kill
    them with their parent, and ran on for that long."""
    backend = ["AsynchronousDriver.backend = @Processes", "Runner.num_steps = 100000"]
    process = cli.start(tmp_path, CONFIG, [*SHORT, *backend])
    deadline = time.monotonic() + 120
    while len(started := _descendants(process.pid)) < 3:  # 2 workers, multiprocessing's tracker
        assert process.poll() is None and time.monotonic() < deadline, "no workers started"
        time.sleep(0.01)
    time.sleep(delay)
    process.kill()
    process.wait()

    killed = time.monotonic()
    while (running := set(started) & set(_processes())) and time.monotonic() < killed + 1.5:
        time.sleep(0.02)
    assert not running, f"{running} still ran {time.monotonic() - killed:.1f} s after the kill"
