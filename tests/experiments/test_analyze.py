"""Statistics on synthetic curves against hand-computed values, and the analysis of run folders
written by hand (known event files, so every number in the table is known)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from experiments import RunError, analyze, statistics
from tests.experiments.cli import REPO_ROOT


def test_iqm_trims_a_quarter_from_each_end():
    # 1..8: floor(0.25 * 8) = 2 trimmed each side -> mean(3, 4, 5, 6) = 4.5
    assert statistics.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5
    # an outlier does not move it: 0, 1, 2, 1000 -> mean(1, 2) = 1.5
    assert statistics.iqm([1000, 0, 2, 1]) == 1.5


def test_area_under_the_curve_is_the_curve_average_over_its_steps():
    # trapezoids: (0 + 1) / 2 * 100 + (1 + 1) / 2 * 100 = 150, over 200 steps -> 0.75
    assert statistics.area_under_curve([0, 100, 200], [0, 1, 1]) == 0.75
    # learning sooner scores higher at the same final value
    assert statistics.area_under_curve([0, 100, 200], [0, 0, 1]) == 0.25
    assert statistics.area_under_curve([100], [3.0]) == 3.0


def test_steps_to_threshold_is_the_first_step_that_reaches_it():
    steps, values = [100, 200, 300, 400], [0.1, 0.5, 0.4, 0.9]
    assert statistics.steps_to_threshold(steps, values, 0.5) == 200  # >=, at its first step
    assert statistics.steps_to_threshold(steps, values, 0.6) == 400
    assert np.isnan(statistics.steps_to_threshold(steps, values, 1.0))


def test_runs_are_aligned_on_environment_steps():
    grid, values = statistics.align([([0, 100, 200], [0, 1, 2]), ([0, 100, 200], [2, 3, 4])])
    np.testing.assert_array_equal(grid, [0, 100, 200])
    np.testing.assert_array_equal(values, [[0, 1, 2], [2, 3, 4]])
    # Different steps: the union within the common range, interpolated.
    grid, values = statistics.align([([0, 100, 200], [0, 1, 2]), ([50, 150, 250], [5, 15, 25])])
    np.testing.assert_array_equal(grid, [50, 100, 150, 200])
    np.testing.assert_allclose(values, [[0.5, 1, 1.5, 2], [5, 10, 15, 20]])


@pytest.mark.parametrize("aggregate", [statistics.mean, statistics.iqm])
def test_bootstrap_intervals_contain_the_true_value_and_narrow_with_more_seeds(aggregate):
    # A symmetric distribution: its mean and its IQM are both its centre, 10.
    scores = np.random.default_rng(3).normal(10.0, 2.0, size=40)
    widths = []
    for seeds in (5, 10, 40):
        point, low, high = statistics.bootstrap_interval(scores[:seeds], aggregate, 2000, seed=0)
        assert low <= 10.0 <= high, (seeds, low, high)
        assert low <= point <= high
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # A fixed seed gives the same interval each time.
    assert statistics.bootstrap_interval(scores[:5], aggregate, 2000, seed=0) == (
        statistics.bootstrap_interval(scores[:5], aggregate, 2000, seed=0)
    )


def test_probability_of_improvement():
    assert statistics.probability_of_improvement([2, 3, 4], [0, 1, 1.5], 500)[0] == 1.0
    # x beats y in 5 of the 9 pairs and ties none: 5 / 9
    point, low, high = statistics.probability_of_improvement([1, 4, 6], [2, 3, 5], 500)
    assert point == pytest.approx(5 / 9)
    assert low <= point <= high


def _write_run(folder, seed, eval_curve, speeds, config="", started=None):
    """A run folder as the runner leaves it: config.gin, metadata.json and its event file."""
    os.makedirs(folder)
    with open(os.path.join(folder, "config.gin"), "w") as f:
        f.write(f"make_env.env_id = 'CartPole-v1'\nRunner.seed = {seed}\n{config}")
    start = {"seed": str(seed), "resumed_from_step": None}
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        f.write(json.dumps({"starts": [{**start, **({"started": started} if started else {})}]}))
    writer = tf.summary.create_file_writer(str(folder))
    curves = {"eval/episode_return": eval_curve, "train/steps_per_second": speeds}
    with writer.as_default():
        for tag, points in curves.items():
            for step, value in points:
                tf.summary.scalar(tag, value, step=step)
    writer.close()


def test_the_analysis_of_two_configs_matches_hand_computed_numbers(tmp_path):
    # Config "fast" reaches CartPole's 475 sooner than "slow"; three seeds each.
    curves = {
        "fast": [[100, 475, 500], [200, 480, 500], [150, 300, 475]],
        "slow": [[100, 200, 300], [50, 250, 400], [100, 150, 490]],
    }
    for config, seeds in curves.items():
        for seed, values in enumerate(seeds):
            _write_run(
                tmp_path / config / f"{config}_seed{seed}",
                seed,
                list(zip([1000, 2000, 3000], values, strict=True)),
                [(1000, 500.0), (3000, 1000.0)],  # 1000/500 + 2000/1000 = 4 s of training
            )
    out = tmp_path / "out"
    result = analyze.analyze([str(tmp_path / "fast"), str(tmp_path / "slow")], str(out), reps=1000)
    assert result.threshold == 475  # CartPole-v1's registered reward_threshold
    runs = result.runs_frame.set_index(["trial", "seed"])
    # fast seed 2: trapezoids (150 + 300) / 2 * 1000 + (300 + 475) / 2 * 1000 = 612500 / 2000
    assert runs.loc[("fast/fast", 2), "auc"] == pytest.approx(306.25)
    assert runs.loc[("fast/fast", 0), "steps_to_threshold"] == 2000
    assert runs.loc[("fast/fast", 2), "steps_to_threshold"] == 3000
    assert np.isnan(runs.loc[("slow/slow", 0), "steps_to_threshold"])
    assert runs.loc[("slow/slow", 1), "wall_time_s"] == pytest.approx(4.0)
    trials = result.trials_frame.set_index("trial")
    assert trials.loc["fast/fast", "final_mean"] == pytest.approx((500 + 500 + 475) / 3)
    assert trials.loc["slow/slow", "final_iqm"] == pytest.approx(1190 / 3)  # 3 seeds: none trimmed
    assert trials.loc["fast/fast", "steps_to_threshold_median"] == 2000  # 2000, 2000, 3000
    assert trials.loc["slow/slow", "seeds_reaching_threshold"] == 1
    assert trials.loc["fast/fast", "wall_time_s_mean"] == pytest.approx(4.0)
    # Two configs: compared, fast over slow on the final return: 8 of 9 pairs, no ties.
    a, b, (point, _, _) = result.comparison
    assert (a, b) == ("fast/fast", "slow/slow")
    assert point == pytest.approx(1 / 9)  # P(slow > fast): only 490 > 475
    for name in ("runs.csv", "trials.csv", "trials.md", "learning_curves.png", "comparison.png"):
        assert os.path.getsize(out / name) > 0
    assert "| fast/fast |" in result.table


def test_runs_are_trials_by_their_config_not_their_folders_and_a_seed_counts_once(tmp_path):
    """A 50k run and two 3k runs under the same folder names, seed 1 of the 3k runs twice."""
    runs = tmp_path / "runs"

    def run(stamp: str, seed: int, num_steps: int, final: float) -> None:
        _write_run(
            runs / f"dqn_cartpole_seed{seed}_20261125-{stamp}-000001",
            seed,
            [(1000, 10.0), (num_steps, final)],
            [(num_steps, 1000.0)],
            config=f"Runner.num_steps = {num_steps}\nRunner.log_interval = {num_steps // 10}\n",
            started=f"2026-11-25T{stamp[:2]}:{stamp[2:4]}:{stamp[4:]}",
        )

    run("100000", 0, 50_000, 500.0)
    run("110000", 0, 3000, 20.0)
    run("110500", 1, 3000, 30.0)
    run("120000", 1, 3000, 40.0)  # seed 1 again, later: it counts
    result = analyze.analyze([str(runs)], str(tmp_path / "out"), reps=200)
    trials = result.trials_frame.set_index("trial")
    long, short = "dqn_cartpole[Runner.num_steps=50000]", "dqn_cartpole[Runner.num_steps=3000]"
    assert set(trials.index) == {long, short}  # log_interval differs too, but is a cadence
    assert trials.loc[long, "seeds"] == 1 and trials.loc[short, "seeds"] == 2
    assert trials.loc[short, "final_mean"] == pytest.approx((20.0 + 40.0) / 2)
    note, comparison = result.notes
    newest, older = (runs / f"dqn_cartpole_seed1_20261125-{t}-000001" for t in ("120000", "110500"))
    assert note == (
        f"Trial {short} holds 2 runs of seed 1: only the newest counts, {newest} (not {older})."
    )
    # Two trials are compared (3000 steps first: numbers in names sort as numbers), on 1 seed.
    assert comparison.startswith(f"P({long} > {short}) compares 1 seed with 2: too few for its")
    listing = analyze.membership(result.runs)
    assert f"{short} (2 runs): dqn_cartpole_seed0_20261125-110000-000001 (seed 0), " in listing


def test_a_run_folder_of_the_retired_layout_stops_the_analysis_in_its_paragraph(tmp_path):
    _write_run(tmp_path / "runs" / "new", 0, [(1000, 10.0)], [(1000, 1000.0)])
    _write_run(tmp_path / "runs" / "old", 1, [(1000, 10.0)], [(1000, 1000.0)])
    (tmp_path / "runs" / "old" / "eval").mkdir()
    (tmp_path / "runs" / "old" / "eval" / "events.out.tfevents.x").write_bytes(b"")
    with pytest.raises(RunError) as raised:
        analyze.load([str(tmp_path / "runs")])
    assert str(raised.value).startswith(
        f"{tmp_path / 'runs' / 'old'} is a run folder of the retired layout, one TensorBoard run "
    )


@pytest.mark.parametrize(
    ("record", "content", "what"),
    [
        ("metadata.json", '{"starts": {}}', 'JSON, but its "starts" is an object, not a list'),
        ("config.gin", "Runner.seed = (1\n", "gin cannot read it (The file is incomplete: a '('"),
    ],
)
def test_a_damaged_record_stops_the_analysis_in_its_paragraph(tmp_path, record, content, what):
    _write_run(tmp_path / "runs" / "a", 0, [(1000, 10.0)], [(1000, 1000.0)])
    damaged = tmp_path / "runs" / "a" / record
    damaged.write_text(content)
    with pytest.raises(RunError) as raised:
        analyze.load([str(tmp_path / "runs")])
    message = str(raised.value)
    assert message.startswith(f"{damaged} is damaged: {what}"), message
    assert f"(mv {damaged} {damaged}.damaged)" in message and "\n" not in message


@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
def test_an_output_dir_that_cannot_be_a_folder_is_one_line(tmp_path, where):
    _write_run(tmp_path / "runs" / "a", 0, [(1000, 10.0)], [(1000, 1000.0)])
    (tmp_path / "file").write_text("not a folder")
    output_dir = tmp_path / "file" if where == "a_file" else tmp_path / "file" / "analysis"
    reason = "it is a file" if where == "a_file" else f"Not a directory ({output_dir})"
    with pytest.raises(RunError) as raised:
        analyze.analyze([str(tmp_path / "runs")], str(output_dir), reps=10)
    assert str(raised.value) == (
        f"--output_dir={output_dir} cannot hold the analysis's tables and plots: {reason}. Give "
        "a folder (made if missing) where this user may write; nothing was written."
    )
    assert (tmp_path / "file").read_text() == "not a folder"


@pytest.mark.parametrize(
    ("values", "axis"),
    [
        ([0.01, 0.001], "log"),  # a learning rate a decade apart
        ([1e-4, 3e-4, 1e-3, 3e-3], "log"),
        ([np.int64(8), np.int64(256)], "log"),  # numpy's integers are numbers too
        ([0.9, 0.99, 0.999], "linear"),
        ([0.0, 0.5, 1.0], "linear"),  # zero has no logarithm
        ([-1.0, 10.0], "linear"),
        (["relu", "tanh"], "categories"),
        ([True, False], "categories"),
    ],
)
def test_a_swept_binding_is_plotted_on_a_log_axis_where_it_spans_a_decade(values, axis):
    assert analyze.parameter_axis(values) == axis


def test_the_final_return_plot_of_a_learning_rate_sweep_has_a_log_axis(tmp_path, monkeypatch):
    import matplotlib.figure
    import pandas as pd

    scales = []
    save = matplotlib.figure.Figure.savefig

    def saving(figure, *args, **kwargs):
        scales.append(figure.axes[0].get_xscale())
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", saving)
    rate = "Adam.learning_rate"
    runs = pd.DataFrame({rate: [0.01, 0.01, 0.001, 0.001], "final_eval_return": [1, 2, 3, 4]})
    trials = pd.DataFrame(
        {rate: [0.01, 0.001], "final_iqm": [1.5, 3.5], "final_iqm_low": [1, 3]}
        | {"final_iqm_high": [2, 4]}
    )
    analyze.plot_final_vs_parameter(runs, trials, rate, str(tmp_path / "rate.png"))
    assert scales == ["log"] and os.path.getsize(tmp_path / "rate.png") > 0


def test_atari_curves_get_a_frames_axis_at_the_configs_frame_skip():
    plt = analyze._pyplot()
    run = analyze.Run("r", "t", 0, "f", "make_atari_env.frame_skip = 4\n", {}, {})
    assert run.frames_per_step() == 4
    assert analyze.Run("r", "t", 0, "f", "make_env.env_id = 'X'\n", {}, {}).frames_per_step() == 1
    figure, axes = plt.subplots()
    axes.set_xlim(0, 2_500_000)
    top = analyze.frames_axis(axes, {4})
    figure.canvas.draw()
    assert top.get_xlim() == (0, 10_000_000) and "4 a step" in top.get_xlabel()
    assert analyze.frames_axis(axes, {1}) is None  # MinAtar: a step is a frame
    assert analyze.frames_axis(axes, {1, 4}) is None  # no one frames axis for both
    plt.close(figure)


@pytest.mark.parametrize("module", ["pandas", "matplotlib", "rliable"])
def test_a_missing_module_of_the_analysis_extra_is_named_with_the_extra_to_install(
    module, monkeypatch
):
    for loaded in [name for name in sys.modules if name.startswith(f"{module}.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, module, None)  # `import module` fails, as if not installed
    with pytest.raises(RunError) as raised:
        analyze.analyze(["no/such/folder"])
    message = str(raised.value)
    assert f"no module named '{module}'" in message
    assert "pip install -e '.[analysis]'" in message


def test_the_command_line_without_pandas_says_which_extra_to_install(tmp_path):
    # The quick start installs no extras: `experiments.analyze` must say what to install.
    script = (
        "import sys\n"
        "sys.modules['pandas'] = None  # as if not installed\n"
        f"sys.argv = ['analyze', {str(tmp_path)!r}]\n"
        "from experiments import analyze\n"
        "analyze.run_main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.startswith("experiments.analyze: error: The analysis needs the analysis")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one paragraph
    assert "no module named 'pandas'" in done.stderr
    assert "pip install -e '.[analysis]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_trial_interval_over_two_seeds_is_just_their_range():
    # The resampled means of (1, 3) are 1, 2 and 3 with chances 1/4, 1/2, 1/4: the 2.5% and
    # 97.5% percentiles are 1 and 3, an interval that holds the true mean half the time.
    assert statistics.bootstrap_interval([1.0, 3.0], statistics.mean, 2000) == (2.0, 1.0, 3.0)


def test_trials_sort_by_their_values_as_numbers_and_too_few_seeds_are_said(tmp_path):
    # A random sweep's record: trial0 drew the largest rate, trial1 the smallest.
    finals = {
        ("trial0", 0.01): [0.5, 0.6],
        ("trial1", 0.0003): [0.93, 0.96, 0.91, 0.97, 0.94],  # mean 0.942, reached by all
        ("trial2", 0.001): [0.2, 0.4],
    }
    runs = []
    for (trial, rate), values in finals.items():
        for seed, final in enumerate(values):
            name = f"{trial}_seed{seed}"
            config = f"optimizers.Adam.learning_rate = {rate}\n"
            curve = [(50_000, 0.1), (150_000, final)]
            _write_run(tmp_path / "sweep" / name, seed, curve, [(150_000, 10.0)], config)
            values_of = {"Adam.learning_rate": rate}
            runs.append(
                {"name": name, "trial": trial, "seed": seed, "values": values_of}
                | {"status": "finished"}
            )
    (tmp_path / "sweep" / "sweep.json").write_text(json.dumps({"runs": runs}))
    result = analyze.analyze(
        [str(tmp_path / "sweep")],
        str(tmp_path / "out"),
        threshold=0.9,
        compare_trials=["trial0", "trial2"],
        reps=500,
    )
    assert list(result.trials_frame["trial"]) == ["trial1", "trial2", "trial0"]  # by rate
    rows = result.table.splitlines()
    assert [row.split(" | ")[:3] for row in rows[2:5]] == [
        ["| trial1", "0.0003", "5"],
        ["| trial2", "0.001", "2 (too few)"],
        ["| trial0", "0.01", "2 (too few)"],
    ]
    # Four significant digits: the mean beside returns of 0.91..0.97, not 0.9; the median
    # step to 0.9 and the wall time (150000 steps at 10 steps/s) in plain digits.
    assert rows[2].split(" | ")[3].startswith("0.942 [")
    assert rows[2].split(" | ")[6:] == ["150000 (5/5)", "15000 |"]
    assert rows[5:] == ["", analyze.too_few_seeds_note()]
    assert "fewer than 5" in rows[6]
    (note,) = result.notes
    assert note.startswith("P(trial2 > trial0) compares 2 seeds with 2: too few")
    assert analyze.membership(result.runs).splitlines()[0].startswith("trial1 (5 runs)")
