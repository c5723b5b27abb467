"""Command-line tests for experiments/run.py: a real run, resume, bad input, dry runs, NaNs.

Every test runs `python -m experiments.run` in a subprocess, as a user would. Each invocation
pays ~4 s of TensorFlow import, so the runs are tiny (200 bandit pulls) and shared between tests
through module-scoped fixtures: 12 invocations in all.
"""

import dataclasses
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from framework.event_reader import final_value, read_scalars, read_tags

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BANDIT = "--gin_file=gin_configs/reinforce/bandit.gin"
ERROR_PREFIX = "experiments.run: error:"

# A tiny bandit run: logs every 50 pulls, evaluates and checkpoints every 100.
TINY = [
    "Runner.eval_interval = 100",
    "Runner.checkpoint_interval = 100",
    "Runner.log_interval = 50",
    "Runner.histogram_interval = 100",
    "Runner.eval_episodes = 3",
]

# REINFORCE with a learned baseline fitted by plain SGD at learning rate 10: the least-squares
# fit of V overshoots by a growing factor every update, so |G - V| grows geometrically until the
# squared error overflows float32 (around step 20 for seed 0). Checkpoints every 5 pulls leave
# good checkpoints before that.
DIVERGING = [
    BANDIT,
    "--gin_bindings=ReinforceAgent.use_baseline = True",
    "--gin_bindings=ReinforceAgent.optimizer = @optimizers.SGD()",
    "--gin_bindings=optimizers.SGD.learning_rate = 10.0",
    "--gin_bindings=Runner.checkpoint_interval = 5",
    "--gin_bindings=Runner.log_interval = 30",
    "--gin_bindings=Runner.eval_interval = 60",
    "--gin_bindings=Runner.eval_episodes = 1",
    "--gin_bindings=Runner.histogram_interval = 60",
    "--seed=0",
]


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        """What to print when an assertion about this run fails."""
        return (
            f"exit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )

    def error_message(self) -> str:
        """The CLI's one-paragraph error: the single `error:` line, which must come last."""
        lines = [line for line in self.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
        assert len(lines) == 1, self.explain()
        assert self.stderr.rstrip().splitlines()[-1] == lines[0], self.explain()
        assert "Traceback" not in self.stderr, self.explain()
        return lines[0]


def run_cli(*args: str) -> Result:
    completed = subprocess.run(
        [sys.executable, "-m", "experiments.run", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return Result(completed.returncode, completed.stdout, completed.stderr)


def bindings(*lines: str) -> list[str]:
    return [f"--gin_bindings={line}" for line in lines]


def complete_steps(base_dir) -> list[int]:
    """Steps of the checkpoints that have a completion marker, newest first."""
    markers = glob.glob(os.path.join(base_dir, "checkpoints", "ckpt-*.complete"))
    return sorted(
        (int(re.search(r"ckpt-(\d+)\.complete$", m).group(1)) for m in markers), reverse=True
    )


def assert_checkpoint_finite(base_dir, step: int) -> None:
    reader = tf.train.load_checkpoint(os.path.join(base_dir, "checkpoints", f"ckpt-{step}"))
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        if np.issubdtype(np.asarray(value).dtype, np.floating):
            assert np.all(np.isfinite(value)), f"ckpt-{step}: {name} is not finite"


def assert_no_step_twice(scalars: dict[str, list[tuple[int, float]]]) -> None:
    for tag, points in scalars.items():
        steps = [step for step, _ in points]
        assert len(steps) == len(set(steps)), f"{tag} has a step twice: {steps}"


# ----- a finished run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("bandit") / "run"
    result = run_cli(
        BANDIT,
        *bindings("Runner.num_steps = 200", *TINY),
        f"--base_dir={base_dir}",
        "--seed=3",
    )
    assert result.returncode == 0, result.explain()
    return base_dir, result


def test_run_logs_every_promised_tag(finished_run):
    base_dir, _ = finished_run
    tags = read_tags(str(base_dir))
    expected = {
        "train/episode_return",
        "train/episode_length",
        "eval/episode_return",
        "train/loss",
        "train/grad_norm",
        "train/learning_rate",
        "train/steps_per_second",
        "policy/entropy",
        *(f"policy/prob_{arm}" for arm in range(4)),
        "config",
        "metadata",
    }
    assert expected <= tags, f"missing: {sorted(expected - tags)}"
    assert any(tag.startswith("weights/") for tag in tags), sorted(tags)


def test_run_logs_at_the_configured_steps(finished_run):
    base_dir, _ = finished_run
    scalars = read_scalars(str(base_dir))
    assert [step for step, _ in scalars["eval/episode_return"]] == [100, 200]
    assert [step for step, _ in scalars["train/loss"]] == [50, 100, 150, 200]
    # One pull per episode: an episode return at every step.
    assert [step for step, _ in scalars["train/episode_return"]] == list(range(1, 201))
    assert_no_step_twice(scalars)


def test_run_writes_config_and_metadata(finished_run):
    base_dir, _ = finished_run
    config = (base_dir / "config.gin").read_text()
    assert "Runner.num_steps = 200" in config
    assert "Runner.seed = 3" in config
    assert "MultiArmedBanditEnv.means = [0.2, 0.5, 0.9, 0.4]" in config
    metadata = json.loads((base_dir / "metadata.json").read_text())
    assert metadata["seed"] == "3"
    for package in ("tensorflow", "gymnasium", "gin-config"):
        assert metadata[package] == importlib.metadata.version(package), package


def test_run_leaves_a_complete_checkpoint(finished_run):
    base_dir, _ = finished_run
    assert complete_steps(base_dir)[0] == 200
    marker = json.loads((base_dir / "checkpoints" / "ckpt-200.complete").read_text())
    assert marker["step"] == 200
    assert marker["files"], marker


def test_run_log_names_the_folder_and_shows_progress(finished_run):
    base_dir, result = finished_run
    assert f"Run folder: {base_dir}" in result.stderr, result.explain()
    assert "step 50/200" in result.stderr, result.explain()
    assert "step 200/200" in result.stderr, result.explain()


# ----- resuming ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resumed_run(finished_run, tmp_path_factory):
    """The finished run, copied (the original stays as it was) and continued to 400 steps."""
    base_dir = tmp_path_factory.mktemp("resumed") / "run"
    shutil.copytree(finished_run[0], base_dir)
    result = run_cli(
        BANDIT,
        *bindings("Runner.num_steps = 400", *TINY),
        f"--base_dir={base_dir}",
        "--seed=3",
    )
    assert result.returncode == 0, result.explain()
    return base_dir, result


def test_resume_continues_from_the_last_checkpoint(resumed_run):
    base_dir, result = resumed_run
    assert "Resumed from" in result.stderr, result.explain()
    assert "at environment step 200." in result.stderr, result.explain()
    assert "step 50/400" not in result.stderr, result.explain()  # the first 200 are not redone
    assert "step 400/400" in result.stderr, result.explain()
    assert complete_steps(base_dir)[0] == 400


def test_resume_keeps_curves_continuous(resumed_run):
    base_dir, _ = resumed_run
    scalars = read_scalars(str(base_dir))
    assert [step for step, _ in scalars["eval/episode_return"]] == [100, 200, 300, 400]
    assert [step for step, _ in scalars["train/loss"]] == [50 * i for i in range(1, 9)]
    assert [step for step, _ in scalars["train/episode_return"]] == list(range(1, 401))
    assert_no_step_twice(scalars)


# ----- bad input -----------------------------------------------------------------------------


BAD_INPUTS = {
    "typo_parameter": (
        [BANDIT, *bindings("Runner.num_stepz = 5")],
        ["'num_stepz'", "Did you mean 'num_steps'"],
    ),
    "unknown_configurable": (
        [BANDIT, *bindings("Runnr.num_steps = 5")],
        ["'Runnr'", "Did you mean 'Runner'"],
    ),
    "unknown_environment": (
        [BANDIT, *bindings("make_env.env_id = 'CartPol-v1'")],
        ["'CartPol-v1'", "'CartPole-v1'"],
    ),
    "missing_gin_file": (
        ["--gin_file=gin_configs/nope.gin"],
        ["'gin_configs/nope.gin' does not exist", "reinforce/bandit.gin"],
    ),
}


@pytest.mark.parametrize(
    ("case", "dry_run"),
    [
        *((case, False) for case in BAD_INPUTS),
        ("typo_parameter", True),
        ("unknown_environment", True),
    ],
)
def test_bad_input_fails_with_one_paragraph_and_writes_nothing(case, dry_run, tmp_path):
    args, culprits = BAD_INPUTS[case]
    base_dir = tmp_path / "run"
    result = run_cli(*args, f"--base_dir={base_dir}", *(["--dry_run"] if dry_run else []))
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    for culprit in culprits:
        assert culprit in message, result.explain()
    assert result.stdout == "", result.explain()  # a dry run prints no config either
    assert not base_dir.exists()


# ----- dry runs and unused bindings -----------------------------------------------------------


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """A good config named inside the gin_configs package, with two bindings nothing reads."""
    base_dir = tmp_path_factory.mktemp("dry") / "run"
    result = run_cli(
        "--gin_file=reinforce/bandit.gin",
        *bindings("DQNAgent.batch_size = 32", "eval/Runner.num_steps = 5"),
        f"--base_dir={base_dir}",
        "--dry_run",
    )
    return base_dir, result


def test_dry_run_prints_config_and_writes_nothing(dry_run):
    base_dir, result = dry_run
    assert result.returncode == 0, result.explain()
    assert "Runner.num_steps = 3000" in result.stdout, result.explain()
    assert "MultiArmedBanditEnv.means = [0.2, 0.5, 0.9, 0.4]" in result.stdout
    assert not base_dir.exists()
    assert "Run folder" not in result.stderr, result.explain()


def test_dry_run_warns_about_unused_bindings_by_name(dry_run):
    _, result = dry_run
    warnings = [line for line in result.stderr.splitlines() if "never used" in line]
    assert any("DQNAgent.batch_size" in line for line in warnings), result.explain()
    assert any("eval/Runner.num_steps" in line for line in warnings), result.explain()
    assert len(warnings) == 2, result.explain()  # the bindings that are used are not reported


def test_strict_fails_on_an_unused_binding(tmp_path):
    base_dir = tmp_path / "run"
    result = run_cli(
        BANDIT,
        *bindings("Runner.num_steps = 10", "DQNAgent.batch_size = 32"),
        f"--base_dir={base_dir}",
        "--strict",
    )
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    assert "--strict" in message and "DQNAgent.batch_size" in message, message
    assert not base_dir.exists()


@pytest.mark.xfail(
    strict=True,
    reason="experiments/run.py DEFAULT_GIN_FILE names gin_configs/dqn/cartpole.gin, which does "
    "not exist (only dqn/cartpole_rlzoo.gin does), so running with no flags fails",
)
def test_no_flags_uses_the_default_config():
    result = run_cli("--dry_run")
    assert result.returncode == 0, result.explain()
    assert "DQNAgent" in result.stdout and "CartPole-v1" in result.stdout, result.explain()


# ----- non-finite updates --------------------------------------------------------------------


def test_nonfinite_loss_stops_at_the_step_and_names_the_last_good_checkpoint(tmp_path):
    base_dir = tmp_path / "run"
    result = run_cli(*DIVERGING, *bindings("Runner.num_steps = 100"), f"--base_dir={base_dir}")
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    failure = re.search(r"Non-finite (loss|gradient) at environment step (\d+)", message)
    assert failure, message
    failing_step = int(failure.group(2))
    steps = complete_steps(base_dir)
    assert steps, f"the run diverged at step {failing_step}, before any checkpoint"
    assert steps[0] < failing_step
    assert f"last good checkpoint is at step {steps[0]} in {base_dir / 'checkpoints'}" in message
    assert not glob.glob(str(base_dir / "checkpoints" / f"ckpt-{failing_step}.*"))
    assert_checkpoint_finite(base_dir, steps[0])


def test_skipping_nonfinite_updates_finishes_and_counts_them(tmp_path):
    base_dir = tmp_path / "run"
    result = run_cli(
        *DIVERGING,
        *bindings("Runner.num_steps = 60", "Runner.skip_nonfinite_updates = True"),
        f"--base_dir={base_dir}",
    )
    assert result.returncode == 0, result.explain()
    scalars = read_scalars(str(base_dir))
    assert final_value(scalars, "train/skipped_nonfinite_steps") > 0, scalars
    assert complete_steps(base_dir)[0] == 60
    assert_checkpoint_finite(base_dir, 60)  # skipped updates were never applied
