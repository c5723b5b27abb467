"""experiments/reproduce_results.sh runs the interpreter it is started with ($PYTHON, else the
active virtual environment's), never a bare `python`, and checks it before anything runs."""

import os
import pathlib
import stat
import subprocess

SCRIPT = str(pathlib.Path(__file__).resolve().parents[2] / "experiments" / "reproduce_results.sh")
CHECK = "import experiments.sweep, pandas, matplotlib, rliable"  # the script's first call
MUJOCO_CHECK = CHECK + ", mujoco"  # where it runs the MuJoCo results too
PIXELS_CHECK = CHECK + ", ale_py, minatar"  # the pixel results
ALL_CHECK = CHECK + ", mujoco, ale_py, minatar"  # all of them, the default


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
    assert calls[0] == f"{python} -c {ALL_CHECK}"
    sweeps = [call for call in calls if " -m experiments.sweep " in call]
    assert len(sweeps) == 18 + 9 + 4 and any(
        "--gin_file=gin_configs/reinforce/bandit.gin" in c for c in sweeps
    )
    # One analysis a sweep, the MuJoCo agents together on each of the three tasks, and Pong's.
    assert len([call for call in calls if " -m experiments.analyze " in call]) == 18 + 9 + 3 + 5


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
    assert (
        "'atari' is not a part of the results: give all, classic, mujoco or pixels"
        in completed.stderr
    )
    assert not log.exists()


def test_python_wins_and_one_without_the_package_stops_the_script_at_once(tmp_path):
    log = tmp_path / "calls.log"
    interpreter(tmp_path / "venv", log)
    python = interpreter(tmp_path / "other", log, works=False)

    completed = reproduce(tmp_path, VIRTUAL_ENV=str(tmp_path / "venv"), PYTHON=python)

    assert completed.returncode == 1
    assert completed.stderr.startswith(f"reproduce_results.sh: {python} cannot import experiments")
    assert log.read_text().splitlines() == [f"{python} -c {ALL_CHECK}"]


def test_the_classic_results_alone_need_no_mujoco(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)
    completed = reproduce(tmp_path, "classic", PYTHON=python)
    assert completed.returncode == 0, completed.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == f"{python} -c {CHECK}"
    assert len([call for call in calls if " -m experiments.sweep " in call]) == 18


def test_the_pixel_part_runs_pong_in_pieces_and_sweeps_the_minatar_configs(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)
    calls = {}
    for steps in ("2500000", "10000000"):
        log.unlink(missing_ok=True)
        completed = reproduce(tmp_path, "pixels", PYTHON=python, PONG_STEPS=steps)
        assert completed.returncode == 0, completed.stderr
        calls[steps] = log.read_text().splitlines()
    assert calls["2500000"][0] == f"{python} -c {PIXELS_CHECK}"
    pong = [call for call in calls["10000000"] if " -m experiments.run " in call]
    # One run folder, resumed at each piece's end: 2.5M agent steps (10M frames) at a time.
    assert [call.rsplit("--gin_bindings=", 1)[1] for call in pong] == [
        f"Runner.num_steps = {steps}" for steps in (2500000, 5000000, 7500000, 10000000)
    ]
    assert all("--base_dir=" + str(tmp_path / "results" / "ppo_pong" / "seed0") in c for c in pong)
    first = calls["2500000"]
    assert len([call for call in first if " -m experiments.run " in call]) == 1
    sweeps = [call for call in first if " -m experiments.sweep " in call]
    assert len(sweeps) == 4 and all("--seeds=3" in call for call in sweeps)
    assert any("minatar_asterix.gin" in c and "Runner.num_steps = 1000000" in c for c in sweeps)
    analyses = [call for call in first if " -m experiments.analyze " in call]
    assert len(analyses) == 5
    assert [c for c in analyses if "--threshold=2.3" in c] == [
        c for c in analyses if "a3c_minatar_breakout_nstep_q" in c
    ]
    (random,) = [call for call in first if " -m experiments.random_baseline " in call]
    assert "minatar_breakout_nstep_q.gin" in random and "--episodes=100" in random
    assert (tmp_path / "results" / "a3c_minatar_breakout_nstep_q" / "random_baseline.txt").exists()
