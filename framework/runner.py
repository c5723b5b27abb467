"""The one scheduler: train, evaluate, log, checkpoint and stop at their cadences, over a driver.

Every algorithm trains under this runner; what moves training forward between two cadence
points is a driver (`Runner.driver`): the synchronous one (a vector env and
`agent.update(env_steps)`, the default) or the asynchronous one (workers pushing gradients to
global networks).

Every count is in transitions summed over the sub-environments, and a cadence fires at the
first step that crosses its next multiple, so a config logs, evaluates and checkpoints at the
same transition counts whatever `num_envs` is. A checkpoint is taken on schedule, mid-episode:
it holds the driver's state (the agent, the loop's observations, episode tallies and, where
they can be saved, the sub-environments themselves), the runner's counters and every random
generator, so a resumed run continues bitwise as the uninterrupted one would. An evaluation
that beats every one before keeps the policy it evaluated (`best/`, outside the resume path).
A run ends at `num_steps`, or, with `stop_at_return`, at the first evaluation whose mean return
reaches it (checkpointed at that step: a normal finish, which a later start sees), or where a
callback (`framework/callbacks.py`) asks it to stop. Callbacks are called at the start, at their
own cadence of steps, after each evaluation and checkpoint, and at the end; with none bound, the
loop does nothing for them.
"""

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import gin
import gymnasium as gym
import numpy as np
import tensorflow as tf
from absl import logging

from framework import loop
from framework.agent import Agent, Health
from framework.callbacks import Callback, Hooks
from framework.compiled import threads  # noqa: F401  (registers tf_threads, which configs bind)
from framework.drivers import asynchronous  # noqa: F401  (registers the driver with gin)
from framework.drivers.driver import AgentFactory, Driver, Seeds
from framework.drivers.synchronous import SynchronousDriver
from framework.loop import EndedEpisodes
from framework.parts.environments import make_env
from framework.seeding import (
    derived_seeds,
    global_rng_states,
    seed_everything,
    set_global_rng_states,
)
from framework.storage.checkpointing import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointMismatchError,
)
from framework.storage.progress_csv import ProgressTable
from framework.storage.run_directory import RunDirectory
from framework.storage.summaries import HParamsSession, SummaryWriters
from framework.validation import require_positive


class NonFiniteError(FloatingPointError):
    """A NaN or inf in a loss, gradient or variable; the message names the step and the last
    good checkpoint."""


class Stopped(Exception):
    """Training stopped on request (a signal) after checkpointing the step it had reached."""

    def __init__(self, signal_name: str, step: int, checkpoint_dir: str, save_seconds: float):
        self.signal_name, self.step = signal_name, step
        if step == 0:  # signalled as training began
            super().__init__(
                f"stopped by {signal_name} before the first training step; there was nothing "
                "to checkpoint. Run the same command again to start."
            )
            return
        super().__init__(
            f"stopped by {signal_name} at environment step {step}; its checkpoint is in "
            f"{checkpoint_dir} (saving took {save_seconds:.2f} s). Run the same command again "
            "to resume from there."
        )


@dataclasses.dataclass
class RunnerState:
    """The runner's own counters, saved with every checkpoint."""

    env_steps: int = 0
    episodes: int = 0
    gradient_steps: int = 0
    applied_updates: int = 0
    skipped_nonfinite_steps: int = 0
    last_checkpoint_step: int = 0
    best_eval_return: float | None = None
    # Since the last log, for the bound on skipped non-finite steps.
    interval_gradient_steps: int = 0
    interval_skipped_steps: int = 0
    # The episodes ended since the last log, for progress.csv's mean return and length, and the
    # returns of the last 20 episodes, for the progress line: saved, so that a run stopped
    # between two logs (a signal) logs the same row and line once resumed.
    interval_episodes: int = 0
    interval_return_sum: float = 0.0
    interval_length_sum: int = 0
    interval_info_sums: list[list] = dataclasses.field(default_factory=list)  # [key, sum] pairs
    recent_returns: list[float] = dataclasses.field(default_factory=list)


# The fields checkpoints written before these were saved lack (the same format otherwise): such
# a checkpoint restores with their defaults, its next row averaging the episodes since the resume.
_PROGRESS_FIELDS = (
    "interval_episodes",
    "interval_return_sum",
    "interval_length_sum",
    "interval_info_sums",
    "recent_returns",
)
_RECENT_RETURNS = 20  # the progress line's window


class RunSeeds(NamedTuple):
    """What a run's seed derives, each from its own stream: loading a trained policy derives
    them as the run did, so that an evaluation is seeded as the run's was."""

    agent: int
    env: int
    evaluation: int  # the evaluation at step S resets its environment with evaluation + S
    reset: int


def run_seeds(seed: int) -> RunSeeds:
    """Seeds every global generator with `seed` and derives the run's own seeds from it."""
    seed_everything(seed)
    return RunSeeds(*derived_seeds(seed, 4))


class Cadence:
    """Fires at the first step that reaches the next multiple of `interval`."""

    def __init__(self, interval: int, step: int):
        self.interval = interval
        self.next = (step // interval + 1) * interval

    def due(self, step: int) -> bool:
        if step < self.next:
            return False
        self.next = (step // self.interval + 1) * self.interval
        return True


@gin.configurable(denylist=["run_directory", "python_callbacks"])
class Runner:
    """Trains `agent` on `env_factory()`'s environment for `num_steps` transitions.

    Args:
      run_directory: the run's folder, opened by the caller; a folder with checkpoints resumes.
      agent: a factory `(observation_space, action_space, seed) -> Agent`, e.g. an agent class.
      env_factory: builds one (sub-)environment; evaluation gets its own.
      driver: what trains between cadence points: `SynchronousDriver` (the default) or
        `AsynchronousDriver` (workers; its own bindings say how many and where they run).
      num_envs: sub-environments the synchronous driver steps together; every count below
        counts transitions summed over all sub-environments.
      skip_nonfinite_updates: skip (and count) updates whose loss or gradient is NaN/inf
        instead of stopping the run.
      max_skipped_fraction: when skipping, stop once this fraction of a log interval's
        gradient steps was skipped (1.0: only when every one of them was).
      stop_at_return: end the run, checkpointed, at the first evaluation whose mean return is
        at least this (None: train to `num_steps`). It is a normal finish: a later start sees
        from the best eval return its checkpoint holds that the run reached it, and trains on
        only where `stop_at_return` is unbound or raised above that return.
      callbacks: code of your own called during training (`framework/callbacks.py`), e.g.
        `[@EarlyStopping()]`; their state is kept in the checkpoints.
      python_callbacks: callbacks given in Python (`experiments.train(callbacks=...)`), called
        after the bound ones.
      info_keys: keys of the environment's info at an episode's last step to log, averaged
        like the return: `train/episode_<key>` in TensorBoard, `train/mean_episode_<key>` in
        progress.csv (SB3's `info_keywords`; e.g. `["is_success"]`); synchronous driver only.
    """

    def __init__(
        self,
        run_directory: RunDirectory,
        agent: AgentFactory = gin.REQUIRED,
        env_factory: Callable[[], gym.Env] = make_env,
        driver: Callable[..., Driver] = SynchronousDriver,
        num_envs: int = 1,
        num_steps: int = 100_000,
        eval_interval: int = 10_000,
        eval_episodes: int = 10,
        checkpoint_interval: int = 10_000,
        max_checkpoints_to_keep: int = 3,
        log_interval: int = 1_000,
        histogram_interval: int = 10_000,
        seed: int = 0,
        skip_nonfinite_updates: bool = False,
        max_skipped_fraction: float = 1.0,
        stop_at_return: float | None = None,
        callbacks: Sequence[Callback] = (),
        python_callbacks: Sequence[Callback] = (),
        info_keys: Sequence[str] = (),
    ):
        require_positive(
            self,
            num_envs=num_envs,
            num_steps=num_steps,
            eval_interval=eval_interval,
            eval_episodes=eval_episodes,
            max_checkpoints_to_keep=max_checkpoints_to_keep,
            checkpoint_interval=checkpoint_interval,
            log_interval=log_interval,
            histogram_interval=histogram_interval,
        )
        if not 0 <= seed < 2**32:
            raise ValueError(f"Runner.seed (or --seed) must be in [0, 2**32), got {seed}.")
        if not 0.0 < max_skipped_fraction <= 1.0:
            raise ValueError(
                f"Runner.max_skipped_fraction must be in (0, 1], got {max_skipped_fraction}."
            )
        if stop_at_return is not None and (
            isinstance(stop_at_return, bool)
            or not isinstance(stop_at_return, int | float)
            or not math.isfinite(stop_at_return)
        ):
            raise ValueError(
                "Runner.stop_at_return must be a finite number (an eval return to stop at) or "
                f"None (train to Runner.num_steps), got {stop_at_return!r}."
            )
        if isinstance(info_keys, str) or not all(isinstance(key, str) and key for key in info_keys):
            raise ValueError(
                "Runner.info_keys must be a list of info keys (non-empty strings), e.g. "
                f'["is_success"]; got {info_keys!r}.'
            )
        self.run_directory = run_directory
        self.num_envs = num_envs
        self.num_steps = num_steps
        self.eval_interval = eval_interval
        self.eval_episodes = eval_episodes
        self.checkpoint_interval = checkpoint_interval
        self.log_interval = log_interval
        self.histogram_interval = histogram_interval
        self.seed = seed
        self.skip_nonfinite_updates = skip_nonfinite_updates
        self.max_skipped_fraction = max_skipped_fraction
        self.stop_at_return = stop_at_return
        self.info_keys = tuple(info_keys)
        agent_seed, env_seed, self._eval_seed, reset_seed = run_seeds(seed)
        self.eval_env = env_factory()
        try:
            self.driver = driver(
                agent, env_factory, num_envs, Seeds(agent_seed, env_seed, reset_seed)
            )
        except Exception:
            self.eval_env.close()
            raise
        try:
            self.driver.evaluate_with(self.eval_env)
            self.driver.log_info_keys(self.info_keys)
            callbacks = [*callbacks, *python_callbacks]
            self._hooks = (  # None without callbacks: the loop skips them altogether
                Hooks(callbacks, self.agent, num_steps, self._counts) if callbacks else None
            )
        except ValueError:
            self.driver.close()  # its environments, and the asynchronous driver's workers
            self.eval_env.close()
            raise
        inexact = self.driver.inexact_resume()
        if inexact:  # said at start; a warning when a resume happens (`restore`)
            logging.info("A resume of this run would not continue exactly. %s", inexact)
        self._closed = False
        self.state = RunnerState()
        self._store = run_directory.checkpoint_store(max_checkpoints_to_keep)
        self.stop_requested: str | None = None  # a signal's name: stop after the current step
        self.restored_step: int | None = None  # set by `restore`
        self._restore_attempted = False
        self.eval_returns: list[tuple[int, float]] = []  # (env step, mean return)
        self.checkpoint_cost: tuple[float, int] | None = None  # last save: (seconds, bytes)
        self.resume_seconds: float | None = None
        self.seconds = {"evaluation": 0.0, "logging and checkpoints": 0.0}
        if self._hooks:
            self.seconds["callbacks"] = 0.0
        self.loop_seconds = 0.0  # the training loop's wall-clock time in this start

    @property
    def agent(self) -> Agent:
        """The agent being trained (under the asynchronous driver: the global one)."""
        return self.driver.agent

    def _counts(self) -> tuple[int, int]:
        """The environment steps and episodes reached, for the callbacks' view."""
        return self.state.env_steps, self.state.episodes

    # ----- checkpoints -------------------------------------------------------------------------

    def _checkpoint_state(self) -> dict:
        state = {
            "runner": dataclasses.asdict(self.state),
            "driver": self.driver.state(),
            "rngs": {"global": global_rng_states(), "tf": tf.random.get_global_generator()},
        }
        if self._hooks and self._hooks.in_checkpoint:  # else what a run without callbacks writes
            state["callbacks"] = self._hooks.state()
        return state

    def _save(self, writers: SummaryWriters, table: ProgressTable) -> None:
        # What was logged up to this step must survive a kill, and a power loss, from here on.
        writers.sync()
        table.sync()
        self.state.last_checkpoint_step = self.state.env_steps
        start = time.perf_counter()
        size = self._store.save(self.state.env_steps, self._checkpoint_state())
        self.run_directory.record_checkpoint(self.state.env_steps)
        self.checkpoint_cost = (time.perf_counter() - start, size)
        logging.info(
            "Checkpoint at step %d: %.1f ms, %.2f MB.",
            self.state.env_steps,
            1000 * self.checkpoint_cost[0],
            size / 1e6,
        )
        if self._hooks:
            self._call_hooks(self._hooks.checkpointed)

    def restore(self, start_afresh: bool = False) -> int | None:
        """Restores the newest complete checkpoint in the run folder; returns its step or None.

        `run` calls it if it was not called before; call it first to act on the outcome. A
        folder whose records show a completed checkpoint but that has none usable any more is
        an error (CheckpointError), unless `start_afresh`: then the old checkpoints are set
        aside and training starts from step 0.
        """
        start = time.perf_counter()
        self._restore_attempted = True
        restored = self._restore_latest()
        if restored is None:
            self._check_nothing_lost(start_afresh)
            self._store.tidy()  # what a killed first checkpoint write left
            self.run_directory.keep_best_of(None)
            return None
        step, state = restored
        saved_step = state["runner"].get("env_steps")
        if saved_step != step:  # an edited checkpoint would train steps again, logging them twice
            raise CheckpointError(
                f"The checkpoint at step {step} in {self._store.directory} holds the state of "
                f"environment step {saved_step} (its files were edited or renamed), so resuming "
                "it would train steps again and log them twice. Nothing was changed: move it "
                "out of the folder to resume from the one before, or start a new --base_dir."
            )
        try:
            self.state = RunnerState(**state["runner"])
            exact = self.driver.load_state(state["driver"], step)
            set_global_rng_states(state["rngs"]["global"])
            if self._hooks and self._hooks.in_checkpoint:
                self._hooks.load_state(state["callbacks"])
        except (ValueError, TypeError, KeyError) as error:
            raise CheckpointMismatchError(
                f"The checkpoint at step {step} in {self._store.directory} does not fit this "
                f"run's config: {' '.join(str(error).split())}"
            ) from error
        self._store.tidy()
        self.run_directory.keep_best_of(step)
        self.restored_step = step
        self.resume_seconds = time.perf_counter() - start
        logging.info(
            "Resumed from %s at environment step %d (%.2f s).",
            self._store.directory,
            step,
            self.resume_seconds,
        )
        if not exact:
            logging.warning("%s", self.driver.inexact_resume())
        return step

    def _restore_latest(self) -> tuple[int, dict] | None:
        """The newest usable checkpoint, of this layout or of the one before the progress
        interval was saved (`_PROGRESS_FIELDS`, which then take their defaults): the store
        refuses a checkpoint that lacks a key of the state asked for, so such a run is asked
        for again without them. A failure of both is reported as this layout's."""
        state = self._checkpoint_state()
        try:
            return self._store.restore_latest(state)
        except CheckpointFormatError:
            raise
        except CheckpointError as error:
            runner = {k: v for k, v in state["runner"].items() if k not in _PROGRESS_FIELDS}
            try:
                restored = self._store.restore_latest({**state, "runner": runner})
            except CheckpointError:
                raise error from None
        logging.info(
            "The checkpoint at step %d was written before the runner saved the episodes since "
            "the last log: the next row of progress.csv averages those since this resume (the "
            "checkpoints from here on hold them; the mismatch above is this, nothing else).",
            restored[0],
        )
        return restored

    def _check_nothing_lost(self, start_afresh: bool) -> None:
        """A run never silently trains again from step 0 over a folder that had checkpoints."""
        recorded = self.run_directory.last_checkpoint()
        if recorded is None:
            return
        if not start_afresh:
            raise CheckpointError(
                f"The records of {self.run_directory.base_dir} (metadata.json) show a "
                f"checkpoint completed at step {recorded}, but {self._store.directory} holds "
                "no complete checkpoint now (deleted, or its completion markers are missing). "
                "Nothing was deleted and nothing was trained. Put the checkpoints back to "
                "resume, or start this folder again from step 0 with --start_afresh (the old "
                "files are set aside in discarded/)."
            )
        target = self.run_directory.set_aside_checkpoints()
        logging.warning("Starting afresh: set the old checkpoints aside in %s.", target)

    # ----- evaluation --------------------------------------------------------------------------

    def evaluate(self) -> loop.Evaluation:
        """`eval_episodes` episodes of the agent's evaluation policy, seeded by the step."""
        step, agent = self.state.env_steps, self.agent
        agent.seed_evaluation(self._eval_seed + step)
        return loop.evaluate(
            self.eval_env,
            lambda observation: agent.act(observation[None], explore=False)[0],
            self.eval_episodes,
            self._eval_seed,
            step,
        )

    def _evaluate_and_log(
        self, writers: SummaryWriters
    ) -> tuple[loop.Evaluation, dict[str, float]]:
        """Evaluates, keeps the best policy, logs; returns the evaluation and the scalars it
        logged."""
        result = self.evaluate()
        self.eval_returns.append((result.step, result.mean_return))
        previous = self.state.best_eval_return
        improved = previous is None or result.mean_return > previous
        best = result.mean_return if improved else previous
        self.state.best_eval_return = best
        if improved:
            self._keep_best(result.step, best)
        scalars = {
            "eval/episode_return": result.mean_return,
            "eval/episode_return_std": result.std_return,
            "eval/episode_length": result.mean_length,
            "eval/best_episode_return": best,
        }
        writers.scalars(result.step, scalars)
        logging.info(
            "eval at step %d: return %.1f +- %.1f (%s)",
            result.step,
            result.mean_return,
            result.std_return,
            "the best so far: its policy kept in best/" if improved else f"best {best:.1f}",
        )
        return result, scalars

    def reached_stop_return(self) -> bool:
        """Whether an evaluation of this run reached `stop_at_return`: the best eval return,
        which every checkpoint holds, is at least it."""
        best = self.state.best_eval_return
        return self.stop_at_return is not None and best is not None and best >= self.stop_at_return

    def _keep_best(self, step: int, eval_return: float) -> None:
        """What acting needs, as it acted now, outside the resume path: a failure to write it
        (a full disk) is said and training goes on; the next checkpoint says it too."""
        try:
            self.run_directory.save_best(step, eval_return, self.driver.policy_state())
        except OSError as error:
            logging.warning(
                "Could not keep the best policy of step %d in %s: %s. Training goes on; the "
                "best policy kept before, if any, is intact.",
                step,
                self.run_directory.best_dir,
                " ".join(str(error).split()),
            )

    # ----- the schedule ------------------------------------------------------------------------

    def run(
        self, texts: dict[str, str] | None = None, hparams: HParamsSession | None = None
    ) -> list[tuple[int, float]]:
        """Trains to `num_steps` (resuming if the folder has a checkpoint); returns the eval
        curve of this start.

        `texts` and `hparams` are logged once, when the run starts from scratch.
        """
        if not self._restore_attempted:
            self.restore()
        if self.state.env_steps >= self.num_steps:
            logging.info(
                "This run finished at environment step %d (Runner.num_steps = %d); nothing to "
                "train. To train it longer, start it again with a larger Runner.num_steps, "
                "e.g. --gin_bindings='Runner.num_steps = %d' and the same --base_dir.",
                self.state.env_steps,
                self.num_steps,
                2 * self.num_steps,
            )
            return self.eval_returns
        if self.reached_stop_return():
            logging.info(
                "This run reached Runner.stop_at_return = %g (its best eval return is %.1f) and "
                "ended at environment step %d; nothing to train. To train it further, start it "
                "again with a higher Runner.stop_at_return, or unbind it, and the same --base_dir.",
                self.stop_at_return,
                self.state.best_eval_return,
                self.state.env_steps,
            )
            return self.eval_returns
        for note in self.agent.follow_run(self.num_steps):  # after the restore: it keeps its own
            logging.info("%s", note)
        if self._hooks and self._start_hooks():
            return self.eval_returns
        schedules = self.agent.schedules()
        for schedule in schedules:
            logging.info("Schedule of the %s.", schedule)
        texts = {**(texts or {}), **self.driver.texts()}
        if schedules:
            texts["schedules"] = "\n\n".join(schedules)
        writers = self.run_directory.open_writers(self.restored_step, texts, hparams)
        try:
            table = self.run_directory.open_progress(self.restored_step)
            try:
                start = time.perf_counter()
                try:
                    self._train(writers, table)
                finally:
                    self.loop_seconds = time.perf_counter() - start
            finally:
                table.close()
        finally:
            writers.close()
        return self.eval_returns

    def _start_hooks(self) -> bool:
        """The callbacks' `on_start`; whether one stopped the run before it trained."""
        hooks = self._hooks
        self._call_hooks(hooks.start)
        if hooks.stop_reason is None:
            return False
        logging.info(
            "Stopped by the callback %s, at environment step %d before training; nothing to train.",
            hooks.stop_reason,
            self.state.env_steps,
        )
        self.run_directory.record_stop(self.state.env_steps, hooks.stop_reason)
        self._call_hooks(hooks.end)
        return True

    def _call_hooks(self, call: Callable, *args) -> dict[str, float]:
        """One of the callbacks' calls, timed."""
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.seconds["callbacks"] += time.perf_counter() - start

    def _train(self, writers: SummaryWriters, table: ProgressTable) -> None:
        state, hooks = self.state, self._hooks
        log = Cadence(self.log_interval, state.env_steps)
        histogram = Cadence(self.histogram_interval, state.env_steps)
        evaluation = Cadence(self.eval_interval, state.env_steps)
        checkpoint = Cadence(self.checkpoint_interval, state.env_steps)
        throughput = _Throughput(state.env_steps)
        reached = False  # an evaluation reached stop_at_return: the run ends at its step
        stopped = None  # why a callback stopped the run: it ends at that step
        while (
            state.env_steps < self.num_steps
            and self.stop_requested is None
            and not reached
            and not stopped
        ):
            until = min(self.num_steps, log.next, histogram.next, evaluation.next, checkpoint.next)
            if hooks:
                until = min(until, hooks.next_step)
            advanced = self.driver.advance(state.env_steps, until, self._stop_is_requested)
            state.env_steps = advanced.env_steps
            if hooks:
                hooks.infos = advanced.infos
            start = time.perf_counter()
            for step, ended in advanced.episodes:
                self._log_episodes(writers, step, ended)
            if advanced.health != Health():
                self._account(advanced.health, advanced.last_update)
            last = state.env_steps >= self.num_steps
            row = {}  # the scalars logged at this step, progress.csv's row
            logged = log.due(state.env_steps) or last
            if logged:
                row.update(self._log_progress(writers, throughput, final=last))
            if histogram.due(state.env_steps):
                writers.histograms(state.env_steps, self.agent.histogram_variables())
            self.seconds["logging and checkpoints"] += time.perf_counter() - start
            if evaluation.due(state.env_steps) or last:
                start = time.perf_counter()
                result, scalars = self._evaluate_and_log(writers)
                row.update(scalars)
                self.seconds["evaluation"] += time.perf_counter() - start
                reached = self.reached_stop_return()
                if hooks:
                    self._log_callbacks(writers, row, self._call_hooks(hooks.evaluated, result))
            if hooks:
                self._log_callbacks(writers, row, self._call_hooks(hooks.step))
                stopped = hooks.stop_reason
            if (reached or stopped) and not logged:  # the end of the run: its progress
                _add_to_row(row, self._log_progress(writers, throughput, final=True))
            start = time.perf_counter()
            if row:
                table.add(state.env_steps, row)
            if checkpoint.due(state.env_steps) or last or reached or stopped:
                self._save(writers, table)
            self.seconds["logging and checkpoints"] += time.perf_counter() - start
        if reached:
            logging.info(
                "Reached Runner.stop_at_return = %g at step %d (eval return %.1f): the run ends "
                "here, finished, with its checkpoint at this step.",
                self.stop_at_return,
                state.env_steps,
                self.eval_returns[-1][1],
            )
        if stopped:
            logging.info(
                "Stopped by the callback %s, at step %d: the run ends here, finished, with its "
                "checkpoint at this step.",
                stopped,
                state.env_steps,
            )
            self.run_directory.record_stop(state.env_steps, stopped)
        if self.stop_requested is not None and not (reached or stopped):
            self._stop(writers, table)  # raises Stopped, after the callbacks' on_end
        if hooks:
            self._call_hooks(hooks.end)

    def _log_callbacks(
        self, writers: SummaryWriters, row: dict[str, float], scalars: dict[str, float]
    ) -> None:
        """What the callbacks logged at this step: into TensorBoard and the step's row."""
        if scalars:
            _add_to_row(row, scalars)
            writers.scalars(self.state.env_steps, scalars)

    def _stop_is_requested(self) -> bool:
        return self.stop_requested is not None

    def _stop(self, writers: SummaryWriters, table: ProgressTable) -> None:
        """Checkpoints the step reached (unless it just did) and says where the run stopped."""
        if self.state.last_checkpoint_step != self.state.env_steps:
            self._save(writers, table)
        if self._hooks:
            self._call_hooks(self._hooks.end)
        raise Stopped(
            self.stop_requested,
            self.state.env_steps,
            self._store.directory,
            self.checkpoint_cost[0] if self.checkpoint_cost else 0.0,
        )

    def _account(self, health: Health, last_update: Health) -> None:
        """Counts the updates; stops on a NaN/inf loss or gradient (unless skipping them) or
        variable (always), naming what the last update did."""
        state = self.state
        state.gradient_steps += health.gradient_steps
        state.applied_updates += health.applied_updates
        state.skipped_nonfinite_steps += health.nonfinite_steps
        state.interval_gradient_steps += health.gradient_steps
        state.interval_skipped_steps += health.nonfinite_steps
        self._check_finite(last_update)

    def _log_episodes(self, writers: SummaryWriters, step: int, ended: EndedEpisodes) -> None:
        """One point per tag per step, however many sub-environments ended an episode in it."""
        state = self.state
        state.episodes += len(ended.returns)
        state.recent_returns = [*state.recent_returns, *ended.returns.tolist()][-_RECENT_RETURNS:]
        state.interval_episodes += len(ended.returns)
        state.interval_return_sum += float(ended.returns.sum())
        state.interval_length_sum += int(ended.lengths.sum())
        scalars = {
            "train/episode_return": float(ended.returns.mean()),
            "train/episode_length": float(ended.lengths.mean()),
            "train/episodes_ended": len(ended.returns),
        }
        if ended.infos:
            sums = dict(state.interval_info_sums)
            for key, values in ended.infos.items():
                sums[key] = sums.get(key, 0.0) + float(values.sum())
                scalars[f"train/episode_{key}"] = float(values.mean())
            state.interval_info_sums = [[key, total] for key, total in sums.items()]
        writers.pending_scalars(step, scalars)
        if self._hooks:
            self._hooks.add_episodes(ended)

    def _log_progress(
        self, writers: SummaryWriters, throughput: "_Throughput", final: bool
    ) -> dict[str, float]:
        """The driver's metrics, the runner's counters, throughput and policy diagnostics, at a
        log step or the run's `final` one; returns them, with the mean return and length of the
        episodes ended since the last log (progress.csv's, not TensorBoard's: its points are
        the episodes themselves)."""
        state, step = self.state, self.state.env_steps
        now = time.perf_counter()
        speed = (step - throughput.last_step) / (now - throughput.last_time)
        scalars = self.driver.take_metrics()
        scalars.update(
            {
                "train/steps_per_second": speed,
                "train/episodes": state.episodes,
                "train/gradient_steps": state.gradient_steps,
                "train/applied_updates": state.applied_updates,
            }
        )
        if state.skipped_nonfinite_steps or final:  # noise when zero
            scalars["train/skipped_nonfinite_steps"] = state.skipped_nonfinite_steps
        scalars.update(self.driver.diagnostics())
        writers.scalars(step, scalars)
        recent = np.mean(state.recent_returns) if state.recent_returns else float("nan")
        episodes = len(state.recent_returns)
        logging.info(
            "step %d/%d | return (last %d episode%s) %.1f | %.0f steps/s%s",
            step,
            self.num_steps,
            episodes,
            "" if episodes == 1 else "s",
            recent,
            speed,
            _compiling_note(self.driver.take_compile_seconds()),
        )
        if state.interval_episodes:
            scalars["train/mean_episode_return"] = (
                state.interval_return_sum / state.interval_episodes
            )
            scalars["train/mean_episode_length"] = (
                state.interval_length_sum / state.interval_episodes
            )
            for key, total in state.interval_info_sums:
                scalars[f"train/mean_episode_{key}"] = total / state.interval_episodes
        throughput.last_step, throughput.last_time = step, now
        state.interval_episodes, state.interval_return_sum, state.interval_length_sum = 0, 0.0, 0
        state.interval_info_sums = []
        self._check_skipped_fraction()
        state.interval_gradient_steps = state.interval_skipped_steps = 0
        return scalars

    def _check_finite(self, health: Health) -> None:
        step = self.state.env_steps
        if health.nonfinite_variables:
            self._raise_nonfinite(
                f"Non-finite variables at environment step {step}, after a finite update."
            )
        if health.nonfinite_steps and not self.skip_nonfinite_updates:
            culprit = "loss" if health.nonfinite_losses else "gradient"
            bad, total = health.nonfinite_steps, health.gradient_steps
            self._raise_nonfinite(
                f"Non-finite {culprit} at environment step {step}: {bad} of the {total} gradient "
                "steps of this update had a NaN or inf (or a gradient norm beyond float32's "
                f"range) and were not applied; the other {total - bad} were "
                f"({health.applied_updates} optimizer updates)."
            )

    def _check_skipped_fraction(self) -> None:
        """With skipping on, a run that skips (nearly) everything is failing, not training."""
        total, skipped = self.state.interval_gradient_steps, self.state.interval_skipped_steps
        if total and skipped / total >= self.max_skipped_fraction:
            self._raise_nonfinite(
                f"{skipped} of the {total} gradient steps in the log interval up to environment "
                f"step {self.state.env_steps} had a NaN or inf loss or gradient and were skipped "
                f"(Runner.max_skipped_fraction = {self.max_skipped_fraction}); none of them was "
                "applied."
            )

    def _raise_nonfinite(self, what: str) -> None:
        last = self.state.last_checkpoint_step
        last_good = (
            f"the last good checkpoint is at step {last} in {self._store.directory}"
            if last
            else "no checkpoint had been written yet"
        )
        raise NonFiniteError(
            f"{what} No checkpoint was written from this state; {last_good}. Lower the learning "
            "rate or clip gradients; Runner.skip_nonfinite_updates = True skips updates with a "
            "non-finite loss or gradient instead (up to Runner.max_skipped_fraction of them)."
        )

    def time_split(self) -> dict[str, float]:
        """Seconds spent so far in each part of training, for the benchmark."""
        return {**self.driver.time_split(), **self.seconds}

    def close(self) -> None:
        """Releases the environments, and the asynchronous driver's workers; once."""
        if not self._closed:
            self._closed = True
            self.driver.close()
            self.eval_env.close()


def _add_to_row(row: dict[str, float], scalars: dict[str, float]) -> None:
    """`scalars` into progress.csv's `row`, where a callback's tags meet the run's: each is
    logged once at a step."""
    clash = sorted(scalars.keys() & row.keys())
    if clash:
        raise ValueError(
            f"A callback logged {', '.join(clash)} at a step where the run logs it itself: "
            "give the callback's scalars tags of their own (say custom/...)."
        )
    row.update(scalars)


def _compiling_note(seconds: float) -> str:
    """Why an interval's throughput is low: the learner's first call compiled in it."""
    return f" (includes compiling the learner: {seconds:.1f} s)" if seconds > 0 else ""


class _Throughput:
    """The step and time of the last log, for the steps per second since."""

    def __init__(self, step: int):
        self.last_step, self.last_time = step, time.perf_counter()
