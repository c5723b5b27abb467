"""Proportional prioritized replay (Schaul et al., 2016) on a vectorised sum-tree.

Transition i is drawn with probability `P(i) = p_i^alpha / sum_k p_k^alpha`, its priority
`p_i = |error_i| + epsilon` from the loss's last per-sample error on it (a new transition gets
the largest priority seen so far, so that it is replayed at least once soon). The bias this
brings is corrected by importance weights `w_i = (N P(i))^-beta`, divided by the batch's largest
(as Dopamine does) so that they only ever scale updates down; `beta` rises over the environment
steps the replay has seen (a schedule part, e.g. `LinearSchedule(0.4, 1.0, duration)`, whose
duration None spans the run).

Stale priorities within a call: a replay agent draws all `k` batches of a learner call before
it (`ReplayAgent.update`), and the errors come back after it, so the later batches of a call are
drawn from priorities up to `k - 1` gradient steps old. This is accepted rather than training
one step per call: a call's crossing into TensorFlow costs about a whole small step
(docs/speed.md), and Ape-X (Horgan et al., 2018) learns well from priorities far staler than
that. The results in docs/results.md (dqn/cartpole_per.gin, dqn/cartpole_rainbow.gin, 128 steps
a call) show that learning holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import gin
import numpy as np
import numpy.typing as npt

from framework.parts.exploration import LinearSchedule, bounding_values
from framework.parts.replay import ReplayCheckpointError, UniformReplay
from framework.validation import (
    require_non_negative_number,
    require_positive,
    require_positive_number,
)

if TYPE_CHECKING:
    from framework.agent import VectorStep

_PRIORITY_STATE = ("priority_leaves", "max_priority", "environment_steps")


class SumTree:
    """Non-negative values at `capacity` leaves and every subtree's sum, in one numpy array.

    Node 1 is the root and node n's children are 2n and 2n + 1; the leaves sit at
    `[L, L + capacity)`, L the smallest power of two >= capacity. Every internal node always
    equals the sum of its two children, recomputed (never adjusted by a difference) whenever a
    leaf below changes, so a tree rebuilt from its leaves is bitwise the tree updated step by
    step. Writes are batched: `set` stores leaves and their paths are summed at the next read,
    level by level for all of them at once.
    """

    def __init__(self, capacity: int):
        require_positive(self, capacity=capacity)
        self.capacity = capacity
        self._first_leaf = 1 << (capacity - 1).bit_length()
        self._depth = self._first_leaf.bit_length() - 1  # edges from the root to a leaf
        self._nodes = np.zeros(2 * self._first_leaf, np.float64)
        self._pending: list[np.ndarray] = []  # leaves written since the sums were last updated

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Leaf `indices[j]` takes `values[j]`; for a repeated index, its last value."""
        indices = np.asarray(indices, np.int64) + self._first_leaf
        if not indices.size:  # e.g. a step that wrote no n-step transition: nothing to sum
            return
        self._nodes[indices] = values
        self._pending.append(indices)

    def leaves(self, indices: np.ndarray) -> np.ndarray:
        return self._nodes[np.asarray(indices) + self._first_leaf]

    @property
    def total(self) -> float:
        self._update_sums()
        return float(self._nodes[1])

    def find(self, masses: np.ndarray) -> np.ndarray:
        """For each mass u in [0, total), the leaf i whose values' running sum first passes
        it: `sum_{k<i} v_k <= u < sum_{k<=i} v_k`. All masses descend the tree together, one
        level per step."""
        self._update_sums()
        node = np.ones(masses.shape, np.int64)
        mass = np.array(masses, np.float64)
        for _ in range(self._depth):
            node <<= 1  # the left child
            left = self._nodes[node]
            right = mass >= left
            mass -= np.where(right, left, 0.0)
            node += right
        # Rounding in the sums may carry a mass just past the last non-zero leaf, into the
        # empty leaves after it: it belongs to the last leaf.
        return np.minimum(node - self._first_leaf, self.capacity - 1)

    def rebuild(self, leaves: np.ndarray) -> None:
        """All leaves at once (`leaves` for the first ones, zero after), every sum recomputed."""
        self._nodes[:] = 0.0
        self._nodes[self._first_leaf : self._first_leaf + len(leaves)] = leaves
        self._pending.clear()
        start = self._first_leaf
        while start > 1:
            start //= 2
            self._nodes[start : 2 * start] = (
                self._nodes[2 * start : 4 * start : 2] + self._nodes[2 * start + 1 : 4 * start : 2]
            )

    def _update_sums(self) -> None:
        if not self._pending:
            return
        node = np.concatenate(self._pending) // 2
        self._pending.clear()
        while node[0] >= 1:  # all nodes of a level share their depth
            self._nodes[node] = self._nodes[2 * node] + self._nodes[2 * node + 1]
            node //= 2


@gin.configurable
class PrioritizedReplay(UniformReplay):
    """`UniformReplay`'s storage and n-step assembly, sampled in proportion to priority.

    Args (after `UniformReplay`'s):
      alpha: how much priorities count, `P(i) ~ p_i^alpha` (0: uniform).
      beta: a schedule of the importance-weight exponent over environment steps (default
        `LinearSchedule(0.4, 1.0, 50_000)`); 1 corrects the sampling bias fully.
      epsilon: added to every |error|, so that no transition's priority is 0.

    A sample (`sample`, `sample_stack`) adds `weight`, the importance weights, to the batch, and
    remembers its indices; `update_priorities(errors)` with the loss's per-sample errors for that
    sample, in the same shape, writes their new priorities. Batches are drawn stratified: the
    priority mass is cut into `batch_size` equal segments and one draw falls in each.
    """

    prioritized = True

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        observation_dtype: npt.DTypeLike,
        capacity: int = 100_000,
        n_step: int = 1,
        gamma: float = 0.99,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        alpha: float = 0.6,
        beta: Callable[[int], float] | None = None,
        epsilon: float = 1e-6,
    ):
        super().__init__(
            observation_shape,
            observation_dtype,
            capacity,
            n_step,
            gamma,
            action_shape,
            action_dtype,
        )
        require_non_negative_number(self, alpha=alpha)
        require_positive_number(self, epsilon=epsilon)
        self.alpha = float(alpha)
        self.beta = beta or LinearSchedule(0.4, 1.0, 50_000)
        for where, value in bounding_values(self.beta):
            if not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"PrioritizedReplay.beta gives {value:g} at {where}: the importance-weight "
                    "exponent must stay in [0, 1] (e.g. a LinearSchedule from 0.4 to 1.0)."
                )
        self.epsilon = float(epsilon)
        self._tree = SumTree(capacity)
        self._max_priority = 1.0  # the largest |error| + epsilon seen (before alpha)
        self._environment_steps = 0  # steps added: what beta counts
        self._sampled: np.ndarray | None = None  # the last sample's indices, until written back
        # Rows written since the tree was last read or written, as (first row, count): they
        # enter it then, at the largest priority, which only changes in that write. An add
        # then costs a tuple, not numpy calls.
        self._new_rows: list[tuple[int, int]] = []

    def add(self, step: VectorStep) -> None:
        self._environment_steps += len(step.reward)
        super().add(step)

    def _write(self, observation, action, ret, discount, next_observation) -> None:
        """New transitions enter at the largest priority seen (`_enter_new_rows`)."""
        self._new_rows.append((self._cursor, len(ret)))
        super()._write(observation, action, ret, discount, next_observation)

    def _enter_new_rows(self) -> SumTree:
        """The tree, with the rows written since it was last read at the largest priority."""
        if self._new_rows:
            rows = np.concatenate([first + np.arange(count) for first, count in self._new_rows])
            self._new_rows.clear()
            self._tree.set(
                rows % self._capacity, np.full(len(rows), self._max_priority**self.alpha)
            )
        return self._tree

    def _draw(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Stratified over the last axis: draw j of a batch of B falls in the j-th of B equal
        segments of the priority mass."""
        if self._size == 0:
            raise ValueError(
                "PrioritizedReplay: cannot sample from an empty buffer; add transitions first."
            )
        tree = self._enter_new_rows()
        segments = shape[-1]
        masses = (np.arange(segments) + rng.random(shape)) * (tree.total / segments)
        return tree.find(masses)

    def _gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        batch = super()._gather(indices)
        batch["weight"] = self.importance_weights(indices)
        self._sampled = indices
        return batch

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """The sampling priorities `p_i^alpha` of transitions `indices`."""
        return self._enter_new_rows().leaves(indices)

    def importance_weights(self, indices: np.ndarray) -> np.ndarray:
        """`(N P(i))^-beta`, each batch (last axis) divided by its largest, as float32."""
        tree = self._enter_new_rows()
        probabilities = tree.leaves(indices) / tree.total
        weights = (self._size * probabilities) ** -self.beta(self._environment_steps)
        return (weights / weights.max(axis=-1, keepdims=True)).astype(np.float32)

    def update_priorities(self, errors: np.ndarray) -> None:
        """The last sample's transitions take priority `|error| + epsilon` (to the power alpha).

        A transition drawn more than once takes its last error (the later step's); a non-finite
        error (a skipped step) leaves its priority as it was.
        """
        if self._sampled is None:
            raise ValueError(
                "PrioritizedReplay.update_priorities: no sample is waiting for its errors; "
                "call it once after each sample."
            )
        errors = np.asarray(errors)
        if errors.shape != self._sampled.shape:
            raise ValueError(
                f"PrioritizedReplay.update_priorities: errors of shape {errors.shape} for a "
                f"sample of shape {self._sampled.shape}."
            )
        priorities = np.abs(errors.astype(np.float64)).ravel() + self.epsilon
        indices = self._sampled.ravel()
        self._sampled = None
        finite = np.isfinite(priorities)
        indices, priorities = indices[finite], priorities[finite]
        if not len(indices):
            return
        _, last = np.unique(indices[::-1], return_index=True)  # each index's last occurrence
        keep = len(indices) - 1 - last
        self._enter_new_rows().set(indices[keep], priorities[keep] ** self.alpha)
        self._max_priority = max(self._max_priority, float(priorities.max()))

    def state(self) -> dict[str, np.ndarray]:
        state = super().state()
        state.update(
            priority_leaves=self._enter_new_rows().leaves(np.arange(self._size)).copy(),
            max_priority=np.array(self._max_priority, np.float64),
            environment_steps=np.array(self._environment_steps, np.int64),
        )
        return state

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        missing = sorted(set(_PRIORITY_STATE) - state.keys())
        if missing:
            raise ReplayCheckpointError(
                f"Cannot load prioritized replay state: the keys {missing} are missing (a "
                "uniform replay's checkpoint?)."
            )
        leaves = np.asarray(state["priority_leaves"])
        size = int(state["size"]) if "size" in state else -1
        if leaves.shape != (size,) or leaves.dtype != np.float64 or not np.all(leaves > 0):
            raise ReplayCheckpointError(
                f"Cannot load prioritized replay state: priority_leaves is {leaves.dtype} of "
                f"shape {leaves.shape}, expected {size} positive float64 priorities."
            )
        super().load_state({k: v for k, v in state.items() if k not in _PRIORITY_STATE})
        self._new_rows.clear()
        self._tree.rebuild(leaves)
        self._max_priority = float(state["max_priority"])
        self._environment_steps = int(state["environment_steps"])
        self._sampled = None
