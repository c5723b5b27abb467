"""Throughput, learning-quality and checkpoint figures for named configs, one table per config.

Per seed: environment steps per second over the whole training (acting, learning, evaluation
and checkpoints included), the final and best eval return, the first step whose eval return
reaches --threshold, and what the final checkpoint cost (milliseconds, megabytes with the full
replay) and how long restoring it takes. Per config: where the time went (environment, acting,
observing and replay, learner, evaluation, logging and checkpoints).

  python -m experiments.benchmark --configs=gin_configs/dqn/cartpole.gin --seeds=5
  # against Stable-Baselines3 (in a venv of its own: experiments/peers/sb3_dqn.py; the peers'
  # scripts for PPO, SAC and MuJoCo are beside it):
  python -m experiments.benchmark --configs=gin_configs/dqn/cartpole_rlzoo.gin --seeds=1 \
      --gin_bindings=Runner.eval_interval=50000
  # against TF-Agents (its example's settings; its script is not kept here):
  python -m experiments.benchmark --configs=gin_configs/dqn/cartpole_tfagents.gin --seeds=1

Each (config, seed) trains in its own process. Runs go one at a time by default so that the
steps/s figures are not skewed by each other; `--parallel` trades that for wall-clock.
"""

import concurrent.futures
import multiprocessing
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("configs", ["gin_configs/dqn/cartpole.gin"], "Gin files to compare.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra bindings applied to every config.")
flags.DEFINE_integer("seeds", 5, "How many seeds per config: 0..seeds-1.", lower_bound=1)
flags.DEFINE_integer("num_steps", None, "Overrides Runner.num_steps.")
flags.DEFINE_float("threshold", 475.0, "Eval return that counts as solved.")
flags.DEFINE_integer("parallel", 1, "Runs at once (skews steps/s when > 1).", lower_bound=1)


def train_once(gin_file: str, bindings: list[str], seed: int, num_steps: int | None) -> dict:
    """Trains one seed in this process; returns timings, the time split and the eval curve."""
    from experiments import quiet

    quiet.import_tensorflow()  # not part of the figure; no banner per seed
    import agents  # noqa: F401
    import experiments

    if num_steps is not None:
        bindings = [*bindings, f"Runner.num_steps = {num_steps}"]

    with tempfile.TemporaryDirectory() as base_dir:
        start = time.perf_counter()
        result = experiments.train([gin_file], bindings, base_dir, seed)
        seconds = time.perf_counter() - start
        runner = result.runner
        learner = runner.agent.learner
        save_seconds, save_bytes = runner.checkpoint_cost
        # Finds the final checkpoint: restores it, nothing is left to train.
        resumed = experiments.train([gin_file], bindings, base_dir, seed).runner
    return {
        "seed": seed,
        "seconds": seconds,
        "steps": result.env_steps,
        "curve": result.eval_returns,
        "split": runner.time_split(),
        "gradient_steps": runner.state.gradient_steps,
        # Each compiled function's first call (tracing and XLA compilation included); under the
        # asynchronous driver the workers compute the gradients, not this learner.
        "first_call_seconds": learner.first_call_seconds,
        "first_call_steps": learner.first_call_steps,
        "loop_seconds": runner.loop_seconds,
        "save_ms": 1000 * save_seconds,
        "save_mb": save_bytes / 1e6,
        "resume_s": resumed.resume_seconds,
    }


def time_split(results: list[dict]) -> str:
    """Where the training time went, summed over seeds: seconds and share of the whole."""
    total = sum(r["seconds"] for r in results)
    parts = {name: sum(r["split"][name] for r in results) for name in results[0]["split"]}
    parts["other (loop, counters)"] = total - sum(parts.values())
    return "time split: " + ", ".join(
        f"{name} {seconds:.1f} s ({100 * seconds / total:.0f}%)" for name, seconds in parts.items()
    )


def steps_to_threshold(curve: list[tuple[int, float]], threshold: float) -> int | None:
    return next((step for step, value in curve if value >= threshold), None)


def summarize(gin_file: str, results: list[dict], threshold: float) -> str:
    lines = [
        f"== {gin_file}",
        "seed  steps/s  final_eval  best_eval  steps_to_threshold  ckpt_ms  ckpt_MB  resume_s",
    ]
    for r in sorted(results, key=lambda r: r["seed"]):
        final, best = r["curve"][-1][1], max(v for _, v in r["curve"])
        reached = steps_to_threshold(r["curve"], threshold)
        lines.append(
            f"{r['seed']:>4}  {r['steps'] / r['seconds']:>7.0f}  {final:>10.1f}  {best:>9.1f}  "
            f"{reached if reached is not None else '-':>18}  {r['save_ms']:>7.1f}  "
            f"{r['save_mb']:>7.2f}  {r['resume_s']:>8.2f}"
        )
    speeds = [r["steps"] / r["seconds"] for r in results]
    finals = [r["curve"][-1][1] for r in results]
    solved = sum(steps_to_threshold(r["curve"], threshold) is not None for r in results)
    lines.append(
        f"mean  {np.mean(speeds):>7.0f}  {np.mean(finals):>10.1f} +- {np.std(finals):.1f}  "
        f"reached {threshold:g} in {solved}/{len(results)} seeds"
    )
    lines.append(time_split(results))
    lines.append(learner_cost(results))
    return "\n".join(lines)


def learner_cost(results: list[dict]) -> str:
    """In-loop throughput (the training loop with its evaluations and checkpoints; no start-up
    or restore) and the learner's wall-clock seconds per gradient step, its calls' overhead and
    replay sampling included, with and without the first calls' tracing and compilation."""
    loop = [r["steps"] / r["loop_seconds"] for r in results]
    line = f"in-loop {np.median(loop):.0f} steps/s (median over seeds)"
    steps = sum(r["gradient_steps"] for r in results)
    if steps and all("learner" in r["split"] for r in results):  # async: the workers compute
        seconds = sum(r["split"]["learner"] for r in results)
        line += f", learner {1e6 * seconds / steps:.0f} us per gradient step ({steps} steps"
        first_seconds = sum(r["first_call_seconds"] for r in results)
        first_steps = sum(r["first_call_steps"] for r in results)
        if first_seconds and steps > first_steps:
            later = (seconds - first_seconds) / (steps - first_steps)
            line += (
                f"; first calls, with tracing and compilation, {first_seconds:.1f} s; "
                f"{1e6 * later:.0f} us per step after them"
            )
        line += ")"
    return line


def main(argv: list[str]) -> None:
    del argv
    bindings = list(FLAGS.gin_bindings)
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(
        FLAGS.parallel, mp_context=context, max_tasks_per_child=1
    )
    with pool:
        jobs = {
            gin_file: [
                pool.submit(train_once, gin_file, bindings, seed, FLAGS.num_steps)
                for seed in range(FLAGS.seeds)
            ]
            for gin_file in FLAGS.configs
        }
        for gin_file, futures in jobs.items():
            print(summarize(gin_file, [f.result() for f in futures], FLAGS.threshold), flush=True)


if __name__ == "__main__":
    app.run(main)
