"""The one update pipeline: loss -> gradients -> process -> apply -> target update.

Every gradient step of every agent goes through `Learner`. A call runs `k` gradient steps inside
one compiled function (a `tf.while_loop` over a stack of `k` batches), because crossing into
TensorFlow costs about as much as a whole small-network step. The step never writes summaries:
it returns metric tensors, averaged over the `k` steps, and the runner logs them.
"""

from collections.abc import Callable, Sequence

import gin
import keras
import tensorflow as tf

from framework.parts import optimizers  # noqa: F401  (registers the Keras optimizers with gin)
from framework.parts.gradient_processors import GradientProcessor, Identity
from framework.parts.target_updaters import NoUpdate, TargetUpdater

Batch = dict[str, tf.Tensor]
Metrics = dict[str, tf.Tensor]
LossFn = Callable[[Batch], tuple[tf.Tensor, Metrics]]

# Metrics that count events over the k steps of a call; every other metric is averaged.
COUNTED_METRICS = (
    "nonfinite_steps",
    "nonfinite_losses",
    "applied_updates",
    "target_updates",
    "nonfinite_variables",
)


@gin.configurable(allowlist=["jit_compile"])
class Learner(tf.Module):
    """Owns the optimizer step for a set of variables and, optionally, their target copies.

    Args:
      loss_fn: maps a batch to `(loss, extras)`; called under the gradient tape.
      variables: the trainable variables the loss is minimised over.
      optimizer: a Keras optimizer; it is built here so that its slots exist before any
        checkpoint restore (an unbuilt optimizer silently skips restoring them).
      gradient_processor: clipping / accumulation between `tape.gradient` and `apply`.
      target_updater: how `target_variables` follow `online_variables` after each applied update.
      jit_compile: compile the step with XLA (pays for fixed-shape batches, e.g. replay).
      batch_spec: `tf.TensorSpec`s of the stacked batches `run` takes, leading axis first.
    """

    def __init__(
        self,
        loss_fn: LossFn,
        variables: Sequence[tf.Variable],
        optimizer: keras.optimizers.Optimizer,
        gradient_processor: GradientProcessor | None = None,
        target_updater: TargetUpdater | None = None,
        online_variables: Sequence[tf.Variable] = (),
        target_variables: Sequence[tf.Variable] = (),
        jit_compile: bool = False,
        batch_spec: dict[str, tf.TensorSpec] | None = None,
    ):
        super().__init__(name="learner")
        self._loss_fn = loss_fn
        self._variables = list(variables)
        self.optimizer = optimizer
        self.optimizer.build(self._variables)
        # A constant learning rate is a variable of the optimizer, so a checkpoint would bring
        # back the old value over a newly configured one; `restored` puts the config's back.
        configured = optimizer.get_config()["learning_rate"]
        self._constant_learning_rate = configured if isinstance(configured, float) else None
        self.gradient_processor = gradient_processor or Identity()
        self.gradient_processor.build(self._variables)
        self.target_updater = target_updater or NoUpdate()
        self._online_variables = list(online_variables)
        self._target_variables = list(target_variables)
        self.target_updater.check(self._online_variables, self._target_variables)
        self.applied_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        # With a spec (None for dimensions that vary, such as episode length) the step is traced
        # once; otherwise on the first call and once more for varying shapes.
        signature = None if batch_spec is None else [batch_spec]
        self._run = tf.function(
            self._run_steps,
            jit_compile=jit_compile,
            input_signature=signature,
            reduce_retracing=signature is None,
        )

    def restored(self) -> None:
        """Call after a checkpoint restore: the configured learning rate wins over the saved."""
        if self._constant_learning_rate is not None:
            self.optimizer.learning_rate = self._constant_learning_rate

    def run(self, batches: Batch) -> Metrics:
        """Runs `k` gradient steps, one per batch stacked on the leading axis of every array."""
        return self._run(batches)

    @property
    def tracing_count(self) -> int:
        """How often the compiled step was traced (tests check that it stays small)."""
        return self._run.experimental_get_tracing_count()

    def _run_steps(self, batches: Batch) -> Metrics:
        num_steps = tf.shape(tf.nest.flatten(batches)[0])[0]

        def batch_at(index):
            return tf.nest.map_structure(lambda x: x[index], batches)

        def body(index, totals):
            metrics = self._step(batch_at(index))
            return index + 1, {key: totals[key] + metrics[key] for key in totals}

        first = self._step(batch_at(0))
        if tf.nest.flatten(batches)[0].shape[0] == 1:  # one step (on-policy): no loop needed
            return {**first, "nonfinite_variables": self._nonfinite_variables()}
        _, totals = tf.while_loop(lambda index, _: index < num_steps, body, (1, first))
        # Averages over the finite steps only: a skipped step's NaNs would hide all the others.
        count = tf.maximum(tf.cast(num_steps, tf.float32) - totals["nonfinite_steps"], 1.0)
        metrics = {
            key: value if key in COUNTED_METRICS else value / count for key, value in totals.items()
        }
        return {**metrics, "nonfinite_variables": self._nonfinite_variables()}

    def _nonfinite_variables(self) -> tf.Tensor:
        """1.0 when a finite update still overflowed a variable (caught before any save)."""
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in self._variables])
        return 1.0 - tf.cast(finite, tf.float32)

    def _step(self, batch: Batch) -> Metrics:
        with tf.GradientTape() as tape:
            loss, extras = self._loss_fn(batch)
        grads = tape.gradient(loss, self._variables)
        missing = [
            getattr(v, "path", v.name)
            for v, g in zip(self._variables, grads, strict=True)
            if g is None
        ]
        if missing:
            raise ValueError(f"The loss does not depend on these variables: {missing}.")
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(x)) for x in [loss, *grads]])
        # A non-finite step reaches neither the processor (an accumulation keeps its good
        # parts) nor the optimizer: the variables keep their last good values and the caller
        # decides whether to stop or carry on (see `nonfinite_steps`).
        processed, apply_now, processor_metrics = tf.cond(
            finite, lambda: self._process(grads), lambda: self._skip(grads)
        )
        learning_rate = tf.identity(self.optimizer.learning_rate)  # the rate this step uses
        target_updated = tf.cond(
            apply_now, lambda: self._apply(processed), lambda: tf.constant(False)
        )
        averaged = {
            "loss": loss,
            "grad_norm": tf.linalg.global_norm(grads),
            "learning_rate": learning_rate,
            **extras,
            **processor_metrics,
        }
        averaged = {  # a non-finite step counts below and adds nothing to the averages
            key: tf.where(finite, tf.cast(value, tf.float32), 0.0)
            for key, value in averaged.items()
        }
        counted = {
            "nonfinite_steps": 1.0 - tf.cast(finite, tf.float32),
            "nonfinite_losses": 1.0 - tf.cast(tf.math.is_finite(loss), tf.float32),
            "applied_updates": tf.cast(apply_now, tf.float32),
            "target_updates": tf.cast(target_updated, tf.float32),
        }
        return {**averaged, **counted}

    def _process(self, grads: list[tf.Tensor]):
        processed, apply_now, metrics = self.gradient_processor(grads, self._variables)
        return processed, apply_now, {k: tf.cast(v, tf.float32) for k, v in metrics.items()}

    def _skip(self, grads: list[tf.Tensor]):
        metrics = {name: tf.constant(0.0) for name in self.gradient_processor.metric_names}
        return [tf.zeros_like(g) for g in grads], tf.constant(False), metrics

    def _apply(self, grads: list[tf.Tensor]) -> tf.Tensor:
        self.optimizer.apply(grads, self._variables)
        step = self.applied_updates.assign_add(1)
        return self.target_updater(self._online_variables, self._target_variables, step)
