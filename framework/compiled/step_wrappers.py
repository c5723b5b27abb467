"""What a learner's call may do around its steps beyond the update pipeline, for the learners that
ask: stop at the first step whose loss says so (PPO's target KL, `StopWhen`), and gather the
losses' per-sample extras of every step (a prioritized replay's errors, `GatherPerSample`).

Each is a wrapper of the step that the call repeats, with its own part of the carry; a learner
builds only those it is asked for, so one without them runs the bare step and pays nothing for
them. A step here is `step(batch, index, carry) -> (outputs, carry, extras)`: `outputs` are summed
over the call's steps (`repeat`), `extras` are this step's loss extras of each update group, by
group name (zeros for a group that was not due).
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import tensorflow as tf

from framework.compiled.steps import repeat

Metrics = dict[str, tf.Tensor]
ExtrasByGroup = dict[str, Metrics]  # by update group name
Step = Callable[[dict[str, tf.Tensor], tf.Tensor, Any], tuple[dict, Any, ExtrasByGroup]]

# A loss's extras under this prefix are per-sample values ([batch]), not metrics: the learner
# never logs them and, where asked (`Learner(per_sample=True)`), gathers them per step.
PER_SAMPLE = "per_sample/"


class StepSpec(NamedTuple):
    """The structure of a step's `outputs` and `extras`, as `tf.TensorSpec`s."""

    outputs: dict
    extras: dict[str, dict[str, tf.TensorSpec]]


class StepWrapper(Protocol):
    def start(self, batches: dict[str, tf.Tensor], spec: StepSpec) -> Any:
        """Its part of the carry before the first step."""

    def wrap(self, step: Step, spec: StepSpec) -> Step:
        """`step` with its part of the carry: the wrapped step's carry is `(step's, its own)`."""

    def finish(self, own: Any, totals: dict) -> tuple[Metrics, list[tf.Tensor]]:
        """After the steps, from its last carry: metrics to log, and tensors the call returns."""


def repeat_wrapped(
    step: Step,
    batches: dict[str, tf.Tensor],
    carry: Any,
    spec: StepSpec,
    wrappers: Sequence[StepWrapper],
) -> tuple[dict, Any, Metrics, list[tf.Tensor]]:
    """`repeat` of `step` inside `wrappers` (the first innermost). Returns the summed outputs,
    the step's own last carry, and the wrappers' metrics and tensors for the call to return."""
    for wrapper in wrappers:
        carry = (carry, wrapper.start(batches, spec))
        step = wrapper.wrap(step, spec)

    def without_extras(batch, index, carry):
        outputs, carry, _ = step(batch, index, carry)
        return outputs, carry

    totals, carry = repeat(without_extras, batches, carry, spec.outputs)
    metrics, returned = {}, []
    for wrapper in reversed(wrappers):
        carry, own = carry
        more_metrics, more_returned = wrapper.finish(own, totals)
        metrics.update(more_metrics)
        returned = [*more_returned, *returned]
    return totals, carry, metrics, returned


@dataclasses.dataclass(frozen=True)
class StopWhen:
    """Ends a call at its first step where `condition(extras)` holds, on the loss extras of the
    update group named `group` (PPO's target KL; SB3 breaks before that optimizer step): that
    group applies nothing at this step (the learner holds it back, `Learner(stop=...)`), and the
    call's remaining steps neither run nor count. Logs `steps_run`, the steps that ran.

    The group runs at every step: a condition on a group that was not due would read zeros.
    """

    condition: Callable[[Metrics], tf.Tensor]
    group: str = ""

    def check(self, groups: Sequence) -> None:
        """Raises ValueError unless `group` names one of `groups` that runs every step."""
        every = {group.name: group.every for group in groups}
        if every.get(self.group) != 1:
            raise ValueError(
                f"StopWhen: group {self.group!r} must be an update group that runs every step; "
                f"the groups (name: every) are {every}."
            )

    def start(self, batches: dict[str, tf.Tensor], spec: StepSpec) -> tf.Tensor:
        del batches, spec
        return tf.constant(False)

    def wrap(self, step: Step, spec: StepSpec) -> Step:
        def skip(carry):
            outputs, extras = tf.nest.map_structure(
                lambda s: tf.zeros(s.shape, s.dtype), (spec.outputs, spec.extras)
            )
            return outputs, carry, extras

        def step_unless_stopped(batch, index, carry):
            carry, stopped = carry
            outputs, carry, extras = tf.cond(
                stopped, lambda: skip(carry), lambda: step(batch, index, carry)
            )
            stopped = tf.logical_or(stopped, self.condition(extras[self.group]))
            return outputs, (carry, stopped), extras

        return step_unless_stopped

    def finish(self, own: tf.Tensor, totals: dict) -> tuple[Metrics, list[tf.Tensor]]:
        del own
        return {"steps_run": totals["health"][0]}, []


class GatherPerSample:
    """Gathers each group's per-sample extras (keys under `PER_SAMPLE`, shape [batch]) of every
    step into [steps, batch] stacks that the call returns: what a prioritized replay writes
    back. A step that did not run leaves its row at zero. `names` (recorded when the call is
    traced) are the stacks', in order: the key without `PER_SAMPLE`, after its group's prefix."""

    def __init__(self):
        self.names: list[str] = []

    def start(self, batches: dict[str, tf.Tensor], spec: StepSpec) -> dict[str, tf.Tensor]:
        num_steps = tf.shape(tf.nest.flatten(batches)[0])[0]
        return {
            name: tf.zeros(tf.concat([[num_steps], spec.extras[group][key].shape], 0), tf.float32)
            for group, key, name in _per_sample_extras(spec)
        }

    def wrap(self, step: Step, spec: StepSpec) -> Step:
        def gathering(batch, index, carry):
            carry, stacks = carry
            outputs, carry, extras = step(batch, index, carry)
            # Each step writes its row of the stacks, carried through the loop.
            stacks = {
                name: tf.tensor_scatter_nd_update(
                    stacks[name], [[index]], tf.cast(extras[group][key], tf.float32)[None]
                )
                for group, key, name in _per_sample_extras(spec)
            }
            return outputs, (carry, stacks), extras

        return gathering

    def finish(self, own: dict[str, tf.Tensor], totals: dict) -> tuple[Metrics, list[tf.Tensor]]:
        del totals
        self.names = list(own)
        return {}, list(own.values())


def _per_sample_extras(spec: StepSpec) -> list[tuple[str, str, str]]:
    """`(group, key, name)` of each per-sample extra, in group order."""
    return [
        (group, key, (f"{group}/" if group else "") + key[len(PER_SAMPLE) :])
        for group, extras in spec.extras.items()
        for key in extras
        if key.startswith(PER_SAMPLE)
    ]
