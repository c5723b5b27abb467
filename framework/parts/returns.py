"""On-policy rollouts of `n` vector steps, and their returns: n-step bootstrapping or GAE(lambda).

A rollout is `[T, N]`: T vector steps of N sub-environments, as the loop hands them over. With
gymnasium's SAME_STEP autoreset a sub-environment's episode may end anywhere inside it and the
next row already belongs to a new episode, so the recursions below are cut at every done:
  - terminated at t: the MDP ended, nothing is bootstrapped (the discount is 0);
  - truncated at t: cut short by a time limit, bootstrapped from V(s'_t), the value of the
    episode's *final* observation (`VectorStep.next_observation`), never from row t + 1;
  - the rollout's last row: bootstrapped from V(s'_{T-1}) (where the next rollout starts).
No value or reward crosses an episode boundary. Every return part takes the same arguments and
gives the same pair, so an agent (A2C, or an A3C worker on its own rollout) binds either in gin:
`A2CAgent.returns = @NStepReturns()` or `@GAE()`. The results carry no gradient.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

import gin
import gymnasium as gym
import numpy as np
import tensorflow as tf

from framework.validation import require_positive, require_unit_interval

if TYPE_CHECKING:  # no import of the agent interface from a part
    from framework.agent import VectorStep


class Returns(NamedTuple):
    """What a return part gives, each `[T, N]` and under `stop_gradient`."""

    returns: tf.Tensor  # the value targets
    advantages: tf.Tensor  # what weights the policy gradient


def _discounts_and_continues(
    terminated: tf.Tensor, truncated: tf.Tensor, gamma: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """`gamma * (1 - terminated_t)`, and 1 where the recursion carries on from row t + 1 to t
    (no done at t, and t is not the rollout's last row), else 0. Both `[T, N]` float32."""
    terminated = tf.cast(terminated, tf.float32)
    done = tf.maximum(terminated, tf.cast(truncated, tf.float32))  # [T, N]
    last_row = tf.one_hot(tf.shape(done)[0] - 1, tf.shape(done)[0])[:, None]  # [T, 1]
    continues = (1.0 - done) * (1.0 - last_row)  # [T, N]
    return gamma * (1.0 - terminated), continues


_UNROLLED_ROWS = 16


def _reverse_recursion(step_terms: tf.Tensor, factors: tf.Tensor) -> tf.Tensor:
    """`x_t = step_terms_t + factors_t * x_{t+1}` from the last row back; `[T, N]`.

    Unrolled where T is short and known when traced (A2C's 5 rows): a loop op costs more than a
    few rows of arithmetic. Longer rollouts loop: XLA's compile time grows steeply with the
    unrolled rows, to minutes for PPO's 256, where the loop compiles in under a second
    (docs/speed.md)."""
    rows = step_terms.shape[0]
    if rows is not None and rows <= _UNROLLED_ROWS:
        following = tf.zeros_like(step_terms[0])
        out = []
        for t in reversed(range(rows)):
            following = step_terms[t] + factors[t] * following
            out.append(following)
        return tf.stack(out[::-1])
    return tf.scan(
        lambda following, row: row[0] + row[1] * following,
        (step_terms, factors),
        initializer=tf.zeros_like(step_terms[0]),
        reverse=True,
    )


@gin.configurable
class NStepReturns:
    """Bootstrapped n-step returns, each step looking ahead to the rollout's end or its done:

        G_t = r_t + gamma (1 - term_t) [(1 - c_t) V(s'_t) + c_t G_{t+1}],   A_t = G_t - V(s_t)

    with c_t = 1 where the episode carries on to row t + 1 inside the rollout (A2C, A3C).
    """

    def __call__(
        self,
        rewards: tf.Tensor,  # [T, N]
        values: tf.Tensor,  # [T, N] V(s_t)
        next_values: tf.Tensor,  # [T, N] V(s'_t): of the final observation where done
        terminated: tf.Tensor,  # [T, N]
        truncated: tf.Tensor,  # [T, N]
        gamma: float,
    ) -> Returns:
        rewards, values, next_values = (
            tf.stop_gradient(tf.cast(x, tf.float32)) for x in (rewards, values, next_values)
        )
        discounts, continues = _discounts_and_continues(terminated, truncated, gamma)
        # G_t = [r_t + d_t (1 - c_t) V(s'_t)] + [d_t c_t] G_{t+1}
        returns = _reverse_recursion(
            rewards + discounts * (1.0 - continues) * next_values, discounts * continues
        )
        return Returns(returns, returns - values)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class GAE:
    """Generalised advantage estimation (Schulman et al., 2016), cut at dones:

        delta_t = r_t + gamma (1 - term_t) V(s'_t) - V(s_t)
        A_t = delta_t + gamma lambda c_t A_{t+1},   G_t = A_t + V(s_t)

    `lambda_ = 1` gives the n-step returns above, `lambda_ = 0` one-step TD targets.
    """

    lambda_: float = 0.95

    def __post_init__(self):
        require_unit_interval(self, lambda_=self.lambda_)

    def __call__(self, rewards, values, next_values, terminated, truncated, gamma) -> Returns:
        rewards, values, next_values = (
            tf.stop_gradient(tf.cast(x, tf.float32)) for x in (rewards, values, next_values)
        )
        discounts, continues = _discounts_and_continues(terminated, truncated, gamma)
        deltas = rewards + discounts * next_values - values  # [T, N]
        advantages = _reverse_recursion(deltas, gamma * self.lambda_ * continues)
        return Returns(advantages + values, advantages)


def merge_time_and_envs(x: tf.Tensor) -> tf.Tensor:
    """A rollout's `[T, N, ...]` array as one batch `[T * N, ...]`, time-major."""
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))


class Rollout:
    """The last `n_steps` vector steps as `[T, N, ...]` arrays: the on-policy batch of A2C, PPO
    and an A3C worker. Actions take the action space's shape (int32 for a `Discrete`, float32
    for a `Box`); `extras` names the per-step arrays the agent's acting hands back
    (`VectorStep.extras`: PPO's log-probabilities, values and unclipped samples), each by the
    spec of one row. Its state (the partial rollout) goes into checkpoints, so a run stopped
    inside a rollout resumes exactly."""

    TRANSITION = ("observation", "action", "reward", "next_observation", "terminated", "truncated")

    def __init__(
        self,
        n_steps: int,
        observation_space: gym.Space,
        action_space: gym.Space | None = None,
        extras: dict[str, tf.TensorSpec] | None = None,
    ):
        require_positive(self, n_steps=n_steps)
        self.n_steps = n_steps
        self._row_specs = {
            "observation": tf.TensorSpec(observation_space.shape, observation_space.dtype),
            "action": _action_spec(action_space),
            "reward": tf.TensorSpec((), tf.float32),
            "next_observation": tf.TensorSpec(observation_space.shape, observation_space.dtype),
            "terminated": tf.TensorSpec((), tf.float32),
            "truncated": tf.TensorSpec((), tf.float32),
            **(extras or {}),
        }
        self.fields = tuple(self._row_specs)
        self.steps = 0  # rows filled
        self._arrays = self._allocate(0)

    def _allocate(self, num_envs: int) -> dict[str, np.ndarray]:
        rows = (self.n_steps, num_envs)
        return {
            name: np.zeros((*rows, *spec.shape), spec.dtype.as_numpy_dtype)
            for name, spec in self._row_specs.items()
        }

    @property
    def full(self) -> bool:
        return self.steps == self.n_steps

    @property
    def num_envs(self) -> int:
        """The sub-environments of the rows stored (0 before the first)."""
        return self._arrays["reward"].shape[1]

    def add(self, step: VectorStep) -> None:
        """Stores one vector step as the next row; raises if the rollout is already full."""
        if self.full:
            raise RuntimeError("Rollout.add: the rollout is full; take its batch first.")
        if self._arrays["reward"].shape[1] != step.num_envs:
            self._arrays = self._allocate(step.num_envs)
        for name in self.TRANSITION:
            self._arrays[name][self.steps] = getattr(step, name)
        for name in self.fields[len(self.TRANSITION) :]:
            if name not in step.extras:
                raise KeyError(
                    f"Rollout.add: the step carries no {name!r} among its extras "
                    f"({sorted(step.extras)}): the agent's act_with_extras must return it."
                )
            self._arrays[name][self.steps] = step.extras[name]
        self.steps += 1

    def take(self) -> dict[str, np.ndarray]:
        """The full rollout's arrays `[T, N, ...]` (valid until the next `add`); empties it."""
        if not self.full:
            raise RuntimeError(f"Rollout.take: {self.steps} of {self.n_steps} rows filled.")
        self.steps = 0
        return self._arrays

    def end_episodes(self) -> None:
        """The sub-environments restart without a done: the rows so far end truncated (their
        last next observation still bootstraps its episode's returns)."""
        if self.steps:
            self._arrays["truncated"][self.steps - 1] = 1.0

    def state(self) -> dict[str, Any]:
        return {"steps": self.steps, **{name: a.copy() for name, a in self._arrays.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self._arrays = {name: np.array(state[name]) for name in self.fields}

    def spec(self) -> dict[str, tf.TensorSpec]:
        """The learner's `batch_spec` for a stack of one rollout `[1, T, N, ...]` (any N): one
        trace for a whole run."""
        rows = (1, self.n_steps, None)
        return {
            name: tf.TensorSpec((*rows, *spec.shape), spec.dtype)
            for name, spec in self._row_specs.items()
        }


def _action_spec(action_space: gym.Space | None) -> tf.TensorSpec:
    """One action's spec: an int32 index for a `Discrete` space (or none given), a float32
    vector for a `Box`."""
    if action_space is None or isinstance(action_space, gym.spaces.Discrete):
        return tf.TensorSpec((), tf.int32)
    if isinstance(action_space, gym.spaces.Box):
        return tf.TensorSpec(action_space.shape, tf.float32)
    raise ValueError(
        f"Rollout: actions of a {type(action_space).__name__} space cannot be stored; a "
        "rollout holds Discrete or Box actions."
    )
