"""Action distributions of stochastic policies, in TensorFlow for the loss and numpy for acting.

A policy network outputs a distribution's parameters: a categorical's logits `[B, A]`, a
diagonal Gaussian's `(mean, log_std)`, each `[B, D]`. The loss needs the log-probability of the
actions taken and the entropy (TF, differentiable); acting needs a sample and its
log-probability, and evaluation the mode (numpy, from the acting copy of the weights, with the
agent's generator). Both sides compute the same numbers, so the log-probability a rollout
stores is the one the loss recomputes before its first update (a ratio of exactly 1).
"""

import math

import gin
import gymnasium as gym
import numpy as np
import tensorflow as tf

from framework.parts.exploration import sample_softmax
from framework.parts.network_fit import Output

_LOG_2PI = math.log(2.0 * math.pi)


@gin.configurable
class Categorical:
    """A softmax over `A` actions: parameters are logits `[B, A]`, actions int indices `[B]`."""

    def network_outputs(self, action_space: gym.spaces.Discrete) -> Output:
        """What it reads from a network: one logit per action, and nothing else."""
        return Output("logits", (int(action_space.n),))

    def log_prob(self, logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """`log pi(a|s)` `[B]`."""
        log_probs = tf.nn.log_softmax(logits)
        return tf.gather(log_probs, tf.cast(actions, tf.int32), axis=1, batch_dims=1)

    def entropy(self, logits: tf.Tensor) -> tf.Tensor:
        """`-sum_a pi(a|s) log pi(a|s)` `[B]`."""
        log_probs = tf.nn.log_softmax(logits)
        return -tf.reduce_sum(tf.exp(log_probs) * log_probs, axis=-1)

    def mode(self, logits: tf.Tensor) -> tf.Tensor:
        return tf.argmax(logits, axis=-1)

    def sample_numpy(
        self, logits: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """One action per row (one uniform draw each, as A2C samples), and its
        log-probability."""
        actions = sample_softmax(logits, rng)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return actions, np.take_along_axis(log_probs, actions[:, None], axis=1)[:, 0]

    def mode_numpy(self, logits: np.ndarray) -> np.ndarray:
        return np.argmax(logits, axis=-1)


@gin.configurable
class DiagonalGaussian:
    """Independent normals per action dimension: parameters `(mean, log_std)`, each `[B, D]`;
    log-probabilities and entropies sum over the dimensions (SB3's `DiagGaussianDistribution`).
    Samples are unbounded: the agent clips what the environment gets, and learns from the
    unclipped sample."""

    def network_outputs(self, action_space: gym.spaces.Box) -> tuple[Output, Output]:
        """What it reads from a network: a mean and a log std of the Box's shape."""
        return Output("mean", action_space.shape), Output("log_std", action_space.shape)

    def log_prob(self, parameters: tuple[tf.Tensor, tf.Tensor], actions: tf.Tensor) -> tf.Tensor:
        """`sum_d [-(a - mu)^2 / (2 sigma^2) - log sigma - log(2 pi) / 2]` `[B]`."""
        mean, log_std = parameters
        z = (tf.cast(actions, tf.float32) - mean) * tf.exp(-log_std)
        return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self, parameters: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        """`sum_d [1/2 + log(2 pi)/2 + log sigma]` `[B]`."""
        _, log_std = parameters
        return tf.reduce_sum(0.5 + 0.5 * _LOG_2PI + log_std, axis=-1)

    def mode(self, parameters: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        return parameters[0]

    def sample_numpy(
        self, parameters: tuple[np.ndarray, np.ndarray], rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        mean, log_std = parameters
        noise = rng.standard_normal(mean.shape).astype(np.float32)
        actions = mean + np.exp(log_std) * noise
        log_prob = np.sum(-0.5 * np.square(noise) - log_std - 0.5 * _LOG_2PI, axis=-1)
        return actions.astype(np.float32), log_prob.astype(np.float32)

    def mode_numpy(self, parameters: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return parameters[0]
