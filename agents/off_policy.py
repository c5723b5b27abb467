"""What DQN, DDPG/TD3 and SAC share: transitions go to a replay; the batches its
`ReplaySchedule` makes due (`gradient_steps` for every multiple of `train_freq` transitions
crossed after `learning_starts`) are sampled at once at the next update and run by the learner
in one compiled call, after which acting reads the new weights from the call's published copy.
A prioritized replay gets the call's per-sample errors back (`Learner.per_sample`) for the
indices it drew. DDPG/TD3 and SAC share more (`ActorCriticReplayAgent`): a bounded Box's
actions, critics with target copies, a uniformly random warm-up."""

import abc
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from framework.agent import Agent, Health, Metrics, State, VectorStep
from framework.learner import Learner, UpdateGroup
from framework.parts.acting import ActingCopy
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.network_fit import CRITIC_Q, check_network
from framework.parts.replay import UniformReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.validation import require_bounded_box, require_positive, require_unit_interval


class ReplayAgent(Agent):
    """Subclasses build `replay`, `learner` (publishing the acting copy's variables) and
    `acting` (an `ActingCopy` of the network that acts), name their `networks()`,
    and add their own metrics in `exploration_metrics`."""

    replay: UniformReplay
    learner: Learner
    acting: ActingCopy
    # Whether the agent's loss takes a prioritized replay's weights and gives its per-sample
    # errors back (the learner's `per_sample` output "error").
    takes_prioritized_replay = False

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        schedule: ReplaySchedule,
        checkpoint_replay: bool = True,
    ):
        super().__init__(observation_space, action_space, seed)
        if not isinstance(schedule, ReplaySchedule):
            raise ValueError(
                f"{type(self).__name__}.schedule must be a ReplaySchedule (bind "
                f"@ReplaySchedule(), with the parentheses), got {schedule!r}."
            )
        self.schedule = schedule
        self.checkpoint_replay = checkpoint_replay
        self.steps = 0  # transitions observed; drives exploration and the training schedule
        self._due_batches = 0  # batches due since the last update

    def check_replay(self) -> None:
        """A replay smaller than a batch would repeat transitions in every batch; a prioritized
        one needs an agent whose loss weighs samples and hands back their errors."""
        if self.replay.prioritized and not self.takes_prioritized_replay:
            raise ValueError(
                f"{type(self).__name__} does not take a prioritized replay "
                f"({type(self.replay).__name__}): its loss neither weighs samples nor gives "
                "their errors back. Use UniformReplay, or DQNAgent for prioritized replay."
            )
        if self.replay.capacity < self.schedule.batch_size:
            raise ValueError(
                f"The replay's capacity ({self.replay.capacity}) is below {type(self).__name__}'s "
                f"ReplaySchedule.batch_size ({self.schedule.batch_size}): every batch would "
                "repeat transitions. Raise UniformReplay.capacity or lower the batch size."
            )

    def batch_spec(self, action: tf.TensorSpec) -> dict[str, tf.TensorSpec]:
        """The learner's batches `[gradient steps, batch, ...]` of transitions, `action` the spec
        of one action: any number of steps, one trace."""
        space, size = self.observation_space, self.schedule.batch_size
        observation = tf.TensorSpec([None, size, *space.shape], tf.as_dtype(space.dtype))
        return {
            "observation": observation,
            "action": tf.TensorSpec([None, size, *action.shape], action.dtype),
            "reward": tf.TensorSpec([None, size], tf.float32),
            "discount": tf.TensorSpec([None, size], tf.float32),
            "next_observation": observation,
        }

    def observe(self, step: VectorStep) -> None:
        self.replay.add(step)
        before, self.steps = self.steps, self.steps + step.num_envs
        self._due_batches += self.schedule.batches_due(before, self.steps)

    def interrupt_episodes(self) -> None:
        self.replay.end_episodes()

    def update(self, env_steps: int) -> tuple[Metrics, Health]:
        due, self._due_batches = self._due_batches, 0
        if not due or len(self.replay) == 0:  # n-step windows fill only after n steps
            return {}, Health()
        batches = self.replay.sample_stack(due, self.schedule.batch_size, self.rng)
        metrics, health = self.learner.run(batches, env_steps)
        if self.replay.prioritized:
            self.replay.update_priorities(self.learner.per_sample["error"])
        self.acting.refresh(self.learner.published)
        metrics = metrics.with_values(
            {**self.exploration_metrics(), "replay_size": len(self.replay)}
        )
        return metrics, Health.from_tensor(health)

    @abc.abstractmethod
    def networks(self) -> dict[str, Any]:
        """The agent's networks (and anything else restored in place) by checkpoint key."""

    @abc.abstractmethod
    def policy_networks(self) -> dict[str, Any]:
        """The networks acting reads, by their keys in `networks()`."""

    def policy_state(self) -> State:
        return {"steps": self.steps, **self.policy_networks()}

    def load_policy_state(self, state: State) -> None:
        self.steps = state["steps"]
        self.acting.refresh()

    def exploration_metrics(self) -> dict[str, float]:
        """The exploration's numbers to log with the learner's (none by default)."""
        return {}

    def state(self) -> State:
        """The replay too, unless `checkpoint_replay=False` (Atari: a full replay is GBs; such
        a resume refills it and is not an exact continuation)."""
        return {
            **super().state(),
            "steps": self.steps,
            **self.networks(),
            "learner": self.learner,
            **({"replay": self.replay.state()} if self.checkpoint_replay else {}),
        }

    def load_state(self, state: State) -> None:
        super().load_state(state)
        self.steps = state["steps"]
        if self.checkpoint_replay:
            self.replay.load_state(state["replay"])
        self.acting.refresh()


class ActorCriticReplayAgent(ReplayAgent):
    """DDPG/TD3's and SAC's common ground: actions in a bounded Box (`low`, `high`, `half_range`,
    each `[A]`), a replay of float action vectors, critics `Q(s, a)` with target copies, a TF
    generator for the noise drawn inside the compiled step (checkpointed with the agent), and
    uniformly random actions until `learning_starts`. Subclasses build the actor, then the
    critics (`make_critics`, in that order, which fixes the initial weights a seed gives)."""

    actor: keras.Model
    critics: list[keras.Model]
    target_critics: list[keras.Model]

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        replay: Callable[..., UniformReplay],
        gamma: float,
        n_step: int,
        schedule: ReplaySchedule,
    ):
        super().__init__(observation_space, action_space, seed, schedule)
        require_positive(self, n_step=n_step)
        require_unit_interval(self, gamma=gamma)
        self.low, self.high = require_bounded_box(self, action_space)  # [A] float32 each
        self.action_size = len(self.low)
        self.half_range = 0.5 * (self.high - self.low)  # [A]
        self.tf_rng = tf.random.Generator.from_seed(seed)
        self.replay = replay(
            observation_shape=observation_space.shape,
            observation_dtype=observation_space.dtype,
            n_step=n_step,
            gamma=gamma,
            action_shape=(self.action_size,),
            action_dtype=np.float32,
        )
        self.check_replay()

    def make_critics(self, critic_network: Callable[..., keras.Model], num_critics: int) -> None:
        """`num_critics` critics, then as many target copies (equal to them after
        `copy_to_targets`)."""
        shape = self.observation_space.shape
        self.critics = [critic_network(shape, self.action_size) for _ in range(num_critics)]
        self.target_critics = [critic_network(shape, self.action_size) for _ in range(num_critics)]
        check_network(
            self,
            "critic_network",
            self.critics[0],
            CRITIC_Q,
            "networks.critic_mlp",
            takes_action=True,
        )

    @staticmethod
    def copy_to_targets(online: list[tf.Variable], target: list[tf.Variable]) -> None:
        for source, copy in zip(online, target, strict=True):
            copy.assign(source)

    def critic_group(
        self,
        loss: Callable,
        optimizer: keras.optimizers.Optimizer,
        gradient_processor: GradientProcessor | None,
    ) -> UpdateGroup:
        """The critics' update group, first in every step: the reward reaches it."""
        variables = [v for critic in self.critics for v in critic.trainable_variables]
        return UpdateGroup(loss, variables, optimizer, gradient_processor, name="critic")

    def warm_up_actions(self, observations: np.ndarray) -> np.ndarray:
        """Uniformly random actions within the bounds, `[N, A]`."""
        shape = (len(observations), self.action_size)
        return self.rng.uniform(self.low, self.high, size=shape).astype(np.float32)

    def policy_networks(self) -> dict:
        return {"actor": self.actor}

    def histogram_variables(self) -> dict[str, tf.Variable]:
        variables = {f"actor/{v.path}": v for v in self.actor.weights}
        for index, critic in enumerate(self.critics):
            variables.update({f"critic_{index}/{v.path}": v for v in critic.weights})
        return variables
