"""Using what was trained: the best policy kept, a read-only load, evaluation that reproduces
the logged one, exports that TensorFlow alone runs as `Policy.act` does, and bad input said.

Every agent trains one short run (tests/trained.py, once per test process) that the tests share.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import experiments
from framework.export import export
from framework.storage.event_reader import read_scalars
from framework.storage.run_directory import RunDirectory
from tests.experiments import cli
from tests.trained import AGENT_RUNS as RUNS
from tests.trained import rollout_observations

CURVES: dict[str, dict[int, float]] = {}  # each run's eval returns, as training computed them


@pytest.fixture(scope="module")
def runs(trained_runs) -> dict[str, str]:
    """Each agent's short run (tests/trained.py): evaluations and checkpoints at the same steps,
    one pruned."""
    CURVES.update({name: trained_runs.curve(name) for name in RUNS})
    return {name: trained_runs[name] for name in RUNS}


def _files(folder: str) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder` with its size and modification time."""
    found = {}
    for root, folders, names in os.walk(folder):
        for name in folders + names:
            path = os.path.join(root, name)
            info = os.stat(path)
            found[os.path.relpath(path, folder)] = (info.st_size, info.st_mtime_ns)
    return found


# ----- the best policy ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RUNS))
def test_the_best_snapshot_is_the_best_evaluation_and_evaluates_to_it_exactly(runs, name):
    folder = RunDirectory(runs[name])
    best_step, best_return = max(CURVES[name].items(), key=lambda point: (point[1], -point[0]))
    assert (folder.best()["step"], folder.best()["eval_return"]) == (best_step, best_return)
    assert folder.best() == json.loads((Path(runs[name]) / "metadata.json").read_text())["best"]
    snapshots = [n for n in os.listdir(folder.best_dir) if n.endswith(".complete")]
    assert snapshots == [os.path.basename(folder.best()["snapshot"]) + ".complete"]
    policy = experiments.load(runs[name], "best")
    try:
        assert (policy.step, policy.eval_return) == (best_step, best_return)
        assert policy.evaluate().mean_return == best_return  # seeded as that evaluation was
    finally:
        policy.close()


def test_the_snapshot_holds_what_acting_needs_and_no_replay_nor_optimizer(runs):
    folder = RunDirectory(runs["td3_normalized"])
    values_file = folder.best()["snapshot"] + ".values.json"
    with open(os.path.join(folder.base_dir, values_file)) as f:
        saved = json.load(f)
    paths = saved["trackables"] + saved["arrays"] + list(saved["values"])
    assert "driver/agent/actor" in saved["trackables"]
    assert {"driver/statistics/0/mean", "driver/statistics/0/var"} <= set(saved["arrays"])
    assert not [path for path in paths if "replay" in path or "learner" in path]
    assert not [path for path in paths if "critic" in path]
    checkpoint = os.path.join(folder.checkpoint_dir, "ckpt-400.values.json")
    with open(checkpoint) as f:
        assert any("replay" in path for path in json.load(f)["arrays"])


@pytest.mark.parametrize("name", ["dqn", "a2c", "a3c"])
def test_a_checkpoint_at_an_evaluation_step_evaluates_to_the_logged_return(runs, name):
    folder = RunDirectory(runs[name])
    logged = CURVES[name]
    kept = [
        step for step in logged if os.path.exists(f"{folder.checkpoint_dir}/ckpt-{step}.complete")
    ]
    for checkpoint in [min(kept), "latest"]:
        policy = experiments.load(runs[name], checkpoint)
        try:
            assert policy.evaluate().mean_return == logged[policy.step]
        finally:
            policy.close()


def _copy(run: str, tmp_path) -> str:
    copy = str(tmp_path / "run")
    shutil.copytree(run, copy)
    return copy


def test_resume_never_reads_the_best_snapshot(runs, tmp_path):
    folder = RunDirectory(_copy(runs["dqn"], tmp_path))
    for name in os.listdir(folder.checkpoint_dir):
        if name.endswith(".index"):
            with open(os.path.join(folder.checkpoint_dir, name), "r+b") as f:
                f.write(b"damaged")
    config = os.path.join(folder.base_dir, "config.gin")
    with pytest.raises(experiments.RunError, match="No usable checkpoint"):
        experiments.train([config], ["Runner.num_steps = 1500"], folder.base_dir)
    assert folder.best() is not None and os.listdir(folder.best_dir)


def test_start_afresh_sets_the_best_snapshot_aside(runs, tmp_path):
    folder = RunDirectory(_copy(runs["dqn"], tmp_path))
    shutil.rmtree(folder.checkpoint_dir)
    config = os.path.join(folder.base_dir, "config.gin")
    bindings = ["Runner.num_steps = 300", "Runner.eval_interval = 300"]
    experiments.train([config], bindings, folder.base_dir, start_afresh=True)
    discarded = os.path.join(folder.base_dir, "discarded")
    (aside,) = [root for root, folders, _ in os.walk(discarded) if "best" in folders]
    assert os.listdir(os.path.join(aside, "best"))
    assert folder.best()["step"] == 300  # the new run's own
    assert [n for n in os.listdir(folder.best_dir) if n.endswith(".complete")] == [
        "ckpt-1.complete"
    ]


def test_a_resume_sets_aside_a_best_snapshot_of_a_history_it_no_longer_has(runs, tmp_path):
    folder = RunDirectory(_copy(runs["dqn"], tmp_path))
    best = folder.best()
    assert best["step"] > 600  # taken after the checkpoint resumed from below
    for step in (900, 1200):  # as if the run had died at 900 without these
        for path in Path(folder.checkpoint_dir).glob(f"ckpt-{step}.*"):
            path.unlink()
    config = os.path.join(folder.base_dir, "config.gin")
    result = experiments.train([config], ["Runner.num_steps = 600"], folder.base_dir)
    assert result.resumed_from == 600 and folder.best() is None
    (aside,) = Path(folder.base_dir, "discarded").glob("*/best")
    assert (aside / (Path(best["snapshot"]).name + ".complete")).exists()
    assert json.loads(Path(folder.base_dir, "metadata.json").read_text())["best"] is None


def test_a_snapshot_whose_record_a_kill_prevented_is_still_the_best(runs, tmp_path):
    folder = RunDirectory(_copy(runs["dqn"], tmp_path))
    store = folder._best_store()
    template = {"step": 1, "eval_return": 0.0, "driver": {"agent": {}, "statistics": {}}}
    before = folder.best()
    snapshot = {**template, "step": 1200, "eval_return": 999.0}
    store.save(int(Path(before["snapshot"]).name.split("-")[1]) + 1, snapshot)  # no metadata
    assert folder.best()["step"] == 1200 and folder.best()["eval_return"] == 999.0


# ----- a read-only load ----------------------------------------------------------------------


def test_loading_writes_nothing_and_reads_a_run_that_holds_its_lock(runs, tmp_path):
    folder = RunDirectory(runs["dqn"])
    before = _files(folder.base_dir)
    with folder.lock():  # as a run still training holds it
        for checkpoint in ("latest", "best", 900):
            experiments.load(folder.base_dir, checkpoint).close()
    assert _files(folder.base_dir) == before


def test_the_pixel_run_loads_without_reading_its_replay(runs, tmp_path):
    copy = str(tmp_path / "run")
    shutil.copytree(runs["dqn_pixels"], copy)
    arrays = os.path.join(copy, "checkpoints", "ckpt-200.arrays.npz")
    with open(arrays, "r+b") as f:  # damage every byte of the replay: never read
        size = os.path.getsize(arrays)
        f.write(b"\0" * size)
    policy = experiments.load(copy, "latest")
    assert policy.step == 200
    policy.close()


# ----- exports -------------------------------------------------------------------------------

LOAD_WITHOUT_THIS_PACKAGE = """
import importlib.abc, json, sys
class NotHere(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"framework", "agents", "experiments", "gin_configs", "gin"}:
            raise ImportError(name + " is not available to this process")
sys.meta_path.insert(0, NotHere())
try:
    import framework
    raise SystemExit("framework was importable")
except ImportError:
    pass
import numpy as np, tensorflow as tf
for model_dir, observations, out in json.load(open(sys.argv[1])):
    policy = tf.saved_model.load(model_dir)
    outputs = policy.signatures["action"](observation=tf.constant(np.load(observations)))
    np.savez(out, **{key: value.numpy() for key, value in outputs.items()})
print("loaded", sorted(sys.modules.keys() & {"framework", "agents", "keras"}))
"""


def test_every_agent_exports_a_savedmodel_that_acts_as_its_policy(runs, trained_runs, tmp_path):
    requests, expected = [], {}
    bfloat16 = {"ppo_pixels_bfloat16": trained_runs["ppo_pixels_bfloat16"]}
    for name, folder in {**runs, **bfloat16}.items():
        policy = experiments.load(folder, "best")
        try:
            observations = rollout_observations(policy, 1000)
            expected[name] = policy.act(observations)
            description = export(policy, folder, str(tmp_path / name))
        finally:
            policy.close()
        assert description["observation"]["shape"] == [None, *observations.shape[1:]]
        np.save(tmp_path / f"{name}.npy", observations)
        requests.append(
            [str(tmp_path / name), str(tmp_path / f"{name}.npy"), str(tmp_path / f"{name}.out.npz")]
        )
    with open(tmp_path / "requests.json", "w") as f:
        json.dump(requests, f)
    completed = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_THIS_PACKAGE, str(tmp_path / "requests.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    for name, actions in expected.items():
        outputs = np.load(tmp_path / f"{name}.out.npz")
        assert outputs["action"].shape == actions.shape, name
        if np.issubdtype(actions.dtype, np.integer):
            np.testing.assert_array_equal(outputs["action"], actions, err_msg=name)
        else:
            np.testing.assert_allclose(outputs["action"], actions, atol=1e-5, err_msg=name)
    assert {"q_values"} <= set(np.load(tmp_path / "dqn.out.npz").files)
    rainbow = np.load(tmp_path / "dqn_rainbow.out.npz")  # one expected value per action
    assert rainbow["q_values"].shape == (len(rainbow["action"]), 2)
    np.testing.assert_array_equal(rainbow["q_values"].argmax(axis=-1), rainbow["action"])
    assert {"logits", "value"} <= set(np.load(tmp_path / "a2c.out.npz").files)
    pixels = np.load(tmp_path / "ppo_pixels.out.npz")  # from uint8 frames, as Policy.act
    assert {"logits", "value"} <= set(pixels.files) and pixels["logits"].shape[1:] == (6,)
    assert np.load(tmp_path / "ppo_pixels.npy").dtype == np.uint8
    rounded = np.load(tmp_path / "ppo_pixels_bfloat16.out.npz")  # a bfloat16 torso's export
    assert rounded["logits"].dtype == rounded["value"].dtype == np.float32
    assert np.load(tmp_path / "dqn_minatar.npy").dtype == bool  # MinAtar's planes
    gaussian = np.load(tmp_path / "ppo_gaussian_normalized.out.npz")
    assert {"mean", "log_std", "value"} <= set(gaussian.files)
    np.testing.assert_array_equal(gaussian["action"], np.clip(gaussian["mean"], -2.0, 2.0))


# ----- the command line and bad input ---------------------------------------------------------


def _evaluate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", *args],
        cwd=cli.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_evaluate_prints_its_figures_records_and_logs_where_asked(runs, tmp_path):
    folder = RunDirectory(_copy(runs["dqn"], tmp_path))
    curve = folder.eval_curve()
    video = tmp_path / "video"
    completed = _evaluate(
        folder.base_dir,
        "--checkpoint=best",
        "--episodes=2",
        "--seed=5",
        f"--video={video}",
        "--log",
        "--gin_bindings=make_env.max_episode_steps = 30",
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "+make_env.max_episode_steps = 30" in completed.stderr  # the changed line, said
    assert "length: mean 30, std 0, min 30, max 30" in completed.stdout
    import imageio

    videos = sorted(os.listdir(video))
    assert len(videos) == 2
    reader = imageio.get_reader(str(video / videos[0]))
    assert reader.count_frames() == 31  # the first observation and 30 steps
    assert reader.get_data(0).shape == (400, 600, 3)  # CartPole drawn, not its 4 numbers
    (logged,) = os.listdir(os.path.join(folder.base_dir, "evaluations"))
    scalars = read_scalars(os.path.join(folder.base_dir, "evaluations", logged))
    assert scalars["evaluate/episode_length"] == [(folder.best()["step"], 30.0)]
    assert folder.eval_curve() == curve  # the run's own curve reads none of it


def test_evaluate_records_whole_pong_games_of_the_pixel_ppo_policy(runs, tmp_path):
    video = tmp_path / "video"
    no_noops = "--gin_bindings=make_atari_env.noop_max = 0"
    completed = _evaluate(runs["ppo_pixels"], "--episodes=2", f"--video={video}", no_noops)
    assert completed.returncode == 0, completed.stderr[-3000:]
    # Games of 400 frames, 4 a step: 100 steps as the game counts them, FIRE and action 2 at
    # the seeding reset and a no-op, FIRE and 2 at the episode's (it continues the game the
    # seeding reset began, as SB3's EpisodicLifeEnv does) among them: the policy plays 95.
    assert "length: mean 100, std 0, min 100, max 100" in completed.stdout
    import imageio

    videos = sorted(os.listdir(video))
    assert len(videos) == 2
    reader = imageio.get_reader(str(video / videos[0]))
    # The reset's frame and the policy's 95 steps' (moviepy's MP4 may end a frame short).
    assert reader.count_frames() in (95, 96)
    assert reader.get_data(0).shape[:2] == (210, 160)  # the emulator's screen, not 84x84


def test_a_pong_video_shows_the_emulator_frames(runs, tmp_path):
    policy = experiments.load(runs["dqn_pixels"], "latest", render_mode="rgb_array")
    video = tmp_path / "video"
    recorded = gym.wrappers.RecordVideo(
        policy.env, str(video), episode_trigger=lambda episode: episode > 0, disable_logger=True
    )
    policy.env = recorded
    result = policy.evaluate(episodes=1)
    policy.close()
    import imageio

    (name,) = os.listdir(video)
    reader = imageio.get_reader(str(video / name))
    frame = reader.get_data(0)
    assert frame.shape[:2] == (224, 160) or frame.shape[:2] == (210, 160)
    assert frame.std() > 10  # a colour screen, not a blank
    assert reader.count_frames() == result.lengths[0] + 1


@pytest.fixture(scope="module")
def bandit_run(tmp_path_factory) -> str:
    """A run of a few seconds, for what needs a run but not the module's trained ones."""
    folder = str(tmp_path_factory.mktemp("bandit"))
    bindings = ["Runner.num_steps = 200", "Runner.eval_interval = 100", "Runner.eval_episodes = 2"]
    experiments.train(["gin_configs/reinforce/bandit.gin"], bindings, folder, verbose=False)
    return folder


@pytest.mark.process
@pytest.mark.parametrize(
    ("first_call", "printed"),
    [
        (
            "import experiments\npolicy = experiments.load(RUN)\nprint(policy.step)\n"
            "policy.close()",
            "200",
        ),
        (
            "from framework.storage.event_reader import read_scalars\n"
            "print([step for step, _ in read_scalars(RUN)['eval/episode_return']])",
            "[100, 200]",
        ),
    ],
    ids=["load", "read_scalars"],
)
def test_a_script_whose_first_call_reads_a_run_prints_nothing_of_tensorflow(
    bandit_run, first_call, printed
):
    # As a user's script: without the tests' TF_CPP_MIN_LOG_LEVEL (TF's C++ start-up lines
    # ignore it anyway: they are written before its logging starts).
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    completed = subprocess.run(
        [sys.executable, "-c", f"RUN = {bandit_run!r}\n{first_call}"],
        cwd=cli.REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout == printed + "\n"
    assert completed.stderr == ""


@pytest.mark.process
def test_evaluate_on_a_path_that_does_not_exist_says_so_in_one_line(tmp_path):
    completed = _evaluate(str(tmp_path / "runs" / "missing"))
    assert completed.returncode == 1
    assert completed.stderr == (
        f"experiments.evaluate: error: '{tmp_path / 'runs' / 'missing'}' does not exist: give a "
        "run folder (the --base_dir of `experiments.run`, printed when it starts, e.g. "
        "runs/dqn_cartpole_...).\n"
    )


@pytest.mark.process
@pytest.mark.parametrize("where", ["under a file", "a read-only folder"])
def test_a_video_folder_that_cannot_be_written_is_said_before_anything_runs(
    bandit_run, tmp_path, where
):
    if where == "under a file":
        (tmp_path / "notes.txt").write_text("mine")
        video, reason = tmp_path / "notes.txt" / "videos", "Not a directory"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        video, reason = tmp_path / "read-only", "Permission denied"
        video.mkdir(mode=0o500)
    completed = _evaluate(bandit_run, f"--video={video}")
    assert completed.returncode == 1
    (line,) = completed.stderr.splitlines()
    assert line.startswith(f"experiments.evaluate: error: --video={video} cannot hold the videos: ")
    assert reason in line and line.endswith("; nothing was evaluated.")
    assert completed.stdout == ""


def test_videos_are_named_so_that_they_sort_in_episode_order(tmp_path, monkeypatch):
    pytest.importorskip("moviepy")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # pygame draws CartPole off screen
    from experiments import videos

    env = gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=2)
    recorded = videos.EpisodeVideos(env, str(tmp_path), "step100", episodes=10)
    recorded.reset(seed=0)  # the evaluation's seeding reset: episode 0, not recorded
    for _ in range(10):
        recorded.reset()
        done = False
        while not done:
            _, _, terminated, truncated, _ = recorded.step(0)
            done = terminated or truncated
    recorded.close()
    names = os.listdir(tmp_path)
    assert sorted(names) == [f"step100-episode-{episode:02d}.mp4" for episode in range(1, 11)]


class _ThreeLives(gym.Env):
    """A game of three lives, one lost every two steps, drawn as a grey frame: the interface
    `atari.EpisodicLife` reads (`unwrapped.ale.lives()`)."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(2)
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    render_mode = "rgb_array"

    def __init__(self):
        self.ale = self
        self.steps = 0

    def lives(self) -> int:
        return 3 - self.steps // 2

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return 0, {}

    def step(self, action):
        self.steps += 1
        return 0, 1.0, self.lives() == 0, False, {}

    def render(self):
        return np.full((64, 64, 3), 40 * self.steps, np.uint8)


def test_a_video_holds_a_whole_game_not_one_life(tmp_path):
    pytest.importorskip("moviepy")
    import imageio

    from experiments import videos
    from framework.parts import atari

    env = atari.EpisodicLife(atari.GameScore(_ThreeLives()))
    recorded = videos.EpisodeVideos(env, str(tmp_path), "step100", episodes=2)
    recorded.reset(seed=0)  # the evaluation's seeding reset: not recorded
    lives_lost = 0
    for _ in range(2):  # two games, as the evaluation plays them
        recorded.reset()
        while True:
            _, _, terminated, _, info = recorded.step(0)
            if atari.GAME_SCORE in info:
                break
            if terminated:  # a lost life: the game goes on
                lives_lost += 1
                recorded.reset()
    recorded.close()
    assert lives_lost == 4  # two a game, before the third ends it
    assert sorted(os.listdir(tmp_path)) == ["step100-episode-1.mp4", "step100-episode-2.mp4"]
    frames = imageio.get_reader(str(tmp_path / "step100-episode-1.mp4")).count_frames()
    # The reset's frame, the policy's 4 steps and the 2 lives' resets (each a no-op step of
    # EpisodicLife's); moviepy's MP4 may end a frame short.
    assert frames in (6, 7)


def _damaged_copy(run: str, tmp_path) -> str:
    copy = str(tmp_path / "damaged")
    shutil.copytree(run, copy)
    with open(os.path.join(copy, "checkpoints", "ckpt-1200.index"), "r+b") as f:
        f.write(b"damaged")
    return copy


@pytest.mark.parametrize(
    "case, message",
    [
        ("not a run", "is not a run folder"),
        ("no checkpoint", "holds no complete checkpoint"),
        ("best before any evaluation", "has no best-policy snapshot"),
        ("a pruned step", "has no complete checkpoint at step 300: it holds steps 600, 900, 1200"),
        ("a damaged checkpoint", "ckpt-1200 cannot be read: file"),
        ("a config that no longer builds", "does not build with this code"),
        ("other spaces", "its networks cannot take them"),
        ("a bad checkpoint name", "is not a checkpoint"),
        # gymnasium reads it as no limit: evaluate's first episode ran forever.
        ("a negative time limit", "make_env.max_episode_steps must be an integer >= 1, got -1"),
    ],
)
def test_bad_input_gets_one_paragraph_and_changes_nothing(runs, tmp_path, case, message):
    run, checkpoint, bindings = runs["dqn"], "latest", []
    if case == "not a run":
        run = str(tmp_path)
    elif case == "no checkpoint":
        run = str(tmp_path / "run")
        os.makedirs(run)
        shutil.copy(os.path.join(runs["dqn"], "config.gin"), run)
    elif case == "best before any evaluation":
        run = str(tmp_path / "run")
        shutil.copytree(runs["dqn"], run, ignore=shutil.ignore_patterns("best"))
        checkpoint = "best"
    elif case == "a pruned step":
        checkpoint = 300
    elif case == "a damaged checkpoint":
        run, checkpoint = _damaged_copy(runs["dqn"], tmp_path), 1200
    elif case == "a config that no longer builds":
        run = str(tmp_path / "run")
        shutil.copytree(runs["dqn"], run)
        with open(os.path.join(run, "config.gin"), "a") as f:
            f.write("DQNAgent.gammma = 0.9\n")
    elif case == "other spaces":
        bindings = ["make_env.env_id = 'Acrobot-v1'"]
    elif case == "a negative time limit":
        bindings = ["make_env.max_episode_steps = -1"]
    else:
        checkpoint = "newest"
    before = _files(run)
    with pytest.raises(experiments.RunError, match=message) as raised:
        experiments.load(run, checkpoint, bindings)
    assert "\n" not in str(raised.value)
    assert _files(run) == before


def test_latest_passes_over_a_damaged_checkpoint_to_the_one_before(runs, tmp_path):
    policy = experiments.load(_damaged_copy(runs["dqn"], tmp_path), "latest")
    assert policy.step == 900
    policy.close()


def test_the_export_command_writes_a_model_for_others_and_times_it(runs, tmp_path):
    out = tmp_path / "exported"
    completed = subprocess.run(
        [sys.executable, "-m", "experiments.export", runs["a2c"], f"--out={out}", "--latency"],
        cwd=cli.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Exported A2CAgent (the checkpoint of step 1600)" in completed.stdout
    assert "a call takes" in completed.stdout and "for 1,000" in completed.stdout
    description = json.loads((out / "assets.extra" / "policy.json").read_text())
    assert description["observation"]["shape"] == [None, 4]
    assert description["checkpoint"] == "the checkpoint of step 1600"
    assert os.stat(out).st_mode & 0o055  # readable by others, as the umask allows


def test_export_refuses_a_folder_in_use_and_writes_nothing(runs, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    policy = experiments.load(runs["dqn"])
    try:
        with pytest.raises(ValueError, match="already exists and is not an empty folder"):
            export(policy, runs["dqn"], str(taken))
    finally:
        policy.close()
    assert os.listdir(taken) == ["notes.txt"]
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".export-")]
