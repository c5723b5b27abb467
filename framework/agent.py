"""The interface between an agent and the loop that drives it; the framework knows no algorithm.

An agent is batched over the N sub-environments of a vector environment: it acts on N
observations at once and observes the N transitions of one vector step. Its update returns
metrics (logged, never read by the loop) and a typed `Health` record (read by the loop to stop
or count non-finite updates). Everything it must keep across a restart is one nested `state()`
dict, given back to `load_state` after a checkpoint restore. Its schedules may span the run:
the runner gives it the run's length before training (`follow_run`).
"""

import abc
import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np

# A nested dict whose leaves are TF trackables (networks, optimizers, learners: restored in
# place), numpy arrays, or JSON-able values (both handed back to `load_state`).
State = dict[str, Any]
Metrics = dict[str, Any]  # scalar tensors or floats, converted only when logged
# Per-step arrays `[N, ...]` an agent computes while acting and gets back with the transition
# (PPO: the behaviour policy's log-probability, V(s), the unclipped sample).
Extras = Mapping[str, np.ndarray]
NO_EXTRAS: Extras = types.MappingProxyType({})

HEALTH_FIELDS = (
    "gradient_steps",
    "applied_updates",
    "nonfinite_steps",
    "nonfinite_losses",
    "nonfinite_variables",
)


@dataclasses.dataclass
class Health:
    """What one or more learner calls did, as Python ints (summed across calls with `+`)."""

    gradient_steps: int = 0  # gradient steps attempted
    applied_updates: int = 0  # optimizer applies, summed over groups
    # Steps where some group's loss or gradient was NaN/inf, or its gradients' global norm
    # overflowed float32 (skipped).
    nonfinite_steps: int = 0
    nonfinite_losses: int = 0  # of those, the steps with a non-finite loss (else the gradient)
    nonfinite_variables: int = 0  # calls after which a variable was NaN/inf despite finite updates

    @classmethod
    def from_tensor(cls, tensor: Any | np.ndarray | Sequence[int]) -> "Health":
        """From the vector the learner returns, in `HEALTH_FIELDS` order."""
        return cls(*(int(value) for value in np.asarray(tensor).tolist()))

    def __add__(self, other: "Health") -> "Health":
        return Health(*(getattr(self, name) + getattr(other, name) for name in HEALTH_FIELDS))


class VectorStep(NamedTuple):
    """The N transitions of one step of a vector environment, one row per sub-environment."""

    observation: np.ndarray  # [N, *obs_shape]
    action: np.ndarray  # [N, *action_shape]
    reward: np.ndarray  # [N] float
    next_observation: np.ndarray  # [N, *obs_shape]; the final observation where an episode ended
    terminated: np.ndarray  # [N] bool: the MDP ended, do not bootstrap
    truncated: np.ndarray  # [N] bool: cut short (time limit), bootstrap from next_observation
    extras: Extras = NO_EXTRAS  # what `act_with_extras` gave with these actions

    @property
    def num_envs(self) -> int:
        return len(self.reward)


class RunSchedule(Protocol):
    """A schedule an agent follows over the run (`Agent.named_schedules`), whose length, left
    None, is the run's (`framework/parts/run_length.py`)."""

    length_name: str  # what the config calls its length ("duration")
    follows_run: bool  # its length was left None
    counts_environment_steps: bool  # its length counts what Runner.num_steps counts
    length: int | None  # its own, or the run's once given

    def set_run_length(self, num_steps: int) -> None: ...

    def describe(self) -> str: ...


class Agent(abc.ABC):
    """Acts, observes and updates itself; owns its generators, networks, learner and replay.

    `rng` drives training (exploration, sampling); `eval_rng` only evaluation, reseeded before
    each, so that how often one evaluates never changes the training run.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int):
        self.observation_space = observation_space
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)
        self.eval_rng = np.random.default_rng(seed)
        # The length the schedules that follow the run span: the first start's num_steps.
        self.run_length: int | None = None

    @abc.abstractmethod
    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        """Actions `[N, ...]` for observations `[N, ...]`; `explore=False` is the eval policy."""

    def act_with_extras(self, observations: np.ndarray) -> tuple[np.ndarray, Extras]:
        """Training's acting: the actions the environment gets, and per-step extras that the
        loop hands back in `VectorStep.extras` with the transition. An agent that learns from
        what it computed while acting overrides it (PPO: the log-probability of the unclipped
        sample, whose clipped value the environment gets); by default `act(explore=True)`."""
        return self.act(observations, explore=True), NO_EXTRAS

    @abc.abstractmethod
    def observe(self, step: VectorStep) -> None:
        """Takes in the N transitions of one vector step."""

    @abc.abstractmethod
    def update(self, env_steps: int) -> tuple[Metrics, Health]:
        """Runs the learner as often as it is due (maybe never): its metrics and health.
        `env_steps` is the run's count of environment steps (learning-rate schedules read it)."""

    def state(self) -> State:
        """Everything a restart needs; subclasses extend this dict with theirs. The run's length
        where a schedule follows it (only there: the checkpoints of other configs keep their
        structure)."""
        state = {"rng": self.rng.bit_generator.state}
        if any(schedule.follows_run for schedule in self.named_schedules().values()):
            state["run_length"] = self.run_length
        return state

    def load_state(self, state: State) -> None:
        """Takes back what `state()` gave, after its trackables were restored in place (the
        checkpoint store has put each learner's configured learning rates back); refreshes
        anything derived from them (acting copies)."""
        self.rng.bit_generator.state = state["rng"]
        if state.get("run_length") is not None:
            self._set_run_length(state["run_length"])

    @abc.abstractmethod
    def interrupt_episodes(self) -> None:
        """Every sub-environment restarts without a done (a resume whose environment state
        could not be saved): close or drop the episodes in flight."""

    @abc.abstractmethod
    def policy_state(self) -> State:
        """What acting needs and nothing else (the acting networks, and the counts exploration
        reads), under the same keys as in `state()`: the best-policy snapshot holds it, and
        loading a run for use reads only it (evaluating Pong never reads its replay)."""

    @abc.abstractmethod
    def load_policy_state(self, state: State) -> None:
        """Takes back what `policy_state()` gave (its networks restored in place) and
        refreshes the acting copies."""

    def policy_outputs(self, observations: Any) -> dict[str, Any]:
        """The evaluation policy as TensorFlow ops of its networks, for an export: "action"
        (`[N, *action_shape]`, deterministic) and what else the policy has (Q-values, logits,
        the value), for an observation batch `[N, *obs_shape]` tensor."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot be exported: it defines no policy_outputs (its "
            "policy as TensorFlow ops, see framework/agent.py)."
        )

    def seed_evaluation(self, seed: int) -> None:
        self.eval_rng = np.random.default_rng(seed)

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        """Scalars that describe the current policy at one observation (e.g. action probs)."""
        del observation
        return {}

    def named_schedules(self) -> dict[str, RunSchedule]:
        """The schedules the agent follows, by what follows each: its `learner`'s learning
        rates and loss schedules, if it has one; an agent adds its own (DQN's epsilon)."""
        learner = getattr(self, "learner", None)
        return learner.named_schedules() if learner is not None else {}

    def schedules(self) -> list[str]:
        """One line per schedule, for the run's log: what follows it, and the schedule."""
        schedules = self.named_schedules().items()
        return [f"{name}: {schedule.describe()}" for name, schedule in schedules]

    def follow_run(self, num_steps: int) -> list[str]:
        """Before training: the schedules whose length was left None span the run, as long as
        its first start's `Runner.num_steps`: `num_steps`, unless a checkpoint brought back an
        earlier one (a resume that trains longer continues the same schedules, exactly).
        Returns what the log says: that a resume kept them, and where a schedule's own length
        is not the run's."""
        schedules = self.named_schedules()
        following = [name for name, schedule in schedules.items() if schedule.follows_run]
        notes = []
        if following and self.run_length is None:
            self._set_run_length(num_steps)
        elif following and self.run_length != num_steps:
            notes.append(
                f"The schedules of the {' and '.join(following)} keep the run's length as its "
                f"first start had it: they end at environment step {self.run_length} (the "
                "checkpoint holds it, so that the resume continues them exactly), and "
                f"Runner.num_steps is {num_steps} now."
            )
        notes += [
            f"Schedule of the {name}: its {type(schedule).__name__}.{schedule.length_name} is "
            f"{schedule.length} environment steps, and the run is {num_steps} steps long "
            f"(Runner.num_steps; {schedule.length_name} = None would span the run)."
            for name, schedule in schedules.items()
            if not schedule.follows_run
            and schedule.counts_environment_steps
            and schedule.length != num_steps
        ]
        return notes

    def _set_run_length(self, num_steps: int) -> None:
        self.run_length = num_steps
        for schedule in self.named_schedules().values():
            schedule.set_run_length(num_steps)  # ignored by one with a length of its own

    def histogram_variables(self) -> dict[str, Any]:
        """Variables to log as weight histograms, by name."""
        return {}
