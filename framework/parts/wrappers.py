"""Environment wrappers a config binds without writing Python, and the normalisation wrappers
whose statistics are one state for a whole run.

`make_env.wrappers = [@wrappers.ClipAction, @NormalizeObservation]` wraps each environment the
factory builds, in that order; a wrapper's own parameters are bound as usual
(`wrappers.RescaleAction.min_action = -1.0`). gymnasium's common wrappers are registered here
under `wrappers.<Name>` (`python -m experiments.parts` lists them).

`NormalizeObservation` and `NormalizeReward` (RL-Zoo's `normalize: true`, SB3's VecNormalize)
keep running statistics. In a run they are one state: the training sub-environments update
one set together, evaluation reads it frozen (`share_statistics`), and the driver saves it in
every checkpoint, so a resumed run continues with exactly the statistics it had.
"""

from collections.abc import Sequence
from typing import Any

import gin
import gymnasium
import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd

from framework import env_state
from framework.validation import require_positive_number

RAW_REWARD = "raw_reward"  # the info key of a scaled step's own reward (`NormalizeReward`)

# gymnasium's wrappers that take an environment and plain parameters.
COMMON = (
    gymnasium.wrappers.ClipAction,
    gymnasium.wrappers.RescaleAction,
    gymnasium.wrappers.ClipReward,
    gymnasium.wrappers.TimeAwareObservation,
    gymnasium.wrappers.FlattenObservation,
    gymnasium.wrappers.FrameStackObservation,
    gymnasium.wrappers.GrayscaleObservation,
    gymnasium.wrappers.ResizeObservation,
    gymnasium.wrappers.ReshapeObservation,
    gymnasium.wrappers.RescaleObservation,
    gymnasium.wrappers.DtypeObservation,
    gymnasium.wrappers.DelayObservation,
    gymnasium.wrappers.MaxAndSkipObservation,
    gymnasium.wrappers.StickyAction,
)
for _wrapper in COMMON:
    gin.external_configurable(_wrapper, module="wrappers")


@gin.configurable
class NormalizeObservation(gymnasium.wrappers.NormalizeObservation):
    """Observations standardised by a running mean and variance, then clipped to
    `[-clip, clip]` (SB3's VecNormalize clips at 10)."""

    shared_attributes = ("obs_rms",)  # the run's one state: saved by the driver, not per env

    def __init__(self, env: gymnasium.Env, epsilon: float = 1e-8, clip: float = 10.0):
        super().__init__(env, epsilon)
        require_positive_number(self, clip=clip)
        self.clip = clip
        low = np.full(env.observation_space.shape, -clip, np.float32)
        self.observation_space = gymnasium.spaces.Box(low, -low, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        normalized = super().observation(observation)
        return np.clip(normalized, -self.clip, self.clip).astype(np.float32)


@gin.configurable
class NormalizeReward(gymnasium.wrappers.NormalizeReward):
    """Rewards scaled by the running standard deviation of the discounted return (`gamma`:
    bind it as the agent's), then clipped to `[-clip, clip]`. An evaluation environment's
    rewards are not scaled (`scaling = False`, set by `SharedStatistics.read_frozen`): eval
    returns stay in the env's own units. Each scaled step puts the env's own reward in
    `info["raw_reward"]`, and train/episode_return sums those, as SB3's `Monitor` beneath
    VecNormalize does: a curve a researcher compares with eval returns and with the peers'.

    The discounted return is SB3's VecNormalize's: `G <- gamma G + r`, into the statistics, and
    back to 0 after every episode's last step, a time limit's cut too, and at a reset.
    gymnasium's own wrapper restarts it at a termination only, before adding that step's reward:
    under a time limit (MuJoCo's 1,000 steps) it runs on across episodes towards
    r / (1 - gamma), and its spread, the scale, drifts as the run goes on."""

    shared_attributes = ("return_rms",)

    def __init__(
        self, env: gymnasium.Env, gamma: float = 0.99, epsilon: float = 1e-8, clip: float = 10.0
    ):
        super().__init__(env, gamma, epsilon)
        require_positive_number(self, clip=clip)
        self.clip = clip
        self.scaling = True

    def reset(self, **kwargs) -> tuple:
        self.discounted_reward = np.array([0.0])
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple:
        if not self.scaling:
            return self.env.step(action)
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.discounted_reward = self.discounted_reward * self.gamma + float(reward)
        if self.update_running_mean:
            self.return_rms.update(self.discounted_reward)
        if terminated or truncated:
            self.discounted_reward = np.array([0.0])
        scale = np.sqrt(self.return_rms.var + self.epsilon)
        info = {**info, RAW_REWARD: float(reward)}
        reward = float(np.clip(reward / scale, -self.clip, self.clip))
        return observation, reward, terminated, truncated, info


# Layers that change the rewards they pass on: above `NormalizeReward`, the rewards it reports
# would not be the episode's (a frame skip sums several steps' rewards).
_REWARD_CHANGING = (
    gymnasium.RewardWrapper,
    gymnasium.wrappers.TransformReward,
    gymnasium.wrappers.MaxAndSkipObservation,
)


def scales_rewards(env: gymnasium.Env) -> bool:
    """Whether `env` learns from scaled rewards (`NormalizeReward` is one of its layers), and so
    reports each step's own reward in `info[RAW_REWARD]`; a ValueError, in one paragraph, where
    a layer above it changes the rewards (they would no longer be the episode's own)."""
    above = []
    for layer in env_state.wrapper_chain(env):
        if isinstance(layer, NormalizeReward):
            if above:
                raise ValueError(
                    f"{', '.join(above)} wraps NormalizeReward and changes the rewards it "
                    "passes on, so the training returns NormalizeReward reports (the env's own "
                    "rewards, beneath the scaling) would not be the episode's: list "
                    "NormalizeReward after it in make_env.wrappers, the outermost of the "
                    "wrappers that change rewards."
                )
            return True
        if isinstance(layer, _REWARD_CHANGING):
            above.append(type(layer).__name__)
    return False


_STATISTICS = {NormalizeObservation: "obs_rms", NormalizeReward: "return_rms"}
_GYMNASIUM_NORMALIZERS = (
    gymnasium.wrappers.NormalizeObservation,
    gymnasium.wrappers.NormalizeReward,
)


class SharedStatistics:
    """The running statistics of a run's normalisation wrappers, one per wrapper of the
    environment its factory builds, and their state for checkpoints."""

    def __init__(self, kinds: Sequence[type], statistics: Sequence[RunningMeanStd]):
        self.kinds = list(kinds)  # the wrappers' classes, outermost first
        self.statistics = list(statistics)

    def state(self) -> dict[str, Any]:
        return {
            # Arrays always (a reward's statistics are 0-d, and become numpy scalars as they run).
            str(index): {
                "mean": np.array(rms.mean),
                "var": np.array(rms.var),
                "count": float(rms.count),
            }
            for index, rms in enumerate(self.statistics)
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restores in place: every wrapper keeps reading the same statistics."""
        for index, rms in enumerate(self.statistics):
            saved = state[str(index)]
            rms.mean, rms.var = np.array(saved["mean"]), np.array(saved["var"])
            rms.count = saved["count"]

    def read_frozen(self, evaluation: gymnasium.Env) -> None:
        """`evaluation` (built by the same factory) reads these statistics and updates none;
        its rewards are not scaled."""
        layers = _normalizers(evaluation)
        if layers and not self.kinds:
            raise ValueError(
                "The environment normalises with running statistics, but the training vector "
                "env keeps none to share with evaluation: a vector env that does not step "
                "copies of env_factory (make_vector_env.vector_env, e.g. vectorised_cartpole) "
                "cannot take NormalizeObservation or NormalizeReward."
            )
        _check_layout(self.kinds, layers, "the evaluation environment")
        for layer, statistics in zip(layers, self.statistics, strict=True):
            setattr(layer, _STATISTICS[type(layer)], statistics)
            layer.update_running_mean = False
            if isinstance(layer, NormalizeReward):
                layer.scaling = False


def _normalizers(env: gymnasium.Env) -> list[gymnasium.Wrapper]:
    """The normalisation wrappers of `env`, outermost first. gymnasium's own ones (from a
    factory written in Python) would keep statistics of their own, unsaved: refused."""
    layers = env_state.wrapper_chain(env)
    foreign = [
        type(layer).__name__
        for layer in layers
        if isinstance(layer, _GYMNASIUM_NORMALIZERS) and type(layer) not in _STATISTICS
    ]
    if foreign:
        raise ValueError(
            f"The environment is wrapped in gymnasium's own {', '.join(foreign)}, whose "
            "statistics no run would share with evaluation or save: use "
            "framework.parts.wrappers.NormalizeObservation / NormalizeReward instead "
            "(in gin: make_env.wrappers = [@NormalizeObservation])."
        )
    return [layer for layer in layers if type(layer) in _STATISTICS]


def _check_layout(kinds: Sequence[type], layers: Sequence[gymnasium.Wrapper], what: str) -> None:
    if [type(layer) for layer in layers] != list(kinds):
        found = " > ".join(type(layer).__name__ for layer in layers) or "none"
        raise ValueError(
            f"{what} normalises with {found}, the first training environment with "
            f"{' > '.join(kind.__name__ for kind in kinds) or 'none'}: build them all with one "
            "env_factory."
        )


def share_statistics(training: Sequence[gymnasium.Env]) -> SharedStatistics:
    """Makes the normalisation wrappers of every training environment (built by one factory)
    update one set of statistics: the first environment's."""
    chains = [_normalizers(env) for env in training]
    kinds = [type(layer) for layer in chains[0]] if chains else []
    shared = [getattr(layer, _STATISTICS[type(layer)]) for layer in chains[0]] if chains else []
    for index, chain in enumerate(chains):
        _check_layout(kinds, chain, f"training environment {index}")
        for layer, statistics in zip(chain, shared, strict=True):
            setattr(layer, _STATISTICS[type(layer)], statistics)
    return SharedStatistics(kinds, shared)


def has_statistics(env: gymnasium.Env) -> bool:
    """Whether `env` normalises with running statistics."""
    return bool(_normalizers(env))


class ObservationNormalizer:
    """What a run's `NormalizeObservation` does to an observation, outside the environment:
    for a policy given the environment's own observations (`Policy.act`, an export)."""

    def __init__(self, layer: NormalizeObservation):
        self.statistics = layer.obs_rms  # the run's, read frozen
        self.epsilon, self.clip = layer.epsilon, layer.clip
        self.raw_env = layer.env  # the environment below it: what gives what it takes
        self.raw_space = layer.env.observation_space

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        """gymnasium's formula, in float64 then float32, then the clip: as the wrapper."""
        rms = self.statistics
        scaled = np.float32((observations - rms.mean) / np.sqrt(rms.var + self.epsilon))
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)


def observation_normalizer(env: gymnasium.Env) -> ObservationNormalizer | None:
    """The normalisation of `env`'s observations as a function, if it normalises them; only
    where nothing outside it changes them again (it is the last observation wrapper)."""
    chain = env_state.wrapper_chain(env)
    layers = [layer for layer in chain if isinstance(layer, NormalizeObservation)]
    if not layers:
        return None
    layer = layers[-1]  # the innermost; any outer one would change what it returns
    outer = chain[: chain.index(layer)]
    changing = [
        type(wrapper).__name__
        for wrapper in outer
        if isinstance(wrapper, gymnasium.ObservationWrapper)
        or wrapper.observation_space != layer.observation_space
    ]
    if changing:
        raise ValueError(
            f"The environment changes its observations after NormalizeObservation (by "
            f"{', '.join(changing)}), so a policy cannot take the environment's observations "
            "and normalise them itself. List NormalizeObservation last among the observation "
            "wrappers (make_env.wrappers) to use a policy outside its environment."
        )
    return ObservationNormalizer(layer)
