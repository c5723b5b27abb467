"""Environment state survives capture -> JSON + npz files -> restore bitwise, mid-episode."""

import json
import pickle

import gymnasium
import numpy as np
import pytest

from framework import env_state
from framework.parts.environments import make_atari_env, make_env

SAME_STEP = gymnasium.vector.AutoresetMode.SAME_STEP
NEXT_STEP = gymnasium.vector.AutoresetMode.NEXT_STEP


def _through_files(state, tmp_path):
    """`state` written as a JSON file plus an npz of its arrays (no pickle allowed), read back."""
    arrays = {}

    def split(value):
        if isinstance(value, np.ndarray):
            arrays[f"a{len(arrays)}"] = value
            return {"__array__": f"a{len(arrays) - 1}"}
        if isinstance(value, dict):
            return {key: split(item) for key, item in value.items()}
        if isinstance(value, list):
            return [split(item) for item in value]
        return value

    (tmp_path / "state.json").write_text(json.dumps(split(state)))
    np.savez(tmp_path / "arrays.npz", **arrays)
    with np.load(tmp_path / "arrays.npz", allow_pickle=False) as loaded:
        arrays = dict(loaded)

    def join(value):
        if isinstance(value, dict):
            if set(value) == {"__array__"}:
                return arrays[value["__array__"]]
            return {key: join(item) for key, item in value.items()}
        if isinstance(value, list):
            return [join(item) for item in value]
        return value

    return join(json.loads((tmp_path / "state.json").read_text()))


def _play(env, actions):
    """Steps a single env through `actions`, resetting (unseeded) after each episode."""
    record = []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        record.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            record.append(env.reset()[0])
    return record


def _assert_same(recorded, replayed):
    assert len(recorded) == len(replayed)
    for expected, actual in zip(recorded, replayed, strict=True):
        for e, a in zip(expected, actual, strict=True):
            assert type(e) is type(a)
            if isinstance(e, np.ndarray):
                assert e.dtype == a.dtype and np.array_equal(e, a)
            else:
                assert e == a


def _check_single_env_resumes(make, tmp_path, warmup=5, steps=50):
    actions = np.random.default_rng(7).integers(make().action_space.n, size=warmup + steps)
    original = make()
    original.reset(seed=3)
    _play(original, actions[:warmup])
    state = env_state.capture(original)
    recorded = _play(original, actions[warmup:])

    unrestored = make()
    unrestored.reset(seed=11)
    assert not _equal_records(_play(unrestored, actions[warmup:]), recorded)

    fresh = make()
    fresh.reset(seed=11)
    env_state.restore(fresh, _through_files(state, tmp_path))
    _assert_same(recorded, _play(fresh, actions[warmup:]))
    return recorded


def _equal_records(a, b):
    try:
        _assert_same(a, b)
    except AssertionError:
        return False
    return True


def test_cartpole_resumes_exactly_across_truncation_and_resets(tmp_path):
    recorded = _check_single_env_resumes(
        lambda: make_env("CartPole-v1", max_episode_steps=8), tmp_path
    )
    steps = [r for r in recorded if isinstance(r, tuple)]
    # The first truncation comes 3 steps after the capture: only a restored step counter has it.
    assert steps[2][3] and not any(s[3] for s in steps[:2])
    assert sum(s[3] for s in steps) >= 3  # Later episodes start from the restored np_random.


def test_bandit_resumes_exactly(tmp_path):
    recorded = _check_single_env_resumes(lambda: make_env("MultiArmedBandit-v0"), tmp_path)
    assert len({r[1] for r in recorded if isinstance(r, tuple)}) == 50  # Random rewards.


@pytest.mark.filterwarnings("ignore:.*maximum and minimum values are equal")  # the checker's
def test_a_bandit_state_saved_with_the_env_checker_restores_into_one_without(tmp_path):
    # The bandit was registered with gymnasium's passive checker (a layer of its own) until its
    # one-point observation space stopped warning: the checkpoints of that time still resume.
    checked = gymnasium.make("MultiArmedBandit-v0", disable_env_checker=False)
    assert "PassiveEnvChecker" in [type(x).__name__ for x in env_state.wrapper_chain(checked)]
    checked.reset(seed=3)
    _play(checked, [0, 1, 2])
    state = env_state.capture(checked)
    recorded = _play(checked, [3, 2, 1, 0] * 5)

    bandit = make_env("MultiArmedBandit-v0")
    assert "PassiveEnvChecker" not in [type(x).__name__ for x in env_state.wrapper_chain(bandit)]
    bandit.reset(seed=11)
    env_state.restore(bandit, _through_files(state, tmp_path))
    _assert_same(recorded, _play(bandit, [3, 2, 1, 0] * 5))


def _make_vector(mode, num_envs=3):
    """As the training loop builds it: `copy=False` hands out the env's own observation buffer."""
    return gymnasium.vector.SyncVectorEnv(
        [lambda: make_env("CartPole-v1", max_episode_steps=20)] * num_envs,
        copy=False,
        autoreset_mode=mode,
    )


def _play_vector(envs, actions):
    record = []
    for action in actions:
        obs, reward, terminated, truncated, infos = envs.step(action)
        final = np.stack(list(map(_obs_or_nan, infos.get("final_obs", [None] * envs.num_envs))))
        record.append((obs.copy(), reward, terminated, truncated, final))
    return record


def _obs_or_nan(obs):
    return np.full(4, np.nan, np.float32) if obs is None else obs


@pytest.mark.parametrize("mode", [SAME_STEP, NEXT_STEP])
def test_vector_env_resumes_exactly_across_autoresets(mode, tmp_path):
    actions = np.random.default_rng(5).integers(2, size=(300, 3))
    envs = _make_vector(mode)
    envs.reset(seed=0)
    step = 0
    while step < 5 or not envs._autoreset_envs.any():  # Capture right after an episode ended.
        envs.step(actions[step])
        step += 1
    state = env_state.capture(envs)
    recorded = _play_vector(envs, actions[step : step + 200])
    assert sum(r[2].sum() + r[3].sum() for r in recorded) >= 10

    fresh = _make_vector(mode)
    fresh.reset(seed=99)
    env_state.restore(fresh, _through_files(state, tmp_path))
    replayed = _play_vector(fresh, actions[step : step + 200])
    for expected, actual in zip(recorded, replayed, strict=True):
        for e, a in zip(expected, actual, strict=True):
            assert e.dtype == a.dtype and np.array_equal(e, a, equal_nan=True)


def test_restore_keeps_the_objects_others_hold():
    envs = _make_vector(SAME_STEP)
    envs.reset(seed=0)
    envs.step(np.array([0, 1, 1]))
    state = env_state.capture(envs)
    fresh = _make_vector(SAME_STEP)
    held_obs, _ = fresh.reset(seed=1)
    held_generator = fresh.envs[0].unwrapped.np_random

    env_state.restore(fresh, state)
    assert fresh.envs[0].unwrapped.np_random is held_generator
    assert held_obs is fresh._observations and np.array_equal(held_obs, envs._observations)
    assert np.array_equal(fresh.step(np.array([1, 0, 1]))[0], envs.step(np.array([1, 0, 1]))[0])


def _make_pong():
    try:
        return make_atari_env("ALE/Pong-v5", repeat_action_probability=0.25)
    except Exception as error:  # ale-py missing, or its ROMs cannot be loaded.
        pytest.skip(f"Cannot build ALE/Pong-v5: {error}")


def test_atari_resumes_exactly_with_sticky_actions(tmp_path):
    original = _make_pong()
    assert original.unwrapped.ale.getFloat("repeat_action_probability") == 0.25
    actions = np.random.default_rng(3).integers(original.action_space.n, size=150)
    original.reset(seed=1)
    _play(original, actions[:50])
    state = env_state.capture(original)
    recorded = _play(original, actions[50:])

    fresh = _make_pong()
    fresh.reset(seed=2)
    env_state.restore(fresh, _through_files(state, tmp_path))
    _assert_same(recorded, _play(fresh, actions[50:]))
    assert env_state.how_saved(fresh)[0] == "data"


class _Helper:
    """A picklable object that is not data."""

    def __init__(self, offset):
        self.offset = offset


class _ToyEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, extra):
        self.extra = extra

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action):
        return self.np_random.normal(self.extra.offset, size=1), 0.0, False, False, {}


def test_how_saved_data_for_the_framework_envs():
    envs = [make_env("CartPole-v1"), make_env("MultiArmedBandit-v0"), _make_vector(SAME_STEP)]
    for env in envs:
        env.reset(seed=0)
        assert env_state.how_saved(env)[0] == "data"


def test_how_saved_names_the_attribute_that_is_not_data():
    unpicklable = _ToyEnv(lambda: None)
    kind, reason = env_state.how_saved(unpicklable)
    assert kind == "none" and "'extra'" in reason and "_ToyEnv" in reason
    with pytest.raises(TypeError, match="'extra'"):
        env_state.capture(unpicklable)

    picklable = gymnasium.wrappers.TimeLimit(_ToyEnv(_Helper(3.0)), max_episode_steps=5)
    kind, reason = env_state.how_saved(picklable)
    assert kind == "pickle" and "'extra'" in reason and "_Helper" in reason


def test_pickle_fallback_restores_the_object(tmp_path):
    env = _ToyEnv(_Helper(3.0))
    env.reset(seed=0)
    state = env_state.capture(env)
    env.extra.offset = -100.0  # The capture holds the object as it was.
    fresh = _ToyEnv(_Helper(0.0))
    fresh.reset(seed=5)
    env_state.restore(fresh, _through_files(state, tmp_path))
    assert fresh.extra.offset == 3.0
    reference = _ToyEnv(_Helper(3.0))
    reference.reset(seed=0)
    assert np.array_equal(fresh.step(0)[0], reference.step(0)[0])


def test_restore_into_another_env_names_the_mismatch():
    cartpole = make_env("CartPole-v1")
    cartpole.reset(seed=0)
    bandit = make_env("MultiArmedBandit-v0")
    bandit.reset(seed=0)
    with pytest.raises(env_state.EnvStateError, match=r"CartPole-v1.*MultiArmedBandit-v0"):
        env_state.restore(bandit, env_state.capture(cartpole))

    three, two = _make_vector(SAME_STEP, 3), _make_vector(SAME_STEP, 2)
    three.reset(seed=0)
    two.reset(seed=0)
    with pytest.raises(env_state.EnvStateError, match=r"3 sub-environments but .* has 2"):
        env_state.restore(two, env_state.capture(three))


def test_restore_rejects_missing_keys_and_pickles_where_the_env_holds_data():
    env = make_env("CartPole-v1")
    env.reset(seed=0)
    before = env.unwrapped.state.copy()

    state = env_state.capture(env)
    del state["layers"][0]["attributes"]["_elapsed_steps"]
    with pytest.raises(env_state.EnvStateError, match="_elapsed_steps"):
        env_state.restore(env, state)

    state = env_state.capture(env)
    blob = np.frombuffer(pickle.dumps(np.zeros(4)), np.uint8)
    state["layers"][-1]["attributes"]["state"] = {"__kind__": "pickle", "bytes": blob}
    state["layers"][0]["attributes"]["_elapsed_steps"] = 17
    with pytest.raises(env_state.EnvStateError, match="'state' of CartPoleEnv holds data"):
        env_state.restore(env, state)
    assert env._elapsed_steps == 0 and np.array_equal(env.unwrapped.state, before)  # Untouched.


# ----- MuJoCo: the simulation as its integration state, not pickled ---------------------------


def _play_box(env, actions):
    """`_play` for a Box action space; the observations copied (MuJoCo's are fresh arrays, but
    a record must not depend on it)."""
    record = []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        record.append((obs.copy(), reward, terminated, truncated))
        if terminated or truncated:
            record.append(env.reset()[0].copy())
    return record


def _kinds(node) -> set[str]:
    """Every `__kind__` tag in a captured state."""
    if isinstance(node, dict):
        found = {node[env_state.KIND]} if env_state.KIND in node else set()
        return found.union(*(_kinds(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_kinds(value) for value in node))
    return set()


# Hopper ends episodes (the restored generator draws the next start); Ant and Humanoid read body
# positions of the last step before stepping, which the integration state alone does not hold.
@pytest.mark.parametrize(
    "env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"]
)
def test_a_mujoco_env_resumes_exactly_mid_episode_from_data(env_id, tmp_path):
    pytest.importorskip("mujoco")
    original = make_env(env_id)
    original.reset(seed=3)
    actions = np.random.default_rng(4).uniform(-0.4, 0.4, (150, *original.action_space.shape))
    _play_box(original, actions[:30])
    state = env_state.capture(original)
    recorded = _play_box(original, actions[30:])
    if env_id == "Hopper-v5":
        assert any(not isinstance(entry, tuple) for entry in recorded)  # an episode's reset

    fresh = make_env(env_id)
    fresh.reset(seed=11)
    env_state.restore(fresh, _through_files(state, tmp_path))
    _assert_same(recorded, _play_box(fresh, actions[30:]))
    assert env_state.how_saved(fresh) == (
        "data",
        f"Every layer of {env_id} holds only data (the MuJoCo simulation as its integration "
        "state).",
    )
    assert "mujoco" in _kinds(state) and "pickle" not in _kinds(state)
    simulation = state["layers"][-1]["attributes"]
    assert simulation["data"]["state"].dtype == np.float64
    assert "model" not in simulation and "mujoco_renderer" not in simulation  # configuration


def test_a_mujoco_state_of_another_model_or_kind_is_refused_and_changes_nothing():
    pytest.importorskip("mujoco")
    env = make_env("Hopper-v5")
    env.reset(seed=0)
    state = env_state.capture(env)
    env.step(np.ones(3, np.float32))
    after_step = env.unwrapped.data.qpos.copy()

    simulation = state["layers"][-1]["attributes"]["data"]
    simulation["state"] = simulation["state"][:-1]
    with pytest.raises(env_state.EnvStateError, match=r"has \d+ numbers .* another model"):
        env_state.restore(env, state)
    simulation["spec"] = "mjSTATE_FULLPHYSICS"
    with pytest.raises(env_state.EnvStateError, match="mjSTATE_INTEGRATION but the state has"):
        env_state.restore(env, state)
    assert np.array_equal(env.unwrapped.data.qpos, after_step)


class _Game:
    """A plain object holding state: registered, it is saved as data, attribute by attribute."""

    def __init__(self, random):
        self.random = random  # numpy's legacy generator, shared with the env
        self.cells = [[0, 1], None]
        self.score = 0


class _GameEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self):
        self.random = np.random.RandomState(0)
        self.game = _Game(self.random)

    def reset(self, *, seed=None, options=None):
        self.random.seed(seed)
        self.game.score = 0
        return np.zeros(1), {}

    def step(self, action):
        self.game.score += int(self.random.randint(10))
        self.game.cells[0].append(self.game.score)
        return np.array([self.game.score + self.random.rand()]), 0.0, False, False, {}


def test_registered_objects_and_legacy_generators_are_data_restored_in_place(tmp_path):
    env_state.register_state_class(_Game)
    env = _GameEnv()
    env.reset(seed=4)
    for _ in range(3):
        env.step(0)
    kind, reason = env_state.how_saved(env)
    assert kind == "data", reason
    state = _through_files(env_state.capture(env), tmp_path)
    fresh = _GameEnv()
    fresh.reset(seed=11)
    held_game, held_random = fresh.game, fresh.random
    env_state.restore(fresh, state)
    assert fresh.game is held_game and fresh.random is held_random  # in place
    assert fresh.game.random is fresh.random  # still one generator, as captured
    assert fresh.game.cells == env.game.cells and fresh.game.score == env.game.score
    for _ in range(5):
        assert fresh.step(0)[0] == env.step(0)[0]


def test_a_registered_object_whose_attribute_is_not_data_is_pickled_and_said_so():
    env_state.register_state_class(_Game)
    env = _GameEnv()
    env.game.helper = _Helper(1.0)  # neither data nor a registered object
    kind, reason = env_state.how_saved(env)
    assert kind == "pickle" and "'game'" in reason and "_Game" in reason
