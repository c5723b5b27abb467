"""A run of the runner's schedule without a network or a learner: a fake agent on a fake
environment, whose counts are worked out by hand (tests of the schedule and of callbacks)."""

import csv

import gymnasium as gym
import numpy as np

from framework.agent import Agent, Health, State, VectorStep
from framework.runner import Runner
from framework.storage.run_directory import RunDirectory


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


def make_runner(base_dir, **overrides) -> Runner:
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


def crossings(interval: int, num_steps: int = 30, width: int = 3) -> list[int]:
    """The first vector step at or past each multiple of `interval`, and the last step."""
    steps = {-(-k * interval // width) * width for k in range(1, num_steps // interval + 1)}
    return sorted(steps | {num_steps})


def progress_table(folder) -> list[dict[str, str]]:
    with open(RunDirectory(str(folder)).progress_path(), newline="") as f:
        return list(csv.DictReader(f))
