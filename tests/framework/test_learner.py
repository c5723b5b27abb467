"""Tests for framework/learner.py on a one-weight linear model whose steps are worked out by hand.

Model: prediction w * x, loss = mean((w x - y)^2), gradient dL/dw = mean(2 (w x - y) x).
With x = [1, 2], y = [1, 1]: dL/dw = 5 w - 3, so an SGD step (lr 0.1) maps w -> 0.5 w + 0.3,
and from w0 = 2: w_k = 0.6 + 1.4 * 0.5^k, i.e. 2 -> 1.3 -> 0.95 -> 0.775 -> 0.6875.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.agent import HEALTH_FIELDS, Health
from framework.drivers.gradient_halves import GlobalApply, WorkerGradients
from framework.learner import Learner, UpdateGroup, copy_variables
from framework.parts.gradient_processors import Accumulate, Chain, ClipByGlobalNorm
from framework.parts.target_updaters import HardUpdate, SoftUpdate
from framework.storage.checkpointing import CheckpointStore

X, Y = [1.0, 2.0], [1.0, 1.0]


def _batches(xs, ys):
    """`xs`, `ys`: one row per step; stacked on the leading (step) axis."""
    return {"x": np.asarray(xs, np.float32), "y": np.asarray(ys, np.float32)}


def _x_only(xs):
    return {"x": np.asarray(xs, np.float32)}


def _squared_error(w):
    def loss_fn(batch):
        return tf.reduce_mean(tf.square(w * batch["x"] - batch["y"])), {}

    return loss_fn


def _linear_group(w, optimizer=None, **kwargs):
    optimizer = optimizer or keras.optimizers.SGD(learning_rate=0.1)
    return UpdateGroup(_squared_error(w), [w], optimizer, **kwargs)


def _linear_learner(w, optimizer=None, batch_spec=None, **kwargs):
    return Learner(_linear_group(w, optimizer, **kwargs), batch_spec=batch_spec)


def _run(learner, batches):
    metrics, health = learner.run(batches)
    return metrics, Health.from_tensor(health)


def test_one_step_is_plain_sgd():
    w = tf.Variable(2.0)
    metrics, health = _run(_linear_learner(w), _batches([X], [Y]))
    # residual w x - y = [1, 3]: loss = (1 + 9) / 2 = 5, grad = mean(2*1*1, 2*3*2) = 7.
    np.testing.assert_allclose(w.numpy(), 2.0 - 0.1 * 7.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"], 5.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["grad_norm"], 7.0, rtol=1e-6)
    assert health == Health(gradient_steps=1, applied_updates=1)
    assert "applied_updates" not in metrics and "nonfinite_steps" not in metrics


def test_k_stacked_batches_run_k_steps_and_average_metrics():
    w = tf.Variable(2.0)
    learner = _linear_learner(w)
    metrics, health = _run(learner, _batches([X] * 3, [Y] * 3))
    # w: 2 -> 1.3 -> 0.95 -> 0.775 (see the module docstring).
    np.testing.assert_allclose(w.numpy(), 0.775, rtol=1e-6)
    # Losses: 5; residual [0.3, 1.6] -> 1.325; residual [-0.05, 0.9] -> 0.40625. Mean 2.24375.
    np.testing.assert_allclose(metrics["loss"], (5.0 + 1.325 + 0.40625) / 3, rtol=1e-5)
    # Grads 7, 3.5, 1.75 (grad = 5 w - 3): averaged, not summed.
    np.testing.assert_allclose(metrics["grad_norm"], (7.0 + 3.5 + 1.75) / 3, rtol=1e-5)
    assert health == Health(gradient_steps=3, applied_updates=3)  # counted, not averaged
    assert int(learner.applied_updates.numpy()) == 3
    assert int(learner.steps.numpy()) == 3


def test_accumulate_applies_once_with_the_summed_gradient():
    w = tf.Variable(2.0)
    learner = _linear_learner(w, gradient_processor=Accumulate(steps=2))
    # Both gradients at w = 2: g1 = 7 (as above); x = [0, 1], y = [0, 0]: residual [0, 2],
    # g2 = mean(0, 2*2*1) = 2.  One SGD step on the sum: 2 - 0.1 * (7 + 2) = 1.1.
    _, health = _run(learner, _batches([X, [0.0, 1.0]], [Y, [0.0, 0.0]]))
    np.testing.assert_allclose(w.numpy(), 1.1, rtol=1e-6)
    assert health.applied_updates == 1
    assert int(learner.applied_updates.numpy()) == 1


def test_hard_update_target_follows_after_applies():
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    learner = _linear_learner(
        w, target_updater=HardUpdate(period=2), online_variables=[w], target_variables=[w_target]
    )
    metrics, _ = _run(learner, _batches([X] * 3, [Y] * 3))
    # Copies after applied update 2 (w = 0.95), not after 1 or 3 (w = 0.775).
    np.testing.assert_allclose(w_target.numpy(), 0.95, rtol=1e-6)
    assert int(metrics["target_updates"]) == 1
    metrics, _ = _run(learner, _batches([X], [Y]))  # update 4 copies again: cumulative count 2
    assert int(metrics["target_updates"]) == 2


def test_soft_update_target_follows_after_applies():
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    learner = _linear_learner(
        w, target_updater=SoftUpdate(tau=0.5), online_variables=[w], target_variables=[w_target]
    )
    metrics, _ = _run(learner, _batches([X] * 2, [Y] * 2))
    # After update 1: 0.5 * 0 + 0.5 * 1.3 = 0.65; after update 2: 0.5 * 0.65 + 0.5 * 0.95 = 0.8.
    np.testing.assert_allclose(w_target.numpy(), 0.8, rtol=1e-6)
    assert int(metrics["target_updates"]) == 2


def test_target_moves_only_when_accumulated_update_is_applied():
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    learner = _linear_learner(
        w,
        gradient_processor=Accumulate(steps=2),
        target_updater=HardUpdate(period=1),
        online_variables=[w],
        target_variables=[w_target],
    )
    metrics, _ = _run(learner, _batches([X], [Y]))
    assert float(w_target.numpy()) == 0.0  # nothing applied yet
    assert int(metrics["target_updates"]) == 0
    metrics, _ = _run(learner, _batches([X], [Y]))
    np.testing.assert_allclose(w_target.numpy(), 2.0 - 0.1 * 14.0, rtol=1e-6)  # 2 - lr*(7+7)
    assert int(metrics["target_updates"]) == 1


def test_nonfinite_step_leaves_variables_unchanged():
    w = tf.Variable(2.0)
    learner = _linear_learner(w)
    _, health = _run(learner, _batches([[np.nan, 2.0]], [Y]))
    assert float(w.numpy()) == 2.0
    # The NaN input makes the loss NaN too: a non-finite loss, not only gradient.
    assert health == Health(gradient_steps=1, nonfinite_steps=1, nonfinite_losses=1)
    assert int(learner.applied_updates.numpy()) == 0


def test_good_step_after_nonfinite_one_still_applies():
    w = tf.Variable(2.0)
    metrics, health = _run(_linear_learner(w), _batches([[np.nan, 2.0], X], [Y, Y]))
    # The NaN step is skipped; the second is the plain first step: 2 - 0.1 * 7.
    np.testing.assert_allclose(w.numpy(), 1.3, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"], 5.0, rtol=1e-6)  # the good step only
    assert health.nonfinite_steps == 1
    assert health.applied_updates == 1


def test_overflowed_variable_is_reported():
    w = tf.Variable(3e38)  # finite, but w * x overflows: loss and gradient are inf
    _, health = _run(_linear_learner(w), _batches([X], [Y]))
    assert health.nonfinite_steps == 1 and health.nonfinite_variables == 0
    w.assign(np.inf)  # as if a finite update had overflowed it
    _, health = _run(_linear_learner(w), _batches([X], [Y]))
    assert health.nonfinite_variables == 1


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


def test_batch_spec_traces_exactly_once():
    w = tf.Variable(0.5)
    spec = tf.TensorSpec([None, None], tf.float32)  # [steps, batch], both varying
    learner = _linear_learner(w, batch_spec={"x": spec, "y": spec})
    rng = np.random.default_rng(0)
    shapes = [(2, 4)] * 20 + [(1, 3), (3, 5), (2, 8), (4, 1)]
    for shape in shapes:
        learner.run(_batches(rng.uniform(size=shape), rng.uniform(size=shape)))
    assert learner.tracing_count == 1
    assert int(learner.steps.numpy()) == sum(steps for steps, _ in shapes)


def _schedule_learner():
    """loss = mean(v * x) with x = [1, 1]: dL/dv = 1, so each SGD step moves v by exactly -lr."""
    v = tf.Variable(0.0)
    schedule = keras.optimizers.schedules.ExponentialDecay(
        0.1, decay_steps=2, decay_rate=0.5, staircase=True
    )
    group = UpdateGroup(
        lambda batch: (tf.reduce_mean(v * batch["x"]), {}),
        [v],
        keras.optimizers.SGD(learning_rate=schedule),
    )
    return v, Learner(group)


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
    reported = [float(learner.run(_x_only([[1.0, 1.0]]))[0]["learning_rate"]) for _ in range(5)]
    # The rates applied (see the test above): 0.1 * 0.5^floor((n - 1) / 2) for n = 1..5.
    np.testing.assert_allclose(reported, [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-5)


@pytest.mark.parametrize("make_variable", [keras.Variable, tf.Variable])
def test_unused_variable_raises_naming_it(make_variable):
    w = tf.Variable(2.0)
    unused = make_variable(1.0, name="unused_weight")
    group = UpdateGroup(
        lambda batch: (tf.reduce_mean(w * batch["x"]), {}),
        [w, unused],
        keras.optimizers.SGD(learning_rate=0.1),
    )
    with pytest.raises(ValueError, match="unused_weight"):
        Learner(group).run(_x_only([[1.0]]))


def test_configured_learning_rate_wins_over_a_restored_one(tmp_path):
    # A constant learning rate is an optimizer variable: a plain restore brings the old value
    # back over a newly configured one; the checkpoint store puts the config's back, for a
    # learner anywhere in the state, without its owner doing anything.
    w = tf.Variable(1.0)
    saved = _linear_learner(w, optimizer=keras.optimizers.SGD(learning_rate=0.5))
    saved.run(_batches([X], [Y]))
    path = tf.train.Checkpoint(learner=saved).save(str(tmp_path / "ckpt"))
    store = CheckpointStore(str(tmp_path / "store"), str(tmp_path / "damaged"))
    store.save(1, {"agent": {"learner": saved}})

    resumed = _linear_learner(w, optimizer=keras.optimizers.SGD(learning_rate=0.1))
    tf.train.Checkpoint(learner=resumed).restore(path)
    assert float(resumed.groups[0].optimizer.learning_rate) == pytest.approx(0.5)
    assert int(resumed.steps.numpy()) == 1  # the step count (which drives `every`) is saved

    resumed = _linear_learner(w, optimizer=keras.optimizers.SGD(learning_rate=0.1))
    assert store.restore_latest({"agent": {"learner": resumed}})[0] == 1
    assert float(resumed.groups[0].optimizer.learning_rate) == pytest.approx(0.1)
    assert int(resumed.steps.numpy()) == 1


def _two_groups():
    """Critic: the linear model on `u` (lr 0.1). Actor: loss = v * u on `v` (lr 0.5, every 2),
    so dL/dv = u, read after the critic's update of the same step."""
    u, v = tf.Variable(2.0), tf.Variable(1.0)
    critic = UpdateGroup(
        _squared_error(u), [u], keras.optimizers.SGD(learning_rate=0.1), name="critic"
    )
    actor = UpdateGroup(
        lambda batch: (v * u, {"u": tf.identity(u)}),
        [v],
        keras.optimizers.SGD(learning_rate=0.5),
        every=2,
        name="actor",
    )
    return u, v, Learner([critic, actor])


def test_two_groups_run_in_order_and_the_delayed_one_every_second_step():
    u, v, learner = _two_groups()
    metrics, health = _run(learner, _batches([X] * 3, [Y] * 3))
    # Critic, every step: u 2 -> 1.3 -> 0.95 -> 0.775 (module docstring).
    np.testing.assert_allclose(u.numpy(), 0.775, rtol=1e-6)
    # Actor, step 2 only, after the critic's step 2 (u = 0.95): v = 1 - 0.5 * 0.95 = 0.525.
    # (At step 1 it would give 1 - 0.5 * 1.3 = 0.35; at step 3, 1 - 0.5 * 0.775 = 0.6125.)
    np.testing.assert_allclose(v.numpy(), 0.525, rtol=1e-6)
    assert health == Health(gradient_steps=3, applied_updates=3 + 1)
    # Averages per group over the steps it ran: the critic's 3, the actor's one.
    np.testing.assert_allclose(metrics["critic/loss"], (5.0 + 1.325 + 0.40625) / 3, rtol=1e-5)
    np.testing.assert_allclose(metrics["actor/loss"], 1.0 * 0.95, rtol=1e-6)
    np.testing.assert_allclose(metrics["actor/grad_norm"], 0.95, rtol=1e-6)
    np.testing.assert_allclose(metrics["actor/u"], 0.95, rtol=1e-6)
    np.testing.assert_allclose(metrics["critic/learning_rate"], 0.1, rtol=1e-6)
    np.testing.assert_allclose(metrics["actor/learning_rate"], 0.5, rtol=1e-6)
    assert "actor/target_updates" not in metrics  # no target updater: no count to log
    assert not {"loss", "grad_norm", "learning_rate"} & set(metrics)

    # Step 4 (due): u 0.775 -> 0.6875 first, then v = 0.525 - 0.5 * 0.6875 = 0.18125.
    _, health = _run(learner, _batches([X], [Y]))
    np.testing.assert_allclose(v.numpy(), 0.18125, rtol=1e-5)
    assert health.applied_updates == 2
    # Step 5 (not due): the actor neither moves nor counts as applied.
    _, health = _run(learner, _batches([X], [Y]))
    np.testing.assert_allclose(v.numpy(), 0.18125, rtol=1e-5)
    assert health.applied_updates == 1
    assert int(learner.applied_updates.numpy()) == 4 + 2 + 1


def _reading_groups(actor_every=1):
    """Critic: the linear model on `u` (lr 0.1), its residuals u x - y as a per-sample extra.
    Actor: loss = v * mean(the critic's residuals of this step) on `v` (lr 0.1), so dL/dv is
    that mean, computed before the critic's update of the step."""
    u, v = tf.Variable(2.0), tf.Variable(1.0)

    def critic_loss(batch):
        residual = u * batch["x"] - batch["y"]
        return tf.reduce_mean(tf.square(residual)), {"per_sample/residual": residual}

    def actor_loss(batch, earlier):
        del batch
        return v * tf.reduce_mean(earlier["critic"]["per_sample/residual"]), {}

    critic = UpdateGroup(critic_loss, [u], keras.optimizers.SGD(0.1), name="critic")
    actor = UpdateGroup(
        actor_loss,
        [v],
        keras.optimizers.SGD(0.1),
        every=actor_every,
        name="actor",
        reads=("critic",),
    )
    return u, v, [critic, actor]


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_group_reads_an_earlier_groups_extras_of_the_same_step(jit_compile):
    u, v, groups = _reading_groups()
    spec = tf.TensorSpec([None, 2], tf.float32)
    learner = Learner(groups, jit_compile=jit_compile, batch_spec={"x": spec, "y": spec})
    metrics, health = _run(learner, _batches([X] * 3, [Y] * 3))
    # u = 2, 1.3, 0.95 at the three steps (module docstring): residuals [u - 1, 2u - 1], means
    # 1.5 u - 1 = 2, 0.95, 0.425. v = 1 - 0.1 * (2 + 0.95 + 0.425) = 0.6625. (Read after the
    # critic's update, u = 1.3, 0.95, 0.775, they would give 1 - 0.1 * 1.6375 = 0.83625.)
    np.testing.assert_allclose(v.numpy(), 0.6625, rtol=1e-6)
    np.testing.assert_allclose(u.numpy(), 0.775, rtol=1e-6)
    np.testing.assert_allclose(metrics["actor/grad_norm"], (2 + 0.95 + 0.425) / 3, rtol=1e-6)
    assert health == Health(gradient_steps=3, applied_updates=6)
    assert "critic/per_sample/residual" not in metrics  # a value to read, not a metric
    # A worker's half reads the same values: at u = 2 (it applies nothing), the mean 2 a step.
    u.assign(2.0)
    gradients, _, _, _ = WorkerGradients(Learner(groups))(_batches([X] * 2, [Y] * 2))
    np.testing.assert_allclose(gradients[1][0], 2.0 + 2.0, rtol=1e-6)


def test_a_delayed_group_reads_the_extras_of_its_own_steps():
    _, v, groups = _reading_groups(actor_every=2)
    _run(Learner(groups), _batches([X] * 3, [Y] * 3))
    # The actor runs at step 2 only, reading that step's mean residual 0.95: v = 1 - 0.095.
    np.testing.assert_allclose(v.numpy(), 0.905, rtol=1e-6)


def test_reads_name_earlier_groups_that_run_whenever_the_reader_does():
    _, _, (critic, actor) = _reading_groups()
    with pytest.raises(ValueError, match="'critic', which is not a group before it"):
        Learner([actor, critic])
    critic.every = 2  # the actor, every step, would read steps the critic did not run
    with pytest.raises(ValueError, match="must be a multiple of 2"):
        Learner([critic, actor])
    actor.every = 4
    Learner([critic, actor])
    with pytest.raises(ValueError, match="sequence of group names"):
        _linear_group(tf.Variable(1.0), reads="critic")


def test_group_validation():
    w = tf.Variable(1.0)
    with pytest.raises(ValueError, match="every"):
        _linear_group(w, every=0)
    with pytest.raises(ValueError, match="distinct names"):
        Learner([_linear_group(w), _linear_group(tf.Variable(1.0))])


def test_worker_accumulates_pushes_and_pulls_the_global_weights():
    w_global, w_local = tf.Variable(2.0), tf.Variable(2.0)
    global_learner = _linear_learner(w_global)  # SGD, lr 0.1
    worker = _linear_learner(w_local, gradient_processor=Accumulate(steps=2))

    compute_gradients, apply_gradients = WorkerGradients(worker), GlobalApply(global_learner)
    # Gradients at w = 2 (as in the accumulate test above): g1 = 7, then g2 = 2.
    gradients, push_now, metrics, health = compute_gradients(_batches([X], [Y]))
    assert not bool(push_now)
    np.testing.assert_allclose(gradients[0][0], 0.0)  # held back by the accumulator
    np.testing.assert_allclose(metrics["loss"], 5.0, rtol=1e-6)
    assert Health.from_tensor(health) == Health(gradient_steps=1)
    gradients, push_now, _, _ = compute_gradients(_batches([[0.0, 1.0]], [[0.0, 0.0]]))
    assert bool(push_now)
    np.testing.assert_allclose(gradients[0][0], 7.0 + 2.0, rtol=1e-6)
    assert float(w_local.numpy()) == 2.0  # the worker applies nothing

    # The global learner applies the pushed sum: 2 - 0.1 * 9 = 1.1.
    health = Health.from_tensor(apply_gradients(gradients, environment_steps=0))
    np.testing.assert_allclose(w_global.numpy(), 1.1, rtol=1e-6)
    assert health == Health(applied_updates=1)
    copy_variables([w_global], [w_local])
    assert float(w_local.numpy()) == float(w_global.numpy())


def test_a_worker_computes_a_delayed_group_only_at_the_steps_it_is_due():
    # Group b runs every 2nd learner step, as in the learner's own call: of steps 1-3 only
    # step 2. Both losses have gradient 7 at w = 2 on (X, Y), and nothing is applied.
    w_a, w_b = tf.Variable(2.0), tf.Variable(2.0)
    groups = [
        _linear_group(w_a, name="a"),
        _linear_group(w_b, name="b", every=2),
    ]
    worker = WorkerGradients(Learner(groups))
    gradients, push_now, _, health = worker(_batches([X] * 3, [Y] * 3))
    assert bool(push_now)
    np.testing.assert_allclose([gradients[0][0], gradients[1][0]], [21.0, 7.0], rtol=1e-6)
    assert Health.from_tensor(health) == Health(gradient_steps=3)
    gradients, _, _, _ = worker(_batches([X], [Y]))  # step 4: both due
    np.testing.assert_allclose([gradients[0][0], gradients[1][0]], [7.0, 7.0], rtol=1e-6)


def test_apply_gradients_skips_nonfinite_and_empty_pushes():
    w = tf.Variable(2.0)
    apply_gradients = GlobalApply(_linear_learner(w))
    health = Health.from_tensor(apply_gradients([[tf.constant(np.nan)]], environment_steps=0))
    assert float(w.numpy()) == 2.0
    assert health == Health(nonfinite_steps=1)
    health = Health.from_tensor(apply_gradients([[tf.constant(0.0)]], 0))  # pushed nothing
    assert health.applied_updates == 0
    health = Health.from_tensor(apply_gradients([[tf.constant(7.0)]], 0))
    np.testing.assert_allclose(w.numpy(), 2.0 - 0.1 * 7.0, rtol=1e-6)
    assert health.applied_updates == 1
    assert apply_gradients.function.experimental_get_tracing_count() == 1  # one for all three


def test_copy_variables_checks_shapes():
    with pytest.raises(ValueError, match="shape mismatch"):
        copy_variables([tf.Variable([1.0, 2.0])], [tf.Variable(0.0)])
    with pytest.raises(ValueError, match="same structure"):
        copy_variables([tf.Variable(1.0)], [])


def test_health_from_tensor_and_sum():
    first = Health.from_tensor(tf.constant([3, 2, 1, 1, 0], tf.int64))
    assert first == Health(3, 2, 1, 1, 0)
    total = first + Health(gradient_steps=1, applied_updates=1, nonfinite_variables=1)
    assert total == Health(4, 3, 1, 1, 1)
    assert HEALTH_FIELDS[1] == "applied_updates"


@pytest.mark.parametrize("jit_compile", [False, True])
def test_xla_steps_match_the_hand_computed_ones_and_skip_nonfinite(jit_compile):
    w, w_target = tf.Variable(2.0), tf.Variable(0.0)
    spec = tf.TensorSpec([None, 2], tf.float32)
    learner = Learner(
        _linear_group(
            w,
            gradient_processor=ClipByGlobalNorm(max_norm=100.0),  # stateless: outside the branch
            target_updater=HardUpdate(period=2),
            online_variables=[w],
            target_variables=[w_target],
        ),
        jit_compile=jit_compile,
        batch_spec={"x": spec, "y": spec},
    )
    # Steps 1, 3 and 4 as in the module docstring (2 -> 1.3 -> 0.95 -> 0.775); step 2 is NaN.
    metrics, health = _run(learner, _batches([X, [np.nan, 2.0], X, X], [Y] * 4))
    np.testing.assert_allclose(w.numpy(), 0.775, rtol=1e-6)
    np.testing.assert_allclose(w_target.numpy(), 0.95, rtol=1e-6)  # after apply 2, not step 2
    np.testing.assert_allclose(metrics["loss"], (5.0 + 1.325 + 0.40625) / 3, rtol=1e-5)
    np.testing.assert_allclose(
        metrics["clip_global_norm/norm_after"], (7.0 + 3.5 + 1.75) / 3, rtol=1e-5
    )
    assert health == Health(
        gradient_steps=4, applied_updates=3, nonfinite_steps=1, nonfinite_losses=1
    )
    assert int(metrics["target_updates"]) == 1
    assert [int(v.numpy()) for v in (learner.steps, learner.applied_updates)] == [4, 3]
    # Under XLA the call ran unguarded, rolled back and ran again guarded: a second trace.
    assert learner.tracing_count == (2 if jit_compile else 1)


def _adam_learner(jit_compile: bool):
    """Adam, clipping in a Chain, a hard target and a loss that draws noise (as TD3's target
    smoothing does): every kind of state a training call changes."""
    w, w_target = tf.Variable([2.0, -1.0]), tf.Variable([0.0, 0.0])
    rng = tf.random.Generator.from_seed(7)

    def loss(batch):
        noise = 0.01 * rng.normal([2])
        prediction = w[0] * batch["x"] + w[1] + noise
        return tf.reduce_mean(tf.square(prediction - batch["y"])), {}

    group = UpdateGroup(
        loss,
        [w],
        keras.optimizers.Adam(0.1),
        Chain([ClipByGlobalNorm(max_norm=1.0)]),  # stateless: still optimistic
        HardUpdate(period=3),
        online_variables=[w],
        target_variables=[w_target],
    )
    spec = tf.TensorSpec([None, 2], tf.float32)
    learner = Learner(
        group, jit_compile=jit_compile, batch_spec={"x": spec, "y": spec}, loss_state=[rng.state]
    )
    state = [w, w_target, rng.state, learner.steps, learner.applied_updates]
    return learner, state + group.optimizer.variables


def test_xla_optimistic_steps_roll_back_exactly_to_the_guarded_result():
    """Stacked calls (optimistic under XLA) against the same steps one call each (a single step
    is always guarded): weights, target, generator, Adam's moments and step count, counters and
    health all agree, over calls with and without NaN/inf steps."""
    calls = [
        _batches([X, X], [Y, Y]),
        _batches([X, [np.nan, 2.0], X, [1.0, np.inf]], [Y] * 4),
        _batches([X] * 3, [Y] * 3),
    ]
    results = {}
    for stacked in (True, False):
        learner, state = _adam_learner(jit_compile=True)
        health = Health()
        for index, batch in enumerate(calls):
            steps = (
                [batch]
                if stacked
                else [{k: v[i : i + 1] for k, v in batch.items()} for i in range(len(batch["x"]))]
            )
            for step in steps:
                health = health + _run(learner, step)[1]
            if stacked and index == 0:
                assert learner.tracing_count == 1  # all finite: the guarded one never traced
        if stacked:
            assert learner.tracing_count == 2  # the NaN call ran again, guarded
        results[stacked] = ([v.numpy() for v in state], health)
    (optimistic, optimistic_health), (guarded, guarded_health) = results[True], results[False]
    assert (
        optimistic_health
        == guarded_health
        == Health(gradient_steps=9, applied_updates=7, nonfinite_steps=2, nonfinite_losses=2)
    )
    for expected, actual in zip(guarded, optimistic, strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_first_calls_count_the_gradient_steps_the_run_counts_a_rolled_back_one_none():
    # learner_report and benchmark take a learner's first calls out of its in-loop time by their
    # seconds and steps: the steps must be the ones the health (and the run) counted.
    learner, _ = _adam_learner(jit_compile=True)
    health = _run(learner, _batches([X, [np.nan, 2.0], X], [Y] * 3))[1]
    # The optimistic first call rolled back, the guarded one's 3 steps are the run's.
    assert health.gradient_steps == 3 and learner.first_call_steps == 3
    learner, _ = _adam_learner(jit_compile=True)
    _run(learner, _batches([X, X], [Y, Y]))
    _run(learner, _batches([X, X, X], [Y] * 3))  # not a first call: not counted again
    assert learner.first_call_steps == 2


def test_a_learner_whose_processor_holds_gradients_back_is_never_optimistic():
    w = tf.Variable(2.0)
    spec = tf.TensorSpec([None, 2], tf.float32)
    learner = _linear_learner(
        w, gradient_processor=Accumulate(steps=2), batch_spec={"x": spec, "y": spec}
    )
    learner = Learner(learner.groups, jit_compile=True, batch_spec={"x": spec, "y": spec})
    _, health = _run(learner, _batches([X, [np.nan, 2.0], X], [Y] * 3))
    assert health.nonfinite_steps == 1 and health.applied_updates == 1
    assert learner.tracing_count == 1  # guarded from the start: no optimistic pass to redo


def _branching_loss(w):
    """Squared error where the mean residual is positive, else absolute error: a Python `if`
    over a tensor, which needs AutoGraph."""

    def loss(batch):
        error = w * batch["x"] - batch["y"]
        if tf.reduce_mean(error) > 0:
            return tf.reduce_mean(tf.square(error)), {}
        return tf.reduce_mean(tf.abs(error)), {}

    return loss


def test_a_loss_with_python_control_flow_needs_its_own_tf_function():
    w = tf.Variable(2.0)
    learner = Learner(UpdateGroup(_branching_loss(w), [w], keras.optimizers.SGD(0.1)))
    with pytest.raises(TypeError, match="AutoGraph"):  # the learner traces without it
        learner.run(_batches([X], [Y]))
    decorated = tf.function(_branching_loss(w))  # converted by its own tf.function
    learner = Learner(UpdateGroup(decorated, [w], keras.optimizers.SGD(0.1)))
    _run(learner, _batches([X], [Y]))  # residual [1, 3] > 0: squared error, gradient 7
    np.testing.assert_allclose(w.numpy(), 2.0 - 0.1 * 7.0, rtol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_per_sample_extras_come_back_per_step_and_stay_out_of_the_metrics(jit_compile):
    w = tf.Variable(2.0)

    def loss_fn(batch):
        residual = w * batch["x"] - batch["y"]
        return tf.reduce_mean(tf.square(residual)), {"per_sample/error": residual}

    spec = tf.TensorSpec([None, 2], tf.float32)
    learner = Learner(
        UpdateGroup(loss_fn, [w], keras.optimizers.SGD(learning_rate=0.1), name="q"),
        batch_spec={"x": spec, "y": spec},
        per_sample=True,
        jit_compile=jit_compile,
    )
    metrics, _ = learner.run(_batches([X] * 3, [Y] * 3))
    # w = 2, 1.3, 0.95 at the three steps (module docstring): residuals w x - y = [w - 1, 2w - 1].
    np.testing.assert_allclose(
        learner.per_sample["q/error"], [[1.0, 3.0], [0.3, 1.6], [-0.05, 0.9]], rtol=1e-5
    )
    assert list(learner.per_sample) == ["q/error"] and "q/per_sample/error" not in metrics
    learner.run(_batches([X], [Y]))  # another number of steps: the same trace
    assert learner.per_sample["q/error"].shape == (1, 2)
    # Under XLA, several steps run optimistically and one step guarded: one trace each.
    assert learner.tracing_count == (2 if jit_compile else 1)
    # Not asked for: nothing gathered.
    plain = Learner(
        UpdateGroup(loss_fn, [w], keras.optimizers.SGD(0.1)), batch_spec={"x": spec, "y": spec}
    )
    metrics, _ = plain.run(_batches([X], [Y]))
    assert plain.per_sample == {} and set(metrics) == {"loss", "grad_norm", "learning_rate"}
