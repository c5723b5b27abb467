"""A new user's setup: the package installed non-editably, started outside the repository.

Gin resolves a relative `include` against the working directory first; these tests check that
shipped and user gin files still find their includes from any folder and from site-packages.
"""

import glob
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import gin
import pytest

import agents  # noqa: F401  (these two register the configurables cartpole_common.gin binds)
import framework.runner  # noqa: F401
import gin_configs
from framework import config

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# What `pip install .` reads: the build files and every package setup.cfg lists.
SOURCES = (
    "pyproject.toml",
    "setup.cfg",
    "README.md",
    "agents",
    "experiments",
    "framework",
    "gin_configs",
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> pathlib.Path:
    """A fresh venv's python with rlframe installed as `pip install .` would, without downloads.

    The venv sees this interpreter's packages through a plain path in a .pth file, so their own
    .pth files (this checkout's editable-install finder among them) never run. The sources are
    copied first: building in the repository would write build/ into other people's checkout.
    """
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__")
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shared = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    pathlib.Path(site, "rlframe_dependencies.pth").write_text("\n".join(shared) + "\n")
    # --ignore-installed: pip sees this checkout's editable rlframe and must not uninstall it.
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps"]
    pip += ["--no-build-isolation", "--no-index", "--ignore-installed", "--quiet", source]
    subprocess.run(pip, check=True, capture_output=True)
    return python


def _run_outside(
    python: pathlib.Path, cwd: pathlib.Path, *args: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Runs in `cwd`, away from the repository, with no PYTHONPATH that could lead back to it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_installed_package_imports_from_site_packages(installed, tmp_path):
    code = "import framework, gin_configs; print(framework.__file__, gin_configs.__file__)"
    result = _run_outside(installed, tmp_path, "-c", code, timeout=60)
    assert result.returncode == 0, result.stderr
    venv = installed.parents[1]
    for path in map(pathlib.Path, result.stdout.split()):
        assert path.is_relative_to(venv) and not path.is_relative_to(REPO_ROOT), path


def test_default_config_trains_from_a_non_editable_install(installed, tmp_path):
    """No --gin_file: the default config includes another shipped file from site-packages."""
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    bindings = (
        "Runner.num_steps=300",
        "Runner.eval_interval=300",
        "Runner.eval_episodes=1",
        "ReplaySchedule.learning_starts=100",
    )
    args = ["-m", "experiments.run", f"--base_dir={tmp_path / 'run'}"]
    args += [f"--gin_bindings={binding}" for binding in bindings]
    result = _run_outside(installed, workdir, *args, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert glob.glob(str(tmp_path / "run" / "checkpoints" / "ckpt-*.complete"))


def test_include_resolves_from_another_working_directory(tmp_path, monkeypatch):
    mine = tmp_path / "configs" / "mine.gin"
    mine.parent.mkdir()
    mine.write_text("include 'gin_configs/dqn/cartpole_common.gin'\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    search_paths = list(gin.config._LOCATION_PREFIXES)

    config.parse([str(mine)], [])

    assert gin.query_parameter("make_env.env_id") == "CartPole-v1"
    assert search_paths == gin.config._LOCATION_PREFIXES  # nothing piles up across parses


def test_missing_include_names_it_and_where_it_looked(tmp_path, monkeypatch):
    mine = tmp_path / "mine.gin"
    mine.write_text("include 'gin_configs/dqn/no_such_file.gin'\n")
    monkeypatch.chdir(tmp_path)

    with pytest.raises(config.ConfigError) as error:
        config.parse([str(mine)], [])

    message = str(error.value)
    assert "'gin_configs/dqn/no_such_file.gin'" in message
    assert repr(str(pathlib.Path(gin_configs.__file__).parents[1])) in message  # where it looked
    assert "NoneType" not in message and "\n" not in message
