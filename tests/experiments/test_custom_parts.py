"""A part of your own (README): a module beside your gin file, imported by the file's
`import` line, from another working folder: the command line trains with it (the console script
parses as it does), `experiments.train` does, the parts catalogue lists and shows it
(`--gin_file`), and an asynchronous driver's spawned worker builds its agent from it."""

import os
import re
import subprocess
import sys

import pytest

import experiments
from experiments import parts
from tests.experiments import cli

MY_PARTS = '''"""Parts of the user's own, beside the gin files that import them."""

import gin
import tensorflow as tf

from agents.a2c import A2CAgent
from framework.parts import networks


@gin.configurable
class ScaledTDMSELoss:
    """Mean squared TD error, scaled by `scale`. It runs in the learner's compiled step."""

    def __init__(self, scale=1.0):
        self.scale = scale

    def __call__(self, q, targets):
        error = q - tf.stop_gradient(targets)
        return self.scale * tf.reduce_mean(error**2), {}


@gin.configurable
def tiny_mlp(input_shape, num_outputs):
    """The bandit's network, built by the user's own function."""
    return networks.mlp(input_shape, num_outputs)


@gin.configurable
class MyA2C(A2CAgent):
    """A2C as an agent class of the user's own."""
'''

BANDIT = """import my_parts
include 'gin_configs/reinforce/bandit.gin'
ReinforceAgent.network = @tiny_mlp
"""

# A3C in one spawned worker process: its agent class and its value loss are the user's.
A3C = """import my_parts
include 'gin_configs/a3c/cartpole.gin'
Runner.agent = @MyA2C
MyA2C.value_loss = @ScaledTDMSELoss()
ScaledTDMSELoss.scale = 0.5
AsynchronousDriver.backend = @Processes
AsynchronousDriver.num_workers = 1
A2CAgent.gradient_processor = @ClipByGlobalNorm()  # built by the worker alone, in its process
ClipByGlobalNorm.max_norm = 0.25
"""

SHORT = ["Runner.num_steps = 200", "Runner.eval_interval = 200", "Runner.eval_episodes = 2"]


@pytest.fixture(scope="module")
def mine(tmp_path_factory):
    """The user's folder (my_parts.py and gin files) and another to work in."""
    root = tmp_path_factory.mktemp("custom_parts")
    (root / "mine").mkdir()
    (root / "elsewhere").mkdir()
    (root / "mine" / "my_parts.py").write_text(MY_PARTS)
    (root / "mine" / "bandit.gin").write_text(BANDIT)
    (root / "mine" / "a3c.gin").write_text(A3C)
    return root


def _start(mine, *args: str) -> subprocess.Popen:
    """A command in the other folder, with this checkout's code (not an installed copy's)."""
    environment = {**os.environ, "PYTHONPATH": cli.REPO_ROOT}
    return subprocess.Popen(
        args,
        cwd=mine / "elsewhere",
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_command_line_and_the_catalogue_find_a_part_beside_the_gin_file(mine):
    gin_file = f"--gin_file={mine / 'mine' / 'bandit.gin'}"
    bindings = [f"--gin_bindings={binding}" for binding in SHORT]
    run = [sys.executable, "-m", "experiments.run", gin_file, *bindings]
    training = _start(mine, *run, f"--base_dir={mine / 'cli_run'}")
    catalogue = _start(mine, sys.executable, "-m", "experiments.parts", gin_file, "tiny_mlp")

    out, err = catalogue.communicate(timeout=240)
    assert catalogue.returncode == 0, err
    assert out.startswith("tiny_mlp  (your parts, from the modules your gin files import)\n")
    assert "The bandit's network, built by the user's own function." in out
    _, err = training.communicate(timeout=240)
    assert training.returncode == 0, err[-3000:]
    written = (mine / "cli_run" / "config.gin").read_text()
    assert (
        written.startswith("import my_parts\n") and "ReinforceAgent.network = @tiny_mlp" in written
    )
    assert "resource_reader" not in err  # gin's probes for the package-form include


def test_experiments_train_and_a_spawned_worker_build_a_part_beside_the_gin_file(mine, monkeypatch):
    monkeypatch.chdir(mine / "elsewhere")

    # --strict: a binding only the spawned worker reads counts as read.
    result = experiments.train(
        [str(mine / "mine" / "a3c.gin")], SHORT, str(mine / "a3c_run"), strict=True
    )

    assert result.env_steps == 200 and len(result.eval_returns) == 1
    agent = result.runner.agent
    assert type(agent).__name__ == "MyA2C" and agent.loss.value_loss.scale == 0.5
    # Its one worker ran in a spawned process, which built MyA2C and its loss from my_parts.
    assert type(result.runner.driver.backend).__name__ == "Processes"
    (worker,) = result.runner.driver.worker_descriptions
    assert "max_norm=0.25" in worker["gradient_processor"]


def test_the_catalogue_lists_the_parts_of_what_the_gin_file_imports(mine, monkeypatch):
    monkeypatch.chdir(mine / "elsewhere")

    yours = parts.import_gin_files([str(mine / "mine" / "a3c.gin")])

    assert yours == ["my_parts"]
    listing = parts.catalogue(yours)
    section = listing.split("\nYour parts, from the modules your gin files import\n")[1]
    section = section.split("\n\n")[0]  # up to the next kind
    names = re.findall(r"^  (\S+) - ", section, re.M)
    assert names == ["MyA2C", "ScaledTDMSELoss", "tiny_mlp"]
    assert "  ScaledTDMSELoss - Mean squared TD error, scaled by `scale`.\n" in section
    assert "      scale=1.0\n" in section
    described = parts.describe("ScaledTDMSELoss", yours)
    assert "defined in: my_parts.ScaledTDMSELoss" in described
    with pytest.raises(parts.UnknownPartError, match=r"--gin_file=my_config\.gin"):
        parts.find("ScaledTDMSELos")
