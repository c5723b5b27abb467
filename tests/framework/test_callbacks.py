"""Callbacks: called in order at their cadences, logging at the step they were called, stopping
a run finished, their state through checkpoints; and info keys logged at episode ends. On the
fake run of `fake_run.py` (3 sub-environments, 30 steps; episodes of 4 steps, return 4, end
at 12 and 24; evaluations at 12, 21, 30; checkpoints at 9, 15, 21, 30; logs at 6, 12, 15, 21,
27, 30), then one real run that EarlyStopping ends."""

import json
import os

import numpy as np
import pytest

import experiments
from framework.callbacks import Callback, EarlyStopping
from framework.drivers.driver import Driver
from framework.loop import Evaluation, InfoKeyError
from framework.runner import Runner, Stopped
from framework.storage.checkpointing import CheckpointMismatchError, complete_steps
from framework.storage.event_reader import read_scalars
from tests.experiments import cli
from tests.framework.fake_run import (
    CountingEnv,
    ScriptedAgent,
    crossings,
    make_runner,
    progress_table,
)
from tests.runs import train

VECTOR_STEPS = list(range(3, 31, 3))


@pytest.fixture(autouse=True)
def _no_script():
    yield
    ScriptedAgent.script = None


class Recorder(Callback):
    """Records each call as (hook, env step)."""

    def __init__(self, every_steps=None):
        self.every_steps = every_steps
        self.calls = []

    def on_start(self, run):
        self.calls.append(("start", run.env_steps))

    def on_step(self, run):
        self.calls.append(("step", run.env_steps))

    def on_evaluation(self, run, evaluation):
        assert evaluation.step == run.env_steps and run.evaluation is evaluation
        self.calls.append(("evaluation", run.env_steps))

    def on_checkpoint(self, run):
        self.calls.append(("checkpoint", run.env_steps))

    def on_end(self, run):
        self.calls.append(("end", run.env_steps))


def _expected_calls(steps) -> list[tuple[str, int]]:
    """At each vector step: the evaluation's hook, then on_step, then the checkpoint's."""
    calls = [("start", 0)]
    for step in VECTOR_STEPS:
        calls += [("evaluation", step)] if step in crossings(10) else []
        calls += [("step", step)] if step in steps else []
        calls += [("checkpoint", step)] if step in crossings(7) else []
    return [*calls, ("end", 30)]


def test_hooks_are_called_in_order_at_their_cadences_and_change_no_number(tmp_path):
    every, fifth, never = Recorder(1), Recorder(5), Recorder()
    runner = make_runner(tmp_path / "hooked", callbacks=[every, fifth, never])
    runner.run()
    runner.close()
    assert every.calls == _expected_calls(VECTOR_STEPS)
    assert fifth.calls == _expected_calls(crossings(5)) and crossings(5) == [6, 12, 15, 21, 27, 30]
    assert never.calls == _expected_calls([])
    # The advances that stop at each vector step for them train exactly as without callbacks.
    plain = make_runner(tmp_path / "plain")
    plain.run()
    plain.close()
    assert runner.state == plain.state
    assert runner.agent.state() == plain.agent.state()
    hooked, unhooked = read_scalars(tmp_path / "hooked"), read_scalars(tmp_path / "plain")
    assert hooked.keys() == unhooked.keys()
    for tag in ("train/loss", "train/episode_return", "eval/episode_return"):
        assert hooked[tag] == unhooked[tag], tag


class EpisodeWatcher(Callback):
    """Records the episodes and infos each on_step sees."""

    every_steps = 5

    def __init__(self):
        self.seen = []

    def on_step(self, run):
        ended = run.ended_episodes
        final = run.infos.get("_final_info")
        self.seen.append(
            (run.env_steps, run.episodes, ended.returns.tolist(), ended.lengths.tolist(), final)
        )


def test_on_step_sees_the_episodes_ended_since_its_last_call_and_the_last_steps_infos(tmp_path):
    watcher = EpisodeWatcher()
    runner = make_runner(tmp_path, callbacks=[watcher])
    runner.run()
    runner.close()
    three = [4.0, 4.0, 4.0]
    ended = [(step, episodes, returns) for step, episodes, returns, _, _ in watcher.seen]
    assert ended == [
        (6, 0, []),
        (12, 3, three),
        (15, 3, []),
        (21, 3, []),
        (27, 6, three),
        (30, 6, []),
    ]
    assert watcher.seen[1][3] == [4, 4, 4]  # lengths
    # The info of the vector step at 12, in which every sub-environment ended its episode.
    assert watcher.seen[1][4].tolist() == [True, True, True]
    assert [seen[4] for seen in watcher.seen if seen[0] != 12] == [None] * 5


class Logger(Callback):
    """Logs the episodes so far every 4 steps, and twice each evaluation's return."""

    every_steps = 4

    def on_step(self, run):
        run.log({"custom/episodes": run.episodes})

    def on_evaluation(self, run, evaluation):
        run.log({"custom/double_return": 2 * evaluation.mean_return})


def test_logged_scalars_go_to_tensorboard_and_progress_csv_at_their_step(tmp_path):
    make_runner(tmp_path, callbacks=[Logger()]).run()
    scalars = read_scalars(tmp_path)
    assert crossings(4) == [6, 9, 12, 18, 21, 24, 30]
    assert scalars["custom/episodes"] == [
        (6, 0),
        (9, 0),
        (12, 3),
        (18, 3),
        (21, 3),
        (24, 6),
        (30, 6),
    ]
    assert scalars["custom/double_return"] == [(12, 8.0), (21, 8.0), (30, 8.0)]
    rows = progress_table(tmp_path)
    # A row per step that logged: the run's (6, 12, 15, 21, 27, 30) and the callback's.
    assert [int(row["step"]) for row in rows] == [6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert [row["custom/episodes"] for row in rows] == ["0", "0", "3", "", "3", "3", "6", "", "6"]
    assert rows[1] == {**dict.fromkeys(rows[1], ""), "step": "9", "custom/episodes": "0"}


class LogsAtStart(Callback):
    def on_start(self, run):
        run.log({"custom/x": 1.0})


class LogsARunTag(Callback):
    every_steps = 5  # at the log steps, where the run logs train/episodes

    def on_step(self, run):
        run.log({"train/episodes": 0.0})


class LogsText(Callback):
    every_steps = 1

    def on_step(self, run):
        run.log({"custom/x": "many"})


@pytest.mark.parametrize(
    ("callback", "error", "message"),
    [
        (LogsAtStart(), RuntimeError, "LogsAtStart called run.log in on_start: logging is for"),
        (LogsARunTag(), ValueError, "logged train/episodes at a step where the run logs it"),
        (LogsText(), ValueError, "LogsText logged 'custom/x' = 'many', not a number"),
    ],
)
def test_a_log_that_would_not_resume_exactly_or_is_not_a_number_is_refused(
    tmp_path, callback, error, message
):
    with pytest.raises(error, match=message):
        make_runner(tmp_path, callbacks=[callback]).run()


class Stopper(Callback):
    """Stops the run once 6 episodes ended, and again at a later start."""

    every_steps = 1

    def __init__(self):
        self.stopped_at = None
        self.ended = False

    def on_start(self, run):
        if self.stopped_at is not None:
            run.stop(f"stopped at {self.stopped_at} already")

    def on_step(self, run):
        if run.episodes >= 6:
            self.stopped_at = run.env_steps
            run.stop(f"{run.episodes} episodes")

    def on_end(self, run):
        self.ended = True

    def state(self):
        return {"stopped_at": self.stopped_at}

    def load_state(self, state):
        self.stopped_at = state["stopped_at"]


def test_a_stop_ends_the_run_finished_and_checkpointed_and_a_restored_state_stops_it_again(
    tmp_path, caplog
):
    caplog.set_level("INFO")
    stopper = Stopper()
    runner = make_runner(tmp_path, callbacks=[stopper])
    assert runner.run() == [(12, 4.0), (21, 4.0)]
    runner.close()
    assert runner.state.env_steps == 24 and stopper.ended
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 24
    assert (
        "Stopped by the callback Stopper: 6 episodes, at step 24: the run ends here" in caplog.text
    )
    last = progress_table(tmp_path)[-1]  # the run's progress at its end, as at num_steps
    assert last["step"] == "24" and last["train/mean_episode_return"] == "4"
    assert last["train/skipped_nonfinite_steps"] == "0"
    caplog.clear()
    again = Stopper()
    later = make_runner(tmp_path, callbacks=[again])
    assert later.run() == [] and later.state.env_steps == 24
    later.close()
    assert again.ended
    assert (
        "Stopped by the callback Stopper: stopped at 24 already, at environment step 24 before "
        "training; nothing to train." in caplog.text
    )


def test_early_stopping_stops_after_patience_evaluations_without_improvement(tmp_path):
    # Every evaluation returns 4.0: the first sets the best, the next two do not improve on it.
    early = EarlyStopping(patience=2)
    runner = make_runner(tmp_path, num_steps=60, callbacks=[early])
    assert runner.run() == [(12, 4.0), (21, 4.0), (30, 4.0)]
    runner.close()
    assert early.state() == {"best": 4.0, "without_improvement": 2}
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 30
    # A later start stops before training; with more patience it trains to one more.
    same = make_runner(tmp_path, num_steps=60, callbacks=[EarlyStopping(patience=2)])
    assert same.run() == [] and same.state.env_steps == 30
    same.close()
    patient = EarlyStopping(patience=3)
    more = make_runner(tmp_path, num_steps=60, callbacks=[patient])
    assert more.run() == [(42, 4.0)]
    more.close()
    assert patient.state() == {"best": 4.0, "without_improvement": 3}


def test_early_stopping_counts_only_improvements_beyond_min_delta():
    early = EarlyStopping(patience=2, min_delta=0.5)

    class Run:
        stopped = None

        def stop(self, reason):
            self.stopped = reason

    run = Run()
    for mean_return in (10.0, 10.5, 11.2, 11.6):  # 10.5 and 11.6 are within 0.5 of the best
        early.on_evaluation(run, _evaluation(mean_return))
        assert run.stopped is None
    assert early.state() == {"best": 11.2, "without_improvement": 1}
    early.on_evaluation(run, _evaluation(11.0))
    assert run.stopped == (
        "2 evaluations in a row without raising the best eval return 11.2 by more than 0.5 "
        "(patience 2)"
    )


def _evaluation(mean_return: float) -> Evaluation:
    return Evaluation(0, mean_return, 0.0, 1.0, (mean_return,), (1,))


class SuccessEnv(CountingEnv):
    """CountingEnv whose info says at an episode's end whether it succeeded: every other one
    of each sub-environment does, the first included."""

    def __init__(self):
        self.episodes = 0

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        if terminated:
            self.episodes += 1
            info = {"is_success": self.episodes % 2 == 1}
        return observation, reward, terminated, truncated, info


class Counter(Callback):
    """Counts the episodes and sums their returns and successes, logging them every 5 steps;
    reads the latest evaluation."""

    every_steps = 5

    def __init__(self):
        self.episodes, self.returns, self.successes, self.evaluations = 0, 0.0, 0.0, []

    def on_step(self, run):
        ended = run.ended_episodes
        self.episodes += len(ended.returns)
        self.returns += float(ended.returns.sum())
        self.successes += float(ended.infos.get("is_success", np.zeros(0)).sum())
        self.evaluations.append(None if run.evaluation is None else run.evaluation.step)
        run.log({"custom/episodes": self.episodes, "custom/successes": self.successes})

    def state(self):
        return {
            "episodes": self.episodes,
            "returns": self.returns,
            "successes": self.successes,
            "evaluations": self.evaluations,
        }

    def load_state(self, state):
        self.episodes, self.returns = state["episodes"], state["returns"]
        self.successes, self.evaluations = state["successes"], state["evaluations"]


def _counted_run(folder, **overrides):
    settings = dict(env_factory=SuccessEnv, info_keys=["is_success"], log_interval=10)
    return make_runner(folder, callbacks=[Counter()], **{**settings, **overrides})


def _without_time(rows):
    return [{k: v for k, v in row.items() if k != "train/steps_per_second"} for row in rows]


def test_a_callbacks_state_and_pending_episodes_resume_exactly_after_a_signal(tmp_path):
    whole = _counted_run(tmp_path / "whole")
    whole.run()
    whole.close()
    stopped = _counted_run(tmp_path / "stopped")

    def signal_at_24(steps):  # the episodes ended at 24 are pending: Counter's next call is 27
        if steps == 24:
            stopped.stop_requested = "SIGTERM"

    ScriptedAgent.script = signal_at_24
    with pytest.raises(Stopped, match="at environment step 24"):
        stopped.run()
    ScriptedAgent.script = None
    stopped.close()
    assert stopped._hooks.callbacks[0].episodes == 3
    resumed = _counted_run(tmp_path / "stopped")
    assert resumed.restore() == 24
    resumed.run()
    resumed.close()
    counter, expected = resumed._hooks.callbacks[0], whole._hooks.callbacks[0]
    assert counter.state() == expected.state()
    assert expected.state() == {
        "episodes": 6,
        "returns": 24.0,
        "successes": 3.0,
        "evaluations": [None, 12, 12, 21, 21, 30],  # on_step at 6, 12, 15, 21, 27, 30
    }
    scalars, expected_scalars = (read_scalars(tmp_path / name) for name in ("stopped", "whole"))
    assert scalars.keys() == expected_scalars.keys()
    for tag in scalars.keys() - {"train/steps_per_second"}:
        assert scalars[tag] == expected_scalars[tag], tag
    rows = _without_time(progress_table(tmp_path / "whole"))
    assert _without_time(progress_table(tmp_path / "stopped")) == rows


def test_info_keys_are_averaged_like_the_return_in_tensorboard_and_progress_csv(tmp_path):
    make_runner(tmp_path, env_factory=SuccessEnv, info_keys=["is_success"]).run()
    # Each sub-environment's first episode (ended at 12) succeeded, its second (24) did not.
    assert read_scalars(tmp_path)["train/episode_is_success"] == [(12, 1.0), (24, 0.0)]
    rows = {row["step"]: row["train/mean_episode_is_success"] for row in progress_table(tmp_path)}
    assert rows == {"6": "", "12": "1", "15": "", "21": "", "27": "0", "30": ""}


def test_an_info_key_an_episode_lacks_is_one_error_naming_the_keys_it_has(tmp_path):
    runner = make_runner(tmp_path, env_factory=SuccessEnv, info_keys=["success"])
    with pytest.raises(InfoKeyError) as error:
        runner.run()
    assert str(error.value) == (
        "Runner.info_keys: an episode ended without 'success' in its last step's info, whose "
        "keys are ['is_success']. Log a key the environment puts in the info of an episode's "
        "last step, or leave it out of Runner.info_keys."
    )


def test_a_driver_that_reports_no_infos_refuses_info_keys():
    class Elsewhere:  # a driver whose environments step in other processes
        pass

    with pytest.raises(ValueError, match=r"Elsewhere does not report its environments' infos"):
        Driver.log_info_keys(Elsewhere(), ("is_success",))
    Driver.log_info_keys(Elsewhere(), ())  # none asked: nothing to refuse


def _saved_paths(folder) -> list[str]:
    directory = os.path.join(str(folder), "checkpoints")
    with open(os.path.join(directory, f"ckpt-{complete_steps(directory)[0]}.values.json")) as f:
        saved = json.load(f)
    return [*saved["trackables"], *saved["arrays"], *saved["values"]]


def test_callbacks_are_in_the_checkpoint_only_when_bound_and_must_match_at_a_resume(tmp_path):
    make_runner(tmp_path / "none", num_steps=9).run()
    assert not [path for path in _saved_paths(tmp_path / "none") if path.startswith("callbacks")]
    make_runner(tmp_path / "one", num_steps=9, callbacks=[Counter()]).run()
    assert "callbacks" in _saved_paths(tmp_path / "one")

    other = make_runner(tmp_path / "one", callbacks=[Counter(), Recorder()])
    with pytest.raises(CheckpointMismatchError, match=r"does not fit this run's config: it was "):
        other.restore()
    with pytest.raises(CheckpointMismatchError, match=r"callbacks \(a JSON value saved, nothing"):
        make_runner(tmp_path / "one").restore()
    with pytest.raises(CheckpointMismatchError, match=r"callbacks \(nothing saved, a JSON value"):
        make_runner(tmp_path / "none", callbacks=[Counter()]).restore()


class Outside(Callback):
    """Keeps nothing in the checkpoints (a search's pruner: its record is the sweep's)."""

    in_checkpoint = False

    def __init__(self, every_steps=None):
        self.every_steps, self.evaluations = every_steps, []

    def on_evaluation(self, run, evaluation):
        self.evaluations.append(evaluation.step)


def test_a_callback_kept_out_of_checkpoints_need_not_be_there_at_a_resume(tmp_path):
    outside = Outside()
    make_runner(tmp_path / "alone", num_steps=9, callbacks=[outside]).run()
    assert outside.evaluations == [9]  # called as any callback
    assert _saved_paths(tmp_path / "alone") == _saved_paths_without_callbacks(tmp_path)
    assert make_runner(tmp_path / "alone").restore() == 9  # resumed without it
    make_runner(tmp_path / "beside", num_steps=9, callbacks=[Outside(), Counter()]).run()
    assert make_runner(tmp_path / "beside", callbacks=[Counter()]).restore() == 9
    with pytest.raises(ValueError, match=r"in_checkpoint = False and every_steps = 5: the"):
        make_runner(tmp_path / "stepping", callbacks=[Outside(every_steps=5)])


def _saved_paths_without_callbacks(tmp_path) -> list[str]:
    make_runner(tmp_path / "none", num_steps=9).run()
    return _saved_paths(tmp_path / "none")


class Unsavable(Callback):
    def state(self):
        return {"when": object()}


@pytest.mark.parametrize(
    ("callbacks", "error", "message"),
    [
        ([Unsavable()], TypeError, r"Unsavable.state\(\) holds <object object"),
        (["EarlyStopping"], ValueError, "Runner.callbacks: 'EarlyStopping' is not a Callback"),
        ([Recorder(every_steps=0)], ValueError, "Recorder.every_steps must be None .* got 0"),
    ],
)
def test_a_callback_that_cannot_work_fails_before_training(tmp_path, callbacks, error, message):
    with pytest.raises(error, match=message):
        make_runner(tmp_path, callbacks=callbacks).run()
    assert not os.path.exists(os.path.join(tmp_path, "checkpoints"))


SHORT_DQN = [
    "Runner.num_steps = 3000",
    "Runner.eval_interval = 500",
    "Runner.eval_episodes = 2",
    "Runner.checkpoint_interval = 500",
    "ReplaySchedule.learning_starts = 500",
    "ReplaySchedule.train_freq = 100",
    "ReplaySchedule.gradient_steps = 4",
]


def test_early_stopping_ends_a_real_run_bound_in_gin_or_given_in_python(tmp_path):
    # No evaluation beats the first by 1000: the second ends the run, at 1000 of 3000 steps.
    bound = train(
        tmp_path / "gin",
        ["gin_configs/dqn/cartpole.gin"],
        [
            *SHORT_DQN,
            "Runner.callbacks = [@EarlyStopping()]",
            "EarlyStopping.patience = 1",
            "EarlyStopping.min_delta = 1000",
        ],
    )
    assert bound.state.env_steps == 1000
    assert [step for step, _ in bound.eval_returns] == [500, 1000]
    assert max(complete_steps(str(tmp_path / "gin" / "checkpoints"))) == 1000
    given = experiments.train(
        ["gin_configs/dqn/cartpole.gin"],
        SHORT_DQN,
        str(tmp_path / "python"),
        callbacks=[EarlyStopping(patience=1, min_delta=1000)],
    )
    assert given.env_steps == 1000
    assert given.eval_returns == bound.eval_returns  # the same run, the same seed
    assert isinstance(given.runner, Runner)


COUNTER_GIN = """import tests.episode_counter
include 'gin_configs/dqn/cartpole.gin'
Runner.callbacks = [@EpisodeCounter()]
EpisodeCounter.stop_at = 110
"""
COUNTER_BINDINGS = [
    "Runner.num_steps = 5000",
    "Runner.checkpoint_interval = 1500",
    "Runner.eval_interval = 1000",
    "Runner.eval_episodes = 3",
    "Runner.log_interval = 500",
    "ReplaySchedule.train_freq = 128",
    "ReplaySchedule.gradient_steps = 16",
]


def _callbacks_state(folder) -> dict:
    """The callbacks' part of the run's newest checkpoint."""
    directory = os.path.join(str(folder), "checkpoints")
    with open(os.path.join(directory, f"ckpt-{complete_steps(directory)[0]}.values.json")) as f:
        return json.loads(json.load(f)["values"]["callbacks"])


@pytest.mark.process
def test_a_stateful_callback_survives_sigkill_with_the_state_of_the_uninterrupted_run(tmp_path):
    """Its module imported by the gin file in the run's own process (tests/episode_counter.py),
    it counts the episodes and stops the run at 110 (near step 3000), after the kill."""
    gin_file = str(tmp_path / "counter.gin")
    with open(gin_file, "w") as f:
        f.write(COUNTER_GIN)
    uninterrupted = cli.start(tmp_path / "uninterrupted", gin_file, COUNTER_BINDINGS)
    killed = cli.start(tmp_path / "killed", gin_file, COUNTER_BINDINGS)
    cli.kill_after_first_checkpoint(killed, tmp_path / "killed", delay=0.1)
    stderr = cli.finish(cli.start(tmp_path / "killed", gin_file, COUNTER_BINDINGS))
    cli.finish(uninterrupted)
    assert "Resumed" in stderr

    expected = _callbacks_state(tmp_path / "uninterrupted")
    assert _callbacks_state(tmp_path / "killed") == expected
    counter = expected["callbacks"][0]
    assert counter["name"] == "EpisodeCounter" and counter["state"]["episodes"] >= 110
    step = counter["state"]["stopped_at"]
    assert 1500 < step < 5000
    assert (
        f"Stopped by the callback EpisodeCounter: {counter['state']['episodes']} episodes "
        f"counted, at step {step}: the run ends here, finished" in stderr
    )
    scalars, expected_scalars = (read_scalars(tmp_path / n) for n in ("killed", "uninterrupted"))
    for tag in ("custom/episodes", "custom/returns", "train/episode_return", "train/loss"):
        assert scalars[tag] == expected_scalars[tag], tag
    assert scalars["custom/episodes"][-1] == (step, counter["state"]["episodes"])
    assert cli.progress_rows(tmp_path / "killed") == cli.progress_rows(tmp_path / "uninterrupted")
    # Started again, the run is stopped again by the callback's restored state.
    again = cli.finish(cli.start(tmp_path / "killed", gin_file, COUNTER_BINDINGS))
    assert (
        f"Stopped by the callback EpisodeCounter: it stopped the run at step {step}, at "
        f"environment step {step} before training; nothing to train." in again
    )
