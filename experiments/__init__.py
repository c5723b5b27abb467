"""Training from Python: `experiments.train(gin_files, bindings, base_dir, seed) -> TrainResult`;
using what was trained: `experiments.load(run_dir, checkpoint) -> Policy`.

The command line (`experiments.run`), the benchmark, the tests and sweeps all call `train`. Each
call clears gin and parses its own config, so runs in one process never share bindings.
Importing this package is cheap: TensorFlow is imported inside the calls.
"""

import contextlib
import dataclasses
import datetime
import os
import re
import signal
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported inside the calls: importing this package stays cheap
    from framework.callbacks import Callback
    from framework.runner import Runner
    from framework.storage.run_directory import RunDirectory

from experiments.errors import (
    RunError,
    RunStopped,
    required_binding_message,
    without_gin_call_stack,
)
from experiments.loading import load as load  # experiments.load(run_dir) -> Policy
from experiments.stopping import REQUESTS

DEFAULT_GIN_FILE = "gin_configs/dqn/cartpole.gin"


@dataclasses.dataclass
class TrainResult:
    """What a finished `train` call reports."""

    base_dir: str
    eval_returns: list[tuple[int, float]]  # (environment step, mean eval return) of this call
    final_eval_return: float  # the last evaluation of this call (NaN if it evaluated none)
    best_eval_return: float | None  # the best over the whole run, across its starts
    env_steps: int
    resumed_from: int | None  # the checkpoint step this call resumed from, if any
    runner: "Runner"  # the finished runner, for in-process inspection


def config_name(gin_files: Sequence[str], env_id: str | None = None) -> str:
    """A config's readable name: the family and name of its last gin file, and the environment
    where a binding changed it away from the config's name (`dqn_cartpole`)."""
    name = os.path.splitext(os.path.basename(gin_files[-1]))[0]
    family = os.path.basename(os.path.dirname(gin_files[-1])) or "run"
    if env_id:
        short = re.sub(r"^ALE/|-v\d+$", "", env_id).lower()
        if short not in name.lower():
            name = f"{name}_{env_id.replace('/', '-')}"
    return f"{family}_{name}"


def default_base_dir(name: str, seed: int | None) -> str:
    """A new folder per call: the config's name, the seed, the time to the microsecond."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    suffix = "" if seed is None else f"_seed{seed}"
    return os.path.join("runs", f"{name}{suffix}_{stamp}")


@dataclasses.dataclass
class PreparedRun:
    """A built runner, the run folder it trains into, and how it was asked for;
    `train_prepared` opens the folder and trains it."""

    runner: "Runner"
    folder: "RunDirectory"  # handed to the runner
    command: str  # the shell command that trains the same config and seed again
    start_afresh: bool = False  # set aside checkpoints the folder lost track of; train anew


def build(
    gin_files: Sequence[str] = (DEFAULT_GIN_FILE,),
    bindings: Sequence[str] = (),
    base_dir: str | None = None,
    seed: int | None = None,
    strict: bool = False,
    start_afresh: bool = False,
    callbacks: Sequence["Callback"] = (),
) -> PreparedRun:
    """Parses a fresh gin config and builds the runner (environment and agent), with
    `callbacks` after those bound in gin; writes nothing.

    Raises RunError for a bad config, an unknown part or environment, or (with `strict`) a
    binding that nothing used.
    """
    import gin
    import gymnasium as gym
    from absl import logging

    import agents  # noqa: F401  (registers every agent's configurables)
    from framework import config
    from framework.compiled import threads
    from framework.runner import Runner
    from framework.storage.run_directory import RunDirectory

    _check_arguments(gin_files, bindings, base_dir)
    base_dir = None if base_dir is None else os.fspath(base_dir)
    if base_dir is not None and not base_dir.strip():
        raise RunError(
            "--base_dir is empty (an unset variable in a job script?). Give the run's folder, "
            "or leave the flag out for a fresh one under runs/; an empty value would start a "
            "new run from step 0 at every requeue."
        )
    gin.clear_config()  # a call never inherits the bindings of an earlier one
    try:
        config.parse(list(gin_files), list(bindings), seed)
        threads.tf_threads()  # before the first op: the pools are fixed from then on
        base_dir = base_dir or default_base_dir(config_name(gin_files, _bound_env_id()), seed)
        folder = RunDirectory(base_dir)
        runner = Runner(folder, python_callbacks=list(callbacks))
    except (ValueError, ImportError, TypeError, gym.error.Error) as error:
        raise RunError(without_gin_call_stack(error)) from error
    except RuntimeError as error:  # gin: a required parameter the config does not bind
        raise RunError(required_binding_message(error, gin_files)) from error
    own = config.own_bindings(gin_files, bindings)
    unused = [binding for binding in config.unused_bindings() if binding in own]
    for binding in unused:
        logging.warning("Binding %s was never used by any part this config builds.", binding)
    for binding in sorted(set(config.unused_bindings()) - own):
        logging.info("Binding %s, of an included file, is not used by this config.", binding)
    if unused and strict:
        runner.close()  # its environments, and the asynchronous driver's workers
        raise RunError(
            f"--strict: these bindings were never used: {', '.join(unused)}. Check their "
            "spelling and scope, or remove them."
        )
    command = config.command_line(gin_files, bindings, base_dir, seed)
    return PreparedRun(runner, folder, command, start_afresh)


def _check_arguments(gin_files: object, bindings: object, base_dir: object) -> None:
    """From Python, a string where a list belongs would be read one character at a time."""
    for name, value, example in (
        ("gin_files", gin_files, "['gin_configs/dqn/cartpole.gin']"),
        ("bindings", bindings, "['Runner.num_steps = 1000']"),
    ):
        if not _is_list_of_strings(value):
            why = " (a string alone would be read one character at a time)"
            raise RunError(
                f"{name} must be a list of strings, e.g. {example}; got {value!r}"
                f"{why if isinstance(value, str) else ''}."
            )
    if base_dir is not None and not isinstance(base_dir, str | os.PathLike):
        raise RunError(
            f"base_dir must be a folder path (a string or a pathlib.Path), e.g. 'runs/my_run'; "
            f"got {base_dir!r} ({type(base_dir).__name__})."
        )


def _is_list_of_strings(value: object) -> bool:
    if isinstance(value, str | bytes):
        return False
    try:
        return all(isinstance(item, str) for item in value)
    except TypeError:  # not iterable
        return False


def _disk_message(error: OSError) -> str:
    """One paragraph naming the path and what was being written (disk full, ...)."""
    from framework.compiled.xla_cache import XlaCacheError
    from framework.storage.checkpointing import CheckpointWriteError
    from framework.storage.run_directory import RunFolderError

    if isinstance(error, XlaCacheError):  # its own paragraph, which names the cache folder
        return " ".join(error.strerror.split())
    if isinstance(error, CheckpointWriteError | RunFolderError):
        return " ".join(str(error).split())
    return (
        f"Could not write {error.filename or 'a file of the run'}: {error.strerror or error}. "
        "The last complete checkpoint is intact; free the space (or fix the folder) and start "
        "the same command again to resume from it."
    )


def _bound_env_id() -> str | None:
    """The environment id the parsed config binds, if it binds one."""
    import gin

    for selector in ("make_env.env_id", "make_atari_env.env_id"):
        try:
            return gin.query_parameter(selector)
        except ValueError:
            continue
    return None


def train(
    gin_files: Sequence[str] = (DEFAULT_GIN_FILE,),
    bindings: Sequence[str] = (),
    base_dir: str | None = None,
    seed: int | None = None,
    strict: bool = False,
    start_afresh: bool = False,
    verbose: bool = True,
    callbacks: Sequence["Callback"] = (),
) -> TrainResult:
    """Trains a config into `base_dir` (a fresh folder under runs/ by default), resuming from
    its newest complete checkpoint if it has one. Raises RunError on bad input or a failed run.

    `start_afresh` trains a folder whose records show
    checkpoints it no longer has from step 0 again, or one whose run had another seed, agent
    or environment, setting what is left aside. It logs what the command line does (its run
    folder, evaluations, progress, the closing summary) in the same lines; `verbose=False`
    keeps to warnings and errors. TensorFlow, if this call imports it, says nothing.
    `callbacks` (`framework.callbacks.Callback` instances) run after those bound in gin
    (`Runner.callbacks`); a resumed run needs the same ones.
    """
    with _progress_log(verbose):
        return train_prepared(
            build(
                gin_files,
                bindings,
                base_dir,
                seed,
                strict,
                start_afresh,
                callbacks,
            )
        )


@contextlib.contextmanager
def _progress_log(verbose: bool) -> Iterator[None]:
    """The framework's progress lines at INFO (warnings only, unless `verbose`) for the call,
    as the command line shows them; outside an absl app absl would show warnings alone."""
    from absl import logging

    from framework import console

    console.import_tensorflow()  # before the agents import it: no C++ start-up lines
    absl_logger = logging.get_absl_logger()
    previous = absl_logger.level  # NOTSET stays NOTSET: the process's own logging decides
    logging.set_verbosity(logging.INFO if verbose else logging.WARNING)
    try:
        yield
    finally:
        absl_logger.setLevel(previous)


def train_prepared(prepared: PreparedRun) -> TrainResult:
    """Opens the run folder (its lock, the start's config and metadata) and trains the built
    runner into it. (Not `run`: importing `experiments.run`, the command line, as the console
    script does, would shadow a package attribute of that name.)"""
    import gin
    from absl import logging

    from experiments import resuming
    from framework import config
    from framework.compiled import threads
    from framework.loop import InfoKeyError
    from framework.runner import NonFiniteError, Stopped
    from framework.storage import trials
    from framework.storage.checkpointing import (
        CheckpointError,
        CheckpointFormatError,
        CheckpointMismatchError,
    )
    from framework.storage.run_directory import DamagedRecordError, RunFolderBusyError
    from framework.storage.summaries import HParamsSession

    runner, folder = prepared.runner, prepared.folder
    start = time.perf_counter()
    try:
        REQUESTS.check_start_up()
        logging.info("Run folder: %s (tensorboard --logdir %s)", folder.base_dir, folder.base_dir)
        with contextlib.closing(runner), folder.lock():
            previous = folder.read_config()
            change = (
                previous
                and folder.holds_checkpoints()
                and resuming.identity_change(previous, gin.operative_config_str())
            )
            if change and not prepared.start_afresh:
                raise resuming.refuse_identity_change(change, folder.base_dir)
            if change:
                target = folder.set_aside_checkpoints()
                logging.warning(
                    "Starting afresh (%s): set the run's checkpoints aside in %s.", change, target
                )
            try:
                resumed_from = runner.restore(prepared.start_afresh)
            except CheckpointFormatError as error:  # the code changed, not the config
                raise RunError(str(error)) from None
            except CheckpointMismatchError as error:  # whole, but not of this config
                current = gin.operative_config_str()
                raise RunError(resuming.explain_misfit(str(error), folder, current)) from None
            REQUESTS.check_start_up()
            trial = trials.trial_of(gin.operative_config_str())
            metadata = config.run_metadata(prepared.command, runner.seed, trial.key)
            metadata |= threads.settings()  # what a speed figure of this run depends on
            folder.record_start(gin.operative_config_str(), metadata, resumed_from)
            texts = {
                "config": gin.markdown(gin.operative_config_str()),
                "metadata": "\n\n".join(f"{key}: {value}" for key, value in metadata.items()),
            }
            hparams = HParamsSession(
                config.bound_hyperparameters(),
                trial.key,  # the session group: the seeds of one trial, and nothing else
            )
            # A second signal while the workers finish (the checkpoint is saved) waits too.
            with REQUESTS.stopping(runner):
                try:
                    curve = runner.run(texts, hparams)
                except BaseException:
                    # Parts first called during training appear in the operative config; a
                    # failure to write it must not hide the error that stopped the run.
                    with contextlib.suppress(OSError):
                        folder.write_config(gin.operative_config_str())
                    raise
                else:
                    folder.write_config(gin.operative_config_str())
                finally:
                    runner.close()
    except Stopped as stop:
        number = signal.Signals[stop.signal_name].value
        raise RunStopped(str(stop), 128 + number) from None
    except RunStopped:
        runner.close()  # signalled during start-up: its environments and workers
        raise
    except (
        NonFiniteError,
        InfoKeyError,
        CheckpointError,
        RunFolderBusyError,
        DamagedRecordError,
    ) as error:
        raise RunError(str(error)) from error
    except OSError as error:  # disk full, a folder that cannot be written
        raise RunError(_disk_message(error)) from error
    seconds = time.perf_counter() - start
    returns = [value for _, value in curve]
    result = TrainResult(
        base_dir=folder.base_dir,
        eval_returns=curve,
        final_eval_return=returns[-1] if returns else float("nan"),
        best_eval_return=runner.state.best_eval_return,
        env_steps=runner.state.env_steps,
        resumed_from=resumed_from,
        runner=runner,
    )
    if curve:
        logging.info(
            "Done: final eval return %.1f, best %.1f, %d environment steps, %.1f s "
            "(%.0f steps/s in this start); run folder %s",
            result.final_eval_return,
            result.best_eval_return,
            result.env_steps,
            seconds,
            (result.env_steps - (resumed_from or 0)) / seconds,
            folder.base_dir,
        )
    return result
