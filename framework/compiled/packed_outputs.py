"""What comes out of a learner's compiled call, as few tensors as possible.

Every output of a call costs its own conversion to an eager tensor on the way out, so a call
that returned each metric and each weight of the acting copy on its own paid for ~25 outputs.
The learner instead returns its metrics as one float32 vector and the acting copy's weights as
another; `FlatLayout` records, at trace time, which slice of a vector is which tensor.
Metrics then cross into Python when they are read (`PackedMetrics`, at a log step), not at
every call.
"""

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf


class FlatLayout:
    """Names and shapes of tensors laid end to end in one float32 vector."""

    def __init__(self, names: Sequence[str], shapes: Sequence[Sequence[int]]):
        self.names = list(names)
        self.shapes = [tuple(shape) for shape in shapes]
        sizes = [math.prod(shape) for shape in self.shapes]
        self._ends = np.cumsum(sizes).tolist()
        self._starts = [end - size for end, size in zip(self._ends, sizes, strict=True)]
        self._index = {name: i for i, name in enumerate(self.names)}

    @classmethod
    def flatten(cls, tensors: Mapping[str, tf.Tensor]) -> tuple["FlatLayout", tf.Tensor]:
        """Inside the call: the layout of `tensors` (static shapes) and the vector itself."""
        layout = cls(list(tensors), [tensor.shape for tensor in tensors.values()])
        return layout, layout.concat(list(tensors.values()))

    def concat(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor:
        """Inside the call: `tensors`, in this layout's order, as one float32 vector."""
        parts = [tf.reshape(tf.cast(t, tf.float32), [-1]) for t in tensors]
        return tf.concat(parts, 0) if parts else tf.zeros([0])

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def split(self, vector: np.ndarray) -> list[np.ndarray]:
        """Outside: the tensors' values, as views of `vector` in their own shapes."""
        return [self._slice(vector, i) for i in range(len(self.names))]

    def get(self, vector: np.ndarray, name: str) -> np.ndarray:
        return self._slice(vector, self._index[name])

    def _slice(self, vector: np.ndarray, i: int) -> np.ndarray:
        return vector[self._starts[i] : self._ends[i]].reshape(self.shapes[i])


class PackedMetrics(Mapping[str, Any]):
    """A call's metrics, kept as its one output vector until a value is read; `with_values`
    adds an agent's own Python numbers without reading it."""

    def __init__(
        self, vector: tf.Tensor, layout: FlatLayout, extra: Mapping[str, Any] | None = None
    ):
        self._vector = vector
        self._layout = layout
        self._extra = dict(extra or {})
        self._values: np.ndarray | None = None

    def with_values(self, extra: Mapping[str, Any]) -> "PackedMetrics":
        return PackedMetrics(self._vector, self._layout, {**self._extra, **extra})

    def __getitem__(self, name: str) -> Any:
        if name in self._extra:
            return self._extra[name]
        if name not in self._layout:
            raise KeyError(name)
        if self._values is None:
            self._values = self._vector.numpy()  # the one crossing into Python
        return self._layout.get(self._values, name)

    def __iter__(self) -> Iterator[str]:
        yield from self._layout.names
        yield from (name for name in self._extra if name not in self._layout)

    def __len__(self) -> int:
        return sum(1 for _ in self)
