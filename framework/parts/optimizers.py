"""Keras optimizers, and learning-rate schedules that say what they count, exposed to gin.

`gin.tf` cannot be imported with recent TensorFlow (it reaches for tf.estimator), so the Keras
optimizers are registered here. In a gin file: `DQNAgent.optimizer = @optimizers.Adam()`,
`optimizers.Adam.learning_rate = 1e-3`, or `= @optimizers.LinearDecay()`.

A schedule counts `unit = 'environment_steps'` (transitions summed over the sub-environments,
what every other count in a config means; the default) or `'updates'` (applied optimizer
updates: `Accumulate` counts once per apply, a delayed update group only when it runs). A
rate changes at the first update at or after its boundary. Keras's own schedules count
optimizer iterations only, so "0.96 every 10000 steps" silently meant updates.
"""

import abc

import gin
import keras
import numpy as np
import tensorflow as tf

from framework.parts.run_length import RunLengthSchedule
from framework.validation import require_positive_number

for _optimizer in (keras.optimizers.Adam, keras.optimizers.RMSprop, keras.optimizers.SGD):
    gin.external_configurable(_optimizer, module="optimizers")


@gin.configurable(module="optimizers")
class TorchAdam(keras.optimizers.Adam):
    """Adam with epsilon where `torch.optim.Adam` adds it: to the bias-corrected sqrt(v_hat).

    Keras adds epsilon to sqrt(v) and folds the bias correction sqrt(1 - beta_2^t) into the step
    size, which is torch's update with epsilon / sqrt(1 - beta_2^t) in epsilon's place: ~32x
    epsilon at the first step (beta_2 = 0.999), ~1.4x after 640 steps, the same after a few
    thousand. That matters where gradients are as small as epsilon: PPO's global-norm clip,
    dominated by the value loss, leaves the policy torso's gradients near SB3's epsilon of 1e-5,
    so its first rollouts move the policy less under Keras's Adam than under SB3's. For
    comparisons with torch peers; otherwise Keras's Adam, with its options (no amsgrad here),
    and torch's default epsilon, 1e-8.
    """

    def __init__(
        self,
        learning_rate: "float | Schedule" = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        **kwargs,
    ):
        if kwargs.get("amsgrad"):
            raise ValueError("optimizers.TorchAdam has no amsgrad: use optimizers.Adam for it.")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = tf.cast(gradient, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        bias_correction_1 = 1.0 - tf.pow(tf.cast(self.beta_1, dtype), step)
        bias_correction_2 = 1.0 - tf.pow(tf.cast(self.beta_2, dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, (gradient - m) * (1.0 - self.beta_1))
        self.assign_add(v, (tf.square(gradient) - v) * (1.0 - self.beta_2))
        denominator = tf.sqrt(v) / tf.sqrt(bias_correction_2) + self.epsilon
        step_size = tf.cast(learning_rate, dtype) / bias_correction_1
        self.assign_sub(variable, step_size * m / denominator)


@gin.configurable(module="optimizers")
class TorchRMSprop(keras.optimizers.RMSprop):
    """RMSprop with epsilon where `torch.optim.RMSprop` adds it: to the root, outside it.

    Both keep v = rho v + (1 - rho) g^2 and, `centered`, m = rho m + (1 - rho) g; torch steps by
    lr g / (sqrt(v - m^2) + epsilon), Keras by lr g / sqrt(v - m^2 + epsilon). With MinAtar's
    epsilon of 0.01 (its DQN's `torch.optim.RMSprop(lr=2.5e-4, alpha=0.95, centered=True,
    eps=0.01)`) and gradients whose spread is far below it, torch's denominator is ~0.01 and
    Keras's ~0.1: Keras's steps are ten times smaller. Nature DQN's "min squared gradient"
    (Mnih et al., 2015; the Lua code) is Keras's form; MinAtar's numbers come from torch's.
    `momentum` as torch's: a buffer of the steps before the rate, b = momentum b + step.
    """

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = tf.cast(gradient, dtype)
        index = self._get_variable_index(variable)
        velocity = self._velocities[index]
        self.assign(velocity, self.rho * velocity + (1.0 - self.rho) * tf.square(gradient))
        spread = velocity
        if self.centered:
            average = self._average_gradients[index]
            self.assign(average, self.rho * average + (1.0 - self.rho) * gradient)
            spread = velocity - tf.square(average)
        step = gradient / (tf.sqrt(spread) + self.epsilon)
        rate = tf.cast(learning_rate, dtype)
        if self.momentum > 0:
            buffer = self._momentums[index]
            self.assign(buffer, self.momentum * buffer + step)
            step = buffer
        self.assign_sub(variable, rate * step)


@gin.configurable(module="optimizers")
class FusedRMSprop(keras.optimizers.RMSprop):
    """Keras's RMSprop (epsilon inside the root) as one TensorFlow kernel per variable:
    `ResourceApplyRMSProp`, or `ResourceApplyCenteredRMSProp` when `centered`, the training ops
    `tf.compat.v1.train.RMSPropOptimizer` ran (Dopamine's DQN).

    Keras composes the update from ~10 elementwise ops, each a pass over the variable; outside
    XLA each is a kernel launch and a temporary. On the Nature CNN's 1.7M weights that is ~4 ms a
    step on 2 cores against ~1.7 ms fused (`docs/speed.md`). The maths are Keras's; the kernel
    sums in its own order (`ms += (g^2 - ms)(1 - rho)`), so results differ from Keras's in the
    last bits. The kernel always keeps a momentum buffer: with `momentum` 0 it holds the last
    step, which the next one does not read.
    """

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        if not self._momentums:
            self._momentums = self.add_optimizer_variables(var_list, "momentum")

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        options = dict(
            var=variable.handle,
            ms=self._velocities[index].handle,
            mom=self._momentums[index].handle,
            lr=tf.cast(learning_rate, dtype),
            rho=tf.cast(self.rho, dtype),
            momentum=tf.cast(self.momentum, dtype),
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
        )
        if self.centered:
            tf.raw_ops.ResourceApplyCenteredRMSProp(
                mg=self._average_gradients[index].handle, **options
            )
        else:
            tf.raw_ops.ResourceApplyRMSProp(**options)


ENVIRONMENT_STEPS = "environment_steps"
UPDATES = "updates"
_UNITS = (ENVIRONMENT_STEPS, UPDATES)


def check_learning_rate(optimizer: keras.optimizers.Optimizer) -> None:
    """A constant learning rate must be positive: a negative one ascends the loss, silently."""
    rate = optimizer.get_config()["learning_rate"]
    if isinstance(rate, float):  # else a schedule
        written = float(str(np.float32(rate)))  # Keras keeps a float32: the number as written
        require_positive_number(f"optimizers.{type(optimizer).__name__}", learning_rate=written)


def schedule_of(optimizer: keras.optimizers.Optimizer) -> "Schedule | None":
    """The optimizer's learning-rate schedule, if it follows one of ours. (Keras keeps it in
    `_learning_rate`: its public `learning_rate` is the current value.)"""
    rate = getattr(optimizer, "_learning_rate", None)
    return rate if isinstance(rate, Schedule) else None


class Schedule(keras.optimizers.schedules.LearningRateSchedule, RunLengthSchedule, abc.ABC):
    """A learning rate as a function of environment steps or applied updates; its length
    (`length_name`) left None is the run's."""

    def __init__(self, unit: str):
        if unit not in _UNITS:
            raise ValueError(
                f"{type(self).__name__}.unit must be one of {list(_UNITS)}, got {unit!r}."
            )
        self.unit = unit
        # The run's environment steps, set by the learner whose optimizer follows this
        # schedule before each call (`Learner.run(batches, environment_steps)`). Not saved:
        # it is set again before the first update after a resume.
        self.environment_steps = (
            tf.Variable(0, dtype=tf.int64, trainable=False, name="environment_steps")
            if unit == ENVIRONMENT_STEPS
            else None
        )

    @property
    def counts_environment_steps(self) -> bool:
        return self.unit == ENVIRONMENT_STEPS

    def check_length(self) -> None:
        """A length left None is the run's, in environment steps: not one counting updates."""
        if self.follows_run and not self.counts_environment_steps:
            raise ValueError(
                f"{type(self).__name__}.{self.length_name} = None follows the run's length, "
                f"which counts environment steps: a schedule with unit = '{self.unit}' needs "
                "a length of its own."
            )
        super().check_length()

    def __call__(self, iterations: tf.Tensor) -> tf.Tensor:
        """`iterations` is the optimizer's count of applied updates."""
        step = iterations if self.environment_steps is None else self.environment_steps
        return self.rate(tf.cast(step, tf.float32))

    @abc.abstractmethod
    def rate(self, step: tf.Tensor) -> tf.Tensor:
        """The learning rate at `step` (in `unit`)."""

    def describe(self) -> str:
        """One line for the log: the schedule, its values and what it counts."""
        values = ", ".join(f"{k}={v}" for k, v in self.get_config().items() if k != "unit")
        counting = self.unit.replace("_", " ")
        return f"{type(self).__name__}({values}) counting {counting}{self.describe_length()}"


@gin.configurable(module="optimizers")
class ExponentialDecay(Schedule):
    """`initial_learning_rate * decay_rate ** (step / decay_steps)`, floored per period when
    `staircase`; `decay_steps` None: the run's length (`decay_rate` over the whole run)."""

    length_name = "decay_steps"

    def __init__(
        self,
        initial_learning_rate: float = gin.REQUIRED,
        decay_steps: int | None = None,
        decay_rate: float = gin.REQUIRED,
        staircase: bool = False,
        unit: str = ENVIRONMENT_STEPS,
    ):
        super().__init__(unit)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.check_length()

    def rate(self, step: tf.Tensor) -> tf.Tensor:
        periods = step / self.required_length()
        if self.staircase:
            periods = tf.floor(periods)
        return self.initial_learning_rate * tf.pow(self.decay_rate, periods)

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "unit": self.unit,
        }


@gin.configurable(module="optimizers")
class LinearDecay(Schedule):
    """From `initial_learning_rate` to `final_learning_rate` over `duration`, then constant;
    `duration` None: the run's length (RL-Zoo's `lin_`)."""

    def __init__(
        self,
        initial_learning_rate: float = gin.REQUIRED,
        final_learning_rate: float = gin.REQUIRED,
        duration: int | None = None,
        unit: str = ENVIRONMENT_STEPS,
    ):
        super().__init__(unit)
        self.initial_learning_rate = initial_learning_rate
        self.final_learning_rate = final_learning_rate
        self.duration = duration
        self.check_length()

    def rate(self, step: tf.Tensor) -> tf.Tensor:
        fraction = tf.minimum(step / self.required_length(), 1.0)
        return self.initial_learning_rate + fraction * (
            self.final_learning_rate - self.initial_learning_rate
        )

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "final_learning_rate": self.final_learning_rate,
            "duration": self.duration,
            "unit": self.unit,
        }
