"""The loop over a vector env: real transitions across autoresets, per-env episode tallies."""

import gymnasium as gym
import numpy as np

from framework.agent import Agent, VectorStep
from framework.loop import EnvironmentLoop, make_vector_env
from framework.parts.replay import UniformReplay


class _Countdown(gym.Env):
    """Observation [t] at step t of an episode; reward t + 1; terminates after `length` steps."""

    def __init__(self, length: int):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), float(self.t), self.t == self.length, False, {}


class _Recorder(Agent):
    """Always action 0; records every vector step and feeds a 2-step replay."""

    def __init__(self, observation_space, action_space, seed):
        super().__init__(observation_space, action_space, seed)
        self.steps: list[VectorStep] = []
        self.replay = UniformReplay((1,), np.float32, capacity=100, n_step=2, gamma=0.5)

    def act(self, observations, explore):
        return np.zeros(len(observations), np.int64)

    def observe(self, step):
        self.steps.append(step)
        self.replay.add(step)

    def update(self, env_steps):
        raise NotImplementedError

    def interrupt_episodes(self):
        self.replay.end_episodes()

    def policy_state(self):
        return {}

    def load_policy_state(self, state):
        del state


def _loop(lengths: list[int], max_episode_steps: int | None = None) -> EnvironmentLoop:
    """Sub-env i terminates after lengths[i] steps (or truncates at max_episode_steps)."""
    instances = iter(
        [gym.wrappers.TimeLimit(_Countdown(n), max_episode_steps or 10**6) for n in lengths]
    )
    envs = make_vector_env(lambda: next(instances), len(lengths))
    agent = _Recorder(envs.single_observation_space, envs.single_action_space, seed=0)
    loop = EnvironmentLoop(envs, agent)
    loop.reset(seed=0)
    return loop


def test_a_done_hands_over_the_final_observation_and_the_loop_continues_from_the_reset():
    loop = _loop([2, 3])
    ended = [loop.step() for _ in range(3)]
    steps = loop.agent.steps
    # Env 0 ends at its 2nd step: the transition's next observation is the final [2], the
    # next step starts from the reset observation [0].
    np.testing.assert_array_equal(steps[1].next_observation[:, 0], [2.0, 2.0])
    np.testing.assert_array_equal(steps[1].terminated, [True, False])
    np.testing.assert_array_equal(steps[2].observation[:, 0], [0.0, 2.0])
    np.testing.assert_array_equal(steps[2].next_observation[:, 0], [1.0, 3.0])
    # Returns: env 0's episode 1 + 2 = 3 in 2 steps; env 1's 1 + 2 + 3 = 6 in 3 steps.
    assert ended[0] is None
    np.testing.assert_array_equal(ended[1].returns, [3.0])
    np.testing.assert_array_equal(ended[1].lengths, [2])
    np.testing.assert_array_equal(ended[2].returns, [6.0])
    np.testing.assert_array_equal(ended[2].lengths, [3])


def test_n_step_returns_across_an_autoreset_boundary():
    # Env 0 terminates every 2 steps, env 1 is truncated every 2 steps by its time limit.
    loop = _loop([2, 100], max_episode_steps=2)
    for _ in range(3):
        loop.step()
    transitions = loop.agent.replay.state()
    size = int(transitions["size"])
    rows = sorted(
        zip(
            transitions["observation"][:size, 0],
            transitions["reward"][:size],
            transitions["discount"][:size],
            transitions["next_observation"][:size, 0],
            strict=True,
        )
    )
    # gamma 0.5, rewards t + 1 = 1, 2. Env 0 (terminated at step 2): from [0]: 1 + 0.5 * 2 = 2,
    # discount 0; from [1]: 2, discount 0. Env 1 (truncated at step 2, bootstraps from its final
    # [2]): from [0]: 2, discount 0.25; from [1]: 2, discount 0.5. The third step starts new
    # episodes and nothing of it is stored yet (its 2-step windows are open).
    np.testing.assert_array_equal(
        rows,
        [(0.0, 2.0, 0.0, 2.0), (0.0, 2.0, 0.25, 2.0), (1.0, 2.0, 0.0, 2.0), (1.0, 2.0, 0.5, 2.0)],
    )


def test_returns_and_lengths_are_tallied_per_env():
    loop = _loop([1, 2, 4])
    ended = [loop.step() for _ in range(4)]
    # Step 1: env 0 (return 1); step 2: env 0 (1) and env 1 (1 + 2); step 4: envs 0, 1, 2.
    np.testing.assert_array_equal(ended[1].returns, [1.0, 3.0])
    np.testing.assert_array_equal(ended[3].returns, [1.0, 3.0, 10.0])
    np.testing.assert_array_equal(ended[3].lengths, [1, 2, 4])
    assert ended[2].returns.tolist() == [1.0]
