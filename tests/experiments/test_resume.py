"""A SIGKILLed run, started again, ends exactly where the uninterrupted run ends."""

import csv
import random
import re
import signal
import time

import numpy as np
import pytest

from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars, read_tags
from tests.experiments import cli

PPO = [
    "Runner.num_steps = 2048",
    "Runner.checkpoint_interval = 512",
    "Runner.eval_interval = 512",
    "Runner.eval_episodes = 2",
    "Runner.log_interval = 256",
    "ShuffledMinibatches.n_epochs = 2",
    "ShuffledMinibatches.batch_size = 64",
]
MUJOCO_OFF_POLICY = [  # past the warm-up before the first checkpoint: training's state
    "ReplaySchedule.learning_starts = 100",
    "ReplaySchedule.batch_size = 32",
    "make_env.max_episode_steps = 150",
    "Runner.num_steps = 600",
    "Runner.checkpoint_interval = 200",
    "Runner.eval_interval = 200",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 100",
]
PONG_PPO = [
    "Runner.num_steps = 768",
    "Runner.checkpoint_interval = 128",
    "Runner.eval_interval = 384",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 64",
    "PPOAgent.n_steps = 16",
    "ShuffledMinibatches.n_epochs = 1",
    "ShuffledMinibatches.batch_size = 32",
    "make_atari_env.max_episode_frames = 600",
]
CASES = {
    "reinforce": (
        "gin_configs/reinforce/cartpole.gin",
        [
            "Runner.num_steps = 8000",
            "Runner.checkpoint_interval = 2000",
            "Runner.eval_interval = 2000",
            "Runner.eval_episodes = 3",
            "Runner.log_interval = 500",
        ],
    ),
    "dqn": (
        "gin_configs/dqn/cartpole.gin",
        [
            "Runner.num_steps = 5000",
            "Runner.checkpoint_interval = 1500",
            "Runner.eval_interval = 1000",
            "Runner.eval_episodes = 3",
            "Runner.log_interval = 500",
            "ReplaySchedule.train_freq = 128",
            "ReplaySchedule.gradient_steps = 16",
        ],
    ),
    "dqn_rainbow": (  # C51, dueling, 3-step double-Q and prioritized replay: its sum-tree too
        "gin_configs/dqn/cartpole_rainbow.gin",
        [
            "Runner.num_steps = 3000",
            "Runner.checkpoint_interval = 1500",
            "Runner.eval_interval = 1000",
            "Runner.eval_episodes = 3",
            "Runner.log_interval = 500",
            "ReplaySchedule.train_freq = 128",
            "ReplaySchedule.gradient_steps = 16",
        ],
    ),
    "sac": (  # three update groups, the temperature and its optimizer among the weights
        "gin_configs/sac/pendulum.gin",
        [
            "networks.gaussian_actor_mlp.hidden_units = (16, 16)",
            "networks.critic_mlp.hidden_units = (16, 16)",
            "ReplaySchedule.batch_size = 32",
            "Runner.num_steps = 600",
            "Runner.checkpoint_interval = 200",  # past the 100-step warm-up: training's state
            "Runner.eval_interval = 200",
            "Runner.eval_episodes = 1",
            "Runner.log_interval = 100",
        ],
    ),
    # PPO's three configs, smaller rollouts: a kill may fall inside a rollout; Acrobot's
    # observation and reward statistics are in every checkpoint.
    "ppo_cartpole": ("gin_configs/ppo/cartpole.gin", [*PPO, "PPOAgent.n_steps = 32"]),
    "ppo_pendulum": (
        "gin_configs/ppo/pendulum.gin",
        [*PPO, "PPOAgent.n_steps = 64", "Learner.jit_compile = False"],
    ),
    "ppo_acrobot": (
        "gin_configs/ppo/acrobot.gin",
        [*PPO, "PPOAgent.n_steps = 64", "Learner.jit_compile = False"],
    ),
    # MuJoCo, one config per agent: the simulation's state in every checkpoint (as data, never
    # pickled), episodes cut short and, on Hopper, ended by falls; each config's own XLA.
    "ppo_hopper": (
        "gin_configs/ppo/hopper.gin",
        [*PPO, "PPOAgent.n_steps = 64", "make_env.max_episode_steps = 200"],
    ),
    "sac_halfcheetah": (
        "gin_configs/sac/halfcheetah.gin",
        [
            "networks.gaussian_actor_mlp.hidden_units = (16, 16)",
            "networks.critic_mlp.hidden_units = (16, 16)",
            *MUJOCO_OFF_POLICY,
        ],
    ),
    "td3_hopper": (
        "gin_configs/td3/hopper.gin",
        [
            "networks.actor_mlp.hidden_units = (16, 16)",
            "networks.critic_mlp.hidden_units = (16, 16)",
            *MUJOCO_OFF_POLICY,
        ],
    ),
    # Pixels: 2 Pong emulators under the peers' protocol (a kill may fall mid-game and inside
    # a rollout), and DQN on MinAtar's planes with its game objects saved as data.
    "ppo_pong": ("gin_configs/ppo/pong.gin", PONG_PPO),
    # The conv torso in bfloat16 (weights and optimizer state float32): exact resume alike.
    "ppo_pong_bfloat16": (
        "gin_configs/ppo/pong.gin",
        [*PONG_PPO, "networks.actor_critic_cnn.compute_dtype = 'bfloat16'"],
    ),
    "dqn_minatar": (
        "gin_configs/dqn/minatar_breakout.gin",
        [
            "Runner.num_steps = 2000",
            "Runner.checkpoint_interval = 500",
            "Runner.eval_interval = 1000",
            "Runner.eval_episodes = 2",
            "Runner.log_interval = 250",
            "ReplaySchedule.learning_starts = 300",
            "UniformReplay.capacity = 1000",
        ],
    ),
    "a3c_round_robin": (  # the asynchronous driver with its workers in turn: deterministic
        "gin_configs/a3c/cartpole.gin",
        [
            "AsynchronousDriver.backend = @RoundRobin",
            "AsynchronousDriver.num_workers = 2",
            "Runner.num_steps = 4000",
            "Runner.checkpoint_interval = 1000",
            "Runner.eval_interval = 1000",
            "Runner.eval_episodes = 3",
            "Runner.log_interval = 200",
        ],
    ),
}

LOSSES = {  # where not "train/loss"
    "sac": ["train/critic/loss", "train/actor/loss", "train/temperature/loss"],
    "sac_halfcheetah": ["train/critic/loss", "train/actor/loss", "train/temperature/loss"],
    "td3_hopper": ["train/critic/loss", "train/actor/loss"],
}


@pytest.mark.parametrize(
    ("agent", "num_envs"),
    [
        ("dqn", 1),
        ("dqn_rainbow", 1),
        ("reinforce", 1),
        ("a3c_round_robin", 1),
        ("sac", 1),
        ("ppo_cartpole", 2),
        ("ppo_pendulum", 2),
        ("ppo_acrobot", 2),
        ("ppo_hopper", 1),
        ("sac_halfcheetah", 1),
        ("td3_hopper", 1),
        ("ppo_pong", 2),
        ("ppo_pong_bfloat16", 2),
        ("dqn_minatar", 1),
        # A kill is the same at 8 sub-environments; resuming 3 in process is
        # tests/framework/test_runner.py's, and every agent's state round trip the contract's.
        pytest.param("dqn", 8, marks=pytest.mark.slow),
        pytest.param("reinforce", 8, marks=pytest.mark.slow),
    ],
)
def test_killed_run_resumes_bitwise_identically(tmp_path, agent, num_envs):
    _assert_killed_run_resumes_bitwise(tmp_path, agent, num_envs)


def test_a_run_folder_named_like_a_pattern_resumes_bitwise(tmp_path):
    """`lr[0.01]` names a folder, never a pattern: its checkpoints are found (a pattern built
    from the folder found none, and the run trained from step 0 over its history), pruned to
    max_to_keep and restored, its event files continued, not set aside."""
    base_dir = tmp_path / "lr[0.01]"
    _assert_killed_run_resumes_bitwise(base_dir, "dqn", 1)
    killed = base_dir / "killed"
    assert complete_steps(str(killed / "checkpoints")) == [5000, 4500, 3000]  # 1500 pruned
    assert not list(killed.rglob("*set-aside-events*"))
    tables = [_progress(base_dir / name) for name in ("uninterrupted", "killed")]
    assert tables[0] == tables[1]


def _progress(base_dir) -> list[dict[str, str]]:
    """progress.csv's rows without the throughput, which the clock decides."""
    with open(base_dir / "progress.csv", newline="") as f:
        return [
            {tag: cell for tag, cell in row.items() if tag != "train/steps_per_second"}
            for row in csv.DictReader(f)
        ]


def _assert_killed_run_resumes_bitwise(tmp_path, agent: str, num_envs: int) -> None:
    gin_file, bindings = CASES[agent]
    bindings = [*bindings, f"Runner.num_envs = {num_envs}"]
    uninterrupted = cli.start(tmp_path / "uninterrupted", gin_file, bindings)
    killed = cli.start(tmp_path / "killed", gin_file, bindings)
    delay = random.Random(f"{agent}-{num_envs}").uniform(0.0, 0.2)  # a moment after it
    cli.kill_after_first_checkpoint(killed, tmp_path / "killed", delay)
    stderr = cli.finish(cli.start(tmp_path / "killed", gin_file, bindings))
    cli.finish(uninterrupted)
    assert "Resumed" in stderr

    expected, resumed = (read_scalars(tmp_path / name) for name in ("uninterrupted", "killed"))
    cli.assert_no_step_twice(resumed)
    for tag in ("eval/episode_return", "train/episode_return", *LOSSES.get(agent, ["train/loss"])):
        assert resumed[tag] == expected[tag], tag
    # Every train tag has the same steps: nothing missing, nothing doubled.
    for tag in expected:
        if tag != "train/steps_per_second":
            assert [s for s, _ in resumed[tag]] == [s for s, _ in expected[tag]], tag
    assert cli.progress_rows(tmp_path / "killed") == cli.progress_rows(tmp_path / "uninterrupted")

    weights, expected_weights = (
        cli.final_weights(tmp_path / "killed"),
        cli.final_weights(tmp_path / "uninterrupted"),
    )
    assert weights.keys() == expected_weights.keys()
    for key, value in expected_weights.items():
        np.testing.assert_array_equal(weights[key], value, err_msg=key)


@pytest.mark.slow
def test_twenty_kills_at_random_moments_leave_one_clean_identical_run(tmp_path):
    gin_file = "gin_configs/dqn/cartpole.gin"
    bindings = [
        "Runner.num_steps = 100000",
        "ReplaySchedule.train_freq = 32",
        "ReplaySchedule.gradient_steps = 32",
        "Runner.checkpoint_interval = 500",
        "Runner.eval_interval = 2000",
        "Runner.eval_episodes = 3",
        "Runner.log_interval = 500",
    ]
    rng = random.Random(0)
    checkpoints = tmp_path / "killed" / "checkpoints"
    for _ in range(20):
        had_checkpoint = bool(list(checkpoints.glob("*.complete")))
        process = cli.start(tmp_path / "killed", gin_file, bindings)
        time.sleep(rng.uniform(2.5, 5.0))  # the TF import alone takes ~3 s
        assert process.poll() is None, "the run finished before 20 kills"
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate()
        if had_checkpoint and "Run folder" in stderr:  # got as far as restoring
            assert "Resumed" in stderr, stderr[-2000:]
    cli.finish(cli.start(tmp_path / "killed", gin_file, bindings))
    cli.finish(cli.start(tmp_path / "uninterrupted", gin_file, bindings))

    expected, resumed = (read_scalars(tmp_path / name) for name in ("uninterrupted", "killed"))
    cli.assert_no_step_twice(resumed)
    for tag in expected:  # every tag at the same steps: nothing missing, nothing doubled
        if tag != "train/steps_per_second":
            assert [s for s, _ in resumed[tag]] == [s for s, _ in expected[tag]], tag
    for tag in ("eval/episode_return", "train/episode_return", "train/loss"):
        assert resumed[tag] == expected[tag], tag
    assert read_tags(tmp_path / "killed") == read_tags(tmp_path / "uninterrupted")
    assert cli.progress_rows(tmp_path / "killed") == cli.progress_rows(tmp_path / "uninterrupted")
    # Kills inside a prune or a write left nothing behind: at most max_to_keep checkpoints.
    steps_on_disk = {path.name.split(".")[0].split("_")[0] for path in checkpoints.glob("ckpt-*")}
    assert len(steps_on_disk) <= 3, sorted(steps_on_disk)
    weights = cli.final_weights(tmp_path / "killed")
    for key, value in cli.final_weights(tmp_path / "uninterrupted").items():
        np.testing.assert_array_equal(weights[key], value, err_msg=key)


def test_after_a_nonfinite_stop_the_last_good_checkpoint_restores(tmp_path):
    # A baseline fitted by SGD at learning rate 10 overshoots more every update until the
    # loss overflows (some twenty pulls in); checkpoints every 5 pulls come before that.
    bandit = "gin_configs/reinforce/bandit.gin"
    common = ["ReinforceAgent.use_baseline = True", "ReinforceAgent.optimizer = @optimizers.SGD()"]
    common += [
        "Runner.checkpoint_interval = 5",
        "Runner.eval_interval = 100",
        "Runner.num_steps = 100",
    ]
    diverging = cli.start(tmp_path, bandit, [*common, "optimizers.SGD.learning_rate = 10.0"])
    _, stderr = diverging.communicate(timeout=120)
    assert diverging.returncode == 1, stderr[-2000:]
    last_good = int(re.search(r"last good checkpoint is at step (\d+)", stderr).group(1))

    stderr = cli.finish(
        cli.start(tmp_path, bandit, [*common, "optimizers.SGD.learning_rate = 0.01"])
    )
    assert f"at environment step {last_good} " in stderr
    assert read_scalars(tmp_path)["eval/episode_return"][-1][0] == 100
