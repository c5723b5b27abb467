"""Gradient processors: what happens to gradients between `tape.gradient` and the optimizer.

A processor maps `(grads, variables) -> (grads, apply_now, metrics)`. `apply_now` is a scalar
bool tensor: the learner applies the returned gradients only when it is true, which lets a
processor accumulate over several calls. Processors are `tf.Module`s so that any state they keep
(accumulators) is checkpointed with the learner. Agents never clip or accumulate by hand.
"""

from collections.abc import Sequence

import gin
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from framework.validation import require_positive, require_positive_number

Gradients = list[tf.Tensor]
Metrics = dict[str, tf.Tensor]


# The name scope of `global_norm`'s ops: its products are sums in disguise, which a count of
# a step's arithmetic (experiments/op_census.py) leaves out.
GLOBAL_NORM_SCOPE = "global_norm"


def global_norm(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """The square root of the sum of every element's square, as `tf.linalg.global_norm`.

    Traced for XLA, each tensor's squares are summed by a product with a vector of ones: XLA's
    CPU backend compiles a full sum into a slow split reduction (a 256x256 gradient's took
    ~50 us of a ~450 us DQN step) and a matrix-vector product into its fast kernel. TensorFlow's
    own kernels sum faster than they multiply, so elsewhere it is `tf.linalg.global_norm`
    (docs/speed.md). A non-finite element, or a square that overflows, makes either non-finite.
    """
    with tf.name_scope(GLOBAL_NORM_SCOPE):
        if not _traced_for_xla():
            return tf.linalg.global_norm(tensors)
        sums = []
        for tensor in tensors:
            squares = tf.square(tf.convert_to_tensor(tensor))
            if squares.shape.rank == 0:
                sums.append(squares)
                continue
            rows = tf.reshape(squares, [-1, squares.shape[-1]])
            sums.append(tf.reduce_sum(tf.linalg.matvec(rows, tf.ones_like(rows[0]))))
        return tf.sqrt(tf.add_n(sums))


def _traced_for_xla() -> bool:
    """Whether the graph being traced is compiled by XLA (a `jit_compile` function's body), by
    TensorFlow's own test, which its XLA-aware ops use (a test of the census fails if it
    changes)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


class GradientProcessor(tf.Module):
    """Base: `build` creates any state before tracing; `__call__` processes one step.

    `metric_names` lists the keys of the metrics dict `__call__` returns, so the learner can
    report zeros for a step it skips without calling the processor.
    """

    metric_names: tuple[str, ...] = ()

    def build(self, variables: Sequence[tf.Variable]) -> None:
        del variables

    def __call__(
        self, grads: Gradients, variables: Sequence[tf.Variable]
    ) -> tuple[Gradients, tf.Tensor, Metrics]:
        raise NotImplementedError


@gin.configurable
class Identity(GradientProcessor):
    """Passes gradients through unchanged and applies every step."""

    def __call__(self, grads, variables):
        return grads, tf.constant(True), {}


@gin.configurable
class ClipByGlobalNorm(GradientProcessor):
    """Rescales all gradients together so their global norm is at most `max_norm`."""

    # The norm before clipping is the learner's grad_norm (or, after Accumulate, the sum's).
    metric_names = ("clip_global_norm/norm_after",)

    def __init__(self, max_norm: float = 10.0):
        super().__init__()
        require_positive_number(self, max_norm=max_norm)
        self.max_norm = max_norm

    def __call__(self, grads, variables):
        norm = global_norm(grads)  # the learner's grad_norm: XLA computes it once
        clipped, _ = tf.clip_by_global_norm(grads, self.max_norm, use_norm=norm)
        # min(norm, max_norm) is the clipped gradients' norm: a second pass over them would
        # cost a good share of a DQN step under XLA (it keeps them from fusing into the update).
        metrics = {"clip_global_norm/norm_after": tf.minimum(norm, self.max_norm)}
        return clipped, tf.constant(True), metrics


@gin.configurable
class ClipByValue(GradientProcessor):
    """Clips every gradient element to `[-clip_value, clip_value]`."""

    metric_names = ("clip_value/norm_after",)

    def __init__(self, clip_value: float = 1.0):
        super().__init__()
        require_positive_number(self, clip_value=clip_value)
        self.clip_value = clip_value

    def __call__(self, grads, variables):
        clipped = [tf.clip_by_value(g, -self.clip_value, self.clip_value) for g in grads]
        metrics = {"clip_value/norm_after": global_norm(clipped)}
        return clipped, tf.constant(True), metrics


@gin.configurable
class Accumulate(GradientProcessor):
    """Sums the gradients of `steps` calls in variables and releases the sum on the last call.

    Nothing is applied on the first `steps - 1` calls; on the `steps`-th the summed gradient is
    returned with `apply_now=True` and the accumulators reset. Sum, not mean (A3C workers sum
    their parts the same way): with SGD, divide the learning rate by `steps` for the mean;
    Adam and RMSprop are nearly invariant to the gradient's scale, but a clipping processor
    chained after this one clips the sum.
    """

    metric_names = ("accumulate/calls",)

    def __init__(self, steps: int = 4):
        super().__init__()
        require_positive(self, steps=steps)
        self.steps = steps
        self._sums: list[tf.Variable] = []
        self._count = tf.Variable(0, dtype=tf.int64, trainable=False, name="accumulated_calls")

    def build(self, variables):
        self._sums = [
            tf.Variable(tf.zeros_like(v), trainable=False, name="accumulated_gradient")
            for v in variables
        ]

    def __call__(self, grads, variables):
        if len(self._sums) != len(grads):
            raise ValueError("Accumulate: call build(variables) before the first step.")
        for total, grad in zip(self._sums, grads, strict=True):
            total.assign_add(grad)
        count = tf.identity(self._count.assign_add(1))  # read now, before the reset below
        apply_now = count >= self.steps  # >=: a resumed run may have lowered `steps`
        summed = [tf.identity(total) for total in self._sums]
        with tf.control_dependencies(summed):
            for total in self._sums:
                total.assign(tf.where(apply_now, tf.zeros_like(total), total))
            self._count.assign(tf.where(apply_now, tf.zeros_like(count), count))
        return summed, apply_now, {"accumulate/calls": count}


@gin.configurable
class Chain(GradientProcessor):
    """Runs processors in order; applies only when every one of them says so."""

    def __init__(self, processors: Sequence[GradientProcessor] = ()):
        super().__init__()
        self.processors = list(processors)
        self.metric_names = tuple(name for p in self.processors for name in p.metric_names)

    def build(self, variables):
        for processor in self.processors:
            processor.build(variables)

    def __call__(self, grads, variables):
        apply_now = tf.constant(True)
        metrics: Metrics = {}
        for processor in self.processors:
            grads, ready, processor_metrics = processor(grads, variables)
            if not tf.get_static_value(ready):  # a release known when traced stays known
                apply_now = tf.logical_and(apply_now, ready)
            metrics.update(processor_metrics)
        return grads, apply_now, metrics
