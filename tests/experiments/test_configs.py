"""`python -m experiments.configs`: every shipped gin file and its header's first sentence."""

import glob
import os

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
