"""Evaluation episodes on an environment of their own, and how their result is recorded.

An evaluation is seeded by the step it is taken at, so it depends on nothing that came before
and never changes the training run; the runner and A3C's driver both evaluate this way.
"""

import dataclasses
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from absl import logging

from framework.summaries import SummaryWriters


@dataclasses.dataclass(frozen=True)
class Evaluation:
    step: int
    mean_return: float
    std_return: float
    mean_length: float


def evaluate(
    env: gym.Env, act: Callable[[np.ndarray], int], episodes: int, seed: int, step: int
) -> Evaluation:
    """`episodes` episodes of the greedy policy `act(observation) -> action`."""
    env.reset(seed=seed + step)
    returns, lengths = [], []
    for _ in range(episodes):
        observation, _ = env.reset()
        total, length, done = 0.0, 0, False
        while not done:
            observation, reward, terminated, truncated, _ = env.step(act(observation))
            total, length, done = total + float(reward), length + 1, terminated or truncated
        returns.append(total)
        lengths.append(length)
    return Evaluation(
        step, float(np.mean(returns)), float(np.std(returns)), float(np.mean(lengths))
    )


def record(writers: SummaryWriters, result: Evaluation, best: float | None) -> float:
    """Logs an evaluation to eval/ and the console; returns the best mean return so far."""
    best = result.mean_return if best is None else max(best, result.mean_return)
    writers.scalars(
        "eval",
        result.step,
        {
            "eval/episode_return": result.mean_return,
            "eval/episode_return_std": result.std_return,
            "eval/episode_length": result.mean_length,
            "eval/best_episode_return": best,
        },
    )
    logging.info(
        "eval at step %d: return %.1f +- %.1f (best so far %.1f)",
        result.step,
        result.mean_return,
        result.std_return,
        best,
    )
    return best
