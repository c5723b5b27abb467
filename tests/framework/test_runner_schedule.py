"""The runner's schedule with a fake agent on a fake environment (no network, no learner): the
cadences at vector steps, the non-finite policy, and a signal's stop, save and resume."""

import gymnasium as gym
import numpy as np
import pytest

from framework.agent import Agent, Health, State, VectorStep
from framework.checkpointing import complete_steps
from framework.event_reader import read_scalars
from framework.run_directory import RunDirectory
from framework.runner import NonFiniteError, Runner, Stopped


class CountingEnv(gym.Env):
    """Episodes of 4 steps, reward 1 each; the observation counts the steps taken."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t == 4, False, {}


class ScriptedAgent(Agent):
    """Updates after every other vector step; `script(steps) -> Health` says how it went."""

    script = None  # set by a test: transitions observed -> this update's Health

    def __init__(self, observation_space, action_space, seed):
        super().__init__(observation_space, action_space, seed)
        self.steps = 0
        self.updates = 0

    def act(self, observations, explore):
        return self.rng.integers(2, size=len(observations))

    def observe(self, step: VectorStep) -> None:
        self.steps += step.num_envs

    def update(self, env_steps):
        if self.steps % (2 * 3):  # every other vector step of 3 sub-environments
            return {}, Health()
        self.updates += 1
        health = Health(gradient_steps=1, applied_updates=1)
        if ScriptedAgent.script is not None:
            health = ScriptedAgent.script(self.steps) or health
        return {"loss": float(self.steps)}, health

    def interrupt_episodes(self) -> None:
        pass

    def state(self) -> State:
        return {**super().state(), "steps": self.steps, "updates": self.updates}

    def load_state(self, state: State) -> None:
        super().load_state(state)
        self.steps, self.updates = state["steps"], state["updates"]

    def policy_state(self) -> State:
        return {"steps": self.steps}

    def load_policy_state(self, state: State) -> None:
        self.steps = state["steps"]


@pytest.fixture(autouse=True)
def _no_script():
    yield
    ScriptedAgent.script = None


def _runner(base_dir, **overrides) -> Runner:
    settings = dict(
        agent=ScriptedAgent,
        env_factory=CountingEnv,
        num_envs=3,
        num_steps=30,
        eval_interval=10,
        eval_episodes=1,
        checkpoint_interval=7,
        max_checkpoints_to_keep=100,
        log_interval=5,
        histogram_interval=1000,
    )
    return Runner(RunDirectory(str(base_dir)), **{**settings, **overrides})


def _crossings(interval: int, num_steps: int = 30, width: int = 3) -> list[int]:
    """The first vector step at or past each multiple of `interval`, and the last step."""
    steps = {-(-k * interval // width) * width for k in range(1, num_steps // interval + 1)}
    return sorted(steps | {num_steps})


def test_cadences_fire_at_the_first_vector_step_crossing_each_multiple(tmp_path):
    runner = _runner(tmp_path)
    curve = runner.run()
    runner.close()
    assert [step for step, _ in curve] == _crossings(10) == [12, 21, 30]
    assert sorted(complete_steps(runner.run_directory.checkpoint_dir)) == _crossings(7)
    scalars = read_scalars(tmp_path)
    logged = [step for step, _ in scalars["train/steps_per_second"]]
    assert logged == _crossings(5) == [6, 12, 15, 21, 27, 30]
    # One point per vector step in which episodes ended (every 4th: 12, 24), all 3 at once.
    assert scalars["train/episodes_ended"] == [(12, 3.0), (24, 3.0)]
    assert scalars["train/loss"][-1] == (30, 30.0)  # the latest update's metrics, at the log
    assert runner.state.gradient_steps == runner.agent.updates == 5  # every 6 transitions
    assert [value for _, value in curve] == [4.0, 4.0, 4.0]


def test_a_nonfinite_update_stops_the_run_at_its_step_without_a_checkpoint(tmp_path):
    ScriptedAgent.script = lambda steps: (
        Health(gradient_steps=4, applied_updates=3, nonfinite_steps=1, nonfinite_losses=1)
        if steps == 18
        else None
    )
    runner = _runner(tmp_path)
    with pytest.raises(NonFiniteError) as error:
        runner.run()
    message = str(error.value)
    assert "Non-finite loss at environment step 18: 1 of the 4 gradient steps" in message
    assert "3 were (3 optimizer updates)" in message
    assert "last good checkpoint is at step 15" in message
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 15


def test_skipping_nonfinite_updates_counts_them_and_stops_when_a_whole_interval_is_skipped(
    tmp_path,
):
    ScriptedAgent.script = lambda steps: (
        Health(gradient_steps=1, nonfinite_steps=1) if steps in (6, 24) else None
    )
    # Logs at 12, 21 and 30: one of the two updates of the first and the last interval skipped.
    skipping = _runner(tmp_path / "some", skip_nonfinite_updates=True, log_interval=10)
    skipping.run()
    assert skipping.state.skipped_nonfinite_steps == 2 and skipping.state.gradient_steps == 5
    assert read_scalars(tmp_path / "some")["train/skipped_nonfinite_steps"][-1] == (30, 2.0)

    ScriptedAgent.script = lambda steps: Health(gradient_steps=1, nonfinite_steps=1)
    failing = _runner(tmp_path / "all", skip_nonfinite_updates=True)
    with pytest.raises(NonFiniteError, match="1 of the 1 gradient steps in the log interval up"):
        failing.run()
    assert failing.state.env_steps == 6  # the first log step


def test_a_signal_mid_advance_stops_at_that_step_with_a_checkpoint_and_resumes_exactly(tmp_path):
    whole = _runner(tmp_path / "whole")
    whole.run()
    runner = _runner(tmp_path / "stopped")

    def signal_at_18(steps):  # inside an advance, between two checkpoints (15, 21)
        if steps == 18:
            runner.stop_requested = "SIGTERM"

    ScriptedAgent.script = signal_at_18
    with pytest.raises(Stopped, match="stopped by SIGTERM at environment step 18"):
        runner.run()
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 18
    ScriptedAgent.script = None
    resumed = _runner(tmp_path / "stopped")
    assert resumed.restore() == 18
    resumed.run()
    assert resumed.state == whole.state
    assert (resumed.agent.steps, resumed.agent.updates) == (whole.agent.steps, whole.agent.updates)
    assert (
        read_scalars(tmp_path / "stopped")["train/loss"]
        == read_scalars(tmp_path / "whole")["train/loss"]
    )
