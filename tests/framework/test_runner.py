"""The runner: same seed, same numbers; a different seed, different numbers; no retracing."""

import logging

import numpy as np
import pytest

from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars
from tests.experiments.cli import steps_of
from tests.runs import train

CARTPOLE_DQN = ["gin_configs/dqn/cartpole.gin"]
SHORT_DQN = [
    "Runner.num_steps = 2000",
    "Runner.eval_interval = 1000",
    "Runner.eval_episodes = 2",
    "ReplaySchedule.train_freq = 100",
    "ReplaySchedule.gradient_steps = 8",
]


def _returns_and_weights(base_dir, seed):
    runner = train(base_dir, CARTPOLE_DQN, [*SHORT_DQN, f"Runner.seed = {seed}"])
    returns = read_scalars(base_dir)["train/episode_return"]
    return runner, returns, runner.agent.online.get_weights()


def test_same_seed_same_returns_and_weights_different_seed_differs(tmp_path):
    _, returns_a, weights_a = _returns_and_weights(tmp_path / "a", seed=7)
    _, returns_b, weights_b = _returns_and_weights(tmp_path / "b", seed=7)
    _, returns_c, weights_c = _returns_and_weights(tmp_path / "c", seed=8)
    assert returns_a == returns_b
    for a, b in zip(weights_a, weights_b, strict=True):
        np.testing.assert_array_equal(a, b)
    assert returns_a != returns_c
    assert not np.array_equal(weights_a[0], weights_c[0])


def test_learner_traces_once_over_a_whole_run(tmp_path):
    runner, _, _ = _returns_and_weights(tmp_path, seed=0)
    # 2000 steps, training every 100 after 1000 warm-up steps: 11 learner calls, one trace.
    assert int(runner.agent.learner.applied_updates.numpy()) == 11 * 8
    assert runner.agent.learner.tracing_count == 1


def test_reinforce_learner_traces_once_despite_varying_episode_lengths(tmp_path):
    runner = train(
        tmp_path,
        ["gin_configs/reinforce/cartpole.gin"],
        ["Runner.num_steps = 3000", "Runner.eval_interval = 3000", "Runner.eval_episodes = 1"],
    )
    assert int(runner.agent.learner.applied_updates.numpy()) > 10
    assert runner.agent.learner.tracing_count == 1


COUNTING = [
    "Runner.num_steps = 3000",
    "Runner.eval_interval = 1100",
    "Runner.eval_episodes = 1",
    "Runner.log_interval = 500",
    "Runner.checkpoint_interval = 700",
    "Runner.max_checkpoints_to_keep = 10",
    "ReplaySchedule.train_freq = 256",
    "ReplaySchedule.gradient_steps = 2",
]


def test_cadences_fire_at_the_same_transition_counts_with_eight_envs(tmp_path):
    one = train(tmp_path / "one", CARTPOLE_DQN, COUNTING)
    eight = train(tmp_path / "eight", CARTPOLE_DQN, [*COUNTING, "Runner.num_envs = 8"])
    assert eight.state.env_steps == one.state.env_steps == 3000

    def first_multiple_of_8(steps):
        return [-(-step // 8) * 8 for step in steps]

    # N = 1: evaluations at 1100, 2200 and the end; N = 8 at the first vector step crossing
    # each: 1104, 2200, 3000. Likewise logs (504, 1000, ...) and checkpoints (704, 1400, ...).
    scalars = {name: read_scalars(tmp_path / name) for name in ("one", "eight")}
    for tag in ("eval/episode_return", "train/steps_per_second"):
        assert steps_of(scalars["eight"], tag) == first_multiple_of_8(steps_of(scalars["one"], tag))
    assert steps_of(scalars["one"], "eval/episode_return") == [1100, 2200, 3000]
    checkpoints = [
        complete_steps(str(tmp_path / name / "checkpoints")) for name in ("one", "eight")
    ]
    assert sorted(checkpoints[0]) == [700, 1400, 2100, 2800, 3000]
    assert sorted(checkpoints[1]) == first_multiple_of_8(sorted(checkpoints[0]))
    # Gradient steps per transition are kept: 2 per multiple of 256 crossed after 1000.
    assert one.state.gradient_steps == eight.state.gradient_steps == 2 * 8


SHORT_EPISODES = {  # episodes of at most 20 steps: many truncate, as the resume tests need
    "dqn": (
        CARTPOLE_DQN,
        [
            "make_env.max_episode_steps = 20",
            "Runner.eval_interval = 250",
            "Runner.eval_episodes = 1",
            "Runner.log_interval = 50",
            "ReplaySchedule.learning_starts = 100",
            "ReplaySchedule.train_freq = 16",
            "ReplaySchedule.gradient_steps = 2",
        ],
    ),
    "reinforce": (
        ["gin_configs/reinforce/cartpole.gin"],
        [
            "make_env.max_episode_steps = 20",
            "Runner.eval_interval = 250",
            "Runner.eval_episodes = 1",
            "Runner.log_interval = 50",
            "ReinforceAgent.episodes_per_update = 2",
        ],
    ),
}


@pytest.mark.parametrize(("agent", "num_envs"), [("dqn", 1), ("dqn", 3), ("reinforce", 1)])
def test_resume_inside_an_episode_that_later_truncates_and_right_after_a_done(
    tmp_path, agent, num_envs
):
    gin_files, bindings = SHORT_EPISODES[agent]
    bindings = [*bindings, f"Runner.num_envs = {num_envs}"]
    total = 600
    expected = train(tmp_path / "whole", gin_files, [*bindings, f"Runner.num_steps = {total}"])
    whole = read_scalars(tmp_path / "whole")
    lengths = dict(whole["train/episode_length"])
    # A step right after an episode ended, and one 3 vector steps before an episode is
    # truncated at its 20th step (still inside it).
    after_done = next(step for step in lengths if step > 150)
    truncated = next(step for step, length in lengths.items() if length == 20 and step > 300)
    for name, stop in (("after_done", after_done), ("inside", truncated - 3 * num_envs)):
        folder = tmp_path / name
        train(folder, gin_files, [*bindings, f"Runner.num_steps = {stop}"])  # checkpoint at stop
        resumed = train(folder, gin_files, [*bindings, f"Runner.num_steps = {total}"])
        assert resumed.restored_step == stop
        scalars = read_scalars(folder)
        for tag in ("train/episode_return", "train/episode_length"):
            assert scalars[tag] == whole[tag], (name, tag)
        for mine, theirs in zip(_weights(resumed.agent), _weights(expected.agent), strict=True):
            np.testing.assert_array_equal(mine, theirs, err_msg=name)


def _weights(agent) -> list[np.ndarray]:
    return (agent.online if hasattr(agent, "online") else agent.policy).get_weights()


@pytest.mark.integration
def test_the_interval_of_the_learners_first_call_says_it_compiled(tmp_path, caplog):
    """The learner's first call traces and compiles (seconds): the log line of the interval it
    slowed down says so, and no other line does."""
    caplog.set_level(logging.INFO)
    # Learning starts at step 1000: the first interval (to 500) has no learner call.
    runner = train(tmp_path, CARTPOLE_DQN, [*SHORT_DQN, "Runner.log_interval = 500"])

    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert [line.split(" |")[0] for line in lines] == [
        f"step {s}/2000" for s in (500, 1000, 1500, 2000)
    ]
    seconds = runner.agent.learner.first_call_seconds
    assert seconds > 0
    noted = [line for line in lines if "compiling" in line]
    assert noted == [lines[1]]
    assert lines[1].endswith(f" steps/s (includes compiling the learner: {seconds:.1f} s)")
