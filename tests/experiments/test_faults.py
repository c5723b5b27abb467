"""Bad input and faults: one paragraph naming the culprit, nothing left behind, nothing lost."""

import errno
import glob
import json
import os
import shutil
import subprocess

import pytest

import experiments
from framework import checkpointing
from framework.checkpointing import complete_steps
from framework.event_reader import read_scalars

BANDIT = ["gin_configs/reinforce/bandit.gin"]
DQN = ["gin_configs/dqn/cartpole.gin"]
A3C = ["gin_configs/a3c/cartpole.gin"]
TINY = ["Runner.num_steps = 300", "Runner.eval_interval = 100", "Runner.eval_episodes = 2"]
TINY += ["Runner.checkpoint_interval = 100"]

# Input, and what its one-paragraph error must say. Each is built (or trained) in-process:
# experiments.run's command line turns a RunError into exactly this paragraph and exit 1
# (tests/experiments/test_run_cli.py checks that path end to end).
BAD_CONFIGS = {
    "unclosed_paren_in_binding": (
        BANDIT,
        ["Runner.num_steps = (100"],
        ["'Runner.num_steps = (100'", "never closed"],
    ),
    "unclosed_bracket_in_binding": (
        BANDIT,
        ["MultiArmedBanditEnv.means = [0.1, 0.2"],
        ["MultiArmedBanditEnv.means", "never closed"],
    ),
    "string_for_an_integer": (
        BANDIT,
        ["Runner.num_steps = 'abc'"],
        ["Runner.num_steps must be an integer >= 1", "'abc' (str)"],
    ),
    "none_for_an_integer": (
        BANDIT,
        ["Runner.num_steps = None"],
        ["Runner.num_steps must be an integer >= 1", "None"],
    ),
    "fraction_for_an_integer": (
        BANDIT,
        ["Runner.num_steps = 1500.5"],
        ["Runner.num_steps", "1500.5 (float)"],
    ),
    "bool_for_an_integer": (
        BANDIT,
        ["Runner.num_steps = True"],
        ["Runner.num_steps", "True (bool)"],
    ),
    "negative_learning_rate": (
        BANDIT,
        ["optimizers.Adam.learning_rate = -0.1"],
        ["optimizers.Adam.learning_rate must be > 0, got -0.1."],
    ),
    "replay_below_batch": (
        DQN,
        ["UniformReplay.capacity = 10"],
        ["capacity (10)", "DQNAgent.batch_size (64)"],
    ),
    "bound_twice_in_bindings": (
        BANDIT,
        ["Runner.num_steps = 100", "Runner.num_steps = 200"],
        ["Runner.num_steps is bound twice in --gin_bindings"],
    ),
    "discrete_observations": (
        DQN,
        ["make_env.env_id = 'FrozenLake-v1'"],
        ["DQNAgent needs array observations", "Discrete(16)", "FlattenObservation"],
    ),
    "tuple_observations": (
        BANDIT,
        ["make_env.env_id = 'Blackjack-v1'"],
        ["ReinforceAgent needs array observations", "Tuple("],
    ),
    "unknown_macro": (BANDIT, ["Runner.num_steps = %STEPS"], ["macro %STEPS", "never defines"]),
    "unknown_environment_argument": (
        DQN,
        ["make_env.env_kwargs = {'bogus': 1}"],
        ["unexpected keyword argument 'bogus'"],
    ),
    "old_a3c_vocabulary": (
        A3C,
        ["A3C.num_workers = 2"],
        ["A3C.num_workers is an old spelling", "write AsynchronousDriver.num_workers"],
    ),
    "old_a3c_driver": (
        A3C,
        ["runner_class.runner = @A3C"],
        ["runner_class.runner is an old spelling", "write Runner.driver = @AsynchronousDriver"],
    ),
    "old_a3c_reference": (
        A3C,
        ["Runner.driver = @A3C"],
        ["@A3C is an old spelling", "write @AsynchronousDriver."],
    ),
    "num_envs_under_the_asynchronous_driver": (
        A3C,
        ["Runner.num_envs = 4"],
        ["Runner.num_envs = 4", "AsynchronousDriver.envs_per_worker"],
    ),
    "an_agent_without_rollouts_on_the_asynchronous_driver": (
        DQN,
        ["Runner.driver = @AsynchronousDriver"],
        ["AsynchronousDriver needs an agent", "DQNAgent has no shared_variables", "synchronous"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_is_one_paragraph_naming_the_culprit(tmp_path, case):
    gin_files, bindings, culprits = BAD_CONFIGS[case]
    with pytest.raises(experiments.RunError) as raised:
        experiments.build(gin_files, bindings, str(tmp_path / "run"))
    message = str(raised.value)
    assert "\n" not in message and "In call to configurable" not in message, message
    for culprit in culprits:
        assert culprit in message, message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("text", "culprits"),
    [
        ("Runner.agent = @ReinforceAgent\nRunner.num_steps = (100\n", ["bad.gin", "never closed"]),
        ("", ["does not bind Runner.agent", "bad.gin"]),
        ("Runner.num_steps = 100\nRunner.eval_interval = 5\nRunner.num_steps = 200\n",
         ["Runner.num_steps is bound twice in gin file", "line 1", "line 3"]),
        ("include 'gin_configs/reinforce/nope.gin'\n", ["nope.gin", "not found"]),
    ],
    ids=["unclosed_paren", "empty", "bound_twice", "missing_include"],
)  # fmt: skip
def test_bad_gin_file_is_one_paragraph_naming_it(tmp_path, text, culprits):
    (tmp_path / "bad.gin").write_text(text)
    with pytest.raises(experiments.RunError) as raised:
        experiments.build([str(tmp_path / "bad.gin")], [], str(tmp_path / "run"))
    for culprit in culprits:
        assert culprit in str(raised.value), str(raised.value)
    assert not (tmp_path / "run").exists()


def test_overriding_across_sources_stays_legal_and_is_logged(tmp_path, caplog):
    caplog.set_level("INFO")
    prepared = experiments.build(BANDIT, ["Runner.num_steps = 50"], str(tmp_path), seed=9)
    assert prepared.runner.num_steps == 50 and prepared.runner.seed == 9
    lines = [r.getMessage() for r in caplog.records]
    assert any("Runner.num_steps = 50 (--gin_bindings) overrides 5000" in line for line in lines)


def test_an_empty_base_dir_is_refused(tmp_path):
    with pytest.raises(experiments.RunError, match="--base_dir is empty"):
        experiments.build(BANDIT, TINY, "")


@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
def test_an_unusable_base_dir_is_one_paragraph(tmp_path, where):
    (tmp_path / "file").write_text("x")
    base_dir = tmp_path / "file" if where == "a_file" else tmp_path / "file" / "run"
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(BANDIT, TINY, str(base_dir))
    assert f"Cannot use {str(base_dir)!r} as the run folder" in str(raised.value)


def test_a_base_dir_on_a_read_only_filesystem_is_one_paragraph(tmp_path):
    read_only = _mount_tmpfs(tmp_path / "read_only", "ro,size=1m")
    try:
        with pytest.raises(experiments.RunError) as raised:
            experiments.train(BANDIT, TINY, str(read_only / "run"))
    finally:
        subprocess.run(["umount", str(read_only)], check=False)
    assert "read-only filesystem" in str(raised.value), str(raised.value)


def _mount_tmpfs(mount_point, options: str):
    """A tmpfs where the suite may mount one (root on Linux); the test is skipped elsewhere."""
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    return mount_point


def test_a_damaged_checkpoint_state_file_does_not_stop_a_resume(tmp_path):
    experiments.train(BANDIT, TINY, str(tmp_path))
    for content in (b"", b"\x00\xff\xfe binary"):  # tf.train.CheckpointManager choked on these
        (tmp_path / "checkpoints" / "checkpoint").write_bytes(content)
        result = experiments.train(BANDIT, [*TINY[1:], "Runner.num_steps = 400"], str(tmp_path))
        assert result.resumed_from in (300, 400)


def _write_arrays_until_full(monkeypatch, fail_at_step: int):
    """Checkpoint writes from `fail_at_step` on hit ENOSPC halfway through the arrays file."""
    original = checkpointing._write_arrays

    def write(path, arrays):
        if f"ckpt-{fail_at_step}." in path:
            with open(path, "wb") as f:
                f.write(b"half a file")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        original(path, arrays)

    monkeypatch.setattr(checkpointing, "_write_arrays", write)


def test_disk_full_stops_with_one_paragraph_keeps_the_last_checkpoint_and_resumes(
    tmp_path, monkeypatch
):
    bindings = [*TINY, "DQNAgent.learning_starts = 50", "DQNAgent.train_freq = 50"]
    with monkeypatch.context() as patched:
        _write_arrays_until_full(patched, fail_at_step=200)
        with pytest.raises(experiments.RunError) as raised:
            experiments.train(DQN, bindings, str(tmp_path))
    message = str(raised.value)
    assert "Could not write the checkpoint at step 200" in message, message
    assert "No space left on device" in message and "step 100 is intact" in message, message
    checkpoints = tmp_path / "checkpoints"
    assert complete_steps(str(checkpoints)) == [100]
    assert not glob.glob(str(checkpoints / "ckpt-200*")), os.listdir(checkpoints)
    assert not glob.glob(str(tmp_path / "**" / "*.tmp*"), recursive=True)
    assert not glob.glob(str(tmp_path / "**" / ".tmp.*"), recursive=True)
    # Space freed: the same command resumes from step 100 and finishes.
    result = experiments.train(DQN, bindings, str(tmp_path))
    assert result.resumed_from == 100 and result.env_steps == 300


@pytest.fixture
def small_filesystem(tmp_path):
    """A 3 MB tmpfs."""
    mount_point = _mount_tmpfs(tmp_path / "small", "size=3m")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


def test_a_really_full_disk_loses_nothing(small_filesystem):
    base_dir = small_filesystem / "run"
    filler = small_filesystem / "filler"
    bindings = [
        "Runner.num_steps = 6000",
        "Runner.eval_interval = 6000",
        "Runner.eval_episodes = 1",
        "Runner.checkpoint_interval = 500",
        "Runner.max_checkpoints_to_keep = 1",
        "DQNAgent.train_freq = 500",
        "DQNAgent.gradient_steps = 1",
        "networks.mlp.hidden_units = (16,)",
    ]
    # Leaves ~300 kB: the first checkpoints fit, one with 6000 transitions (~290 kB) does not.
    filler.write_bytes(b"\0" * (2700 * 1024))
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(DQN, bindings, str(base_dir))
    message = str(raised.value)
    assert "No space left on device" in message, message
    assert "Traceback" not in message
    leftovers = [
        p
        for p in glob.glob(str(base_dir / "**" / "*"), recursive=True)
        if ".tmp" in p or "_temp" in p
    ]
    assert not leftovers, leftovers
    last = complete_steps(str(base_dir / "checkpoints"))
    filler.unlink()  # space freed: the run resumes from its last complete checkpoint
    result = experiments.train(DQN, bindings, str(base_dir))
    assert result.resumed_from == (last[0] if last else None)
    assert result.env_steps == 6000


def test_a_folder_that_lost_its_checkpoints_is_never_silently_trained_again(tmp_path):
    experiments.train(BANDIT, TINY, str(tmp_path))
    shutil.rmtree(tmp_path / "checkpoints")
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(BANDIT, TINY, str(tmp_path))
    assert "show a checkpoint completed at step 300" in str(raised.value)
    assert "--start_afresh" in str(raised.value)
    assert read_scalars(tmp_path)["eval/episode_return"][-1][0] == 300  # logs untouched
    result = experiments.train(BANDIT, TINY, str(tmp_path), start_afresh=True)
    assert result.resumed_from is None and result.env_steps == 300


def test_every_marker_missing_is_the_same_error_and_deletes_nothing(tmp_path):
    experiments.train(BANDIT, TINY, str(tmp_path))
    for marker in glob.glob(str(tmp_path / "checkpoints" / "*.complete")):
        os.remove(marker)
    before = sorted(os.listdir(tmp_path / "checkpoints"))
    with pytest.raises(experiments.RunError, match="no complete checkpoint now"):
        experiments.train(BANDIT, TINY, str(tmp_path))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == before


def test_a_start_killed_before_its_first_checkpoint_simply_starts_again(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-50.index").write_bytes(b"an unfinished write")
    result = experiments.train(BANDIT, TINY, str(tmp_path))
    assert result.resumed_from is None and result.env_steps == 300
    assert not (tmp_path / "checkpoints" / "ckpt-50.index").exists()


def test_a_changed_config_is_named_when_the_checkpoint_does_not_fit(tmp_path):
    bindings = [*TINY, "DQNAgent.learning_starts = 50", "DQNAgent.train_freq = 50"]
    experiments.train(DQN, bindings, str(tmp_path))
    bigger = [*bindings[1:], "Runner.num_steps = 400", "networks.mlp.hidden_units = (32,)"]
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(DQN, bigger, str(tmp_path))
    message = str(raised.value)
    assert message.startswith("The config changed since the checkpoints in"), message
    assert "-mlp.hidden_units = (256, 256); +mlp.hidden_units = (32,)" in message, message


def test_a_checkpoint_of_the_format_before_the_one_runner_is_one_paragraph(tmp_path):
    """A run folder of format 2 (before the runner took A3C's driver in) resumed by this code."""
    experiments.train(BANDIT, TINY, str(tmp_path))
    for marker in glob.glob(str(tmp_path / "checkpoints" / "*.complete")):
        with open(marker) as f:
            content = json.load(f)
        with open(marker, "w") as f:
            json.dump({**content, "format": 2}, f)
    before = sorted(glob.glob(str(tmp_path / "**"), recursive=True))
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(BANDIT, [*TINY[1:], "Runner.num_steps = 400"], str(tmp_path))
    message = str(raised.value)
    assert message.startswith("The checkpoint "), message  # no config diff: the code changed
    assert "older layout of this framework (checkpoint format 2; this code reads format 3)" in (
        message
    )
    assert sorted(glob.glob(str(tmp_path / "**"), recursive=True)) == before


def test_a_crash_inside_a_prune_is_finished_by_the_next_start(tmp_path, monkeypatch):
    bindings = [*TINY, "Runner.max_checkpoints_to_keep = 2"]
    original = checkpointing._delete
    calls = []

    def crash_after_unmarking(path):
        if os.sep + "checkpoints" + os.sep not in path:  # the best snapshot's own prune
            return original(path)
        calls.append(path)
        raise KeyboardInterrupt  # stands for a kill between the marker's removal and the files'

    with monkeypatch.context() as patched:
        patched.setattr(checkpointing, "_delete", crash_after_unmarking)
        with pytest.raises(KeyboardInterrupt):
            experiments.train(BANDIT, bindings, str(tmp_path))
    assert checkpointing._delete is original
    checkpoints = tmp_path / "checkpoints"
    # The prune of ckpt-100 at step 300 unmarked it, then died: its files are still there.
    assert complete_steps(str(checkpoints)) == [300, 200]
    assert glob.glob(str(checkpoints / "ckpt-100.*"))
    result = experiments.train(BANDIT, [*bindings[1:], "Runner.num_steps = 400"], str(tmp_path))
    assert result.resumed_from == 300
    assert not glob.glob(str(checkpoints / "ckpt-100.*"))
    assert complete_steps(str(checkpoints)) == [400, 300]
    steps_on_disk = {
        int(os.path.basename(p).split(".")[0].split("-")[1])
        for p in glob.glob(str(checkpoints / "ckpt-*"))
    }
    assert steps_on_disk == {300, 400}  # never more than max_to_keep (+1 while saving)


def test_metadata_records_the_last_checkpoint_outside_checkpoints(tmp_path):
    experiments.train(BANDIT, TINY, str(tmp_path))
    assert json.loads((tmp_path / "metadata.json").read_text())["last_checkpoint"] == 300
