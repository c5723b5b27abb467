"""ReplaySchedule: the batches a step of the transition count makes due, and its checks."""

import dataclasses

import pytest

from framework.parts.replay_schedule import ReplaySchedule


def _schedule(learning_starts: int, train_freq: int, gradient_steps: int) -> ReplaySchedule:
    return ReplaySchedule(learning_starts, train_freq, gradient_steps, batch_size=32)


def test_batches_due_for_each_multiple_of_train_freq_from_learning_starts_on():
    schedule = _schedule(learning_starts=100, train_freq=50, gradient_steps=3)
    # Multiples of 50 in (0, 200] from 100 on: 100, 150, 200 -> 3 calls of 3 batches.
    assert schedule.batches_due(0, 200) == 9
    assert schedule.batches_due(0, 99) == 0  # 50 lies before learning starts
    assert schedule.batches_due(99, 100) == 3  # 100: the first call
    assert schedule.batches_due(100, 149) == 0
    assert schedule.batches_due(149, 150) == 3


def test_learning_starts_between_two_multiples():
    schedule = _schedule(learning_starts=120, train_freq=50, gradient_steps=1)
    # Multiples of 50 in (0, 200]: 50, 100, 150, 200; at or past 120: 150 and 200.
    assert schedule.batches_due(0, 200) == 2
    assert schedule.batches_due(0, 149) == 0


def test_a_vector_step_crossing_several_multiples_makes_each_due():
    schedule = _schedule(learning_starts=0, train_freq=2, gradient_steps=3)
    # 4 transitions from 8 to 12 cross 10 and 12: 2 calls of 3 batches.
    assert schedule.batches_due(8, 12) == 6
    # 4 transitions from 9 to 13 cross 10 and 12 too.
    assert schedule.batches_due(9, 13) == 6
    assert schedule.batches_due(0, 0) == 0  # no transition, nothing due


@pytest.mark.parametrize("num_envs", [1, 3, 8])
def test_gradient_steps_per_transition_do_not_depend_on_num_envs(num_envs):
    schedule = _schedule(learning_starts=100, train_freq=4, gradient_steps=2)
    # Multiples of 4 in [100, 240]: 100, 104, ..., 240 -> 36 calls of 2 batches.
    total = sum(schedule.batches_due(start, start + num_envs) for start in range(0, 240, num_envs))
    assert total == 72


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(learning_starts=-1), r"ReplaySchedule\.learning_starts must be an integer >= 0"),
        (dict(train_freq=0), r"ReplaySchedule\.train_freq must be an integer >= 1, got 0"),
        (dict(gradient_steps=True), r"ReplaySchedule\.gradient_steps .* got True \(bool\)"),
        (dict(batch_size=2.5), r"ReplaySchedule\.batch_size .* got 2\.5 \(float\)"),
    ],
)
def test_bad_numbers_name_the_field(fields, message):
    valid = dict(learning_starts=0, train_freq=1, gradient_steps=1, batch_size=1)
    with pytest.raises(ValueError, match=message):
        ReplaySchedule(**{**valid, **fields})


def test_frozen_so_a_shared_default_cannot_change():
    schedule = _schedule(learning_starts=0, train_freq=1, gradient_steps=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.batch_size = 64  # type: ignore[misc]
