"""PPO's losses (Schulman et al., 2017) as parts: the clipped surrogate, the value loss with
optional clipping, and the entropy bonus. Each returns `(loss, extras)` like every loss.

Every one reads a minibatch's own numbers only; what they are computed from (the log-probabilities
and values the behaviour policy had when it acted, GAE's advantages and returns) comes with the
minibatch. The clip ranges may follow a schedule over environment steps (RL-Zoo's `lin_0.2`:
`optimizers.LinearDecay` from 0.2 to 0 over the run), read inside the compiled call.
"""

import dataclasses

import gin
import tensorflow as tf

from framework.parts.optimizers import ENVIRONMENT_STEPS, Schedule
from framework.validation import require_non_negative_number


def _check_clip_range(owner: object, clip_range: float | Schedule | None) -> None:
    """A number > 0, a schedule over environment steps, or None (no clipping)."""
    name = f"{type(owner).__name__}.clip_range"
    if clip_range is None:
        return
    if isinstance(clip_range, Schedule):
        if clip_range.unit != ENVIRONMENT_STEPS:
            raise ValueError(
                f"{name} follows {clip_range.describe()}: a clip range's schedule must count "
                f"environment steps (unit = '{ENVIRONMENT_STEPS}'), which the learner sets "
                "before each call."
            )
        return
    if (
        isinstance(clip_range, bool)
        or not isinstance(clip_range, int | float)
        or not clip_range > 0
    ):
        raise ValueError(
            f"{name} must be a number > 0 or a schedule over environment steps "
            f"(e.g. @optimizers.LinearDecay()), got {clip_range!r}."
        )


def current(clip_range: float | Schedule) -> tf.Tensor:
    """The clip range now: a schedule's value at the environment steps its learner set."""
    if isinstance(clip_range, Schedule):
        return clip_range(tf.constant(0, tf.int64))  # counts environment steps, not this
    return tf.constant(clip_range, tf.float32)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ClippedSurrogateLoss:
    """`-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))`, `r = exp(log pi(a|s) - log pi_old(a|s))`.

    With `normalize_advantage` the minibatch's advantages are standardised first (SB3's
    default, for minibatches of more than one sample). Its extras: the clip fraction (the share
    of samples whose ratio left `[1 - eps, 1 + eps]`) and SB3's approximate KL,
    `mean((r - 1) - log r)`, which the target-KL rule reads.
    """

    clip_range: float | Schedule = 0.2
    normalize_advantage: bool = True

    def __post_init__(self):
        if self.clip_range is None:
            raise ValueError("ClippedSurrogateLoss.clip_range must be set, got None.")
        _check_clip_range(self, self.clip_range)

    def __call__(
        self, log_prob: tf.Tensor, old_log_prob: tf.Tensor, advantages: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # log_prob [B] (with gradient), old_log_prob [B] and advantages [B] (without)
        advantages = tf.stop_gradient(advantages)
        if self.normalize_advantage and advantages.shape[0] != 1:
            mean, variance = tf.nn.moments(advantages, axes=[0])
            # torch's std is unbiased (SB3 divides by it): the same here.
            count = tf.cast(tf.size(advantages), tf.float32)
            std = tf.sqrt(variance * count / tf.maximum(count - 1.0, 1.0))
            advantages = (advantages - mean) / (std + 1e-8)
        log_ratio = log_prob - tf.stop_gradient(old_log_prob)
        ratio = tf.exp(log_ratio)
        clip = current(self.clip_range)
        surrogate = tf.minimum(
            ratio * advantages, tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip) * advantages
        )
        policy_loss = -tf.reduce_mean(surrogate)
        extras = {
            "policy_loss": policy_loss,
            "clip_fraction": tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > clip, tf.float32)),
            "approx_kl": tf.stop_gradient(tf.reduce_mean((ratio - 1.0) - log_ratio)),
            "clip_range": clip,
        }
        return policy_loss, extras


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ValueLoss:
    """`mean((V - G)^2)`; with `clip_range`, V first kept within `clip_range` of the value the
    behaviour policy's critic had (SB3's `clip_range_vf`: `V_old + clip(V - V_old, -c, c)`;
    OpenAI baselines' PPO2 takes the larger of the clipped and unclipped errors instead)."""

    clip_range: float | Schedule | None = None

    def __post_init__(self):
        _check_clip_range(self, self.clip_range)

    def __call__(
        self, values: tf.Tensor, old_values: tf.Tensor, returns: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # values [B] (with gradient), old_values [B] and returns [B] (without)
        if self.clip_range is not None:
            clip = current(self.clip_range)
            old_values = tf.stop_gradient(old_values)
            values = old_values + tf.clip_by_value(values - old_values, -clip, clip)
        value_loss = tf.reduce_mean(tf.square(values - tf.stop_gradient(returns)))
        return value_loss, {"value_loss": value_loss}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class EntropyBonus:
    """`-coef * mean(H(pi(.|s)))`: minimising it keeps the policy from collapsing early."""

    coef: float = 0.0

    def __post_init__(self):
        require_non_negative_number(self, coef=self.coef)

    def __call__(self, entropy: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # entropy [B]
        mean_entropy = tf.reduce_mean(entropy)
        return -self.coef * mean_entropy, {"entropy": mean_entropy}
