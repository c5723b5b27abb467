"""`python -m experiments.configs`: every shipped gin file and its header's first sentence; and
every one builds."""

import glob
import os

import pytest

import experiments
from experiments import configs


def test_every_shipped_gin_file_is_listed_with_a_whole_first_sentence(capsys):
    assert configs.main(["configs"]) == 0
    printed = capsys.readouterr().out
    on_disk = glob.glob(os.path.join(configs.CONFIG_DIR, "**", "*.gin"), recursive=True)
    listed = configs.shipped()
    assert len(listed) == len(on_disk) > 10
    for path, text in listed:
        assert f"  {path} " in printed
        assert text.endswith("."), (path, text)  # never cut mid-sentence
        assert os.path.isfile(os.path.join(configs.CONFIG_DIR, path))  # as --gin_file takes it
    described = dict(listed)
    assert described["dqn/cartpole.gin"] == "DQN on CartPole-v1: the framework's default config."
    # Asides (a path, a list, a citation) go; a formula in parentheses stays.
    assert described["dqn/cartpole_rlzoo.gin"].startswith(
        "DQN on CartPole-v1 with RL-Baselines3-Zoo's tuned hyperparameters, for side-by-side"
    )
    assert "target = (1 - tau) * target" in described["dqn/cartpole_soft_target.gin"]


def test_a_gin_file_without_a_header_has_no_description(tmp_path):
    path = tmp_path / "bare.gin"
    path.write_text("Runner.num_steps = 10\n# a comment later on\n")
    assert configs.description(str(path)) == ""


def test_arguments_are_refused_in_one_line(capsys):
    assert configs.main(["configs", "dqn"]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_the_rainbow_ablation_configs_change_cartpole_gin_by_their_parts_from_any_folder(
    tmp_path, monkeypatch
):
    """Each includes dqn/cartpole.gin, which includes cartpole_common.gin: both resolve from
    a folder outside the repository, and each file changes only its own part."""
    import gin

    import agents  # noqa: F401  (registers the parts)
    import framework.runner  # noqa: F401
    from framework import config

    monkeypatch.chdir(tmp_path)
    changed = {
        "dqn/cartpole_per.gin": {"DQNAgent.replay"},
        "dqn/cartpole_c51.gin": {"DQNAgent.td_target", "DQNAgent.loss", "networks.mlp.support"},
    }
    changed["dqn/cartpole_rainbow.gin"] = {*changed["dqn/cartpole_per.gin"]}
    changed["dqn/cartpole_rainbow.gin"] |= {
        *changed["dqn/cartpole_c51.gin"],
        "networks.mlp.dueling",
    }
    shared = ["DQNAgent.replay", "DQNAgent.td_target", "DQNAgent.loss", "networks.mlp.support"]
    shared += ["networks.mlp.dueling", "HardUpdate.period", "DQNAgent.n_step", "Runner.num_steps"]

    def bindings(gin_file):
        gin.clear_config()
        config.parse([gin_file], [])
        values = {}
        for name in shared:
            try:
                values[name] = str(gin.query_parameter(name))
            except ValueError:  # not bound: the default
                values[name] = None
        return values

    plain = bindings("gin_configs/dqn/cartpole.gin")
    for gin_file, parts in changed.items():
        mine = bindings(f"gin_configs/{gin_file}")
        assert {name for name in shared if mine[name] != plain[name]} == parts, gin_file
    gin.clear_config()


@pytest.mark.parametrize("path", [path for path, _ in configs.shipped()])
def test_every_shipped_config_builds_its_agent_strictly_and_writes_nothing(path, tmp_path):
    # Building checks each network against its agent's action space (and every binding is
    # used): a shipped config is never refused, at --dry_run or at its start.
    prepared = experiments.build([path], [], str(tmp_path / "run"), strict=True)
    prepared.runner.close()
    assert not (tmp_path / "run").exists()
