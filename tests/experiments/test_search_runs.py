"""Adaptive searches that train: a search SIGKILLed twice mid-trial and started again ends as an
uninterrupted one (run with other --parallel), which `analyze` reports with its pruned trials
apart; and the same search on a local Ray instance. Runs are tiny (400 bandit pulls)."""

import io
import json
import os
import signal
import subprocess
import sys
import time

from experiments import analyze, search, sweep
from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars
from tests.experiments import cli

BANDIT = "gin_configs/reinforce/bandit.gin"
TINY = [
    "Runner.num_steps = 400",
    "Runner.eval_interval = 100",
    "Runner.checkpoint_interval = 100",
    "Runner.log_interval = 100",
    "Runner.histogram_interval = 1000",
]
# One rate that learns and one that cannot. Drawn at random (3 startup trials) from sweep seed 3:
# trial 0 learns, trial 1 cannot, and trial 2, which cannot, is compared with trial 0 (finished
# before it was suggested) and pruned at its first evaluation past 20% of the run.
RATES = "optimizers.Adam.learning_rate=[0.1, 0.000001]"


def _command(base_dir, parallel: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "experiments.sweep",
        f"--gin_file={BANDIT}",
        f"--sweep={RATES}",
        "--sweep=Runner.eval_episodes=randint(4, 7)",
        "--search=tpe",
        "--num_trials=3",
        "--seeds=1",
        "--sweep_seed=3",
        "--n_startup_trials=3",
        "--prune_after_trials=1",
        "--concurrent_trials=2",
        f"--parallel={parallel}",
        f"--base_dir={base_dir}",
        *[f"--gin_bindings={b}" for b in TINY],
    ]


def _record(base_dir) -> dict:
    try:
        with open(os.path.join(base_dir, "sweep.json")) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {"runs": [], "search_trials": []}


def _kill_when(base_dir, parallel: int, ready) -> None:
    """Starts the search and SIGKILLs its driver (its runs die with it) once `ready(record)`."""
    driver = subprocess.Popen(
        _command(base_dir, parallel),
        cwd=cli.REPO_ROOT,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 600
    while not ready(_record(base_dir)):
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the search never got there"
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 60
    while True:  # every run of the driver's process group is gone
        try:
            os.killpg(driver.pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "runs outlived their driver"
        time.sleep(0.1)


def _mid_trial(base_dir, trials: int):
    """Once `trials` trials were suggested and a run is running past a checkpoint."""

    def ready(record) -> bool:
        running = [
            run
            for run in record["runs"]
            if run["status"] == "running"
            and complete_steps(os.path.join(base_dir, run["name"], "checkpoints"))
        ]
        return len(record["search_trials"]) >= trials and bool(running)

    return ready


def _outcome(record) -> list[tuple]:
    return [
        (t["number"], t["trial"], t["texts"], t["state"], t["value"], t["pruned_at"], t["curve"])
        for t in record["search_trials"]
    ]


def test_a_search_killed_twice_mid_trial_ends_as_an_uninterrupted_one(tmp_path):
    whole = tmp_path / "whole"
    done = subprocess.run(
        _command(whole, parallel=2), cwd=cli.REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = _outcome(_record(whole))
    assert [t[3] for t in expected] == ["finished", "finished", "pruned"], expected
    assert expected[2][5] == 100  # pruned at step 100

    killed = tmp_path / "killed"  # one run at a time: trial 0, then 1, then 2
    _kill_when(killed, 1, _mid_trial(killed, trials=1))  # in trial 0's run
    _kill_when(killed, 1, _mid_trial(killed, trials=2))  # in trial 1's
    again = subprocess.run(
        _command(killed, parallel=1), cwd=cli.REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 ended, 1 run to resume" in again.stdout  # trial 0, and trial 1's run
    record = _record(killed)
    assert _outcome(record) == expected  # every trial suggested once, as the whole one did
    assert sorted(run["name"] for run in record["runs"]) == sorted(
        run["name"] for run in _record(whole)["runs"]
    )
    resumed = 0
    for run in record["runs"]:
        folder = os.path.join(killed, run["name"])
        with open(os.path.join(folder, "metadata.json")) as f:
            starts = json.load(f)["starts"]
        resumed += any(start["resumed_from_step"] for start in starts)
        scalars = read_scalars(folder)
        cli.assert_no_step_twice({t: v for t, v in scalars.items() if not t.startswith("sweep/")})
        if run["status"] == "pruned":  # its start says so, and its checkpoint is where it stopped
            assert starts[-1]["stopped"]["reason"].startswith("TrialPruner: pruned at step")
            step = run["pruned"]["step"]
            assert complete_steps(os.path.join(folder, "checkpoints"))[0] == step
    assert resumed >= 2  # the runs the two kills interrupted, each at its checkpoint

    with open(os.path.join(killed, "best.gin")) as f:
        assert "optimizers.Adam.learning_rate = 0.1" in f.read()
    result = analyze.analyze([str(whole)], str(tmp_path / "analysis"), reps=200)
    assert set(result.trials_frame["trial"]) == {t[1] for t in expected[:2]}  # not the pruned
    (section,) = result.searches
    for trial in expected:
        assert f"| {trial[1]} |" in section
    assert "3 trials: 2 finished, 1 pruned, 0 failed; 900 environment steps" in section
    assert "Parameter importances (Optuna, PED-ANOVA over finished trials): " in section
    assert os.path.exists(tmp_path / "analysis" / "search.md")


def test_a_search_on_a_local_ray_instance_writes_the_same_kind_of_record(local_ray, tmp_path):
    settings = search.SearchSettings(n_startup_trials=1)
    definition = sweep.define(
        [BANDIT],
        TINY,
        [RATES],
        seeds=1,
        base_dir=str(tmp_path),
        num_trials=3,
        search_kind="tpe",
        settings=settings,
    )
    out = io.StringIO()  # Tune pickles its callbacks, the progress lines' stream with them
    sweep.run_sweep(definition, parallel=2, backend="ray", out=out)
    assert "search: 3/3 trials suggested" in out.getvalue()
    record = _record(tmp_path)
    assert sorted(t["number"] for t in record["search_trials"]) == [0, 1, 2]
    for trial in record["search_trials"]:
        assert trial["state"] in search.ENDED and trial["curve"], trial
        (run,) = [r for r in record["runs"] if r["trial"] == trial["trial"]]
        assert run["status"] == trial["state"]
        if trial["state"] == "pruned":
            assert "by Ray Tune's ASHA" in trial["why"]
            folder = os.path.join(tmp_path, run["name"])
            assert complete_steps(os.path.join(folder, "checkpoints"))[0] == trial["pruned_at"]
        else:
            assert trial["value"] == trial["curve"][-1][1]
    assert os.path.exists(tmp_path / "best.gin") == any(
        t["state"] == "finished" for t in record["search_trials"]
    )
