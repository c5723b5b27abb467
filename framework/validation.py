"""Argument checks that fail at construction with a message naming the parameter."""

import gymnasium as gym


def require_positive(owner: object, **values: int) -> None:
    """Raises ValueError naming `Owner.name` for any value below 1."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{type(owner).__name__}.{name} must be >= 1, got {value}.")


def require_non_negative(owner: object, **values: float) -> None:
    """Raises ValueError naming `Owner.name` for any negative value."""
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{type(owner).__name__}.{name} must be >= 0, got {value}.")


def require_unit_interval(owner: object, **values: float) -> None:
    """Raises ValueError naming `Owner.name` for any value outside [0, 1]."""
    for name, value in values.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{type(owner).__name__}.{name} must be in [0, 1], got {value}.")


def require_discrete(owner: object, space: gym.Space) -> int:
    """The number of actions of a Discrete space; a clear error for any other space."""
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"{type(owner).__name__} needs a Discrete action space, got {space}; pick an "
            "environment with discrete actions or an agent for continuous ones."
        )
    return int(space.n)
