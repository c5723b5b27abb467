"""The one update pipeline: loss -> gradients -> process -> apply -> target update, per group.

Every gradient step of every agent goes through `Learner`. A call runs `k` gradient steps inside
one compiled function (a `tf.while_loop` over a stack of `k` batches), because crossing into
TensorFlow costs about as much as a whole small-network step. A step runs the learner's update
groups in list order (TD3's critic is updated before its actor reads it), each on its own
variables, optimizer and schedule (`every`). The step never writes summaries: it returns metric
tensors, averaged over the `k` steps, and a small health vector that the loop reads to stop or
count non-finite updates. Counters cross into their variables once per call, not once per
step, and a stateless gradient processor runs outside the non-finite guard's branch: under XLA a
variable write or a branch inside the loop costs more than a small step's arithmetic. For the
same reason a call's inputs and outputs are few: the batch crosses in as one packed array
(`framework/batch_packing.py`), and the metrics and the acting copy's weights come back as one
vector each (`framework/packed_outputs.py`).
Asynchronous workers (A3C) use the same pipeline split in two halves:
`compute_gradients` on a worker's copy, `apply_gradients` on the global learner.
"""

import dataclasses
import time
from collections.abc import Callable, Sequence

import gin
import keras
import numpy as np
import tensorflow as tf

from framework.agent import HEALTH_FIELDS
from framework.batch_packing import PackedBatch
from framework.direct_call import DirectCall
from framework.packed_outputs import FlatLayout, PackedMetrics
from framework.parts import optimizers  # also registers the Keras optimizers with gin
from framework.parts.gradient_processors import GradientProcessor, Identity
from framework.parts.target_updaters import NoUpdate, TargetUpdater

Batch = dict[str, tf.Tensor]
Metrics = dict[str, tf.Tensor]
Gradients = list[list[tf.Tensor]]  # one list per group, in the order of its variables
LossFn = Callable[[Batch], tuple[tf.Tensor, Metrics]]


@dataclasses.dataclass
class UpdateGroup:
    """One loss minimised over its own variables by its own optimizer.

    `every`: the group runs at learner steps where `step % every == 0`, counting from 1 (TD3's
    delayed actor: 2). `name` prefixes its metrics (`"critic"` gives `"critic/loss"`); `""`
    keeps them unprefixed. The optimizer is built by the learner, so that its slots exist before
    any checkpoint restore (an unbuilt optimizer silently skips restoring them).
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

    def __post_init__(self):
        if self.every < 1:
            raise ValueError(f"UpdateGroup {self.name!r}: every must be >= 1, got {self.every}.")
        self.variables = list(self.variables)
        self.online_variables = list(self.online_variables)
        self.target_variables = list(self.target_variables)
        self.gradient_processor = self.gradient_processor or Identity()
        self.target_updater = self.target_updater or NoUpdate()

    @property
    def prefix(self) -> str:
        return f"{self.name}/" if self.name else ""


@gin.configurable(allowlist=["jit_compile"])
class Learner(tf.Module):
    """Owns the optimizer steps of its update groups and, optionally, their target copies.

    Args:
      groups: one `UpdateGroup` or several, run in this order within each step.
      jit_compile: compile the steps with XLA, for fixed-shape batches (XLA compiles once per
        shape). It pays for MLPs on CPU: a batch-64 256x256 double-Q DQN step used ~470 us of
        CPU time with it against ~650 us without (2-core machine, one thread), for a one-time
        compile of a few seconds. Not for conv nets on CPU: XLA's CPU convolutions made a
        batch-32 Nature-CNN step 513 ms against 19 ms. The CartPole DQN configs turn it on.
      batch_spec: `tf.TensorSpec`s of the stacked batches `run` takes, leading axis first.
      publish: variables whose values after each `run` come back with it, as numpy arrays in
        `published`: an acting copy of the weights then costs no call of its own (~100-300 us).
      loss_state: variables the losses themselves change (a `tf.random.Generator`'s `state`),
        restored with everything else when an optimistic call rolls back (see below).
    """

    def __init__(
        self,
        groups: UpdateGroup | Sequence[UpdateGroup],
        jit_compile: bool = False,
        batch_spec: dict[str, tf.TensorSpec] | None = None,
        publish: Sequence[tf.Variable] = (),
        loss_state: Sequence[tf.Variable] = (),
    ):
        super().__init__(name="learner")
        groups = [groups] if isinstance(groups, UpdateGroup) else list(groups)
        if not groups:
            raise ValueError("Learner: needs at least one UpdateGroup.")
        names = [group.name for group in groups]
        if len(groups) > 1 and len(set(names)) != len(names):
            raise ValueError(f"Learner: update groups need distinct names, got {names}.")
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
        # A constant learning rate is a variable of the optimizer, so a checkpoint would bring
        # back the old value over a newly configured one; `restored` puts the config's back.
        configured = [group.optimizer.get_config()["learning_rate"] for group in groups]
        self._constant_learning_rates = [
            rate if isinstance(rate, float) else None for rate in configured
        ]
        self._publish = list(publish)
        not_float32 = [_name(v) for v in self._publish if v.dtype != tf.float32]
        if not_float32:
            raise ValueError(f"Learner: publish takes float32 variables only, got {not_float32}.")
        self._published_layout = FlatLayout(
            [str(i) for i in range(len(self._publish))], [v.shape for v in self._publish]
        )
        # The metrics' layout in the vector each kind of call returns, recorded when traced.
        self._metric_layouts: dict[str, FlatLayout] = {}
        self._loss_state = list(loss_state)
        self._set_published(None)
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")
        self.applied_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        # Per group: applies (the step its target updater counts) and target updates so far.
        self._group_updates = [
            tf.Variable(0, dtype=tf.int64, trainable=False, name="group_updates") for _ in groups
        ]
        self._target_updates = [
            tf.Variable(0, dtype=tf.int64, trainable=False, name="target_updates") for _ in groups
        ]
        # With a spec (None for dimensions that vary, such as episode length) a step is traced
        # once, and its batches cross into it as one array where they can (`PackedBatch`);
        # without, on the first call and once more for varying shapes.
        self._packing = (
            PackedBatch(batch_spec)
            if batch_spec is not None and PackedBatch.supports(batch_spec)
            else None
        )
        unpack = (lambda batch: batch) if self._packing is None else self._packing.unpack
        signature = None if batch_spec is None else [batch_spec]
        if self._packing is not None:
            signature = [self._packing.spec]
        self.jit_compile = jit_compile
        # The learner's code calls tf.cond and tf.while_loop itself: tracing it without AutoGraph
        # saves ~1 s of start-up. A loss with Python `if`/`for` over tensors gets a TensorFlow
        # error that says so; decorate it with `tf.function`, which converts it.
        # Under XLA a branch around each update costs ~20% of a 256x256 MLP step (its buffers
        # cannot fuse across it), so there a call of several steps is optimistic: every step
        # applies, and a call in which any step was non-finite rolls back and runs again
        # guarded, branch and all. A single step would gain nothing (a branch either way), nor
        # would a group whose processor decides when to release (`Accumulate`): it keeps its
        # branch, so such learners are never optimistic.
        self._optimistic = jit_compile and all(
            _releases_every_step(group.gradient_processor, group.variables) for group in groups
        )
        compile_options = dict(
            jit_compile=jit_compile,
            input_signature=signature,
            reduce_retracing=signature is None,
            autograph=False,
        )
        steps = {
            "run": lambda b: self._run_steps(unpack(b), optimistic=False),
            "run_optimistic": lambda b: self._run_steps(unpack(b), optimistic=True),
            "compute": lambda b: self._compute_steps(unpack(b)),
        }
        self._functions = {
            name: tf.function(function, **compile_options) for name, function in steps.items()
        }
        self._has_signature = signature is not None
        self._traced: dict[str, Callable] = {}
        self.first_call_seconds = 0.0  # of each compiled function: tracing and XLA included
        self.first_call_steps = 0
        gradient_spec = [
            [tf.TensorSpec(v.shape, v.dtype) for v in group.variables] for group in groups
        ]
        self._apply_pushed = tf.function(
            self._apply_gradients, jit_compile=jit_compile, input_signature=[gradient_spec]
        )
        self._direct_apply: DirectCall | None = None  # traced on the first push

    def restored(self) -> None:
        """Call after a checkpoint restore: each configured learning rate wins over the saved."""
        for group, rate in zip(self.groups, self._constant_learning_rates, strict=True):
            if rate is not None:
                group.optimizer.learning_rate = rate

    def run(self, batches: Batch) -> tuple[PackedMetrics, tf.Tensor]:
        """Runs `k` gradient steps, one per batch stacked on the leading axis of every array.

        Returns the metrics, per group averaged over the finite steps in which it ran (zero if
        it ran in none), read into Python only when looked at, and the health vector
        (`Health.from_tensor`).
        """
        optimistic = self._optimistic and len(tf.nest.flatten(batches)[0]) > 1
        metrics, health, published = self._call("run_optimistic" if optimistic else "run", batches)
        if optimistic and health.numpy()[HEALTH_FIELDS.index("nonfinite_steps")] > 0:
            # The optimistic pass rolled back: the same steps again, each one guarded.
            metrics, health, published = self._call("run", batches)
        self._set_published(self._published_layout.split(published.numpy()))
        return PackedMetrics(metrics, self._metric_layouts["train"]), health

    @property
    def published(self) -> list[np.ndarray] | None:
        """`publish`'s values after the last `run`."""
        return self._published

    def _set_published(self, values: list[np.ndarray] | None) -> None:
        # Past tf.Module's attribute tracking, which would wrap the list for checkpointing at
        # ~150 us a call: these are copies, never saved.
        object.__setattr__(self, "_published", values)

    def compute_gradients(
        self, batches: Batch
    ) -> tuple[Gradients, tf.Tensor, PackedMetrics, tf.Tensor]:
        """A worker's half: `k` steps up to the processors, on this learner's variables.

        Returns `(gradients, push_now, metrics, health)`: `push_now` is true when some group's
        processor released its gradients (e.g. `Accumulate` on its last call); a group that
        released nothing contributes zeros, which `apply_gradients` does not apply. Several
        releases within one call add up. Nothing is applied here, so the metrics have no
        learning rate or target updates: those are the global learner's.
        """
        gradients, push_now, metrics, health = self._call("compute", batches)
        return gradients, push_now, PackedMetrics(metrics, self._metric_layouts["compute"]), health

    def _call(self, name: str, batches: Batch):
        """With a batch spec, calls the traced function directly, traced on the first call:
        `tf.function`'s dispatch (matching the arguments against its traces) and a concrete
        function's own call path cost ~200 us a call, more than a small network's whole step
        (`framework/direct_call.py`)."""
        function = self._functions[name]
        if not self._has_signature:
            return function(batches)
        if self._packing is not None:
            batches = self._packing.pack(batches)
        if name in self._traced:
            return self._traced[name](batches)
        start = time.perf_counter()
        self._traced[name] = DirectCall(function.get_concrete_function())
        outputs = self._traced[name](batches)
        self.first_call_seconds += time.perf_counter() - start
        self.first_call_steps += len(tf.nest.flatten(batches)[0])
        return outputs

    def apply_gradients(self, gradients: Gradients) -> tf.Tensor:
        """The global half: applies pushed gradients to this learner's variables; its health.

        A group whose gradients are non-finite is not applied (counted in `nonfinite_steps`),
        nor is one whose gradients are all zero (it pushed nothing). `gradient_steps` stays 0:
        the worker's `compute_gradients` counted them.
        """
        if self._direct_apply is None:
            self._direct_apply = DirectCall(self._apply_pushed.get_concrete_function())
        return self._direct_apply(gradients)

    @property
    def tracing_count(self) -> int:
        """How often the compiled functions were traced (tests check that it stays small)."""
        functions = (*self._functions.values(), self._apply_pushed)
        return sum(function.experimental_get_tracing_count() for function in functions)

    def _run_steps(
        self, batches: Batch, optimistic: bool
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        state = self._state_variables() if optimistic else []
        saved = [tf.identity(v) for v in state]  # a copy that the steps below do not touch
        totals = self._steps(batches, train=True, optimistic=optimistic)
        metrics = self._averages(totals)
        for group, count in zip(self.groups, self._target_updates, strict=True):
            if not isinstance(group.target_updater, NoUpdate):  # a count that is always 0
                metrics[f"{group.prefix}target_updates"] = count.read_value()
        health = tf.stack([*totals["health"], self._nonfinite_variables()])
        self._metric_layouts["train"], metrics = FlatLayout.flatten(metrics)
        published = self._published_layout.concat(self._publish)
        if optimistic:  # a non-finite step applied: everything back as it was before the call

            def roll_back():
                for variable, value in zip(state, saved, strict=True):
                    variable.assign(value)
                return tf.constant(True)

            nonfinite_steps = totals["health"][HEALTH_FIELDS.index("nonfinite_steps")]
            tf.cond(nonfinite_steps > 0, roll_back, lambda: tf.constant(False))
        return metrics, tf.cast(health, tf.int64), published

    def _state_variables(self) -> list[tf.Variable]:
        """Everything a training call writes: weights, targets, optimizer slots, counters, and
        what the losses change (`loss_state`)."""
        variables = [self.steps, self.applied_updates, *self._group_updates, *self._target_updates]
        variables += self._loss_state
        for group in self.groups:
            variables += [*group.variables, *group.online_variables, *group.target_variables]
            variables += group.optimizer.variables
        return list({id(v): v for v in variables}.values())

    def _compute_steps(self, batches: Batch) -> tuple[Gradients, tf.Tensor, tf.Tensor, tf.Tensor]:
        totals = self._steps(batches, train=False)
        gradients = [group["gradients"] for group in totals["groups"]]
        push_now = tf.add_n([group["applied"] for group in totals["groups"]]) > 0
        gradient_steps, _, nonfinite_steps, nonfinite_losses = totals["health"]
        health = [gradient_steps, 0.0, nonfinite_steps, nonfinite_losses]
        health = tf.stack([*health, self._nonfinite_variables()])
        self._metric_layouts["compute"], metrics = FlatLayout.flatten(self._averages(totals))
        return gradients, push_now, metrics, tf.cast(health, tf.int64)

    def _apply_gradients(self, gradients: Gradients) -> tf.Tensor:
        applied, nonfinite = [], []
        for index, grads in enumerate(gradients):
            finite = _all_finite(grads)
            pushed = tf.reduce_any([tf.reduce_any(tf.not_equal(g, 0.0)) for g in grads])
            apply_now = tf.logical_and(finite, pushed)
            applies = self._group_updates[index]
            updated = tf.cond(
                apply_now,
                lambda i=index, g=grads, n=applies: self._apply(i, g, n.read_value() + 1),
                lambda: tf.constant(False),
            )
            applies.assign_add(tf.cast(apply_now, tf.int64))
            self._target_updates[index].assign_add(tf.cast(updated, tf.int64))
            applied.append(tf.cast(apply_now, tf.float32))
            nonfinite.append(1.0 - tf.cast(finite, tf.float32))
        self.applied_updates.assign_add(tf.cast(tf.add_n(applied), tf.int64))
        health = [0.0, tf.add_n(applied), tf.reduce_max(nonfinite), 0.0]
        return tf.cast(tf.stack([*health, self._nonfinite_variables()]), tf.int64)

    def _steps(self, batches: Batch, train: bool, optimistic: bool = False) -> dict:
        """Runs the steps over the stacked batches; the sums of what each step returns.

        The counters (learner steps, each group's applies and target updates) travel through
        the loop as tensors and are written to their variables once per call: a variable
        write inside the loop costs more than the arithmetic of a small step.
        """
        leading = tf.nest.flatten(batches)[0]
        first_step = self.steps.read_value() + 1
        applies = [count.read_value() for count in self._group_updates]

        def step_at(index, applies):
            batch = tf.nest.map_structure(lambda x: x[index], batches)
            step = first_step + tf.cast(index, tf.int64)
            return self._step(batch, step, applies, train, optimistic)

        if leading.shape[0] == 1:  # one step (on-policy): no loop needed
            totals, applies = step_at(0, applies)
        else:

            def body(index, applies, totals):
                outputs, applies = step_at(index, applies)
                return index + 1, applies, tf.nest.map_structure(tf.add, totals, outputs)

            zeros = tf.nest.map_structure(
                lambda spec: tf.zeros(spec.shape, spec.dtype), self._totals_spec(batches, train)
            )
            num_steps = tf.shape(leading)[0]
            _, applies, totals = tf.while_loop(
                lambda index, *_: index < num_steps, body, (0, applies, zeros)
            )
        self.steps.assign_add(tf.cast(tf.shape(leading)[0], tf.int64))
        if train:
            self.applied_updates.assign_add(tf.cast(totals["health"][1], tf.int64))
            for index, sums in enumerate(totals["groups"]):
                self._group_updates[index].assign(applies[index])
                self._target_updates[index].assign_add(tf.cast(sums["target_updates"], tf.int64))
        return totals

    def _totals_spec(self, batches: Batch, train: bool) -> dict:
        """The structure `_step` returns, for the loop's zero start: the step's own keys, and
        each loss's extras from a trace of the loss alone (its forward pass, nothing more)."""
        batch = tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape[1:], x.dtype), batches)
        scalar = tf.TensorSpec([], tf.float32)
        groups = []
        for group in self.groups:
            loss_fn = tf.function(group.loss_fn, autograph=False)
            _, extras = loss_fn.get_concrete_function(batch).structured_outputs
            names = ["loss", "grad_norm", *extras, *group.gradient_processor.metric_names]
            spec = {
                "metrics": {name: scalar for name in names},
                **dict.fromkeys(("ran", "applied", "nonfinite", "nonfinite_loss"), scalar),
            }
            for name, value in extras.items():
                spec["metrics"][name] = tf.TensorSpec(value.shape, tf.float32)
            if train:
                spec["metrics"]["learning_rate"] = scalar
                spec["target_updates"] = scalar
            else:
                spec["gradients"] = [tf.TensorSpec(v.shape, v.dtype) for v in group.variables]
            groups.append(spec)
        return {"groups": groups, "health": [scalar] * 4}

    def _averages(self, totals: dict) -> Metrics:
        """Per group, over the finite steps in which it ran: a skipped step's NaNs would hide
        all the others."""
        metrics = {}
        for group, sums in zip(self.groups, totals["groups"], strict=True):
            count = tf.maximum(sums["ran"], 1.0)
            metrics.update(
                {group.prefix + key: value / count for key, value in sums["metrics"].items()}
            )
        return metrics

    def _step(
        self, batch: Batch, step: tf.Tensor, applies: list[tf.Tensor], train: bool, optimistic: bool
    ) -> tuple[dict, list[tf.Tensor]]:
        """Learner step `step` (from 1): each group that is due, in order. Returns per-step
        counts and each group's applies so far (its target updater's step)."""
        outputs = []
        for index, group in enumerate(self.groups):

            def run_group(index=index):
                return self._group_step(index, batch, applies[index], train, optimistic)

            if group.every == 1:
                outputs.append(run_group())
            else:
                outputs.append(_when(tf.equal(step % group.every, 0), run_group))
        health = [
            tf.constant(1.0),  # a gradient step attempted
            tf.add_n([output["applied"] for output in outputs]),
            tf.reduce_max([output["nonfinite"] for output in outputs]),
            tf.reduce_max([output["nonfinite_loss"] for output in outputs]),
        ]
        if train:
            applies = [
                count + tf.cast(output["applied"], tf.int64)
                for count, output in zip(applies, outputs, strict=True)
            ]
        return {"groups": outputs, "health": health}, applies

    def _group_step(
        self, index: int, batch: Batch, applies: tf.Tensor, train: bool, optimistic: bool
    ) -> dict:
        group = self.groups[index]
        with tf.GradientTape() as tape:
            loss, extras = group.loss_fn(batch)
        grads = tape.gradient(loss, group.variables)
        missing = [_name(v) for v, g in zip(group.variables, grads, strict=True) if g is None]
        if missing:
            raise ValueError(f"The loss does not depend on these variables: {missing}.")
        # A NaN or inf in any gradient makes the global norm NaN or inf: one test on a number
        # the step needs anyway, not another pass over every gradient. (Gradients so large that
        # their squares overflow count as non-finite too: no update could use them.)
        grad_norm = tf.linalg.global_norm(grads)
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm))
        metrics = {"loss": loss, "grad_norm": grad_norm}
        if train:
            metrics["learning_rate"] = tf.identity(group.optimizer.learning_rate)  # this step's

        # A non-finite step reaches neither the optimizer nor a processor with state (an
        # accumulation keeps its good parts): the variables keep their last good values and the
        # caller decides whether to stop or carry on (see `Health.nonfinite_steps`). A branch
        # costs more than the arithmetic of a small step under XLA, so a stateless processor
        # (clipping) runs outside it, and a step applies in one branch, not two.
        processor = group.gradient_processor
        if not train:

            def process():
                processed, release, processor_metrics = processor(grads, group.variables)
                pushed = [tf.where(release, g, tf.zeros_like(g)) for g in processed]
                return pushed, release, _as_metrics(processor_metrics)

            def skip():
                nothing = [tf.zeros_like(g) for g in grads]
                return nothing, tf.constant(False), _zero_metrics(processor)

            result, release, processor_metrics = tf.cond(finite, process, skip)
        elif processor.variables:

            def process_and_apply():
                processed, release, processor_metrics = processor(grads, group.variables)
                updated = tf.cond(
                    release,
                    lambda: self._apply(index, processed, applies + 1),
                    lambda: tf.constant(False),
                )
                return updated, release, _as_metrics(processor_metrics)

            def skip():
                return tf.constant(False), tf.constant(False), _zero_metrics(processor)

            result, release, processor_metrics = tf.cond(finite, process_and_apply, skip)
        else:
            processed, release, processor_metrics = processor(grads, group.variables)
            if optimistic:  # `release` is True (`_releases_every_step`)
                # Applied whatever `finite` says: a non-finite step rolls the call back (`run`).
                result = self._apply(index, processed, applies + 1)
            else:
                release = tf.logical_and(finite, release)
                result = tf.cond(
                    release,
                    lambda: self._apply(index, processed, applies + 1),
                    lambda: tf.constant(False),
                )
        output = {"target_updates": tf.cast(result, tf.float32)} if train else {"gradients": result}
        metrics = {**metrics, **extras, **processor_metrics}
        return {
            **output,
            # A non-finite step counts in the health and adds nothing to the averages.
            "metrics": {
                k: tf.where(finite, tf.cast(v, tf.float32), 0.0) for k, v in metrics.items()
            },
            "ran": tf.cast(finite, tf.float32),
            "applied": tf.cast(release, tf.float32),
            "nonfinite": 1.0 - tf.cast(finite, tf.float32),
            "nonfinite_loss": 1.0 - tf.cast(tf.math.is_finite(loss), tf.float32),
        }

    def _apply(self, index: int, grads: list[tf.Tensor], step: tf.Tensor) -> tf.Tensor:
        """Applies one group's gradients; `step` is this apply's number for its target updater
        (from 1). Whether the target was updated."""
        group = self.groups[index]
        group.optimizer.apply(grads, group.variables)
        return group.target_updater(group.online_variables, group.target_variables, step)

    def _nonfinite_variables(self) -> tf.Tensor:
        """1.0 when a finite update still overflowed a variable (caught before any save)."""
        variables = {id(v): v for group in self.groups for v in group.variables}
        return 1.0 - tf.cast(_all_finite(list(variables.values())), tf.float32)


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


def _as_metrics(metrics: Metrics) -> Metrics:
    return {name: tf.cast(value, tf.float32) for name, value in metrics.items()}


def _zero_metrics(processor: GradientProcessor) -> Metrics:
    """What a processor reports for a step it did not see."""
    return {name: tf.constant(0.0) for name in processor.metric_names}


def _releases_every_step(processor: GradientProcessor, variables: Sequence[tf.Variable]) -> bool:
    """Whether `processor` releases its gradients at every step, as its trace shows."""
    if processor.variables:
        return False
    specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
    trace = tf.function(lambda grads: processor(grads, variables)[1], autograph=False)
    release = tf.get_static_value(trace.get_concrete_function(specs).structured_outputs)
    return release is not None and bool(release)


def _all_finite(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(x)) for x in tensors])


def _name(variable: tf.Variable) -> str:
    """Keras variables have a full `path`; plain tf.Variables only a `name`."""
    return getattr(variable, "path", variable.name)
