"""What a run tells a researcher: HParams that compare runs, schedules in environment steps,
the console's evaluations and summary, a recorded command that reproduces the run."""

import glob
import json
import logging
import os
import shlex
import subprocess

import pytest
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

import experiments
from framework.storage.event_reader import read_events, read_scalars
from tests.experiments import cli

BANDIT = ["gin_configs/reinforce/bandit.gin"]
SHORT = ["Runner.num_steps = 200", "Runner.eval_interval = 100", "Runner.eval_episodes = 3"]


def _hparams_records(base_dir) -> list[plugin_data_pb2.HParamsPluginData]:
    records = []
    for path in glob.glob(os.path.join(str(base_dir), "*tfevents*")):  # the run folder itself
        for event in read_events(path)[0]:
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "hparams":
                    content = value.metadata.plugin_data.content
                    records.append(plugin_data_pb2.HParamsPluginData.FromString(content))
    return records


def _tensorboard_experiment(logdir) -> api_pb2.Experiment:
    """The HParams dashboard's columns as TensorBoard computes them for `logdir` (its plugin's
    own GetExperiment, in this process)."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import get_experiment, hparams_plugin

    events = multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(str(logdir))
    events.Reload()
    provider = data_provider.MultiplexerDataProvider(events, str(logdir))
    plugin = hparams_plugin.HParamsPlugin(
        base_plugin.TBContext(logdir=str(logdir), multiplexer=events, data_provider=provider)
    )
    request = api_pb2.GetExperimentRequest()
    return get_experiment.Handler(context.RequestContext(), plugin._context, "", request).run()


def test_hparams_group_the_seeds_of_a_trial_name_it_and_show_what_differs_first(tmp_path):
    runs = {  # a and b: one trial, two seeds; c another rate; d no baseline, another cadence
        "a": (1, 0.01, []),
        "b": (2, 0.01, []),
        "c": (1, 0.003, []),
        "d_seed4_20261125-120000-000001": (
            4,
            0.01,
            ["ReinforceAgent.use_baseline = False", "Runner.log_interval = 50"],
        ),
    }
    for name, (seed, rate, bindings) in runs.items():
        rate_binding = f"optimizers.Adam.learning_rate = {rate}"
        experiments.train(BANDIT, [*SHORT, rate_binding, *bindings], str(tmp_path / name), seed)
    groups = {}
    for name, (_, rate, _) in runs.items():
        records = _hparams_records(tmp_path / name)
        assert not [r for r in records if r.HasField("experiment")]  # TensorBoard makes them
        (session,) = [r.session_start_info for r in records if r.HasField("session_start_info")]
        groups[name] = session.group_name
        hparams = dict(session.hparams)
        assert hparams["trial"].string_value == name.split("_seed")[0]  # the folder's, readable
        assert hparams["Adam.learning_rate"].number_value == pytest.approx(rate)
        assert hparams["MultiArmedBanditEnv.stds"].number_value == 0.5
        assert hparams["Runner.agent"].string_value == "@ReinforceAgent"
        assert hparams["Runner.num_steps"].string_value == "200"  # an integer, not 200.000
        # Only what the config binds: no Keras defaults such as Adam.beta_1, not the seed, and
        # not the cadences (which no more make a trial than the seed does).
        assert "Adam.beta_1" not in hparams and "Runner.seed" not in hparams
        assert "Runner.eval_interval" not in hparams and "Runner.log_interval" not in hparams
        evals = read_scalars(tmp_path / name)
        best = evals["eval/best_episode_return"]
        returns = [value for _, value in evals["eval/episode_return"]]
        assert [value for _, value in best] == pytest.approx(
            [max(returns[: i + 1]) for i in range(len(returns))]
        )
    # The trial key, whatever the folders are called: the seeds of a and b group together.
    assert groups["a"] == groups["b"] != groups["c"]
    assert (
        groups["a"]
        == json.loads((tmp_path / "a" / "metadata.json").read_text())["starts"][0]["trial"]
    )
    # The columns, as TensorBoard makes them for these four runs: the bindings whose values
    # differ between them first (its dashboard shows the first five), then the others; the
    # log interval d changed is a cadence, not among them.
    experiment = _tensorboard_experiment(tmp_path)
    columns = [(info.name, info.differs) for info in experiment.hparam_infos]
    differing = ["Adam.learning_rate", "ReinforceAgent.use_baseline", "trial"]
    assert columns[:3] == [(name, True) for name in differing]
    assert not [name for name, differs in columns[3:] if differs]
    types = {info.name: info.type for info in experiment.hparam_infos}
    assert types["Adam.learning_rate"] == api_pb2.DATA_TYPE_FLOAT64  # filtered as an interval
    assert types["Runner.num_steps"] == api_pb2.DATA_TYPE_STRING  # shown as 200
    metrics = [info.name.tag for info in experiment.metric_infos]
    assert metrics[:4] == [  # the first the dashboard shows
        "eval/best_episode_return",
        "eval/episode_length",
        "eval/episode_return",
        "eval/episode_return_std",
    ]


def test_a_staircase_in_environment_steps_changes_the_rate_at_those_steps(tmp_path):
    # REINFORCE on the bandit updates after every pull; the rate halves every 150 pulls.
    schedule = [
        "optimizers.Adam.learning_rate = @optimizers.ExponentialDecay()",
        "optimizers.ExponentialDecay.initial_learning_rate = 0.001",
        "optimizers.ExponentialDecay.decay_steps = 150",
        "optimizers.ExponentialDecay.decay_rate = 0.5",
        "optimizers.ExponentialDecay.staircase = True",
        "Runner.log_interval = 50",
        "Runner.num_steps = 400",
    ]
    result = experiments.train(BANDIT, [*SHORT[1:], *schedule], str(tmp_path))
    logged = dict(read_scalars(tmp_path)["train/learning_rate"])
    # At step s the update uses 0.001 * 0.5^floor(s / 150): the first update at or after 150
    # (the one at step 150) already uses the halved rate.
    expected = {step: 0.001 * 0.5 ** (step // 150) for step in range(50, 401, 50)}
    assert logged == pytest.approx(expected)
    assert result.runner.agent.schedules() == [
        "learning rate (train/learning_rate): ExponentialDecay(initial_learning_rate=0.001, "
        "decay_steps=150, decay_rate=0.5, "
        "staircase=True) counting environment steps"
    ]


def test_console_shows_evaluations_a_summary_and_that_a_finished_run_is_finished(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    experiments.train(BANDIT, SHORT, str(tmp_path))
    lines = [record.getMessage() for record in caplog.records]
    assert any(line.startswith("eval at step 100: return ") for line in lines), lines
    assert any(
        line.startswith("Done: final eval return") and str(tmp_path) in line for line in lines
    )
    caplog.clear()
    again = experiments.train(BANDIT, SHORT, str(tmp_path))
    assert again.eval_returns == []
    (finished,) = [r.getMessage() for r in caplog.records if "finished at" in r.getMessage()]
    assert "Runner.num_steps = 400" in finished  # how to train it longer


def test_default_folder_names_the_environment_a_binding_changed():
    acrobot = experiments.config_name(["gin_configs/dqn/cartpole.gin"], "Acrobot-v1")
    named = experiments.default_base_dir(acrobot, 3)
    assert os.path.basename(named).startswith("dqn_cartpole_Acrobot-v1_seed3_")
    cartpole = experiments.config_name(["gin_configs/dqn/cartpole.gin"], "CartPole-v1")
    assert os.path.basename(experiments.default_base_dir(cartpole, None)).startswith(
        "dqn_cartpole_2"
    )


def test_the_recorded_command_pasted_elsewhere_reproduces_the_run(tmp_path):
    original = tmp_path / "original"
    experiments.train(BANDIT, [*SHORT, "optimizers.Adam.learning_rate = 0.02"], str(original), 5)
    (start,) = json.loads((original / "metadata.json").read_text())["starts"]
    assert start["working_folder"] == os.getcwd()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pasted = f"{start['command']} --base_dir={shlex.quote(str(tmp_path / 'copy'))}"
    completed = subprocess.run(
        pasted, shell=True, cwd=elsewhere, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert (tmp_path / "copy" / "config.gin").read_text() == (original / "config.gin").read_text()
    copy, expected = read_scalars(tmp_path / "copy"), read_scalars(original)
    for tag in ("train/episode_return", "eval/episode_return", "train/loss"):
        assert copy[tag] == expected[tag], tag
    assert cli.REPO_ROOT not in str(elsewhere)


def test_a_binding_of_an_included_file_made_moot_by_an_override_is_not_unused(tmp_path, caplog):
    """Including dqn/cartpole.gin (a hard target copy) and switching to a soft update makes
    the included HardUpdate.period moot: yours to override, not a mistake of yours."""
    config = tmp_path / "soft.gin"
    config.write_text(
        "include 'gin_configs/dqn/cartpole.gin'\n"
        "DQNAgent.target_updater = @SoftUpdate()\n"
        "SoftUpdate.tau = 0.01\n"
    )
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.INFO, logger="absl")  # whatever level an earlier test left it at
    prepared = experiments.build([str(config)], ["HardUpdate.period = 7"], str(tmp_path / "r"))
    prepared.runner.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # The command line's own HardUpdate.period is yours: that one is warned about.
    assert any("Binding HardUpdate.period was never used" in m for m in warned), warned
    caplog.clear()
    prepared = experiments.build([str(config)], [], str(tmp_path / "r"), strict=True)
    prepared.runner.close()  # --strict passes: nothing of yours is unused
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not any("never used" in m for m in warned), warned
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("HardUpdate.period, of an included file, is not used" in m for m in said), said


def test_a_bandit_run_stops_at_its_return_and_writes_progress_csv(tmp_path):
    # Any evaluation reaches -10 (the arms pay 0.2-0.7 on average): the first one ends the run.
    result = experiments.train(BANDIT, [*SHORT, "Runner.stop_at_return = -10.0"], str(tmp_path))
    assert result.env_steps == 100 and [step for step, _ in result.eval_returns] == [100]
    with open(tmp_path / "progress.csv") as f:
        header, *rows = f.read().splitlines()
    assert header.startswith("step,train/loss,") and "eval/episode_return" in header
    assert [row.split(",")[0] for row in rows] == ["100"]  # the bandit logs every 100 steps
    assert experiments.train(BANDIT, SHORT, str(tmp_path)).env_steps == 200  # unbound: on
