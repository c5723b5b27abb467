"""Tests for framework/exploration.py: the linear schedule."""

import pytest

from framework.parts.exploration import LinearSchedule


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (0, 1.0),
        (50, 0.55),  # halfway: 1 + 0.5 * (0.1 - 1)
        (100, 0.1),  # the end of the ramp
        (1000, 0.1),  # constant beyond
        (-5, 1.0),  # steps before 0 clamp to the start
    ],
)
def test_linear_schedule_decreasing(step, expected):
    assert LinearSchedule(start=1.0, end=0.1, duration=100)(step) == pytest.approx(expected)


def test_linear_schedule_increasing():
    schedule = LinearSchedule(start=0.0, end=2.0, duration=8)
    assert [schedule(step) for step in (0, 2, 8, 9)] == pytest.approx([0.0, 0.5, 2.0, 2.0])


@pytest.mark.parametrize("duration", [0, -1])
def test_linear_schedule_rejects_short_duration(duration):
    with pytest.raises(ValueError):
        LinearSchedule(duration=duration)
