"""Tests for framework/compiled/step_wrappers.py on the one-weight linear model of test_learner.py:
prediction w * x, loss mean((w x - y)^2); with x = [1, 2], y = [1, 1] an SGD step (lr 0.1) maps
w -> 0.5 w + 0.3, so from w = 2: 2 -> 1.3 -> 0.95 -> 0.775."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.agent import Health
from framework.compiled.step_wrappers import StopWhen
from framework.learner import Learner, UpdateGroup

X, Y = [1.0, 2.0], [1.0, 1.0]
SPEC = tf.TensorSpec([None, 2], tf.float32)


def _batches(steps: int) -> dict[str, np.ndarray]:
    return {"x": np.array([X] * steps, np.float32), "y": np.array([Y] * steps, np.float32)}


def _group(w: tf.Variable, **kwargs) -> UpdateGroup:
    def loss_fn(batch):
        residual = w * batch["x"] - batch["y"]  # [2]
        extras = {"w": tf.identity(w), "per_sample/error": residual}
        return tf.reduce_mean(tf.square(residual)), extras

    return UpdateGroup(loss_fn, [w], keras.optimizers.SGD(0.1), **kwargs)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_stop_holds_its_step_back_ends_the_call_and_leaves_skipped_rows_at_zero(jit_compile):
    w = tf.Variable(2.0)
    learner = Learner(
        _group(w, name="q"),
        jit_compile=jit_compile,
        batch_spec={"x": SPEC, "y": SPEC},
        per_sample=True,
        stop=StopWhen(lambda extras: extras["w"] < 1.0, group="q"),
    )
    metrics, health = learner.run(_batches(4))
    # w = 2 and 1.3 apply; step 3 sees w = 0.95 < 1: it stops, unapplied; step 4 never runs.
    np.testing.assert_allclose(w.numpy(), 0.95, rtol=1e-6)
    assert Health.from_tensor(health) == Health(gradient_steps=3, applied_updates=2)
    assert float(metrics["steps_run"]) == 3.0 and int(learner.steps.numpy()) == 3
    # The stopping step computed its loss: the three losses 5, 1.325, 0.40625 average.
    np.testing.assert_allclose(metrics["q/loss"], (5.0 + 1.325 + 0.40625) / 3, rtol=1e-5)
    # Residuals [w - 1, 2 w - 1] of the three steps that ran; the skipped step's row is zero.
    np.testing.assert_allclose(
        learner.per_sample["q/error"], [[1.0, 3.0], [0.3, 1.6], [-0.05, 0.9], [0.0, 0.0]], atol=1e-6
    )
    # The next call starts afresh: w = 0.95 stops its first step at once.
    _, health = learner.run(_batches(2))
    assert Health.from_tensor(health) == Health(gradient_steps=1)
    assert float(w.numpy()) == pytest.approx(0.95)


def test_a_learner_without_a_stop_logs_no_steps_run():
    metrics, _ = Learner(_group(tf.Variable(2.0))).run(_batches(2))
    assert "steps_run" not in metrics


def test_a_stop_names_a_group_that_runs_every_step():
    with pytest.raises(ValueError, match="'critic' must be an update group"):
        Learner(_group(tf.Variable(2.0), name="q"), stop=StopWhen(lambda e: e["w"] < 1, "critic"))
    delayed = [_group(tf.Variable(2.0), name="q"), _group(tf.Variable(2.0), name="p", every=2)]
    with pytest.raises(ValueError, match="runs every step"):
        Learner(delayed, stop=StopWhen(lambda e: e["w"] < 1, "p"))
