"""Tests for framework/networks.py: the builders' structure, the dueling head and NumpyForward."""

import keras
import numpy as np
import pytest

from framework.parts.networks import NumpyForward, mlp, nature_cnn


def _observations(batch: int, features: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, features)).astype(np.float32)


def test_mlp_output_shape_and_hidden_layers():
    model = mlp((3,), 5, hidden_units=(8, 4), activation="tanh")
    assert model(_observations(6, 3)).shape == (6, 5)
    hidden = [model.get_layer("hidden_0"), model.get_layer("hidden_1")]
    assert [tuple(layer.kernel.shape) for layer in hidden] == [(3, 8), (8, 4)]
    assert [layer.activation.__name__ for layer in hidden] == ["tanh", "tanh"]
    assert tuple(model.get_layer("output").kernel.shape) == (4, 5)


def test_mlp_flattens_multi_dimensional_input():
    model = mlp((2, 3), 4, hidden_units=(5,))
    assert tuple(model.get_layer("hidden_0").kernel.shape) == (6, 5)  # 2 * 3 inputs
    assert model(np.ones((7, 2, 3), np.float32)).shape == (7, 4)


@pytest.mark.parametrize("dueling", [False, True])
def test_uniform_initial_output_gives_equal_logits(dueling):
    model = mlp((3,), 4, hidden_units=(8,), dueling=dueling, uniform_initial_output=True)
    # Very different inputs: a zero output kernel and bias make every logit exactly 0.
    logits = model(np.array([[1.0, -2.0, 3.0], [100.0, 5.0, -7.0]], np.float32)).numpy()
    np.testing.assert_array_equal(logits, np.zeros((2, 4), np.float32))
    probs = keras.ops.softmax(logits).numpy()
    np.testing.assert_allclose(probs, np.full((2, 4), 0.25), rtol=1e-6)


def test_default_initialisation_is_not_uniform():
    model = mlp((3,), 4, hidden_units=(8,))
    logits = model(np.array([[1.0, -2.0, 3.0], [100.0, 5.0, -7.0]], np.float32)).numpy()
    assert not np.allclose(logits[0], logits[1])


def _dueling_with_known_weights():
    # No hidden layer: V(x) = x @ [1, 0] + 0.5, A(x) = x @ [[1, 2, 3], [0, 0, 0]] + [0, 0, 3].
    model = mlp((2,), 3, hidden_units=(), dueling=True)
    model.get_layer("value").set_weights([np.array([[1.0], [0.0]]), np.array([0.5])])
    model.get_layer("advantage").set_weights(
        [np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), np.array([0.0, 0.0, 3.0])]
    )
    return model


def test_dueling_head_is_value_plus_centred_advantage():
    model = _dueling_with_known_weights()
    q = model(np.array([[2.0, 7.0]], np.float32)).numpy()
    # V = 2 + 0.5 = 2.5; A = [2, 4, 6] + [0, 0, 3] = [2, 4, 9], mean 5, centred [-3, -1, 4].
    # Q = [-0.5, 1.5, 6.5], and mean_a Q = V.
    np.testing.assert_allclose(q, [[-0.5, 1.5, 6.5]], rtol=1e-6)


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
    observations = _observations(4, 5)
    np.testing.assert_allclose(
        NumpyForward(model)(observations), model(observations).numpy(), rtol=1e-5, atol=1e-6
    )


def test_numpy_forward_matches_hand_computed_dueling():
    q = NumpyForward(_dueling_with_known_weights())(np.array([[2.0, 7.0]]))
    np.testing.assert_allclose(q, [[-0.5, 1.5, 6.5]], rtol=1e-6)  # as in the Keras test above


def test_numpy_forward_refresh_picks_up_new_weights():
    model = mlp((5,), 3, hidden_units=(8,))
    forward = NumpyForward(model)
    observations = _observations(4, 5)
    before = forward(observations)
    kernel = model.get_layer("output").kernel
    kernel.assign(kernel.numpy() + 1.0)
    forward.refresh()
    after = forward(observations)
    assert not np.allclose(before, after)  # the change is visible...
    np.testing.assert_allclose(
        after, model(observations).numpy(), rtol=1e-5, atol=1e-6
    )  # ...exactly


def test_numpy_forward_supports_only_flat_mlps():
    assert not NumpyForward.supports(mlp((2, 3), 4, hidden_units=(5,)))
    assert not NumpyForward.supports(nature_cnn((36, 36, 1), 2, hidden_units=4))


@pytest.mark.parametrize("dueling", [False, True])
def test_nature_cnn_on_uint8_frames(dueling):
    model = nature_cnn((80, 80, 4), 6, dueling=dueling, hidden_units=16)
    assert model.inputs[0].dtype == "uint8"
    frames = np.random.default_rng(0).integers(0, 256, size=(2, 80, 80, 4), dtype=np.uint8)
    q = model(frames).numpy()
    assert q.shape == (2, 6)
    assert np.all(np.isfinite(q))
    # 80 -> (80 - 8) / 4 + 1 = 19 -> (19 - 4) / 2 + 1 = 8 -> 8 - 3 + 1 = 6: 6 * 6 * 64 features.
    dense = next(layer for layer in model.layers if isinstance(layer, keras.layers.Dense))
    assert tuple(dense.kernel.shape) == (6 * 6 * 64, 16)


@pytest.mark.parametrize("activation", ["gelu", "sigmoid", "Relu"])
def test_mlp_rejects_unsupported_activation(activation):
    with pytest.raises(ValueError, match=activation):
        mlp((3,), 2, activation=activation)
