"""The squashed Gaussian policy distribution (Haarnoja et al., 2018, appendix C).

`a = tanh(u)`, `u = mean + std * eps`, `eps ~ N(0, I)`: a reparameterised sample in (-1, 1)^A
whose gradient flows into the mean and log std. Its log-density in the squashed space is the
Gaussian's minus the change of variables, `sum_i log(1 - tanh(u_i)^2)`, computed as
`2 * (log 2 - u - softplus(-2u))`, which stays finite where tanh(u) rounds to +-1 (SB3 adds
1e-6 inside the log instead, which biases it there). The agent scales `a` to the Box's bounds.
"""

import math

import gin
import gymnasium as gym
import numpy as np
import tensorflow as tf

from framework.parts.network_fit import Output

_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


@gin.configurable
class SquashedGaussian:
    """tanh of a diagonal Gaussian, its log std clamped to [log_std_min, log_std_max].

    The clamp (SB3's [-20, 2]) keeps the std away from 0 (a log-density of +inf) and from
    exploding; like SB3's `clamp`, it passes no gradient where it binds.
    """

    def __init__(self, log_std_min: float = -20.0, log_std_max: float = 2.0):
        if not log_std_min < log_std_max:
            raise ValueError(
                "SquashedGaussian needs log_std_min < log_std_max, got "
                f"log_std_min={log_std_min!r}, log_std_max={log_std_max!r}."
            )
        self.log_std_min = float(log_std_min)
        self.log_std_max = float(log_std_max)

    def network_outputs(self, action_space: gym.spaces.Box) -> tuple[Output, Output]:
        """What it reads from the actor: a mean and a log std of the Box's shape."""
        return Output("mean", action_space.shape), Output("log_std", action_space.shape)

    def sample(
        self, mean: tf.Tensor, log_std: tf.Tensor, noise: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """`(tanh(u) [B, A], log pi(tanh(u)) [B])` for `u = mean + std * noise`, noise ~ N(0, I)."""
        log_std = tf.clip_by_value(log_std, self.log_std_min, self.log_std_max)  # [B, A]
        u = mean + tf.exp(log_std) * noise  # [B, A]
        gaussian = -0.5 * tf.square(noise) - log_std - _HALF_LOG_TWO_PI  # log N(u; mean, std)
        log_prob = tf.reduce_sum(gaussian - log_one_minus_tanh_squared(u), axis=-1)  # [B]
        return tf.tanh(u), log_prob

    def sample_numpy(self, mean: np.ndarray, log_std: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """The sample alone, in numpy, for acting: `tanh(mean + std * noise)` [N, A]."""
        log_std = np.clip(log_std, self.log_std_min, self.log_std_max)
        return np.tanh(mean + np.exp(log_std) * noise)

    @staticmethod
    def mode(mean: np.ndarray) -> np.ndarray:
        """The deterministic action that evaluation takes: `tanh(mean)` (numpy or TensorFlow)."""
        return np.tanh(mean) if isinstance(mean, np.ndarray) else tf.tanh(mean)


def log_one_minus_tanh_squared(u: tf.Tensor) -> tf.Tensor:
    """`log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))`, finite for every finite u."""
    return 2.0 * (math.log(2.0) - u - tf.nn.softplus(-2.0 * u))
