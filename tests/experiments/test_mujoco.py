"""The MuJoCo configs: each trains a few hundred steps and exports what its policy does, and a
trained HalfCheetah's evaluation is recorded as video (its frames drawn in a process without
TensorFlow, `experiments/mujoco_frames.py`). Their exact resume after SIGKILL is
tests/experiments/test_resume.py's; the simulator's state, tests/framework/test_env_state.py's.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import experiments
from framework.export import export
from tests.experiments import cli
from tests.trained import rollout_observations

CONFIGS = [
    "ppo/halfcheetah.gin",
    "ppo/hopper.gin",
    "ppo/walker2d.gin",
    "sac/halfcheetah.gin",
    "sac/hopper.gin",
    "sac/walker2d.gin",
    "td3/halfcheetah.gin",
    "td3/hopper.gin",
    "td3/walker2d.gin",
]
STEPS = 256
SHORT = [
    f"Runner.num_steps = {STEPS}",
    f"Runner.eval_interval = {STEPS}",
    f"Runner.checkpoint_interval = {STEPS}",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 128",
    "make_env.max_episode_steps = 100",
    "Learner.jit_compile = False",  # XLA on these shapes: the resume tests run the configs' own
]
BRIEFLY = {  # past the warm-up or through several rollouts, in a few hundred steps
    "ppo": ["PPOAgent.n_steps = 64", "ShuffledMinibatches.n_epochs = 2"],
    "sac": ["ReplaySchedule.learning_starts = 128"],
    "td3": ["ReplaySchedule.learning_starts = 128"],
}


def _train(config: str, folder: str) -> experiments.TrainResult:
    bindings = [*SHORT, *BRIEFLY[config.split("/")[0]]]
    return experiments.train([f"gin_configs/{config}"], bindings, folder, verbose=False)


@pytest.mark.parametrize("config", CONFIGS)
def test_a_mujoco_config_trains_briefly_and_exports_what_its_policy_does(config, tmp_path):
    folder = str(tmp_path / "run")
    result = _train(config, folder)
    assert [step for step, _ in result.eval_returns] == [STEPS]
    assert np.isfinite(result.final_eval_return)

    policy = experiments.load(folder, "latest")
    try:
        observations = rollout_observations(policy, 300)
        expected = policy.act(observations)  # [N, A], the evaluation policy
        export(policy, folder, str(tmp_path / "exported"))
    finally:
        policy.close()
    exported = tf.saved_model.load(str(tmp_path / "exported")).signatures["action"]
    actions = exported(observation=tf.constant(observations))["action"].numpy()
    np.testing.assert_allclose(actions, expected, atol=1e-5)
    assert np.all(np.abs(actions) <= 1.0) and actions.std() > 0  # within the bounds, not one


def test_a_trained_halfcheetah_is_recorded_as_video_without_a_display(tmp_path):
    folder = str(tmp_path / "run")
    _train("sac/halfcheetah.gin", folder)
    video = tmp_path / "video"
    environment = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.evaluate",
            folder,
            "--episodes=1",
            f"--video={video}",
            "--gin_bindings=make_env.max_episode_steps = 30",
        ],
        cwd=cli.REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Exception ignored" not in completed.stderr  # a renderer freed at exit, say
    import imageio

    (name,) = os.listdir(video)
    reader = imageio.get_reader(str(video / name))
    assert reader.count_frames() == 31  # the first observation and 30 steps
    frame = reader.get_data(0)
    assert frame.shape == (480, 480, 3) and frame.std() > 10  # the cheetah on its floor


def test_a_renderer_that_cannot_start_is_one_paragraph(monkeypatch, capfd):
    from experiments import mujoco_frames
    from framework.parts.environments import make_env

    env = make_env("HalfCheetah-v5", render_mode="rgb_array")
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")  # the child's MuJoCo refuses it
    env = mujoco_frames.drawn_apart(env)
    assert isinstance(env, mujoco_frames.FramesDrawnApart)
    env.reset(seed=0)
    with pytest.raises(experiments.RunError, match=r"drawing MuJoCo's frames ended \(exit code 1"):
        env.render()
    env.close()
    assert "no-such-backend" in capfd.readouterr().err  # the child's own error, above ours
