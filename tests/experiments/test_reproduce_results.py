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
