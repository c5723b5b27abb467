"""Command-line tests for experiments/run.py: a real run, resume, bad input, dry runs, NaNs.

Every test runs `python -m experiments.run` in a subprocess, as a user would. Each invocation
pays ~4 s of TensorFlow import, so the runs are tiny (200 bandit pulls), each is made once and
shared between the tests that read it, and all 13 start in the background as soon as the first
test asks for one (as many at a time as there are CPUs, at least 2).
"""

import concurrent.futures
import dataclasses
import glob
import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from framework.parts.networks import mlp
from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import final_value, read_scalars, read_tags
from tests.experiments.cli import assert_no_step_twice, steps_of

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BANDIT = "--gin_file=gin_configs/reinforce/bandit.gin"
ERROR_PREFIX = "experiments.run: error:"


def bindings(*lines: str) -> tuple[str, ...]:
    return tuple(f"--gin_bindings={line}" for line in lines)


# A tiny bandit run: logs every 50 pulls, evaluates and checkpoints every 100.
TINY = bindings(
    "Runner.eval_interval = 100",
    "Runner.checkpoint_interval = 100",
    "Runner.log_interval = 50",
    "Runner.histogram_interval = 100",
    "Runner.eval_episodes = 3",
)

MEANS = bindings("MultiArmedBanditEnv.means = [0.1, 0.3, 0.8, 0.6]")  # 4 arms: policy/prob_0..3

# REINFORCE with a learned baseline fitted by plain SGD at learning rate 10: the least-squares
# fit of V overshoots by a growing factor every update, so |G - V| grows geometrically until the
# squared error overflows float32 (around step 20 for seed 0). Checkpoints every 5 pulls leave
# good checkpoints before that.
DIVERGING = (
    BANDIT,
    *bindings(
        "ReinforceAgent.use_baseline = True",
        "ReinforceAgent.optimizer = @optimizers.SGD()",
        "optimizers.SGD.learning_rate = 10.0",
        "Runner.checkpoint_interval = 5",
        "Runner.eval_interval = 60",
        "Runner.eval_episodes = 1",
        "Runner.histogram_interval = 60",
    ),
    "--seed=0",
)

# Bad input: the arguments, and what the error message must name.
BAD_INPUTS = {
    "typo_parameter": (
        (BANDIT, *bindings("Runner.num_stepz = 5")),
        ["'num_stepz'", "Did you mean 'num_steps'"],
    ),
    "unknown_configurable": (
        (BANDIT, *bindings("Runnr.num_steps = 5")),
        ["'Runnr'", "Did you mean 'Runner'"],
    ),
    "unknown_environment": (
        (BANDIT, *bindings("make_env.env_id = 'CartPol-v1'")),
        ["'CartPol-v1'", "'CartPole-v1'"],
    ),
    "missing_gin_file": (
        ("--gin_file=gin_configs/nope.gin",),
        ["'gin_configs/nope.gin' does not exist", "reinforce/bandit.gin"],
    ),
}
# Each without --dry_run, and two with it (a parse error, and one raised building the parts).
BAD_CASES = [
    ("typo_parameter", False),
    ("unknown_configurable", False),
    ("unknown_environment", False),
    ("missing_gin_file", False),
    ("typo_parameter", True),
    ("unknown_environment", True),
]


def bad_name(case: str, dry_run: bool) -> str:
    return f"bad_{case}{'_dry_run' if dry_run else ''}"


@dataclasses.dataclass(frozen=True)
class Invocation:
    args: tuple[str, ...]
    resumes: str | None = None  # runs in a copy of this invocation's folder, once it finished


# Longest first: they start in this order.
INVOCATIONS = {
    "bandit": Invocation((BANDIT, *bindings("Runner.num_steps = 200"), *TINY, *MEANS, "--seed=3")),
    "diverging": Invocation(
        (*DIVERGING, *bindings("Runner.num_steps = 100", "Runner.log_interval = 30"))
    ),
    # Diverges around pull 20; one log at 60, so the skipped fraction there is about 2/3.
    "skipping": Invocation(
        (
            *DIVERGING,
            *bindings(
                "Runner.num_steps = 60",
                "Runner.skip_nonfinite_updates = True",
                "Runner.log_interval = 100",
                "tf_threads.intra_op = 1",  # TensorFlow's pools, sized by the config
                "tf_threads.inter_op = 1",
            ),
        )
    ),
    # Logs every 30 pulls: the interval (30, 60] is skipped entirely.
    "skipping_everything": Invocation(
        (
            *DIVERGING,
            *bindings(
                "Runner.num_steps = 100",
                "Runner.skip_nonfinite_updates = True",
                "Runner.log_interval = 30",
            ),
        )
    ),
    "resumed": Invocation(
        (BANDIT, *bindings("Runner.num_steps = 400"), *TINY, *MEANS, "--seed=3"),
        resumes="bandit",
    ),
    # A good config named inside the gin_configs package, with two bindings nothing reads.
    "dry_run": Invocation(
        (
            "--gin_file=reinforce/bandit.gin",
            *bindings(
                "Runner.num_steps = 123",
                "ReplaySchedule.batch_size = 32",
                "eval/Runner.num_steps = 5",
            ),
            "--dry_run",
        )
    ),
    "strict": Invocation(
        (BANDIT, *bindings("Runner.num_steps = 10", "ReplaySchedule.batch_size = 32"), "--strict")
    ),
    "default": Invocation(("--dry_run",)),
    **{
        bad_name(case, dry_run): Invocation(
            (*BAD_INPUTS[case][0], *(("--dry_run",) if dry_run else ()))
        )
        for case, dry_run in BAD_CASES
    },
}


@dataclasses.dataclass
class Result:
    base_dir: pathlib.Path
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


class Invocations:
    """Runs every invocation in the background; `[name]` waits for one and returns its Result."""

    def __init__(self, root: pathlib.Path):
        self._root = root
        workers = min(len(INVOCATIONS), max(2, os.cpu_count() or 1))
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        # The queue is first in, first out: a resumed run's source starts before it does.
        self._futures: dict[str, concurrent.futures.Future] = {}
        for name in INVOCATIONS:
            self._futures[name] = self._pool.submit(self._run, name)

    def _run(self, name: str) -> Result:
        invocation = INVOCATIONS[name]
        base_dir = self._root / name / "run"  # does not exist: the CLI must create it
        base_dir.parent.mkdir()
        if invocation.resumes:
            source = self[invocation.resumes]
            assert source.returncode == 0, source.explain()
            shutil.copytree(source.base_dir, base_dir)  # the source stays as it finished
        completed = subprocess.run(
            [sys.executable, "-m", "experiments.run", *invocation.args, f"--base_dir={base_dir}"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return Result(base_dir, completed.returncode, completed.stdout, completed.stderr)

    def __getitem__(self, name: str) -> Result:
        return self._futures[name].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    invocations = Invocations(tmp_path_factory.mktemp("cli"))
    yield invocations
    invocations.close()


def completed(cli: Invocations, name: str) -> Result:
    result = cli[name]
    assert result.returncode == 0, result.explain()
    return result


def checkpoint_steps(base_dir: pathlib.Path) -> list[int]:
    return complete_steps(str(base_dir / "checkpoints"))


def assert_checkpoint_finite(base_dir: pathlib.Path, step: int) -> None:
    reader = tf.train.load_checkpoint(str(base_dir / "checkpoints" / f"ckpt-{step}"))
    for name in reader.get_variable_to_shape_map():
        value = np.asarray(reader.get_tensor(name))
        if np.issubdtype(value.dtype, np.floating):
            assert np.all(np.isfinite(value)), f"ckpt-{step}: {name} is not finite"


# ----- a finished run ------------------------------------------------------------------------


def test_run_logs_every_promised_tag(cli):
    tags = read_tags(str(completed(cli, "bandit").base_dir))
    expected = {
        "train/episode_return",
        "train/episode_length",
        "eval/episode_return",
        "train/loss",
        "train/grad_norm",
        "train/learning_rate",
        "train/steps_per_second",
        "policy/entropy_at_observation",
        *(f"policy/prob_{arm}" for arm in range(4)),
        "config",
        "metadata",
        "_hparams_/session_start_info",  # the run's bindings, for TensorBoard's HParams view
    }
    assert expected <= tags, f"missing: {sorted(expected - tags)}"
    assert any(tag.startswith("weights/") for tag in tags), sorted(tags)


def test_run_logs_at_the_configured_steps(cli):
    scalars = read_scalars(str(completed(cli, "bandit").base_dir))
    assert steps_of(scalars, "eval/episode_return") == [100, 200]
    assert steps_of(scalars, "train/loss") == [50, 100, 150, 200]
    # One pull per episode: an episode return at every step.
    assert steps_of(scalars, "train/episode_return") == list(range(1, 201))
    assert_no_step_twice(scalars)


def test_run_writes_config_and_metadata(cli):
    base_dir = completed(cli, "bandit").base_dir
    config = (base_dir / "config.gin").read_text()
    assert "Runner.num_steps = 200" in config
    assert "Runner.seed = 3" in config
    assert "MultiArmedBanditEnv.means = [0.1, 0.3, 0.8, 0.6]" in config
    metadata = json.loads((base_dir / "metadata.json").read_text())["starts"][-1]
    assert str(metadata["seed"]) == "3"
    for package in ("tensorflow", "gymnasium", "gin-config"):
        assert metadata[package] == importlib.metadata.version(package), package
    # What its speed depends on: TensorFlow's thread counts and the variables that set them.
    assert metadata["tf_intra_op_threads"].split()[0].isdigit()
    assert metadata["XLA_FLAGS"] == os.environ.get("XLA_FLAGS", "unset")


def test_run_leaves_a_complete_checkpoint(cli):
    base_dir = completed(cli, "bandit").base_dir
    assert checkpoint_steps(base_dir)[0] == 200
    marker = json.loads((base_dir / "checkpoints" / "ckpt-200.complete").read_text())
    assert marker["step"] == 200
    assert marker["files"], marker


def test_run_log_names_the_folder_and_shows_progress(cli):
    result = completed(cli, "bandit")
    assert f"Run folder: {result.base_dir}" in result.stderr, result.explain()
    assert "step 50/200" in result.stderr, result.explain()
    assert "step 200/200" in result.stderr, result.explain()
    assert "eval at step 100: return" in result.stderr, result.explain()
    assert "Done: final eval return" in result.stderr, result.explain()
    # No TensorFlow chatter: start-up banners, or a line per checkpoint from its saver.
    assert "Sharding callback" not in result.stderr, result.explain()
    assert "oneDNN" not in result.stderr and "cuda" not in result.stderr.lower(), result.explain()


# ----- resuming (a copy of the finished run, continued to 400 steps) --------------------------


def test_resume_continues_from_the_last_checkpoint(cli):
    result = completed(cli, "resumed")
    resumed = re.search(r"Resumed from (\S+) at environment step (\d+)\b", result.stderr)
    assert resumed, result.explain()
    assert resumed.groups() == (str(result.base_dir / "checkpoints"), "200"), result.explain()
    assert "step 50/400" not in result.stderr, result.explain()  # the first 200 are not redone
    assert "step 250/400" in result.stderr, result.explain()
    assert "step 400/400" in result.stderr, result.explain()
    assert checkpoint_steps(result.base_dir)[0] == 400


def test_resume_keeps_curves_continuous(cli):
    scalars = read_scalars(str(completed(cli, "resumed").base_dir))
    assert steps_of(scalars, "eval/episode_return") == [100, 200, 300, 400]
    assert steps_of(scalars, "train/loss") == [50 * i for i in range(1, 9)]
    assert steps_of(scalars, "train/episode_return") == list(range(1, 401))
    assert_no_step_twice(scalars)


# ----- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "dry_run"), BAD_CASES)
def test_bad_input_fails_with_one_paragraph_and_writes_nothing(cli, case, dry_run):
    result = cli[bad_name(case, dry_run)]
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    for culprit in BAD_INPUTS[case][1]:
        assert culprit in message, result.explain()
    assert result.stdout == "", result.explain()  # a dry run prints no config either
    assert not result.base_dir.exists()


# ----- dry runs and unused bindings -----------------------------------------------------------


def test_dry_run_prints_config_and_writes_nothing(cli):
    result = completed(cli, "dry_run")
    assert "Runner.num_steps = 123" in result.stdout, result.explain()
    assert "make_env.env_id = 'MultiArmedBandit-v0'" in result.stdout, result.explain()
    assert "Run folder" not in result.stderr, result.explain()
    assert not result.base_dir.exists()


def test_dry_run_warns_about_unused_bindings_by_name(cli):
    result = completed(cli, "dry_run")
    warnings = [line for line in result.stderr.splitlines() if "never used" in line]
    assert any("ReplaySchedule.batch_size" in line for line in warnings), result.explain()
    assert any("eval/Runner.num_steps" in line for line in warnings), result.explain()
    assert len(warnings) == 2, result.explain()  # the bindings that are used are not reported


def test_strict_fails_on_an_unused_binding(cli):
    result = cli["strict"]
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    assert "--strict" in message and "ReplaySchedule.batch_size" in message, message
    assert not result.base_dir.exists()


def test_no_flags_builds_the_default_config(cli):
    result = completed(cli, "default")
    assert "Runner.agent = @DQNAgent" in result.stdout, result.explain()
    assert "make_env.env_id = 'CartPole-v1'" in result.stdout, result.explain()


def test_dry_run_says_the_spaces_and_each_networks_parameters(cli):
    built = completed(cli, "default").stdout.split("\n# Observation space: ")[1].splitlines()
    assert built[0].startswith("Box(") and built[0].endswith(", (4,), float32)"), built
    # The default MLP on CartPole: 4 inputs, two hidden layers of 256 units, 2 Q-values.
    parameters = (4 * 256 + 256) + (256 * 256 + 256) + (256 * 2 + 2)
    online = mlp((4,), 2, hidden_units=(256, 256))
    assert online.count_params() == parameters == 67_586
    assert built[1:] == [
        "# Action space: Discrete(2)",
        "# Network agent.online: 67,586 parameters",
        "# Network agent.target: 67,586 parameters",
    ]


# ----- non-finite updates --------------------------------------------------------------------


def test_nonfinite_loss_stops_at_the_step_and_names_the_last_good_checkpoint(cli):
    result = cli["diverging"]
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    failure = re.search(r"Non-finite (loss|gradient) at environment step (\d+)", message)
    assert failure, message
    failing_step = int(failure.group(2))
    steps = checkpoint_steps(result.base_dir)
    assert steps, f"the run diverged at step {failing_step}, before any checkpoint"
    assert steps[0] < failing_step
    checkpoints = result.base_dir / "checkpoints"
    assert f"last good checkpoint is at step {steps[0]} in {checkpoints}" in message
    assert not glob.glob(str(checkpoints / f"ckpt-{failing_step}.*"))
    assert_checkpoint_finite(result.base_dir, steps[0])


def test_skipping_nonfinite_updates_finishes_and_counts_them(cli):
    result = completed(cli, "skipping")
    scalars = read_scalars(str(result.base_dir))
    skipped = final_value(scalars, "train/skipped_nonfinite_steps")
    assert 0 < skipped < 60, scalars
    assert checkpoint_steps(result.base_dir)[0] == 60
    assert_checkpoint_finite(result.base_dir, 60)  # skipped updates were never applied
    # The loss logged at 60 is the last finite update's, not a skipped step's zero.
    loss = final_value(scalars, "train/loss")
    assert np.isfinite(loss) and loss != 0.0, scalars["train/loss"]


def test_a_config_sizes_tensorflows_thread_pools_and_the_metadata_says_so(cli):
    base_dir = completed(cli, "skipping").base_dir
    metadata = json.loads((base_dir / "metadata.json").read_text())["starts"][-1]
    assert (metadata["tf_intra_op_threads"], metadata["tf_inter_op_threads"]) == ("1", "1")


def test_a_run_that_skips_a_whole_log_interval_stops(cli):
    result = cli["skipping_everything"]
    assert result.returncode == 1, result.explain()
    message = result.error_message()
    assert re.search(
        r"(\d+) of the \1 gradient steps in the log interval up to environment "
        r"step 60 had a NaN or inf",
        message,
    ), message
    assert "Runner.max_skipped_fraction = 1.0" in message and "none of them was applied" in message
    assert checkpoint_steps(result.base_dir) and checkpoint_steps(result.base_dir)[0] < 60


def test_the_console_script_trains(tmp_path):
    """`rlframe-run` imports experiments.run as a module, which must not shadow what it calls."""
    script = shutil.which("rlframe-run", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the package's console script is not installed beside this interpreter")
    completed = subprocess.run(
        [
            script,
            "--gin_file=gin_configs/reinforce/bandit.gin",
            "--gin_bindings=Runner.num_steps = 50",
            "--gin_bindings=Runner.eval_interval = 50",
            f"--base_dir={tmp_path / 'run'}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert complete_steps(str(tmp_path / "run" / "checkpoints")) == [50]
