"""Exploration: the epsilon schedule, and action noise for deterministic continuous policies.

A noise part is a small object with one call signature, `noise(rng, shape) -> [N, A]`, drawn
from the agent's generator, in units of the action half-range `(high - low) / 2` (the agent
scales and clips); `reset(done)` restarts the processes of the sub-environments whose episode
ended (None: all); `state()`/`load_state()` carry what it remembers across a checkpoint;
`scale` is its stationary standard deviation, which the agent logs.
"""

import dataclasses
import math
from collections.abc import Callable

import gin
import numpy as np

from framework.parts.run_length import RunLengthSchedule
from framework.validation import require_non_negative, require_non_negative_number


def softmax(logits: np.ndarray) -> np.ndarray:
    """Action probabilities of a softmax policy, row by row."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def sample_softmax(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of `logits` [N, A], by inverse CDF: one uniform draw per row."""
    cumulative = softmax(logits).cumsum(axis=-1)
    draws = rng.random((len(logits), 1))
    return np.minimum((cumulative < draws).sum(axis=-1), logits.shape[-1] - 1)


def epsilon_greedy(
    greedy: Callable[[], np.ndarray],
    num_envs: int,
    epsilon: float,
    num_actions: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """`num_envs` actions, each uniform with probability `epsilon`, else the greedy one.

    `greedy()` (the network's argmax over all the observations, [N]) runs only when some
    sub-environment takes its action, as Dopamine and SB3 skip the network while exploring: on
    Pong that is most of an exploring step's acting time (docs/speed.md, "DQN on Pong in the
    loop"). The generator's draws do not depend on it, so a seed gives the same actions whether
    it runs or not. The exploring actions are written into the array `greedy()` returns."""
    if epsilon <= 0:
        return greedy()
    explores = rng.random(num_envs) < epsilon  # [N]
    count = np.count_nonzero(explores)
    actions = greedy() if count < num_envs else np.empty(num_envs, dtype=np.intp)
    if count:
        actions[explores] = rng.integers(num_actions, size=count)
    return actions


def q_value_diagnostics(q_values: np.ndarray) -> dict[str, float]:
    """The greedy value at one observation, and each action's for small action sets."""
    metrics = {"policy/max_q": float(q_values.max())}
    if len(q_values) <= 16:
        metrics.update({f"policy/q_{i}": float(q) for i, q in enumerate(q_values)})
    return metrics


@gin.configurable
@dataclasses.dataclass
class LinearSchedule(RunLengthSchedule):
    """Linear interpolation from `start` to `end` over `duration` steps, then constant;
    `duration` None: the run's length (PER's beta, 0.4 to 1 over the run). `delay`: steps at
    `start` before the interpolation begins (MinAtar's DQN anneals epsilon from its replay
    start).

    A pure function of the step (once the run's length is given), so resuming at a step resumes
    the schedule with it.
    """

    start: float = 1.0
    end: float = 0.05
    duration: int | None = 10_000
    delay: int = 0

    def __post_init__(self):
        self.check_length()
        require_non_negative(self, delay=self.delay)

    def __call__(self, step: int) -> float:
        fraction = min(max(step - self.delay, 0) / self.required_length(), 1.0)
        return self.start + fraction * (self.end - self.start)

    def describe(self) -> str:
        """One line for the log: its values and what it counts."""
        values = f"start={self.start}, end={self.end}, duration={self.duration}"
        values += f", delay={self.delay}" if self.delay else ""
        return f"LinearSchedule({values}) counting environment steps{self.describe_length()}"


def bounding_values(schedule: Callable[[int], float]) -> list[tuple[str, float]]:
    """(where, value) pairs between which a schedule's values lie, for a range check: a
    LinearSchedule's ends (whatever its length, even a run's not given yet), another's first
    value and one far on."""
    if isinstance(schedule, LinearSchedule):
        end = "the run's end" if schedule.length is None else f"environment step {schedule.length}"
        return [("environment step 0", schedule.start), (end, schedule.end)]
    return [(f"environment step {step}", schedule(step)) for step in (0, 10**12)]


def check_probability_schedule(owner: str, schedule: Callable[[int], float]) -> None:
    """An exploration probability stays in [0, 1] all run long: checked where it is one (the
    generic schedule may decay anything), at the values that bound it."""
    for where, value in bounding_values(schedule):
        if not 0.0 <= value <= 1.0:
            raise ValueError(
                f"{owner} gives an exploration probability of {value:g} at {where} "
                f"({_described(schedule)}): epsilon must stay in [0, 1]. Bind its start and "
                "end within [0, 1], e.g. LinearSchedule.start = 1.0."
            )


def _described(schedule: object) -> str:
    fields = getattr(schedule, "__dict__", {})
    values = ", ".join(f"{k}={v}" for k, v in fields.items() if not k.startswith("_"))
    return f"{type(schedule).__name__}({values})"


@gin.configurable
@dataclasses.dataclass(frozen=True)
class GaussianNoise:
    """Independent N(0, stddev^2) per step, sub-environment and action dimension (TD3)."""

    stddev: float = 0.1

    def __post_init__(self):
        require_non_negative_number(self, stddev=self.stddev)

    @property
    def scale(self) -> float:
        return self.stddev

    def __call__(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.normal(0.0, self.stddev, size=shape)

    def reset(self, done: np.ndarray | None = None) -> None:
        """Memoryless: nothing to restart."""

    def state(self) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        del state


@gin.configurable
class OrnsteinUhlenbeckNoise:
    """Temporally correlated noise (Lillicrap et al., 2015), one process per sub-env and dim:

        x_{t+1} = x_t - theta * x_t * dt + sigma * sqrt(dt) * eps_t,   eps_t ~ N(0, 1),

    starting at x = 0 and restarting at 0 where an episode ended. Each call advances the
    process one step and returns the new x. Its stationary variance is
    sigma^2 dt / (1 - (1 - theta dt)^2).
    """

    def __init__(self, theta: float = 0.15, sigma: float = 0.2, dt: float = 1.0):
        if not 0.0 < theta * dt < 2.0:
            raise ValueError(
                f"OrnsteinUhlenbeckNoise: theta * dt must be in (0, 2) for a stationary "
                f"process, got theta={theta}, dt={dt}."
            )
        require_non_negative_number(self, sigma=sigma)
        self.theta, self.sigma, self.dt = theta, sigma, dt
        self._x = np.zeros((0, 0))  # [N, A], allocated at the first call

    @property
    def scale(self) -> float:
        decay = 1.0 - self.theta * self.dt
        return self.sigma * math.sqrt(self.dt / (1.0 - decay**2))

    def __call__(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self._x.shape != tuple(shape):
            self._x = np.zeros(shape)
        eps = rng.normal(size=shape)
        self._x = self._x - self.theta * self._x * self.dt + self.sigma * math.sqrt(self.dt) * eps
        return self._x.copy()

    def reset(self, done: np.ndarray | None = None) -> None:
        """Restarts at 0 the processes of the sub-envs where `done` [N] is true; None: all."""
        if done is None:
            self._x[:] = 0.0
        elif len(self._x):
            self._x[np.asarray(done, bool)] = 0.0

    def state(self) -> dict[str, np.ndarray]:
        return {"x": self._x.copy()}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._x = np.array(state["x"], np.float64)
