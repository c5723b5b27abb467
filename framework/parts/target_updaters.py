"""Target-network updaters: one family parameterised by `(tau, period)`.

Every `period` applied updates, `target = decay * target + (1 - decay) * online` with
`decay = 1 - tau`; `tau = 1` is the hard copy. Non-trainable variables (batch-norm statistics,
counters) are copied outright: averaging them is meaningless, and impossible for integers.
"""

from collections.abc import Sequence

import gin
import tensorflow as tf

from framework.validation import require_positive


def _name(variable: tf.Variable) -> str:
    """Keras variables have a full `path`; plain tf.Variables only a `name`."""
    return getattr(variable, "path", variable.name)


@gin.configurable
class TargetUpdater:
    """Polyak averaging every `period` steps; returns whether it updated this step."""

    def __init__(self, tau: float = 1.0, period: int = 1):
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not 0.0 < tau <= 1.0:
            raise ValueError(f"{type(self).__name__}.tau must be a number in (0, 1], got {tau!r}.")
        require_positive(self, period=period)
        self.tau = tau
        self.period = period

    def check(self, online: Sequence[tf.Variable], target: Sequence[tf.Variable]) -> None:
        """Rejects mismatched or shared variable lists before any update is traced."""
        if len(online) != len(target):
            raise ValueError(
                f"{type(self).__name__}: {len(online)} online variables but {len(target)} "
                "target variables; the two networks must have the same structure."
            )
        target_ids = {id(v) for v in target}
        shared = [_name(v) for v in online if id(v) in target_ids]
        if shared:
            raise ValueError(
                f"{type(self).__name__}: variables {shared} are shared by the online and "
                "target networks; the target must be a separate copy."
            )
        for source, dest in zip(online, target, strict=True):
            if source.shape != dest.shape:
                raise ValueError(
                    f"{type(self).__name__}: shape mismatch {_name(source)}{source.shape} vs "
                    f"{_name(dest)}{dest.shape}."
                )

    def __call__(
        self, online: Sequence[tf.Variable], target: Sequence[tf.Variable], step: tf.Tensor
    ) -> tf.Tensor:
        """`step` counts applied updates, starting at 1 for the first."""
        due = tf.equal(tf.math.floormod(step, self.period), 0)

        def update():
            for source, dest in zip(online, target, strict=True):
                if self.tau == 1.0 or not source.trainable:
                    dest.assign(source)
                else:
                    dest.assign((1.0 - self.tau) * dest + self.tau * source)
            return tf.constant(True)

        return tf.cond(due, update, lambda: tf.constant(False))


@gin.configurable
class HardUpdate(TargetUpdater):
    """Copies the online weights into the target every `period` updates (DQN)."""

    def __init__(self, period: int = 1000):
        super().__init__(tau=1.0, period=period)


@gin.configurable
class SoftUpdate(TargetUpdater):
    """EMA target after every update: `decay = 1 - tau` (DDPG, SAC; Polyak averaging)."""

    def __init__(self, tau: float = 0.005):
        super().__init__(tau=tau, period=1)


@gin.configurable
class NoUpdate(TargetUpdater):
    """For agents without a target network, or to freeze one."""

    def __call__(
        self, online: Sequence[tf.Variable], target: Sequence[tf.Variable], step: tf.Tensor
    ) -> tf.Tensor:
        return tf.constant(False)
