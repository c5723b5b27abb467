"""The training loop: act, observe, update, evaluate, checkpoint, log. It knows no algorithm.

Checkpoints are taken at episode boundaries (the first episode end after each
`checkpoint_interval` steps, and at the end), where the only environment state that matters is
its random generators. A checkpoint holds everything else that decides the rest of the run: the
agent's variables and optimizer slots, its numpy-side state (replay, generator, counters), the
loop's counters, and every random generator (the environment's, its action space's, Python's,
numpy's and TF's global ones). A resumed run therefore continues exactly as the uninterrupted
run would have: same episodes, same updates, bitwise the same weights.
"""

import collections
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import gin
import gymnasium as gym
import numpy as np
import tensorflow as tf
from absl import logging

from agents.base import Agent, Transition
from framework.checkpointing import CheckpointStore
from framework.parts.environments import make_env
from framework.learner import COUNTED_METRICS
from framework.seeding import (
    derived_seeds,
    global_rng_states,
    seed_everything,
    set_global_rng_states,
)
from framework.summaries import (
    SummaryWriters,
    set_aside_events,
    supersede_events_after,
    to_floats,
)
from framework.validation import require_positive


class NonFiniteError(FloatingPointError):
    """A NaN or inf in a loss or gradient; the message names the step and last checkpoint."""


@dataclass
class RunnerState:
    """The loop's own counters, saved with every checkpoint."""

    env_steps: int = 0
    episodes: int = 0
    skipped_nonfinite_steps: int = 0
    last_checkpoint_step: int = 0
    env_rng: dict | None = None
    action_space_rng: dict | None = None
    global_rngs: dict | None = None  # Python's and numpy's global generators
    unlogged_metrics: dict[str, float] = field(default_factory=dict)  # since the last log


@gin.configurable(denylist=["base_dir"])
class Runner:
    """Trains `agent` on `env_factory()` for `num_steps` environment steps.

    Args:
      base_dir: the run's folder; starting again on the same folder resumes.
      agent: a factory `(observation_space, action_space, seed) -> Agent`, e.g. an agent class.
      env_factory: builds the training and the evaluation environment.
      skip_nonfinite_updates: skip (and count) updates whose loss or gradient is NaN/inf
        instead of stopping the run.
    """

    def __init__(
        self,
        base_dir: str,
        agent: Callable[..., Agent] = gin.REQUIRED,
        env_factory: Callable[[], gym.Env] = make_env,
        num_steps: int = 100_000,
        eval_interval: int = 10_000,
        eval_episodes: int = 10,
        checkpoint_interval: int = 10_000,
        max_checkpoints_to_keep: int = 3,
        log_interval: int = 1_000,
        histogram_interval: int = 10_000,
        seed: int = 0,
        skip_nonfinite_updates: bool = False,
    ):
        require_positive(
            self,
            num_steps=num_steps,
            eval_interval=eval_interval,
            eval_episodes=eval_episodes,
            max_checkpoints_to_keep=max_checkpoints_to_keep,
            checkpoint_interval=checkpoint_interval,
            log_interval=log_interval,
            histogram_interval=histogram_interval,
        )
        self.base_dir = base_dir
        self.num_steps = num_steps
        self.eval_interval = eval_interval
        self.eval_episodes = eval_episodes
        self.checkpoint_interval = checkpoint_interval
        self.max_checkpoints_to_keep = max_checkpoints_to_keep
        self.log_interval = log_interval
        self.histogram_interval = histogram_interval
        self.seed = seed
        self.skip_nonfinite_updates = skip_nonfinite_updates
        if not 0 <= seed < 2**32:
            raise ValueError(f"Runner.seed (or --seed) must be in [0, 2**32), got {seed}.")
        seed_everything(seed)
        agent_seed, env_seed, action_space_seed, self._eval_seed = derived_seeds(seed, 4)
        self.env = env_factory()
        self.eval_env = env_factory()
        self.agent = agent(self.env.observation_space, self.env.action_space, agent_seed)
        # Seed once; every later reset draws from the environment's own generator, whose state
        # each checkpoint saves.
        self.env.reset(seed=env_seed)
        self.env.action_space.seed(action_space_seed)
        self.state = RunnerState()
        self._store: CheckpointStore | None = None
        self.restored_step: int | None = None  # set by `restore`
        self.eval_returns: list[tuple[int, float]] = []  # (env step, mean return)
        self.checkpoint_cost: tuple[float, int] | None = None  # last save: (seconds, bytes)
        self.resume_seconds: float | None = None

    # ----- checkpoints -------------------------------------------------------------------------

    def _write_extras(self, directory: str) -> None:
        self.agent.save_extras(directory)
        with open(os.path.join(directory, "runner_state.json"), "w") as f:
            json.dump(asdict(self.state), f)

    def _read_extras(self, directory: str) -> None:
        self.agent.restore_extras(directory)
        with open(os.path.join(directory, "runner_state.json")) as f:
            self.state = RunnerState(**json.load(f))

    def _save(self, store: CheckpointStore, writers: SummaryWriters) -> None:
        writers.flush()  # what was logged up to this step must survive a kill from here on
        self.state.env_rng = self.env.unwrapped.np_random.bit_generator.state
        self.state.action_space_rng = self.env.action_space.np_random.bit_generator.state
        self.state.global_rngs = global_rng_states()
        self.state.last_checkpoint_step = self.state.env_steps
        start = time.perf_counter()
        size = store.save(self.state.env_steps, self._write_extras)
        self.checkpoint_cost = (time.perf_counter() - start, size)
        logging.info(
            "Checkpoint at step %d: %.1f ms, %.2f MB.",
            self.state.env_steps,
            1000 * self.checkpoint_cost[0],
            size / 1e6,
        )

    def restore(self) -> int | None:
        """Restores the newest complete checkpoint in the run folder; returns its step or None.

        `run` calls it if it was not called before; call it first to act on the outcome.
        """
        self._store = CheckpointStore(
            os.path.join(self.base_dir, "checkpoints"),
            {"tf_rng": tf.random.get_global_generator(), **self.agent.checkpoint_items()},
            max_to_keep=self.max_checkpoints_to_keep,
        )
        start = time.perf_counter()
        step = self.restored_step = self._store.restore_latest(self._read_extras)
        if step is None:
            return None
        self.agent.restored()
        self.env.unwrapped.np_random.bit_generator.state = self.state.env_rng
        self.env.action_space.np_random.bit_generator.state = self.state.action_space_rng
        set_global_rng_states(self.state.global_rngs)
        self.resume_seconds = time.perf_counter() - start
        logging.info(
            "Resumed from %s at environment step %d (%.2f s).",
            self._store.directory,
            step,
            self.resume_seconds,
        )
        return step

    # ----- evaluation --------------------------------------------------------------------------

    def evaluate(self) -> tuple[float, float, float]:
        """Mean and std of the return, and the mean length, over `eval_episodes` episodes."""
        returns, lengths = [], []
        # Seeded by the step, so an evaluation does not depend on earlier ones.
        self.eval_env.reset(seed=self._eval_seed + self.state.env_steps)
        self.agent.seed_evaluation(self._eval_seed + self.state.env_steps)
        for _ in range(self.eval_episodes):
            observation, _ = self.eval_env.reset()
            episode_return, length, done = 0.0, 0, False
            while not done:
                action = self.agent.act(observation, explore=False)
                observation, reward, terminated, truncated, _ = self.eval_env.step(action)
                episode_return += float(reward)
                length += 1
                done = terminated or truncated
            returns.append(episode_return)
            lengths.append(length)
        return float(np.mean(returns)), float(np.std(returns)), float(np.mean(lengths))

    # ----- the loop ----------------------------------------------------------------------------

    def run(
        self,
        texts: dict[str, str] | None = None,
        hyperparameters: dict[str, bool | int | float | str] | None = None,
    ) -> list[tuple[int, float]]:
        """Trains to `num_steps` (resuming if the folder has a checkpoint); returns eval curve.

        `texts` and `hyperparameters` are logged once, when the run starts from scratch.
        """
        os.makedirs(self.base_dir, exist_ok=True)
        if self._store is None:
            self.restore()
        resumed = self.restored_step is not None
        # Whatever was logged after the restored step is logged again from here on; with
        # nothing restored that is everything, including the texts of an earlier start.
        if resumed:
            supersede_events_after(self.base_dir, self.state.env_steps)
        else:
            set_aside_events(self.base_dir)
        writers = SummaryWriters(self.base_dir)
        try:
            if not resumed:  # a resumed run keeps the texts of its start
                for name, text in (texts or {}).items():
                    writers.text(name, text)
                if hyperparameters:
                    writers.hparams(hyperparameters)
            self._train(self._store, writers)
        finally:
            writers.close()
        return self.eval_returns

    def _train(self, store: CheckpointStore, writers: SummaryWriters) -> None:
        state = self.state
        progress = _Progress(state.env_steps, self.log_interval, self.histogram_interval)
        observation = None  # None: the next step starts an episode
        episode_return, episode_length = 0.0, 0
        while state.env_steps < self.num_steps:
            if observation is None:  # reset here, not at the episode end, so that a final
                observation = self._start_episode()  # checkpoint still precedes the reset
            action = self.agent.act(observation, explore=True)
            next_observation, reward, terminated, truncated, _ = self.env.step(action)
            self.agent.observe(
                Transition(
                    observation, action, float(reward), next_observation, terminated, truncated
                )
            )
            state.env_steps += 1
            episode_return += float(reward)
            episode_length += 1
            metrics = self.agent.update()
            if metrics:
                metrics = to_floats(metrics)
                self._check_finite(metrics)
                _merge_metrics(state.unlogged_metrics, metrics)
            if state.env_steps >= progress.next_log or state.env_steps == self.num_steps:
                self._log_progress(writers, progress, next_observation)
            if state.env_steps >= progress.next_histogram:
                writers.histograms(state.env_steps, self.agent.histogram_variables())
                progress.next_histogram += self.histogram_interval
            if state.env_steps % self.eval_interval == 0 or state.env_steps == self.num_steps:
                self._evaluate_and_log(writers)
            if terminated or truncated:
                state.episodes += 1
                progress.returns.append(episode_return)
                writers.scalars(
                    "train",
                    state.env_steps,
                    {
                        "train/episode_return": episode_return,
                        "train/episode_length": episode_length,
                    },
                )
                episode_return, episode_length = 0.0, 0
                if state.env_steps - state.last_checkpoint_step >= self.checkpoint_interval:
                    self._save(store, writers)
                observation = None
            else:
                observation = next_observation
                if episode_length == 10 * self.checkpoint_interval:
                    self._warn_no_boundary(episode_length)
        if state.last_checkpoint_step != state.env_steps:
            self._save(store, writers)  # possibly mid-episode: see `_start_episode`

    def _warn_no_boundary(self, episode_length: int) -> None:
        """Checkpoints wait for an episode end; say so when an episode keeps them waiting."""
        logging.warning(
            "An episode has run for %d steps without ending: no checkpoint is taken until "
            "it does (checkpoints wait for episode ends so that a resume is exact). Give "
            "the environment a time limit (make_env.max_episode_steps).",
            episode_length,
        )

    def _start_episode(self) -> np.ndarray:
        """Resets the environment; the agent drops what is left of an episode that never ended.

        That only happens after resuming from the final checkpoint, taken at `num_steps` in
        the middle of an episode, to train for longer.
        """
        self.agent.start_episode()
        return self.env.reset()[0]

    def _log_progress(
        self, writers: SummaryWriters, progress: "_Progress", observation: np.ndarray
    ) -> None:
        """The latest learner metrics, throughput and policy diagnostics; a progress line."""
        step = self.state.env_steps
        now = time.perf_counter()
        speed = (step - progress.last_step) / (now - progress.last_time)
        scalars = {"steps_per_second": speed, **self.state.unlogged_metrics}
        scalars["skipped_nonfinite_steps"] = self.state.skipped_nonfinite_steps
        scalars["episodes"] = self.state.episodes
        scalars = {f"train/{name}": value for name, value in scalars.items()}
        scalars.update(self.agent.diagnostics(observation))
        writers.scalars("train", step, scalars)
        recent = np.mean(progress.returns) if progress.returns else float("nan")
        logging.info(
            "step %d/%d | return (last %d episodes) %.1f | %.0f steps/s",
            step,
            self.num_steps,
            len(progress.returns),
            recent,
            speed,
        )
        progress.last_step, progress.last_time = step, now
        progress.next_log += self.log_interval
        self.state.unlogged_metrics = {}

    def _evaluate_and_log(self, writers: SummaryWriters) -> None:
        mean, std, length = self.evaluate()
        self.eval_returns.append((self.state.env_steps, mean))
        writers.scalars(
            "eval",
            self.state.env_steps,
            {
                "eval/episode_return": mean,
                "eval/episode_return_std": std,
                "eval/episode_length": length,
            },
        )

    def _check_finite(self, metrics: dict[str, float]) -> None:
        """Stops on a NaN/inf loss or gradient (unless skipping them) or variable (always)."""
        nonfinite = int(metrics["nonfinite_steps"])
        step = self.state.env_steps
        if metrics["nonfinite_variables"]:
            what = f"Non-finite variables at environment step {step}, after a finite update."
        elif nonfinite and not self.skip_nonfinite_updates:
            culprit = "loss" if metrics["nonfinite_losses"] else "gradient"
            what = (
                f"Non-finite {culprit} at environment step {step} in {nonfinite} of the "
                "learner's steps; the update was not applied."
            )
        else:
            self.state.skipped_nonfinite_steps += nonfinite
            return
        last = self.state.last_checkpoint_step
        last_good = (
            f"the last good checkpoint is at step {last} in {self._store.directory}"
            if last
            else "no checkpoint had been written yet"
        )
        raise NonFiniteError(
            f"{what} No checkpoint was written from this state; {last_good}. Lower the learning "
            "rate or clip gradients; Runner.skip_nonfinite_updates = True skips updates with a "
            "non-finite loss or gradient instead."
        )


class _Progress:
    """Bookkeeping for logging: when next, throughput since last time, recent returns."""

    def __init__(self, step: int, log_interval: int, histogram_interval: int):
        self.last_step, self.last_time = step, time.perf_counter()
        # Aligned to multiples of the intervals, so a resumed run logs at the same steps.
        self.next_log = (step // log_interval + 1) * log_interval
        self.next_histogram = (step // histogram_interval + 1) * histogram_interval
        self.returns: collections.deque[float] = collections.deque(maxlen=20)


def _merge_metrics(unlogged: dict[str, float], new: dict[str, float]) -> None:
    """Counted metrics (updates, target updates) add up until logged; the rest keep the latest."""
    for name, value in new.items():
        unlogged[name] = unlogged.get(name, 0.0) + value if name in COUNTED_METRICS else value
