"""A learner's batch as one float32 array: binding each argument of a compiled call costs about as
much as a small network's step (docs/speed.md), so a batch of five arrays crosses into
TensorFlow as one.

The arrays of a batch share their leading axes (e.g. `[steps, batch]`); the rest of each array is
flattened onto one last axis, cast to float32, and the arrays are concatenated there. Inside the
compiled call `unpack` splits, reshapes and casts them back. Integers travel exactly as float32
below 2**24 (actions, indices); `pack` refuses larger ones. Observations of other types (uint8
frames) are not packed: float32 would carry 4 bytes where 1 will do.
"""

import math

import numpy as np
import tensorflow as tf

_PACKABLE = (tf.float32, tf.int32, tf.int64)
_EXACT_INTEGERS = 2**24  # float32 carries every integer below this exactly


class PackedBatch:
    """Packs batches that match `spec` (name -> `tf.TensorSpec`, leading axes first)."""

    def __init__(self, spec: dict[str, tf.TensorSpec]):
        if not self.supports(spec):
            raise ValueError(f"PackedBatch: cannot pack a batch of {spec}; see `supports`.")
        self._names = list(spec)
        self._leading_rank = _leading_rank(spec)
        first = spec[self._names[0]].shape[: self._leading_rank]
        self._trailing = {name: spec[name].shape[self._leading_rank :] for name in self._names}
        self._widths = [max(1, math.prod(self._trailing[name])) for name in self._names]
        self._dtypes = {name: spec[name].dtype for name in self._names}
        self.spec = tf.TensorSpec([*first, sum(self._widths)], tf.float32)

    @staticmethod
    def supports(spec: dict[str, tf.TensorSpec]) -> bool:
        """Float32 and integer arrays of known trailing shape, sharing their leading axes."""
        if not spec or any(s.dtype not in _PACKABLE for s in spec.values()):
            return False
        rank = _leading_rank(spec)
        leading = {tuple(s.shape[:rank].as_list()) for s in spec.values()}
        return len(leading) == 1 and all(s.shape[rank:].is_fully_defined() for s in spec.values())

    def pack(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """`batch` as one float32 array `[*leading, total width]`."""
        leading = np.shape(batch[self._names[0]])[: self._leading_rank]
        columns = []
        for name, width in zip(self._names, self._widths, strict=True):
            array = np.asarray(batch[name])
            expected = (*leading, *self._trailing[name].as_list())
            if array.shape != expected:  # a reshape would scramble it silently
                raise ValueError(
                    f"The batch's field {name!r} has shape {array.shape}; expected {expected}, "
                    f"as its spec and the leading axes of {self._names[0]!r} say."
                )
            integer = self._dtypes[name].is_integer
            if integer and array.size and np.abs(array).max() >= _EXACT_INTEGERS:
                raise ValueError(
                    f"The batch's integer field {name!r} holds a value of magnitude >= 2**24, "
                    "which float32 packing would round; integers in a learner's batch must stay "
                    "below that."
                )
            columns.append(array.reshape(*leading, width).astype(np.float32, copy=False))
        return np.concatenate(columns, axis=-1)

    def unpack(self, packed: tf.Tensor) -> dict[str, tf.Tensor]:
        """Inside the compiled call: the batch's arrays, in their own shapes and types."""
        leading = tf.shape(packed)[: self._leading_rank]
        batch = {}
        for name, column in zip(self._names, tf.split(packed, self._widths, axis=-1), strict=True):
            shape = tf.concat([leading, tf.constant(self._trailing[name].as_list(), tf.int32)], 0)
            batch[name] = tf.cast(tf.reshape(column, shape), self._dtypes[name])
        return batch


def _leading_rank(spec: dict[str, tf.TensorSpec]) -> int:
    """The axes every array has: the rank of the lowest-rank array."""
    return min(s.shape.rank for s in spec.values())
