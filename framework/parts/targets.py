"""TD targets: pure functions of a batch, always under `tf.stop_gradient`.

`discounts` already folds in the horizon and the episode end: `gamma^k * (1 - terminated)` for a
transition that bootstraps after k steps (the replay assembles n-step returns), so one formula
serves one-step and n-step targets.
"""

import gin
import tensorflow as tf


@gin.configurable
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
