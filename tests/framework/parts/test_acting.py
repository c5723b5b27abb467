"""Tests for framework/parts/acting.py: every acting copy computes what its model does, by hand
and against Keras, picks up new weights on refresh, and falls back to a compiled call where
numpy does not copy the model."""

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
    NumpyActorCriticForward,
    NumpyActorForward,
    NumpyForward,
    NumpyGaussianActorForward,
)
from framework.parts.networks import (
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
    assert NumpyForward.supports(model)
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


def test_numpy_forward_supports_only_flat_mlps():
    assert not NumpyForward.supports(mlp((2, 3), 4, hidden_units=(5,)))
    assert not NumpyForward.supports(nature_cnn((36, 36, 1), 2, hidden_units=4))


# ----- the deterministic and the Gaussian actor ---------------------------------------------


@pytest.mark.parametrize(("bias", "expected"), CONSTANT_ACTOR_CASES)
def test_numpy_actor_scales_tanh_to_the_bounds(bias, expected):
    actions = NumpyActorForward(constant_actor(bias))(random_observations(2, 3))
    np.testing.assert_allclose(actions, [expected] * 2, rtol=1e-6, atol=1e-6)


def test_numpy_actor_forward_matches_keras_and_stays_in_bounds():
    model = actor_mlp((5,), low=[-2.0], high=[2.0], hidden_units=(16, 8), activation="tanh")
    assert NumpyActorForward.supports(model) and not NumpyForward.supports(model)
    observations = 10 * random_observations(64, 5)
    actions = NumpyActorForward(model)(observations)
    np.testing.assert_allclose(actions, model(observations).numpy(), rtol=1e-5, atol=1e-6)
    assert actions.shape == (64, 1) and np.all(np.abs(actions) <= 2.0)


def test_numpy_gaussian_actor_matches_keras_and_refreshes():
    model = gaussian_actor_by_hand()
    observations = GAUSSIAN_ACTOR_OBSERVATIONS
    forward = NumpyGaussianActorForward(model)
    assert NumpyGaussianActorForward.supports(model) and not NumpyForward.supports(model)
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
    forward = acting.actor_critic_forward(model)
    assert isinstance(forward, NumpyActorCriticForward)
    observations = random_observations(5, 4)
    logits, values = model(observations)
    np.testing.assert_allclose(forward.logits(observations), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(forward.values(observations), values, rtol=1e-5, atol=1e-6)


def test_numpy_gaussian_actor_critic_matches_the_model():
    model = gaussian_actor_critic_mlp((4,), 2, hidden_units=(8,), log_std_init=-0.5)
    forward = acting.actor_critic_forward(model)
    assert isinstance(forward, NumpyActorCriticForward)
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
def test_each_factory_builds_an_acting_copy_of_the_cheapest_kind(factory, model, kind):
    copy = factory(model())
    assert type(copy) is kind
    assert isinstance(copy, ActingCopy)
    copy.refresh()  # after an update whose values the caller does not have
    if isinstance(copy, CompiledForward):
        assert copy.variables == ()  # it reads the live model: nothing to publish


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
