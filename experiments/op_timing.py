"""What this machine reaches on a step's own arithmetic: each matrix product and convolution
that `op_census` counts, at its exact shapes, timed alone, with XLA and with TensorFlow's own
kernels; the step's floor is their sum, each at the faster of the two.

An op is timed in one compiled call of R copies of it on distinct inputs (so no compiler merges
them), R large enough that the call's own overhead is a small share (~20 ms of arithmetic; at
most 64 copies of a tiny op, whose figure then includes ~1/64 of a call's overhead): the fastest
of repeated calls, over R. The threads are the process's.
"""

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from experiments.op_census import Census, Op

# Per timed call, about this much arithmetic at ~100 GFLOP/s, so that a call's overhead (~0.2 ms)
# is a small share.
_TARGET_SECONDS = 20e-3
_MAX_COPIES = 64


@dataclasses.dataclass(frozen=True)
class OpTiming:
    """One op's time alone, with XLA and with TensorFlow's kernels, in seconds."""

    op: Op
    xla_seconds: float
    kernel_seconds: float

    @property
    def best_seconds(self) -> float:
        return min(self.xla_seconds, self.kernel_seconds)

    def rate(self, seconds: float) -> float:
        """GFLOP/s at `seconds` per op."""
        return self.op.flops / seconds / 1e9


@dataclasses.dataclass(frozen=True)
class Floor:
    """A step's arithmetic and the time this machine needs for it, op by op."""

    per_step: dict[Op, float]  # count of each op per gradient step
    timings: dict[Op, OpTiming]

    @property
    def flops(self) -> float:
        return sum(op.flops * count for op, count in self.per_step.items())

    @property
    def seconds(self) -> float:
        return sum(self.timings[op].best_seconds * n for op, n in self.per_step.items())

    @property
    def rate(self) -> float:
        """GFLOP/s of the step's arithmetic at the floor."""
        return self.flops / self.seconds / 1e9

    def table(self) -> str:
        lines = ["  count  MFLOP  XLA GFLOP/s  kernels GFLOP/s  op"]
        for op, count in sorted(self.per_step.items(), key=lambda item: -item[0].flops * item[1]):
            timing = self.timings[op]
            lines.append(
                f"  {count:>5g}  {op.flops / 1e6:>5.1f}  {timing.rate(timing.xla_seconds):>11.1f}"
                f"  {timing.rate(timing.kernel_seconds):>15.1f}  {op.describe()}"
            )
        return "\n".join(lines)


def floor_of(
    census: Census,
    weights: dict[str, float] | None = None,
    steps_per_call: int = 1,
    calls: int = 20,
) -> Floor:
    """The floor of a census's step in this process (its threads), ops weighted as
    `Census.per_step` says."""
    per_step = {op: n for op, n in census.per_step(weights, steps_per_call).items() if n > 0}
    timings = {op: time_op(op, calls) for op in per_step}
    return Floor(per_step, timings)


def time_op(op: Op, calls: int = 20) -> OpTiming:
    return OpTiming(op, _seconds_per_op(op, True, calls), _seconds_per_op(op, False, calls))


def _seconds_per_op(op: Op, jit_compile: bool, calls: int) -> float:
    copies = int(np.clip(math.ceil(_TARGET_SECONDS * 100e9 / op.flops), 1, _MAX_COPIES))
    return _call_seconds(op, copies, jit_compile, calls) / copies


def _call_seconds(op: Op, copies: int, jit_compile: bool, calls: int) -> float:
    """Fastest of `calls` calls that each run `copies` of `op` on distinct inputs of its
    dtype, held in variables (arguments would cost a conversion each; constants would be
    folded)."""
    apply, inputs = _runnable(op)
    operands = [_operands(op, inputs, seed) for seed in range(copies)]

    @tf.function(jit_compile=jit_compile, autograph=False)
    def run():
        # One small result: returning each copy's output would cost a handle per output, more
        # than a small op's arithmetic; the sums read each output once (a few percent of a
        # large product's time, included in its figure), each in the op's dtype: casting a
        # bfloat16 output to float32 first cost the forward convolutions and products 15-18%
        # of their rate here.
        return tf.add_n(
            [
                tf.cast(tf.reduce_sum(apply(*[v.read_value() for v in copy])), tf.float32)
                for copy in operands
            ]
        )

    run()  # traces and compiles
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        run().numpy()
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def _operands(op: Op, shapes: list[tuple[int, ...]], seed: int) -> list[tf.Variable]:
    """Standard-normal operands of `op`'s dtype (a bfloat16 op is timed in bfloat16)."""
    rng = np.random.default_rng(seed)
    return [tf.Variable(tf.cast(rng.standard_normal(shape), op.dtype)) for shape in shapes]


def _runnable(op: Op) -> tuple[Callable[..., tf.Tensor], list[tuple[int, ...]]]:
    """`(apply(*operands), operand shapes)` that compute `op` (a backprop's size vector is a
    constant of `apply`, not an operand)."""
    options = dict(op.attributes)
    raw = getattr(tf.raw_ops, op.type)
    if op.type in ("MatMul", "BatchMatMulV2"):
        names = ("a", "b") if op.type == "MatMul" else ("x", "y")
        return lambda a, b: raw(**{names[0]: a, names[1]: b}, **options), list(op.shapes[:2])
    if op.type == "Conv2D":
        return lambda image, kernel: raw(input=image, filter=kernel, **options), list(op.shapes)
    if op.type == "Conv2DBackpropInput":
        sizes = tf.constant(op.shapes[0], tf.int32)
        return (
            lambda kernel, grad: raw(
                input_sizes=sizes, filter=kernel, out_backprop=grad, **options
            ),
            [op.shapes[1], op.shapes[2]],
        )
    sizes = tf.constant(op.shapes[1], tf.int32)  # Conv2DBackpropFilter
    return (
        lambda image, grad: raw(input=image, filter_sizes=sizes, out_backprop=grad, **options),
        [op.shapes[0], op.shapes[2]],
    )
