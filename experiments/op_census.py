"""The arithmetic a traced TensorFlow function does: its matrix products and convolutions, with
their exact shapes, counted from the graph (nested loop bodies and branches included).

A FLOP figure counted from the graph is what the program really computes (a gradient's two
products per dense layer, the first layer's input gradient left out, dead ops pruned), not an
estimate from a network's parameter count. Each op is counted once: a learner call's loop body
is one gradient step, so the census of a learner's call is its arithmetic per gradient step.
Each op carries its name path through the ops it runs inside (`Learner` runs each update group
under its name scope), so a caller can weight a group that runs every k-th step by 1/k.
"""

import collections
import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from framework.parts.gradient_processors import GLOBAL_NORM_SCOPE

# The ops that do the arithmetic in dense and convolutional networks, forward and backward.
COUNTED = ("MatMul", "BatchMatMulV2", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
# Attributes that change what an op computes or how fast (transposes, layout, strides).
_ATTRIBUTES = {
    "MatMul": ("transpose_a", "transpose_b"),
    "BatchMatMulV2": ("adj_x", "adj_y"),
    "Conv2D": ("strides", "padding", "data_format", "dilations"),
    "Conv2DBackpropInput": ("strides", "padding", "data_format", "dilations"),
    "Conv2DBackpropFilter": ("strides", "padding", "data_format", "dilations"),
}
# Ops whose function attributes hold graphs that run as part of them.
_FUNCTION_ATTRIBUTES = ("body", "cond", "then_branch", "else_branch", "f", "branches")


@dataclasses.dataclass(frozen=True)
class Op:
    """One counted op: its type, its inputs' shapes (a backprop's size vector as the sizes it
    holds), the attributes that decide its cost and its numbers' type (a bfloat16 torso's
    convolutions are `bfloat16`, and timed so)."""

    type: str
    shapes: tuple[tuple[int, ...], ...]
    attributes: tuple[tuple[str, object], ...]
    dtype: str = "float32"

    @property
    def flops(self) -> int:
        """Multiply-adds times two, from the shapes."""
        a, b = self.shapes[0], self.shapes[1]
        options = dict(self.attributes)
        if self.type == "MatMul":
            rows, inner = a[::-1] if options["transpose_a"] else a
            columns = b[0] if options["transpose_b"] else b[1]
            return 2 * rows * inner * columns
        if self.type == "BatchMatMulV2":
            *batch, rows, inner = a
            if options["adj_x"]:
                rows, inner = inner, rows
            columns = b[-2] if options["adj_y"] else b[-1]
            size = 1
            for dimension in batch:
                size *= dimension
            return 2 * size * rows * inner * columns
        # Convolutions: 2 * output positions * output channels * the filter's window * inputs.
        # The three forms share that count: each multiplies every filter tap with every output.
        kernel_height, kernel_width, in_channels, out_channels = self.filter_shape
        batch, out_height, out_width = self.output_positions
        return (
            2
            * batch
            * out_height
            * out_width
            * out_channels
            * (kernel_height * kernel_width * in_channels)
        )

    @property
    def filter_shape(self) -> tuple[int, ...]:
        """[height, width, in, out]: the second input of each form (`filter`, or
        `filter_sizes` of a filter gradient)."""
        return self.shapes[1]

    @property
    def output_positions(self) -> tuple[int, int, int]:
        """(batch, height, width) of the forward convolution's output."""
        output = self.shapes[2] if self.type != "Conv2D" else self._forward_output()
        channels_first = dict(self.attributes)["data_format"] == b"NCHW"
        if channels_first:
            return output[0], output[2], output[3]
        return output[0], output[1], output[2]

    def _forward_output(self) -> tuple[int, ...]:
        options = dict(self.attributes)
        channels_first = options["data_format"] == b"NCHW"
        image = self.shapes[0]
        height, width = (image[2], image[3]) if channels_first else (image[1], image[2])
        strides = options["strides"]
        stride_height, stride_width = (
            (strides[2], strides[3]) if channels_first else (strides[1], strides[2])
        )
        kernel_height, kernel_width = self.shapes[1][0], self.shapes[1][1]
        if options["padding"] == b"SAME":
            out_height, out_width = -(-height // stride_height), -(-width // stride_width)
        else:
            out_height = (height - kernel_height) // stride_height + 1
            out_width = (width - kernel_width) // stride_width + 1
        out_channels = self.shapes[1][3]
        if channels_first:
            return image[0], out_channels, out_height, out_width
        return image[0], out_height, out_width, out_channels

    def describe(self) -> str:
        options = ", ".join(f"{k}={_readable(v)}" for k, v in self.attributes if v)
        shapes = " x ".join("[" + ", ".join(map(str, s)) + "]" for s in self.shapes)
        kind = "" if self.dtype == "float32" else f" {self.dtype}"
        return f"{self.type}{kind} {shapes}" + (f" ({options})" if options else "")


@dataclasses.dataclass(frozen=True)
class Census:
    """Counted ops by their name path (the names of the ops they run inside, then their own)."""

    counts: dict[tuple[tuple[str, ...], bool, Op], int]  # (name path, in a loop, op): count

    def per_step(
        self, weights: dict[str, float] | None = None, steps_per_call: int = 1
    ) -> dict[Op, float]:
        """Each distinct op's count per gradient step; an op whose name path holds a key of
        `weights` (an update group's name) weighted by its value (a group that runs every 2nd
        step: 0.5), others by 1. A call of several steps loops over them: an op outside every
        loop runs once a call (PPO's value pass over its rollout), so counts 1/steps_per_call."""
        weights = weights or {}
        totals: dict[Op, float] = collections.defaultdict(float)
        for (path, looped, op), count in self.counts.items():
            weight = next((weights[name] for name in path if name in weights), 1.0)
            totals[op] += count * weight / (1 if looped else steps_per_call)
        return dict(totals)

    def flops(self, weights: dict[str, float] | None = None, steps_per_call: int = 1) -> float:
        per_step = self.per_step(weights, steps_per_call)
        return sum(op.flops * count for op, count in per_step.items())


def census(function: tf.types.experimental.ConcreteFunction) -> Census:
    """The counted ops of a concrete function with static shapes, those whose results reach an
    output or a state change (the gradients a loss does not need are pruned, as TensorFlow and
    XLA prune them). A global norm's products with a vector of ones are its sums, not the
    step's arithmetic: left out."""
    counts: dict[tuple[tuple[str, ...], bool, Op], int] = collections.Counter()
    for path, looped, op in _live_ops(function.graph, (), looped=False):
        if op.type in COUNTED and not _in_global_norm(path):
            counts[(path, looped, _op_of(op))] += 1
    return Census(dict(counts))


def _in_global_norm(path: tuple[str, ...]) -> bool:
    """Whether an op's name path runs through a global norm's scope (TensorFlow numbers a
    scope's later uses in one graph: `global_norm_1`)."""
    return any(re.fullmatch(rf"{GLOBAL_NORM_SCOPE}(_\d+)?", part) for part in path)


def of_learner(learner: Any) -> tuple[Census, dict[str, float], int]:
    """A `framework.learner.Learner`'s census at the shapes of its first call, the weights of
    its update groups (1/every) and the gradient steps of that call."""
    traced = next((t for t in learner.calls.traced if t.first_call_spec is not None), None)
    if traced is None:
        raise ValueError("op_census: the learner has not been called; its shapes are unknown.")
    weights = {group.name: 1.0 / group.every for group in learner.groups}
    return census(traced.traced_at_first_call_shapes()), weights, traced.first_call_steps


def _live_ops(
    graph: tf.Graph, outer: tuple[str, ...], looped: bool
) -> Iterator[tuple[tuple[str, ...], bool, tf.Operation]]:
    """Every op of `graph` that an output or a stateful op depends on, with its name path and
    whether it runs in a loop's body, and those of the graphs it calls."""
    seeds = [tensor.op for tensor in graph.outputs]
    seeds += [op for op in graph.get_operations() if op._is_stateful]
    seeds += list(getattr(graph, "control_outputs", []))
    live, stack = set(), list(seeds)
    while stack:
        op = stack.pop()
        if op in live:
            continue
        live.add(op)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    for op in graph.get_operations():
        if op not in live:
            continue
        path = (*outer, *op.name.split("/"))
        yield path, looped, op
        in_loop = looped or op.type in ("While", "StatelessWhile")
        for name in _called_functions(op):
            yield from _live_ops(graph._get_function(name).graph, path, in_loop)


def _called_functions(op: tf.Operation) -> list[str]:
    names = []
    for attribute in _FUNCTION_ATTRIBUTES:
        if attribute not in op.node_def.attr:
            continue
        value = op.node_def.attr[attribute]
        if value.HasField("func"):
            names.append(value.func.name)
        names += [function.name for function in value.list.func]
    return names


def _op_of(op: tf.Operation) -> Op:
    shapes = [tuple(tensor.shape.as_list()) for tensor in op.inputs]
    if op.type.startswith("Conv2DBackprop"):  # its size vector: the sizes of what it computes
        sizes = 1 if op.type == "Conv2DBackpropFilter" else 0
        shapes[sizes] = tuple(op.outputs[0].shape.as_list())
    if any(s is None for shape in shapes for s in shape):
        raise ValueError(f"op_census: {op.name} ({op.type}) has unknown shapes {shapes}.")
    attributes = tuple((name, _attribute(op, name)) for name in _ATTRIBUTES[op.type])
    return Op(op.type, tuple(shapes), attributes, op.get_attr("T").name)


def _attribute(op: tf.Operation, name: str) -> object:
    value = op.get_attr(name)
    return tuple(value) if isinstance(value, list) else value


def _readable(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
