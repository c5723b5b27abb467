"""Losses: small gin-configurable callables, hyperparameters as fields, one call signature.

Each returns `(loss, extras)`: a scalar to minimise and a dict of scalar metric tensors that the
shared learner logs without knowing which loss ran. The TD losses also take optional per-sample
`weights` (a prioritized replay's importance weights: the loss is then `mean(w_i * l_i)`) and
return each sample's error under `per_sample/error` (step_wrappers.PER_SAMPLE), which a prioritized
replay turns into new priorities.
"""

import dataclasses

import gin
import tensorflow as tf

from framework.validation import require_non_negative_number, require_positive_number


@gin.configurable
@dataclasses.dataclass(frozen=True)
class PolicyGradientLoss:
    """REINFORCE's cross-entropy pseudo-loss `-log pi(a|s) * G`, averaged over the batch.

    Its gradient is the policy-gradient estimate. `returns` may already have a baseline
    subtracted. `entropy_coef > 0` subtracts `entropy_coef * H(pi(.|s))` to keep exploring.
    """

    entropy_coef: float = 0.0

    def __post_init__(self):
        require_non_negative_number(self, entropy_coef=self.entropy_coef)

    def __call__(
        self, logits: tf.Tensor, actions: tf.Tensor, returns: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # logits [B, A]; actions [B] int; returns [B]
        neg_log_prob = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(actions, tf.int32), logits=logits
        )  # [B]
        policy_loss = tf.reduce_mean(neg_log_prob * tf.stop_gradient(returns))
        log_probs = tf.nn.log_softmax(logits)
        entropy = tf.reduce_mean(-tf.reduce_sum(tf.exp(log_probs) * log_probs, axis=-1))
        loss = policy_loss - self.entropy_coef * entropy
        return loss, {"policy_loss": policy_loss, "entropy": entropy}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TDMSELoss:
    """Mean squared TD error `mean((target - Q(s, a))^2)`; the target carries no gradient."""

    def __call__(
        self, q_selected: tf.Tensor, targets: tf.Tensor, weights: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # Prediction minus target: the sign is free for a symmetric loss, and this order keeps a
        # negation out of the backward pass (see TDHuberLoss).
        td_error = q_selected - tf.stop_gradient(targets)  # [B]
        loss = weighted_mean(tf.square(td_error), weights)
        return loss, _td_extras(q_selected, td_error)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TDHuberLoss:
    """Huber loss on the TD error: quadratic within `delta`, linear outside (robust to outliers)."""

    delta: float = 1.0

    def __post_init__(self):
        require_positive_number(self, delta=self.delta)

    def __call__(
        self, q_selected: tf.Tensor, targets: tf.Tensor, weights: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # Prediction minus target, as Keras and SB3 write it. `target - q` gives the same loss,
        # but the negation it adds to the backward pass made XLA's CPU runtime schedule a
        # 256x256 DQN step noticeably slower (docs/speed.md).
        td_error = q_selected - tf.stop_gradient(targets)  # [B]
        abs_error = tf.abs(td_error)
        quadratic = tf.minimum(abs_error, self.delta)
        per_sample = 0.5 * tf.square(quadratic) + self.delta * (abs_error - quadratic)  # [B]
        return weighted_mean(per_sample, weights), _td_extras(q_selected, td_error)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class CategoricalCrossEntropyLoss:
    """C51's loss (Bellemare et al., 2017): the cross-entropy `-sum_z m_z log p_z(s, a)` from
    the projected target distribution `m` to the predicted one, averaged over the batch.

    Its per-sample error is that cross-entropy, as Dopamine's Rainbow prioritizes by it (the
    paper's KL differs by the target's entropy, which carries no gradient).
    """

    def __call__(
        self, logits: tf.Tensor, target_probabilities: tf.Tensor, weights: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # logits [B, Z] of the taken action; target_probabilities [B, Z], rows summing to 1
        cross_entropy = tf.nn.softmax_cross_entropy_with_logits(
            labels=tf.stop_gradient(target_probabilities), logits=logits
        )  # [B]
        loss = weighted_mean(cross_entropy, weights)
        return loss, {
            "cross_entropy": tf.reduce_mean(cross_entropy),
            PER_SAMPLE_ERROR: cross_entropy,
        }


# The key of a loss's per-sample error in its extras (step_wrappers.PER_SAMPLE + "error").
PER_SAMPLE_ERROR = "per_sample/error"


def weighted_mean(per_sample: tf.Tensor, weights: tf.Tensor | None) -> tf.Tensor:
    """`mean(l_i)`, or `mean(w_i * l_i)` with importance weights (Schaul et al., 2016)."""
    if weights is None:
        return tf.reduce_mean(per_sample)
    return tf.reduce_mean(tf.cast(weights, per_sample.dtype) * per_sample)


def _td_extras(q_selected: tf.Tensor, td_error: tf.Tensor) -> dict[str, tf.Tensor]:
    return {
        "mean_q": tf.reduce_mean(q_selected),
        "mean_abs_td_error": tf.reduce_mean(tf.abs(td_error)),
        PER_SAMPLE_ERROR: td_error,
    }


@gin.configurable
@dataclasses.dataclass(frozen=True)
class DeterministicPolicyLoss:
    """The deterministic policy-gradient actor loss `-mean(Q(s, mu(s)))` (Silver et al., 2014).

    Minimised over the actor's variables only (its update group's), so the gradient is
    `-mean(dQ/da * dmu/dtheta)`: the critic is read, never trained, by this loss.
    """

    def __call__(self, policy_q: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # policy_q [B]: Q(s, mu(s)) for the batch's states
        mean_q = tf.reduce_mean(policy_q)
        return -mean_q, {"mean_q": mean_q}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class SoftPolicyLoss:
    """SAC's actor loss `mean(alpha * log pi(a|s) - min_i Q_i(s, a))`, a ~ pi(.|s) reparameterised
    (Haarnoja et al., 2018).

    Minimised over the actor's variables only (its update group's): the critics are read, and
    `alpha` comes in without a gradient (the temperature has its own loss, `TemperatureLoss`).
    """

    def __call__(
        self, log_probs: tf.Tensor, policy_q: tf.Tensor, alpha: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # log_probs [B]: log pi(a|s) of the sampled actions; policy_q [B]: min_i Q_i(s, a)
        entropy = -tf.reduce_mean(log_probs)  # a one-sample estimate of H(pi(.|s))
        mean_q = tf.reduce_mean(policy_q)
        loss = tf.reduce_mean(tf.stop_gradient(alpha) * log_probs - policy_q)
        return loss, {"mean_q": mean_q, "entropy": entropy}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TemperatureLoss:
    """SAC's temperature loss `-mean(log_alpha * (log pi(a|s) + target_entropy))`, in SB3's form.

    Its gradient in log alpha is `-(mean log pi + target_entropy)` = `H - target_entropy` for
    the sampled entropy estimate H: alpha falls while the policy's entropy is above the target
    and rises below it. CleanRL writes `-alpha * (...)` instead, whose gradient in log alpha
    is alpha times this one (a smaller step as alpha shrinks). The log-probabilities come in
    without a gradient: this loss moves the temperature only.
    """

    def __call__(
        self, log_alpha: tf.Tensor, log_probs: tf.Tensor, target_entropy: float
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        # log_alpha []: the temperature's variable; log_probs [B]
        entropy = -tf.reduce_mean(log_probs)  # H, a one-sample estimate
        loss = -log_alpha * tf.stop_gradient(target_entropy - entropy)
        return loss, {"alpha": tf.exp(log_alpha), "entropy": entropy}
