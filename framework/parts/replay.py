"""Uniform experience replay: a preallocated numpy ring buffer of n-step transitions.

n-step transitions are assembled at add time, so a sample is already `(s, a, R, discount, s')`
with `R = sum_{i<k} gamma^i r_i` and `discount = gamma^k`, or 0.0 when the window ends in a
termination: the TD target needs one formula for one-step and n-step returns alike. A
time-limit truncation still bootstraps, because the state after it has a value.
"""

import collections
import os
import zipfile
from typing import NamedTuple

import gin
import numpy as np
import numpy.typing as npt

_PENDING = ("pending_observation", "pending_action", "pending_reward", "pending_next_observation")
_SCALARS = ("capacity", "n_step", "gamma", "size", "cursor")
# What a damaged or foreign file raises while numpy reads it.
_UNREADABLE = (OSError, EOFError, ValueError, TypeError, KeyError, zipfile.BadZipFile)


class ReplayCheckpointError(ValueError):
    """A replay checkpoint that is missing, damaged, or saved by a differently shaped buffer."""


class _Step(NamedTuple):
    """One environment step waiting in the n-step window."""

    observation: np.ndarray
    action: np.generic
    reward: float
    next_observation: np.ndarray


@gin.configurable
class UniformReplay:
    """Ring buffer that overwrites its oldest transition and samples uniformly."""

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        observation_dtype: npt.DTypeLike,
        capacity: int = 100_000,
        n_step: int = 1,
        gamma: float = 0.99,
        action_dtype: npt.DTypeLike = np.int64,
    ):
        _require_positive(self, "capacity", capacity)
        _require_positive(self, "n_step", n_step)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"{type(self).__name__}: gamma must be in [0, 1], got {gamma}.")
        self._capacity = capacity
        self._n_step = n_step
        self._gamma = float(gamma)
        self._observation_shape = tuple(observation_shape)
        self._observation_dtype = np.dtype(observation_dtype)
        self._action_dtype = np.dtype(action_dtype)
        # np.zeros lets the OS map pages lazily, so a large unfilled buffer costs little memory.
        frames = (capacity, *self._observation_shape)
        self._observation = np.zeros(frames, self._observation_dtype)
        self._next_observation = np.zeros(frames, self._observation_dtype)
        self._action = np.zeros(capacity, self._action_dtype)
        self._reward = np.zeros(capacity, np.float32)
        self._discount = np.zeros(capacity, np.float32)
        self._cursor = 0  # where the next transition is written
        self._size = 0
        self._pending: collections.deque[_Step] = collections.deque()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return self._size

    def add(
        self,
        observation: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: float,
        next_observation: npt.ArrayLike,
        terminated: bool,
        truncated: bool,
    ) -> None:
        """Records one environment step; stores each n-step transition once its window closes."""
        self._pending.append(
            _Step(
                self._as_observation(observation, "observation"),
                self._action_dtype.type(action),
                float(reward),
                self._as_observation(next_observation, "next_observation"),
            )
        )
        if terminated or truncated:
            # The episode is over: every pending start gets a shortened window, and none of
            # them may leak into the next episode.
            while self._pending:
                self._store_oldest(terminated)
        elif len(self._pending) == self._n_step:
            self._store_oldest(terminated=False)

    def end_episode(self) -> None:
        """Stores the pending steps of an episode that was cut off (not ended by the env) as
        truncated: each bootstraps from the last observation seen."""
        while self._pending:
            self._store_oldest(terminated=False)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A batch of `batch_size` transitions drawn uniformly with replacement."""
        _require_positive(self, "batch_size", batch_size)
        return self._gather(self._draw((batch_size,), rng))

    def sample_stack(
        self, num_batches: int, batch_size: int, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """`num_batches` batches at once, arrays shaped [num_batches, batch_size, ...].

        Feeds a learner that runs several gradient steps in one compiled call; the indices come
        from one rng call, so this is as fast as a single large batch.
        """
        _require_positive(self, "num_batches", num_batches)
        _require_positive(self, "batch_size", batch_size)
        return self._gather(self._draw((num_batches, batch_size), rng))

    def save(self, path: str) -> None:
        """Writes the contents to `path` atomically: a crash leaves the old file or none."""
        pending = list(self._pending)
        shape, obs_dtype = self._observation_shape, self._observation_dtype
        arrays = {name: array[: self._size] for name, array in self._stored().items()}
        arrays.update(
            capacity=np.int64(self._capacity),
            n_step=np.int64(self._n_step),
            gamma=np.float64(self._gamma),
            size=np.int64(self._size),
            cursor=np.int64(self._cursor),
            pending_observation=_stack([s.observation for s in pending], shape, obs_dtype),
            pending_action=_stack([s.action for s in pending], (), self._action_dtype),
            pending_reward=_stack([s.reward for s in pending], (), np.float64),
            pending_next_observation=_stack(
                [s.next_observation for s in pending], shape, obs_dtype
            ),
        )
        tmp_path = path + ".tmp"
        with open(tmp_path, "wb") as f:  # a file handle, so numpy appends no ".npz"
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)

    def load(self, path: str) -> None:
        """Restores what `save` wrote, so the run continues as if it had never stopped.

        The file is checked completely before anything changes, so a failed load leaves this
        buffer as it was.
        """
        try:
            with np.load(path, allow_pickle=False) as data:
                saved = {key: data[key] for key in (*self._stored(), *_PENDING, *_SCALARS)}
                scalars = {key: saved[key].item() for key in _SCALARS}
        except _UNREADABLE as err:
            raise ReplayCheckpointError(
                f"Cannot load replay checkpoint {path!r}: the file is missing, damaged or not a "
                f"replay checkpoint ({type(err).__name__}: {err})."
            ) from err
        problem = self._mismatch(saved, scalars)
        if problem:
            raise ReplayCheckpointError(
                f"Cannot load replay checkpoint {path!r}: {problem}; it was saved by a "
                "differently configured buffer or is damaged."
            )
        self._size, self._cursor = scalars["size"], scalars["cursor"]
        for name, array in self._stored().items():
            array[: self._size] = saved[name]
        self._pending = collections.deque(
            _Step(obs, action, float(reward), next_obs)
            for obs, action, reward, next_obs in zip(*(saved[key] for key in _PENDING), strict=True)
        )

    def _store_oldest(self, terminated: bool) -> None:
        """Stores the transition from the oldest pending step to the newest, then drops it."""
        window = self._pending
        ret = sum(self._gamma**i * step.reward for i, step in enumerate(window))
        discount = 0.0 if terminated else self._gamma ** len(window)
        i = self._cursor
        self._observation[i] = window[0].observation
        self._action[i] = window[0].action
        self._reward[i] = ret
        self._discount[i] = discount
        self._next_observation[i] = window[-1].next_observation
        self._cursor = (i + 1) % self._capacity
        self._size = min(self._size + 1, self._capacity)
        window.popleft()

    def _as_observation(self, value: npt.ArrayLike, name: str) -> np.ndarray:
        """A private copy in the storage dtype, so a caller reusing its array changes nothing."""
        array = np.array(value, dtype=self._observation_dtype)
        if array.shape != self._observation_shape:
            raise ValueError(
                f"{type(self).__name__}: {name} has shape {array.shape}, expected "
                f"{self._observation_shape}."
            )
        return array

    def _stored(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._observation,
            "action": self._action,
            "reward": self._reward,
            "discount": self._discount,
            "next_observation": self._next_observation,
        }

    def _draw(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if self._size == 0:
            raise ValueError(
                f"{type(self).__name__}: cannot sample from an empty buffer; add transitions first."
            )
        return rng.integers(0, self._size, size=shape)

    def _gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {name: array[indices] for name, array in self._stored().items()}

    def _mismatch(self, saved: dict[str, np.ndarray], scalars: dict[str, object]) -> str | None:
        """What makes a saved checkpoint unfit for this buffer, or None if it fits."""
        for name, mine in (
            ("capacity", self._capacity),
            ("n_step", self._n_step),
            ("gamma", self._gamma),
        ):
            if scalars[name] != mine:
                return f"{name} is {scalars[name]} in the file but {mine} in this buffer"
        size, cursor = scalars["size"], scalars["cursor"]
        # Until the buffer is full the cursor is the size; afterwards it can be anywhere.
        if not 0 <= size <= self._capacity or not (
            cursor == size if size < self._capacity else 0 <= cursor < self._capacity
        ):
            return f"size {size} and cursor {cursor} are inconsistent"
        pending = len(saved["pending_action"])
        if pending >= self._n_step:
            return f"the pending window holds {pending} steps, at most n_step - 1 are allowed"
        frames, obs_dtype = self._observation_shape, self._observation_dtype
        expected = {
            "observation": ((size, *frames), obs_dtype),
            "next_observation": ((size, *frames), obs_dtype),
            "action": ((size,), self._action_dtype),
            "reward": ((size,), np.float32),
            "discount": ((size,), np.float32),
            "pending_observation": ((pending, *frames), obs_dtype),
            "pending_next_observation": ((pending, *frames), obs_dtype),
            "pending_action": ((pending,), self._action_dtype),
            "pending_reward": ((pending,), np.float64),
        }
        for name, (shape, dtype) in expected.items():
            array = saved[name]
            if array.shape != shape or array.dtype != dtype:
                return (
                    f"{name} is {array.dtype}{list(array.shape)} in the file but this buffer "
                    f"expects {np.dtype(dtype)}{list(shape)}"
                )
        return None


def _require_positive(owner: object, name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{type(owner).__name__}: {name} must be >= 1, got {value}.")


def _stack(values: list, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
    """Stacks per-step values, keeping the step shape even when there are none."""
    return np.array(values, dtype=dtype).reshape((len(values), *shape))
