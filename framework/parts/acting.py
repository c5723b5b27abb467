"""Acting copies: a network's forward pass outside the learner, for choosing actions cheaply.

A `tf.function` call costs many times a small MLP's forward pass in numpy (docs/speed.md):
acting from a numpy copy of the weights, refreshed after each learner call, keeps TensorFlow
out of the per-environment-step path. Networks numpy does not pay for (conv nets) act through
one compiled call instead.

Each factory below returns the numpy copy only where it is proven to compute the network
(`acting_proof`): every layer of the network is one the copy computes (by the builders' layer
names, each of the type the copy reads), and the copy's outputs equal the network's on
observations of the space, when built and again after the first weight refresh. Otherwise the
compiled call acts, with one warning saying why and what it costs. Networks that do not take
flat vectors (conv nets) act through the compiled call by design, without a word.
"""

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from framework.compiled.steps import direct_call_usable, traced
from framework.parts.acting_proof import Proof, warn_acting_compiled
from framework.parts.networks import (
    NUMPY_ACTIVATIONS,
    AtomLogits,
    ScaleToBounds,
    StateIndependentLogStd,
    categorical_support_of,
    q_values,
)


@runtime_checkable
class ActingCopy(Protocol):
    """What an agent acts from. The learner publishes the values of `variables` after each
    update (none for a copy that reads the live model), and the agent hands them to `refresh`.

    Each family adds its calls: `copy(observations)` for `forward` (Q-values or logits),
    `actor_forward` (actions) and `gaussian_actor_forward` (mean and log std); `logits`,
    `gaussian_parameters`, `values` and both policy and values (`policy_and_values`) for
    `actor_critic_forward`.
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


# ----- what a numpy copy computes: the layers it reads, checked before it reads them -----------


class NotCopyable(Exception):
    """Why a numpy copy does not compute a network (a layer it does not compute, one it needs
    and does not find): the compiled call acts instead."""


def _numbered_layers(model: keras.Model, prefix: str) -> list[keras.layers.Layer]:
    """`prefix_0`, `prefix_1`, ... in the order of their numbers: a torso as the builders name
    it."""
    found = {}
    for layer in model.layers:
        head, _, number = layer.name.rpartition("_")
        if head == prefix and number.isdigit():
            found[int(number)] = layer
    return [found[number] for number in sorted(found)]


def _named_layer(model: keras.Model, name: str) -> keras.layers.Layer:
    for layer in model.layers:
        if layer.name == name:
            return layer
    raise NotCopyable(f"it has no layer named {name!r}, which the numpy copy reads")


def _layers_of_type(model: keras.Model, kind: type) -> list[keras.layers.Layer]:
    return [layer for layer in model.layers if type(layer) is kind]


def _takes_flat_vectors(model: keras.Model) -> bool:
    return len(model.inputs) == 1 and len(model.inputs[0].shape) == 2


def _check_copyable(
    model: keras.Model, dense: Sequence[keras.layers.Layer], own: Sequence[keras.layers.Layer]
) -> None:
    """Raises NotCopyable unless every layer of `model` is one the copy computes: of `dense`
    (each a Keras `Dense` with a bias and an activation numpy has) or of `own` (the heads' own
    layers, found by their type). Where they sit in the graph, the proof's numbers show."""
    if not _takes_flat_vectors(model):
        raise NotCopyable("its input is not one flat vector")
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer) or any(layer is o for o in own):
            continue
        if not any(layer is d for d in dense):
            raise NotCopyable(
                f"its layer {layer.name!r} ({type(layer).__name__}) is not one the numpy copy "
                "computes"
            )
        if type(layer) is not keras.layers.Dense:
            raise NotCopyable(
                f"its layer {layer.name!r} is a {type(layer).__name__}, where the numpy copy "
                "computes a Dense layer"
            )
        activation = getattr(layer.activation, "__name__", repr(layer.activation))
        if activation not in NUMPY_ACTIVATIONS or not layer.use_bias:
            raise NotCopyable(
                f"its Dense layer {layer.name!r} has activation {activation!r} and "
                f"use_bias={layer.use_bias}; the numpy copy computes {sorted(NUMPY_ACTIVATIONS)} "
                "with a bias"
            )


class CompiledForward:
    """A model's outputs through one compiled call, where numpy does not pay (conv nets) or
    does not compute the model: numpy arrays in the structure of the outputs. `model` is a
    Keras model or a function of one (a Q-network's Q-values).

    The forward pass is traced once per observation shape and dtype, for any batch size
    (training's vector of environments, an evaluation's one, a user's batch), and called
    directly (`DirectCall`): `tf.function`'s own dispatch costs ~0.4 ms a call, more than a
    MinAtar network's forward pass, paid at every environment step (docs/speed.md)."""

    variables: tuple[tf.Variable, ...] = ()  # nothing to publish: it reads the model's own

    def __init__(self, model: keras.Model | Callable[[tf.Tensor], Any]):
        self._function = tf.function(model, autograph=False)
        self._direct = direct_call_usable(True)
        self._calls: dict[tuple, Callable] = {}  # (one observation's shape, dtype) -> the pass

    def refresh(self, values: Sequence[np.ndarray] | None = None) -> None:
        """The compiled call reads the live variables: nothing to copy."""

    def __call__(self, observations: np.ndarray):
        return tf.nest.map_structure(lambda tensor: tensor.numpy(), self._forward(observations))

    def _forward(self, observations: np.ndarray) -> Any:
        """The model's outputs as tensors, through the forward pass traced for their kind."""
        observations = np.asarray(observations)
        key = (observations.shape[1:], observations.dtype)
        call = self._calls.get(key)
        if call is None:
            spec = tf.TensorSpec((None, *key[0]), tf.as_dtype(observations.dtype))
            call = traced(self._function.get_concrete_function(spec), self._direct)
            self._calls[key] = call
        return call(observations)

    @property
    def tracing_count(self) -> int:
        return self._function.experimental_get_tracing_count()


# ----- a dense torso (`hidden_i`) and its heads: Q-networks, policies, actors ------------------


class NumpyForward:
    """The forward pass of an `mlp` network in numpy, for acting at batch size 1. A categorical
    network's copy returns its Q-values (`q_values`), the expected values of its atoms.

    It reads the layers by the builders' names (`hidden_i`, then `output`, or dueling's
    `value` and `advantage`) and is built only for a network of those layers alone (`check`).

    Refresh semantics (every subclass): the published values are taken as they come; without
    them the copy is marked stale and the next call reads the weights out of the model, once
    however many updates came before it.
    """

    def __init__(self, model: keras.Model):
        self.check(model)
        _single_threaded_blas()
        self._hidden = _numbered_layers(model, "hidden")
        self._activations = [NUMPY_ACTIVATIONS[layer.activation.__name__] for layer in self._hidden]
        self._dueling = any(layer.name == "advantage" for layer in model.layers)
        self._support = categorical_support_of(model)
        self.variables = _kernels_and_biases(self._hidden + self._heads(model))
        self.refresh()

    @classmethod
    def check(cls, model: keras.Model) -> None:
        """Raises NotCopyable unless this copy computes every layer of `model`."""
        dense = _numbered_layers(model, "hidden") + cls._heads(model)
        _check_copyable(model, dense, cls._own_layers(model))

    @staticmethod
    def _heads(model: keras.Model) -> list[keras.layers.Layer]:
        dueling = any(layer.name == "advantage" for layer in model.layers)
        names = ("value", "advantage") if dueling else ("output",)
        return [_named_layer(model, name) for name in names]

    @staticmethod
    def _own_layers(model: keras.Model) -> list[keras.layers.Layer]:
        """The head's layers without weights of their own: a categorical head's `AtomLogits`."""
        return _layers_of_type(model, AtomLogits)

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


class NumpyActorForward(NumpyForward):
    """`NumpyForward` for an `actor_mlp`: the torso and output in numpy, then tanh and scaling."""

    def __init__(self, model: keras.Model):
        super().__init__(model)
        (self._scale,) = _layers_of_type(model, ScaleToBounds)

    @staticmethod
    def _own_layers(model: keras.Model) -> list[keras.layers.Layer]:
        scales = _layers_of_type(model, ScaleToBounds)
        if len(scales) != 1:
            raise NotCopyable(f"it has {len(scales)} ScaleToBounds layers, the numpy copy one")
        return scales

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        return self._scale.numpy(super().__call__(observations))


class NumpyGaussianActorForward(NumpyForward):
    """`NumpyForward` for a `gaussian_actor_mlp`: its two heads, the mean and the log std."""

    @staticmethod
    def _heads(model: keras.Model) -> list[keras.layers.Layer]:
        return [_named_layer(model, "mean"), _named_layer(model, "log_std")]

    @staticmethod
    def _own_layers(model: keras.Model) -> list[keras.layers.Layer]:
        return []

    def __call__(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = self._features(observations)
        (mean_kernel, mean_bias), (std_kernel, std_bias) = self._head_weights
        return x @ mean_kernel + mean_bias, x @ std_kernel + std_bias  # [N, A] each


# ----- on-policy actor-critic: policy logits (or a Gaussian's parameters) and a state value ----


class NumpyActorCriticForward:
    """An `actor_critic_mlp`'s logits (a `gaussian_actor_critic_mlp`'s mean and log std) and
    values in numpy, for acting. Its refresh reads the weights at once, not at the next call.

    It reads the layers by the builders' names (`torso_i` or `policy_i` and `value_i`, then
    `logits` or `mean`, and `value`), a Gaussian's `StateIndependentLogStd` by its type, and
    is built only for a network of those layers alone (`check`)."""

    def __init__(self, model: keras.Model):
        self.check(model)
        self._paths, log_std = self._layers(model)
        self.gaussian = bool(log_std)
        self._activation = NUMPY_ACTIVATIONS[self._paths["policy"][0].activation.__name__]
        self.variables = _kernels_and_biases(
            [layer for path in self._paths.values() for layer in path]
        )
        if self.gaussian:
            self.variables.append(log_std[0].log_std)
        # One compiled read of every weight: a `.numpy()` per variable costs more in all.
        self._read = tf.function(lambda: [tf.identity(v) for v in self.variables])
        self.refresh()

    @classmethod
    def check(cls, model: keras.Model) -> None:
        """Raises NotCopyable unless this copy computes every layer of `model`."""
        paths, log_std = cls._layers(model)
        _check_copyable(model, [layer for path in paths.values() for layer in path], log_std)
        if len(log_std) > 1:
            raise NotCopyable(f"it has {len(log_std)} StateIndependentLogStd layers")

    @staticmethod
    def _layers(model: keras.Model) -> tuple[dict[str, list[keras.layers.Layer]], list]:
        """Each output's dense layers in order, and the Gaussian's log std layer if any."""
        log_std = _layers_of_type(model, StateIndependentLogStd)
        shared = _numbered_layers(model, "torso")
        head = _named_layer(model, "mean" if log_std else "logits")
        paths = {
            "policy": shared + _numbered_layers(model, "policy") + [head],
            "value": shared + _numbered_layers(model, "value") + [_named_layer(model, "value")],
        }
        return paths, log_std

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

    def policy_and_values(self, observations: np.ndarray) -> tuple[Any, np.ndarray]:
        policy = self.gaussian_parameters if self.gaussian else self.logits
        return policy(observations), self.values(observations)


class CompiledActorCriticForward(CompiledForward):
    """An actor-critic model's outputs through one compiled call (conv nets), read by name."""

    def logits(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations)[0].numpy()

    def gaussian_parameters(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, log_std = self._forward(observations)[0]
        return mean.numpy(), log_std.numpy()

    def values(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations)[1].numpy()

    def policy_and_values(self, observations: np.ndarray) -> tuple[Any, np.ndarray]:
        """Both outputs of one call, where acting needs both (PPO): a conv net runs once."""
        return self(observations)


# ----- the proven copy or the compiled call: what the factories return --------------------------


class _ProvenCopy:
    """A numpy copy proven to compute its network when built, proven once more after its first
    weight refresh (trained values show what initial ones can hide: an op that clips outputs
    starting at zero), and replaced by the compiled call, with one warning, if that fails.
    Acting costs one delegating call; the proof runs twice in all, never in the steps."""

    def __init__(self, copy: Any, proof: Proof, compiled: Callable[[], Any], network_name: str):
        self.variables = copy.variables  # what the learner publishes, fixed at its build
        self.copy = copy  # what acts: the numpy copy, or the compiled call once a proof failed
        self._proof: Proof | None = proof
        self._compiled = compiled
        self._network_name = network_name

    def refresh(self, values: Sequence[np.ndarray] | None = None) -> None:
        """As `ActingCopy.refresh`: the acting copy's, then the proof the first time."""
        self.copy.refresh(values)
        if self._proof is None:
            return
        proof, self._proof = self._proof, None
        failure = proof.failure(self.copy, "after its first weight refresh")
        if failure is not None:
            warn_acting_compiled(self._network_name, failure)
            self.copy = self._compiled()


class ProvenForward(_ProvenCopy):
    """`forward`'s, `actor_forward`'s and `gaussian_actor_forward`'s proven numpy copy."""

    def __call__(self, observations: np.ndarray):
        return self.copy(observations)


class ProvenActorCriticForward(_ProvenCopy):
    """`actor_critic_forward`'s proven numpy copy."""

    def logits(self, observations: np.ndarray) -> np.ndarray:
        return self.copy.logits(observations)

    def gaussian_parameters(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.copy.gaussian_parameters(observations)

    def values(self, observations: np.ndarray) -> np.ndarray:
        return self.copy.values(observations)

    def policy_and_values(self, observations: np.ndarray) -> tuple[Any, np.ndarray]:
        return self.copy.policy_and_values(observations)


def _proven_or_compiled(
    model: keras.Model,
    observation_space: gym.Space,
    numpy_kind: type,
    proven_kind: type[_ProvenCopy],
    compiled: Callable[[], Any],
    proof: Callable[[], Proof],
) -> Any:
    """The numpy copy of `model` where it is proven on observations of the space, else the
    compiled call, saying why (in silence for networks that do not take flat vectors)."""
    if not (_takes_flat_vectors(model) and isinstance(observation_space, gym.spaces.Box)):
        return compiled()
    try:
        copy = numpy_kind(model)
    except NotCopyable as reason:
        failure = str(reason)
    else:
        checked = proof()
        failure = checked.failure(copy, "when built")
        if failure is None:
            return proven_kind(copy, checked, compiled, model.name)
    warn_acting_compiled(model.name, failure)
    return compiled()


def _called(copy: Any, observations: np.ndarray) -> Any:
    """What a copy of `forward`'s family gives: its call."""
    return copy(observations)


def forward(model: keras.Model, observation_space: gym.Space) -> ActingCopy:
    """The cheapest forward pass of a network with one output (Q-values or logits) that
    computes it; a categorical network's gives its Q-values."""

    def network(observations):  # [B, A]
        return q_values(model, model(observations))

    return _proven_or_compiled(
        model,
        observation_space,
        NumpyForward,
        ProvenForward,
        lambda: CompiledForward(network),
        lambda: Proof(observation_space, network, _called),
    )


def actor_forward(model: keras.Model, observation_space: gym.Space) -> ActingCopy:
    """The cheapest forward pass of a deterministic actor for acting that computes it."""
    return _proven_or_compiled(
        model,
        observation_space,
        NumpyActorForward,
        ProvenForward,
        lambda: CompiledForward(model),
        lambda: Proof(observation_space, model, _called),
    )


def gaussian_actor_forward(model: keras.Model, observation_space: gym.Space) -> ActingCopy:
    """The cheapest forward pass of a Gaussian actor for acting that computes it: its mean and
    log std."""
    return _proven_or_compiled(
        model,
        observation_space,
        NumpyGaussianActorForward,
        ProvenForward,
        lambda: CompiledForward(model),
        lambda: Proof(observation_space, model, _called),
    )


def actor_critic_forward(model: keras.Model, observation_space: gym.Space) -> ActingCopy:
    """The cheapest forward pass of an actor-critic model for acting that computes it."""
    gaussian = isinstance(model.output[0], list | tuple)  # ((mean, log_std), value)

    def outputs(copy, observations):  # as the model's: (policy, value)
        policy = copy.gaussian_parameters if gaussian else copy.logits
        return policy(observations), copy.values(observations)

    return _proven_or_compiled(
        model,
        observation_space,
        NumpyActorCriticForward,
        ProvenActorCriticForward,
        lambda: CompiledActorCriticForward(model),
        lambda: Proof(observation_space, model, outputs),
    )
