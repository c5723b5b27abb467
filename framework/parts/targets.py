"""TD targets: pure functions of a batch, always under `tf.stop_gradient`.

`discounts` already folds in the horizon and the episode end: `gamma^k * (1 - terminated)` for a
transition that bootstraps after k steps (the replay assembles n-step returns), so one formula
serves one-step and n-step targets.
"""

import dataclasses

import gin
import tensorflow as tf

from framework.parts.value_distribution import CategoricalSupport


@gin.configurable
@dataclasses.dataclass(frozen=True)
class QLearningTarget:
    """y = r + discount * max_a Q_target(s', a)."""

    def __call__(
        self,
        rewards: tf.Tensor,
        discounts: tf.Tensor,
        next_q_online: tf.Tensor,
        next_q_target: tf.Tensor,
    ) -> tf.Tensor:
        del next_q_online  # the target network both selects and evaluates
        return tf.stop_gradient(rewards + discounts * tf.reduce_max(next_q_target, axis=-1))


@gin.configurable
@dataclasses.dataclass(frozen=True)
class DoubleQLearningTarget:
    """y = r + discount * Q_target(s', argmax_a Q_online(s', a))  (van Hasselt et al., 2016).

    The online network selects the action and the target network evaluates it, which removes
    the max operator's overestimation bias.
    """

    def __call__(
        self,
        rewards: tf.Tensor,
        discounts: tf.Tensor,
        next_q_online: tf.Tensor,
        next_q_target: tf.Tensor,
    ) -> tf.Tensor:
        best_actions = tf.argmax(next_q_online, axis=-1, output_type=tf.int32)  # [B]
        evaluated = tf.gather(next_q_target, best_actions, axis=-1, batch_dims=1)  # [B]
        return tf.stop_gradient(rewards + discounts * evaluated)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class MinCriticTarget:
    """y = r + discount * min_i Q'_i(s', a'), a' the target policy's action at s'.

    One critic: DDPG's target (Lillicrap et al., 2015). Two: TD3's clipped double-Q target
    (Fujimoto et al., 2018), whose minimum counters the critics' overestimation.
    """

    def __call__(
        self, rewards: tf.Tensor, discounts: tf.Tensor, next_q_targets: list[tf.Tensor]
    ) -> tf.Tensor:
        # rewards, discounts [B]; next_q_targets: one [B] per target critic
        next_q = tf.reduce_min(tf.stack(next_q_targets), axis=0)  # [B]
        return tf.stop_gradient(rewards + discounts * next_q)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class CategoricalQLearningTarget:
    """C51's target (Bellemare et al., 2017): the distribution of `r + discount * Z(s', a*)`,
    `a* = argmax_a E[Z_target(s', a)]`, projected onto `support`'s atoms.

    Takes the networks' logits `[B, A, Z]` where the scalar targets take Q-values, and returns
    target probabilities `[B, Z]` for `CategoricalCrossEntropyLoss`. `support` (default: a
    `CategoricalSupport()` from its gin bindings) must be the network's.
    """

    support: CategoricalSupport | None = None

    def __post_init__(self):
        if self.support is None:  # frozen: the default support is set here, once
            object.__setattr__(self, "support", CategoricalSupport())

    def __call__(
        self,
        rewards: tf.Tensor,
        discounts: tf.Tensor,
        next_logits_online: tf.Tensor,
        next_logits_target: tf.Tensor,
    ) -> tf.Tensor:
        chooser = self._chooser(next_logits_online, next_logits_target)
        best_actions = tf.argmax(
            self.support.expected_values(chooser), axis=-1, output_type=tf.int32
        )
        logits = tf.gather(next_logits_target, best_actions, axis=1, batch_dims=1)  # [B, Z]
        return tf.stop_gradient(self.support.project(rewards, discounts, tf.nn.softmax(logits)))

    @staticmethod
    def _chooser(next_logits_online: tf.Tensor, next_logits_target: tf.Tensor) -> tf.Tensor:
        del next_logits_online  # the target network both selects and evaluates
        return next_logits_target


@gin.configurable
@dataclasses.dataclass(frozen=True)
class CategoricalDoubleQLearningTarget(CategoricalQLearningTarget):
    """`CategoricalQLearningTarget` with the action chosen by the online network's expected
    values and evaluated by the target network's distribution, as in Rainbow (Hessel et al.,
    2018)."""

    @staticmethod
    def _chooser(next_logits_online: tf.Tensor, next_logits_target: tf.Tensor) -> tf.Tensor:
        del next_logits_target
        return next_logits_online
