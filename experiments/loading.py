"""A trained run, loaded for use from its own config: `experiments.load(run_dir) -> Policy`.

Reads the run folder and writes nothing into it: no lock, no tidying, no quarantine, so that
a run still training can be read (`RunDirectory.read_policy`). Builds the environment and the
agent the run's `config.gin` describes, with `bindings` on top (another environment id, a
time limit), and restores only what acting needs.
"""

import contextlib
import difflib
import inspect
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from experiments.errors import RunError, required_binding_message, without_gin_call_stack

if TYPE_CHECKING:
    import gymnasium as gym

    from framework.policy import Policy


def checkpoint_choice(checkpoint: str | int) -> str | int:
    """ "latest", "best" or a step, as given on the command line or from Python."""
    if checkpoint in ("latest", "best"):
        return checkpoint
    if isinstance(checkpoint, bool):  # an int to Python, never a step
        pass
    elif isinstance(checkpoint, int) or (isinstance(checkpoint, str) and checkpoint.isdigit()):
        return int(checkpoint)
    raise RunError(
        f"--checkpoint={checkpoint!r} is not a checkpoint: give latest (the newest complete "
        "one, the default), best (the best evaluation's policy) or an environment step."
    )


def load(
    run_dir: str,
    checkpoint: str | int = "latest",
    bindings: Sequence[str] = (),
    render_mode: str | None = None,
) -> "Policy":
    """The trained policy of `run_dir`: its newest complete checkpoint ("latest"), the best
    evaluation's snapshot ("best") or the checkpoint of a step, read without writing anything
    (a run still training may be read). `policy.act(observations [N, ...], explore=False)
    -> actions [N, ...]`, numpy in and out; `policy.agent` for its networks; `policy.env` the
    run's evaluation environment (built with gymnasium's `render_mode` where given).
    `bindings` change the environment (another id, a TimeLimit) as long as its spaces stay.
    Raises RunError naming what is wrong (not a run, no such checkpoint, a damaged one, a
    config that no longer builds, an environment whose spaces do not fit the agent).

    As `train`, it parses the run's config into gin's global config (clearing what was bound
    before) and seeds the global generators with the run's seed. TensorFlow, if this call
    imports it, says nothing (as in `train`)."""
    which = checkpoint_choice(checkpoint)
    if not os.path.exists(run_dir):
        raise RunError(
            f"{run_dir!r} does not exist: give a run folder (the --base_dir of "
            "`experiments.run`, printed when it starts, e.g. runs/dqn_cartpole_...)."
        )
    from framework import console

    console.import_tensorflow()  # before the framework's modules import it: no C++ banner
    from framework import config
    from framework.parts import wrappers
    from framework.policy import Policy
    from framework.runner import run_seeds
    from framework.storage.checkpointing import CheckpointError, CheckpointMismatchError
    from framework.storage.run_directory import DamagedRecordError, RunDirectory

    folder = RunDirectory(run_dir)
    try:
        has_config = os.path.isdir(run_dir) and folder.read_config() is not None
        starts = folder.starts() if has_config else []
    except DamagedRecordError as error:
        raise RunError(str(error)) from None
    if not has_config:
        raise RunError(
            f"{run_dir!r} is not a run folder: it has no config.gin (a run folder is the "
            "--base_dir of `experiments.run`, printed when it starts, e.g. runs/dqn_cartpole_...)."
        )
    import_folders = config.recorded_import_folders(starts[-1]) if starts else []
    spaces = _configure(os.path.join(run_dir, "config.gin"), bindings, import_folders)
    factories = runner_factories()
    seeds = run_seeds(factories["seed"])  # as the runner does, before it builds anything
    env = _environment(factories["env_factory"], render_mode)
    try:
        if spaces is not None:
            _check_spaces(env, spaces)
        agent = built(
            lambda: factories["agent"](env.observation_space, env.action_space, seeds.agent)
        )
        statistics = wrappers.share_statistics([env])
        template = {"agent": agent.policy_state(), "statistics": statistics.state()}
        try:
            read = folder.read_policy(which, template)
        except CheckpointMismatchError as error:
            config = "config with these bindings" if bindings else "config"
            raise RunError(
                f"{' '.join(str(error).split())} The run's {config} builds an agent whose "
                "policy differs from the one saved (its networks or observation wrappers): "
                "change the environment only, keeping its observation wrappers."
            ) from None
        except CheckpointError as error:
            raise RunError(" ".join(str(error).split())) from None
        statistics.load_state(read.state["statistics"])
        statistics.read_frozen(env)
        agent.load_policy_state(read.state["agent"])
    except BaseException:
        env.close()
        raise
    return Policy(
        agent,
        env,
        read.step,
        read.source,
        read.eval_return,
        seeds.evaluation,
        factories["eval_episodes"],
    )


def _configure(path: str, bindings: Sequence[str], import_folders: Sequence[str]) -> tuple | None:
    """Parses the run's config.gin with `bindings` on top, saying which lines they change;
    returns the spaces of the run's own environment where bindings may have changed it.
    Its `import` lines find their modules where the run found them (`import_folders`)."""
    import gin
    from absl import logging

    import agents  # noqa: F401  (registers every agent's configurables)
    from framework import config, runner  # noqa: F401  (the runner's parts, as `build`)

    gin.clear_config()
    built(lambda: config.parse([path], [], import_folders=import_folders))
    if not bindings:
        return None
    before = gin.config_str().splitlines()
    with contextlib.closing(built(runner_factories()["env_factory"])) as original:
        spaces = (original.observation_space, original.action_space)
    gin.clear_config()
    built(lambda: config.parse([path], list(bindings), import_folders=import_folders))
    for line in difflib.unified_diff(before, gin.config_str().splitlines(), n=0):
        if line[:1] in "+-" and line[:3] not in ("+++", "---") and line[1:].strip():
            logging.info("Config changed by --gin_bindings: %s", line)
    return spaces


def runner_factories() -> dict[str, Any]:
    """The runner's agent and environment factories and seed, as the config binds them."""
    import gin

    from framework.runner import Runner

    defaults = inspect.signature(Runner).parameters
    bound = gin.get_bindings("Runner")
    return {
        name: bound.get(name, defaults[name].default)
        for name in ("agent", "env_factory", "seed", "eval_episodes")
    }


def _environment(env_factory: Any, render_mode: str | None) -> "gym.Env":
    if render_mode is None:
        return built(env_factory)
    parameters = inspect.signature(env_factory).parameters
    takes_it = "render_mode" in parameters or any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()
    )
    if not takes_it:
        name = getattr(env_factory, "__name__", env_factory)
        raise RunError(
            f"The run's environment factory ({name}) takes no render_mode, which a video or a "
            "window needs: make_env and make_atari_env pass it to gymnasium; a factory of your "
            "own needs a `render_mode=None` parameter that it hands to gymnasium.make."
        )
    import experiments.mujoco_frames as mujoco_frames  # here: its child imports this package

    return mujoco_frames.drawn_apart(built(lambda: env_factory(render_mode=render_mode)))


def _check_spaces(env: "gym.Env", spaces: tuple) -> None:
    """The changed environment must give and take what the run's agent was built for."""
    if (env.observation_space, env.action_space) != spaces:
        raise RunError(
            f"With these bindings the environment observes {env.observation_space} and acts "
            f"in {env.action_space}, but the run's agent was trained on observations "
            f"{spaces[0]} and actions {spaces[1]}: its networks cannot take them. Change the "
            "environment only in ways that keep its spaces (another id of the same task, a "
            "TimeLimit, its own arguments)."
        )


def built(build: Any, gin_file: str = "config.gin") -> Any:
    """`build()`, with a config (`gin_file`: a run's own, by default) or part that fails said
    as one paragraph."""
    import gymnasium as gym

    try:
        return build()
    except RunError:
        raise
    except (ValueError, ImportError, TypeError, KeyError, gym.error.Error) as error:
        raise RunError(
            f"The config ({gin_file}) does not build with this code and these bindings: "
            f"{without_gin_call_stack(error)}"
        ) from error
    except RuntimeError as error:
        raise RunError(required_binding_message(error, [gin_file])) from error
