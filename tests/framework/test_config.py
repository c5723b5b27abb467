"""Gin parsing (framework/config.py): a gin file's `import` from the file's own folder, the
snapshot a worker process parses, what an unknown parameter suggests, no log line for gin's
include probes, and integral floats read as the integers a count takes."""

import logging
import shlex
import sys

import gin
import pytest

import agents  # noqa: F401  (registers every agent's configurables)
from framework import config
from framework.parts.replay_schedule import ReplaySchedule
from framework.runner import Runner
from framework.storage.run_directory import RunDirectory

# Each test imports a module of its own name: a module imported once stays imported.
PART = '''
import gin


@gin.configurable
def {name}_part(scale=1.0):
    """A part of the user's own."""
    return scale
'''


def user_folder(tmp_path, name: str):
    """A folder holding module `name` (one part, `<name>_part`) and a gin file importing it;
    returns the gin file's path."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / f"{name}.py").write_text(PART.format(name=name))
    gin_file = folder / "my_config.gin"
    gin_file.write_text(f"import {name}\n{name}_part.scale = 0.5\n")
    return gin_file


def test_a_gin_files_import_finds_the_module_beside_it_from_another_folder(tmp_path, monkeypatch):
    gin_file = user_folder(tmp_path, "beside_the_gin_file")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    path = list(sys.path)

    config.parse([str(gin_file)], [])

    assert gin.query_parameter("beside_the_gin_file_part.scale") == 0.5
    assert sys.path == path  # the folder was on it while gin read the file only
    assert config.imported_modules() == ["beside_the_gin_file"]
    # A worker process (spawned, a Ray actor) gets the folder with the config to parse.
    snapshot = config.snapshot()
    assert "beside_the_gin_file" in snapshot.modules
    assert snapshot.folders == (str(gin_file.parent),)
    assert snapshot.text.startswith("import beside_the_gin_file\n")


def test_an_included_files_import_finds_the_module_beside_that_file(tmp_path, monkeypatch):
    included = user_folder(tmp_path, "beside_an_included_file")
    top = tmp_path / "top.gin"
    top.write_text(f"include '{included}'\n")
    monkeypatch.chdir(tmp_path)  # not the included file's folder

    config.parse([str(top)], [])

    assert gin.query_parameter("beside_an_included_file_part.scale") == 0.5


def test_a_runs_config_finds_its_modules_where_the_run_found_them(tmp_path):
    gin_file = user_folder(tmp_path, "where_the_run_found_it")
    run_config = tmp_path / "run" / "config.gin"  # what a run folder holds: not beside it
    run_config.parent.mkdir()
    run_config.write_text(gin_file.read_text())
    start = {
        "command": shlex.join(["python", "-m", "experiments.run", f"--gin_file={gin_file}"]),
        "working_folder": str(tmp_path / "elsewhere"),
    }
    folders = config.recorded_import_folders(start)
    assert folders == [str(gin_file.parent), str(tmp_path / "elsewhere")]
    with pytest.raises(ImportError, match="where_the_run_found_it"):
        config.parse([str(run_config)], [])
    gin.clear_config()

    config.parse([str(run_config)], [], import_folders=folders)

    assert gin.query_parameter("where_the_run_found_it_part.scale") == 0.5


def test_an_unknown_parameter_names_the_parts_that_take_it():
    with pytest.raises(config.ConfigError) as error:
        config.parse(["gin_configs/dqn/cartpole.gin"], ["DQNAgent.learning_rate = 0.01"])
    message = str(error.value)
    assert (
        "learning_rate is a parameter of other parts: optimizers.Adam.learning_rate (this config "
        "uses it), optimizers.FusedRMSprop.learning_rate, optimizers.RMSprop.learning_rate and "
        "3 more." in message  # SGD's, TorchAdam's and TorchRMSprop's, counted, not listed
    )
    assert "\n" not in message


def test_a_misspelt_or_moved_parameter_says_where_to_look():
    with pytest.raises(config.ConfigError) as error:
        config.parse(["gin_configs/dqn/cartpole.gin"], ["DQNAgent.gama = 0.9"])
    assert "Did you mean 'gamma'?" in str(error.value)
    # A replay agent's schedule is a part of its own, which the agent's name points to.
    with pytest.raises(config.ConfigError) as error:
        config.parse(["gin_configs/dqn/cartpole.gin"], ["DQNAgent.learning_starts = 100"])
    message = str(error.value)
    assert (
        "learning_starts is a parameter of other parts: ReplaySchedule.learning_starts (this "
        "config uses it)." in message
    )


def test_a_package_form_include_logs_no_probe(tmp_path, monkeypatch, caplog):
    """dqn/cartpole.gin includes 'gin_configs/dqn/cartpole_common.gin': from another folder gin
    tries it as a package path first, and its reader logs each try (INFO, and ERROR "Path not
    found" where it is no package); a missing include still gets its paragraph."""
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.DEBUG)

    config.parse(["gin_configs/dqn/cartpole.gin"], [])
    missing = tmp_path / "missing.gin"
    missing.write_text("include 'gin_configs/dqn/no_such_file.gin'\n")
    with pytest.raises(config.ConfigError, match=r"'gin_configs/dqn/no_such_file\.gin', which"):
        config.parse([str(missing)], [])

    assert not [r for r in caplog.records if r.pathname == gin.resource_reader.__file__]
    assert not logging.getLogger().filters  # only while parsing
    logging.getLogger().info("after parsing")
    assert caplog.records[-1].getMessage() == "after parsing"


def test_an_integral_float_is_read_as_the_integer_a_count_takes(tmp_path, caplog):
    """RL-Zoo writes counts as floats (`n_timesteps: !!float 1e5`): bound to a parameter that
    takes an integer, the part gets the integer, and the operative config records it."""
    caplog.set_level(logging.INFO)
    config.parse(
        ["gin_configs/dqn/cartpole.gin"],
        [
            "Runner.num_steps = 1e5",
            "BATCH = 64.0",
            "ReplaySchedule.batch_size = %BATCH",  # a field of a part built by reference
            "train/Runner.eval_interval = 2e3",  # scoped
            "ClipByGlobalNorm.max_norm = 5.0",  # a float parameter keeps its float
        ],
    )

    runner = Runner(RunDirectory(str(tmp_path)))
    runner.close()

    assert runner.num_steps == 100_000 and type(runner.num_steps) is int
    schedule = ReplaySchedule()
    assert schedule.batch_size == 64 and type(schedule.batch_size) is int
    scoped = gin.query_parameter("train/Runner.eval_interval")
    assert scoped == 2000 and type(scoped) is int
    assert gin.query_parameter("ClipByGlobalNorm.max_norm") == 5.0
    assert type(gin.query_parameter("ClipByGlobalNorm.max_norm")) is float
    operative = gin.operative_config_str()
    assert "Runner.num_steps = 100000\n" in operative
    assert "ReplaySchedule.batch_size = 64\n" in operative
    said = [r.getMessage() for r in caplog.records if "read as the integer" in r.getMessage()]
    assert sorted(said) == [
        "ReplaySchedule.batch_size = 64.0 read as the integer 64.",
        "Runner.num_steps = 100000.0 read as the integer 100000.",
        "train/Runner.eval_interval = 2000.0 read as the integer 2000.",
    ]


def test_a_float_with_a_fraction_is_still_refused_for_a_count():
    config.parse(["gin_configs/dqn/cartpole.gin"], ["ReplaySchedule.batch_size = 1.5"])

    with pytest.raises(
        ValueError,
        match=r"ReplaySchedule\.batch_size must be an integer >= 1, got 1\.5 \(float\)\.",
    ):
        ReplaySchedule()
