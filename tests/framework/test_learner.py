"""Tests for framework/learner.py on a one-weight linear model whose steps are worked out by hand.

Model: prediction w * x, loss = mean((w x - y)^2), gradient dL/dw = mean(2 (w x - y) x).
With x = [1, 2], y = [1, 1]: dL/dw = 5 w - 3, so an SGD step (lr 0.1) maps w -> 0.5 w + 0.3,
and from w0 = 2: w_k = 0.6 + 1.4 * 0.5^k, i.e. 2 -> 1.3 -> 0.95 -> 0.775.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.parts.gradient_processors import Accumulate
from framework.learner import Learner
from framework.parts.target_updaters import HardUpdate, SoftUpdate

X, Y = [1.0, 2.0], [1.0, 1.0]


def _batches(xs, ys):
    """`xs`, `ys`: one row per step; stacked on the leading (step) axis."""
    return {"x": np.asarray(xs, np.float32), "y": np.asarray(ys, np.float32)}


def _x_only(xs):
    return {"x": np.asarray(xs, np.float32)}


def _linear_learner(w, optimizer=None, **kwargs):
    def loss_fn(batch):
        return tf.reduce_mean(tf.square(w * batch["x"] - batch["y"])), {}

    return Learner(loss_fn, [w], optimizer or keras.optimizers.SGD(learning_rate=0.1), **kwargs)


def test_one_step_is_plain_sgd():
    w = tf.Variable(2.0)
    metrics = _linear_learner(w).run(_batches([X], [Y]))
    # residual w x - y = [1, 3]: loss = (1 + 9) / 2 = 5, grad = mean(2*1*1, 2*3*2) = 7.
    np.testing.assert_allclose(w.numpy(), 2.0 - 0.1 * 7.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"].numpy(), 5.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["grad_norm"].numpy(), 7.0, rtol=1e-6)
    assert float(metrics["applied_updates"]) == 1.0
    assert float(metrics["nonfinite_steps"]) == 0.0


def test_k_stacked_batches_run_k_steps_and_average_metrics():
    w = tf.Variable(2.0)
    learner = _linear_learner(w)
    metrics = learner.run(_batches([X] * 3, [Y] * 3))
    # w: 2 -> 1.3 -> 0.95 -> 0.775 (see the module docstring).
    np.testing.assert_allclose(w.numpy(), 0.775, rtol=1e-6)
    # Losses: 5; residual [0.3, 1.6] -> 1.325; residual [-0.05, 0.9] -> 0.40625. Mean 2.24375.
    np.testing.assert_allclose(metrics["loss"].numpy(), (5.0 + 1.325 + 0.40625) / 3, rtol=1e-5)
    # Grads 7, 3.5, 1.75 (grad = 5 w - 3): averaged, not summed.
    np.testing.assert_allclose(metrics["grad_norm"].numpy(), (7.0 + 3.5 + 1.75) / 3, rtol=1e-5)
    assert float(metrics["applied_updates"]) == 3.0  # counted, not averaged
    assert int(learner.applied_updates.numpy()) == 3


def test_accumulate_applies_once_with_the_summed_gradient():
    w = tf.Variable(2.0)
    learner = _linear_learner(w, gradient_processor=Accumulate(steps=2))
    # Both gradients at w = 2: g1 = 7 (as above); x = [0, 1], y = [0, 0]: residual [0, 2],
    # g2 = mean(0, 2*2*1) = 2.  One SGD step on the sum: 2 - 0.1 * (7 + 2) = 1.1.
    metrics = learner.run(_batches([X, [0.0, 1.0]], [Y, [0.0, 0.0]]))
    np.testing.assert_allclose(w.numpy(), 1.1, rtol=1e-6)
    assert float(metrics["applied_updates"]) == 1.0
    assert int(learner.applied_updates.numpy()) == 1


def test_hard_update_target_follows_after_applies():
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    learner = _linear_learner(
        w, target_updater=HardUpdate(period=2), online_variables=[w], target_variables=[w_target]
    )
    metrics = learner.run(_batches([X] * 3, [Y] * 3))
    # Copies after applied update 2 (w = 0.95), not after 1 or 3 (w = 0.775).
    np.testing.assert_allclose(w_target.numpy(), 0.95, rtol=1e-6)
    assert float(metrics["target_updates"]) == 1.0


def test_soft_update_target_follows_after_applies():
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    learner = _linear_learner(
        w, target_updater=SoftUpdate(tau=0.5), online_variables=[w], target_variables=[w_target]
    )
    metrics = learner.run(_batches([X] * 2, [Y] * 2))
    # After update 1: 0.5 * 0 + 0.5 * 1.3 = 0.65; after update 2: 0.5 * 0.65 + 0.5 * 0.95 = 0.8.
    np.testing.assert_allclose(w_target.numpy(), 0.8, rtol=1e-6)
    assert float(metrics["target_updates"]) == 2.0


def test_target_moves_only_when_accumulated_update_is_applied():
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    learner = _linear_learner(
        w,
        gradient_processor=Accumulate(steps=2),
        target_updater=HardUpdate(period=1),
        online_variables=[w],
        target_variables=[w_target],
    )
    metrics = learner.run(_batches([X], [Y]))
    assert float(w_target.numpy()) == 0.0  # nothing applied yet
    assert float(metrics["target_updates"]) == 0.0
    learner.run(_batches([X], [Y]))
    np.testing.assert_allclose(w_target.numpy(), 2.0 - 0.1 * 14.0, rtol=1e-6)  # 2 - lr*(7+7)


def test_nonfinite_step_leaves_variables_unchanged():
    w = tf.Variable(2.0)
    learner = _linear_learner(w)
    metrics = learner.run(_batches([[np.nan, 2.0]], [Y]))
    assert float(w.numpy()) == 2.0
    assert float(metrics["nonfinite_steps"]) == 1.0
    assert float(metrics["applied_updates"]) == 0.0
    assert int(learner.applied_updates.numpy()) == 0


def test_good_step_after_nonfinite_one_still_applies():
    w = tf.Variable(2.0)
    metrics = _linear_learner(w).run(_batches([[np.nan, 2.0], X], [Y, Y]))
    # The NaN step is skipped; the second is the plain first step: 2 - 0.1 * 7.
    np.testing.assert_allclose(w.numpy(), 1.3, rtol=1e-6)
    assert float(metrics["nonfinite_steps"]) == 1.0
    assert float(metrics["applied_updates"]) == 1.0


def test_no_retracing_for_fresh_batches():
    w = tf.Variable(0.5)
    learner = _linear_learner(w)
    rng = np.random.default_rng(0)
    for _ in range(50):  # fresh numpy arrays, same shape
        learner.run(_batches(rng.uniform(size=(2, 4)), rng.uniform(size=(2, 4))))
    for steps, batch_size in [(1, 3), (3, 5), (2, 8), (4, 1)]:  # reduce_retracing generalises
        learner.run(
            _batches(rng.uniform(size=(steps, batch_size)), rng.uniform(size=(steps, batch_size)))
        )
    # One trace per shape would give 5; one per call about 54.
    assert learner.tracing_count <= 2
    assert int(learner.applied_updates.numpy()) == 50 * 2 + 1 + 3 + 2 + 4


def _schedule_learner():
    """loss = mean(v * x) with x = [1, 1]: dL/dv = 1, so each SGD step moves v by exactly -lr."""
    v = tf.Variable(0.0)
    schedule = keras.optimizers.schedules.ExponentialDecay(
        0.1, decay_steps=2, decay_rate=0.5, staircase=True
    )
    learner = Learner(
        lambda batch: (tf.reduce_mean(v * batch["x"]), {}),
        [v],
        keras.optimizers.SGD(learning_rate=schedule),
    )
    return v, learner


def test_learning_rate_schedule_is_used_by_the_updates():
    v, learner = _schedule_learner()
    moves = []
    for _ in range(5):
        before = float(v.numpy())
        learner.run(_x_only([[1.0, 1.0]]))
        moves.append(before - float(v.numpy()))
    # Update n (1-based) runs at optimizer iteration n - 1: lr = 0.1 * 0.5^floor((n - 1) / 2).
    np.testing.assert_allclose(moves, [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-5)


def test_learning_rate_metric_is_the_rate_used_in_the_step():
    _, learner = _schedule_learner()
    reported = [float(learner.run(_x_only([[1.0, 1.0]]))["learning_rate"]) for _ in range(5)]
    # The rates applied (see the test above): 0.1 * 0.5^floor((n - 1) / 2) for n = 1..5.
    np.testing.assert_allclose(reported, [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-5)


def test_unused_keras_variable_raises_naming_it():
    w = tf.Variable(2.0)
    unused = keras.Variable(1.0, name="unused_weight")
    learner = Learner(
        lambda batch: (tf.reduce_mean(w * batch["x"]), {}),
        [w, unused],
        keras.optimizers.SGD(learning_rate=0.1),
    )
    with pytest.raises(ValueError, match="unused_weight"):
        learner.run(_x_only([[1.0]]))


def test_unused_tf_variable_raises_naming_it():
    w, unused = tf.Variable(2.0), tf.Variable(1.0, name="unused_weight")
    learner = Learner(
        lambda batch: (tf.reduce_mean(w * batch["x"]), {}),
        [w, unused],
        keras.optimizers.SGD(learning_rate=0.1),
    )
    with pytest.raises(ValueError, match="unused_weight"):
        learner.run(_x_only([[1.0]]))


def test_configured_learning_rate_wins_over_a_restored_one(tmp_path):
    # A constant learning rate is an optimizer variable: restoring a checkpoint brings the old
    # value back over a newly configured one unless the learner puts the config's back.
    w = tf.Variable(1.0)
    saved = _linear_learner(w, optimizer=keras.optimizers.SGD(learning_rate=0.5))
    path = tf.train.Checkpoint(learner=saved).save(str(tmp_path / "ckpt"))
    resumed = _linear_learner(w, optimizer=keras.optimizers.SGD(learning_rate=0.1))
    tf.train.Checkpoint(learner=resumed).restore(path)
    assert float(resumed.optimizer.learning_rate) == pytest.approx(0.5)
    resumed.restored()
    assert float(resumed.optimizer.learning_rate) == pytest.approx(0.1)
