"""Argument checks that fail at construction with a message naming the parameter.

Gin passes whatever a config writes: `Runner.num_steps = 'abc'`, `= None`, `= 1500.5` or `= True`
must each fail here, naming `Runner.num_steps` and what is allowed, not later as "'<' not
supported between instances of 'str' and 'int'".
"""

import numbers
from collections.abc import Callable

import gymnasium as gym
import numpy as np


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _require(owner: object, values: dict[str, object], allowed: str, ok: Callable) -> None:
    """Raises ValueError naming `Owner.name` for the first value that is not `ok`. `owner` is
    the object checked, named by its class, or the name a config writes ('optimizers.Adam')."""
    owner_name = owner if isinstance(owner, str) else type(owner).__name__
    for name, value in values.items():
        if not ok(value):
            raise ValueError(f"{owner_name}.{name} must be {allowed}, got {_describe(value)}.")


def require_positive(owner: object, **values: int) -> None:
    """Raises ValueError naming `Owner.name` for anything but an integer of at least 1."""
    _require(owner, values, "an integer >= 1", lambda v: _is_integer(v) and v >= 1)


def require_non_negative(owner: object, **values: int) -> None:
    """Raises ValueError naming `Owner.name` for anything but an integer of at least 0."""
    _require(owner, values, "an integer >= 0", lambda v: _is_integer(v) and v >= 0)


def require_positive_number(owner: object, **values: float) -> None:
    """Raises ValueError naming `Owner.name` for anything but a number above 0."""
    _require(owner, values, "a number > 0", lambda v: _is_number(v) and v > 0)


def require_non_negative_number(owner: object, **values: float) -> None:
    """Raises ValueError naming `Owner.name` for anything but a number of at least 0."""
    _require(owner, values, "a number >= 0", lambda v: _is_number(v) and v >= 0)


def require_unit_interval(owner: object, **values: float) -> None:
    """Raises ValueError naming `Owner.name` for anything but a number in [0, 1]."""
    _require(owner, values, "a number in [0, 1]", lambda v: _is_number(v) and 0.0 <= v <= 1.0)


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
