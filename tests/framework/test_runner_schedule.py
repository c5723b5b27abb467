"""The runner's schedule with a fake agent on a fake environment (no network, no learner): the
cadences at vector steps, the non-finite policy, and a signal's stop, save and resume."""

import pytest

from framework import runner as runner_module
from framework.agent import Health
from framework.runner import NonFiniteError, Runner, Stopped
from framework.storage.checkpointing import complete_steps
from framework.storage.event_reader import read_scalars
from framework.storage.run_directory import RunDirectory
from tests.framework.fake_run import ScriptedAgent, crossings, make_runner, progress_table


@pytest.fixture(autouse=True)
def _no_script():
    yield
    ScriptedAgent.script = None


def test_cadences_fire_at_the_first_vector_step_crossing_each_multiple(tmp_path):
    runner = make_runner(tmp_path)
    curve = runner.run()
    runner.close()
    assert [step for step, _ in curve] == crossings(10) == [12, 21, 30]
    assert sorted(complete_steps(runner.run_directory.checkpoint_dir)) == crossings(7)
    scalars = read_scalars(tmp_path)
    logged = [step for step, _ in scalars["train/steps_per_second"]]
    assert logged == crossings(5) == [6, 12, 15, 21, 27, 30]
    # One point per vector step in which episodes ended (every 4th: 12, 24), all 3 at once.
    assert scalars["train/episodes_ended"] == [(12, 3.0), (24, 3.0)]
    assert scalars["train/loss"][-1] == (30, 30.0)  # the latest update's metrics, at the log
    assert runner.state.gradient_steps == runner.agent.updates == 5  # every 6 transitions
    assert [value for _, value in curve] == [4.0, 4.0, 4.0]


def test_a_nonfinite_update_stops_the_run_at_its_step_without_a_checkpoint(tmp_path):
    ScriptedAgent.script = lambda steps: (
        Health(gradient_steps=4, applied_updates=3, nonfinite_steps=1, nonfinite_losses=1)
        if steps == 18
        else None
    )
    runner = make_runner(tmp_path)
    with pytest.raises(NonFiniteError) as error:
        runner.run()
    message = str(error.value)
    assert "Non-finite loss at environment step 18: 1 of the 4 gradient steps" in message
    assert "3 were (3 optimizer updates)" in message
    assert "last good checkpoint is at step 15" in message
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 15


def test_skipping_nonfinite_updates_counts_them_and_stops_when_a_whole_interval_is_skipped(
    tmp_path,
):
    ScriptedAgent.script = lambda steps: (
        Health(gradient_steps=1, nonfinite_steps=1) if steps in (6, 24) else None
    )
    # Logs at 12, 21 and 30: one of the two updates of the first and the last interval skipped.
    skipping = make_runner(tmp_path / "some", skip_nonfinite_updates=True, log_interval=10)
    skipping.run()
    assert skipping.state.skipped_nonfinite_steps == 2 and skipping.state.gradient_steps == 5
    assert read_scalars(tmp_path / "some")["train/skipped_nonfinite_steps"][-1] == (30, 2.0)

    ScriptedAgent.script = lambda steps: Health(gradient_steps=1, nonfinite_steps=1)
    failing = make_runner(tmp_path / "all", skip_nonfinite_updates=True)
    with pytest.raises(NonFiniteError, match="1 of the 1 gradient steps in the log interval up"):
        failing.run()
    assert failing.state.env_steps == 6  # the first log step


def test_a_signal_mid_advance_stops_at_that_step_with_a_checkpoint_and_resumes_exactly(tmp_path):
    whole = make_runner(tmp_path / "whole")
    whole.run()
    runner = make_runner(tmp_path / "stopped")

    def signal_at_18(steps):  # inside an advance, between two checkpoints (15, 21)
        if steps == 18:
            runner.stop_requested = "SIGTERM"

    ScriptedAgent.script = signal_at_18
    with pytest.raises(Stopped, match="stopped by SIGTERM at environment step 18"):
        runner.run()
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 18
    ScriptedAgent.script = None
    resumed = make_runner(tmp_path / "stopped")
    assert resumed.restore() == 18
    resumed.run()
    assert resumed.state == whole.state
    assert (resumed.agent.steps, resumed.agent.updates) == (whole.agent.steps, whole.agent.updates)
    assert (
        read_scalars(tmp_path / "stopped")["train/loss"]
        == read_scalars(tmp_path / "whole")["train/loss"]
    )


def test_progress_csv_has_a_row_per_logged_step_with_the_scalars_logged_at_it(tmp_path):
    runner = make_runner(tmp_path)
    runner.run()
    rows = progress_table(tmp_path)
    assert [int(row["step"]) for row in rows] == crossings(5) == [6, 12, 15, 21, 27, 30]
    scalars = read_scalars(tmp_path)
    for row in rows:
        step = int(row["step"])
        for tag, value in row.items():
            if tag == "step" or value == "":
                continue
            if tag.startswith("train/mean_episode_"):  # the episodes since the last row
                continue
            assert float(value) == pytest.approx(dict(scalars[tag])[step], rel=1e-6), tag
    # The evaluation's columns appear at its first step (12), empty where it did not run.
    assert [row["eval/episode_return"] for row in rows] == ["", "4", "", "4", "", "4"]
    # Episodes ended at 12 and 24 (3 each, 4 steps, return 4): the rows after them say so.
    assert [row["train/mean_episode_return"] for row in rows] == ["", "4", "", "", "4", ""]
    assert rows[-1]["train/skipped_nonfinite_steps"] == "0"  # the last row, as TensorBoard's


def test_a_resumed_run_continues_progress_csv_without_a_step_twice(tmp_path):
    make_runner(tmp_path / "whole").run()
    killed = tmp_path / "killed"
    make_runner(killed).run()
    # As if killed after the checkpoint at 15 (9, 15, 21, 28->30): the later ones never were,
    # and a kill cut the last row short.
    for path in (killed / "checkpoints").glob("ckpt-*"):
        if int(path.name.split(".")[0].split("-")[1]) > 15:
            path.unlink()
    with open(RunDirectory(str(killed)).progress_path(), "a") as f:
        f.write("33,0.5,1")
    resumed = make_runner(killed)
    assert resumed.restore() == 15
    resumed.run()
    whole, again = progress_table(tmp_path / "whole"), progress_table(killed)
    assert [row["step"] for row in again] == [row["step"] for row in whole]
    for mine, theirs in zip(again, whole, strict=True):
        del mine["train/steps_per_second"], theirs["train/steps_per_second"]  # time, not data
        assert mine == theirs


def _without_time(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [
        {tag: value for tag, value in row.items() if tag != "train/steps_per_second"}
        for row in rows
    ]


def _progress_lines(caplog) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    return [line.rsplit(" | ", 1)[0] for line in lines]  # without the steps per second


def test_a_signal_between_two_logs_resumes_progress_csv_and_the_progress_line_exactly(
    tmp_path, caplog
):
    caplog.set_level("INFO")
    # Logs at 12, 21 and 30; 3 episodes end at 12 and 3 at 24, between the last two logs.
    make_runner(tmp_path / "whole", log_interval=10).run()
    whole_lines = _progress_lines(caplog)
    runner = make_runner(tmp_path / "stopped", log_interval=10)

    def signal_at_24(steps):  # right after 3 episodes ended
        if steps == 24:
            runner.stop_requested = "SIGTERM"

    ScriptedAgent.script = signal_at_24
    with pytest.raises(Stopped, match="at environment step 24"):
        runner.run()
    ScriptedAgent.script = None
    assert runner.state.interval_episodes == 3 and runner.state.recent_returns == [4.0] * 6
    caplog.clear()
    resumed = make_runner(tmp_path / "stopped", log_interval=10)
    assert resumed.restore() == 24
    resumed.run()
    whole = _without_time(progress_table(tmp_path / "whole"))
    assert whole[-1]["train/mean_episode_return"] == "4"  # the episodes of step 24
    assert _without_time(progress_table(tmp_path / "stopped")) == whole
    assert (
        _progress_lines(caplog) == whole_lines[-1:] == ["step 30/30 | return (last 6 episodes) 4.0"]
    )


def test_a_checkpoint_without_the_progress_interval_restores_with_its_defaults(
    tmp_path, monkeypatch, caplog
):
    """Checkpoints of the same format written before the runner saved the episodes since the
    last log lack those fields: they restore, the next row averaging from the resume on."""
    runner = make_runner(tmp_path, log_interval=10)

    def older_layout():
        state = Runner._checkpoint_state(runner)
        state["runner"] = {
            k: v for k, v in state["runner"].items() if k not in runner_module._PROGRESS_FIELDS
        }
        return state

    def signal_at_24(steps):  # right after 3 episodes ended, logged at 30
        if steps == 24:
            runner.stop_requested = "SIGTERM"

    monkeypatch.setattr(runner, "_checkpoint_state", older_layout)
    ScriptedAgent.script = signal_at_24
    with pytest.raises(Stopped):
        runner.run()
    ScriptedAgent.script = None
    caplog.set_level("INFO")
    resumed = make_runner(tmp_path, log_interval=10)
    assert resumed.restore() == 24
    assert "written before the runner saved the episodes since the last log" in caplog.text
    assert resumed.state.interval_episodes == 0 and resumed.state.recent_returns == []
    assert resumed.state.episodes == 6  # what the checkpoint held, as before
    resumed.run()
    assert (
        progress_table(tmp_path)[-1]["train/mean_episode_return"] == ""
    )  # the 3 before it unknown
    again = make_runner(tmp_path, log_interval=10)
    assert again.restore() == 30  # the newer checkpoint, with the fields
    again.close()


def test_a_run_ends_at_the_first_evaluation_that_reaches_stop_at_return(tmp_path, caplog):
    caplog.set_level("INFO")
    runner = make_runner(tmp_path, stop_at_return=4.0)  # every evaluation returns 4.0
    assert runner.run() == [(12, 4.0)]
    runner.close()
    assert runner.state.env_steps == 12
    assert max(complete_steps(runner.run_directory.checkpoint_dir)) == 12  # checkpointed there
    assert "Reached Runner.stop_at_return = 4 at step 12 (eval return 4.0)" in caplog.text
    assert progress_table(tmp_path)[-1]["step"] == "12"
    # A later start sees it finished: it trains nothing.
    caplog.clear()
    again = make_runner(tmp_path, stop_at_return=4.0)
    assert again.run() == [] and again.state.env_steps == 12
    again.close()
    assert "This run reached Runner.stop_at_return = 4 (its best eval return is 4.0)" in caplog.text
    # Out of reach (or unbound), it trains on to Runner.num_steps.
    further = make_runner(tmp_path, stop_at_return=4.5)
    assert further.run() == [(21, 4.0), (30, 4.0)]
    further.close()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "475", True])
def test_stop_at_return_must_be_a_finite_number(tmp_path, bad):
    with pytest.raises(ValueError, match=r"Runner\.stop_at_return must be a finite number"):
        make_runner(tmp_path, stop_at_return=bad)


def test_the_progress_line_counts_episodes_in_the_singular_and_the_plural(tmp_path, caplog):
    caplog.set_level("INFO")
    make_runner(tmp_path, num_envs=1, num_steps=10, log_interval=5).run()  # episodes end at 4, 8
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert lines[0].startswith("step 5/10 | return (last 1 episode) 4.0 |"), lines
    assert lines[1].startswith("step 10/10 | return (last 2 episodes) 4.0 |"), lines
