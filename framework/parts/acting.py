"""Acting copies: a network's forward pass outside the learner, for choosing actions cheaply.

A `tf.function` call costs many times a small MLP's forward pass in numpy (docs/speed.md):
acting from a numpy copy of the weights, refreshed after each learner call, keeps TensorFlow
out of the per-environment-step path. Networks numpy does not pay for (conv nets) act through
one compiled call instead. Each factory below returns the numpy copy where its class
`supports` the model, else the compiled one.
"""

import ctypes
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import keras
import numpy as np
import tensorflow as tf

from framework.parts.networks import NUMPY_ACTIVATIONS, categorical_support_of


@runtime_checkable
class ActingCopy(Protocol):
    """What an agent acts from. The learner publishes the values of `variables` after each
    update (none for a copy that reads the live model), and the agent hands them to `refresh`.

    Each family adds its calls: `copy(observations)` for `forward` (Q-values or logits),
    `actor_forward` (actions) and `gaussian_actor_forward` (mean and log std); `logits`,
    `gaussian_parameters` and `values` for `actor_critic_forward`.
    """

    @property
    def variables(self) -> Sequence[tf.Variable]: ...

    def refresh(self, values: Sequence[np.ndarray] | None = None) -> None:
        """Call after every update, with the new `values` of `variables` where the caller has
        them (`Learner.published`)."""


def _single_threaded_blas() -> None:
    """Caps numpy's OpenBLAS at one thread (process-wide, once). Its threads spin-wait for
    work: on a busy 2-core machine they made acting's small products nearly a hundred times
    slower (docs/speed.md). What OPENBLAS_NUM_THREADS=1 does, after numpy was imported."""
    global _BLAS_CAPPED
    if _BLAS_CAPPED:
        return
    _BLAS_CAPPED = True
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return
    names = (
        "openblas_set_num_threads",
        "scipy_openblas_set_num_threads64_",
        "openblas_set_num_threads64_",
    )
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            if hasattr(library, name):
                getattr(library, name)(1)


_BLAS_CAPPED = False


def _kernels_and_biases(layers: Sequence[keras.layers.Dense]) -> list[tf.Variable]:
    """Each dense layer's kernel, then its bias, in the order of `layers`."""
    return [variable for layer in layers for variable in (layer.kernel, layer.bias)]


class CompiledForward:
    """A model's outputs through one compiled call, where numpy does not pay (conv nets): numpy
    arrays in the structure of the model's outputs."""

    variables: tuple[tf.Variable, ...] = ()  # nothing to publish: it reads the model's own

    def __init__(self, model: keras.Model):
        self._forward = tf.function(model, reduce_retracing=True)

    def refresh(self, values: Sequence[np.ndarray] | None = None) -> None:
        """The compiled call reads the live variables: nothing to copy."""

    def __call__(self, observations: np.ndarray):
        return tf.nest.map_structure(lambda tensor: tensor.numpy(), self._forward(observations))


# ----- a dense torso (`hidden_i`) and its heads: Q-networks, policies, actors ------------------


class NumpyForward:
    """The forward pass of an `mlp` network in numpy, for acting at batch size 1. A categorical
    network's copy returns its Q-values (`q_values`), the expected values of its atoms.

    Refresh semantics (every subclass): the published values are taken as they come; without
    them the copy is marked stale and the next call reads the weights out of the model, once
    however many updates came before it.
    """

    def __init__(self, model: keras.Model):
        _single_threaded_blas()
        self._hidden = [layer for layer in model.layers if layer.name.startswith("hidden_")]
        self._activations = [NUMPY_ACTIVATIONS[layer.activation.__name__] for layer in self._hidden]
        self._dueling = any(layer.name == "advantage" for layer in model.layers)
        self._support = categorical_support_of(model)
        heads = [model.get_layer(name) for name in self._head_names()]
        self.variables = _kernels_and_biases(self._hidden + heads)
        self.refresh()

    @staticmethod
    def supports(model: keras.Model) -> bool:
        return model.name == "mlp" and len(model.inputs[0].shape) == 2

    def _head_names(self) -> tuple[str, ...]:
        return ("value", "advantage") if self._dueling else ("output",)

    def refresh(self, values: Sequence[np.ndarray] | None = None) -> None:
        """As `ActingCopy.refresh`; without `values`, stale until the next call."""
        if values is None:
            self._stale = True
        else:
            self._load(values)

    def _load(self, values: Sequence[np.ndarray]) -> None:
        pairs = list(zip(values[::2], values[1::2], strict=True))
        self._hidden_weights = pairs[: len(self._hidden)]
        self._head_weights = pairs[len(self._hidden) :]
        self._stale = False

    def _copy_weights(self) -> None:
        # The layers' TF variables themselves: a read skips Keras' variable wrapper.
        self._load([variable.value.numpy() for variable in self.variables])

    def _features(self, observations: np.ndarray) -> np.ndarray:
        """The torso's output, from the current weights: [batch, units]."""
        if self._stale:
            self._copy_weights()
        x = np.asarray(observations, dtype=np.float32)  # [batch, features]
        for (kernel, bias), activation in zip(self._hidden_weights, self._activations, strict=True):
            x = activation(x @ kernel + bias)
        return x

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        x = self._features(observations)
        if self._support is not None:
            return self._categorical_q_values(x)
        if not self._dueling:
            kernel, bias = self._head_weights[0]
            return x @ kernel + bias  # [batch, outputs]
        (v_kernel, v_bias), (a_kernel, a_bias) = self._head_weights
        advantage = x @ a_kernel + a_bias
        return x @ v_kernel + v_bias + advantage - advantage.mean(axis=-1, keepdims=True)

    def _categorical_q_values(self, features: np.ndarray) -> np.ndarray:
        """`AtomLogits` in numpy, then the expected value per action: [batch, A]."""
        kernel, bias = self._head_weights[-1]  # "output", or dueling's "advantage"
        logits = (features @ kernel + bias).reshape(len(features), -1, self._support.num_atoms)
        if self._dueling:
            v_kernel, v_bias = self._head_weights[0]
            value = features @ v_kernel + v_bias  # [batch, Z]
            logits = value[:, None, :] + logits - logits.mean(axis=1, keepdims=True)
        return self._support.expected_values_numpy(logits)


def forward(model: keras.Model) -> NumpyForward | CompiledForward:
    """The cheapest forward pass of a network with one output (Q-values or logits)."""
    return NumpyForward(model) if NumpyForward.supports(model) else CompiledForward(model)


class NumpyActorForward(NumpyForward):
    """`NumpyForward` for an `actor_mlp`: the torso and output in numpy, then tanh and scaling."""

    def __init__(self, model: keras.Model):
        super().__init__(model)
        self._scale = model.get_layer("scale_to_bounds")

    @staticmethod
    def supports(model: keras.Model) -> bool:
        return model.name == "actor_mlp" and len(model.inputs[0].shape) == 2

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        return self._scale.numpy(super().__call__(observations))


def actor_forward(model: keras.Model) -> NumpyActorForward | CompiledForward:
    """The cheapest forward pass of a deterministic actor for acting."""
    return NumpyActorForward(model) if NumpyActorForward.supports(model) else CompiledForward(model)


class NumpyGaussianActorForward(NumpyForward):
    """`NumpyForward` for a `gaussian_actor_mlp`: its two heads, the mean and the log std."""

    @staticmethod
    def supports(model: keras.Model) -> bool:
        return model.name == "gaussian_actor_mlp" and len(model.inputs[0].shape) == 2

    def _head_names(self) -> tuple[str, ...]:
        return ("mean", "log_std")

    def __call__(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = self._features(observations)
        (mean_kernel, mean_bias), (std_kernel, std_bias) = self._head_weights
        return x @ mean_kernel + mean_bias, x @ std_kernel + std_bias  # [N, A] each


def gaussian_actor_forward(model: keras.Model) -> NumpyGaussianActorForward | CompiledForward:
    """The cheapest forward pass of a Gaussian actor for acting: its mean and log std."""
    if NumpyGaussianActorForward.supports(model):
        return NumpyGaussianActorForward(model)
    return CompiledForward(model)


# ----- on-policy actor-critic: policy logits (or a Gaussian's parameters) and a state value ----


class NumpyActorCriticForward:
    """An `actor_critic_mlp`'s logits (a `gaussian_actor_critic_mlp`'s mean and log std) and
    values in numpy, for acting. Its refresh reads the weights at once, not at the next call."""

    def __init__(self, model: keras.Model):
        def layers(prefix):
            found = [layer for layer in model.layers if layer.name.startswith(prefix + "_")]
            return sorted(found, key=lambda layer: int(layer.name.rsplit("_", 1)[1]))

        self.gaussian = model.name == "gaussian_actor_critic_mlp"
        shared = layers("torso")
        head = "mean" if self.gaussian else "logits"
        self._paths = {
            "policy": shared + layers("policy") + [model.get_layer(head)],
            "value": shared + layers("value") + [model.get_layer("value")],
        }
        self._activation = NUMPY_ACTIVATIONS[self._paths["policy"][0].activation.__name__]
        self.variables = _kernels_and_biases(
            [layer for path in self._paths.values() for layer in path]
        )
        if self.gaussian:
            self.variables.append(model.get_layer("log_std").log_std)
        # One compiled read of every weight: a `.numpy()` per variable costs more in all.
        self._read = tf.function(lambda: [tf.identity(v) for v in self.variables])
        self.refresh()

    @staticmethod
    def supports(model: keras.Model) -> bool:
        names = ("actor_critic_mlp", "gaussian_actor_critic_mlp")
        return model.name in names and len(model.inputs[0].shape) == 2

    def refresh(self, values: Sequence[np.ndarray] | None = None) -> None:
        """As `ActingCopy.refresh`; without `values`, read out of the model now."""
        if values is None:
            values = [value.numpy() for value in self._read()]
        if self.gaussian:
            *values, self._log_std = values
        pairs = iter(zip(values[::2], values[1::2], strict=True))
        self._weights = {name: [next(pairs) for _ in path] for name, path in self._paths.items()}

    def _forward(self, name: str, observations: np.ndarray) -> np.ndarray:
        x = np.asarray(observations, dtype=np.float32)  # [B, features]
        *hidden, (kernel, bias) = self._weights[name]
        for hidden_kernel, hidden_bias in hidden:
            x = self._activation(x @ hidden_kernel + hidden_bias)
        return x @ kernel + bias

    def logits(self, observations: np.ndarray) -> np.ndarray:
        return self._forward("policy", observations)  # [B, A]

    def gaussian_parameters(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean = self._forward("policy", observations)  # [B, D]
        return mean, np.broadcast_to(self._log_std, mean.shape)

    def values(self, observations: np.ndarray) -> np.ndarray:
        return self._forward("value", observations)[:, 0]  # [B]


class CompiledActorCriticForward(CompiledForward):
    """An actor-critic model's outputs through one compiled call (conv nets), read by name."""

    def logits(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations)[0].numpy()

    def gaussian_parameters(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, log_std = self._forward(observations)[0]
        return mean.numpy(), log_std.numpy()

    def values(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations)[1].numpy()


def actor_critic_forward(
    model: keras.Model,
) -> NumpyActorCriticForward | CompiledActorCriticForward:
    """The cheapest forward pass of an actor-critic model for acting."""
    if NumpyActorCriticForward.supports(model):
        return NumpyActorCriticForward(model)
    return CompiledActorCriticForward(model)
