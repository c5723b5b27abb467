"""Calls a traced TensorFlow function with a fraction of `ConcreteFunction.__call__`'s overhead.

A concrete function's Python call path (binding the arguments to its signature, converting
them, flattening, the runtime-error context, packing the outputs) costs more Python time than
running a small compiled program takes (docs/speed.md). An A2C
update or a DQN update trained every environment step pays that once per call, tens of thousands
of times per run. `DirectCall` does what that path ends in, TensorFlow's eager `execute` of the
function by name, with everything that does not change between calls worked out once.
It reads a few of TensorFlow's internals (the function's runtime name and captured inputs, the
eager `execute`), checked on TF 2.21: `tests/framework/compiled/test_direct_call.py` checks that it
computes what the ordinary call computes. `incompatibility()` makes the same check at start, so
that a TensorFlow whose internals moved falls back to the ordinary call (`Learner.direct_call`
turns it off by hand).
"""

import functools
import itertools

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context, execute
from tensorflow.python.framework import ops


class DirectCall:
    """A concrete function of tensor arguments (nested or not) with a fixed input signature."""

    def __init__(self, function: tf.types.experimental.ConcreteFunction):
        specs = tf.nest.flatten(function.structured_input_signature)
        if not all(isinstance(spec, tf.TensorSpec) for spec in specs):
            raise ValueError(f"DirectCall: takes tensor arguments only, got {specs}.")
        atomic = function._inference_function  # the function as the runtime knows it
        self.function = function  # also keeps the runtime's copy alive
        self._name = atomic.name.decode("utf-8")
        self._dtypes = [(spec.dtype.as_numpy_dtype, spec.dtype.as_datatype_enum) for spec in specs]
        self._captured = function._captured_inputs  # variables' handles, in the runtime's order
        self._fixed_captures = not any(callable(c) for c in self._captured)
        self._num_outputs = len(atomic.function_type.flat_outputs)
        outputs = function.structured_outputs
        if type(outputs) is tuple and all(isinstance(x, tf.Tensor) for x in outputs):
            # A flat tuple of tensors (a learner's call): `tf.nest.pack_sequence_as` would
            # cost time on every call only to give back the same tuple.
            self._pack = tuple
        else:
            self._pack = lambda flat: tf.nest.pack_sequence_as(outputs, flat)
        self._context = context.context()
        options = self._context.function_call_options.as_attrs()
        self._attrs = tuple(itertools.chain(*options.items()))

    def __call__(self, *arguments):
        """The function's outputs, in its own structure; numpy arrays become tensors here."""
        device = self._context.device_name
        inputs = [
            value
            if isinstance(value, tf.Tensor)
            else ops.EagerTensor(np.asarray(value, numpy_dtype), device, dtype)
            for value, (numpy_dtype, dtype) in zip(
                tf.nest.flatten(arguments), self._dtypes, strict=True
            )
        ]
        captured = self._captured if self._fixed_captures else self.function.captured_inputs
        outputs = execute.execute(
            self._name, self._num_outputs, [*inputs, *captured], self._attrs, self._context
        )
        return self._pack(outputs)


@functools.cache
def incompatibility() -> str | None:
    """None when `DirectCall` works on this TensorFlow; else what is wrong, in one sentence.

    Checked once a process, on a small function that reads and writes a variable, against the
    ordinary call: a TensorFlow whose internals moved fails here, at start, not in a run.
    """
    try:
        total = tf.Variable(1.0)

        @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
        def add(x):
            total.assign_add(tf.reduce_sum(x))
            return x * total, total.read_value()

        function = add.get_concrete_function()
        x = np.array([1.0, 2.0], np.float32)
        expected = [t.numpy() for t in function(x)]  # total 1 -> 4
        got = [t.numpy() for t in DirectCall(function)(x)]  # total 4 -> 7
        if not (np.array_equal(expected[0] * 7 / 4, got[0]) and got[1] == 7.0):
            return (
                f"on TensorFlow {tf.__version__} it computes something other than the ordinary "
                f"call ({got} where {expected[0] * 7 / 4} and 7.0 were due)."
            )
    except Exception as error:  # any internal that moved: the ordinary call is always there
        return (
            f"TensorFlow {tf.__version__} lacks an internal it reads ({type(error).__name__}: "
            f"{error})."
        )
    return None
