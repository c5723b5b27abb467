"""C51's categorical return distribution (Bellemare et al., 2017): its support, and the
projection of a shifted and scaled distribution back onto it.

A categorical network predicts, per action, probabilities over fixed atoms
`z_i = v_min + i * (v_max - v_min) / (num_atoms - 1)`; its Q-value is the expectation
`sum_i p_i z_i`. The network part (`networks.mlp(support=...)`) and the target parts
(`targets.CategoricalQLearningTarget` and kin) each take a `CategoricalSupport`; built from the
same gin bindings, they agree on it.
"""

import gin
import numpy as np
import tensorflow as tf


@gin.configurable
class CategoricalSupport:
    """`num_atoms` evenly spaced atoms from `v_min` to `v_max`, both included."""

    def __init__(self, num_atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0):
        if isinstance(num_atoms, bool) or not isinstance(num_atoms, int) or num_atoms < 2:
            raise ValueError(
                f"CategoricalSupport.num_atoms must be an integer >= 2, got {num_atoms!r}."
            )
        if not (np.isfinite(v_min) and np.isfinite(v_max) and v_min < v_max):
            raise ValueError(
                f"CategoricalSupport needs finite v_min < v_max, got v_min={v_min!r} and "
                f"v_max={v_max!r}."
            )
        self.num_atoms = num_atoms
        self.v_min, self.v_max = float(v_min), float(v_max)
        self.atoms = np.linspace(v_min, v_max, num_atoms, dtype=np.float32)  # [Z]
        self.spacing = (self.v_max - self.v_min) / (num_atoms - 1)

    def expected_values(self, logits: tf.Tensor) -> tf.Tensor:
        """`sum_i softmax(logits)_i z_i` over the last axis: [..., Z] -> [...]."""
        return tf.reduce_sum(tf.nn.softmax(logits) * self.atoms, axis=-1)

    def expected_values_numpy(self, logits: np.ndarray) -> np.ndarray:
        """The same in numpy, for acting."""
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return (z @ self.atoms) / z.sum(axis=-1)

    def project(
        self, rewards: tf.Tensor, discounts: tf.Tensor, probabilities: tf.Tensor
    ) -> tf.Tensor:
        """The distribution of `r + discount * Z` projected onto the atoms.

        Each shifted atom `Tz_j = clip(r + discount * z_j, v_min, v_max)` gives its probability
        `p_j` to the two atoms around it in proportion to nearness:
        `m_i = sum_j clip(1 - |Tz_j - z_i| / spacing, 0, 1) p_j` (Bellemare et al., 2017,
        Algorithm 1, written as Dopamine's `project_distribution`). A terminal step has
        discount 0: all mass goes to the reward's neighbours. rewards, discounts [B];
        probabilities [B, Z] -> [B, Z].
        """
        shifted = rewards[:, None] + discounts[:, None] * self.atoms  # [B, Z_j]
        shifted = tf.clip_by_value(shifted, self.v_min, self.v_max)
        distance = tf.abs(shifted[:, None, :] - self.atoms[None, :, None])  # [B, Z_i, Z_j]
        share = tf.clip_by_value(1.0 - distance / self.spacing, 0.0, 1.0)
        return tf.reduce_sum(share * probabilities[:, None, :], axis=-1)  # [B, Z_i]
