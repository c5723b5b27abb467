"""The one update pipeline: loss -> gradients -> process -> apply -> target update, per group.

Every gradient step of every agent goes through `Learner`. A step runs the learner's update
groups in list order (TD3's critic is updated before its actor reads it), each on its own
variables, optimizer and schedule (`every`); `_update_group` is one group's step, top to bottom.
A group's loss may read the loss extras of groups before it in the same step, as values
(`UpdateGroup.reads`: SAC's temperature reads the actor's log-probabilities).
The step never writes summaries: it returns metric tensors, averaged over the call's steps, and a
small health vector that the loop reads to stop or count non-finite updates.
How a call reaches TensorFlow (k steps per call, a packed batch, a direct call, an optimistic
pass under XLA) is `compiled/steps.py`'s business; what some calls do around their steps (PPO's
stop, prioritized replay's per-sample errors) is `compiled/step_wrappers.py`'s; A3C's split of
the pipeline into a worker's and the global learner's halves is `drivers/gradient_halves.py`'s.
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence

import gin
import keras
import numpy as np
import tensorflow as tf

from framework.agent import HEALTH_FIELDS
from framework.compiled.packed_outputs import FlatLayout, PackedMetrics
from framework.compiled.step_wrappers import (
    PER_SAMPLE,
    ExtrasByGroup,
    GatherPerSample,
    StepSpec,
    StopWhen,
    repeat_wrapped,
)
from framework.compiled.steps import StepCalls, direct_call_usable
from framework.parts import optimizers  # also registers the Keras optimizers with gin
from framework.parts.gradient_processors import GradientProcessor, Identity, global_norm
from framework.parts.target_updaters import NoUpdate, TargetUpdater

Batch = dict[str, tf.Tensor]
Metrics = dict[str, tf.Tensor]
# `loss_fn(batch)`, or `loss_fn(batch, earlier)` for a group that reads earlier groups.
LossFn = Callable[..., tuple[tf.Tensor, Metrics]]


@dataclasses.dataclass
class UpdateGroup:
    """One loss minimised over its own variables by its own optimizer.

    `every`: the group runs at learner steps where `step % every == 0`, counting from 1 (TD3's
    delayed actor: 2). `name` prefixes its metrics (`"critic"` gives `"critic/loss"`); `""`
    keeps them unprefixed. `reads`: names of groups before this one whose loss extras of the
    same step its loss takes, as `loss_fn(batch, earlier)` with `earlier[name]` that group's
    extras, without gradient (SAC's temperature reads the actor's log-probabilities); a loss
    that reads nothing is `loss_fn(batch)`. Its `every` must be a multiple of theirs (the
    learner checks), so that it runs only at steps where they ran too: it never reads a step of
    theirs that did not happen. The optimizer is built by the learner, so that its
    slots exist before any checkpoint restore (an unbuilt optimizer silently skips restoring
    them).
    """

    loss_fn: LossFn
    variables: Sequence[tf.Variable]
    optimizer: keras.optimizers.Optimizer
    gradient_processor: GradientProcessor | None = None  # None: Identity()
    target_updater: TargetUpdater | None = None  # None: NoUpdate()
    online_variables: Sequence[tf.Variable] = ()
    target_variables: Sequence[tf.Variable] = ()
    every: int = 1
    name: str = ""
    reads: Sequence[str] = ()

    def __post_init__(self):
        if self.every < 1:
            raise ValueError(f"UpdateGroup {self.name!r}: every must be >= 1, got {self.every}.")
        if isinstance(self.reads, str):
            raise ValueError(
                f"UpdateGroup {self.name!r}: reads takes a sequence of group names, e.g. "
                f"({self.reads!r},), got the string {self.reads!r}."
            )
        self.reads = tuple(self.reads)
        self.variables = list(self.variables)
        self.online_variables = list(self.online_variables)
        self.target_variables = list(self.target_variables)
        self.gradient_processor = self.gradient_processor or Identity()
        self.target_updater = self.target_updater or NoUpdate()

    @property
    def prefix(self) -> str:
        return f"{self.name}/" if self.name else ""

    def loss(self, batch: Batch, earlier: ExtrasByGroup) -> tuple[tf.Tensor, Metrics]:
        """The loss and its extras on `batch`, given the loss extras of this step's earlier
        groups by name (of which it takes those it reads, as constants)."""
        if not self.reads:
            return self.loss_fn(batch)
        read = {name: tf.nest.map_structure(tf.stop_gradient, earlier[name]) for name in self.reads}
        return self.loss_fn(batch, read)


@gin.configurable(allowlist=["jit_compile", "direct_call"])
class Learner(tf.Module):
    """Owns the optimizer steps of its update groups and, optionally, their target copies.

    Args:
      groups: one `UpdateGroup` or several, run in this order within each step.
      jit_compile: compile the steps with XLA, for fixed-shape batches (XLA compiles once per
        shape). It pays for MLPs on CPU: a 256x256 DQN step takes noticeably less CPU time,
        for a one-time compile of a few seconds. Not for conv nets on CPU: XLA's CPU
        convolutions make a Nature-CNN step tens of times slower (docs/speed.md). The CartPole
        DQN configs turn it on.
      direct_call: call the traced steps through TensorFlow's eager `execute`, cheaper per
        call than the ordinary call by about a small network's step, with the same results
        (`framework/compiled/direct_call.py`); off by itself, with a warning, on a TensorFlow whose
        internals it does not know.
      batch_spec: `tf.TensorSpec`s of the stacked batches `run` takes, leading axis first.
      publish: variables whose values after each `run` come back with it, as numpy arrays in
        `published`: an acting copy of the weights then costs no call of its own.
      loss_state: variables the losses themselves change (a `tf.random.Generator`'s `state`),
        restored with everything else when an optimistic call rolls back.
      prepare: turns the call's batches into the stack of step batches, inside the compiled
        call (PPO: a rollout into epochs of shuffled minibatches); by default they are the
        step batches.
      schedules: schedules that the losses read, by the metric that logs their value (PPO's
        `{"clip_range": ...}`), beside the optimizers': the learner sets their
        environment-step counters before each call, and names them in `named_schedules()`.
      per_sample: gather the losses' per-sample extras (keys under `PER_SAMPLE`, shape [batch])
        of every step into `per_sample` after each `run`, as [steps, batch] arrays: what a
        prioritized replay writes back (`GatherPerSample`). Off, they are never computed past
        the trace.
      stop: ends a call at the first step whose loss says so, that step's update held back
        (PPO's target KL: `StopWhen`).
    """

    def __init__(
        self,
        groups: UpdateGroup | Sequence[UpdateGroup],
        jit_compile: bool = False,
        batch_spec: dict[str, tf.TensorSpec] | None = None,
        publish: Sequence[tf.Variable] = (),
        loss_state: Sequence[tf.Variable] = (),
        direct_call: bool = True,
        prepare: Callable[[Batch], Batch] | None = None,
        schedules: dict[str, optimizers.Schedule] | None = None,
        per_sample: bool = False,
        stop: StopWhen | None = None,
    ):
        super().__init__(name="learner")
        groups = [groups] if isinstance(groups, UpdateGroup) else list(groups)
        if not groups:
            raise ValueError("Learner: needs at least one UpdateGroup.")
        names = [group.name for group in groups]
        if len(groups) > 1 and len(set(names)) != len(names):
            raise ValueError(f"Learner: update groups need distinct names, got {names}.")
        _check_reads(groups)
        self.groups = groups
        for group in groups:
            optimizers.check_learning_rate(group.optimizer)
            group.optimizer.build(group.variables)
            group.gradient_processor.build(group.variables)
            group.target_updater.check(group.online_variables, group.target_variables)
        # Tracked here (the groups are plain dataclasses) so that a checkpoint of the learner
        # holds the optimizer slots and any accumulated gradients.
        self._optimizers = [group.optimizer for group in groups]
        self._gradient_processors = [group.gradient_processor for group in groups]
        # A constant learning rate is a variable of the optimizer, so a checkpoint brings back
        # the old value over a newly configured one; `restored` (which the checkpoint store
        # calls after every restore) puts the config's back.
        configured = [group.optimizer.get_config()["learning_rate"] for group in groups]
        self._constant_learning_rates = [
            rate if isinstance(rate, float) else None for rate in configured
        ]
        self._schedules = [optimizers.schedule_of(group.optimizer) for group in groups]
        self._loss_schedules = dict(schedules or {})
        # What `set_environment_steps` writes before each call: the environment-step counters
        # of those schedules (none for most configs, which then pay nothing).
        self._environment_step_counters = [
            schedule.environment_steps
            for schedule in [*self._schedules, *self._loss_schedules.values()]
            if schedule is not None and schedule.environment_steps is not None
        ]
        self._prepare = prepare or (lambda batches: batches)
        # What a call does around its steps (`compiled.step_wrappers`), only where asked for; a stop
        # also holds back its group's update at the stopping step (`_update_group`).
        self._gather = GatherPerSample() if per_sample else None
        if stop is not None:
            stop.check(groups)
        self._wrappers = [wrapper for wrapper in (self._gather, stop) if wrapper is not None]
        self._holds = {} if stop is None else {stop.group: stop.condition}
        self._publish = list(publish)
        not_float32 = [_name(v) for v in self._publish if v.dtype != tf.float32]
        if not_float32:
            raise ValueError(f"Learner: publish takes float32 variables only, got {not_float32}.")
        self._published_layout = FlatLayout(
            [str(i) for i in range(len(self._publish))], [v.shape for v in self._publish]
        )
        self._metric_layout: FlatLayout | None = None  # recorded when traced
        self._loss_state = list(loss_state)
        self._set_published(None)
        self._set_per_sample({})
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")
        self.applied_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        # Per group: applies (the step its target updater counts) and target updates so far.
        # (Their attribute names are their checkpoint keys.)
        self._group_updates = [
            tf.Variable(0, dtype=tf.int64, trainable=False, name="group_updates") for _ in groups
        ]
        self._target_updates = [
            tf.Variable(0, dtype=tf.int64, trainable=False, name="target_updates") for _ in groups
        ]
        self.jit_compile = jit_compile
        self.batch_spec = batch_spec
        # Only a learner with a batch spec calls a traced function directly.
        self.direct_call = direct_call_usable(direct_call and batch_spec is not None)
        # A call of several steps under XLA applies every step and rolls back if one was
        # non-finite (`StepCalls`). Not a group whose processor decides when to release
        # (`Accumulate`): it keeps its branch, so such learners are never optimistic.
        optimistic = jit_compile and all(
            _releases_every_step(group.gradient_processor, group.variables) for group in groups
        )
        self.calls = StepCalls(
            self._train_call,
            self._state_variables,
            batch_spec,
            jit_compile,
            optimistic,
            self.direct_call,
            nonfinite_index=HEALTH_FIELDS.index("nonfinite_steps"),
            steps_index=HEALTH_FIELDS.index("gradient_steps"),
        )

    def run(
        self, batches: Batch, environment_steps: int | None = None
    ) -> tuple[PackedMetrics, tf.Tensor]:
        """Runs `k` gradient steps, one per batch stacked on the leading axis of every array;
        `environment_steps`, where a learning-rate schedule counts them, is the run's count.

        Returns the metrics, per group averaged over the finite steps in which it ran (zero if
        it ran in none), read into Python only when looked at, and the health vector
        (`Health.from_tensor`).
        """
        self.set_environment_steps(environment_steps)
        metrics, health, published, *gathered = self.calls(batches)
        self._set_published(self._published_layout.split(published.numpy()))
        if self._gather is not None:
            names = self._gather.names
            self._set_per_sample({n: x.numpy() for n, x in zip(names, gathered, strict=True)})
        return PackedMetrics(metrics, self._metric_layout), health

    def _train_call(self, batches: Batch, optimistic: bool) -> tuple[tf.Tensor, ...]:
        """Inside the compiled call: the step batches prepared, the step repeated (inside the
        learner's wrappers), the counters written once; what comes back."""
        batches = self._prepare(batches)
        first_step = self.steps.read_value() + 1

        def step(batch, index, applies):
            return self._step(batch, first_step + tf.cast(index, tf.int64), applies, optimistic)

        applies = [count.read_value() for count in self.group_applies]
        totals, applies, more_metrics, more_outputs = repeat_wrapped(
            step, batches, applies, self._step_spec(batches), self._wrappers
        )
        # The steps that ran (a stop skips the rest) and the updates applied.
        self.steps.assign_add(tf.cast(totals["health"][0], tf.int64))
        self.applied_updates.assign_add(tf.cast(totals["health"][1], tf.int64))
        for index, sums in enumerate(totals["groups"]):
            self.group_applies[index].assign(applies[index])
            self.target_updates[index].assign_add(tf.cast(sums["target_updates"], tf.int64))
        metrics = {**averages(self.groups, totals["groups"]), **more_metrics}
        for group, count in zip(self.groups, self.target_updates, strict=True):
            if not isinstance(group.target_updater, NoUpdate):  # a count that is always 0
                metrics[f"{group.prefix}target_updates"] = count.read_value()
        health = tf.stack([*totals["health"], self.nonfinite_variables()])
        self._metric_layout, metrics = FlatLayout.flatten(metrics)
        published = self._published_layout.concat(self._publish)
        return metrics, tf.cast(health, tf.int64), published, *more_outputs

    def _step(
        self, batch: Batch, step: tf.Tensor, applies: list[tf.Tensor], optimistic: bool
    ) -> tuple[dict, list[tf.Tensor], ExtrasByGroup]:
        """Learner step `step` (from 1): each group that is due, in order. Returns per-step
        counts, each group's applies so far (its target updater's step), and each group's loss
        extras by name."""
        outputs, extras = when_due(
            self.groups,
            step,
            [
                functools.partial(self._update_group, group, batch, applied, optimistic)
                for group, applied in zip(self.groups, applies, strict=True)
            ],
        )
        applies = [
            count + tf.cast(output["applied"], tf.int64)
            for count, output in zip(applies, outputs, strict=True)
        ]
        return {"groups": outputs, "health": step_health(outputs)}, applies, extras

    def _update_group(
        self,
        group: UpdateGroup,
        batch: Batch,
        applies: tf.Tensor,
        optimistic: bool,
        earlier: ExtrasByGroup,
    ) -> tuple[dict, Metrics]:
        """One group's gradient step: loss, gradients, processing, apply, target update. Returns
        what it counts, and its loss extras (for the groups after it, `earlier`'s).

        A non-finite step reaches neither the optimizer nor a processor with state (an
        accumulation keeps its good parts): the variables keep their last good values and the
        caller decides whether to stop or carry on (see `Health.nonfinite_steps`). In an
        optimistic call (`steps.StepCalls`) every step applies and a non-finite one
        rolls the whole call back instead: under XLA the branch costs more than the arithmetic.
        """
        loss, extras, grads = loss_and_gradients(group, batch, earlier)
        # A NaN or inf in any gradient makes the global norm NaN or inf: one test on a number
        # the step needs anyway. (Gradients whose squares overflow count as non-finite too.)
        grad_norm = global_norm(grads)
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm))
        grads, release, processor_metrics = process(group, grads, finite)
        learning_rate = tf.identity(group.optimizer.learning_rate)  # this step's, before it

        def apply():
            group.optimizer.apply(grads, group.variables)
            return group.target_updater(group.online_variables, group.target_variables, applies + 1)

        apply_now = release if optimistic else tf.logical_and(finite, release)
        hold = self._holds.get(group.name)  # a stop's group: nothing at the stopping step
        if hold is not None:
            apply_now = tf.logical_and(apply_now, tf.logical_not(hold(extras)))
        target_updated = _cond_or_run(apply_now, apply)
        metrics = {"loss": loss, "grad_norm": grad_norm, "learning_rate": learning_rate}
        outputs = {
            **step_outputs(finite, loss, {**metrics, **extras, **processor_metrics}),
            "applied": tf.cast(apply_now, tf.float32),
            "target_updates": tf.cast(target_updated, tf.float32),
        }
        return outputs, extras

    def _step_spec(self, batches: Batch) -> StepSpec:
        """The structure of what `_step` returns: outputs (for `repeat`'s zero start) and
        extras."""
        extras = extras_specs(self.groups, batches)
        groups = [
            {
                **group_outputs_spec(group, extras[group.name], extra_metrics=("learning_rate",)),
                "target_updates": tf.TensorSpec([], tf.float32),
            }
            for group in self.groups
        ]
        return StepSpec({"groups": groups, "health": [tf.TensorSpec([], tf.float32)] * 4}, extras)

    @property
    def group_applies(self) -> list[tf.Variable]:
        """Per group, its applies so far: the step its target updater counts."""
        return self._group_updates

    @property
    def target_updates(self) -> list[tf.Variable]:
        """Per group, its target updates so far."""
        return self._target_updates

    def set_environment_steps(self, environment_steps: int | None) -> None:
        """The run's environment steps, for learning-rate schedules that count them."""
        counters = self._environment_step_counters
        if counters and environment_steps is None:
            raise ValueError(
                "A learning-rate schedule here counts environment steps, but the learner was "
                "called without the run's count: call learner.run(batches, environment_steps) "
                "(agents pass the env_steps that update(env_steps) gets), or give the schedule "
                "unit = 'updates'."
            )
        for counter in counters:
            counter.assign(environment_steps)

    def named_schedules(self) -> dict[str, optimizers.Schedule]:
        """The groups' learning-rate schedules and the losses', by what follows each (and its
        TensorBoard tag)."""
        rates = {
            f"learning rate (train/{group.prefix}learning_rate)": schedule
            for group, schedule in zip(self.groups, self._schedules, strict=True)
            if schedule is not None
        }
        return rates | {
            f"{name.replace('_', ' ')} (train/{name})": schedule
            for name, schedule in self._loss_schedules.items()
        }

    def restored(self) -> None:
        """After a checkpoint restore: each configured learning rate wins over the saved."""
        for group, rate in zip(self.groups, self._constant_learning_rates, strict=True):
            if rate is not None:
                group.optimizer.learning_rate = rate

    @property
    def published(self) -> list[np.ndarray] | None:
        """`publish`'s values after the last `run`."""
        return self._published

    def _set_published(self, values: list[np.ndarray] | None) -> None:
        # Past tf.Module's attribute tracking, which would wrap the list for checkpointing on
        # every call, at a cost (docs/speed.md): these are copies, never saved.
        object.__setattr__(self, "_published", values)

    @property
    def per_sample(self) -> dict[str, np.ndarray]:
        """After the last `run`, each gathered per-sample extra (its name without `PER_SAMPLE`,
        after its group's prefix) as a [steps, batch] array; empty unless `per_sample`."""
        return self._per_sample

    def _set_per_sample(self, values: dict[str, np.ndarray]) -> None:
        object.__setattr__(self, "_per_sample", values)  # a copy, never saved (as `published`)

    @property
    def tracing_count(self) -> int:
        """How often the compiled training calls (`run`) were traced (tests check that it stays
        small); A3C's halves count their own (`drivers/gradient_halves.py`)."""
        return sum(call.tracing_count for call in self.calls.traced)

    @property
    def first_call_seconds(self) -> float:
        """Each compiled call's first call: tracing and XLA included."""
        return sum(call.first_call_seconds for call in self.calls.traced)

    @property
    def first_call_steps(self) -> int:
        """The gradient steps of those first calls."""
        return sum(call.first_call_steps for call in self.calls.traced)

    def _state_variables(self) -> list[tf.Variable]:
        """Everything a training call writes: weights, targets, optimizer slots, counters, and
        what the losses change (`loss_state`)."""
        variables = [self.steps, self.applied_updates, *self.group_applies, *self.target_updates]
        variables += self._loss_state
        for group in self.groups:
            variables += [*group.variables, *group.online_variables, *group.target_variables]
            variables += group.optimizer.variables
        return list({id(v): v for v in variables}.values())

    def nonfinite_variables(self) -> tf.Tensor:
        """1.0 when a finite update still overflowed a variable (caught before any save)."""
        variables = {id(v): v for group in self.groups for v in group.variables}
        return 1.0 - tf.cast(all_finite(list(variables.values())), tf.float32)


def loss_and_gradients(
    group: UpdateGroup, batch: Batch, earlier: ExtrasByGroup
) -> tuple[tf.Tensor, Metrics, list[tf.Tensor]]:
    """The group's loss on `batch` (given this step's earlier groups' extras), the loss
    function's extras, and the gradients."""
    with tf.GradientTape() as tape:
        loss, extras = group.loss(batch, earlier)
    grads = tape.gradient(loss, group.variables)
    missing = [_name(v) for v, g in zip(group.variables, grads, strict=True) if g is None]
    if missing:
        raise ValueError(f"The loss does not depend on these variables: {missing}.")
    return loss, extras, grads


def process(
    group: UpdateGroup, grads: list[tf.Tensor], finite: tf.Tensor
) -> tuple[list[tf.Tensor], tf.Tensor, Metrics]:
    """The group's gradient processor: (processed gradients, whether it releases them now, its
    metrics). One with state (an accumulation) sees finite gradients only; a stateless one
    (clipping) runs outside that branch, which under XLA costs more than it would save."""
    processor = group.gradient_processor

    def run():
        processed, release, metrics = processor(grads, group.variables)
        return processed, release, {k: tf.cast(v, tf.float32) for k, v in metrics.items()}

    if not processor.variables:
        return run()
    zeros = {name: tf.constant(0.0) for name in processor.metric_names}
    return tf.cond(finite, run, lambda: (grads, tf.constant(False), zeros))


def step_outputs(finite: tf.Tensor, loss: tf.Tensor, metrics: Metrics) -> dict:
    """What every group's step reports: a non-finite step counts in the health and adds nothing
    to the averages (its NaNs would hide every other step's values)."""
    return {
        "metrics": {
            k: tf.where(finite, tf.cast(v, tf.float32), 0.0)
            for k, v in metrics.items()
            if not k.startswith(PER_SAMPLE)
        },
        "ran": tf.cast(finite, tf.float32),
        "nonfinite": 1.0 - tf.cast(finite, tf.float32),
        "nonfinite_loss": 1.0 - tf.cast(tf.math.is_finite(loss), tf.float32),
    }


def step_health(outputs: Sequence[dict]) -> list[tf.Tensor]:
    """One step's health from its groups' outputs, in `HEALTH_FIELDS` order (the last field,
    non-finite variables, is the call's)."""
    return [
        tf.constant(1.0),  # a gradient step attempted
        tf.add_n([output["applied"] for output in outputs]),
        tf.reduce_max([output["nonfinite"] for output in outputs]),
        tf.reduce_max([output["nonfinite_loss"] for output in outputs]),
    ]


def group_outputs_spec(
    group: UpdateGroup, extras: dict[str, tf.TensorSpec], extra_metrics: Sequence[str] = ()
) -> dict:
    """The structure of `step_outputs` plus `applied` for `group`, whose loss extras are
    `extras` (`extras_specs`)."""
    scalar = tf.TensorSpec([], tf.float32)
    metrics = dict.fromkeys(
        ["loss", "grad_norm", *extra_metrics, *group.gradient_processor.metric_names], scalar
    )
    metrics.update(
        {
            name: tf.TensorSpec(spec.shape, tf.float32)
            for name, spec in extras.items()
            if not name.startswith(PER_SAMPLE)
        }
    )
    spec = dict.fromkeys(("ran", "applied", "nonfinite", "nonfinite_loss"), scalar)
    return {"metrics": metrics, **spec}


def extras_specs(
    groups: Sequence[UpdateGroup], batches: Batch
) -> dict[str, dict[str, tf.TensorSpec]]:
    """Each group's loss extras by group name, from a trace of the losses alone (their forward
    passes, nothing more; in order, so that a group that reads earlier ones gets theirs)."""
    batch = tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape[1:], x.dtype), batches)
    specs = {}
    for group in groups:
        earlier = {name: specs[name] for name in group.reads}
        traced = tf.function(group.loss, autograph=False).get_concrete_function(batch, earlier)
        specs[group.name] = {
            name: tf.TensorSpec(value.shape, value.dtype)
            for name, value in traced.structured_outputs[1].items()
        }
    return specs


def averages(groups: Sequence[UpdateGroup], totals: Sequence[dict]) -> Metrics:
    """Per group, over the finite steps in which it ran."""
    metrics = {}
    for group, sums in zip(groups, totals, strict=True):
        count = tf.maximum(sums["ran"], 1.0)
        metrics.update(
            {group.prefix + key: value / count for key, value in sums["metrics"].items()}
        )
    return metrics


def copy_variables(source: Sequence[tf.Variable], destination: Sequence[tf.Variable]) -> None:
    """Assigns `source` to `destination` in order: a worker pulls the global parameters."""
    if len(source) != len(destination):
        raise ValueError(
            f"copy_variables: {len(source)} source variables but {len(destination)} destination "
            "variables; the two networks must have the same structure."
        )
    for from_, to in zip(source, destination, strict=True):
        if from_.shape != to.shape:
            raise ValueError(
                f"copy_variables: shape mismatch {_name(from_)}{from_.shape} vs "
                f"{_name(to)}{to.shape}."
            )
    for from_, to in zip(source, destination, strict=True):
        to.assign(from_)


def when_due(
    groups: Sequence[UpdateGroup],
    step: tf.Tensor,
    updates: Sequence[Callable[[ExtrasByGroup], tuple[dict, Metrics]]],
) -> tuple[list[dict], ExtrasByGroup]:
    """Each group's `update(earlier) -> (outputs, extras)` at learner step `step` (from 1), in
    order, where the group is due (`every`), else zeros of the same structure: a group that is
    not due adds nothing to any sum. `earlier` holds the extras of the groups before it. Returns
    the outputs, and every group's extras by name."""
    outputs, extras = [], {}
    for group, update in zip(groups, updates, strict=True):
        run = functools.partial(update, dict(extras))
        with tf.name_scope(group.name or "update"):  # a profile's and an op census's grouping
            due = run() if group.every == 1 else _when(tf.equal(step % group.every, 0), run)
        outputs.append(due[0])
        extras[group.name] = due[1]
    return outputs, extras


def _when(due: tf.Tensor, fn: Callable[[], dict]) -> dict:
    """`fn()` where `due`, else zeros of the same structure: a group that is not due this step
    adds nothing to any sum. `tf.cond` traces the true branch first, which records the shapes."""
    specs = []

    def run():
        outputs = fn()
        specs.append(tf.nest.map_structure(tf.TensorSpec.from_tensor, outputs))
        return outputs

    def skip():
        return tf.nest.map_structure(lambda spec: tf.zeros(spec.shape, spec.dtype), specs[-1])

    return tf.cond(due, run, skip)


def _cond_or_run(predicate: tf.Tensor, fn: Callable[[], tf.Tensor]) -> tf.Tensor:
    """`fn()` where `predicate`, else False; no branch where `predicate` is known to be True
    when traced (an optimistic call)."""
    known = tf.get_static_value(predicate)
    if known is not None and bool(known):
        return fn()
    return tf.cond(predicate, fn, lambda: tf.constant(False))


def _check_reads(groups: Sequence[UpdateGroup]) -> None:
    """Raises ValueError unless each group reads only groups before it, which run at every step
    it runs (its `every` a multiple of theirs)."""
    for index, group in enumerate(groups):
        before = {earlier.name: earlier.every for earlier in groups[:index]}
        for name in group.reads:
            if name not in before:
                raise ValueError(
                    f"Learner: update group {group.name!r} reads {name!r}, which is not a group "
                    f"before it; the groups in order: {[g.name for g in groups]}."
                )
            if group.every % before[name]:
                raise ValueError(
                    f"Learner: update group {group.name!r} (every {group.every}) reads {name!r} "
                    f"(every {before[name]}), so it would run at steps where {name!r} did not: "
                    f"its every must be a multiple of {before[name]}."
                )


def _releases_every_step(processor: GradientProcessor, variables: Sequence[tf.Variable]) -> bool:
    """Whether `processor` releases its gradients at every step, as its trace shows."""
    if processor.variables:
        return False
    specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
    trace = tf.function(lambda grads: processor(grads, variables)[1], autograph=False)
    release = tf.get_static_value(trace.get_concrete_function(specs).structured_outputs)
    return release is not None and bool(release)


def all_finite(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(x)) for x in tensors])


def _name(variable: tf.Variable) -> str:
    """Keras variables have a full `path`; plain tf.Variables only a `name`."""
    return getattr(variable, "path", variable.name)
