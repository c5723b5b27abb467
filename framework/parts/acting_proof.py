"""The proof that a numpy acting copy computes its network: both on one seeded batch of
observations from the observation space, compared at a float32 tolerance.

A copy chosen by the network's name acted as another network for a user's part copied from
`networks.mlp` with a `LayerNormalization` after each layer (names kept): its actions agreed
with the exported network's on 46% of observations, silently. The copies in `acting.py` are
used only where this proof holds, when built and again after their first weight refresh.
"""

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf
from absl import logging

# numpy and TensorFlow sum a layer's products in different orders: float32 results differ by
# a few units in the last place per layer (6e-8 relative each), far below 1e-5 relative.
RTOL = 1e-5
PROBE_SIZE = 32
# A bound beyond this is no bound in practice (CartPole gives its velocities float32's largest
# value): uniform draws up to it would overflow the network and hide every difference.
_FARTHEST_BOUND = 1e6


def probe_observations(space: gym.spaces.Box, count: int = PROBE_SIZE, seed: int = 0) -> np.ndarray:
    """`count` observations of `space` as float32, the same for every call: uniform where
    both bounds are finite (and within 1e6), a standard normal where neither is, and the
    normal's magnitude from the one finite bound inward where one is. Never zeros alone,
    which a network maps to its biases and a missing layer often passes unseen."""
    rng = np.random.default_rng(seed)
    shape = (count, *space.shape)
    low = np.broadcast_to(np.asarray(space.low, np.float64), space.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float64), space.shape)
    has_low, has_high = np.abs(low) <= _FARTHEST_BOUND, np.abs(high) <= _FARTHEST_BOUND
    low_or_0, high_or_0 = np.where(has_low, low, 0.0), np.where(has_high, high, 0.0)
    uniform, normal = rng.uniform(size=shape), rng.standard_normal(shape)
    between = low_or_0 + uniform * (high_or_0 - low_or_0)
    one_sided = np.where(has_low, low_or_0 + np.abs(normal), high_or_0 - np.abs(normal))
    values = np.where(has_low & has_high, between, np.where(has_low | has_high, one_sided, normal))
    return np.clip(values, low, high).astype(np.float32)


def disagreement(copy: Any, network: Any) -> str | None:
    """None where the copy's outputs equal the network's (nested alike) within `RTOL`, else
    where they differ most. The absolute tolerance is `RTOL` times the output's largest
    magnitude: an output near zero by cancellation keeps the rounding of the terms that
    cancelled, which is relative to them, not to it."""
    copy_values, network_values = tf.nest.flatten(copy), tf.nest.flatten(network)
    if len(copy_values) != len(network_values):
        return (
            f"the numpy copy's outputs number {len(copy_values)}, the network's "
            f"{len(network_values)}"
        )
    for copy_value, network_value in zip(copy_values, network_values, strict=True):
        copy_value, network_value = np.asarray(copy_value), np.asarray(network_value)
        if copy_value.shape != network_value.shape:
            return (
                f"the numpy copy's output has shape {copy_value.shape}, "
                f"the network's {network_value.shape}"
            )
        finite = np.abs(network_value[np.isfinite(network_value)])
        atol = RTOL * (finite.max() if finite.size else 0.0)
        close = np.isclose(copy_value, network_value, rtol=RTOL, atol=atol, equal_nan=True)
        if not close.all():
            worst = np.argmax(np.where(close, -1.0, np.abs(copy_value - network_value)))
            return (
                f"the numpy copy gives {copy_value.flat[worst]:.6g} where the network gives "
                f"{network_value.flat[worst]:.6g} (tolerance {RTOL:g} relative)"
            )
    return None


class Proof:
    """The network's outputs on the probe observations, for a copy to equal now and later.

    `network(observations)`: what the copy must compute, from the live model (its weights of
    the moment); `outputs(copy, observations)`: what an acting copy gives, nested as that.
    """

    def __init__(
        self,
        space: gym.spaces.Box,
        network: Callable[[np.ndarray], Any],
        outputs: Callable[[Any, np.ndarray], Any],
    ):
        self._observations = probe_observations(space)
        self._network = network
        self._outputs = outputs

    def failure(self, copy: Any, when: str) -> str | None:
        """None if `copy` computes the network now, else what differs, saying `when`."""
        found = disagreement(
            self._outputs(copy, self._observations), self._network(self._observations)
        )
        return None if found is None else f"{when}, {found}"


def warn_acting_compiled(network_name: str, reason: str) -> None:
    """The one line a network that acts through a compiled call gets: why, and the cost."""
    logging.warning(
        "Acting through a compiled call for the network %r: %s. Each action costs a "
        "TensorFlow call (~200 us, against ~10 us for a numpy copy of a small MLP: "
        "docs/speed.md); the actions are the network's own.",
        network_name,
        reason,
    )
