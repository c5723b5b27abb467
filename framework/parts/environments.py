"""Environment factories: a Gaussian multi-armed bandit, any gymnasium id, Atari preprocessing,
and a vectorised CartPole for the training loop.

Every factory returns an unseeded environment: the caller seeds it with `env.reset(seed=...)`
(and a single env's `env.action_space.seed(...)`), so one seed in the experiment controls
everything.
"""

import contextlib
import difflib
import importlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gin
import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv

from framework import console, env_state
from framework.parts import atari
from framework.parts import wrappers as _registered_wrappers  # noqa: F401  (with gin)
from framework.validation import require_positive

BANDIT_ID = "MultiArmedBandit-v0"


@gin.configurable
class MultiArmedBanditEnv(gymnasium.Env):
    """A k-armed bandit with Gaussian rewards, as a one-step episodic gymnasium environment.

    The smallest environment a value-based agent can be tested on: the optimal Q-values are
    the arm means, so a learner can be checked against known numbers. The observation carries
    no information (always `[1.0]`) and every episode is a single pull. A step's info gives
    the pulled arm's mean as `expected_reward` (and `arm_mean`): evaluations count it instead
    of the sampled reward (`loop.evaluate`), so that two policies that pull different
    arms evaluate differently and two that pull the same arm alike.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        means: Sequence[float] = (0.2, 0.5, 0.7, 0.4),
        stds: Sequence[float] | float = 1.0,
    ):
        if len(means) < 2:
            raise ValueError(f"A bandit needs at least 2 arms, got means={list(means)}.")
        self.means = np.asarray(means, dtype=np.float64)
        num_arms = len(self.means)
        if np.ndim(stds) == 0:
            stds = [stds] * num_arms
        if len(stds) != num_arms:
            raise ValueError(
                f"stds={list(stds)} has {len(stds)} entries but there are {num_arms} arms "
                "(give one std per arm, or a single float for all)."
            )
        if any(std < 0 for std in stds):
            raise ValueError(f"stds must be non-negative, got stds={list(stds)}.")
        self.stds = np.asarray(stds, dtype=np.float64)
        self.observation_space = spaces.Box(low=1.0, high=1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(num_arms)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)  # Seeds self.np_random, which draws the rewards.
        return np.ones(1, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action={action!r} is not an arm in {self.action_space}.")
        reward = float(self.np_random.normal(self.means[action], self.stds[action]))
        mean = float(self.means[action])
        info = {"arm_mean": mean, "expected_reward": mean}
        return np.ones(1, dtype=np.float32), reward, True, False, info


if BANDIT_ID not in gymnasium.registry:  # Re-importing (e.g. a module reload) must not warn.
    # Without gymnasium's passive checker: the observation space Box(1, 1) is one point on
    # purpose, which it would warn about at every environment built.
    gymnasium.register(id=BANDIT_ID, entry_point=MultiArmedBanditEnv, disable_env_checker=True)


class UnknownEnvironmentError(ValueError):
    """An environment id that is not registered; the message suggests close matches."""


def _register_ale_envs() -> None:
    """Registers the `ALE/...` ids, which gymnasium only knows once ale_py is imported.

    ALE's own log is set to warnings and errors: at Info it prints its banner ("A.L.E: Arcade
    Learning Environment (version ...)", "[Powered by Stella]") at the first emulator built.
    """
    try:
        import ale_py
    except ImportError as error:
        raise ImportError(
            "Atari environments (ids starting with 'ALE/') need ale-py: install the atari extra "
            "with `pip install -e .[atari]`."
        ) from error
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    gymnasium.register_envs(ale_py)


MINATAR_GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")


def _register_minatar_envs() -> None:
    """Registers the `MinAtar/<Game>-v0` ids (all 6 actions; `-v1`: each game's minimal set),
    which gymnasium 1.x does not find by itself, and has their game objects saved as data."""
    try:
        import minatar
        import minatar.gym
    except ImportError as error:
        raise ImportError(
            "MinAtar environments (ids starting with 'MinAtar/') need minatar: install the "
            "minatar extra with `pip install -e .[minatar]`."
        ) from error
    if "MinAtar/Breakout-v0" not in gymnasium.registry:
        minatar.gym.register_envs()
    games = [importlib.import_module(f"minatar.environments.{game}") for game in MINATAR_GAMES]
    env_state.register_state_class(minatar.Environment, *(game.Env for game in games))


def _check_env_id(env_id: str, factory: str) -> None:
    """Fails early with a readable message, as gymnasium's own error for a typo is unclear."""
    if not isinstance(env_id, str):
        raise UnknownEnvironmentError(
            f"{factory}.env_id must be a gymnasium environment id, a string such as "
            f"'CartPole-v1'; got {env_id!r} ({type(env_id).__name__})."
        )
    if env_id.startswith("ALE/"):
        _register_ale_envs()
    if env_id.startswith("MinAtar/"):
        _register_minatar_envs()
    if env_id in gymnasium.registry:
        return
    matches = difflib.get_close_matches(env_id, gymnasium.registry.keys())
    suggestion = f" Did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""
    raise UnknownEnvironmentError(
        f"Unknown environment id {env_id!r}.{suggestion} List the registered ids with "
        "`gymnasium.pprint_registry()` (Atari ids appear once ale_py is imported)."
    )


Wrapper = Callable[[gymnasium.Env], gymnasium.Env]


@gin.configurable(denylist=["render_mode"])  # the caller's: a video, a window
def make_env(
    env_id: str,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] = (),
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Builds any registered gymnasium environment, unseeded.

    `max_episode_steps` overrides the id's own time limit (gymnasium reads a negative one as
    no limit, so it must be positive); None keeps the registered one.
    `render_mode` is gymnasium's ("rgb_array" for a video, "human" for a window).
    `env_kwargs` go to the environment's constructor (RL-Zoo's `env_kwargs`, e.g.
    `{'continuous': True}`); `wrappers` wrap it in order, innermost first
    (`[@wrappers.ClipAction, @NormalizeObservation]`, see `framework/parts/wrappers.py`).
    """
    _check_env_id(env_id, "make_env")
    if max_episode_steps is not None:
        require_positive("make_env", max_episode_steps=max_episode_steps)
    kwargs = _kwargs(env_kwargs, "make_env", reserved=("max_episode_steps", "render_mode"))
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    with _model_warnings_quiet(env_id):
        env = gymnasium.make(env_id, max_episode_steps=max_episode_steps, **kwargs)
    return _wrapped(env, wrappers)


def _model_warnings_quiet(env_id: str) -> contextlib.AbstractContextManager:
    """Off the console: MuJoCo's warnings about a model it compiles (gymnasium's own), and
    gymnasium's that `MinAtar/<Game>-v0` is out of date (it is the full action set, not an
    older version of `-v1`)."""
    if "mujoco" in str(gymnasium.spec(env_id).entry_point).lower():
        return console.mujoco_model_warnings_quiet()
    if env_id.startswith("MinAtar/"):
        return _minatar_version_warning_quiet()
    return contextlib.nullcontext()


@contextlib.contextmanager
def _minatar_version_warning_quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*is out of date", DeprecationWarning)
        yield


def _kwargs(env_kwargs: dict[str, Any] | None, factory: str, reserved: Sequence[str]) -> dict:
    """The environment's own arguments; those the factory binds itself are refused."""
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ValueError(
            f"{factory}.env_kwargs must be a dict of the environment's arguments, e.g. "
            f"{{'continuous': True}}; got {env_kwargs!r}."
        )
    taken = sorted(set(env_kwargs or {}) & set(reserved))
    if taken:
        raise ValueError(
            f"{factory}.env_kwargs sets {', '.join(taken)}, which {factory} binds itself: "
            f"bind {', '.join(f'{factory}.{name}' for name in taken)} instead."
        )
    return dict(env_kwargs or {})


def _wrapped(env: gymnasium.Env, wrappers: Sequence[Wrapper]) -> gymnasium.Env:
    for wrapper in wrappers:
        if not callable(wrapper):
            raise ValueError(
                f"wrappers must be wrapper classes or factories, e.g. "
                f"[@wrappers.ClipAction, @NormalizeObservation] (no parentheses); got "
                f"{wrapper!r}."
            )
        env = wrapper(env)
    return env


@gin.configurable(denylist=["render_mode"])
def make_atari_env(
    env_id: str = "ALE/Pong-v5",
    screen_size: int = 80,
    frame_skip: int = 4,
    frame_stack: int = 4,
    noop_max: int = 30,
    repeat_action_probability: float = 0.25,
    fire_on_reset: bool = False,
    terminal_on_life_loss: bool = False,
    clip_rewards: bool = False,
    max_episode_frames: int | None = None,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] = (),
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Builds an Atari environment with the standard DQN preprocessing, unseeded.

    Observations are uint8 `(screen_size, screen_size, frame_stack)`: grayscale frames, max-pooled
    over the last two of each `frame_skip`, stacked channels-last as a Keras conv net expects
    (gymnasium's `AtariPreprocessing` and `FrameStackObservation`, which repeats a reset's frame).
    Up to `noop_max` no-op frames start each game; `repeat_action_probability` is ALE's sticky
    actions (0.25 in v5, Machado et al., 2018; 0 in `NoFrameskip-v4`).

    The protocol's layers (`framework/parts/atari.py`): `fire_on_reset` presses FIRE after
    every reset in the games that have it; `terminal_on_life_loss` ends the learner's episode
    at a lost life while the game goes on; `clip_rewards` clips the learner's rewards to
    [-1, 1]. With either of the last two, the game's own unclipped score is recorded beneath
    them (`GameScore`): training logs and evaluation count whole games and their scores.

    `max_episode_frames` caps a game in emulator frames (ALE's own count; None: the id's, 108,000
    for `ALE/...-v5` and `...NoFrameskip-v4`); `max_episode_steps` caps it in agent steps
    (each `frame_skip` frames), outside every layer, so not with the learner's own episodes.
    `env_kwargs` go to ALE's constructor (`{'mode': 1}`), `wrappers` around the preprocessed
    environment. `render_mode` renders the emulator's own RGB frames, not the preprocessed ones.
    """
    _check_env_id(env_id, "make_atari_env")
    if max_episode_steps is not None:
        require_positive("make_atari_env", max_episode_steps=max_episode_steps)
        if terminal_on_life_loss or clip_rewards:
            raise ValueError(
                "make_atari_env.max_episode_steps cuts the episodes outside every layer, but "
                "with terminal_on_life_loss or clip_rewards a game is counted beneath them: "
                "cap it with make_atari_env.max_episode_frames (emulator frames, frame_skip "
                "a step) instead."
            )
    if max_episode_frames is not None:
        require_positive("make_atari_env", max_episode_frames=max_episode_frames)
    # Frame skipping is done by AtariPreprocessing (which max-pools frames), not by the emulator.
    reserved = ("frameskip", "repeat_action_probability", "render_mode")
    kwargs = _kwargs(env_kwargs, "make_atari_env", (*reserved, "max_num_frames_per_episode"))
    if max_episode_frames is not None:
        kwargs["max_num_frames_per_episode"] = max_episode_frames
    env = gymnasium.make(
        env_id,
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        render_mode=render_mode,
        **kwargs,
    )
    env = gymnasium.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        grayscale_obs=True,
        scale_obs=False,
    )
    if terminal_on_life_loss or clip_rewards:
        env = atari.GameScore(env)
    if terminal_on_life_loss:
        env = atari.EpisodicLife(env)
    if fire_on_reset and atari.has_fire(env):
        env = atari.FireOnReset(env)
    if clip_rewards:
        env = gymnasium.wrappers.ClipReward(env, -1.0, 1.0)
    env = atari.channels_last(gymnasium.wrappers.FrameStackObservation(env, stack_size=frame_stack))
    if max_episode_steps is not None:
        env = gymnasium.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return _wrapped(env, wrappers)


class SameStepCartPoleVectorEnv(CartPoleVectorEnv):
    """gymnasium's vectorised CartPole, resetting an ended episode in the step that ends it.

    All sub-environments step in one numpy call: at `num_envs=8` a step takes about half of a
    `SyncVectorEnv` over 8 CartPole-v1s, which was a third of an A2C run's time. gymnasium's own
    class resets on the step after a done (`NEXT_STEP`, which would hand the agent a reset as if
    it were a transition); this one does what the training loop expects of `SAME_STEP`: the
    ended episode's last observation in `infos["final_obs"]` (rows where `infos["_final_obs"]`),
    the new episode's first one among the returned observations. The physics, time limit and
    reset distribution are CartPole's; the sub-environments share one random generator, seeded
    by `reset(seed=...)`.
    """

    metadata = {
        **CartPoleVectorEnv.metadata,
        "autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP,
    }

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        observations, rewards, terminated, truncated, infos = super().step(actions)
        ended = self.prev_done  # what the parent would reset in its next step
        num_ended = np.count_nonzero(ended)
        if num_ended:
            infos = {"final_obs": observations, "_final_obs": ended}
            self.state[:, ended] = self.np_random.uniform(self.low, self.high, (4, num_ended))
            self.steps[ended] = 0
            self.prev_done = np.zeros_like(ended)
            observations = self.state.T.astype(np.float32)
        return observations, rewards, terminated, truncated, infos


# The layers `gymnasium.make` puts around CartPole; any other wrapper would be lost.
_CARTPOLE_LAYERS = (
    gymnasium.wrappers.TimeLimit,
    gymnasium.wrappers.common.OrderEnforcing,
    gymnasium.wrappers.common.PassiveEnvChecker,
)


# What a CartPole is made of; a factory's CartPole must match the vectorised one in each.
_CARTPOLE_CONSTANTS = (
    "gravity",
    "masscart",
    "masspole",
    "length",
    "force_mag",
    "tau",
    "kinematics_integrator",
    "theta_threshold_radians",
    "x_threshold",
    "_sutton_barto_reward",
)


@gin.configurable(denylist=["env_factory", "num_envs"])  # the caller's: make_vector_env
def vectorised_cartpole(
    env_factory: Callable[[], gymnasium.Env], num_envs: int
) -> SameStepCartPoleVectorEnv:
    """`num_envs` of the CartPole that `env_factory` builds, as one `SameStepCartPoleVectorEnv`
    with its time limit, constants and reward; for `make_vector_env.vector_env`."""
    env = env_factory()
    env.close()
    chain = env_state.wrapper_chain(env)
    *wrappers, base = chain
    # The tightest of the time limits (TimeLimit keeps its own privately; a spec may not know it).
    limits = [w._max_episode_steps for w in wrappers if isinstance(w, gymnasium.wrappers.TimeLimit)]
    limit = min(limits, default=None)
    if type(base) is not CartPoleEnv:
        problem = "is not gymnasium's CartPoleEnv"
    elif limit is None:
        problem = "has no time limit"
    elif not all(isinstance(wrapper, _CARTPOLE_LAYERS) for wrapper in wrappers):
        extra = [type(w).__name__ for w in wrappers if not isinstance(w, _CARTPOLE_LAYERS)]
        problem = (
            f"has wrappers the vectorised CartPole would leave out ({', '.join(extra)}: it "
            "takes none but the time limit; step make_env's CartPoles in turn for those)"
        )
    else:
        vector = SameStepCartPoleVectorEnv(
            num_envs, max_episode_steps=limit, sutton_barto_reward=base._sutton_barto_reward
        )
        changed = [
            name for name in _CARTPOLE_CONSTANTS if getattr(base, name) != getattr(vector, name)
        ]
        if not changed:
            return vector
        problem = f"differs from gymnasium's CartPole in {changed}"
    layers = " > ".join(type(layer).__name__ for layer in chain)
    raise ValueError(
        f"vectorised_cartpole: env_factory builds {layers}, which {problem}; it vectorises only "
        "a CartPole as gymnasium.make builds it (CartPole-v0 or -v1, with a time limit and no "
        "other wrapper or change). Use it with make_env.env_id = 'CartPole-v1', or leave "
        "make_vector_env.vector_env unset."
    )
