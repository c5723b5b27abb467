"""The adaptive search's pieces, without training: the `--sweep` distributions as Optuna's, the
per-trial seeding and order (suggestions that neither --parallel nor a kill changes), the
pruning decision on hand-made curves, the objective over seeds, the study, best.gin, the bad
input that starts nothing; and the pruner in one real run (integration), resumed by hand."""

import dataclasses
import json
import os

import numpy as np
import optuna
import pytest
from tensorboard.plugins.hparams import plugin_data_pb2

from experiments import RunError, search, statistics, sweep, sweep_best, sweep_record
from experiments.search_pruning import TrialPruner
from experiments.sweep_plan import parse_parameter
from experiments.sweep_record import open_study
from experiments.sweep_search import SearchSchedule
from framework.loop import Evaluation
from framework.storage.event_reader import read_scalars

BANDIT = "gin_configs/reinforce/bandit.gin"
RATE = "optimizers.Adam.learning_rate=loguniform(1e-4, 1e-1)"
STEPS = "Runner.eval_episodes=randint(2, 6)"
REFERENCES = [  # three finished trials: medians 2 at step 10, 4 at 20, 6 at 30
    [(10, 1.0), (20, 2.0), (30, 3.0)],
    [(10, 2.0), (20, 4.0), (30, 6.0)],
    [(10, 3.0), (20, 6.0), (30, 9.0)],
]


# ----- the distributions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lr=normal(0, 1)", r"'normal' is not a distribution this sweep knows; give one of"),
        ("lr=loguniform(1e-2, 1e-4)", r"loguniform needs two numbers low < high \(both > 0\)"),
        ("lr=loguniform(0, 1e-2)", r"loguniform needs two numbers low < high \(both > 0\)"),
        ("lr=loguniform(-1, 1)", r"both > 0"),
        ("n=randint(1.5, 4)", r"randint needs .*integers; high is excluded"),
        ("n=uniform(3, 3)", r"uniform needs two numbers low < high"),
    ],
)
def test_a_bad_distribution_is_one_paragraph_naming_it(spec, message):
    with pytest.raises(RunError, match=message):
        parse_parameter(spec)


def test_each_sweep_flag_is_the_optuna_distribution_its_values_come_from():
    rate = parse_parameter("lr=loguniform(1e-4, 1e-1)").search_space()
    assert (rate.low, rate.high, rate.log) == (1e-4, 1e-1, True)
    width = parse_parameter("w=uniform(0.5, 2)").search_space()
    assert (width.low, width.high, width.log) == (0.5, 2.0, False)
    count = parse_parameter("n=randint(2, 6)")  # 6 excluded, as in a random sweep
    assert (count.search_space().low, count.search_space().high) == (2, 5)
    choice = parse_parameter("period=[16, 128, (5, 5), @Adam()]")
    assert choice.search_space().choices == ("16", "128", "(5, 5)", "@Adam()")
    assert choice.text("(5, 5)") == "(5, 5)"  # a choice is its gin text
    assert count.text(4) == "4" and parse_parameter("lr=uniform(0, 1)").text(0.25) == "0.25"


# ----- seeding and order ------------------------------------------------------------------------


def test_each_trial_has_its_own_seed_from_the_sweeps_seed_and_its_number():
    seeds = [search.trial_seed(0, number) for number in range(100)]
    assert len(set(seeds)) == 100
    assert seeds == [search.trial_seed(0, number) for number in range(100)]
    assert search.trial_seed(1, 0) != search.trial_seed(0, 0)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"pruner": "asha"}, r"--pruner must be one of \('median', 'none'\), got 'asha'"),
        ({"prune_on": "mean"}, r"--prune_on must be 'last' .* or 'best' .*, got 'mean'"),
        ({"objective": "iqm"}, r"--objective must be 'final' .* or 'mean' .*, got 'iqm'"),
        ({"min_prune_fraction": 1.0}, r"--min_prune_fraction must be in \[0, 1\)"),
    ],
)
def test_a_bad_search_setting_is_one_paragraph_naming_it(setting, message):
    with pytest.raises(RunError, match=message):
        search.SearchSettings(**setting)


def test_trial_k_waits_for_trials_0_to_k_minus_c():
    two = search.SearchSettings(concurrent_trials=2)
    assert [search.first_dependent(k, two) for k in range(5)] == [0, 0, 1, 2, 3]
    one = search.SearchSettings(concurrent_trials=1)
    assert [search.first_dependent(k, one) for k in range(4)] == [0, 1, 2, 3]


def _finished(number, texts, value):
    return {
        "number": number,
        "trial": f"trial{number}",
        "texts": texts,
        "state": "finished",
        "value": value,
        "curve": [[10, value]],
    }


def test_a_suggestion_depends_on_the_history_seed_and_number_alone():
    parameters = [parse_parameter(RATE), parse_parameter(STEPS)]
    settings = search.SearchSettings(n_startup_trials=2)
    history = [
        _finished(0, ["0.001", "3"], 0.5),
        _finished(1, ["0.05", "5"], 0.9),
        {**_finished(2, ["0.0002", "2"], 0.1), "state": "pruned", "value": None},
        {**_finished(3, ["0.01", "4"], 0.0), "state": "failed", "value": None, "curve": []},
    ]
    first = search.suggest(parameters, history, settings, 7, 4)
    assert first == search.suggest(parameters, history, settings, 7, 4)
    rate, steps = float(first[0]), int(first[1])
    assert 1e-4 <= rate <= 1e-1 and 2 <= steps <= 5
    others = {search.suggest(parameters, history, settings, 7, n) for n in range(4, 9)}
    assert len(others) == 5  # each number its own draw


def _finish(run: dict, pruned_at: int | None = None) -> None:
    """A run's outcome as a function of its values and seed, as a deterministic run's is."""
    rate = run["values"]["Adam.learning_rate"]
    curve = [[step, float(np.log10(rate) + 0.01 * run["seed"] + step / 100)] for step in (50, 100)]
    if pruned_at is not None:
        curve = [point for point in curve if point[0] <= pruned_at]
        run.update(status="pruned", pruned={"step": pruned_at, "why": "behind"})
    else:
        run["status"] = "finished"
    run["result"] = {"curve": curve, "eval_step": curve[-1][0]}


def _search(base_dir, num_trials=6, pruner="none") -> sweep.Sweep:
    settings = search.SearchSettings(pruner=pruner, n_startup_trials=2, concurrent_trials=2)
    return sweep.define(
        [BANDIT],
        ["Runner.num_steps = 100"],
        [RATE],
        seeds=2,
        base_dir=str(base_dir),
        num_trials=num_trials,
        search_kind="tpe",
        settings=settings,
    )


def _drive(definition, at_once: int, last_first: bool, stop_after: int | None = None):
    """Runs the schedule as a driver would, `at_once` runs at a time, ending the newest or the
    oldest first; with `stop_after`, the driver dies after that many runs ended."""
    os.makedirs(definition.base_dir, exist_ok=True)
    schedule, active, ended = SearchSchedule(definition), [], 0
    while True:
        while len(active) < at_once and (run := schedule.next_run()) is not None:
            run["status"] = "running"
            active.append(run)
        if not active or ended == stop_after:
            break
        run = active.pop(-1 if last_first else 0)
        _finish(run)
        schedule.run_ended(run)
        ended += 1
    definition.write()  # what the record held when the driver died: runs left "running"
    return definition


def test_suggestions_are_the_same_whatever_runs_at_once_and_after_a_killed_driver(tmp_path):
    one = _drive(_search(tmp_path / "one"), at_once=1, last_first=False)
    many = _drive(_search(tmp_path / "many"), at_once=5, last_first=True)
    killed = _drive(_search(tmp_path / "killed"), at_once=3, last_first=True, stop_after=5)
    assert [r["status"] for r in killed.runs].count("running") == 3  # died mid-trial
    again = _search(tmp_path / "killed")  # the record's trials and runs, taken back
    again.runs = [
        {**r, "status": "interrupted"} if r["status"] == "running" else r for r in again.runs
    ]
    resumed = _drive(again, at_once=2, last_first=False)

    def outcome(definition):
        return [(t["number"], t["texts"], t["state"], t["value"]) for t in definition.search_trials]

    assert len(one.search_trials) == 6 and all(t["state"] == "finished" for t in one.search_trials)
    assert outcome(many) == outcome(one) and outcome(resumed) == outcome(one)
    assert len({tuple(t["texts"]) for t in one.search_trials}) == 6
    names = [r["name"] for r in resumed.runs]
    assert len(names) == len(set(names)) == 12  # every trial suggested once, its seeds once
    # The study holds each ended trial once, whatever was told twice.
    study = optuna.load_study(study_name="killed", storage=again.storage)
    assert sorted(t.user_attrs["number"] for t in study.trials) == list(range(6))


def test_a_trial_is_compared_with_the_finished_trials_it_was_suggested_from(tmp_path):
    definition = _search(tmp_path / "search", num_trials=4, pruner="median")
    os.makedirs(definition.base_dir)
    schedule = SearchSchedule(definition)
    runs = [schedule.next_run() for _ in range(4)]  # trials 0 and 1: from nothing
    assert schedule.next_run() is None  # trial 2 waits for trial 0
    for run in runs[:2]:
        _finish(run, pruned_at=50 if run["trial"].startswith("trial0") else None)
        schedule.run_ended(run)
    trial0 = definition.search_trials[0]
    assert trial0["state"] == "pruned" and trial0["pruned_at"] == 50
    runs.append(schedule.next_run())  # trial 2, from trial 0 (pruned: nothing to compare with)
    assert definition.task(runs[-1]).pruning["references"] == []
    for run in runs[2:4]:
        _finish(run)
        schedule.run_ended(run)
    trial1 = definition.search_trials[1]
    assert trial1["state"] == "finished"
    # Each run's HParams result holds its trial's objective and whether it was pruned.
    for run, objective, pruned in ((runs[0], np.nan, 1.0), (runs[2], trial1["value"], 0.0)):
        scalars = read_scalars(definition.folder(run))
        assert scalars["sweep/pruned"][0][1] == pruned
        assert scalars["sweep/objective"][0][1] == pytest.approx(objective, nan_ok=True)
    (summary,) = sweep_record._columns(definition).value
    content = summary.metadata.plugin_data.content
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    assert [m.name.tag for m in experiment.metric_infos][-2:] == [
        "sweep/objective",
        "sweep/pruned",
    ]
    assert not experiment.hparam_infos[0].HasField("domain_discrete")  # trials named as they come
    seed_curves = {r["seed"]: r["result"]["curve"] for r in runs[2:4]}
    assert trial1["curve"] == search.trial_curve(seed_curves, [0, 1])
    assert schedule.next_run()["trial"] == runs[-1]["trial"]  # trial 2's other seed
    trial3 = schedule.next_run()  # from trials 0 and 1: trial 1's curve is its reference
    pruning = definition.task(trial3).pruning
    assert pruning["references"] == [trial1["curve"]]
    assert pruning["seeds"] == [0, 1] and pruning["reports"].endswith(trial3["trial"])


# ----- pruning ----------------------------------------------------------------------------------

SETTINGS = search.SearchSettings(prune_after_trials=3, min_prune_fraction=0.2)


def _decide(*seed_curves, settings=SETTINGS, references=REFERENCES, num_steps=30):
    curves = dict(enumerate(seed_curves))
    return search.pruning_decision(curves, list(curves), references, settings, num_steps)


def test_a_trial_below_the_median_of_the_finished_trials_is_pruned_at_that_step():
    step, why = _decide([(10, 1.5)])  # 1.5 < median 2 of (1, 2, 3)
    assert step == 10
    assert "seed, 1.5 at that step, is below the median 2 of the 3 finished trials" in why
    assert _decide([(10, 2.5), (20, 4.5)]) is None  # above 2, then above 4


def test_several_seeds_are_judged_on_their_mean_once_every_seed_reached_the_step():
    # Seed 0 alone is below every median, but seed 1 has not reported: nothing decided.
    assert _decide([(10, 0.0), (20, 0.0), (30, 0.0)], []) is None
    # Once it has: the mean at step 10, (0 + 3) / 2 = 1.5 < 2, prunes at 10.
    step, why = _decide([(10, 0.0), (20, 0.0)], [(10, 3.0)])
    assert step == 10 and "over its 2 seeds" in why
    # Seed 0 is below at 10 (0 < 2) but the mean (0 + 5) / 2 = 2.5 is not; at 20, 10 > 4.
    assert _decide([(10, 0.0), (20, 10.0)], [(10, 5.0), (20, 10.0)]) is None


def test_the_median_pruner_judges_the_latest_value_or_on_request_the_best_so_far():
    falls = [(10, 5.0), (20, 3.0)]  # above the median 2 at step 10, below the median 4 at 20
    step, why = _decide(falls)
    assert step == 20 and "seed, 3 at that step, is below the median 4" in why
    best = search.SearchSettings(prune_after_trials=3, prune_on="best")
    assert _decide(falls, settings=best) is None  # its best so far, 5, stays above 4
    # Two seeds whose mean rises to 3.5 at step 20, still below 4: pruned either way.
    step, why = _decide([(10, 3.0), (20, 3.5)], [(10, 3.0), (20, 3.5)], settings=best)
    assert step == 20 and "at best 3.5 up to that step, is below the median 4" in why


def test_no_prune_before_the_minimum_steps_nor_with_too_few_finished_trials():
    half = search.SearchSettings(prune_after_trials=3, min_prune_fraction=0.5)  # no prune < 15
    assert _decide([(10, 0.0), (20, 0.0)], settings=half)[0] == 20
    assert _decide([(10, 0.0)], references=REFERENCES[:2]) is None  # 2 finished, 3 needed
    assert _decide([(10, 0.0)], settings=search.SearchSettings(pruner="none")) is None


class FakeRun:
    """What the pruner reads of a run and asks of it."""

    def __init__(self, env_steps=0, num_steps=30):
        self.env_steps, self.num_steps, self.stops = env_steps, num_steps, []

    def stop(self, reason):
        self.stops.append(reason)


def _evaluate(pruner, run, step, value):
    run.env_steps = step
    pruner.on_evaluation(run, Evaluation(step, value, 0.0, 1.0, (value,), (1,)))


def test_the_pruner_in_each_seed_reports_decides_and_stops_again_at_a_restart(tmp_path):
    def pruner(seed):
        reports = str(tmp_path / "trial")
        return TrialPruner(reports, seed, [0, 1], REFERENCES, dataclasses.asdict(SETTINGS))

    ahead, behind = pruner(0), pruner(1)
    fast, slow = FakeRun(), FakeRun()
    ahead.on_start(fast)
    behind.on_start(slow)
    _evaluate(ahead, fast, 10, 0.0)
    _evaluate(ahead, fast, 20, 0.0)  # seed 1 has not reached step 10: nothing decided
    assert fast.stops == [] and ahead.pruned is None
    with open(tmp_path / "trial" / "seed0.json") as f:
        assert json.load(f) == {"curve": [[10, 0.0], [20, 0.0]]}
    _evaluate(behind, slow, 10, 3.0)  # the mean at 10 is 1.5 < 2: the last seed there decides
    assert behind.pruned[0] == 10 and slow.stops[0].startswith("pruned at step 10: ")
    _evaluate(ahead, fast, 30, 0.0)  # the seed ahead stops at its next evaluation
    assert fast.stops == [f"its trial was {behind.pruned[1]}; this seed had reached step 30"]
    restarted = FakeRun(env_steps=10)  # the pruned run started again from its checkpoint
    again = pruner(1)
    again.on_start(restarted)
    assert restarted.stops and again.pruned == behind.pruned
    # A seed resumed from an earlier checkpoint evaluates its later steps again, alike.
    earlier = pruner(0)
    earlier.on_start(FakeRun(env_steps=10))
    assert earlier.curve == [(10, 0.0)]


# ----- the objective ----------------------------------------------------------------------------


def test_the_objective_is_each_seeds_final_tail_or_mean_return_then_mean_or_iqm_over_seeds():
    curves = {0: [(10, 1.0), (20, 3.0)], 1: [(10, 2.0), (20, 5.0)]}
    assert search.objective(curves, "final") == 4.0  # (3 + 5) / 2
    assert search.objective(curves, "mean") == 2.75  # (2 + 3.5) / 2
    ten = {0: [(step, float(step)) for step in range(1, 11)], 1: [(1, 0.0), (2, 4.0)]}
    # The last ceil(10 / 4) = 3 evaluations of seed 0, the last ceil(2 / 4) = 1 of seed 1.
    assert search.objective(ten, "tail") == pytest.approx(((8 + 9 + 10) / 3 + 4) / 2)
    finals = {seed: [(10, value)] for seed, value in enumerate([0.0, 10.0, 20.0, 1000.0])}
    assert search.objective(finals, "final") == 15.0  # 4 seeds: IQM, mean(10, 20), not 257.5
    assert search.objective({0: [(10, np.nan)], 1: [(10, 1.0)]}, "final") is None  # failed
    assert search.objective({0: [], 1: [(10, 1.0)]}, "final") is None
    for n in range(1, 10):
        scores = np.random.default_rng(n).normal(size=n)
        assert search._iqm(scores) == pytest.approx(statistics.iqm(scores))


# ----- the study, best.gin, bad input -----------------------------------------------------------


def test_a_storage_of_another_search_or_not_optunas_is_refused_before_anything_starts(tmp_path):
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    first = sweep.define(
        [BANDIT], [], [RATE], 1, str(tmp_path / "a"), 4, search_kind="tpe", storage=storage
    )
    open_study(first)  # made: this search's
    with pytest.raises(RunError, match="holds a study named 'a' of another search"):
        sweep.define(
            [BANDIT], [], [RATE], 1, str(tmp_path / "a"), 4, 1, search_kind="tpe", storage=storage
        )
    garbage = tmp_path / "b" / "search.db"
    garbage.parent.mkdir()
    garbage.write_text("not a database")
    with pytest.raises(RunError, match="cannot be opened as an Optuna study"):
        sweep.define([BANDIT], [], [RATE], 1, str(tmp_path / "b"), 4, search_kind="tpe")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("kind", "sweeps", "num_trials", "message"),
    [
        ("tpe", [RATE], None, "--search=tpe needs --num_trials=N"),
        ("tpe", [], 4, "--search=tpe needs a space to search: give at least one --sweep"),
        ("grid", ["x.y=[1, 2]"], 4, "--search=grid runs every combination of the lists"),
        ("bayes", [RATE], 4, "--search must be one of grid, random, tpe"),
        ("random", [RATE], None, "--search=random needs --num_trials=N"),
    ],
)
def test_a_search_without_what_it_needs_is_one_paragraph(
    tmp_path, kind, sweeps, num_trials, message
):
    with pytest.raises(RunError, match=message):
        sweep.define([BANDIT], [], sweeps, 1, str(tmp_path / "s"), num_trials, search_kind=kind)
    assert not (tmp_path / "s").exists()


def test_best_gin_is_the_includes_the_fixed_bindings_and_the_best_values(tmp_path):
    import gin

    from framework import config

    rates = "optimizers.Adam.learning_rate=[0.001, 0.01, 0.1]"
    definition = sweep.define([BANDIT], ["Runner.num_steps = 300"], [rates], 2, str(tmp_path))
    for run in definition.runs:
        final = {"0.001": 0.3, "0.01": 0.8, "0.1": 0.5}[run["trial"].split("=")[1]]
        run.update(status="finished", result={"final_eval_return": final + run["seed"] / 100})
    path = sweep_best.write_best_gin(definition)
    with open(path) as f:
        text = f.read()
    objective = "objective 0.805 (final eval return, mean over the trial's finished seeds)."
    assert f"# learning_rate=0.01, {objective}" in text  # (0.8 + 0.81) / 2
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == [
        f"include '{os.path.abspath(BANDIT)}'",
        "Runner.num_steps = 300",
        "optimizers.Adam.learning_rate = 0.01",
    ]
    gin.clear_config()
    try:
        config.parse([path], [])
        assert gin.query_parameter("optimizers.Adam.learning_rate") == 0.01
        assert gin.query_parameter("Runner.num_steps") == 300
    finally:
        gin.clear_config()


def test_trials_tied_at_the_best_final_return_go_to_the_higher_mean_eval_return(tmp_path):
    rates = "optimizers.Adam.learning_rate=[0.001, 0.01, 0.1]"
    definition = sweep.define([BANDIT], [], [rates], 1, str(tmp_path))
    means = {"0.001": 300.0, "0.01": 450.0, "0.1": 420.0}  # all three end at the cap
    for run in definition.runs:
        mean = means[run["trial"].split("=")[1]]
        run.update(status="finished", result={"final_eval_return": 500.0, "mean_eval_return": mean})
    assert sweep_best.best_trial(definition)["trial"].endswith("=0.01")
    rows = sweep_record.summary_table(definition).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| learning_rate=0.01",  # the table's order is the best trial's
        "| learning_rate=0.1",
        "| learning_rate=0.001",
    ]
    definition.runs[1]["result"]["final_eval_return"] = 499.0  # a higher objective still wins
    assert sweep_best.best_trial(definition)["trial"].endswith("=0.1")


# ----- the pruner in a real run -----------------------------------------------------------------


def test_a_pruned_run_ends_checkpointed_says_why_and_a_resume_by_hand_trains_on(tmp_path):
    import experiments
    from framework.storage.checkpointing import complete_steps

    bindings = [
        "Runner.num_steps = 200",
        "Runner.eval_interval = 50",
        "Runner.eval_episodes = 2",
        "Runner.checkpoint_interval = 1000",
        "Runner.log_interval = 50",
    ]
    high = [[(50, 10.0), (100, 10.0), (150, 10.0), (200, 10.0)]] * 2  # the bandit pays <= 0.9
    pruner = TrialPruner(
        str(tmp_path / "reports"), 0, [0], high, dict(prune_after_trials=2, min_prune_fraction=0.3)
    )
    folder = tmp_path / "run"
    experiments.train([BANDIT], bindings, folder, seed=0, verbose=False, callbacks=[pruner])
    assert pruner.pruned[0] == 100  # the first evaluation at or past 30% of 200 steps
    assert complete_steps(str(folder / "checkpoints")) == [100]  # checkpointed where it stopped
    with open(folder / "metadata.json") as f:
        (start,) = json.load(f)["starts"]
    assert start["stopped"]["step"] == 100
    assert start["stopped"]["reason"].startswith("TrialPruner: pruned at step 100: ")
    # By hand, without the pruner (it keeps nothing in the checkpoint): trained to the end.
    result = experiments.train([BANDIT], bindings, folder, seed=0, verbose=False)
    assert result.resumed_from == 100 and result.env_steps == 200
    with open(folder / "metadata.json") as f:
        first, second = json.load(f)["starts"]
    assert "stopped" in first and "stopped" not in second
    assert second["resumed_from_step"] == 100


def test_a_failed_run_fails_its_trial_and_the_search_goes_on(tmp_path):
    definition = _search(tmp_path / "search", num_trials=3)
    os.makedirs(definition.base_dir)
    schedule = SearchSchedule(definition)
    first, second = schedule.next_run(), schedule.next_run()  # trial 0's seeds
    _finish(first)
    first.update(status="failed", error="NonFiniteError: a NaN loss at step 50")
    _finish(second)
    for run in (first, second):
        schedule.run_ended(run)
    trial0 = definition.search_trials[0]
    assert trial0["state"] == "failed" and trial0["value"] is None
    assert trial0["why"] == f"{first['name']}: NonFiniteError: a NaN loss at step 50"
    later = [schedule.next_run() for _ in range(4)]  # trial 1, then trial 2 (after trial 0)
    assert [run["trial"][:6] for run in later] == ["trial1"] * 2 + ["trial2"] * 2
    assert schedule.note() is None or "did not end" in schedule.note()


def test_the_study_gives_optunas_parameter_importances(tmp_path):
    parameters = [parse_parameter(RATE), parse_parameter(STEPS)]
    study = optuna.create_study(direction="maximize")
    trials = [
        _finished(i, [str(10 ** -(1 + i % 3)), str(2 + i % 4)], float(i % 3)) for i in range(6)
    ]
    search.record_in_study(study, parameters, trials)
    search.record_in_study(study, parameters, trials)  # told twice, held once
    assert len(study.trials) == 6
    weights = search.importances(study)
    assert set(weights) == {p.key for p in parameters}
    assert sum(weights.values()) == pytest.approx(1.0)
    # The value follows the rate alone here: it takes nearly all of the importance.
    assert weights[parameters[0].key] > 0.9


class _Flag:
    def __init__(self, present):
        self.present = present


class _Flags(dict):
    """absl's FLAGS as `_check_search_flags` reads them."""

    def __init__(self, given=(), **values):
        super().__init__({name: _Flag(name in given) for name in sweep._SEARCH_FLAGS})
        self.search, self.num_trials, self.confirm_seeds = None, None, None
        self.__dict__.update(values)


def test_a_searchs_own_flags_without_search_tpe_are_refused():
    with pytest.raises(RunError, match=r"--pruner, --timeout are for an adaptive search: add"):
        sweep._check_search_flags(_Flags(given=("pruner", "timeout"), num_trials=4))
    sweep._check_search_flags(_Flags(given=("pruner",), search="tpe"))
    with pytest.raises(RunError, match=r"--confirm_seeds must be >= 1, got 0"):
        sweep._check_search_flags(_Flags(confirm_seeds=0))


def test_the_cartpole_figures_say_the_steps_each_search_used_and_how_often_it_confirmed():
    from experiments import search_cartpole

    def row(name, steps, mean, metric="final eval return"):
        return {
            "search": name,
            "sweep_seed": 0,
            "env_steps": steps,
            "trial": "trial3,lr=0.001",
            "estimate": 500.0,
            "metric": metric,
            "mean": mean,
            "low": mean - 10,
            "high": mean + 10,
            "scores": [mean] * 3,
        }

    on_mean = row("tpe_median_mean", 540_000, 380.0, "mean eval return")
    on_mean["final"] = {"mean": 480.0, "low": 470.0, "high": 490.0}
    rows = [on_mean, row("tpe_none_mean", 1_200_000, 470.0), row("random", 1_200_000, 300.0)]
    text = search_cartpole.table(rows)
    line = (
        "| tpe_median_mean | 0 | 540,000 | trial3,lr=0.001 | 500.0 (mean eval return) | "
        "380.0 [370.0, 390.0] (3) | 480.0 [470.0, 490.0] |"
    )
    assert line in text
    assert "| random | 0 | 1,200,000 | trial3,lr=0.001 | 500.0 (final eval return) | " in text
    assert "Sweep seed 0: TPE with the median pruner used 45% of the environment steps" in text
    # the pruned search is counted on its confirmed final return (480), not on its mean (380)
    assert text.endswith(
        "Confirmed mean final return >= 400, in sweep seeds: tpe_median_mean 1/1, "
        "tpe_none_mean 1/1, random 0/1."
    )
    assert search_cartpole.table(rows, bar=475).endswith("tpe_none_mean 0/1, random 0/1.")
    assert "environment steps of the same search" not in search_cartpole.table([on_mean])


def test_a_confirmation_on_the_curves_mean_also_gives_their_final_return():
    curves = [[(10, 100.0), (20, 300.0)], [(10, 200.0), (20, 500.0)], [(10, 0.0), (20, np.nan)]]
    on_mean = sweep_best._confirmed(curves, "mean")
    assert on_mean["scores"] == [200.0, 350.0]  # the failed run is left out
    assert on_mean["mean"] == 275.0 and on_mean["metric"] == "mean eval return"
    on_final = sweep_best._confirmed(curves, "final")
    assert on_final["scores"] == [300.0, 500.0] and on_final["mean"] == 400.0
    assert on_final["low"] == 300.0 and on_final["high"] == 500.0  # bootstrap's extremes
    text = sweep_best.confirmation_text(
        {"trial": "t", "estimate": 1.0, "estimate_seeds": 1, "seeds": [1, 2], "best_gin": "b"}
        | on_mean
        | {"final": on_final}
    )
    assert (
        "mean 275 [95% CI" in text and "their final eval return: mean 400 [95% CI 300, 500]" in text
    )
