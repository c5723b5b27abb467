"""UniformReplay: ring storage, per-env n-step assembly, sampling and its state.

Observations are filled with a step id, so a transition is recognised by its observation.
"""

import gymnasium as gym
import numpy as np
import pytest

from framework.agent import VectorStep
from framework.loop import make_vector_env
from framework.parts.replay import FrameReplay, ReplayCheckpointError, UniformReplay

SHAPE = (2,)


def obs(step_id: int) -> np.ndarray:
    return np.full(SHAPE, step_id, np.float32)


def vector_step(
    obs_ids: list[int],
    rewards: list[float],
    next_ids: list[int],
    *,
    terminated: list[bool] | None = None,
    truncated: list[bool] | None = None,
    actions: np.ndarray | None = None,
) -> VectorStep:
    """One vector step over len(obs_ids) envs; the action defaults to the observation id."""
    no_ends = [False] * len(obs_ids)
    return VectorStep(
        observation=np.stack([obs(i) for i in obs_ids]),
        action=np.array(obs_ids, np.int64) if actions is None else actions,
        reward=np.array(rewards, np.float32),
        next_observation=np.stack([obs(i) for i in next_ids]),
        terminated=np.array(terminated or no_ends),
        truncated=np.array(truncated or no_ends),
    )


def add_step(buffer: UniformReplay, step_id: int, reward: float, *, ends: str = "") -> None:
    """One env: step `step_id` leads to observation `step_id + 1`; `ends`: '', 'terminated',
    'truncated'."""
    buffer.add(
        vector_step(
            [step_id],
            [reward],
            [step_id + 1],
            terminated=[ends == "terminated"],
            truncated=[ends == "truncated"],
        )
    )


def in_order(buffer: UniformReplay) -> list[tuple[int, float, float, int]]:
    """The stored transitions in storage order, as (obs id, return, discount, next obs id)."""
    state = buffer.state()
    return [
        (int(o[0]), float(r), float(d), int(n[0]))
        for o, r, d, n in zip(
            state["observation"],
            state["reward"],
            state["discount"],
            state["next_observation"],
            strict=True,
        )
    ]


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
    frame = np.full((1, 3, 3), 255, np.uint8)
    no = np.zeros(1, bool)
    buffer.add(VectorStep(frame, np.zeros(1, np.int64), np.ones(1, np.float32), frame, no, no))
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


def test_state_round_trip_continues_bit_for_bit():
    # 13 steps with n=3 into 5 slots: episode 0..5 ends, then 6..12 run on; the window holds
    # steps 11 and 12 when the state is taken, and the ring has wrapped.
    buffer = UniformReplay(
        capacity=5, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.9
    )
    for step_id in range(13):
        add_step(buffer, step_id, reward=step_id * 0.1, ends="terminated" if step_id == 5 else "")
    state = buffer.state()
    assert all(isinstance(value, np.ndarray) for value in state.values())
    assert state["pending_env"].tolist() == [0, 0]
    assert state["pending_observation"][:, 0].tolist() == [11.0, 12.0]

    restored = UniformReplay(
        capacity=5, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.9
    )
    restored.load_state(state)
    for replay in (buffer, restored):  # the pending steps 11, 12 complete identically
        add_step(replay, 13, reward=0.7)
        add_step(replay, 14, reward=0.3, ends="truncated")
    assert len(restored) == len(buffer) == 5
    expected = buffer.sample_stack(4, 16, np.random.default_rng(9))
    actual = restored.sample_stack(4, 16, np.random.default_rng(9))
    for key in expected:
        assert actual[key].dtype == expected[key].dtype
        np.testing.assert_array_equal(actual[key], expected[key])


def _drop_cursor(state):
    del state["cursor"]


def _add_unknown(state):
    state["extra"] = np.zeros(1)


def _reward_as_list(state):
    state["reward"] = state["reward"].tolist()


def _size_not_scalar(state):
    state["size"] = np.array([3])


def _cursor_behind_size(state):
    state["cursor"] = np.array(1)


@pytest.mark.parametrize(
    "damage, detail",
    [
        (_drop_cursor, "cursor"),
        (_add_unknown, "extra"),
        (_reward_as_list, "reward is a list"),
        (_size_not_scalar, "size"),
        (_cursor_behind_size, "size 3 and cursor 1 are inconsistent"),
    ],
)
def test_damaged_state_raises(damage, detail):
    state = filled(5, 3).state()
    damage(state)
    with pytest.raises(ReplayCheckpointError, match=f"Cannot load replay state: .*{detail}"):
        filled(5, 3).load_state(state)


@pytest.mark.parametrize(
    "kwargs, detail",
    [
        ({"capacity": 6}, "capacity"),
        ({"observation_shape": (3,)}, "observation"),
        ({"observation_dtype": np.uint8}, "observation"),
        ({"n_step": 2}, "n_step"),
        ({"gamma": 0.5}, "gamma"),
        ({"action_shape": (2,)}, "action"),
        ({"action_dtype": np.float32}, "action"),
    ],
)
def test_mismatched_state_raises_and_leaves_the_buffer_alone(kwargs, detail):
    args = {"capacity": 5, "observation_shape": SHAPE, "observation_dtype": np.float32}
    other = UniformReplay(**(args | {"gamma": 0.9} | kwargs))
    with pytest.raises(ReplayCheckpointError, match=detail):
        other.load_state(filled(5, 3).state())
    assert len(other) == 0


def test_end_episodes_stores_a_cut_off_window_as_truncated():
    # n=3, gamma=0.5; two steps with rewards 1 and 2, then the run stops mid-episode:
    # first start: 1 + 0.5 * 2 = 2.0, bootstraps with 0.5**2 from the last next_observation;
    # second: 2.0 with discount 0.5. Nothing is left to leak into the next episode.
    buffer = UniformReplay(
        capacity=10, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.5
    )
    for t, reward in enumerate([1.0, 2.0]):
        buffer.add(vector_step([t], [reward], [t + 1]))
    assert len(buffer) == 0
    buffer.end_episodes()
    assert in_order(buffer) == [(0, 2.0, 0.25, 2), (1, 2.0, 0.5, 2)]
    buffer.add(vector_step([9], [5.0], [10], terminated=[True]))
    assert in_order(buffer)[2] == (9, 5.0, 0.0, 10)


def test_n_step_returns_with_two_envs_ending_at_different_steps():
    # n=3, gamma=0.5. Env 0 terminates at t=2 (obs 0, 1, 2 -> final 3), then runs 10, 11, 12.
    # Env 1 truncates at t=3 (obs 100..103 -> final 104), then runs 110, 111.
    buffer = UniformReplay(
        capacity=20, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.5
    )
    buffer.add(vector_step([0, 100], [1.0, 10.0], [1, 101]))
    buffer.add(vector_step([1, 101], [2.0, 20.0], [2, 102]))
    assert len(buffer) == 0  # both windows hold 2 of 3 steps
    buffer.add(vector_step([2, 102], [4.0, 40.0], [3, 103], terminated=[True, False]))
    # Env 0 first, all its starts, discount 0:  0: 1 + 0.5*2 + 0.25*4 = 3;  1: 2 + 0.5*4 = 4;
    # 2: 4. Then env 1's full window: 100: 10 + 0.5*20 + 0.25*40 = 30, discount 0.5**3.
    assert in_order(buffer) == [
        (0, 3.0, 0.0, 3),
        (1, 4.0, 0.0, 3),
        (2, 4.0, 0.0, 3),
        (100, 30.0, 0.125, 103),
    ]
    buffer.add(vector_step([10, 103], [8.0, 80.0], [11, 104], truncated=[False, True]))
    # Env 0's new episode has one step pending. Env 1 truncates and bootstraps from 104:
    # 101: 20 + 0.5*40 + 0.25*80 = 60 (0.5**3);  102: 40 + 0.5*80 = 80 (0.5**2);  103: 80 (0.5).
    assert in_order(buffer)[4:] == [
        (101, 60.0, 0.125, 104),
        (102, 80.0, 0.25, 104),
        (103, 80.0, 0.5, 104),
    ]
    buffer.add(vector_step([11, 110], [16.0, 160.0], [12, 111]))
    assert len(buffer) == 7
    buffer.add(vector_step([12, 111], [32.0, 320.0], [13, 112]))
    # Only env 0's window is full: 10: 8 + 0.5*16 + 0.25*32 = 24, with no reward (4) from the
    # episode before.
    assert in_order(buffer)[7:] == [(10, 24.0, 0.125, 13)]
    buffer.end_episodes()
    # Cut off, both bootstrap from their last next obs: 11: 16 + 0.5*32 = 32;  12: 32;
    # 110: 160 + 0.5*320 = 320, with no reward (80) from env 1's first episode;  111: 320.
    assert in_order(buffer)[8:] == [
        (11, 32.0, 0.25, 13),
        (12, 32.0, 0.5, 13),
        (110, 320.0, 0.25, 112),
        (111, 320.0, 0.5, 112),
    ]
    # Each transition keeps the action of its first step (here the obs id).
    state = buffer.state()
    assert state["action"].tolist() == state["observation"][:, 0].astype(int).tolist()
    assert len(state["pending_env"]) == 0


def test_an_env_window_never_mixes_episodes():
    # 3 envs, n=4, gamma=1, reward 1 per step: a stored return is its window length k, so
    # next id - obs id == k. Ids are episode * 1000 + t, so a mixed window changes the
    # thousands. Episodes end at random, terminated or truncated.
    rng = np.random.default_rng(5)
    buffer = UniformReplay(
        capacity=1000, observation_shape=SHAPE, observation_dtype=np.float32, n_step=4, gamma=1.0
    )
    episode, t = [0, 1, 2], [0, 0, 0]
    terminal_ids, all_ids = set(), set()
    for _ in range(200):
        ids = [1000 * e + s for e, s in zip(episode, t, strict=True)]
        ends = rng.random(3) < 0.2
        terminated = list(ends & (rng.random(3) < 0.5))
        buffer.add(
            vector_step(
                ids,
                [1.0] * 3,
                [i + 1 for i in ids],
                terminated=terminated,
                truncated=list(ends & ~np.array(terminated)),
            )
        )
        all_ids.update(ids)
        terminal_ids.update(i + 1 for i, end in zip(ids, terminated, strict=True) if end)
        for env in np.flatnonzero(ends):
            episode[env] = max(episode) + 1
        t = [0 if end else s + 1 for s, end in zip(t, ends, strict=True)]
    buffer.end_episodes()
    rows = in_order(buffer)
    assert sorted(o for o, *_ in rows) == sorted(all_ids)  # each step starts one transition
    for o, ret, discount, n in rows:
        assert o // 1000 == n // 1000
        assert n - o == ret <= 4
        assert discount == (0.0 if n in terminal_ids else 1.0)


def test_continuous_actions_are_stored_and_sampled_exactly():
    rng = np.random.default_rng(0)
    buffer = UniformReplay(
        capacity=50,
        observation_shape=SHAPE,
        observation_dtype=np.float32,
        n_step=2,
        gamma=0.9,
        action_shape=(2,),
        action_dtype=np.float32,
    )
    actions = {}
    for t in range(10):
        ids = [10 * t, 10 * t + 1]
        step_actions = rng.normal(size=(2, 2)).astype(np.float32)
        actions.update(zip(ids, step_actions, strict=True))
        buffer.add(vector_step(ids, [1.0, 2.0], [i + 10 for i in ids], actions=step_actions))
    buffer.end_episodes()
    assert len(buffer) == 20
    batch = buffer.sample(200, np.random.default_rng(1))
    assert batch["action"].dtype == np.float32
    assert batch["action"].shape == (200, 2)
    for o, action in zip(batch["observation"], batch["action"], strict=True):
        np.testing.assert_array_equal(action, actions[int(o[0])])  # the window's first action
    assert buffer.sample_stack(3, 4, np.random.default_rng(1))["action"].shape == (3, 4, 2)


TERMINATES = {(7, 1), (11, 0)}  # (t, env)
TRUNCATES = {(8, 2), (12, 1)}


def three_env_step(t: int) -> VectorStep:
    """Step t of 3 envs; rewards are no binary fractions, so round-off would show."""
    ids = [10 * t + env for env in range(3)]
    return vector_step(
        ids,
        list(np.random.default_rng(t).normal(size=3)),
        [i + 10 for i in ids],
        terminated=[(t, env) in TERMINATES for env in range(3)],
        truncated=[(t, env) in TRUNCATES for env in range(3)],
    )


def three_env_buffer(**kwargs) -> UniformReplay:
    """n=3 into 7 slots after 9 steps: the ring has wrapped; env 0 has 2 steps pending (7, 8),
    env 1 one (8, after its termination at 7), env 2 none (truncated at 8)."""
    args = {"capacity": 7, "observation_shape": SHAPE, "observation_dtype": np.float32}
    buffer = UniformReplay(**(args | {"n_step": 3, "gamma": 0.9} | kwargs))
    for t in range(9):
        step = three_env_step(t)
        if "action_shape" in kwargs:  # (2,): the obs id twice
            step = step._replace(action=np.repeat(step.action[:, None], 2, axis=1))
        buffer.add(step)
    return buffer


def assert_same_state(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key].dtype == expected[key].dtype, key
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


def test_state_round_trip_mid_window_with_three_envs_continues_identically():
    buffer = three_env_buffer()
    state = buffer.state()
    assert set(state) == {
        "observation",
        "action",
        "reward",
        "discount",
        "next_observation",
        "capacity",
        "n_step",
        "gamma",
        "size",
        "cursor",
        "num_envs",
        "pending_env",
        "pending_observation",
        "pending_action",
        "pending_reward",
        "pending_next_observation",
    }
    assert state["pending_env"].tolist() == [0, 0, 1]
    assert state["pending_observation"][:, 0].tolist() == [70.0, 80.0, 81.0]
    for t in range(9, 14):  # the uninterrupted buffer runs on; `state` must not change
        buffer.add(three_env_step(t))
    buffer.end_episodes()

    restored = UniformReplay(
        capacity=7, observation_shape=SHAPE, observation_dtype=np.float32, n_step=3, gamma=0.9
    )
    restored.load_state(state)
    assert_same_state(restored.state(), state)
    for t in range(9, 14):
        restored.add(three_env_step(t))
    restored.end_episodes()
    assert_same_state(restored.state(), buffer.state())
    expected = buffer.sample_stack(4, 16, np.random.default_rng(9))
    actual = restored.sample_stack(4, 16, np.random.default_rng(9))
    for key in expected:
        np.testing.assert_array_equal(actual[key], expected[key])


def _window_too_long(state: dict) -> dict:
    """Env 0 holds 2 pending steps; a third one is one more than n_step - 1 allows."""
    pending = [key for key in state if key.startswith("pending_")]
    return state | {key: np.concatenate([state[key][:1], state[key]]) for key in pending}


@pytest.mark.parametrize(
    "make_state, detail",
    [
        (lambda: three_env_buffer(capacity=8).state(), "capacity is 8 in the state but 7"),
        (lambda: three_env_buffer(action_shape=(2,)).state(), "action .*action shape"),
        (lambda: _window_too_long(three_env_buffer().state()), "pending window holds 3 steps"),
    ],
)
def test_load_state_rejects_a_mismatch_and_leaves_the_buffer_unchanged(make_state, detail):
    buffer = three_env_buffer()
    before = buffer.state()
    with pytest.raises(ReplayCheckpointError, match=detail):
        buffer.load_state(make_state())
    assert_same_state(buffer.state(), before)
    buffer.add(three_env_step(9))  # still usable, with its 3 envs


def test_a_step_with_another_number_of_envs_raises():
    buffer = UniformReplay(capacity=10, observation_shape=SHAPE, observation_dtype=np.float32)
    buffer.add(vector_step([0, 1], [1.0, 1.0], [2, 3]))
    with pytest.raises(ValueError, match="3 environments, but earlier steps had 2"):
        buffer.add(vector_step([0, 1, 2], [1.0, 1.0, 1.0], [3, 4, 5]))
    assert len(buffer) == 2


# ----- FrameReplay: each frame stored once ---------------------------------------------------


class _RandomFrames(gym.Env):
    """3x3 uint8 frames of noise; an episode terminates with probability 0.1 a step."""

    observation_space = gym.spaces.Box(0, 255, (3, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._frame(), {}

    def step(self, action):
        return self._frame(), 1.0, bool(self.np_random.random() < 0.1), False, {}

    def _frame(self):
        return self.np_random.integers(0, 256, (3, 3), dtype=np.uint8)


def _stacked_env(padding_type):
    """Stacked the way `make_atari_env` stacks: gymnasium's wrapper, channels last."""
    env = gym.wrappers.FrameStackObservation(_RandomFrames(), 4, padding_type=padding_type)
    env = gym.wrappers.TransformObservation(
        env,
        lambda o: np.moveaxis(o, 0, -1),
        observation_space=gym.spaces.Box(0, 255, (3, 3, 4), np.uint8),
    )
    return gym.wrappers.TimeLimit(env, max_episode_steps=12)  # truncations too


def _feed(buffers, envs, observations, steps, rng):
    """Steps the vector env with random actions, handing each step to every buffer; returns the
    observations to continue from (the final observation where an episode ended, as the loop)."""
    for _ in range(steps):
        actions = rng.integers(0, 2, envs.num_envs)
        next_observations, rewards, terminated, truncated, infos = envs.step(actions)
        next_observations = np.array(next_observations)  # the env reuses its buffer
        final = next_observations.copy()
        for env in np.flatnonzero(terminated | truncated):
            final[env] = infos["final_obs"][env]
        step = VectorStep(observations, actions, rewards, final, terminated, truncated)
        for buffer in buffers:
            buffer.add(step)
        observations = next_observations
    return observations


def _assert_same_transitions(uniform, frames):
    """Every stored transition whose frames are still in the ring, rebuilt from frame numbers,
    equals the full stacks that UniformReplay stored."""
    assert len(frames) == len(uniform)
    indices = np.arange(len(uniform))
    oldest = frames._frame_count - frames._frame_capacity
    live = indices[frames._observation[indices].min(axis=-1) >= oldest]
    assert len(live) == len(indices)
    expected, actual = uniform._gather(live), frames._gather(live)
    for name, array in expected.items():
        np.testing.assert_array_equal(actual[name], array, err_msg=name)


@pytest.mark.parametrize("padding_type", ["reset", "zero"])
@pytest.mark.parametrize("n_step", [1, 3])
def test_frame_replay_rebuilds_the_stacks_across_episode_ends(padding_type, n_step):
    envs = make_vector_env(lambda: _stacked_env(padding_type), 3)
    observations, _ = envs.reset(seed=0)
    shape, rng = (3, 3, 4), np.random.default_rng(0)
    # Capacity 64 against 3 x 150 transitions: both rings wrap several times. Room for 128
    # frames: 1.2 a transition with these short episodes, n-step windows reaching 3 x 3 back.
    uniform = UniformReplay(shape, np.uint8, capacity=64, n_step=n_step, gamma=0.9)
    frames = FrameReplay(shape, np.uint8, capacity=64, n_step=n_step, gamma=0.9, frame_capacity=128)
    observations = _feed([uniform, frames], envs, observations, 150, rng)
    _assert_same_transitions(uniform, frames)
    # A sample is the same batch, drawn with the same generator.
    first, second = (b.sample_stack(2, 8, np.random.default_rng(1)) for b in (uniform, frames))
    for name in first:
        np.testing.assert_array_equal(second[name], first[name])

    # The state restores the frames, the pending windows and each env's last stack.
    restored = FrameReplay(
        shape, np.uint8, capacity=64, n_step=n_step, gamma=0.9, frame_capacity=128
    )
    restored.load_state(frames.state())
    _feed([uniform, restored], envs, observations, 40, rng)
    _assert_same_transitions(uniform, restored)


def test_frame_replay_stores_about_one_frame_per_transition():
    envs = make_vector_env(lambda: _stacked_env("reset"), 2)
    observations, _ = envs.reset(seed=0)
    frames = FrameReplay((3, 3, 4), np.uint8, capacity=1000)
    _feed([frames], envs, observations, 200, np.random.default_rng(0))
    # 400 transitions; a reset stack (its frame repeated 4 times) adds one frame per episode.
    assert len(frames) == 400
    assert 400 <= frames._frame_count <= 400 + 2 + 400 // 5
    state = frames.state()
    assert state["frames"].nbytes == frames._frame_count * 9
    assert state["observation"].shape == (400, 4)  # frame numbers, not stacks


def test_frame_replay_never_samples_a_transition_whose_frames_are_overwritten():
    envs = make_vector_env(lambda: _stacked_env("zero"), 3)
    observations, _ = envs.reset(seed=0)
    uniform = UniformReplay((3, 3, 4), np.uint8, capacity=64, n_step=3)
    frames = FrameReplay((3, 3, 4), np.uint8, capacity=64, n_step=3, frame_capacity=70)
    _feed([uniform, frames], envs, observations, 150, np.random.default_rng(0))
    oldest = frames._frame_count - frames._frame_capacity
    assert (frames._observation[:64].min(axis=-1) < oldest).any()  # some are stale
    stored = {o.tobytes() for o in uniform._gather(np.arange(64))["observation"]}
    batch = frames.sample_stack(4, 32, np.random.default_rng(0))["observation"]
    assert all(o.tobytes() in stored for o in batch.reshape(-1, 3, 3, 4))


def test_frame_replay_rejects_flat_observations():
    with pytest.raises(ValueError, match="UniformReplay"):
        FrameReplay((4,), np.float32)
