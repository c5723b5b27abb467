"""Schedules whose length may be the run's, as RL-Zoo's `lin_1e-3` decays over the whole run.

A schedule over environment steps whose length is left None follows the run: its agent gives
it `Runner.num_steps` as the run's first start had it (`Agent.follow_run`), and every checkpoint
keeps that length, so a resume that trains longer (a larger `Runner.num_steps`) continues the
same schedule exactly, where it would otherwise have stretched it mid-run.
"""

from framework.validation import require_positive


class RunLengthSchedule:
    """Mixin: the schedule's length, the attribute named `length_name`, may be None: the run's.

    A length the config gives (an integer >= 1) is the schedule's own and never changes.
    """

    length_name = "duration"
    _run_length: int | None = None

    def check_length(self) -> None:
        """At construction: a length of the schedule's own must be an integer >= 1."""
        if not self.follows_run:
            require_positive(self, **{self.length_name: getattr(self, self.length_name)})

    @property
    def follows_run(self) -> bool:
        """Whether its length was left None, to be the run's."""
        return getattr(self, self.length_name) is None

    @property
    def counts_environment_steps(self) -> bool:
        """Whether its length counts environment steps, as `Runner.num_steps` does."""
        return True

    @property
    def length(self) -> int | None:
        """Its own length, or the run's once given (None before)."""
        own = getattr(self, self.length_name)
        return self._run_length if own is None else own

    def set_run_length(self, num_steps: int) -> None:
        """The run's length, which a schedule that follows the run spans (the others ignore it)."""
        require_positive("Runner", num_steps=num_steps)
        self._run_length = num_steps

    def required_length(self) -> int:
        """Its length, where it is needed to compute a value; an error before the run's is given."""
        length = self.length
        if length is None:
            raise ValueError(
                f"{type(self).__name__}.{self.length_name} = None follows the run's length, "
                "which it was not given: train it under a Runner (which gives the agent "
                "Runner.num_steps, `Agent.follow_run`), or give it a length of its own."
            )
        return length

    def describe_length(self) -> str:
        """For the log, after the schedule's values: the run's length where it follows it."""
        if not self.follows_run:
            return ""
        given = "not given yet" if self.length is None else f"{self.length} environment steps"
        return f", over the run's length ({given})"
