"""Evaluation episodes on an environment of their own.

An evaluation is seeded by the step it is taken at, so it depends on nothing that came before
and never changes the training run. An environment that knows each step's expected reward says
so in `info["expected_reward"]` (the bandit: the mean of the arm pulled), and an evaluation
sums that instead of the sampled reward: its return is then the policy's expected return for
the actions it took, not that plus the reward's noise (a greedy bandit policy's evaluation is
its arm's mean, whatever the draws). Training learns from the sampled rewards as ever.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np


@dataclasses.dataclass(frozen=True)
class Evaluation:
    step: int
    mean_return: float
    std_return: float
    mean_length: float
    returns: tuple[float, ...]  # of each episode
    lengths: tuple[int, ...]


def evaluate(
    env: gym.Env, act: Callable[[np.ndarray], Any], episodes: int, seed: int, step: int
) -> Evaluation:
    """`episodes` episodes of the policy `act(observation) -> action`, the environment's
    generator seeded once with `seed + step`; each step counts its expected reward where the
    environment gives one (`info["expected_reward"]`), else its reward."""
    env.reset(seed=seed + step)
    returns, lengths = [], []
    for _ in range(episodes):
        observation, _ = env.reset()
        total, length, done = 0.0, 0, False
        while not done:
            observation, reward, terminated, truncated, info = env.step(act(observation))
            reward = info.get("expected_reward", reward)
            total, length, done = total + float(reward), length + 1, terminated or truncated
        returns.append(total)
        lengths.append(length)
    return Evaluation(
        step,
        float(np.mean(returns)),
        float(np.std(returns)),
        float(np.mean(lengths)),
        tuple(returns),
        tuple(lengths),
    )
