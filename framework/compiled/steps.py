"""The speed machinery behind a learner: k steps per compiled call, called cheaply, optimistic.

Crossing into TensorFlow costs about as much as a whole small-network step, so a learner's
call runs `k` gradient steps (`repeat`, a `tf.while_loop` over a stack of `k` batches). Its
batch crosses in as one packed array (`batch_packing.py`) and it is called through
`DirectCall` where TensorFlow's internals allow (`TracedCall`). Under XLA a branch around each
update is costly (docs/speed.md), so `StepCalls` can run a call optimistically: every step
applies, and a call in which a step was non-finite is rolled back and run again guarded. None of
this changes what a step computes: `Learner.direct_call = False` and `jit_compile = False` give
the same updates.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import tensorflow as tf
from absl import logging

from framework.compiled import direct_call, xla_cache
from framework.compiled.batch_packing import PackedBatch


def repeat(
    step: Callable[[Any, tf.Tensor, Any], tuple[Any, Any]],
    batches: Any,
    carry: Any,
    outputs_spec: Any,
) -> tuple[Any, Any]:
    """Runs `step(batch, index, carry) -> (outputs, carry)` once per batch stacked on the
    leading axis of `batches`; returns the sum of the outputs and the last carry.

    What changes from step to step (a learner's counters) travels as `carry`, written to its
    variables once per call by the caller: a variable write inside the loop costs more than a
    small step's arithmetic. `outputs_spec` gives the zeros the sum starts from.
    """
    leading = tf.nest.flatten(batches)[0]

    def step_at(index, carry):
        return step(tf.nest.map_structure(lambda x: x[index], batches), index, carry)

    if leading.shape[0] == 1:  # one step (on-policy): no loop needed
        return step_at(0, carry)

    def body(index, carry, totals):
        outputs, carry = step_at(index, carry)
        return index + 1, carry, tf.nest.map_structure(tf.add, totals, outputs)

    zeros = tf.nest.map_structure(lambda spec: tf.zeros(spec.shape, spec.dtype), outputs_spec)
    num_steps = tf.shape(leading)[0]
    _, carry, totals = tf.while_loop(lambda index, *_: index < num_steps, body, (0, carry, zeros))
    return totals, carry


class TracedCall:
    """One compiled function of a batch, traced once for `batch_spec`.

    With a spec the batch crosses as one packed array where it can, and the traced function is
    called directly (`direct_call`): `tf.function`'s dispatch and a concrete function's own
    call path cost more per call than a small network's whole step (docs/speed.md). Without a
    spec it is an ordinary `tf.function`, traced again for new shapes.
    """

    def __init__(
        self,
        function: Callable,
        batch_spec: Any | None,
        jit_compile: bool,
        use_direct_call: bool,
        steps_of: Callable[[Any, Any], int] | None = None,
    ):
        # The gradient steps a call ran, from its batches and outputs: by default one per
        # stacked batch; a learner's health counts them where a call loops inside (PPO).
        self._steps_of = steps_of or (lambda batches, outputs: len(tf.nest.flatten(batches)[0]))
        self._packing = (
            PackedBatch(batch_spec)
            if batch_spec is not None and PackedBatch.supports(batch_spec)
            else None
        )
        unpack = (lambda batch: batch) if self._packing is None else self._packing.unpack
        signature = None
        if batch_spec is not None:
            signature = [batch_spec if self._packing is None else self._packing.spec]
        self.function = tf.function(
            lambda batch: function(unpack(batch)),
            jit_compile=jit_compile,
            input_signature=signature,
            reduce_retracing=signature is None,
            # The learner calls tf.cond and tf.while_loop itself: tracing it without AutoGraph
            # saves start-up time. A loss with Python `if`/`for` over tensors gets a
            # TensorFlow error that says so; decorate it with `tf.function`, which converts it.
            autograph=False,
        )
        self._has_signature = signature is not None
        self._use_direct_call = use_direct_call
        self._call: Callable | None = None  # the traced function, once the first call traced it
        self.first_call_seconds = 0.0  # tracing and XLA included
        self.first_call_steps = 0
        self.first_call_spec: Any = None  # what crossed at the first call, shapes and all

    def __call__(self, batches: Any) -> Any:
        if not self._has_signature:
            try:
                return self.function(batches)
            except tf.errors.OpError as error:  # each new shape compiles
                _raise_cache_failure_explained(error)
        if self._packing is not None:
            batches = self._packing.pack(batches)
        if self._call is not None:
            return self._call(batches)
        start = time.perf_counter()
        self._call = traced(self.function.get_concrete_function(), self._use_direct_call)
        try:
            outputs = self._call(batches)
        except tf.errors.OpError as error:
            _raise_cache_failure_explained(error)
        self.first_call_seconds = time.perf_counter() - start
        self.first_call_steps = self._steps_of(batches, outputs)
        self.first_call_spec = tf.nest.map_structure(
            lambda x: tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)), batches
        )
        xla_cache.record_new_entries()  # the program XLA just wrote, if it compiled one
        return outputs

    def traced_at_first_call_shapes(self) -> tf.types.experimental.ConcreteFunction:
        """The same computation traced again at the shapes of the first call's batch (its spec
        leaves some open), for a reader of its graph that needs every shape
        (`experiments/op_census.py`)."""
        if self.first_call_spec is None:
            raise ValueError("TracedCall: not called yet; its batch shapes are not known.")
        function = tf.function(self.function.python_function, autograph=False)
        return function.get_concrete_function(self.first_call_spec)

    @property
    def tracing_count(self) -> int:
        return self.function.experimental_get_tracing_count()


class StepCalls:
    """A learner's training call, compiled, guarded or optimistic.

    `call(batches, optimistic)` runs the steps inside the compiled function and returns a tuple
    whose second item is the health vector, which counts the non-finite steps at
    `nonfinite_index` (the agent's `HEALTH_FIELDS` say which). An optimistic call (several steps
    under XLA) applies every step; if any was non-finite, every variable in `state_variables()`
    is put back as it was before the call and the same steps run again, each one guarded.
    """

    def __init__(
        self,
        call: Callable[[Any, bool], tuple],
        state_variables: Callable[[], Sequence[tf.Variable]],
        batch_spec: Any | None,
        jit_compile: bool,
        optimistic: bool,
        use_direct_call: bool,
        nonfinite_index: int,
        steps_index: int,
    ):
        self._nonfinite_index = nonfinite_index

        def guarded(batches):
            return call(batches, False)

        def rolled_back_if_nonfinite(batches):
            state = list(state_variables())
            saved = [tf.identity(v) for v in state]  # a copy that the steps do not touch
            outputs = call(batches, True)

            def roll_back():
                for variable, value in zip(state, saved, strict=True):
                    variable.assign(value)
                return tf.constant(True)

            tf.cond(outputs[1][nonfinite_index] > 0, roll_back, lambda: tf.constant(False))
            return outputs

        compiled = dict(
            batch_spec=batch_spec,
            jit_compile=jit_compile,
            use_direct_call=use_direct_call,
            steps_of=lambda _, outputs: int(outputs[1].numpy()[steps_index]),
        )
        self._guarded = TracedCall(guarded, **compiled)
        self._optimistic = TracedCall(rolled_back_if_nonfinite, **compiled) if optimistic else None

    def __call__(self, batches: Any) -> tuple:
        if self._optimistic is not None and len(tf.nest.flatten(batches)[0]) > 1:
            first = self._optimistic.first_call_spec is None
            outputs = self._optimistic(batches)
            if outputs[1].numpy()[self._nonfinite_index] == 0:
                return outputs
            # Rolled back: the same steps again, each one guarded; they are the steps the run
            # counts, so a rolled-back first call ran none (its seconds stay first-call time).
            if first:
                self._optimistic.first_call_steps = 0
        return self._guarded(batches)

    @property
    def traced(self) -> list[TracedCall]:
        return [call for call in (self._guarded, self._optimistic) if call is not None]


def _raise_cache_failure_explained(error: tf.errors.OpError) -> NoReturn:
    """Raises `error`, or `xla_cache.XlaCacheError` (one paragraph) where XLA's program cache
    failed the compile: its folder filled or turned read-only since the start."""
    explained = xla_cache.failure(error)
    if explained is None:
        raise error
    raise explained from error


def traced(function: tf.types.experimental.ConcreteFunction, use_direct_call: bool) -> Callable:
    """`function`, called directly (`DirectCall`) or through its ordinary call."""
    return direct_call.DirectCall(function) if use_direct_call else function


def direct_call_usable(wanted: bool) -> bool:
    """Whether to call traced functions directly: as configured, unless this TensorFlow's
    internals are not what `DirectCall` reads (then one warning a process, and the ordinary
    call)."""
    if not wanted:
        return False
    problem = direct_call.incompatibility()
    if problem:
        logging.log_first_n(
            logging.WARNING,
            "Calling compiled functions directly is off: %s The learner uses TensorFlow's "
            "ordinary call instead, with the same results and ~100-200 us more per call. "
            "Set Learner.direct_call = False to silence this.",
            1,
            problem,
        )
    return problem is None
