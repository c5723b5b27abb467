"""Tests for framework/parts/acting.py: every acting copy computes what its model does, by hand
and against Keras, picks up new weights on refresh, and falls back to a compiled call where
numpy does not copy the model: by structure, or by the proof on observations of the space when
built and after the first refresh, with one warning."""

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.learner import Learner, UpdateGroup
from framework.parts import acting
from framework.parts.acting import (
    ActingCopy,
    CompiledActorCriticForward,
    CompiledForward,
    NotCopyable,
    NumpyActorCriticForward,
    NumpyActorForward,
    NumpyForward,
    NumpyGaussianActorForward,
    ProvenActorCriticForward,
    ProvenForward,
)
from framework.parts.acting_proof import probe_observations
from framework.parts.networks import (
    ScaleToBounds,
    StateIndependentLogStd,
    actor_critic_mlp,
    actor_mlp,
    gaussian_actor_critic_mlp,
    gaussian_actor_mlp,
    mlp,
    nature_cnn,
)
from tests.framework.parts.test_networks import (
    CONSTANT_ACTOR_CASES,
    GAUSSIAN_ACTOR_OBSERVATIONS,
    constant_actor,
    dueling_with_known_weights,
    gaussian_actor_by_hand,
    random_observations,
)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hidden_units": (16, 8), "activation": "relu"},
        {"hidden_units": (8,), "activation": "tanh", "dueling": True},
        {"hidden_units": (8,), "activation": "linear"},
    ],
)
def test_numpy_forward_matches_keras(kwargs):
    model = mlp((5,), 3, **kwargs)
    NumpyForward.check(model)  # no NotCopyable
    observations = random_observations(4, 5)
    np.testing.assert_allclose(
        NumpyForward(model)(observations), model(observations).numpy(), rtol=1e-5, atol=1e-6
    )


def test_numpy_forward_matches_hand_computed_dueling():
    q = NumpyForward(dueling_with_known_weights())(np.array([[2.0, 7.0]]))
    np.testing.assert_allclose(q, [[-0.5, 1.5, 6.5]], rtol=1e-6)  # as for Keras, test_networks


def test_numpy_forward_refresh_picks_up_new_weights():
    model = mlp((5,), 3, hidden_units=(8,))
    forward = NumpyForward(model)
    observations = random_observations(4, 5)
    before = forward(observations)
    kernel = model.get_layer("output").kernel
    kernel.assign(kernel.numpy() + 1.0)
    forward.refresh()
    after = forward(observations)
    assert not np.allclose(before, after)  # the change is visible...
    np.testing.assert_allclose(
        after, model(observations).numpy(), rtol=1e-5, atol=1e-6
    )  # ...exactly


@pytest.mark.parametrize("dueling", [False, True])
def test_learner_published_weights_are_what_the_numpy_copy_acts_with(dueling):
    """The learner hands back the acting copy's variables after its update: acting from them
    equals acting from the updated model, with no read of its own."""
    model = mlp((5,), 3, hidden_units=(8, 6), dueling=dueling)
    forward = NumpyForward(model)
    observations = random_observations(4, 5)
    before = forward(observations)
    learner = Learner(
        UpdateGroup(
            lambda batch: (tf.reduce_mean(tf.square(model(batch["x"]) - 1.0)), {}),
            model.trainable_variables,
            keras.optimizers.SGD(0.5),
        ),
        batch_spec={"x": tf.TensorSpec([1, 4, 5], tf.float32)},
        publish=forward.variables,
    )
    learner.run({"x": observations[None]})
    assert len(learner.published) == len(forward.variables) == 2 * (2 + (2 if dueling else 1))
    for value, variable in zip(learner.published, forward.variables, strict=True):
        np.testing.assert_array_equal(value, variable.numpy())  # after the update
    forward.refresh(learner.published)
    after = forward(observations)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, model(observations).numpy(), rtol=1e-5, atol=1e-6)


def test_numpy_forward_copies_only_flat_mlps():
    with pytest.raises(NotCopyable, match="not one flat vector"):
        NumpyForward.check(mlp((2, 3), 4, hidden_units=(5,)))
    with pytest.raises(NotCopyable, match="not one flat vector"):
        NumpyForward.check(nature_cnn((36, 36, 1), 2, hidden_units=4))


# ----- the deterministic and the Gaussian actor ---------------------------------------------


@pytest.mark.parametrize(("bias", "expected"), CONSTANT_ACTOR_CASES)
def test_numpy_actor_scales_tanh_to_the_bounds(bias, expected):
    actions = NumpyActorForward(constant_actor(bias))(random_observations(2, 3))
    np.testing.assert_allclose(actions, [expected] * 2, rtol=1e-6, atol=1e-6)


def test_numpy_actor_forward_matches_keras_and_stays_in_bounds():
    model = actor_mlp((5,), low=[-2.0], high=[2.0], hidden_units=(16, 8), activation="tanh")
    NumpyActorForward.check(model)
    with pytest.raises(NotCopyable, match=r"'scale_to_bounds' \(ScaleToBounds\) is not one"):
        NumpyForward.check(model)
    observations = 10 * random_observations(64, 5)
    actions = NumpyActorForward(model)(observations)
    np.testing.assert_allclose(actions, model(observations).numpy(), rtol=1e-5, atol=1e-6)
    assert actions.shape == (64, 1) and np.all(np.abs(actions) <= 2.0)


def test_numpy_gaussian_actor_matches_keras_and_refreshes():
    model = gaussian_actor_by_hand()
    observations = GAUSSIAN_ACTOR_OBSERVATIONS
    forward = NumpyGaussianActorForward(model)
    with pytest.raises(NotCopyable, match="no layer named 'output'"):
        NumpyForward.check(model)
    for numpy_value, keras_value in zip(forward(observations), model(observations), strict=True):
        np.testing.assert_allclose(numpy_value, keras_value.numpy(), rtol=1e-6)
    # mean = 2 h (h = [3, 0], test_networks) once the mean's bias is 0.
    model.get_layer("mean").set_weights([np.array([[2.0]]), np.array([0.0])])
    forward.refresh()  # stale: read again at the next call
    np.testing.assert_allclose(forward(observations)[0], [[6.0], [0.0]])


# ----- the on-policy actor-critic -----------------------------------------------------------


@pytest.mark.parametrize("shared_torso", [False, True])
def test_numpy_actor_critic_matches_the_model(shared_torso):
    model = actor_critic_mlp((4,), 3, hidden_units=(8, 8), shared_torso=shared_torso)
    names = {layer.name for layer in model.layers}
    assert ("torso_0" in names) == shared_torso and ("policy_0" in names) != shared_torso
    forward = acting.actor_critic_forward(model, box(4))
    assert isinstance(forward.copy, NumpyActorCriticForward)
    observations = random_observations(5, 4)
    logits, values = model(observations)
    np.testing.assert_allclose(forward.logits(observations), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(forward.values(observations), values, rtol=1e-5, atol=1e-6)


def test_numpy_gaussian_actor_critic_matches_the_model():
    model = gaussian_actor_critic_mlp((4,), 2, hidden_units=(8,), log_std_init=-0.5)
    forward = acting.actor_critic_forward(model, box(4))
    assert isinstance(forward.copy, NumpyActorCriticForward)
    observations = random_observations(5, 4)
    (mean, log_std), values = model(observations)
    numpy_mean, numpy_log_std = forward.gaussian_parameters(observations)
    np.testing.assert_allclose(numpy_mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(numpy_log_std, np.full((5, 2), -0.5, np.float32))
    np.testing.assert_array_equal(numpy_log_std, log_std)
    np.testing.assert_allclose(forward.values(observations), values, rtol=1e-5, atol=1e-6)


# ----- the one protocol, and the compiled fallback ----------------------------------------------


@pytest.mark.parametrize(
    ("factory", "model", "kind"),
    [
        (acting.forward, lambda: mlp((3,), 2, hidden_units=(4,)), NumpyForward),
        (acting.forward, lambda: nature_cnn((36, 36, 1), 2, hidden_units=4), CompiledForward),
        (acting.actor_forward, lambda: actor_mlp((3,), [-1.0], [1.0]), NumpyActorForward),
        (
            acting.gaussian_actor_forward,
            lambda: gaussian_actor_mlp((3,), 2),
            NumpyGaussianActorForward,
        ),
        (acting.gaussian_actor_forward, lambda: gaussian_actor_mlp((2, 3), 2), CompiledForward),
        (acting.actor_critic_forward, lambda: actor_critic_mlp((3,), 2), NumpyActorCriticForward),
        (
            acting.actor_critic_forward,
            lambda: actor_critic_mlp((2, 3), 2),
            CompiledActorCriticForward,
        ),
    ],
)
def test_each_factory_builds_an_acting_copy_of_the_cheapest_kind(factory, model, kind, caplog):
    model = model()
    copy = factory(model, box(*model.inputs[0].shape[1:]))
    if issubclass(kind, CompiledForward):
        assert type(copy) is kind
    else:  # the numpy copy, proven
        proven = (
            ProvenActorCriticForward if factory is acting.actor_critic_forward else ProvenForward
        )
        assert type(copy) is proven and type(copy.copy) is kind
        assert copy.variables is copy.copy.variables  # the learner publishes the copy's
    assert isinstance(copy, ActingCopy)
    copy.refresh()  # after an update whose values the caller does not have
    if isinstance(copy, CompiledForward):
        assert copy.variables == ()  # it reads the live model: nothing to publish
    assert not _compiled_warnings(caplog)  # conv nets act compiled by design, in silence


def test_compiled_copies_give_the_models_outputs_as_numpy():
    gaussian_actor = gaussian_actor_mlp((2, 3), 2, hidden_units=(4,))
    observations = random_observations(10, 3).reshape(5, 2, 3)
    mean, log_std = CompiledForward(gaussian_actor)(observations)  # the model's structure
    expected_mean, expected_log_std = gaussian_actor(observations)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(log_std, expected_log_std, rtol=1e-6, atol=1e-6)

    actor_critic = gaussian_actor_critic_mlp((2, 3), 2, hidden_units=(4,))
    copy = CompiledActorCriticForward(actor_critic)
    (expected_mean, expected_log_std), expected_values = actor_critic(observations)
    mean, log_std = copy.gaussian_parameters(observations)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(log_std, expected_log_std, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(copy.values(observations), expected_values, rtol=1e-6, atol=1e-6)


def test_the_compiled_forward_traces_once_for_any_batch_size_and_reads_live_weights():
    network = nature_cnn((36, 36, 1), 3, hidden_units=4)
    copy = CompiledForward(network)
    rng = np.random.default_rng(0)
    frames = {size: rng.integers(0, 256, (size, 36, 36, 1), np.uint8) for size in (4, 1, 7)}
    for _ in range(3):  # training's vector of environments, an evaluation's one, a user's
        for batch in frames.values():
            np.testing.assert_allclose(copy(batch), network(batch), rtol=1e-6, atol=1e-6)
    assert copy.tracing_count == 1  # one trace, however many calls and batch sizes
    before = copy(frames[4])
    network.set_weights([w * 1.5 for w in network.get_weights()])  # an update, no refresh
    after = copy(frames[4])
    assert not np.allclose(after, before)
    np.testing.assert_allclose(after, network(frames[4]), rtol=1e-5, atol=1e-5)
    copy(frames[4].astype(np.float32))  # another dtype: a trace of its own
    assert copy.tracing_count == 2


# ----- the proof: a network the numpy copy does not compute acts as itself ---------------------


def box(*shape: int) -> gym.spaces.Box:
    """An unbounded Box: the proof draws its observations from a standard normal."""
    return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)


def _compiled_warnings(caplog) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.getMessage().startswith("Acting through a compiled call")
    ]


def _normalized_torso(features, prefix: str, activation: str = "relu"):
    """A dense torso named as the builders name it, a LayerNormalization after each layer."""
    for index, units in enumerate((16, 16)):
        features = keras.layers.Dense(units, activation, name=f"{prefix}_{index}")(features)
        features = keras.layers.LayerNormalization()(features)
    return features


def _normalized_actor_critic(name: str, policy_head) -> keras.Model:
    inputs = keras.Input((4,))
    policy = policy_head(_normalized_torso(inputs, "policy", "tanh"))
    value = keras.layers.Dense(1, name="value")(_normalized_torso(inputs, "value", "tanh"))
    return keras.Model(inputs, (policy, keras.ops.squeeze(value, axis=-1)), name=name)


def _gaussian_head(features):
    mean = keras.layers.Dense(2, name="mean")(features)
    return mean, StateIndependentLogStd(-0.5, name="log_std")(mean)


# Each builder's network on 4 features, copied with a LayerNormalization after each hidden
# layer: the layers' and the model's names kept, as a user's part copied from networks.py.
NORMALIZED = {
    "mlp": lambda: keras.Model(
        (inputs := keras.Input((4,))),
        keras.layers.Dense(2, name="output")(_normalized_torso(inputs, "hidden")),
        name="mlp",
    ),
    "actor_mlp": lambda: keras.Model(
        (inputs := keras.Input((4,))),
        ScaleToBounds([-2.0], [2.0], name="scale_to_bounds")(
            keras.layers.Dense(1, name="output")(_normalized_torso(inputs, "hidden"))
        ),
        name="actor_mlp",
    ),
    "gaussian_actor_mlp": lambda: keras.Model(
        (inputs := keras.Input((4,))),
        (
            keras.layers.Dense(2, name="mean")(features := _normalized_torso(inputs, "hidden")),
            keras.layers.Dense(2, name="log_std")(features),
        ),
        name="gaussian_actor_mlp",
    ),
    "actor_critic_mlp": lambda: _normalized_actor_critic(
        "actor_critic_mlp", lambda features: keras.layers.Dense(2, name="logits")(features)
    ),
    "gaussian_actor_critic_mlp": lambda: _normalized_actor_critic(
        "gaussian_actor_critic_mlp", _gaussian_head
    ),
}
# Each builder's factory and the numpy copy that computes the builder's own network.
FACTORIES = {
    "mlp": (acting.forward, NumpyForward),
    "actor_mlp": (acting.actor_forward, NumpyActorForward),
    "gaussian_actor_mlp": (acting.gaussian_actor_forward, NumpyGaussianActorForward),
    "actor_critic_mlp": (acting.actor_critic_forward, NumpyActorCriticForward),
    "gaussian_actor_critic_mlp": (acting.actor_critic_forward, NumpyActorCriticForward),
}


def _acting_outputs(name: str, copy, observations: np.ndarray):
    """What an acting copy gives, nested as its model's outputs."""
    if name == "actor_critic_mlp":
        return copy.logits(observations), copy.values(observations)
    if name == "gaussian_actor_critic_mlp":
        return copy.gaussian_parameters(observations), copy.values(observations)
    return copy(observations)


@pytest.mark.parametrize("name", list(NORMALIZED))
def test_a_copied_network_with_a_layer_numpy_does_not_compute_acts_as_itself(name, caplog):
    model = NORMALIZED[name]()
    factory, numpy_kind = FACTORIES[name]
    with pytest.raises(NotCopyable, match="LayerNormalization"):
        numpy_kind(model)  # never reads a network it does not compute

    copy = factory(model, box(4))

    assert isinstance(copy, CompiledForward)  # the compiled call acts
    observations = 3.0 * random_observations(64, 4)
    acted = tf.nest.flatten(_acting_outputs(name, copy, observations))
    for value, expected in zip(acted, tf.nest.flatten(model(observations)), strict=True):
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-6)
    copy.refresh()
    [warning] = _compiled_warnings(caplog)  # once, with what it costs
    assert f"for the network {name!r}: its layer 'layer_normalization" in warning
    assert "(LayerNormalization) is not one the numpy copy computes" in warning
    assert "Each action costs a TensorFlow call (~200 us" in warning


def test_a_network_named_otherwise_but_built_as_mlp_acts_through_the_numpy_copy(caplog):
    """The name does not choose the copy: a user's function that wraps `mlp` under its own
    name gets the numpy copy, proven."""
    built = mlp((4,), 3, hidden_units=(8,), dueling=True)
    model = keras.Model(built.input, built.output, name="my_network")

    copy = acting.forward(model, box(4))

    assert type(copy.copy) is NumpyForward and not _compiled_warnings(caplog)
    observations = random_observations(16, 4)
    np.testing.assert_array_equal(copy(observations), NumpyForward(built)(observations))


def clipped_q_network() -> keras.Model:
    """`mlp`'s layers alone, its Q-values clipped at zero by an op, which is no layer: with the
    zero initial output both give zeros; trained weights show the clip."""
    inputs = keras.Input((4,))
    features = keras.layers.Dense(8, activation="relu", name="hidden_0")(inputs)
    output = keras.layers.Dense(3, kernel_initializer="zeros", name="output")(features)
    return keras.Model(inputs, keras.ops.relu(output), name="mlp")


def test_a_difference_trained_weights_show_is_caught_at_the_first_refresh(caplog):
    model = clipped_q_network()
    copy = acting.forward(model, box(4))
    assert type(copy.copy) is NumpyForward and not _compiled_warnings(caplog)  # 0 == relu(0)
    kernel = model.get_layer("output").kernel

    kernel.assign(np.random.default_rng(1).normal(size=kernel.shape))  # as an update would
    copy.refresh([variable.numpy() for variable in copy.variables])  # as the learner publishes

    assert type(copy.copy) is CompiledForward
    [warning] = _compiled_warnings(caplog)
    assert "after its first weight refresh, the numpy copy gives -" in warning
    assert "where the network gives 0 (tolerance 1e-05 relative)" in warning
    observations = random_observations(16, 4)
    acted = copy(observations)
    np.testing.assert_allclose(acted, model(observations).numpy(), rtol=1e-6, atol=1e-6)
    assert (acted == 0).any() and (acted > 0).any()  # the clip shows in these observations
    kernel.assign(kernel.numpy() + 1.0)
    copy.refresh([variable.numpy() for variable in copy.variables])
    assert len(_compiled_warnings(caplog)) == 1  # said once


def test_the_proof_runs_when_built_and_after_the_first_refresh_only(monkeypatch):
    """Twice a run, never in the loop's steps: later refreshes only copy weights."""
    calls = []
    failure = acting.Proof.failure

    def counted(proof, copy, when):
        calls.append(when)
        return failure(proof, copy, when)

    monkeypatch.setattr(acting.Proof, "failure", counted)
    copy = acting.actor_critic_forward(actor_critic_mlp((4,), 2, hidden_units=(8,)), box(4))
    for _ in range(3):
        copy.refresh()
    assert calls == ["when built", "after its first weight refresh"]
    assert type(copy.copy) is NumpyActorCriticForward


def test_the_proof_draws_its_observations_from_the_space():
    """Not zeros, which map a network to its biases: each dimension from its own bounds."""
    space = gym.spaces.Box(
        np.array([-4.8, -np.inf, 0.0, -np.finfo(np.float32).max], np.float32),
        np.array([4.8, np.inf, np.inf, np.finfo(np.float32).max], np.float32),
    )
    observations = probe_observations(space)
    assert observations.shape == (32, 4) and observations.dtype == np.float32
    np.testing.assert_array_equal(observations, probe_observations(space))  # seeded
    assert np.all(np.abs(observations[:, 0]) <= 4.8) and observations[:, 0].std() > 1.0
    assert np.all(observations[:, 2] >= 0.0)  # from its one bound inward
    # CartPole's float32-largest bounds are none: a standard normal's scale, not 1e38's.
    assert 0.5 < observations[:, 1].std() < 2.0 and 0.5 < observations[:, 3].std() < 2.0
    assert np.all(observations != 0.0)
