"""UniformReplay: ring storage, n-step assembly, sampling and checkpoints.

Observations are filled with a step id, so a transition is recognised by its observation.
"""

import os
import re

import numpy as np
import pytest

from framework.parts.replay import ReplayCheckpointError, UniformReplay

SHAPE = (2,)


def obs(step_id: int) -> np.ndarray:
    return np.full(SHAPE, step_id, np.float32)


def add_step(buffer: UniformReplay, step_id: int, reward: float, *, ends: str = "") -> None:
    """Step `step_id` leads to observation `step_id + 1`; `ends`: '', 'terminated', 'truncated'."""
    buffer.add(
        obs(step_id),
        step_id,
        reward,
        obs(step_id + 1),
        terminated=ends == "terminated",
        truncated=ends == "truncated",
    )


def stored(buffer: UniformReplay) -> dict[int, tuple[float, float, int, int]]:
    """Every stored transition as {obs id: (return, discount, next obs id, action)}.

    Reads through `sample`: 2000 uniform draws from at most 10 transitions miss none.
    """
    batch = buffer.sample(2000, np.random.default_rng(0))
    return {
        int(o[0]): (float(r), float(d), int(n[0]), int(a))
        for o, r, d, n, a in zip(
            batch["observation"],
            batch["reward"],
            batch["discount"],
            batch["next_observation"],
            batch["action"],
            strict=True,
        )
    }


def test_wraparound_keeps_the_last_capacity_transitions():
    buffer = UniformReplay(capacity=5, observation_shape=SHAPE, observation_dtype=np.float32)
    for step_id in range(8):
        add_step(buffer, step_id, reward=10.0 * step_id)
    # Steps 0, 1, 2 were overwritten by 5, 6, 7; one-step transitions bootstrap with gamma^1.
    assert len(buffer) == 5
    assert stored(buffer) == {i: (10.0 * i, pytest.approx(0.99), i + 1, i) for i in range(3, 8)}


@pytest.mark.parametrize(
    "ends, tail_discounts",
    [
        ("terminated", (0.0, 0.0, 0.0)),  # a termination never bootstraps
        ("truncated", (0.125, 0.25, 0.5)),  # 0.5**k for windows of k = 3, 2, 1 steps
    ],
)
def test_n_step_returns_across_an_episode_end(ends, tail_discounts):
    buffer = UniformReplay(
        capacity=5, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.5
    )
    for step_id, reward in enumerate([1.0, 2.0, 3.0, 4.0]):
        add_step(buffer, step_id, reward, ends=ends if step_id == 3 else "")
    # start 0: 1 + 0.5*2 + 0.25*3 = 2.75, discount 0.5**3, next obs after step 2 (id 3)
    # start 1: 2 + 0.5*3 + 0.25*4 = 4.5; start 2: 3 + 0.5*4 = 5; start 3: 4; all end at obs 4
    assert stored(buffer) == {
        0: (2.75, 0.125, 3, 0),
        1: (4.5, tail_discounts[0], 4, 1),
        2: (5.0, tail_discounts[1], 4, 2),
        3: (4.0, tail_discounts[2], 4, 3),
    }

    # The next episode starts with an empty window: two steps store nothing yet, the third
    # stores 100 + 0.5*200 + 0.25*300 = 275 with no reward from the previous episode.
    add_step(buffer, 10, 100.0)
    add_step(buffer, 11, 200.0)
    assert len(buffer) == 4
    add_step(buffer, 12, 300.0)
    assert len(buffer) == 5
    assert stored(buffer)[10] == (275.0, 0.125, 13, 10)


def test_uint8_observations_stay_uint8():
    buffer = UniformReplay(capacity=4, observation_shape=(3, 3), observation_dtype=np.uint8)
    frame = np.full((3, 3), 255, np.uint8)
    buffer.add(frame, 0, 1.0, frame, terminated=False, truncated=False)
    batch = buffer.sample(2, np.random.default_rng(0))
    stack = buffer.sample_stack(2, 2, np.random.default_rng(0))
    for arrays in (batch, stack):
        assert arrays["observation"].dtype == np.uint8
        assert arrays["next_observation"].dtype == np.uint8
    assert (batch["observation"] == 255).all()


def filled(capacity: int, num_steps: int, n_step: int = 1) -> UniformReplay:
    buffer = UniformReplay(
        capacity=capacity,
        observation_shape=SHAPE,
        observation_dtype=np.float32,
        n_step=n_step,
        gamma=0.9,
    )
    for step_id in range(num_steps):
        add_step(buffer, step_id, reward=float(step_id))
    return buffer


def test_sample_stack_shapes_and_dtypes():
    stack = filled(100, 10).sample_stack(3, 7, np.random.default_rng(0))
    assert stack["observation"].shape == (3, 7, *SHAPE)
    assert stack["next_observation"].shape == (3, 7, *SHAPE)
    for key in ("action", "reward", "discount"):
        assert stack[key].shape == (3, 7)
    assert stack["action"].dtype == np.int64
    assert stack["reward"].dtype == stack["discount"].dtype == np.float32


def test_sampling_is_reproducible_and_stays_in_the_stored_range():
    buffer = filled(100, 10)  # 10 items in room for 100: never sample the empty slots
    first = buffer.sample_stack(50, 32, np.random.default_rng(3))
    second = buffer.sample_stack(50, 32, np.random.default_rng(3))
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    assert set(np.unique(first["observation"])) == set(range(10))
    assert set(np.unique(buffer.sample(500, np.random.default_rng(4))["action"])) == set(range(10))


@pytest.mark.parametrize("batch_size", [0, -1])
def test_bad_batch_size_raises(batch_size):
    buffer = filled(5, 3)
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample(batch_size, np.random.default_rng(0))
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample_stack(2, batch_size, np.random.default_rng(0))


def test_sampling_an_empty_buffer_raises():
    buffer = UniformReplay(capacity=5, observation_shape=SHAPE, observation_dtype=np.float32)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1, np.random.default_rng(0))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"capacity": 0}, "capacity"),
        ({"n_step": 0}, "n_step"),
        ({"gamma": -0.1}, "gamma"),
        ({"gamma": 1.5}, "gamma"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs, name):
    args = {"capacity": 5, "observation_shape": SHAPE, "observation_dtype": np.float32} | kwargs
    with pytest.raises(ValueError, match=name):
        UniformReplay(**args)


def test_checkpoint_round_trip_continues_bit_for_bit(tmp_path):
    # 13 steps with n=3 into 5 slots: episode 0..5 ends, then 6..12 run on; the window holds
    # steps 11 and 12 at save time, and the ring has wrapped.
    buffer = UniformReplay(
        capacity=5, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.9
    )
    for step_id in range(13):
        add_step(buffer, step_id, reward=step_id * 0.1, ends="terminated" if step_id == 5 else "")
    path = str(tmp_path / "replay.ckpt")
    buffer.save(path)
    assert os.listdir(tmp_path) == ["replay.ckpt"]  # no ".tmp" left, no ".npz" appended

    restored = UniformReplay(
        capacity=5, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.9
    )
    restored.load(path)
    for replay in (buffer, restored):  # the pending steps 11, 12 complete identically
        add_step(replay, 13, reward=0.7)
        add_step(replay, 14, reward=0.3, ends="truncated")
    assert len(restored) == len(buffer) == 5
    expected = buffer.sample_stack(4, 16, np.random.default_rng(9))
    actual = restored.sample_stack(4, 16, np.random.default_rng(9))
    for key in expected:
        assert actual[key].dtype == expected[key].dtype
        np.testing.assert_array_equal(actual[key], expected[key])


def damage(path: str, kind: str) -> None:
    if kind == "missing":
        os.remove(path)
        return
    with open(path, "rb") as f:
        valid = f.read()
    contents = {"empty": b"", "truncated": valid[: len(valid) // 2], "garbage": b"\x07junk" * 50}
    with open(path, "wb") as f:
        f.write(contents[kind])


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "garbage"])
def test_damaged_checkpoint_raises(tmp_path, kind):
    path = str(tmp_path / "replay.ckpt")
    filled(5, 3).save(path)
    damage(path, kind)
    with pytest.raises(ReplayCheckpointError, match=re.escape(path)):
        filled(5, 3).load(path)


@pytest.mark.parametrize(
    "other, detail",
    [
        (
            UniformReplay(
                capacity=6, observation_shape=SHAPE, observation_dtype=np.float32, gamma=0.9
            ),
            "capacity",
        ),
        (
            UniformReplay(
                capacity=5, observation_shape=(3,), observation_dtype=np.float32, gamma=0.9
            ),
            "observation",
        ),
        (
            UniformReplay(
                capacity=5, observation_shape=SHAPE, observation_dtype=np.uint8, gamma=0.9
            ),
            "observation",
        ),
        (
            UniformReplay(
                capacity=5,
                observation_shape=SHAPE,
                observation_dtype=np.float32,
                n_step=2,
                gamma=0.9,
            ),
            "n_step",
        ),
    ],
)
def test_mismatched_checkpoint_raises_and_leaves_the_buffer_alone(tmp_path, other, detail):
    path = str(tmp_path / "replay.ckpt")
    filled(5, 3).save(path)
    with pytest.raises(ReplayCheckpointError, match=f"{re.escape(path)}.*{detail}"):
        other.load(path)
    assert len(other) == 0


def test_end_episode_stores_a_cut_off_window_as_truncated():
    # n=3, gamma=0.5; two steps with rewards 1 and 2, then the run stops mid-episode:
    # first start: 1 + 0.5 * 2 = 2.0, bootstraps with 0.5**2 from the last next_observation;
    # second: 2.0 with discount 0.5. Nothing is left to leak into the next episode.
    buffer = UniformReplay(
        capacity=10, observation_shape=(1,), observation_dtype=np.float32, n_step=3, gamma=0.5
    )
    for t, reward in enumerate([1.0, 2.0]):
        buffer.add([t], 0, reward, [t + 1], terminated=False, truncated=False)
    assert len(buffer) == 0
    buffer.end_episode()
    assert len(buffer) == 2
    batch = buffer.sample(64, np.random.default_rng(0))
    rows = {
        (float(o[0]), float(r), float(d), float(n[0]))
        for o, r, d, n in zip(
            batch["observation"],
            batch["reward"],
            batch["discount"],
            batch["next_observation"],
            strict=True,
        )
    }
    assert rows == {(0.0, 2.0, 0.25, 2.0), (1.0, 2.0, 0.5, 2.0)}
    buffer.add([9], 0, 5.0, [10], terminated=True, truncated=False)
    assert len(buffer) == 3
