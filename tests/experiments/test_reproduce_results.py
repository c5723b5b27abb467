"""experiments/reproduce_results.sh runs the interpreter it is started with ($PYTHON, else the
active virtual environment's), never a bare `python`, and checks it before anything runs."""

import os
import pathlib
import stat
import subprocess

SCRIPT = str(pathlib.Path(__file__).resolve().parents[2] / "experiments" / "reproduce_results.sh")
CHECK = "import experiments.sweep, pandas, matplotlib, rliable"  # the script's first call
MUJOCO_CHECK = CHECK + ", mujoco"  # where it runs the MuJoCo results too


def interpreter(folder, log, works: bool = True) -> str:
    """A stand-in `bin/python` that records how it was called (and, unless `works`, fails the
    script's check that it imports this package)."""
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    fail = "" if works else "[[ $1 == -c ]] && exit 1\n"
    python.write_text(f'#!/usr/bin/env bash\necho "$0 $*" >> "{log}"\n{fail}exit 0\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def reproduce(tmp_path, *parts: str, **environment) -> subprocess.CompletedProcess:
    inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    return subprocess.run(
        ["bash", SCRIPT, str(tmp_path / "results"), *parts],
        cwd=tmp_path,
        env={**inherited, **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_active_virtual_environments_interpreter_runs_every_sweep(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)

    completed = reproduce(tmp_path, VIRTUAL_ENV=str(tmp_path / "venv"))

    assert completed.returncode == 0, completed.stderr
    calls = log.read_text().splitlines()
    assert all(call.startswith(f"{python} ") for call in calls)
    assert calls[0] == f"{python} -c {MUJOCO_CHECK}"
    sweeps = [call for call in calls if " -m experiments.sweep " in call]
    assert len(sweeps) == 18 + 9 and any(
        "--gin_file=gin_configs/reinforce/bandit.gin" in c for c in sweeps
    )
    # One analysis a sweep, and the MuJoCo agents together on each of the three tasks.
    assert len([call for call in calls if " -m experiments.analyze " in call]) == 18 + 9 + 3


def test_the_mujoco_results_run_alone_at_their_lengths_and_seeds(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)

    completed = reproduce(tmp_path, "mujoco", PYTHON=python)

    assert completed.returncode == 0, completed.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == f"{python} -c {MUJOCO_CHECK}"
    sweeps = [call.split(" -m experiments.sweep ")[1] for call in calls if "sweep " in call]
    results = str(tmp_path / "results")
    assert sweeps[0] == (
        "--gin_file=gin_configs/ppo/halfcheetah.gin --seeds=3 "
        f"--gin_bindings=Runner.num_steps = 1000000 --base_dir={results}/ppo_halfcheetah_1M"
    )
    runs = {call.split("--base_dir=")[1]: call for call in sweeps}
    td3_hopper = runs[f"{results}/td3_hopper_300k"]
    assert "--seeds=2 --gin_bindings=Runner.num_steps = 300000" in td3_hopper
    assert "--seeds=1 " in runs[f"{results}/sac_walker2d_300k"]
    assert len(runs) == 9
    joint = [call for call in calls if f"--output_dir={results}/mujoco_hopper" in call]
    assert joint == [
        f"{python} -m experiments.analyze {results}/ppo_hopper_* {results}/sac_hopper_* "
        f"{results}/td3_hopper_* --output_dir={results}/mujoco_hopper"
    ]


def test_a_part_that_does_not_exist_is_refused_before_anything_runs(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)
    completed = reproduce(tmp_path, "atari", PYTHON=python)
    assert completed.returncode == 2
    assert "'atari' is not a part of the results: give all, classic or mujoco" in completed.stderr
    assert not log.exists()


def test_python_wins_and_one_without_the_package_stops_the_script_at_once(tmp_path):
    log = tmp_path / "calls.log"
    interpreter(tmp_path / "venv", log)
    python = interpreter(tmp_path / "other", log, works=False)

    completed = reproduce(tmp_path, VIRTUAL_ENV=str(tmp_path / "venv"), PYTHON=python)

    assert completed.returncode == 1
    assert completed.stderr.startswith(f"reproduce_results.sh: {python} cannot import experiments")
    assert log.read_text().splitlines() == [f"{python} -c {MUJOCO_CHECK}"]


def test_the_classic_results_alone_need_no_mujoco(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)
    completed = reproduce(tmp_path, "classic", PYTHON=python)
    assert completed.returncode == 0, completed.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == f"{python} -c {CHECK}"
    assert len([call for call in calls if " -m experiments.sweep " in call]) == 18
