"""Sweeps on the bandit: run folders, the record, HParams, failures, re-runs, Ray, a killed driver.

Runs are tiny (a few hundred pulls); most of each run's seconds are its process importing TF.
"""

import glob
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tensorboard.plugins.hparams import plugin_data_pb2

from experiments import analyze, sweep, sweep_record
from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_events, read_scalars
from tests.experiments import cli

BANDIT = "gin_configs/reinforce/bandit.gin"
TINY = [
    "Runner.num_steps = 200",
    "Runner.eval_interval = 100",
    "Runner.eval_episodes = 5",
    "Runner.checkpoint_interval = 100",
    "Runner.log_interval = 50",
    "Runner.histogram_interval = 1000",
]
LEARNING_RATES = "optimizers.Adam.learning_rate=[0.01, 0.001]"


def _run(definition: sweep.Sweep, **kwargs) -> tuple[sweep.Sweep, str]:
    out = io.StringIO()
    sweep.run_sweep(definition, out=out, **kwargs)
    return definition, out.getvalue()


def _hparams(path_pattern: str) -> list[plugin_data_pb2.HParamsPluginData]:
    found = []
    for path in glob.glob(path_pattern):
        for event in read_events(path)[0]:
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "hparams":
                    content = value.metadata.plugin_data.content
                    found.append(plugin_data_pb2.HParamsPluginData.FromString(content))
    return found


def _starts(folder: str) -> list[dict]:
    with open(os.path.join(folder, "metadata.json")) as f:
        return json.load(f)["starts"]


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A finished 2 learning rates x 2 seeds sweep, run locally two at a time."""
    base_dir = tmp_path_factory.mktemp("grid")
    definition = sweep.define([BANDIT], TINY, [LEARNING_RATES], seeds=2, base_dir=str(base_dir))
    return _run(definition, parallel=2)[0]


def test_a_grid_sweep_makes_one_run_folder_per_trial_and_seed(grid):
    names = sorted(run["name"] for run in grid.runs)
    assert names == [
        "learning_rate=0.001_seed0",
        "learning_rate=0.001_seed1",
        "learning_rate=0.01_seed0",
        "learning_rate=0.01_seed1",
    ]
    with open(grid.record_path) as f:
        record = json.load(f)
    assert [run["status"] for run in record["runs"]] == ["finished"] * 4
    for run in record["runs"]:
        folder = os.path.join(grid.base_dir, run["name"])
        assert os.path.exists(os.path.join(folder, "config.gin"))  # an ordinary run folder
        with open(os.path.join(folder, "config.gin")) as f:
            assert f"Runner.seed = {run['seed']}" in f.read()
        eval_curve = read_scalars(folder)["eval/episode_return"]
        assert run["result"]["final_eval_return"] == pytest.approx(max(eval_curve)[1])
        assert run["result"]["eval_step"] == 200
    assert {t["trial"]: t["finished"] for t in record["trials"]} == {
        "learning_rate=0.01": 2,
        "learning_rate=0.001": 2,
    }


def test_the_sweep_declares_its_hparams_domains_and_each_run_its_values(grid):
    # In every run's folder: a folder of the sweep's own would be one more TensorBoard run.
    assert not glob.glob(os.path.join(grid.base_dir, "*tfevents*"))
    declared = [
        h.experiment
        for run in grid.runs
        for h in _hparams(os.path.join(grid.folder(run), "*tfevents*"))
        if h.HasField("experiment")
    ]
    assert len(declared) == len(grid.runs) and all(e == declared[0] for e in declared)
    experiment = declared[0]
    trial, info = experiment.hparam_infos
    assert trial.name == "trial"  # its trials' names, as the runs' folders have them
    assert [v.string_value for v in trial.domain_discrete.values] == [
        "learning_rate=0.001",
        "learning_rate=0.01",
    ]
    assert info.name == "Adam.learning_rate"  # the name the runs' own sessions use
    assert sorted(v.number_value for v in info.domain_discrete.values) == [0.001, 0.01]
    metrics = [m.name.tag for m in experiment.metric_infos]
    assert metrics == ["sweep/final_eval_return", "sweep/best_eval_return", "sweep/failed"]
    for run in grid.runs:
        folder = grid.folder(run)
        sessions = [
            h
            for h in _hparams(os.path.join(folder, "*tfevents*"))
            if h.session_start_info.group_name
        ]
        (start,) = sessions
        # Named after the trial's key, as single runs name theirs: the seeds group together.
        assert start.session_start_info.group_name == run["trial_key"]
        value = start.session_start_info.hparams["Adam.learning_rate"].number_value
        assert value == run["values"]["Adam.learning_rate"]
        assert start.session_start_info.hparams["trial"].string_value == run["trial"]
        scalars = read_scalars(folder)
        assert scalars["sweep/failed"] == [(200, 0.0)]
        assert scalars["sweep/final_eval_return"][0][1] == pytest.approx(
            run["result"]["final_eval_return"]
        )
    keys = {(run["trial"], run["trial_key"]) for run in grid.runs}
    assert len(keys) == len({key for _, key in keys}) == 2  # one key per trial, two trials


def test_the_analysis_table_matches_the_event_files(grid, tmp_path):
    result = analyze.analyze([grid.base_dir], str(tmp_path), threshold=0.5, reps=500)
    runs = result.runs_frame.set_index("folder")
    for run in grid.runs:
        folder = grid.folder(run)
        curve = sorted(read_scalars(folder)["eval/episode_return"])
        steps, values = np.array(curve).T
        row = runs.loc[folder]
        assert row["final_eval_return"] == pytest.approx(values[-1])
        assert row["best_eval_return"] == pytest.approx(values.max())
        assert run["result"]["mean_eval_return"] == pytest.approx(values.mean())  # ties' judge
        assert row["auc"] == pytest.approx(np.trapezoid(values, steps) / (steps[-1] - steps[0]))
        reached = steps[values >= 0.5]
        assert row["steps_to_threshold"] == (
            reached[0] if len(reached) else pytest.approx(np.nan, nan_ok=True)
        )
    trials = result.trials_frame.set_index("trial")
    for name in ("learning_rate=0.01", "learning_rate=0.001"):
        finals = [
            runs.loc[grid.folder(r), "final_eval_return"] for r in grid.runs if r["trial"] == name
        ]
        assert trials.loc[name, "seeds"] == 2
        assert trials.loc[name, "final_mean"] == pytest.approx(np.mean(finals))
        assert (
            trials.loc[name, "final_mean_low"]
            <= np.mean(finals)
            <= trials.loc[name, "final_mean_high"]
        )
    assert "learning_rate=0.01" in result.table
    for name in ("trials.csv", "runs.csv", "learning_curves.png", "comparison.png"):
        assert os.path.getsize(tmp_path / name) > 0
    assert glob.glob(str(tmp_path / "final_vs_Adam.learning_rate.png"))


def test_running_a_finished_sweep_again_trains_nothing(grid):
    before = {run["name"]: len(_starts(grid.folder(run))) for run in grid.runs}
    again = sweep.define([BANDIT], TINY, [LEARNING_RATES], seeds=2, base_dir=grid.base_dir)
    _, out = _run(again, parallel=2)
    assert "nothing to do" in out
    assert {run["name"]: len(_starts(again.folder(run))) for run in again.runs} == before
    assert [run["attempts"] for run in again.runs] == [1] * 4


def test_a_failing_trial_is_recorded_and_only_it_runs_again(tmp_path):
    bad = "Runner.eval_episodes=[5, -1]"  # -1 makes the Runner raise
    definition = sweep.define([BANDIT], TINY, [bad], seeds=1, base_dir=str(tmp_path))
    _, out = _run(definition, parallel=2)
    good, failed = definition.runs
    assert good["status"] == "finished" and good["error"] is None
    assert failed["status"] == "failed"
    assert "eval_episodes" in failed["error"] and "-1" in failed["error"]
    assert "1 failed" in out
    assert failed["name"] in sweep.failure_report(definition)
    # Its final metrics are in the dashboard all the same, with its session.
    scalars = read_scalars(definition.folder(failed))
    assert scalars["sweep/failed"] == [(0, 1.0)]
    assert np.isnan(scalars["sweep/final_eval_return"][0][1])
    hparams = _hparams(os.path.join(definition.folder(failed), "*tfevents*"))
    (start,) = [h for h in hparams if h.HasField("session_start_info")]
    assert start.session_start_info.hparams["Runner.eval_episodes"].string_value == "-1"  # an int

    again = sweep.define([BANDIT], TINY, [bad], seeds=1, base_dir=str(tmp_path))
    _, out = _run(again, parallel=2)
    assert "1 failed to retry" in out
    good, failed = again.runs
    assert (good["attempts"], failed["attempts"]) == (1, 2)
    assert len(_starts(again.folder(good))) == 1  # not started again
    assert failed["status"] == "failed"


def test_a_random_sweep_draws_the_same_trials_each_time(tmp_path):
    specs = [
        "optimizers.Adam.learning_rate=loguniform(1e-4, 1e-2)",
        "Runner.eval_episodes=randint(2, 6)",
    ]
    first = sweep.define([BANDIT], TINY, specs, seeds=2, base_dir=str(tmp_path), num_trials=3)
    second = sweep.define([BANDIT], TINY, specs, seeds=2, base_dir=str(tmp_path), num_trials=3)
    assert [r["bindings"] for r in first.runs] == [r["bindings"] for r in second.runs]
    assert len(first.runs) == 6 and len({r["trial"] for r in first.runs}) == 3
    for run in first.runs:
        assert 1e-4 <= run["values"]["Adam.learning_rate"] <= 1e-2
        assert run["values"]["Runner.eval_episodes"] in (2, 3, 4, 5)
    domains = {p.hparam: p.domain() for p in first.parameters}
    assert domains["Adam.learning_rate"] == {"type": "real", "min": 1e-4, "max": 1e-2}
    assert domains["Runner.eval_episodes"] == {"type": "int", "min": 2, "max": 5}
    # On the dashboard, integers as the runs' sessions hold them: as their digits.
    (summary,) = sweep_record._columns(first).value
    content = summary.metadata.plugin_data.content
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    declared = {info.name: info for info in experiment.hparam_infos}
    episodes = declared["Runner.eval_episodes"].domain_discrete.values
    assert [value.string_value for value in episodes] == ["2", "3", "4", "5"]
    assert declared["Adam.learning_rate"].domain_interval.min_value == 1e-4


def test_defining_a_sweep_logs_nothing_of_the_probe_that_names_its_columns(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    level = logging.getLogger("absl").level  # what earlier tests of the process left
    definition = sweep.define([BANDIT], TINY, [LEARNING_RATES], base_dir=str(tmp_path))
    assert definition.parameters[0].hparam == "Adam.learning_rate"  # still asked of the config
    assert "__sweep_probe__" not in caplog.text
    assert logging.getLogger("absl").level == level  # its level as it was


def test_the_summary_table_puts_the_best_first_and_ties_in_numeric_order(tmp_path):
    rates = "optimizers.Adam.learning_rate=[0.001, 0.01, 0.0003, 0.1]"
    definition = sweep.define([BANDIT], TINY, [rates], base_dir=str(tmp_path))
    objectives = {"0.001": 0.5, "0.01": 0.93333, "0.0003": 0.5, "0.1": None}
    for run in definition.runs:
        objective = objectives[run["trial"].split("=")[1]]
        run["status"] = "finished" if objective is not None else "failed"
        run["result"] = {"final_eval_return": objective}
    rows = sweep.summary_table(definition).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| learning_rate=0.01",
        "| learning_rate=0.0003",  # a tie at 0.5: 0.0003 before 0.001, as numbers
        "| learning_rate=0.001",
        "| learning_rate=0.1",  # failed: no objective, last
    ]
    assert rows[0].endswith("| 0.9333 |")  # four significant digits


def test_bad_sweep_flags_and_another_sweeps_folder_are_one_paragraph_errors(grid, tmp_path):
    with pytest.raises(sweep.RunError, match="is not 'binding=values'"):
        sweep.define([BANDIT], [], ["learning_rate 0.1"], base_dir=str(tmp_path))
    with pytest.raises(sweep.RunError, match="--num_trials"):
        sweep.define([BANDIT], [], ["optimizers.Adam.learning_rate=uniform(0, 1)"])
    with pytest.raises(sweep.RunError, match="holds a different sweep"):
        sweep.define([BANDIT], TINY, [LEARNING_RATES], seeds=3, base_dir=grid.base_dir)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    with pytest.raises(sweep.RunError, match="is a file, not a folder"):
        sweep.define([BANDIT], TINY, [LEARNING_RATES], base_dir=str(a_file))
    assert a_file.read_text() == "mine"
    definition = sweep.define([BANDIT], TINY, [LEARNING_RATES], base_dir=str(tmp_path / "new"))
    with pytest.raises(sweep.RunError, match="--parallel must be >= 1"):
        sweep.run_sweep(definition, parallel=0)
    assert not (tmp_path / "new").exists()


def test_a_run_whose_sweep_was_killed_says_so_in_its_log_not_a_traceback(caplog):
    import multiprocessing

    from experiments import trial

    receiving, sending = multiprocessing.Pipe(duplex=False)
    receiving.close()  # the driver is gone
    task = trial.Task("t", ("a.gin",), (), "/tmp/run", 0)
    trial.report(sending, {"status": trial.STATUS_INTERRUPTED}, task)
    assert "The sweep that started this run is gone" in caplog.text


def _assert_quiet_short_log(path: str) -> None:
    """A run's log: its progress, each line in the framework's short format, and nothing of
    TensorFlow's C++ start-up (CUDA probing, cuInit) or of gymnasium's checker."""
    with open(path) as f:
        lines = f.read().splitlines()
    assert any(" runner] step 200/200 | return (last 20 episodes) " in line for line in lines)
    for line in lines:
        assert re.match(r"[DIWEF] \d\d:\d\d:\d\d \S+\] ", line), (path, line)


def test_every_line_of_a_local_runs_log_is_in_the_short_format(grid):
    for run in grid.runs:
        _assert_quiet_short_log(grid.log_path(run))


def test_a_sweep_on_a_local_ray_instance(local_ray, tmp_path, caplog, monkeypatch, capfd):
    # Where Tune's results table warns when it finds no record of a trial's results.
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    monkeypatch.setattr(analysis, "handlers", [*analysis.handlers, caplog.handler])
    definition = sweep.define(
        [BANDIT],
        TINY,
        ["optimizers.Adam.learning_rate=[0.01, 0.001]"],
        seeds=1,
        base_dir=str(tmp_path),
    )
    _run(definition, parallel=2, backend="ray")
    assert [run["status"] for run in definition.runs] == ["finished", "finished"]
    for run in definition.runs:
        assert read_scalars(definition.folder(run))["eval/episode_return"]
    assert os.path.isdir(tmp_path / "ray_results")
    # Tune's own TensorBoard logger stayed off: the only event files are the sweep's and runs'.
    tune_events = glob.glob(str(tmp_path / "ray_results" / "**" / "*tfevents*"), recursive=True)
    assert tune_events == []
    # Tune's results table found its record of every trial: no "Failed to fetch metrics".
    assert "Failed to fetch metrics" not in caplog.text
    for run in definition.runs:
        _assert_quiet_short_log(definition.log_path(run))
    # Ray's own lines (Tune's experiment table, its logger's INFO) are in Ray's log, not on
    # the console, which keeps the sweep's lines.
    console = "".join(capfd.readouterr())
    with open(tmp_path / "ray_results" / "ray.log") as f:
        ray_log = f.read()
    for line in ("Configuration for experiment", "Wrote the latest version of all result files"):
        assert line in ray_log and line not in console, (line, console)


def test_a_killed_driver_then_the_same_command_completes_every_run_exactly_once(tmp_path):
    base_dir = tmp_path / "sweep"
    bindings = [b for b in TINY if not b.startswith("Runner.num_steps")] + [
        "Runner.num_steps = 400"
    ]
    command = [
        sys.executable,
        "-m",
        "experiments.sweep",
        f"--gin_file={BANDIT}",
        "--sweep=optimizers.Adam.learning_rate=[0.01]",
        "--seeds=2",
        "--parallel=1",  # seed 0 finishes, then seed 1 is killed after a checkpoint
        f"--base_dir={base_dir}",
        *[f"--gin_bindings={b}" for b in bindings],
    ]
    driver = subprocess.Popen(
        command,
        cwd=cli.REPO_ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    record = base_dir / "sweep.json"
    deadline = time.monotonic() + 240
    while True:  # until one run is finished and another is running with a checkpoint
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the sweep never reached the middle"
        try:
            runs = json.loads(record.read_text())["runs"]
        except (FileNotFoundError, json.JSONDecodeError):
            runs = []
        finished = [r for r in runs if r["status"] == "finished"]
        running = [
            r
            for r in runs
            if r["status"] == "running"
            and complete_steps(str(base_dir / r["name"] / "checkpoints"))
        ]
        if finished and running:
            break
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)  # the driver alone: its runs must die with it
    driver.wait()
    deadline = time.monotonic() + 60
    while True:  # every run of the driver's process group is gone
        try:
            os.killpg(driver.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "runs outlived their driver"
        time.sleep(0.1)

    again = subprocess.run(command, cwd=cli.REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "to resume" in again.stdout
    runs = json.loads(record.read_text())["runs"]
    assert [r["status"] for r in runs] == ["finished"] * 2
    resumed = 0
    for run in runs:
        folder = str(base_dir / run["name"])
        starts = _starts(folder)
        assert [s["resumed_from_step"] for s in starts].count(None) == 1, run["name"]
        resumed += any(s["resumed_from_step"] for s in starts)
        scalars = read_scalars(folder)
        cli.assert_no_step_twice({t: v for t, v in scalars.items() if not t.startswith("sweep/")})
        assert [s for s, _ in sorted(scalars["eval/episode_return"])] == [100, 200, 300, 400]
        assert complete_steps(os.path.join(folder, "checkpoints"))[0] == 400
    assert resumed >= 1
