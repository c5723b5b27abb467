"""Gin-configurable Keras network builders, and a numpy forward pass for cheap acting.

Every builder has the signature `(input_shape, num_outputs) -> keras.Model` once its gin
parameters are bound, so an agent can take any of them as its `network`.
"""

from collections.abc import Callable, Sequence

import gin
import keras
import numpy as np
import tensorflow as tf

_NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "linear": lambda x: x,
}


def _head(features, num_outputs: int, dueling: bool, uniform_initial_output: bool):
    """Linear output layer; dueling splits it into V(s) + A(s, a) - mean_a A(s, a)."""
    initializer = "zeros" if uniform_initial_output else "glorot_uniform"
    if not dueling:
        return keras.layers.Dense(num_outputs, kernel_initializer=initializer, name="output")(
            features
        )
    value = keras.layers.Dense(1, kernel_initializer=initializer, name="value")(features)
    advantage = keras.layers.Dense(num_outputs, kernel_initializer=initializer, name="advantage")(
        features
    )
    centred = advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)
    return value + centred


@gin.configurable
def mlp(
    input_shape: Sequence[int],
    num_outputs: int,
    hidden_units: Sequence[int] = (64, 64),
    activation: str = "relu",
    dueling: bool = False,
    uniform_initial_output: bool = False,
) -> keras.Model:
    """A dense torso and a linear head (logits for a policy, Q-values for a critic).

    `uniform_initial_output` zeroes the output kernel and bias: every state then maps to equal
    logits, so a softmax policy starts uniform over the actions (and Q-values start at 0).
    """
    if activation not in _NUMPY_ACTIVATIONS:
        raise ValueError(
            f"mlp.activation={activation!r} is not supported; use one of "
            f"{sorted(_NUMPY_ACTIVATIONS)}."
        )
    inputs = keras.Input(shape=tuple(input_shape), dtype="float32")
    features = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    for index, units in enumerate(hidden_units):
        features = keras.layers.Dense(units, activation=activation, name=f"hidden_{index}")(
            features
        )
    outputs = _head(features, num_outputs, dueling, uniform_initial_output)
    return keras.Model(inputs, outputs, name="mlp")


@gin.configurable
def nature_cnn(
    input_shape: Sequence[int],
    num_outputs: int,
    dueling: bool = False,
    hidden_units: int = 512,
) -> keras.Model:
    """The Nature-DQN torso (Mnih et al., 2015) on uint8 frames, scaled to [0, 1] inside."""
    inputs = keras.Input(shape=tuple(input_shape), dtype="uint8")
    x = keras.ops.cast(inputs, "float32") / 255.0
    x = keras.layers.Conv2D(32, 8, strides=4, activation="relu")(x)
    x = keras.layers.Conv2D(64, 4, strides=2, activation="relu")(x)
    x = keras.layers.Conv2D(64, 3, strides=1, activation="relu")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(hidden_units, activation="relu")(x)
    outputs = _head(x, num_outputs, dueling, uniform_initial_output=False)
    return keras.Model(inputs, outputs, name="nature_cnn")


class NumpyForward:
    """The forward pass of an `mlp` network in numpy, for acting at batch size 1.

    A `tf.function` call costs ~200 us, while a small MLP in numpy takes ~10 us: acting from a
    numpy copy of the weights, refreshed after each learner call, keeps TensorFlow out of the
    per-environment-step path. Use `NumpyForward.supports(model)` to decide.
    """

    def __init__(self, model: keras.Model):
        self._model = model
        self._hidden = [layer for layer in model.layers if layer.name.startswith("hidden_")]
        self._activations = [
            _NUMPY_ACTIVATIONS[layer.activation.__name__] for layer in self._hidden
        ]
        self._dueling = any(layer.name == "advantage" for layer in model.layers)
        head_names = ("value", "advantage") if self._dueling else ("output",)
        self._head_layers = [model.get_layer(name) for name in head_names]
        self.refresh()

    @staticmethod
    def supports(model: keras.Model) -> bool:
        return model.name == "mlp" and len(model.inputs[0].shape) == 2

    def refresh(self) -> None:
        """Copies the current weights out of the model (call after every update)."""
        self._hidden_weights = [
            (layer.kernel.numpy(), layer.bias.numpy()) for layer in self._hidden
        ]
        self._head_weights = [
            (layer.kernel.numpy(), layer.bias.numpy()) for layer in self._head_layers
        ]

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        x = np.asarray(observations, dtype=np.float32)  # [batch, features]
        for (kernel, bias), activation in zip(self._hidden_weights, self._activations, strict=True):
            x = activation(x @ kernel + bias)
        if not self._dueling:
            kernel, bias = self._head_weights[0]
            return x @ kernel + bias  # [batch, outputs]
        (v_kernel, v_bias), (a_kernel, a_bias) = self._head_weights
        advantage = x @ a_kernel + a_bias
        return x @ v_kernel + v_bias + advantage - advantage.mean(axis=-1, keepdims=True)


class CompiledForward:
    """A model's forward pass through one compiled call, where numpy does not pay (conv nets)."""

    def __init__(self, model: keras.Model):
        self._forward = tf.function(model, reduce_retracing=True)

    def refresh(self) -> None:
        """The compiled call reads the live variables: nothing to copy."""

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations).numpy()


def acting_forward(model: keras.Model) -> NumpyForward | CompiledForward:
    """The cheapest forward pass for acting one observation at a time."""
    return NumpyForward(model) if NumpyForward.supports(model) else CompiledForward(model)
