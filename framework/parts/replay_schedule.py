"""When a replay agent trains: one part that DQN, DDPG/TD3 and SAC each take whole.

Every count is in transitions summed over the sub-environments, so that the gradient steps per
transition stay what a config says whatever `num_envs` is. The replay's capacity stays the
replay's own (`UniformReplay.capacity`): it sizes the replay's arrays, which each replay kind
(uniform, prioritized, frames) allocates itself, while this part says how the agent draws.
"""

import dataclasses

import gin

from framework.validation import require_non_negative, require_positive


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ReplaySchedule:
    """`gradient_steps` batches of `batch_size` transitions for every multiple of `train_freq`
    transitions observed, from `learning_starts` on.

    A config binds it whole: `DQNAgent.schedule = @ReplaySchedule()` and its four numbers.
    Each agent's default is its own (see the agent's signature). Frozen: an agent's default
    instance is shared by every agent built without one, and nothing can change it.
    """

    learning_starts: int  # transitions before the first training (DDPG, SAC: acting at random)
    train_freq: int  # transitions from one training call to the next
    gradient_steps: int  # per training call
    batch_size: int  # transitions per gradient step

    def __post_init__(self):
        require_non_negative(self, learning_starts=self.learning_starts)
        require_positive(
            self,
            train_freq=self.train_freq,
            gradient_steps=self.gradient_steps,
            batch_size=self.batch_size,
        )

    def batches_due(self, before: int, after: int) -> int:
        """The batches due once the transitions observed went from `before` to `after` (a
        vector step of N transitions may cross several multiples of `train_freq`):
        `gradient_steps` for each multiple in (before, after] at or past `learning_starts`."""
        counted_from = max(before, self.learning_starts - 1)
        calls = max(0, after // self.train_freq - counted_from // self.train_freq)
        return calls * self.gradient_steps
