"""Bad input and faults: one paragraph naming the culprit, nothing left behind, nothing lost."""

import csv
import errno
import glob
import json
import os
import pathlib
import re
import shutil

import pytest

import experiments
from framework.storage import checkpointing
from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars

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
        ["optimizers.Adam.learning_rate must be a number > 0, got -0.1 (float)."],
    ),
    "replay_below_batch": (
        DQN,
        ["UniformReplay.capacity = 10"],
        ["capacity (10)", "DQNAgent's ReplaySchedule.batch_size (64)"],
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
    # A3C's spellings before the one runner are unknown names like any other.
    "a3c_as_a_configurable": (
        A3C,
        ["A3C.num_workers = 2"],
        ["No configurable matching 'A3C'", "A3C.num_workers = 2"],
    ),
    "a3c_as_a_reference": (
        A3C,
        ["runner_class.runner = @A3C"],
        ["No configurable matching reference '@A3C'", "runner_class.runner = @A3C"],
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
    "ppo_on_the_asynchronous_driver": (
        ["gin_configs/ppo/cartpole.gin"],
        ["Runner.driver = @AsynchronousDriver", "Runner.num_envs = 1"],
        ["PPOAgent learns from several epochs of minibatches", "synchronous driver"],
    ),
    "a_zero_learning_rate_as_an_integer": (
        BANDIT,
        ["optimizers.Adam.learning_rate = 0"],
        ["optimizers.Adam.learning_rate (as the config binds it)", "learning_rate=0"],
    ),
    "a_string_learning_rate": (
        BANDIT,
        ["optimizers.Adam.learning_rate = 'fast'"],
        ["optimizers.Adam.learning_rate (as the config binds it)", "learning_rate=fast"],
    ),
    "a_layer_of_no_units": (
        DQN,
        ["mlp.hidden_units = (0,)"],
        ["mlp.hidden_units must be positive integers", "got (0,)"],
    ),
    "a_number_for_an_environment_id": (
        DQN,
        ["make_env.env_id = 5"],
        ["make_env.env_id must be a gymnasium environment id", "got 5 (int)"],
    ),
    "an_exploration_probability_above_one": (
        DQN,
        ["LinearSchedule.start = 2.0"],
        ["DQNAgent.epsilon gives an exploration probability of 2 at environment step 0"],
    ),
    # A config moved to another action space: its network does not fit the policy there (the
    # first died at its first step looking for a log std, the second trained reading the
    # Gaussian's mean as logits).
    "ppo_cartpole_config_on_pendulum": (
        ["gin_configs/ppo/cartpole.gin"],
        ["make_env.env_id = 'Pendulum-v1'", "make_vector_env.vector_env = None"],
        [
            "PPOAgent.network builds actor_critic_mlp, whose outputs are ([B, 1], [B])",
            "bind PPOAgent.network = @networks.gaussian_actor_critic_mlp for a Box action space",
        ],
    ),
    "ppo_pendulum_config_on_cartpole": (
        ["gin_configs/ppo/pendulum.gin"],
        ["make_env.env_id = 'CartPole-v1'"],
        [
            "PPOAgent.network builds gaussian_actor_critic_mlp",
            "PPOAgent reads (logits [B, 2], V(s) [B])",
            "bind PPOAgent.network = @networks.actor_critic_mlp for a Discrete action space",
        ],
    ),
    # gymnasium reads a negative time limit as none: `evaluate` ran its first episode forever.
    "a_negative_time_limit": (
        DQN,
        ["make_env.max_episode_steps = -1"],
        ["make_env.max_episode_steps must be an integer >= 1, got -1 (int)."],
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
        (b"\x89PNG\r\n\x1a\n\x00\xff", ["bad.gin' is not UTF-8 text", "a binary file"]),
    ],
    ids=["unclosed_paren", "empty", "bound_twice", "missing_include", "binary"],
)  # fmt: skip
def test_bad_gin_file_is_one_paragraph_naming_it(tmp_path, text, culprits):
    data = text if isinstance(text, bytes) else text.encode()
    (tmp_path / "bad.gin").write_bytes(data)
    with pytest.raises(experiments.RunError) as raised:
        experiments.build([str(tmp_path / "bad.gin")], [], str(tmp_path / "run"))
    for culprit in culprits:
        assert culprit in str(raised.value), str(raised.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(base_dir=123), "base_dir must be a folder path (a string or a pathlib.Path)"),
        (dict(gin_files="x.gin"), "gin_files must be a list of strings, e.g."),
        (dict(bindings="Runner.num_steps = 5"), "bindings must be a list of strings, e.g."),
        (dict(gin_files=[5]), "gin_files must be a list of strings"),
    ],
)
def test_arguments_of_the_wrong_type_from_python_are_one_paragraph(tmp_path, arguments, message):
    with pytest.raises(experiments.RunError, match=re.escape(message)):
        experiments.train(**{"gin_files": BANDIT, "base_dir": str(tmp_path / "run"), **arguments})
    assert not (tmp_path / "run").exists()


def test_a_path_object_is_a_base_dir(tmp_path):
    prepared = experiments.build(BANDIT, ["Runner.num_steps = 10"], tmp_path / "run")
    assert prepared.folder.base_dir == str(tmp_path / "run")
    prepared.runner.close()


def test_a_lock_file_that_is_a_folder_is_named(tmp_path):
    (tmp_path / ".lock").mkdir()
    with pytest.raises(experiments.RunError, match=r"lock file .*\.lock is a folder") as raised:
        experiments.train(BANDIT, TINY, str(tmp_path))
    assert f"rmdir {tmp_path / '.lock'}" in str(raised.value)


def test_a_run_folder_of_the_retired_layout_is_one_paragraph_and_left_as_it_was(tmp_path):
    (tmp_path / "train").mkdir()  # one TensorBoard run per split kept event files there
    (tmp_path / "train" / "events.out.tfevents.x").write_bytes(b"events")
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(BANDIT, TINY, str(tmp_path))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path} is a run folder of the retired layout, one TensorBoard")
    assert f"(mv -n {tmp_path / 'train'}/events.out.tfevents.* {tmp_path}/)" in message
    assert os.listdir(tmp_path) == ["train"]  # not even a lock file
    assert (tmp_path / "train" / "events.out.tfevents.x").read_bytes() == b"events"


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


def test_a_base_dir_on_a_read_only_filesystem_is_one_paragraph(tmpfs):
    read_only = tmpfs("read_only", "ro,size=1m")
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(BANDIT, TINY, str(read_only / "run"))
    assert "read-only filesystem" in str(raised.value), str(raised.value)


def test_a_damaged_checkpoint_state_file_does_not_stop_a_resume(trained_runs, tmp_path):
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
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
    bindings = [*TINY, "ReplaySchedule.learning_starts = 50", "ReplaySchedule.train_freq = 50"]
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
def small_filesystem(tmpfs):
    """A 3 MB tmpfs."""
    return tmpfs("small", "size=3m")


def test_a_really_full_disk_loses_nothing(small_filesystem):
    base_dir = small_filesystem / "run"
    filler = small_filesystem / "filler"
    bindings = [
        "Runner.num_steps = 6000",
        "Runner.eval_interval = 6000",
        "Runner.eval_episodes = 1",
        "Runner.checkpoint_interval = 500",
        "Runner.max_checkpoints_to_keep = 1",
        "ReplaySchedule.train_freq = 500",
        "ReplaySchedule.gradient_steps = 1",
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


def test_a_folder_that_lost_its_checkpoints_is_never_silently_trained_again(trained_runs, tmp_path):
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
    shutil.rmtree(tmp_path / "checkpoints")
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(BANDIT, TINY, str(tmp_path))
    assert "show a checkpoint completed at step 300" in str(raised.value)
    assert "--start_afresh" in str(raised.value)
    assert read_scalars(tmp_path)["eval/episode_return"][-1][0] == 300  # logs untouched
    result = experiments.train(BANDIT, TINY, str(tmp_path), start_afresh=True)
    assert result.resumed_from is None and result.env_steps == 300


def test_every_marker_missing_is_the_same_error_and_deletes_nothing(trained_runs, tmp_path):
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
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
    bindings = [*TINY, "ReplaySchedule.learning_starts = 50", "ReplaySchedule.train_freq = 50"]
    experiments.train(DQN, bindings, str(tmp_path))
    bigger = [*bindings[1:], "Runner.num_steps = 400", "networks.mlp.hidden_units = (32,)"]
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(DQN, bigger, str(tmp_path))
    message = str(raised.value)
    assert message.startswith("The config changed since the checkpoints in"), message
    assert "-mlp.hidden_units = (256, 256); +mlp.hidden_units = (32,)" in message, message
    assert "-Runner.num_steps" not in message and len(message) < 700, message  # what decides it
    diff = (tmp_path / "config-changes.diff").read_text()
    assert f"The whole difference, and what the checkpoint lacks, is in {tmp_path}" in message
    assert "+Runner.num_steps = 400" in diff and "No usable checkpoint in" in diff


def test_a_checkpoint_of_the_format_before_the_one_runner_is_one_paragraph(trained_runs, tmp_path):
    """A run folder of format 2 (before the runner took A3C's driver in) resumed by this code."""
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
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


def test_metadata_records_the_last_checkpoint_outside_checkpoints(trained_runs, tmp_path):
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
    assert json.loads((tmp_path / "metadata.json").read_text())["last_checkpoint"] == 300


DAMAGED_RECORDS = [  # (file, content, what the paragraph says is wrong)
    ("metadata.json", b"", "metadata.json is damaged: not JSON"),
    ("metadata.json", b'{"starts": [\xff\xfe]}', "metadata.json is damaged: not UTF-8 text"),
    ("metadata.json", b"[1, 2]", "metadata.json is damaged: JSON, but a list, not an object"),
    (
        "metadata.json",
        b'{"starts": {}}',
        'metadata.json is damaged: JSON, but its "starts" is an object, not a list of objects',
    ),
    (
        "metadata.json",
        b'{"starts": [1, 2]}',
        'metadata.json is damaged: JSON, but its "starts" holds a number at position 1',
    ),
    ("config.gin", b"Runner.num_steps = \xff\xfe", "config.gin is damaged: not UTF-8 text"),
    (
        "config.gin",
        b"<html><body>Not found</body></html>\n",
        "config.gin is damaged: gin cannot read it (Bad gin syntax in the file: ",
    ),
]


def test_a_damaged_record_is_one_paragraph_that_loses_no_checkpoint(trained_runs, tmp_path):
    trained = trained_runs["bandit"]  # BANDIT trained with TINY
    for index, (record, content, what) in enumerate(DAMAGED_RECORDS):
        run = tmp_path / str(index)
        shutil.copytree(trained, run)
        (run / record).write_bytes(content)
        checkpoints = sorted(os.listdir(run / "checkpoints"))
        for start_afresh in (False, True):
            with pytest.raises(experiments.RunError, match=re.escape(what)) as raised:
                experiments.train(BANDIT, TINY, str(run), start_afresh=start_afresh)
            assert f"mv {run / record} {run / record}.damaged" in str(raised.value)
            assert sorted(os.listdir(run / "checkpoints")) == checkpoints
            assert (run / record).read_bytes() == content
        with pytest.raises(experiments.RunError, match=re.escape(what)):  # evaluate's way in
            experiments.load(str(run))
    (run / record).rename(run / f"{record}.damaged")  # as the paragraph says
    longer = [*TINY[1:], "Runner.num_steps = 400"]
    assert experiments.train(BANDIT, longer, str(run)).resumed_from == 300


def _values_of_the_best_snapshot(run) -> pathlib.Path:
    (values,) = (run / "best").glob("*.values.json")
    return values


DAMAGED_SIDE_RECORDS = {  # what a start sets aside, warning, to go on: (file, damage, warning)
    "an_emptied_best_snapshot": (_values_of_the_best_snapshot, b"", "snapshot is damaged: "),
    "a_garbled_best_snapshot": (
        _values_of_the_best_snapshot,
        b'{"values": {"step": 2',
        "does not match its recorded hash",
    ),
    "a_progress_table_not_utf8": (
        lambda run: run / "progress.csv",
        b"step,train/loss\n100,\xff\xfe\n",
        "progress.csv is damaged: not UTF-8 text",
    ),
    "a_progress_table_without_its_header": (
        lambda run: run / "progress.csv",
        b"100,0.5\n200,0.25\n",
        "progress.csv is damaged: its first line is not the header (step, the tags): '100,0.5'",
    ),
}


def test_a_damaged_best_snapshot_or_progress_table_is_set_aside_and_the_resume_goes_on(
    tmp_path, caplog
):
    """Resuming never depends on best/ nor on progress.csv: each is set aside, kept as it was,
    with a warning; a new progress.csv holds the rows of the resumed start."""
    trained = tmp_path / "trained"
    experiments.train(BANDIT, TINY, str(trained))
    longer = [*TINY[1:], "Runner.num_steps = 400"]
    for case, (where, content, warning) in DAMAGED_SIDE_RECORDS.items():
        run = tmp_path / case
        shutil.copytree(trained, run)
        damaged = where(run)
        damaged.write_bytes(content)
        caplog.clear()
        assert experiments.train(BANDIT, longer, str(run)).resumed_from == 300, case
        assert warning in caplog.text, case
        (kept,) = (run / "discarded").glob(f"*/{damaged.relative_to(run)}")
        assert kept.read_bytes() == content, case
        with open(run / "progress.csv", newline="") as f:
            steps = [int(row["step"]) for row in csv.DictReader(f)]
        assert steps[-1] == 400 and steps[0] == (400 if "progress" in case else 100), case


def test_a_missing_metadata_file_is_said_and_the_run_resumes(trained_runs, tmp_path, caplog):
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
    (tmp_path / "metadata.json").unlink()
    result = experiments.train(BANDIT, [*TINY[1:], "Runner.num_steps = 400"], str(tmp_path))
    assert result.resumed_from == 300
    assert "no metadata.json: the records of the run's earlier starts are gone" in caplog.text


def test_a_full_disk_in_tensorflows_own_variable_save_is_one_paragraph(small_filesystem):
    """The networks and optimizer (~1.1 MB at 256x256) do not fit twice in 3 MB."""
    base_dir = small_filesystem / "run"
    bindings = [
        "Runner.num_steps = 4000",
        "Runner.eval_interval = 4000",
        "Runner.eval_episodes = 1",
        "Runner.checkpoint_interval = 2000",
        "Runner.max_checkpoints_to_keep = 1",
        "ReplaySchedule.learning_starts = 1000",
        "ReplaySchedule.train_freq = 1000",
        "UniformReplay.capacity = 1000",
    ]
    (small_filesystem / "filler").write_bytes(b"\0" * (1200 * 1024))
    with pytest.raises(experiments.RunError) as raised:
        experiments.train(DQN, bindings, str(base_dir))
    message = str(raised.value)
    assert "Could not write the checkpoint at step 4000" in message, message
    assert "the disk is full" in message and "TensorFlow's variable save" in message, message
    assert "step 2000 is intact" in message, message
    assert complete_steps(str(base_dir / "checkpoints")) == [2000]


def test_a_checkpoint_whose_state_is_of_another_step_is_refused(trained_runs, tmp_path):
    trained_runs.copy("bandit", tmp_path)  # BANDIT trained with TINY
    prefix = tmp_path / "checkpoints" / "ckpt-300"
    values = json.loads((prefix.parent / "ckpt-300.values.json").read_text())
    values["values"]["runner/env_steps"] = 200  # an edit, re-hashed so that it looks whole
    (prefix.parent / "ckpt-300.values.json").write_text(json.dumps(values))
    marker = json.loads((prefix.parent / "ckpt-300.complete").read_text())
    marker["files"]["ckpt-300.values.json"] = checkpointing._sha256(
        str(prefix.parent / "ckpt-300.values.json")
    )
    (prefix.parent / "ckpt-300.complete").write_text(json.dumps(marker))
    with pytest.raises(experiments.RunError, match="holds the state of environment step 200"):
        experiments.train(BANDIT, [*TINY[1:], "Runner.num_steps = 400"], str(tmp_path))


def test_a_resume_keeps_the_seed_the_agent_and_the_environment(tmp_path):
    experiments.train(BANDIT, TINY, str(tmp_path), seed=1)
    longer = [*TINY[1:], "Runner.num_steps = 400"]
    changes = {
        "the seed (Runner.seed: 1 then, 5 now)": (BANDIT, longer, 5),
        "the agent (Runner.agent: @ReinforceAgent then, @DQNAgent now)": (DQN, longer, 1),
        "the environment (make_env.env_id: 'MultiArmedBandit-v0' then, 'CartPole-v1' now)": (
            ["gin_configs/reinforce/cartpole.gin"],
            longer,
            1,
        ),
    }
    for change, (gin_files, bindings, seed) in changes.items():
        with pytest.raises(experiments.RunError) as raised:
            experiments.train(gin_files, bindings, str(tmp_path), seed=seed)
        assert change in str(raised.value), str(raised.value)
        assert len(str(raised.value)) < 700
        assert complete_steps(str(tmp_path / "checkpoints")) == [300, 200, 100]
    result = experiments.train(BANDIT, longer, str(tmp_path), seed=1)  # its own seed resumes
    assert result.resumed_from == 300
    result = experiments.train(BANDIT, TINY, str(tmp_path), seed=5, start_afresh=True)
    assert result.resumed_from is None and result.env_steps == 300
    assert glob.glob(str(tmp_path / "discarded" / "*" / "checkpoints" / "ckpt-400.complete"))
