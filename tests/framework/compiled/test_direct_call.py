import types

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import execute

from framework.agent import HEALTH_FIELDS, Health
from framework.compiled import direct_call
from framework.compiled.direct_call import DirectCall
from framework.learner import Learner, UpdateGroup


def _counting_function(jit_compile: bool):
    """A traced function that reads and writes a variable, takes a nested batch of two dtypes
    and returns a nested structure: what a learner's call does."""
    total = tf.Variable(tf.zeros([3]))
    steps = tf.Variable(0, dtype=tf.int64)
    spec = {"x": tf.TensorSpec([None, 3], tf.float32), "n": tf.TensorSpec([], tf.int64)}

    @tf.function(jit_compile=jit_compile, input_signature=[spec])
    def step(batch):
        total.assign_add(tf.reduce_sum(batch["x"], axis=0))
        steps.assign_add(batch["n"])
        return {"scaled": batch["x"] * total, "steps": steps.read_value()}, tf.reduce_sum(total)

    return step.get_concrete_function(), total, steps


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_direct_call_computes_what_the_ordinary_call_computes(jit_compile):
    rng = np.random.default_rng(0)
    batches = [
        {"x": rng.normal(size=(rows, 3)).astype(np.float32), "n": np.int64(rows)}
        for rows in (2, 5, 2)
    ]
    ordinary, ordinary_total, _ = _counting_function(jit_compile)
    direct_function, direct_total, direct_steps = _counting_function(jit_compile)
    direct = DirectCall(direct_function)
    for batch in batches:
        expected = ordinary(batch)
        got = direct(batch)
        assert tf.nest.map_structure(lambda t: t.dtype, got) == tf.nest.map_structure(
            lambda t: t.dtype, expected
        )
        for want, have in zip(tf.nest.flatten(expected), tf.nest.flatten(got), strict=True):
            np.testing.assert_allclose(have.numpy(), want.numpy(), rtol=1e-6)
    # The variables moved once per call, in both.
    np.testing.assert_allclose(direct_total.numpy(), ordinary_total.numpy(), rtol=1e-6)
    assert direct_steps.numpy() == 9


def test_a_direct_call_converts_numpy_to_the_signature_dtype():
    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def double(x):
        return 2.0 * x

    direct = DirectCall(double.get_concrete_function())
    result = direct(np.array([1, 2], dtype=np.int64))  # converted, as the ordinary call would
    assert result.dtype == tf.float32
    np.testing.assert_array_equal(result.numpy(), [2.0, 4.0])


@pytest.mark.parametrize(
    "outputs",
    [
        lambda x: (x, 2.0 * x, tf.reduce_sum(x)),  # flat: returned as a tuple without packing
        lambda x: [x, (2.0 * x,)],
        lambda x: x,
    ],
)
def test_a_direct_call_returns_the_structure_of_the_ordinary_call(outputs):
    function = tf.function(outputs, input_signature=[tf.TensorSpec([2], tf.float32)])
    concrete = function.get_concrete_function()
    x = np.array([1.0, -3.0], np.float32)
    expected, got = concrete(x), DirectCall(concrete)(x)
    assert type(got) is type(expected)
    tf.nest.assert_same_structure(got, expected)
    for want, have in zip(tf.nest.flatten(expected), tf.nest.flatten(got), strict=True):
        np.testing.assert_array_equal(have.numpy(), want.numpy())


def test_a_direct_call_refuses_non_tensor_arguments():
    @tf.function
    def scale(x, factor):
        return x * factor

    function = scale.get_concrete_function(tf.TensorSpec([2], tf.float32), 3.0)
    with pytest.raises(ValueError, match="tensor arguments only"):
        DirectCall(function)


def _mlp_learner(direct_call: bool, jit_compile: bool, loss_scale: float = 1.0) -> Learner:
    """A small DQN-shaped learner: one packed batch of several steps, an acting copy."""
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(2)]
    )

    def loss_fn(batch):
        q = tf.gather(model(batch["observation"]), batch["action"], axis=-1, batch_dims=1)
        return loss_scale * tf.reduce_mean(tf.square(q - batch["reward"])), {"q": tf.reduce_mean(q)}

    return Learner(
        UpdateGroup(loss_fn, model.trainable_variables, keras.optimizers.Adam(1e-2)),
        jit_compile=jit_compile,
        batch_spec={
            "observation": tf.TensorSpec([None, 16, 4], tf.float32),
            "action": tf.TensorSpec([None, 16], tf.int64),
            "reward": tf.TensorSpec([None, 16], tf.float32),
        },
        publish=model.weights,
        direct_call=direct_call,
    )


def _batches(rng: np.random.Generator, steps: int, reward: float | None = None) -> dict:
    return {
        "observation": rng.normal(size=(steps, 16, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=(steps, 16)),
        "reward": np.full((steps, 16), reward, np.float32)
        if reward is not None
        else rng.normal(size=(steps, 16)).astype(np.float32),
    }


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_ordinary_call_gives_the_learner_the_same_updates(jit_compile):
    learners = [_mlp_learner(direct, jit_compile) for direct in (True, False)]
    assert [learner.direct_call for learner in learners] == [True, False]
    for learner in learners:
        rng = np.random.default_rng(0)
        # Several steps a call (optimistic under XLA), one step, and a NaN that rolls back.
        learner.outcomes = [learner.run(_batches(rng, steps)) for steps in (3, 1, 4)]
        learner.outcomes.append(learner.run(_batches(rng, 3, reward=np.nan)))
    direct, ordinary = learners
    assert isinstance(direct.calls.traced[0]._call, DirectCall)  # what actually ran
    assert not isinstance(ordinary.calls.traced[0]._call, DirectCall)
    for (metrics_a, health_a), (metrics_b, health_b) in zip(
        direct.outcomes, ordinary.outcomes, strict=True
    ):
        np.testing.assert_array_equal(health_a.numpy(), health_b.numpy())
        assert dict(metrics_a) == dict(metrics_b)
    assert direct.outcomes[-1][1].numpy()[HEALTH_FIELDS.index("nonfinite_steps")] == 3
    for a, b in zip(direct.published, ordinary.published, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_tensorflow_whose_internals_moved_falls_back_with_one_warning(monkeypatch, caplog):
    def moved(*args, **kwargs):
        raise AttributeError("'module' object has no attribute 'execute'")

    # What DirectCall reads, not what the ordinary call reads.
    monkeypatch.setattr(direct_call, "execute", types.SimpleNamespace(execute=moved))
    direct_call.incompatibility.cache_clear()
    try:
        caplog.set_level("WARNING")
        learners = [_mlp_learner(direct_call=True, jit_compile=False) for _ in range(2)]
        assert [learner.direct_call for learner in learners] == [False, False]
        warnings = [r for r in caplog.records if "Calling compiled functions directly" in r.message]
        assert len(warnings) == 1  # once a process, however many learners
        assert "lacks an internal it reads (AttributeError" in warnings[0].getMessage()
        metrics, health = learners[0].run(_batches(np.random.default_rng(0), 2))
        assert Health.from_tensor(health).applied_updates == 2 and np.isfinite(metrics["loss"])
    finally:
        direct_call.incompatibility.cache_clear()


def test_a_tensorflow_that_computes_otherwise_is_found_out(monkeypatch):
    def zeros(*args, **kwargs):
        return [tf.zeros_like(t) for t in execute.execute(*args, **kwargs)]

    monkeypatch.setattr(direct_call, "execute", types.SimpleNamespace(execute=zeros))
    direct_call.incompatibility.cache_clear()
    try:
        assert "computes something other than the ordinary call" in direct_call.incompatibility()
    finally:
        direct_call.incompatibility.cache_clear()
    monkeypatch.undo()
    assert direct_call.incompatibility() is None  # this TensorFlow, as it is


def test_the_switch_is_one_gin_binding():
    w = tf.Variable(1.0)
    group = UpdateGroup(lambda b: (w * tf.reduce_sum(b["x"]), {}), [w], keras.optimizers.SGD())
    spec = {"x": tf.TensorSpec([None, 2], tf.float32)}
    assert Learner(group, batch_spec=spec).direct_call
    assert not Learner(group).direct_call  # without a spec it never calls directly
    gin.parse_config("Learner.direct_call = False")
    assert not Learner(group, batch_spec=spec).direct_call
