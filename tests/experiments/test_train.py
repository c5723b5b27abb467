"""`experiments.train` from Python: runs in one process do not leak into each other."""

import json
import re
import subprocess
import sys

import numpy as np

import experiments
from tests.experiments import cli

BANDIT = ["gin_configs/reinforce/bandit.gin"]
COMMON = ["Runner.num_steps = 300", "Runner.eval_interval = 100", "Runner.eval_episodes = 5"]
CONFIGS = {  # trained in this order: a's bindings, which b does not make, must not leak
    "a": [*COMMON, "MultiArmedBanditEnv.means = [0.9, 0.1, 0.2, 0.3]", "Runner.num_envs = 2"],
    "b": [*COMMON, "optimizers.Adam.learning_rate = 0.01"],
}


def _in_subprocess(base_dir, bindings) -> subprocess.Popen:
    script = (
        "import json, sys, experiments; "
        "r = experiments.train(json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]); "
        "print(json.dumps(r.eval_returns))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(BANDIT), json.dumps(bindings), str(base_dir)],
        cwd=cli.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_calls_in_one_process_match_two_separate_processes(tmp_path):
    separate = {
        name: _in_subprocess(tmp_path / f"process_{name}", bindings)
        for name, bindings in CONFIGS.items()
    }
    in_process = {
        name: experiments.train(BANDIT, bindings, str(tmp_path / f"inline_{name}"))
        for name, bindings in CONFIGS.items()
    }
    assert in_process["a"].runner.num_envs == 2
    assert in_process["b"].runner.num_envs == 1  # a's bindings did not reach b
    for name, process in separate.items():
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr[-2000:]
        curve = [tuple(point) for point in json.loads(stdout.strip().splitlines()[-1])]
        assert curve == in_process[name].eval_returns, name
        expected = cli.final_weights(tmp_path / f"process_{name}")
        weights = cli.final_weights(tmp_path / f"inline_{name}")
        assert weights.keys() == expected.keys()
        for key, value in expected.items():
            np.testing.assert_array_equal(weights[key], value, err_msg=f"{name}: {key}")


def test_importing_experiments_does_not_import_tensorflow():
    completed = subprocess.run(
        [sys.executable, "-c", "import sys, experiments; print('tensorflow' in sys.modules)"],
        cwd=cli.REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert completed.stdout.strip() == "False"


def test_a_result_reports_the_curve_and_the_folder(tmp_path):
    result = experiments.train(BANDIT, CONFIGS["a"], str(tmp_path), seed=4)
    assert result.base_dir == str(tmp_path)
    assert [step for step, _ in result.eval_returns] == [100, 200, 300]
    assert result.final_eval_return == result.eval_returns[-1][1]
    assert result.best_eval_return == max(value for _, value in result.eval_returns)
    assert result.env_steps == 300 and result.resumed_from is None
    again = experiments.train(BANDIT, CONFIGS["a"], str(tmp_path), seed=4)
    assert again.resumed_from == 300 and again.eval_returns == []  # nothing left to train


def test_train_from_a_script_shows_progress_not_tensorflow_and_verbose_false_is_quiet(tmp_path):
    script = (
        "import sys, experiments\n"
        "bindings = ['Runner.num_steps = 200', 'Runner.eval_interval = 100']\n"
        f"experiments.train({BANDIT!r}, bindings, {str(tmp_path / 'a')!r})\n"
        "print('-- quiet --', file=sys.stderr, flush=True)\n"
        f"experiments.train({BANDIT!r}, bindings, {str(tmp_path / 'b')!r}, verbose=False)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=cli.REPO_ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    verbose, quiet = completed.stderr.split("-- quiet --\n")
    assert re.search(r"^I \d\d:\d\d:\d\d runner\] eval at step 200: return", verbose, re.M)
    assert re.search(r"^I \d\d:\d\d:\d\d experiments\] Done: final eval return", verbose, re.M)
    for noise in ("cuda", "cuInit", "oneDNN", "cpu_feature_guard", "WARNING: All log messages"):
        assert noise not in completed.stderr, completed.stderr
    assert quiet == "", quiet
