"""Training from Python: `experiments.train(gin_files, bindings, base_dir, seed) -> TrainResult`.

The command line (`experiments.run`), the benchmark, the tests and sweeps all call `train`. Each
call clears gin and parses its own config, so runs in one process never share bindings.
Importing this package is cheap: TensorFlow is imported inside the calls.
"""

import dataclasses
import datetime
import os
from collections.abc import Sequence
from typing import Any

DEFAULT_GIN_FILE = "gin_configs/dqn/cartpole.gin"


class RunError(Exception):
    """Bad input or a failed run, as one paragraph naming the culprit."""


@dataclasses.dataclass
class TrainResult:
    """What a finished `train` call reports."""

    base_dir: str
    eval_returns: list[tuple[int, float]]  # (environment step, mean eval return) of this call
    final_eval_return: float
    best_eval_return: float
    env_steps: int
    resumed_from: int | None  # the checkpoint step this call resumed from, if any
    runner: Any  # the finished framework.runner.Runner, for in-process inspection


def default_base_dir(gin_files: Sequence[str], seed: int | None) -> str:
    """A new folder per call: config family and name, seed, time to the microsecond."""
    name = os.path.splitext(os.path.basename(gin_files[-1]))[0]
    family = os.path.basename(os.path.dirname(gin_files[-1])) or "run"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    suffix = "" if seed is None else f"_seed{seed}"
    return os.path.join("runs", f"{family}_{name}{suffix}_{stamp}")


def build(
    gin_files: Sequence[str] = (DEFAULT_GIN_FILE,),
    bindings: Sequence[str] = (),
    base_dir: str | None = None,
    seed: int | None = None,
    strict: bool = False,
):
    """Parses a fresh gin config and builds the runner (environment and agent); writes nothing.

    Raises RunError for a bad config, an unknown part or environment, or (with `strict`) a
    binding that nothing used.
    """
    import gymnasium as gym
    from absl import logging

    import agents  # noqa: F401  (registers every agent's configurables)
    from framework import config
    from framework.runner import Runner

    bindings = list(bindings)
    if seed is not None:
        bindings.append(f"Runner.seed = {seed}")
    try:
        config.parse(list(gin_files), bindings)
        runner = Runner(base_dir or default_base_dir(gin_files, seed))
    except (ValueError, ImportError, TypeError, gym.error.Error) as error:
        raise RunError(" ".join(str(error).split())) from error
    unused = config.unused_bindings()
    for binding in unused:
        logging.warning("Binding %s was never used by any part this config builds.", binding)
    if unused and strict:
        raise RunError(
            f"--strict: these bindings were never used: {', '.join(unused)}. Check their "
            "spelling and scope, or remove them."
        )
    return runner


def train(
    gin_files: Sequence[str] = (DEFAULT_GIN_FILE,),
    bindings: Sequence[str] = (),
    base_dir: str | None = None,
    seed: int | None = None,
    strict: bool = False,
) -> TrainResult:
    """Trains a config into `base_dir` (a fresh folder under runs/ by default), resuming from
    its newest complete checkpoint if it has one. Raises RunError on bad input or a failed run."""
    runner = build(gin_files, bindings, base_dir, seed, strict)
    return run(runner)


def run(runner) -> TrainResult:
    """Trains a built runner under its run folder's lock, recording the start in the folder."""
    import gin
    from absl import logging

    from framework import config
    from framework.checkpointing import CheckpointError
    from framework.run_directory import RunFolderBusyError
    from framework.runner import NonFiniteError

    folder = runner.run_directory
    logging.info("Run folder: %s (tensorboard --logdir %s)", folder.base_dir, folder.base_dir)
    try:
        with folder.lock():
            resumed_from = runner.restore()
            metadata = config.run_metadata(runner.seed)
            folder.record_start(gin.operative_config_str(), metadata, resumed_from)
            texts = {
                "config": gin.markdown(gin.operative_config_str()),
                "metadata": "\n\n".join(f"{key}: {value}" for key, value in metadata.items()),
            }
            try:
                curve = runner.run(texts, config.operative_hyperparameters())
            finally:  # parts first called during training now appear in the operative config
                folder.write_config(gin.operative_config_str())
                runner.close()
    except (NonFiniteError, CheckpointError, RunFolderBusyError) as error:
        raise RunError(str(error)) from error
    logging.info("Done: %s", folder.base_dir)
    returns = [value for _, value in curve]
    return TrainResult(
        base_dir=folder.base_dir,
        eval_returns=curve,
        final_eval_return=returns[-1] if returns else float("nan"),
        best_eval_return=max(returns) if returns else float("nan"),
        env_steps=runner.state.env_steps,
        resumed_from=resumed_from,
        runner=runner,
    )
