"""Damaged checkpoints are reported and skipped, never deleted; none usable is a clear error."""

import glob
import os

import pytest

import experiments
from framework.storage.checkpointing import complete_steps
from tests.runs import train

BANDIT = ["gin_configs/reinforce/bandit.gin"]
SHORT = [
    "Runner.checkpoint_interval = 100",
    "Runner.eval_interval = 1000",
    "Runner.log_interval = 100",
]
DQN = ["gin_configs/dqn/cartpole.gin"]
DQN_SHORT = [
    "Runner.checkpoint_interval = 150",
    "Runner.eval_interval = 1000",
    "Runner.eval_episodes = 1",
    "ReplaySchedule.learning_starts = 100",
    "ReplaySchedule.train_freq = 50",
    "ReplaySchedule.gradient_steps = 2",
]


def _listing(directory) -> dict[str, int]:
    return {p: os.path.getsize(p) for p in glob.glob(os.path.join(directory, "**"), recursive=True)}


def _damage(path: str, how: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write({"truncate": data[: len(data) // 2], "empty": b"", "garbage": os.urandom(64)}[how])


@pytest.mark.parametrize(
    ("pattern", "how"),
    [
        ("ckpt-{step}.data-*", "truncate"),
        ("ckpt-{step}.index", "empty"),
        ("ckpt-{step}.values.json", "garbage"),
        ("ckpt-{step}.arrays.npz", "truncate"),
        ("ckpt-{step}.complete", "garbage"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_to_previous(
    trained_runs, tmp_path, pattern, how, caplog
):
    trained_runs.copy("bandit", tmp_path)  # checkpoints at 100, 200 and 300
    checkpoints = tmp_path / "checkpoints"
    damaged = glob.glob(str(checkpoints / pattern.format(step=300)))[0]
    _damage(damaged, how)
    before = _listing(checkpoints)
    runner = train(tmp_path, BANDIT, [*SHORT, "Runner.num_steps = 400"])
    assert runner.state.env_steps == 400
    assert runner.restored_step == 200
    assert any("ckpt-300" in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    # The run went on from step 200; the damaged checkpoint was moved aside, untouched.
    (kept,) = (checkpoints / "damaged").glob(f"*/{os.path.relpath(damaged, checkpoints)}")
    assert os.path.getsize(kept) == before[damaged]


def test_damaged_replay_file_falls_back(tmp_path):
    train(tmp_path, DQN, [*DQN_SHORT, "Runner.num_steps = 400"])
    steps = complete_steps(str(tmp_path / "checkpoints"))
    newest = tmp_path / "checkpoints" / f"ckpt-{steps[0]}.arrays.npz"  # the replay's arrays
    _damage(str(newest), "truncate")
    size = os.path.getsize(newest)
    runner = train(tmp_path, DQN, [*DQN_SHORT, "Runner.num_steps = 500"])
    assert runner.state.env_steps == 500
    assert runner.restored_step == steps[1]
    (kept,) = (tmp_path / "checkpoints" / "damaged").glob(f"*/{newest.name}")
    assert os.path.getsize(kept) == size


def test_no_usable_checkpoint_is_an_error_that_deletes_nothing(tmp_path):
    train(tmp_path, BANDIT, [*SHORT, "Runner.num_steps = 200"])
    checkpoints = tmp_path / "checkpoints"
    for data in glob.glob(str(checkpoints / "*.data-*")):
        _damage(data, "garbage")
    before = _listing(tmp_path)
    with pytest.raises(experiments.RunError) as error:
        train(tmp_path, BANDIT, [*SHORT, "Runner.num_steps = 300"])
    message = str(error.value)
    assert "ckpt-200" in message and "ckpt-100" in message and "Nothing was deleted" in message
    assert _listing(tmp_path) == before
