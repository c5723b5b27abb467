"""experiments/reproduce_results.sh runs the interpreter it is started with ($PYTHON, else the
active virtual environment's), never a bare `python`, and checks it before anything runs."""

import os
import pathlib
import stat
import subprocess

SCRIPT = str(pathlib.Path(__file__).resolve().parents[2] / "experiments" / "reproduce_results.sh")
CHECK = "import experiments.sweep, pandas, matplotlib, rliable"  # the script's first call


def interpreter(folder, log, works: bool = True) -> str:
    """A stand-in `bin/python` that records how it was called (and, unless `works`, fails the
    script's check that it imports this package)."""
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    fail = "" if works else "[[ $1 == -c ]] && exit 1\n"
    python.write_text(f'#!/usr/bin/env bash\necho "$0 $*" >> "{log}"\n{fail}exit 0\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def reproduce(tmp_path, **environment) -> subprocess.CompletedProcess:
    inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    return subprocess.run(
        ["bash", SCRIPT, str(tmp_path / "results")],
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
    assert calls[0] == f"{python} -c {CHECK}"
    sweeps = [call for call in calls if " -m experiments.sweep " in call]
    assert len(sweeps) == 18 and any(
        "--gin_file=gin_configs/reinforce/bandit.gin" in c for c in sweeps
    )
    assert len([call for call in calls if " -m experiments.analyze " in call]) == 18


def test_python_wins_and_one_without_the_package_stops_the_script_at_once(tmp_path):
    log = tmp_path / "calls.log"
    interpreter(tmp_path / "venv", log)
    python = interpreter(tmp_path / "other", log, works=False)

    completed = reproduce(tmp_path, VIRTUAL_ENV=str(tmp_path / "venv"), PYTHON=python)

    assert completed.returncode == 1
    assert completed.stderr.startswith(f"reproduce_results.sh: {python} cannot import experiments")
    assert log.read_text().splitlines() == [f"{python} -c {CHECK}"]


def test_the_pixel_part_runs_pong_in_pieces_and_sweeps_the_minatar_configs(tmp_path):
    log = tmp_path / "calls.log"
    python = interpreter(tmp_path / "venv", log)
    inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    calls = {}
    for steps in ("2500000", "10000000"):
        log.unlink(missing_ok=True)
        completed = subprocess.run(
            ["bash", SCRIPT, str(tmp_path / "results"), "pixels"],
            cwd=tmp_path,
            env={**inherited, "PYTHON": python, "PONG_STEPS": steps},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert completed.returncode == 0, completed.stderr
        calls[steps] = log.read_text().splitlines()
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
    assert len([call for call in first if " -m experiments.analyze " in call]) == 5


def test_a_part_that_is_neither_classic_nor_pixels_is_refused(tmp_path):
    completed = subprocess.run(
        ["bash", SCRIPT, str(tmp_path / "results"), "atari"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1
    assert completed.stderr == (
        "reproduce_results.sh: the second argument is classic or pixels, got atari.\n"
    )
