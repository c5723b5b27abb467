"""Exploration schedules."""

import gin


@gin.configurable
class LinearSchedule:
    """Linear interpolation from `start` to `end` over `duration` steps, then constant.

    A pure function of the step, so resuming at a step resumes the schedule with it.
    """

    def __init__(self, start: float = 1.0, end: float = 0.05, duration: int = 10_000):
        if duration < 1:
            raise ValueError(f"LinearSchedule.duration must be >= 1, got {duration}.")
        self.start, self.end, self.duration = start, end, duration

    def __call__(self, step: int) -> float:
        fraction = min(max(step, 0) / self.duration, 1.0)
        return self.start + fraction * (self.end - self.start)
