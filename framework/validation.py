"""Argument checks that fail at construction with a message naming the parameter.

Gin passes whatever a config writes: `Runner.num_steps = 'abc'`, `= None`, `= 1500.5` or `= True`
must each fail here, naming `Runner.num_steps` and what is allowed, not later as "'<' not
supported between instances of 'str' and 'int'".
"""

import numbers

import gymnasium as gym
import numpy as np


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _owner(owner: object) -> str:
    """How a config names the owner: a part's class (`Runner`), or a configurable function's
    name given as a string (`"make_env"`)."""
    return owner if isinstance(owner, str) else type(owner).__name__


def require_positive(owner: object, **values: int) -> None:
    """Raises ValueError naming `Owner.name` for anything but an integer of at least 1."""
    for name, value in values.items():
        if not _is_integer(value) or value < 1:
            raise ValueError(
                f"{_owner(owner)}.{name} must be an integer >= 1, got {_describe(value)}."
            )


def require_non_negative(owner: object, **values: int) -> None:
    """Raises ValueError naming `Owner.name` for anything but an integer of at least 0."""
    for name, value in values.items():
        if not _is_integer(value) or value < 0:
            raise ValueError(
                f"{_owner(owner)}.{name} must be an integer >= 0, got {_describe(value)}."
            )


def require_unit_interval(owner: object, **values: float) -> None:
    """Raises ValueError naming `Owner.name` for anything but a number in [0, 1]."""
    for name, value in values.items():
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise ValueError(
                f"{_owner(owner)}.{name} must be a number in [0, 1], got {_describe(value)}."
            )


def require_discrete(owner: object, space: gym.Space) -> int:
    """The number of actions of a Discrete space; a clear error for any other space."""
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"{type(owner).__name__} needs a Discrete action space, got {space}; pick an "
            "environment with discrete actions or an agent for continuous ones."
        )
    return int(space.n)


def require_box_observations(owner: object, space: gym.Space) -> tuple[int, ...]:
    """The shape of a Box observation space; a clear error for Discrete, Tuple, Dict, ..."""
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"{type(owner).__name__} needs array observations (a Box space), but the "
            f"environment's observation space is {space}. Wrap the environment so that it "
            "emits arrays, e.g. gymnasium.wrappers.FlattenObservation (one-hot for Discrete, "
            "concatenated for Tuple and Dict), in an own env factory bound to "
            "Runner.env_factory."
        )
    return tuple(space.shape)


def _is_integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require_bounded_box(owner: object, space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    """The flat, finite bounds of a 1-d Box action space; a clear error for any other."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ValueError(
            f"{type(owner).__name__} needs a 1-d Box action space (continuous actions), got "
            f"{space}; use DQN for discrete actions."
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"{type(owner).__name__} scales its actions to the Box's bounds, which must be "
            f"finite, got low={space.low}, high={space.high}."
        )
    return space.low.astype(np.float32), space.high.astype(np.float32)
