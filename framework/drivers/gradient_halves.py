"""A3C's split of the update pipeline: a worker computes and processes gradients on its own copy
(`WorkerGradients`), the global learner applies what it pushes (`GlobalApply`).

Both halves are the learner's own math (`loss_and_gradients`, `process`, the group's optimizer
and target updater) compiled for their side: the worker's half applies nothing, so its
metrics have no learning rate or target updates; the global half counts no gradient steps.
"""

import functools

import tensorflow as tf

from framework.compiled.packed_outputs import FlatLayout, PackedMetrics
from framework.compiled.steps import TracedCall, repeat, traced
from framework.learner import (
    Learner,
    UpdateGroup,
    all_finite,
    averages,
    extras_specs,
    group_outputs_spec,
    loss_and_gradients,
    process,
    step_health,
    step_outputs,
    when_due,
)
from framework.parts.gradient_processors import global_norm

Gradients = list[list[tf.Tensor]]  # one list per group, in the order of its variables


class WorkerGradients:
    """A worker's half: `k` steps up to the processors, on its learner's variables."""

    def __init__(self, learner: Learner):
        self.learner = learner
        self._layout: FlatLayout | None = None  # the metrics' layout, recorded when traced
        self._call = TracedCall(
            self._compute, learner.batch_spec, learner.jit_compile, learner.direct_call
        )

    def __call__(self, batches: dict) -> tuple[Gradients, tf.Tensor, PackedMetrics, tf.Tensor]:
        """Returns `(gradients, push_now, metrics, health)`: `push_now` is true when some
        group's processor released its gradients (e.g. `Accumulate` on its last call); a group
        that released nothing contributes zeros, which `GlobalApply` does not apply. Several
        releases within one call add up."""
        gradients, push_now, metrics, health = self._call(batches)
        return gradients, push_now, PackedMetrics(metrics, self._layout), health

    @property
    def tracing_count(self) -> int:
        return self._call.tracing_count

    def _compute(self, batches: dict) -> tuple:
        learner = self.learner
        first_step = learner.steps.read_value() + 1

        def step(batch, index, carry):
            updates = [functools.partial(self._group, group, batch) for group in learner.groups]
            outputs, _ = when_due(learner.groups, first_step + tf.cast(index, tf.int64), updates)
            return {"groups": outputs, "health": step_health(outputs)}, carry

        extras = extras_specs(learner.groups, batches)
        spec = {
            "groups": [
                {
                    **group_outputs_spec(group, extras[group.name]),
                    "gradients": [tf.TensorSpec(v.shape, v.dtype) for v in group.variables],
                }
                for group in learner.groups
            ],
            "health": [tf.TensorSpec([], tf.float32)] * 4,
        }
        totals, _ = repeat(step, batches, (), spec)
        groups = totals["groups"]
        learner.steps.assign_add(tf.cast(tf.shape(tf.nest.flatten(batches)[0])[0], tf.int64))
        push_now = tf.add_n([group["applied"] for group in groups]) > 0
        gradient_steps, _, nonfinite_steps, nonfinite_losses = totals["health"]
        health = [gradient_steps, 0.0, nonfinite_steps, nonfinite_losses]  # nothing applied
        health = tf.stack([*health, learner.nonfinite_variables()])
        self._layout, metrics = FlatLayout.flatten(averages(learner.groups, groups))
        gradients = [group["gradients"] for group in groups]
        return gradients, push_now, metrics, tf.cast(health, tf.int64)

    @staticmethod
    def _group(group: UpdateGroup, batch: dict, earlier: dict) -> tuple[dict, dict]:
        loss, extras, grads = loss_and_gradients(group, batch, earlier)
        grad_norm = global_norm(grads)
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm))
        processed, release, processor_metrics = process(group, grads, finite)
        release = tf.logical_and(finite, release)
        metrics = {"loss": loss, "grad_norm": grad_norm, **extras, **processor_metrics}
        outputs = {
            **step_outputs(finite, loss, metrics),
            "applied": tf.cast(release, tf.float32),
            "gradients": [tf.where(release, g, tf.zeros_like(g)) for g in processed],
        }
        return outputs, extras


class GlobalApply:
    """The global half: applies pushed gradients to the learner's variables; its health.

    A group whose gradients are non-finite is not applied (counted in `nonfinite_steps`), nor is
    one whose gradients are all zero (it pushed nothing). `gradient_steps` stays 0: the worker
    counted them.
    """

    def __init__(self, learner: Learner):
        self.learner = learner
        spec = [
            [tf.TensorSpec(v.shape, v.dtype) for v in group.variables] for group in learner.groups
        ]
        self.function = tf.function(
            self._apply, jit_compile=learner.jit_compile, input_signature=[spec]
        )
        self._call = None  # traced on the first push

    def __call__(self, gradients: Gradients, environment_steps: int) -> tf.Tensor:
        self.learner.set_environment_steps(environment_steps)
        if self._call is None:
            self._call = traced(self.function.get_concrete_function(), self.learner.direct_call)
        return self._call(gradients)

    @property
    def tracing_count(self) -> int:
        return self.function.experimental_get_tracing_count()

    def _apply(self, gradients: Gradients) -> tf.Tensor:
        learner, applied, nonfinite = self.learner, [], []
        for group, grads, applies, target_updates in zip(
            learner.groups, gradients, learner.group_applies, learner.target_updates, strict=True
        ):
            finite = all_finite(grads)
            pushed = tf.reduce_any([tf.reduce_any(tf.not_equal(g, 0.0)) for g in grads])
            apply_now = tf.logical_and(finite, pushed)

            def apply(group=group, grads=grads, applies=applies):
                group.optimizer.apply(grads, group.variables)
                step = applies.read_value() + 1  # this apply's number, from 1
                return group.target_updater(group.online_variables, group.target_variables, step)

            updated = tf.cond(apply_now, apply, lambda: tf.constant(False))
            applies.assign_add(tf.cast(apply_now, tf.int64))
            target_updates.assign_add(tf.cast(updated, tf.int64))
            applied.append(tf.cast(apply_now, tf.float32))
            nonfinite.append(1.0 - tf.cast(finite, tf.float32))
        learner.applied_updates.assign_add(tf.cast(tf.add_n(applied), tf.int64))
        health = [0.0, tf.add_n(applied), tf.reduce_max(nonfinite), 0.0]
        return tf.cast(tf.stack([*health, learner.nonfinite_variables()]), tf.int64)
