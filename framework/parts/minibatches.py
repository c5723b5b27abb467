"""Epochs of shuffled minibatches over one batch of samples, inside a compiled learner call.

PPO passes over each rollout `n_epochs` times, in minibatches drawn without replacement in a new
order every epoch (SB3's `RolloutBuffer.get`). Doing it inside the learner's call makes the
whole update one crossing into TensorFlow: the learner runs one gradient step per minibatch.
"""

import dataclasses

import gin
import numpy as np
import tensorflow as tf

from framework.validation import require_positive


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ShuffledMinibatches:
    """`n_epochs` permutations of the samples, each cut into minibatches of `batch_size`.

    The order is drawn on the host from the agent's generator (`order`) and crosses into the
    call with the rollout, where `gather` cuts the minibatches: XLA's sort on this CPU cost
    more than the numpy permutations and the whole rest of CartPole's update (docs/speed.md)."""

    n_epochs: int = 10
    batch_size: int = 64

    def __post_init__(self):
        require_positive(self, n_epochs=self.n_epochs, batch_size=self.batch_size)

    def order(self, num_samples: int, rng: np.random.Generator) -> np.ndarray:
        """Sample indices `[n_epochs * num_samples / batch_size, batch_size]` int32, epoch by
        epoch, each epoch a fresh permutation."""
        if num_samples % self.batch_size:
            raise ValueError(
                f"A rollout of {num_samples} samples does not split into minibatches of "
                f"ShuffledMinibatches.batch_size = {self.batch_size}: choose a batch size that "
                "divides n_steps x num_envs (e.g. "
                f"{_largest_divisor_at_most(num_samples, self.batch_size)})."
            )
        epochs = [rng.permutation(num_samples) for _ in range(self.n_epochs)]
        return np.concatenate(epochs).astype(np.int32).reshape(-1, self.batch_size)

    def spec(self) -> tf.TensorSpec:
        """The order's spec in a learner's batch (`[1, steps, batch_size]`, any steps)."""
        return tf.TensorSpec((1, None, self.batch_size), tf.int32)

    @staticmethod
    def gather(samples: dict[str, tf.Tensor], order: tf.Tensor) -> dict[str, tf.Tensor]:
        """`samples` `[M, ...]` as minibatches `[steps, batch_size, ...]` in `order`."""
        return {name: tf.gather(values, order) for name, values in samples.items()}


def _largest_divisor_at_most(number: int, limit: int) -> int:
    return max(d for d in range(1, min(number, limit) + 1) if number % d == 0)
