"""Gin-configurable Keras network builders.

Every builder has the signature `(input_shape, num_outputs) -> keras.Model` once its gin
parameters are bound, so an agent can take any of them as its `network`. Their acting copies
(the forward pass in numpy) live in `acting.py`.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gin
import keras
import numpy as np
import tensorflow as tf

from framework.parts.value_distribution import CategoricalSupport
from framework.parts.wide_dense import WideInputDense

# The activations an acting copy computes in numpy (`acting.py`): the builders of networks
# that act accept no other.
NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
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


class AtomLogits(keras.layers.Layer):
    """A categorical head's logits `[B, A, Z]` over `support`'s atoms: reshapes the head's
    `[B, A * Z]`, and for a dueling head adds the value stream's `[B, Z]` to the centred
    advantages atom by atom, as Rainbow does (Hessel et al., 2018). Holds the support, a
    constant and not a weight, from which the Q-values (expected values) are read."""

    def __init__(self, support: CategoricalSupport, num_actions: int, **kwargs):
        super().__init__(**kwargs)
        self.support = support
        self.num_actions = num_actions

    def call(self, inputs):
        advantage, *value = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        logits = keras.ops.reshape(advantage, (-1, self.num_actions, self.support.num_atoms))
        if not value:
            return logits
        centred = logits - keras.ops.mean(logits, axis=1, keepdims=True)
        return value[0][:, None, :] + centred

    def get_config(self):
        support = self.support
        return {
            **super().get_config(),
            "num_actions": self.num_actions,
            "support": [support.num_atoms, support.v_min, support.v_max],
        }


def _categorical_head(
    features, num_actions: int, support: CategoricalSupport, dueling: bool, initializer: str
):
    """Logits `[B, A, Z]`; dueling: a value stream of Z logits and an advantage one of A * Z."""
    num_atoms = support.num_atoms
    if not dueling:
        output = keras.layers.Dense(
            num_actions * num_atoms, kernel_initializer=initializer, name="output"
        )(features)
        return AtomLogits(support, num_actions, name="atom_logits")(output)
    value = keras.layers.Dense(num_atoms, kernel_initializer=initializer, name="value")(features)
    advantage = keras.layers.Dense(
        num_actions * num_atoms, kernel_initializer=initializer, name="advantage"
    )(features)
    return AtomLogits(support, num_actions, name="atom_logits")([advantage, value])


def categorical_support_of(model: keras.Model) -> CategoricalSupport | None:
    """The support of a categorical network's head, or None for a Q-network."""
    for layer in model.layers:
        if isinstance(layer, AtomLogits):
            return layer.support
    return None


def q_values(model: keras.Model, outputs: tf.Tensor) -> tf.Tensor:
    """Q-values from `model`'s outputs: themselves, or a categorical network's expected values
    `sum_z p_z z` ([B, A, Z] -> [B, A])."""
    support = categorical_support_of(model)
    return outputs if support is None else support.expected_values(outputs)


def _check_units(owner: str, hidden_units: Any) -> None:
    """Layer widths are positive integers: Keras's own error does not name the binding."""
    widths = [hidden_units] if isinstance(hidden_units, int) else hidden_units
    try:
        valid = all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths)
    except TypeError:  # not a sequence
        valid = False
    if not valid:
        raise ValueError(
            f"{owner}.hidden_units must be positive integers, one per layer (e.g. (256, 256)); "
            f"got {hidden_units!r}."
        )


@gin.configurable
def mlp(
    input_shape: Sequence[int],
    num_outputs: int,
    hidden_units: Sequence[int] = (64, 64),
    activation: str = "relu",
    dueling: bool = False,
    uniform_initial_output: bool = False,
    support: CategoricalSupport | None = None,
) -> keras.Model:
    """A dense torso and a linear head (logits for a policy, Q-values for a critic).

    `uniform_initial_output` zeroes the output kernel and bias: every state then maps to equal
    logits, so a softmax policy starts uniform over the actions (and Q-values start at 0).
    `support`: a categorical head instead (C51), logits `[B, num_outputs, Z]` over its atoms;
    `q_values(model, outputs)` reads the Q-values from them.
    """
    if activation not in NUMPY_ACTIVATIONS:
        raise ValueError(
            f"mlp.activation={activation!r} is not supported; use one of "
            f"{sorted(NUMPY_ACTIVATIONS)}."
        )
    _check_units("mlp", hidden_units)
    inputs = keras.Input(shape=tuple(input_shape), dtype="float32")
    features = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    for index, units in enumerate(hidden_units):
        features = keras.layers.Dense(units, activation=activation, name=f"hidden_{index}")(
            features
        )
    if support is None:
        outputs = _head(features, num_outputs, dueling, uniform_initial_output)
    else:
        initializer = "zeros" if uniform_initial_output else "glorot_uniform"
        outputs = _categorical_head(features, num_outputs, support, dueling, initializer)
    return keras.Model(inputs, outputs, name="mlp")


@gin.configurable
def nature_cnn(
    input_shape: Sequence[int],
    num_outputs: int,
    dueling: bool = False,
    hidden_units: int = 512,
    compute_dtype: str = "float32",
) -> keras.Model:
    """The Nature-DQN torso (Mnih et al., 2015) on uint8 frames, scaled to [0, 1] inside;
    `compute_dtype = 'bfloat16'` runs the torso in bfloat16 (`torso_dtype`)."""
    _check_units("nature_cnn", hidden_units)
    dtype = torso_dtype("nature_cnn", compute_dtype)
    inputs = keras.Input(shape=tuple(input_shape), dtype="uint8")
    x = keras.ops.cast(inputs, "float32") / 255.0
    x = keras.layers.Conv2D(32, 8, strides=4, activation="relu", dtype=dtype)(x)
    x = keras.layers.Conv2D(64, 4, strides=2, activation="relu", dtype=dtype)(x)
    x = keras.layers.Conv2D(64, 3, strides=1, activation="relu", dtype=dtype)(x)
    x = keras.layers.Flatten(dtype=dtype)(x)
    x = WideInputDense(hidden_units, activation="relu", dtype=dtype)(x)
    outputs = _head(_as_float32(x), num_outputs, dueling, uniform_initial_output=False)
    return keras.Model(inputs, outputs, name="nature_cnn")


# ----- conv nets on frames or planes: Q-values (DQN, n-step Q) and actor-critic (PPO, A2C) -----

# (filters, kernel size, stride) of each conv layer: the Nature-DQN torso (Mnih et al., 2015).
NATURE_CONV = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def _check_conv(owner: str, conv_layers: Any, input_max: Any) -> None:
    """Conv layers as (filters, kernel size, stride) triples of positive integers, and a
    positive `input_max`: Keras's own errors name neither binding."""
    try:
        valid = len(conv_layers) > 0 and all(
            len(layer) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in layer)
            for layer in conv_layers
        )
    except TypeError:  # not a sequence of sequences
        valid = False
    if not valid:
        raise ValueError(
            f"{owner}.conv_layers must be (filters, kernel size, stride) triples of positive "
            f"integers, one per conv layer (e.g. ((16, 3, 1),)); got {conv_layers!r}."
        )
    if isinstance(input_max, bool) or not isinstance(input_max, int | float) or input_max <= 0:
        raise ValueError(
            f"{owner}.input_max must be a positive number, the observations' largest value "
            f"(255.0 for uint8 frames, 1.0 for boolean planes); got {input_max!r}."
        )


COMPUTE_DTYPES = ("float32", "bfloat16")


def torso_dtype(owner: str, compute_dtype: Any) -> str:
    """The Keras dtype policy of a conv torso's layers: float32, or with `compute_dtype =
    'bfloat16'` Keras's mixed policy (weights, gradients and optimizer state stay float32,
    products and convolutions run in bfloat16: this chip's AVX-512 BF16 instructions)."""
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(
            f"{owner}.compute_dtype must be one of {COMPUTE_DTYPES} (the conv torso's "
            f"arithmetic; weights stay float32), got {compute_dtype!r}."
        )
    return "float32" if compute_dtype == "float32" else "mixed_bfloat16"


def _conv_torso(
    inputs,
    conv_layers,
    hidden_units,
    input_max: float,
    initializer: Callable,
    dtype: str = "float32",
):
    """Observations scaled to [0, 1] by `input_max`, the conv layers (`conv_i`: valid padding,
    ReLU), flattened, then the dense ReLU layers (`hidden_i`); `initializer()` gives each
    layer's kernel initializer, `dtype` their Keras dtype policy (`torso_dtype`). The features
    come out float32 whatever the policy, so the heads and losses stay in float32."""
    x = keras.ops.cast(inputs, "float32") / float(input_max)
    for index, (filters, kernel, stride) in enumerate(conv_layers):
        x = keras.layers.Conv2D(
            filters,
            kernel,
            strides=stride,
            activation="relu",
            kernel_initializer=initializer(),
            name=f"conv_{index}",
            dtype=dtype,
        )(x)
    x = keras.layers.Flatten(dtype=dtype)(x)
    for index, units in enumerate(hidden_units):
        x = keras.layers.Dense(
            units,
            activation="relu",
            kernel_initializer=initializer(),
            name=f"hidden_{index}",
            dtype=dtype,
        )(x)
    return _as_float32(x)


def _as_float32(features):
    """A bfloat16 torso's features as float32, for the heads; float32 ones as they are."""
    return features if features.dtype == "float32" else keras.ops.cast(features, "float32")


@gin.configurable
def conv_q_network(
    input_shape: Sequence[int],
    num_outputs: int,
    conv_layers: Sequence[tuple[int, int, int]] = NATURE_CONV,
    hidden_units: Sequence[int] = (512,),
    input_max: float = 255.0,
    dueling: bool = False,
    support: CategoricalSupport | None = None,
    compute_dtype: str = "float32",
) -> keras.Model:
    """Q-values from images `[B, H, W, C]` (uint8 frames or boolean planes, as the environment
    gives them): conv layers of (filters, kernel size, stride), dense ReLU layers, and the
    heads of `mlp` (`dueling`, and with `support` a categorical head, C51). The observations
    are divided by `input_max` inside: 255 for frames, 1 for MinAtar's boolean planes, which
    are 0 or 1 already. The defaults are the Nature-DQN net (`nature_cnn`); MinAtar's
    (Young & Tian, 2019): `conv_layers = ((16, 3, 1),)`, `hidden_units = (128,)`,
    `input_max = 1.0`. Glorot-uniform weights, Keras's default. `compute_dtype = 'bfloat16'`
    runs the torso in bfloat16 (`torso_dtype`)."""
    _check_conv("conv_q_network", conv_layers, input_max)
    _check_units("conv_q_network", hidden_units)
    dtype = torso_dtype("conv_q_network", compute_dtype)
    inputs = keras.Input(shape=tuple(input_shape), dtype="uint8")
    features = _conv_torso(
        inputs, conv_layers, hidden_units, input_max, lambda: "glorot_uniform", dtype
    )
    if support is None:
        outputs = _head(features, num_outputs, dueling, uniform_initial_output=False)
    else:
        outputs = _categorical_head(features, num_outputs, support, dueling, "glorot_uniform")
    return keras.Model(inputs, outputs, name="conv_q_network")


@gin.configurable
def actor_critic_cnn(
    input_shape: Sequence[int],
    num_actions: int,
    conv_layers: Sequence[tuple[int, int, int]] = NATURE_CONV,
    hidden_units: Sequence[int] = (512,),
    input_max: float = 255.0,
    compute_dtype: str = "float32",
) -> keras.Model:
    """`model(s) -> (logits [B, A], value [B])` from images `[B, H, W, C]`: one conv torso
    shared by a softmax policy and V(s), as Stable-Baselines3's `CnnPolicy` and CleanRL's
    `ppo_atari.py` (the Nature-DQN torso with 512 units). Orthogonal weights with their gains:
    sqrt(2) in the torso, 0.01 for the logits (a near-uniform first policy), 1 for the value;
    zero biases. The observations are divided by `input_max` inside (255 for uint8 frames, 1
    for boolean planes). `compute_dtype = 'bfloat16'` runs the torso in bfloat16
    (`torso_dtype`)."""
    _check_conv("actor_critic_cnn", conv_layers, input_max)
    _check_units("actor_critic_cnn", hidden_units)
    dtype = torso_dtype("actor_critic_cnn", compute_dtype)
    inputs = keras.Input(shape=tuple(input_shape), dtype="uint8")
    torso = functools.partial(keras.initializers.Orthogonal, np.sqrt(2.0))  # a new one a layer
    features = _conv_torso(inputs, conv_layers, hidden_units, input_max, torso, dtype)
    logits = keras.layers.Dense(
        num_actions, kernel_initializer=keras.initializers.Orthogonal(0.01), name="logits"
    )(features)
    value = keras.layers.Dense(
        1, kernel_initializer=keras.initializers.Orthogonal(1.0), name="value"
    )(features)
    return keras.Model(inputs, (logits, keras.ops.squeeze(value, axis=-1)), name="actor_critic_cnn")


# ----- continuous control: a deterministic actor and a critic Q(s, a) (DDPG, TD3) -------------


class ScaleToBounds(keras.layers.Layer):
    """`low + (tanh(x) + 1) / 2 * (high - low)`: squashes into the Box bounds, per dimension.

    The bounds are constants, not weights: they never move and a checkpoint does not hold them.
    """

    def __init__(self, low, high, **kwargs):
        super().__init__(**kwargs)
        self.low = np.asarray(low, np.float32)
        self.high = np.asarray(high, np.float32)
        if self.low.shape != self.high.shape or not np.all(np.isfinite([self.low, self.high])):
            raise ValueError(
                f"ScaleToBounds needs finite bounds of one shape, got {low!r} and {high!r}."
            )

    def call(self, x):
        return self.low + (keras.ops.tanh(x) + 1.0) * (0.5 * (self.high - self.low))

    def numpy(self, x: np.ndarray) -> np.ndarray:
        return self.low + (np.tanh(x) + 1.0) * (0.5 * (self.high - self.low))

    def get_config(self):
        return {**super().get_config(), "low": self.low.tolist(), "high": self.high.tolist()}


def _output_initializer(output_init_range: float | None):
    """Lillicrap et al. (2015) start the output layers in U(-3e-3, 3e-3); None: Glorot."""
    if output_init_range is None:
        return "glorot_uniform"
    return keras.initializers.RandomUniform(-output_init_range, output_init_range)


@gin.configurable
def actor_mlp(
    input_shape: Sequence[int],
    low: Sequence[float],
    high: Sequence[float],
    hidden_units: Sequence[int] = (256, 256),
    activation: str = "relu",
    output_init_range: float | None = None,
) -> keras.Model:
    """A deterministic policy mu(s): a dense torso, a linear layer, tanh scaled to [low, high].

    One output per entry of `low` (the Box's bounds, flat). Layers are named as in `mlp`
    (`hidden_i`, `output`) plus `scale_to_bounds`, which `acting.NumpyActorForward` reads.
    """
    if activation not in NUMPY_ACTIVATIONS:
        raise ValueError(
            f"actor_mlp.activation={activation!r} is not supported; use one of "
            f"{sorted(NUMPY_ACTIVATIONS)}."
        )
    _check_units("actor_mlp", hidden_units)
    scale = ScaleToBounds(low, high, name="scale_to_bounds")
    inputs = keras.Input(shape=tuple(input_shape), dtype="float32")
    features = inputs
    for index, units in enumerate(hidden_units):
        features = keras.layers.Dense(units, activation=activation, name=f"hidden_{index}")(
            features
        )
    pre_tanh = keras.layers.Dense(
        scale.low.size, kernel_initializer=_output_initializer(output_init_range), name="output"
    )(features)
    return keras.Model(inputs, scale(pre_tanh), name="actor_mlp")


@gin.configurable
def critic_mlp(
    observation_shape: Sequence[int],
    action_size: int,
    hidden_units: Sequence[int] = (256, 256),
    activation: str = "relu",
    output_init_range: float | None = None,
    action_at_input: bool = False,
) -> keras.Model:
    """Q(s, a) -> [B]: the action joins at the second layer (Lillicrap et al., 2015).

    `hidden_0` sees the observation only; the action is concatenated to its features, and the
    remaining hidden layers and the linear output see both. Called as `critic([s, a])`.
    `action_at_input`: the action joins the observation before `hidden_0` instead (SB3's and
    CleanRL's critics for TD3 and SAC).
    """
    if not hidden_units:
        raise ValueError("critic_mlp needs at least one hidden layer: the action joins after it.")
    _check_units("critic_mlp", hidden_units)
    observation = keras.Input(shape=tuple(observation_shape), dtype="float32", name="observation")
    action = keras.Input(shape=(action_size,), dtype="float32", name="action")
    first = keras.layers.Dense(hidden_units[0], activation=activation, name="hidden_0")
    if action_at_input:
        features = first(keras.layers.Concatenate(name="with_action")([observation, action]))
    else:
        features = keras.layers.Concatenate(name="with_action")([first(observation), action])
    for index, units in enumerate(hidden_units[1:], start=1):
        features = keras.layers.Dense(units, activation=activation, name=f"hidden_{index}")(
            features
        )
    q = keras.layers.Dense(
        1, kernel_initializer=_output_initializer(output_init_range), name="output"
    )(features)
    return keras.Model([observation, action], keras.ops.squeeze(q, axis=-1), name="critic_mlp")


# ----- a stochastic actor: the mean and log std of a Gaussian per action dimension (SAC) -----


@gin.configurable
def gaussian_actor_mlp(
    input_shape: Sequence[int],
    action_size: int,
    hidden_units: Sequence[int] = (256, 256),
    activation: str = "relu",
) -> keras.Model:
    """`model(s) -> (mean [B, A], log_std [B, A])`: a dense torso and two linear heads (SB3's
    SAC actor), the parameters of a Gaussian that a distribution part squashes and samples.

    Layers are named as in `mlp` (`hidden_i`) plus the heads `mean` and `log_std`, which
    `acting.NumpyGaussianActorForward` reads.
    """
    if activation not in NUMPY_ACTIVATIONS:
        raise ValueError(
            f"gaussian_actor_mlp.activation={activation!r} is not supported; use one of "
            f"{sorted(NUMPY_ACTIVATIONS)}."
        )
    _check_units("gaussian_actor_mlp", hidden_units)
    inputs = keras.Input(shape=tuple(input_shape), dtype="float32")
    features = inputs
    for index, units in enumerate(hidden_units):
        features = keras.layers.Dense(units, activation=activation, name=f"hidden_{index}")(
            features
        )
    mean = keras.layers.Dense(action_size, name="mean")(features)
    log_std = keras.layers.Dense(action_size, name="log_std")(features)
    return keras.Model(inputs, (mean, log_std), name="gaussian_actor_mlp")


# ----- on-policy actor-critic: policy logits and a state value (A2C, A3C) ----------------------


@gin.configurable
def actor_critic_mlp(
    input_shape: Sequence[int],
    num_actions: int,
    hidden_units: Sequence[int] = (64, 64),
    activation: str = "tanh",
    shared_torso: bool = False,
    orthogonal_init: bool = True,
    torch_init: bool = False,
) -> keras.Model:
    """`model(s) -> (logits [B, A], value [B])`: a softmax policy and V(s) in one model.

    `shared_torso`: one dense torso (`torso_i`) feeds both heads; else two (`policy_i`,
    `value_i`), as Stable-Baselines3's MlpPolicy. `orthogonal_init` (the A2C/PPO baselines):
    orthogonal kernels with gain sqrt(2) in the torsos, 0.01 for the logits (a near-uniform
    initial policy) and 1 for the value, zero biases. Else `torch_init`: torch.nn.Linear's
    own initialisation, kernels and biases uniform in +-1/sqrt(fan_in), which SB3 keeps with
    `ortho_init=False` (RL-Zoo's PPO on MuJoCo); else Keras's Glorot-uniform kernels and zero
    biases.
    """
    return _actor_critic(
        "actor_critic_mlp",
        input_shape,
        lambda features, dense: dense(features, num_actions, 0.01, "logits"),
        hidden_units,
        activation,
        shared_torso,
        orthogonal_init,
        torch_init,
    )


@gin.configurable
def gaussian_actor_critic_mlp(
    input_shape: Sequence[int],
    action_dim: int,
    hidden_units: Sequence[int] = (64, 64),
    activation: str = "tanh",
    shared_torso: bool = False,
    orthogonal_init: bool = True,
    torch_init: bool = False,
    log_std_init: float = 0.0,
) -> keras.Model:
    """`model(s) -> ((mean [B, D], log_std [B, D]), value [B])`: a diagonal Gaussian policy
    whose log standard deviation is one learned vector for every state (SB3's PPO, `log_std_init`
    0: std 1), and V(s). Torsos and initialisation as in `actor_critic_mlp` (the mean's gain
    0.01). The agent clips samples to the action bounds for the environment."""

    def policy_head(features, dense):
        mean = dense(features, action_dim, 0.01, "mean")
        return mean, StateIndependentLogStd(log_std_init, name="log_std")(mean)

    return _actor_critic(
        "gaussian_actor_critic_mlp",
        input_shape,
        policy_head,
        hidden_units,
        activation,
        shared_torso,
        orthogonal_init,
        torch_init,
    )


class StateIndependentLogStd(keras.layers.Layer):
    """One learned log standard deviation per action dimension, broadcast over the batch."""

    def __init__(self, initial: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.initial = float(initial)

    def build(self, input_shape):
        self.log_std = self.add_weight(
            shape=(input_shape[-1],),
            initializer=keras.initializers.Constant(self.initial),
            name="log_std",
        )

    def call(self, mean):
        return keras.ops.zeros_like(mean) + self.log_std

    def get_config(self):
        return {**super().get_config(), "initial": self.initial}


def _actor_critic(
    name: str,
    input_shape: Sequence[int],
    policy_head: Callable,
    hidden_units: Sequence[int],
    activation: str,
    shared_torso: bool,
    orthogonal_init: bool,
    torch_init: bool,
) -> keras.Model:
    """The policy head `policy_head(features, dense)` and V(s) on one or two dense torsos."""
    if activation not in NUMPY_ACTIVATIONS:
        raise ValueError(
            f"{name}.activation={activation!r} is not supported; use one of "
            f"{sorted(NUMPY_ACTIVATIONS)}."
        )
    _check_units(name, hidden_units)
    if orthogonal_init and torch_init:
        raise ValueError(
            f"{name}.orthogonal_init and {name}.torch_init are both True: choose one "
            "initialisation (orthogonal_init = False with torch_init = True is SB3's "
            "ortho_init=False)."
        )

    def dense(features, units, gain, name, layer_activation=None):
        """A dense layer applied to `features`, initialised as the switches say."""
        if orthogonal_init:
            kernel, bias = keras.initializers.Orthogonal(gain), "zeros"
        elif torch_init:
            bound = 1.0 / np.sqrt(features.shape[-1])  # torch: U(+-1/sqrt(fan_in)), both
            # One initializer each: an unseeded one called twice gives the same numbers twice.
            kernel = keras.initializers.RandomUniform(-bound, bound)
            bias = keras.initializers.RandomUniform(-bound, bound)
        else:
            kernel, bias = "glorot_uniform", "zeros"
        layer = keras.layers.Dense(
            units, layer_activation, kernel_initializer=kernel, bias_initializer=bias, name=name
        )
        return layer(features)

    def torso(features, prefix):
        for index, units in enumerate(hidden_units):
            features = dense(features, units, np.sqrt(2.0), f"{prefix}_{index}", activation)
        return features

    inputs = keras.Input(shape=tuple(input_shape), dtype="float32")
    features = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    if shared_torso:
        policy_features = value_features = torso(features, "torso")
    else:
        policy_features, value_features = torso(features, "policy"), torso(features, "value")
    policy = policy_head(policy_features, dense)
    value = dense(value_features, 1, 1.0, "value")
    return keras.Model(inputs, (policy, keras.ops.squeeze(value, axis=-1)), name=name)
