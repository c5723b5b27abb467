"""Uniform experience replay: a preallocated numpy ring buffer of n-step transitions.

n-step transitions are assembled at add time, so a sample is already `(s, a, R, discount, s')`
with `R = sum_{i<k} gamma^i r_i` and `discount = gamma^k`, or 0.0 when the window ends in a
termination: the TD target needs one formula for one-step and n-step returns alike. A
time-limit truncation still bootstraps, because the state after it has a value.

The buffer takes the N transitions of one vector-environment step at once and keeps one n-step
window per sub-environment. The sub-environments step in lockstep, so all windows share one
ring of the last n vector steps; a per-env count says how many of its newest slots are pending.
Rewards are written twice, at slots p and p + n, so any window is a contiguous slice in time
order and its return one dot product, whatever the ring's position.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gin
import numpy as np
import numpy.typing as npt

from framework.validation import require_positive, require_unit_interval

if TYPE_CHECKING:  # the module stays free of the agent's TensorFlow imports
    from framework.agent import VectorStep

_STORED = ("observation", "action", "reward", "discount", "next_observation")
_PENDING = (
    "pending_env",
    "pending_observation",
    "pending_action",
    "pending_reward",
    "pending_next_observation",
)
_SCALARS = ("capacity", "n_step", "gamma", "size", "cursor", "num_envs")


class ReplayCheckpointError(ValueError):
    """A replay state that is damaged or was taken from a differently configured buffer."""


@gin.configurable
class UniformReplay:
    """Ring buffer that overwrites its oldest transition and samples uniformly."""

    prioritized = False  # a prioritized replay wants the loss's errors back (`update_priorities`)

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        observation_dtype: npt.DTypeLike,
        capacity: int = 100_000,
        n_step: int = 1,
        gamma: float = 0.99,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
    ):
        require_positive(self, capacity=capacity, n_step=n_step)
        require_unit_interval(self, gamma=gamma)
        self._capacity = capacity
        self._n_step = n_step
        self._gamma = float(gamma)
        self._observation_shape = tuple(observation_shape)
        self._observation_dtype = np.dtype(observation_dtype)
        self._action_shape = tuple(action_shape)
        self._action_dtype = np.dtype(action_dtype)
        # np.zeros lets the OS map pages lazily, so a large unfilled buffer costs little memory.
        frames = (capacity, *self._observation_shape)
        self._observation = np.zeros(frames, self._observation_dtype)
        self._next_observation = np.zeros(frames, self._observation_dtype)
        self._action = np.zeros((capacity, *self._action_shape), self._action_dtype)
        self._reward = np.zeros(capacity, np.float32)
        self._discount = np.zeros(capacity, np.float32)
        self._cursor = 0  # where the next transition is written
        self._size = 0
        # gamma^k for a window of k steps, as Python floats raised like `gamma ** k`.
        self._gamma_power = np.array([self._gamma**k for k in range(n_step + 1)])
        self._window_weight = self._gamma_power[:n_step]  # gamma^i for the i-th step of a window
        self._allocate_windows(0)

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return self._size

    def add(self, step: VectorStep) -> None:
        """Records one vector step; stores each env's n-step transitions once its window closes.

        Transitions are written in env order, each env's oldest start first.
        """
        if step.reward.shape != self._env_shape:
            self._set_num_envs(step.reward.shape)
        if (
            step.observation.shape != self._observation_batch
            or step.next_observation.shape != self._observation_batch
            or step.action.shape != self._action_batch
            or step.terminated.shape != self._env_shape
            or step.truncated.shape != self._env_shape
        ):
            self._reject_shapes(step)
        n = self._n_step
        if n == 1:
            # Each window is its own step: nothing is pending, and a truncation bootstraps
            # like any other step, so the step goes straight into storage.
            terminated = np.count_nonzero(step.terminated)
            self._write(
                step.observation,
                step.action,
                step.reward,
                np.where(step.terminated, 0.0, self._gamma) if terminated else self._full_discount,
                step.next_observation,
            )
            return
        p = self._head
        self._head = start = (p + 1) % n
        self._ring_observation[p] = step.observation
        self._ring_action[p] = step.action
        self._ring_reward[p] = self._ring_reward[p + n] = step.reward
        self._ring_next_observation[p] = step.next_observation
        if self._steady and not (
            np.count_nonzero(step.terminated) or np.count_nonzero(step.truncated)
        ):
            # The common case: every window is full and none ends, so each env stores the
            # start in the slot after p, which is its oldest.
            self._write(
                self._ring_observation[start],
                self._ring_action[start],
                np.dot(self._window_weight, self._ring_reward[start : start + n]),
                self._full_discount,
                self._ring_next_observation[p],
            )
            return
        count = self._count + 1
        terminated = np.asarray(step.terminated, bool)
        done = terminated | np.asarray(step.truncated, bool)
        # A done env stores all its pending starts (shortened windows), a full one its oldest.
        self._store_windows(p, count, np.where(done, count, count == self._n_step), terminated)
        self._set_count(np.where(done, 0, np.minimum(count, self._n_step - 1)))

    def end_episodes(self) -> None:
        """Stores every env's pending steps as truncated, each bootstrapping from the last
        observation seen: the episodes were cut off without a done (e.g. a resume)."""
        if not self._count.any():
            return
        newest = (self._head - 1) % self._n_step
        self._store_windows(newest, self._count, self._count, np.zeros_like(self._count, bool))
        self._set_count(np.zeros_like(self._count))

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A batch of `batch_size` transitions drawn uniformly with replacement."""
        require_positive(self, batch_size=batch_size)
        return self._gather(self._draw((batch_size,), rng))

    def sample_stack(
        self, num_batches: int, batch_size: int, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """`num_batches` batches at once, arrays shaped [num_batches, batch_size, ...].

        Feeds a learner that runs several gradient steps in one compiled call; the indices come
        from one rng call, so this is as fast as a single large batch.
        """
        require_positive(self, num_batches=num_batches, batch_size=batch_size)
        return self._gather(self._draw((num_batches, batch_size), rng))

    def state(self) -> dict[str, np.ndarray]:
        """Everything a restart needs, as numpy arrays that the checkpoint store writes.

        The arrays are copies, so a state written in the background is one instant's. Pending
        steps are flat rows grouped by `pending_env` (ascending), each env's oldest first.
        """
        state = {name: array[: self._size].copy() for name, array in self._stored().items()}
        state.update(
            capacity=np.array(self._capacity, np.int64),
            n_step=np.array(self._n_step, np.int64),
            gamma=np.array(self._gamma, np.float64),
            size=np.array(self._size, np.int64),
            cursor=np.array(self._cursor, np.int64),
            num_envs=np.array(self._num_envs, np.int64),
        )
        newest = (self._head - 1) % self._n_step
        slot, env = self._window_rows(newest, self._count, self._count)
        state.update(
            pending_env=env,
            pending_observation=self._ring_observation[slot, env],
            pending_action=self._ring_action[slot, env],
            pending_reward=self._ring_reward[slot, env],
            pending_next_observation=self._ring_next_observation[slot, env],
        )
        return state

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Takes back what `state()` gave, so the run continues as if it had never stopped.

        The state is checked completely before anything changes, so a failed load leaves this
        buffer as it was.
        """
        problem = self._mismatch(state)
        if problem:
            raise ReplayCheckpointError(
                f"Cannot load replay state: {problem}; it was taken from a differently "
                "configured buffer or is damaged."
            )
        self._size, self._cursor = int(state["size"]), int(state["cursor"])
        for name, array in self._stored().items():
            array[: self._size] = state[name]
        num_envs = int(state["num_envs"])
        self._allocate_windows(num_envs)
        env = state["pending_env"]
        count = np.bincount(env, minlength=num_envs)
        # Each env's pending steps fill the newest slots, ending at slot n - 1 (head 0).
        n = self._n_step
        slot = n - count[env] + np.arange(len(env)) - (np.cumsum(count) - count)[env]
        self._ring_observation[slot, env] = state["pending_observation"]
        self._ring_action[slot, env] = state["pending_action"]
        self._ring_reward[slot, env] = self._ring_reward[slot + n, env] = state["pending_reward"]
        self._ring_next_observation[slot, env] = state["pending_next_observation"]
        self._set_count(count)

    def _allocate_windows(self, num_envs: int) -> None:
        """Empty n-step windows for `num_envs` sub-environments (0: not known yet)."""
        n = self._n_step
        self._num_envs = num_envs
        self._env_shape = (num_envs,) if num_envs else None
        self._observation_batch = (num_envs, *self._observation_shape)
        self._action_batch = (num_envs, *self._action_shape)
        frames = (n, num_envs, *self._observation_shape)
        self._ring_observation = np.zeros(frames, self._observation_dtype)
        self._ring_next_observation = np.zeros(frames, self._observation_dtype)
        self._ring_action = np.zeros((n, num_envs, *self._action_shape), self._action_dtype)
        self._ring_reward = np.zeros((2 * n, num_envs), np.float64)
        self._full_discount = np.full(num_envs, self._gamma_power[n])
        self._head = 0  # the ring slot the next step is written to
        self._set_count(np.zeros(num_envs, np.int64))

    def _set_num_envs(self, shape: tuple[int, ...]) -> None:
        """Learns N from the first add; a later batch of another size is a caller's bug."""
        name = type(self).__name__
        if len(shape) != 1 or shape[0] < 1:
            raise ValueError(f"{name}: reward must have shape [N] with N >= 1, got {shape}.")
        if self._num_envs:
            raise ValueError(
                f"{name}: this step has {shape[0]} environments, but earlier steps had "
                f"{self._num_envs}; every step must come from the same vector environment."
            )
        self._allocate_windows(shape[0])

    def _reject_shapes(self, step: VectorStep) -> None:
        expected = {
            "observation": self._observation_batch,
            "next_observation": self._observation_batch,
            "action": self._action_batch,
            "terminated": self._env_shape,
            "truncated": self._env_shape,
        }
        for name, shape in expected.items():
            actual = getattr(step, name).shape
            if actual != shape:
                raise ValueError(
                    f"{type(self).__name__}: {name} has shape {actual}, expected {shape}."
                )

    def _set_count(self, count: np.ndarray) -> None:
        """Per-env pending steps; `_steady` marks the fast path where every window is full."""
        self._count = count
        self._steady = bool((count == self._n_step - 1).all())

    def _window_rows(
        self, newest: int, count: np.ndarray, take: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ring slots and env indices of the `take[e]` oldest of env e's `count[e]` pending
        steps (the newest in slot `newest`), in env order and oldest first."""
        env = np.repeat(np.arange(len(count)), take)
        first = np.cumsum(take) - take  # each env's first row
        age = np.repeat(count - 1 + first, take) - np.arange(len(env))
        return (newest - age) % self._n_step, env

    def _store_windows(
        self, newest: int, count: np.ndarray, take: np.ndarray, terminated: np.ndarray
    ) -> None:
        """Stores the transitions from the `take[e]` oldest pending starts of each env e to its
        newest step: discount 0 after a termination, else gamma^(window length)."""
        n = self._n_step
        slot, env = self._window_rows(newest, count, take)
        length = (newest - slot) % n + 1
        offset = np.arange(n)
        # Each row's window in time order, zero past its end: R = sum_i gamma^i r_i.
        rewards = self._ring_reward[slot[:, None] + offset, env[:, None]]
        rewards[offset >= length[:, None]] = 0.0
        self._write(
            self._ring_observation[slot, env],
            self._ring_action[slot, env],
            rewards @ self._window_weight,
            np.where(terminated[env], 0.0, self._gamma_power[length]),
            self._ring_next_observation[newest, env],
        )

    def _write(
        self,
        observation: np.ndarray,
        action: np.ndarray,
        ret: np.ndarray,
        discount: np.ndarray,
        next_observation: np.ndarray,
    ) -> None:
        """Writes aligned rows at the cursor; rows past the end wrap around to the start."""
        c = self._cursor
        room = self._capacity - c
        if len(ret) > room:
            rows = (observation, action, ret, discount, next_observation)
            self._write(*(r[:room] for r in rows))
            self._write(*(r[room:] for r in rows))
            return
        end = c + len(ret)
        self._observation[c:end] = observation
        self._action[c:end] = action
        self._reward[c:end] = ret
        self._discount[c:end] = discount
        self._next_observation[c:end] = next_observation
        self._cursor = end % self._capacity
        if self._size < end:
            self._size = end

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

    def _mismatch(self, state: dict[str, np.ndarray]) -> str | None:
        """What makes `state` unfit for this buffer, or None if it fits."""
        missing = sorted({*_STORED, *_PENDING, *_SCALARS} - state.keys())
        unknown = sorted(state.keys() - {*_STORED, *_PENDING, *_SCALARS})
        if missing or unknown:
            return f"the keys {missing} are missing and {unknown} unknown"
        for name, value in state.items():
            if not isinstance(value, np.ndarray):
                return f"{name} is a {type(value).__name__}, not a numpy array"
        for name in _SCALARS:
            kind = "f" if name == "gamma" else "i"
            if state[name].shape != () or state[name].dtype.kind != kind:
                return f"{name} is {state[name].dtype}{list(state[name].shape)}, not a 0-d scalar"
        for name, mine in (
            ("capacity", self._capacity),
            ("n_step", self._n_step),
            ("gamma", self._gamma),
        ):
            if state[name].item() != mine:
                return f"{name} is {state[name].item()} in the state but {mine} in this buffer"
        size, cursor, num_envs = (int(state[k]) for k in ("size", "cursor", "num_envs"))
        if num_envs < 0:
            return f"num_envs is {num_envs}"
        # Until the buffer is full the cursor is the size; afterwards it can be anywhere.
        if not 0 <= size <= self._capacity or not (
            cursor == size if size < self._capacity else 0 <= cursor < self._capacity
        ):
            return f"size {size} and cursor {cursor} are inconsistent"
        env = state["pending_env"]
        if env.ndim != 1 or env.dtype.kind not in "iu":
            return f"pending_env is {env.dtype}{list(env.shape)}, not a 1-d integer array"
        if len(env) and (env.min() < 0 or env.max() >= num_envs or (np.diff(env) < 0).any()):
            return f"pending_env must be ascending env indices below num_envs {num_envs}"
        longest = np.bincount(env).max(initial=0)
        if longest >= self._n_step:
            return (
                f"a pending window holds {longest} steps (env {np.bincount(env).argmax()}), but "
                f"at most n_step - 1 = {self._n_step - 1} are allowed"
            )
        frames, actions = self._observation_shape, self._action_shape
        obs_dtype, action_dtype = self._observation_dtype, self._action_dtype
        expected = {  # name: (rows, row shape, dtype)
            "observation": (size, frames, obs_dtype),
            "next_observation": (size, frames, obs_dtype),
            "action": (size, actions, action_dtype),
            "reward": (size, (), np.float32),
            "discount": (size, (), np.float32),
            "pending_observation": (len(env), frames, obs_dtype),
            "pending_next_observation": (len(env), frames, obs_dtype),
            "pending_action": (len(env), actions, action_dtype),
            "pending_reward": (len(env), (), np.float64),
        }
        for name, (rows, row_shape, dtype) in expected.items():
            array = state[name]
            if array.ndim == 0 or array.shape[1:] != row_shape or array.dtype != dtype:
                return (
                    f"{name} is {array.dtype} of shape {array.shape} in the state, but this "
                    f"buffer stores {np.dtype(dtype)} rows of shape {row_shape} (observation "
                    f"shape {frames}, action shape {actions})"
                )
            if len(array) != rows:
                return f"{name} has {len(array)} rows in the state, but the state implies {rows}"
        return None


_FRAME_STATE = ("frame_count", "frames", "frame_last_observation", "frame_last_ids")


@gin.configurable
class FrameReplay(UniformReplay):
    """Replay for stacked frames (Atari) that stores each frame once.

    An observation is a channels-last stack `[H, W, S]` of the last S frames, as
    `make_atari_env` emits: consecutive observations share S - 1 frames, and an observation and
    its next one are stored today as 2 S frames. Here a frame ring holds every frame once, and
    the transitions (with the same n-step assembly as `UniformReplay`, which this reuses) hold
    `[S]` frame numbers instead of stacks; a sample gathers the frames back into stacks.

    Nothing is assumed about episode boundaries or padding: an env's observation that equals
    its previous next observation reuses its frame numbers, and a next observation whose first
    S - 1 frames are its observation's last S - 1 adds one frame; any other stack (a reset,
    padded the way the frame-stack wrapper pads it) is stored frame by frame, a frame equal to
    the one before it in the stack stored once.

    The frame ring holds `frame_capacity` frames (default: `capacity` + a quarter, room for the
    extra frames of episode starts). A transition whose oldest frame was overwritten (possible
    only with episodes of a few steps) is not sampled; `__len__` still counts it.

    Memory at 80x80x4 uint8 (Pong): 1.25 x 6,400 B of frames + 80 B of frame numbers, action,
    return and discount, ~8.1 KB a transition against 51.2 KB as full stacks (16%).
    """

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        observation_dtype: npt.DTypeLike,
        capacity: int = 100_000,
        n_step: int = 1,
        gamma: float = 0.99,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        frame_capacity: int | None = None,
    ):
        if len(observation_shape) < 2:
            raise ValueError(
                f"FrameReplay: observations must be stacks of frames [..., stack], got shape "
                f"{tuple(observation_shape)}; use UniformReplay for flat observations."
            )
        self._stack = int(observation_shape[-1])
        super().__init__(
            (self._stack,), np.int64, capacity, n_step, gamma, action_shape, action_dtype
        )
        self._frame_capacity = frame_capacity or capacity + capacity // 4 + 4 * self._stack
        require_positive(self, frame_capacity=self._frame_capacity)
        self._stack_shape = tuple(observation_shape)
        self._frame_dtype = np.dtype(observation_dtype)
        self._frames = np.zeros(
            (self._frame_capacity, *self._stack_shape[:-1]), self._frame_dtype
        )  # lazily mapped by the OS, as above
        self._frame_count = 0  # frames written so far; frame f lives at f % frame_capacity
        self._last_observation: np.ndarray | None = None  # [N, H, W, S]: each env's last next
        self._last_ids: np.ndarray | None = None  # [N, S]: its frame numbers

    def add(self, step: VectorStep) -> None:
        observation, next_observation = step.observation, step.next_observation
        expected = (len(step.reward), *self._stack_shape)
        if observation.shape != expected or next_observation.shape != expected:
            raise ValueError(
                f"FrameReplay: observations have shapes {observation.shape} and "
                f"{next_observation.shape}, expected {expected}."
            )
        num_envs = len(observation)
        if self._last_observation is None or len(self._last_observation) != num_envs:
            self._last_observation = np.zeros_like(observation)
            self._last_ids = np.full((num_envs, self._stack), -1, np.int64)
        ids = np.empty((num_envs, self._stack), np.int64)
        next_ids = np.empty_like(ids)
        flat = (num_envs, -1)
        continues = (self._last_ids[:, 0] >= 0) & (
            observation.reshape(flat) == self._last_observation.reshape(flat)
        ).all(axis=1)
        shifted = (
            next_observation[..., :-1].reshape(flat) == observation[..., 1:].reshape(flat)
        ).all(axis=1)
        for env in range(num_envs):
            if continues[env]:
                ids[env] = self._last_ids[env]
            else:
                ids[env] = self._store_stack(observation[env])
            if shifted[env]:
                next_ids[env, :-1] = ids[env, 1:]
                next_ids[env, -1] = self._store_frames(next_observation[env, ..., -1][None])[0]
            else:
                next_ids[env] = self._store_stack(next_observation[env])
        self._last_observation[:] = next_observation
        self._last_ids = next_ids
        super().add(step._replace(observation=ids, next_observation=next_ids))

    def _store_stack(self, stack: np.ndarray) -> np.ndarray:
        """Frame numbers `[S]` of one observation stored frame by frame (repeats once)."""
        frames = np.moveaxis(stack, -1, 0)  # [S, H, W]
        new = np.ones(self._stack, bool)
        new[1:] = (frames[1:] != frames[:-1]).reshape(self._stack - 1, -1).any(axis=1)
        stored = self._store_frames(frames[new])
        return stored[np.cumsum(new) - 1]

    def _store_frames(self, frames: np.ndarray) -> np.ndarray:
        first = self._frame_count
        ids = np.arange(first, first + len(frames))
        self._frames[ids % self._frame_capacity] = frames
        self._frame_count += len(frames)
        return ids

    def _draw(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        indices = super()._draw(shape, rng)
        oldest = self._frame_count - self._frame_capacity  # frames before it are overwritten
        if oldest <= 0:
            return indices
        for _ in range(10):  # redraw the rare transitions whose frames are gone
            stale = self._observation[indices].min(axis=-1) < oldest
            if not stale.any():
                return indices
            indices[stale] = rng.integers(0, self._size, size=int(stale.sum()))
        valid = np.flatnonzero(self._observation[: self._size].min(axis=-1) >= oldest)
        if not len(valid):
            raise ValueError(
                "FrameReplay: every stored transition refers to overwritten frames; raise "
                "frame_capacity."
            )
        stale = self._observation[indices].min(axis=-1) < oldest
        indices[stale] = rng.choice(valid, size=int(stale.sum()))
        return indices

    def _gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        batch = super()._gather(indices)
        for name in ("observation", "next_observation"):
            batch[name] = self._stacks(batch[name])
        return batch

    def _stacks(self, ids: np.ndarray) -> np.ndarray:
        """Frame numbers `[..., S]` -> channels-last stacks `[..., H, W, S]`."""
        frames = self._frames[ids % self._frame_capacity]  # [..., S, H, W]
        packed = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(self._stack)
        if self._frame_dtype != np.uint8 or packed is None or not np.little_endian:
            return np.ascontiguousarray(np.moveaxis(frames, -3, -1))
        # Moving the stack axis last is a strided copy, much slower than packing the S bytes of
        # a pixel into one integer whose bytes are, little-endian, the stack in order.
        words = frames[..., 0, :, :].astype(packed)
        for s in range(1, self._stack):
            words |= frames[..., s, :, :].astype(packed) << packed(8 * s)
        return words[..., None].view(np.uint8)  # [..., H, W, S]

    def state(self) -> dict[str, np.ndarray]:
        state = super().state()
        stored = min(self._frame_count, self._frame_capacity)
        state.update(
            frame_count=np.array(self._frame_count, np.int64),
            frames=self._frames[:stored].copy(),
            frame_last_observation=(
                np.zeros((0, *self._stack_shape), self._frame_dtype)
                if self._last_observation is None
                else self._last_observation.copy()
            ),
            frame_last_ids=(
                np.zeros((0, self._stack), np.int64)
                if self._last_ids is None
                else self._last_ids.copy()
            ),
        )
        return state

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        missing = sorted(set(_FRAME_STATE) - state.keys())
        if missing:
            raise ReplayCheckpointError(
                f"Cannot load replay state: the keys {missing} are missing."
            )
        count, frames = int(state["frame_count"]), state["frames"]
        if frames.shape != (min(count, self._frame_capacity), *self._stack_shape[:-1]) or (
            frames.dtype != self._frame_dtype
        ):
            raise ReplayCheckpointError(
                f"Cannot load replay state: frames are {frames.dtype}{list(frames.shape)} for "
                f"{count} frames written; this buffer holds {self._frame_capacity} frames of "
                f"shape {self._stack_shape[:-1]} ({self._frame_dtype})."
            )
        super().load_state({k: v for k, v in state.items() if k not in _FRAME_STATE})
        self._frame_count = count
        self._frames[: len(frames)] = frames
        last = state["frame_last_observation"]
        self._last_observation = last.copy() if len(last) else None
        self._last_ids = state["frame_last_ids"].copy() if len(last) else None
