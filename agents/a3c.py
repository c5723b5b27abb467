"""A3C: A2C's losses learned by asynchronous workers (Mnih et al., 2016); with
`A3C.agent = @NStepQAgent`, asynchronous n-step Q-learning on the same workers.

A worker is a local copy of the networks (an `A2CAgent`: its network, `ActorCriticLoss`,
rollout and a learner whose gradient processor decides when to push, e.g. `Accumulate(k)`)
with its own vector environment. Any agent with a `Rollout` (`rollout`), a `learner`, the
variables a worker pulls (`shared_variables`), its `networks()`, `weights_changed()` and
`describe()` serves: `NStepQAgent` pulls its target network too, which the global learner's
target updater moves as pushes are applied. `work()` runs n-step rollouts and
`compute_gradients` on each until the processor releases their (summed, maybe clipped)
gradients: that is one push.
The driver, `A3C`, applies each push to the global networks with the global optimizer
(`apply_gradients`, the same non-finite guard as every update), then the worker copies the
global parameters back (`copy_variables`) before its next rollout. Staleness is the number of
global updates between a worker's pull and its push.

Where the workers run is one binding (`A3C.backend`, see `framework/async_workers.py`):
`@Threads` (the default), `@Processes`, `@RayActors`, or `@RoundRobin`, which runs them one
after the other in a fixed order and is the only bitwise-reproducible one: asynchronous runs
apply pushes in the order they arrive, which depends on timing, so two of them never match
bitwise, and nor does a resumed one match an uninterrupted one.

The driver keeps the runner's conventions (one run folder through `RunDirectory`, checkpoints
through its store, `train/` and `eval/` event files, counts in environment transitions summed
over every worker's sub-environments) in a small loop of its own, since the runner's steps one
environment. A checkpoint holds the global networks, the global learner (optimizer slots,
counters) and the driver's counters; with `RoundRobin` also every worker (local network,
accumulated gradients, rollout, environments, generators), so its resume is exact. An
asynchronous run resumes with fresh workers that pull the restored global parameters.
"""

import dataclasses
import json
import time
from collections.abc import Callable

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf
from absl import logging

from agents.a2c import A2CAgent
from agents.nstep_q import NStepQAgent
from framework import async_workers, evaluation
from framework.checkpointing import CheckpointError
from framework.learner import Health, copy_variables
from framework.loop import EnvironmentLoop, make_vector_env
from framework.parts import optimizers
from framework.parts.environments import make_env
from framework.parts.gradient_processors import Identity
from framework.run_directory import RunDirectory
from framework.runner import Cadence, NonFiniteError, Stopped
from framework.seeding import (
    derived_seeds,
    global_rng_states,
    seed_everything,
    set_global_rng_states,
)
from framework.summaries import HParamsSession, SummaryWriters
from framework.validation import require_positive


class A3CWorker:
    """One worker: an agent (`A2CAgent`, `NStepQAgent`) as the local copy, stepping its own
    vector environment."""

    def __init__(
        self,
        index: int,
        seed: int,
        env_factory: Callable[[], gym.Env],
        num_envs: int,
        agent: Callable[..., A2CAgent | NStepQAgent] = A2CAgent,
    ):
        self.index = index
        agent_seed, env_seed = derived_seeds(seed, 2)
        envs = make_vector_env(env_factory, num_envs)
        # The local learner only computes gradients; the global optimizer applies them.
        self.agent = agent(
            envs.single_observation_space,
            envs.single_action_space,
            agent_seed,
            optimizer=keras.optimizers.SGD(1.0),  # never applied
        )
        self.loop = EnvironmentLoop(envs, self.agent)
        self.loop.reset(env_seed)
        self._env_seed = env_seed
        local = self.agent.shared_variables
        self._copy_values = tf.function(lambda values: copy_variables(values, local))
        self._copy_variables = None  # compiled on the first pull from variables in this process

    def work(self) -> async_workers.WorkResult:
        """Rollouts and their gradients until the gradient processor releases a push."""
        steps, returns, lengths = 0, [], []
        sums, calls, health = {}, 0, Health()
        while True:
            while not self.agent.rollout.full:
                ended = self.loop.step()
                steps += self.loop.num_envs
                if ended is not None:
                    returns += ended.returns.tolist()
                    lengths += ended.lengths.tolist()
            batch = {name: array[None] for name, array in self.agent.rollout.take().items()}
            gradients, push_now, metrics, step_health = self.agent.learner.compute_gradients(batch)
            health += Health.from_tensor(step_health)
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + float(value)
            calls += 1
            if bool(push_now):
                break
        return async_workers.WorkResult(
            gradients=[[g.numpy() for g in group] for group in gradients],
            env_steps=steps,
            metrics={name: total / calls for name, total in sums.items()},
            health=health,
            episode_returns=returns,
            episode_lengths=lengths,
        )

    def pull(self, source) -> None:
        """Copies the global parameters into the local copy: the global variables themselves
        (workers in the driver's process) or their values (sent to a remote worker)."""
        source = list(source)
        if isinstance(source[0], tf.Variable):
            if self._copy_variables is None:  # captured, not passed: ~10x cheaper per call
                local = self.agent.shared_variables
                self._copy_variables = tf.function(lambda: copy_variables(source, local))
            self._copy_variables()
        else:
            self._copy_values(source)
        self.agent.weights_changed()

    def describe(self) -> dict:
        """What this worker was built with (logged at start: remote workers parse the config
        again, so this shows what they actually read)."""
        processor = self.agent.learner.groups[0].gradient_processor
        return {
            "worker": self.index,
            "num_envs": self.loop.num_envs,
            **self.agent.describe(),
            "gradient_processor": _describe_processor(processor),
        }

    def state(self) -> dict:
        return {"agent": self.agent.state(), "loop": self.loop.state()}

    def load_state(self, state: dict) -> None:
        self.agent.load_state(state["agent"])
        self.loop.load_state(state["loop"], reset_seed=self._env_seed)

    def close(self) -> None:
        self.loop.close()


def _describe_processor(processor) -> str:
    inner = getattr(processor, "processors", None)
    if inner is not None:
        return f"Chain({', '.join(_describe_processor(p) for p in inner)})"
    fields = {
        k: v
        for k, v in vars(processor).items()
        if not k.startswith("_") and isinstance(v, int | float) and not isinstance(v, bool)
    }
    return f"{type(processor).__name__}({', '.join(f'{k}={v}' for k, v in fields.items())})"


@dataclasses.dataclass
class A3CState:
    """The driver's counters, saved with every checkpoint (transitions over all workers)."""

    env_steps: int = 0
    episodes: int = 0
    gradient_steps: int = 0  # computed by the workers
    global_updates: int = 0  # pushes applied to the global networks
    parameter_syncs: int = 0  # pulls of the global parameters by a worker
    worker_env_steps: list[int] = dataclasses.field(default_factory=list)
    pulled_at: list[int] = dataclasses.field(default_factory=list)  # global_updates at pull
    last_checkpoint_step: int = 0
    best_eval_return: float | None = None


@gin.configurable(denylist=["base_dir"])
class A3C:
    """Trains A3C's global networks with `num_workers` workers for `num_steps` transitions.

    The runner's interface for `experiments.run`: `run_directory`, `seed`, `restore`, `run`,
    `close`, `state`, `stop_requested`, `eval_returns`.

    Args:
      base_dir: the run's folder; starting again on the same folder resumes.
      env_factory: one (sub-)environment; each worker steps `envs_per_worker` of them, and
        evaluation its own.
      agent: the workers' and the global agent's class: `A2CAgent` (A3C) or `NStepQAgent`
        (asynchronous n-step Q-learning).
      backend: where the workers run (`framework/async_workers.py`): `Threads`, `Processes`,
        `RayActors`, or `RoundRobin` (deterministic).
      optimizer: the global optimizer, which applies every push (default: RMSprop(7e-4)).
      Every count is in transitions summed over all workers' sub-environments.
    """

    def __init__(
        self,
        base_dir: str,
        env_factory: Callable[[], gym.Env] = make_env,
        agent: Callable[..., A2CAgent | NStepQAgent] = A2CAgent,
        num_workers: int = 2,
        envs_per_worker: int = 1,
        backend: Callable[..., object] = async_workers.Threads,
        optimizer: keras.optimizers.Optimizer | None = None,
        num_steps: int = 1_000_000,
        eval_interval: int = 20_000,
        eval_episodes: int = 10,
        checkpoint_interval: int = 100_000,
        max_checkpoints_to_keep: int = 3,
        log_interval: int = 10_000,
        seed: int = 0,
    ):
        require_positive(
            self,
            num_workers=num_workers,
            envs_per_worker=envs_per_worker,
            num_steps=num_steps,
            eval_interval=eval_interval,
            eval_episodes=eval_episodes,
            checkpoint_interval=checkpoint_interval,
            max_checkpoints_to_keep=max_checkpoints_to_keep,
            log_interval=log_interval,
        )
        self.run_directory = RunDirectory(base_dir)
        self.num_steps, self.eval_episodes = num_steps, eval_episodes
        self.eval_interval, self.log_interval = eval_interval, log_interval
        self.checkpoint_interval = checkpoint_interval
        self.seed = seed
        seed_everything(seed)
        global_seed, self._eval_seed, *worker_seeds = derived_seeds(seed, 2 + num_workers)
        self.eval_env = env_factory()
        schedules_before = len(optimizers.schedules_built())
        self.global_agent = agent(  # the global networks; only their learner's apply runs
            self.eval_env.observation_space,
            self.eval_env.action_space,
            global_seed,
            optimizer=optimizer or keras.optimizers.RMSprop(7e-4, rho=0.99, epsilon=1e-5),
            gradient_processor=Identity(),  # the workers' processors made the push
        )
        self.schedules = optimizers.schedules_built()[schedules_before:]
        self._environment_steps = optimizers.environment_steps()  # read by schedules, or None
        self.learner = self.global_agent.learner
        self.global_variables = self.global_agent.shared_variables
        arguments = [
            (index, worker_seed, env_factory, envs_per_worker, agent)
            for index, worker_seed in enumerate(worker_seeds)
        ]
        # Remote workers get the whole parsed config, the command line's bindings included.
        self.backend = backend(A3CWorker, arguments, config=gin.config_str())
        self.worker_descriptions = self.backend.describe()
        for description in self.worker_descriptions:
            logging.info("A3C worker: %s", description)
        self.state = A3CState(worker_env_steps=[0] * num_workers, pulled_at=[0] * num_workers)
        self._interval = _new_interval()
        self._store = self.run_directory.checkpoint_store(max_checkpoints_to_keep)
        self._workers_restored = False
        self._restore_attempted = False
        self.restored_step: int | None = None
        self.stop_requested: str | None = None  # a signal's name: stop after this push
        self.eval_returns: list[tuple[int, float]] = []
        # What `experiments/benchmark.py` reports, as the runner has them.
        self.checkpoint_cost: tuple[float, int] | None = None  # last save: (seconds, bytes)
        self.resume_seconds: float | None = None
        self.loop_seconds = 0.0  # the driver loop's wall-clock time in this start
        self.seconds = dict.fromkeys(
            ("workers", "global updates and syncs", "evaluation", "logging and checkpoints"), 0.0
        )

    def time_split(self) -> dict[str, float]:
        """Where the driver's time went: waiting for the workers' rollouts and gradients, the
        global learner's applies and the pulls, evaluation, and logging and checkpoints."""
        return dict(self.seconds)

    # ----- checkpoints -------------------------------------------------------------------------

    def _checkpoint_state(self) -> dict:
        state = {
            "a3c": dataclasses.asdict(self.state),
            "interval": json.dumps(self._interval),  # what the next log averages
            **self.global_agent.networks(),
            "learner": self.learner,
            "rngs": {"global": global_rng_states()},
        }
        workers = self.backend.states()  # RoundRobin only: the workers, for an exact resume
        if workers is not None:
            state["workers"] = workers
        return state

    def _save(self, writers: SummaryWriters) -> None:
        writers.sync()
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

    def restore(self, start_afresh: bool = False) -> int | None:
        """Restores the newest complete checkpoint; returns its step, or None."""
        start = time.perf_counter()
        self._restore_attempted = True
        restored = self._store.restore_latest(self._checkpoint_state())
        if restored is None:
            if self.run_directory.last_checkpoint() is not None:
                if not start_afresh:
                    raise CheckpointError(
                        f"The records of {self.run_directory.base_dir} show a completed "
                        f"checkpoint, but {self._store.directory} holds none now. Nothing was "
                        "trained; put them back, or start afresh with --start_afresh."
                    )
                self.run_directory.set_aside_checkpoints()
            self._store.tidy()
            return None
        step, state = restored
        try:
            self.state = A3CState(**state["a3c"])
            self._interval = json.loads(state["interval"])
            self.learner.restored()
            set_global_rng_states(state["rngs"]["global"])
            if "workers" in state:
                self.backend.load_states(state["workers"])
                self._workers_restored = True
        except (ValueError, TypeError, KeyError) as error:
            raise CheckpointError(
                f"The checkpoint at step {step} in {self._store.directory} does not fit this "
                f"run's config (A3C.backend or A3C.num_workers changed?): {error}"
            ) from error
        self._store.tidy()
        self.restored_step = step
        self.resume_seconds = time.perf_counter() - start
        logging.info("Resumed A3C from %s at environment step %d.", self._store.directory, step)
        return step

    # ----- evaluation --------------------------------------------------------------------------

    def evaluate(self) -> evaluation.Evaluation:
        """The global policy's greedy return, seeded by the step."""
        self.global_agent.weights_changed()
        return evaluation.evaluate(
            self.eval_env,
            lambda observation: int(self.global_agent.act(observation[None], explore=False)[0]),
            self.eval_episodes,
            self._eval_seed,
            self.state.env_steps,
        )

    # ----- the driver --------------------------------------------------------------------------

    def run(
        self, texts: dict[str, str] | None = None, hparams: HParamsSession | None = None
    ) -> list[tuple[int, float]]:
        """Trains to `num_steps` (resuming if the folder has a checkpoint); the eval curve."""
        if not self._restore_attempted:
            self.restore()
        if self.state.env_steps >= self.num_steps:
            logging.info("This A3C run finished at step %d.", self.state.env_steps)
            return self.eval_returns
        for schedule in self.schedules:
            logging.info("Learning rate (train/learning_rate): %s.", schedule.describe())
        texts = {**(texts or {}), "workers": "\n\n".join(map(str, self.worker_descriptions))}
        writers = self.run_directory.open_writers(self.restored_step, texts, hparams)
        start = time.perf_counter()
        try:
            self._train(writers)
        finally:
            self.loop_seconds = time.perf_counter() - start
            writers.close()
        return self.eval_returns

    def _train(self, writers: SummaryWriters) -> None:
        state = self.state
        log = Cadence(self.log_interval, state.env_steps)
        evaluation = Cadence(self.eval_interval, state.env_steps)
        checkpoint = Cadence(self.checkpoint_interval, state.env_steps)
        speed = [state.env_steps, time.perf_counter()]
        for index in range(len(state.pulled_at)):
            if not self._workers_restored:  # fresh workers start from the global parameters
                self._pull(index)
            self.backend.submit(index)
        seconds = self.seconds
        while state.env_steps < self.num_steps and self.stop_requested is None:
            start = time.perf_counter()
            index, result = self.backend.next_result()
            seconds["workers"] += time.perf_counter() - start
            self._account(writers, index, result)
            start = time.perf_counter()
            if result.pushed:
                self._apply(index, result)
                self._pull(index)
            self.backend.submit(index)
            seconds["global updates and syncs"] += time.perf_counter() - start
            last = state.env_steps >= self.num_steps
            start = time.perf_counter()
            if log.due(state.env_steps) or last:
                self._log(writers, speed)
            seconds["logging and checkpoints"] += time.perf_counter() - start
            if evaluation.due(state.env_steps) or last:
                start = time.perf_counter()
                self._evaluate_and_log(writers)
                seconds["evaluation"] += time.perf_counter() - start
            if checkpoint.due(state.env_steps) or last:
                start = time.perf_counter()
                self._save(writers)
                seconds["logging and checkpoints"] += time.perf_counter() - start
        if self.stop_requested is not None:
            start = time.perf_counter()
            if state.last_checkpoint_step != state.env_steps:
                self._save(writers)
            raise Stopped(
                self.stop_requested,
                state.env_steps,
                self._store.directory,
                time.perf_counter() - start,
            )

    def _account(self, writers: SummaryWriters, index: int, result) -> None:
        state, interval = self.state, self._interval
        state.env_steps += result.env_steps
        state.worker_env_steps[index] += result.env_steps
        state.gradient_steps += result.health.gradient_steps
        if result.health.nonfinite_steps or result.health.nonfinite_variables:
            self._raise_nonfinite(f"Worker {index} computed a non-finite loss or gradient")
        for name, value in result.metrics.items():
            interval["metrics"][name] = interval["metrics"].get(name, 0.0) + value
        interval["results"] += 1
        if result.episode_returns:
            state.episodes += len(result.episode_returns)
            interval["returns"] = (interval["returns"] + result.episode_returns)[-20:]
            writers.pending_scalars(
                "train",
                state.env_steps,
                {
                    "train/episode_return": float(np.mean(result.episode_returns)),
                    "train/episode_length": float(np.mean(result.episode_lengths)),
                    "train/episodes_ended": len(result.episode_returns),
                },
            )

    def _apply(self, index: int, result) -> None:
        """One push: the global optimizer applies the worker's gradients."""
        state, interval = self.state, self._interval
        staleness = state.global_updates - state.pulled_at[index]
        if self._environment_steps is not None:  # read by learning-rate schedules
            self._environment_steps.assign(state.env_steps)
        health = Health.from_tensor(self.learner.apply_gradients(result.gradients))
        if health.nonfinite_steps or health.nonfinite_variables:
            self._raise_nonfinite(f"A push of worker {index} made the global networks non-finite")
        state.global_updates += 1
        interval["pushes"] += 1
        interval["staleness_sum"] += staleness
        interval["staleness_max"] = max(interval["staleness_max"], staleness)
        for group, gradients in zip(self.learner.groups, result.gradients, strict=True):
            norm = float(np.sqrt(sum(np.sum(np.square(g)) for g in gradients)))
            name = f"{group.prefix}pushed_grad_norm"
            interval["metrics"][name] = interval["metrics"].get(name, 0.0) + norm
            interval["norm_counts"][name] = interval["norm_counts"].get(name, 0) + 1

    def _pull(self, index: int) -> None:
        """Worker `index` copies the global parameters before its next rollout."""
        self.backend.pull(index, self.global_variables)
        self.state.pulled_at[index] = self.state.global_updates
        self.state.parameter_syncs += 1
        self._interval["syncs"] += 1

    def _log(self, writers: SummaryWriters, speed: list) -> None:
        state, interval = self.state, self._interval
        now = time.perf_counter()
        steps_per_second = (state.env_steps - speed[0]) / max(now - speed[1], 1e-9)
        speed[:] = [state.env_steps, now]
        scalars = {
            f"train/{name}": value / interval["norm_counts"].get(name, interval["results"])
            for name, value in interval["metrics"].items()
        }
        pushes = interval["pushes"]
        scalars.update(
            {
                "train/steps_per_second": steps_per_second,
                "train/episodes": state.episodes,
                "train/gradient_steps": state.gradient_steps,
                "train/learning_rate": float(self.learner.groups[0].optimizer.learning_rate),
                "async/global_updates": state.global_updates,
                "async/parameter_syncs": state.parameter_syncs,
                "async/syncs_in_interval": interval["syncs"],
                "async/staleness_mean": interval["staleness_sum"] / max(pushes, 1),
                "async/staleness_max": interval["staleness_max"],
            }
        )
        for index, steps in enumerate(state.worker_env_steps):
            scalars[f"workers/worker_{index}_env_steps"] = steps
        writers.scalars("train", state.env_steps, scalars)
        recent = np.mean(interval["returns"]) if interval["returns"] else float("nan")
        logging.info(
            "step %d/%d | return (last %d episodes) %.1f | %.0f steps/s | staleness %.2f",
            state.env_steps,
            self.num_steps,
            len(interval["returns"]),
            recent,
            steps_per_second,
            scalars["async/staleness_mean"],
        )
        self._interval = _new_interval(interval["returns"])

    def _evaluate_and_log(self, writers: SummaryWriters) -> None:
        result = self.evaluate()
        self.eval_returns.append((result.step, result.mean_return))
        self.state.best_eval_return = evaluation.record(
            writers, result, self.state.best_eval_return
        )

    def _raise_nonfinite(self, what: str) -> None:
        raise NonFiniteError(
            f"{what} at environment step {self.state.env_steps}; no checkpoint was written from "
            f"this state (the last one is at step {self.state.last_checkpoint_step}). Lower the "
            "learning rate or clip the workers' gradients (ClipByGlobalNorm)."
        )

    def close(self) -> None:
        self.backend.close()
        self.eval_env.close()


def _new_interval(returns: list[float] | None = None) -> dict:
    """What the next log averages: JSON values, so that a checkpoint holds them."""
    return {
        "metrics": {},  # sums: the workers' metrics per result, pushed norms per push
        "norm_counts": {},
        "results": 0,
        "pushes": 0,
        "syncs": 0,
        "staleness_sum": 0,
        "staleness_max": 0,
        "returns": list(returns or []),  # the last 20 episodes, for the progress line
    }
