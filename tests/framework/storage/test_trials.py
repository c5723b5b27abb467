"""The trial key: the same config is one trial however gin printed it and whatever the seed and
cadences; anything else that changes the config makes another trial."""

import json

import pytest

import agents  # noqa: F401  (the key reads defaults from the registered parts)
import framework.runner  # noqa: F401
from framework.storage.run_directory import RunDirectory
from framework.storage.trials import trial_of

BASE = """
Runner.agent = @DQNAgent
Runner.num_steps = 3000
Runner.seed = 0
Runner.eval_interval = 1000
DQNAgent.network = @networks.mlp
mlp.hidden_units = (64, 64)
make_env.env_id = 'CartPole-v1'
make_env.wrappers = [@NormalizeObservation]
"""


def _key(text: str) -> str:
    return trial_of(text).key


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ("Runner.seed = 7", True),  # the seed and the cadences only decide what is looked at
        ("Runner.eval_interval = 10", True),
        ("Runner.log_interval = 10\nRunner.checkpoint_interval = 10", True),
        ("tf_threads.intra_op = 1\ntf_threads.inter_op = 1", True),  # how fast, not what
        ("make_env.env_kwargs = None\nmake_env.max_episode_steps = None", True),  # defaults
        ("make_env.wrappers = [@wrappers.NormalizeObservation]", True),  # the same part
        ("mlp.activation = 'relu'", True),  # mlp's default
        ("Runner.num_steps = 50000", False),
        ("mlp.activation = 'tanh'", False),
        ("Runner.eval_episodes = 3", False),  # what an evaluation measures
        ("make_env.wrappers = []", False),
    ],
)
def test_a_config_is_one_trial_however_printed_and_another_when_it_changes(change, same):
    bindings = dict(line.split(" = ", 1) for line in BASE.strip().splitlines())
    bindings.update(line.split(" = ", 1) for line in change.splitlines())
    changed = "\n".join(f"{name} = {value}" for name, value in bindings.items())
    assert (_key(changed) == _key(BASE)) is same


def test_a_recorded_key_is_the_key_of_the_run_folders_config(trained_runs, tmp_path):
    trained_runs.copy("bandit", tmp_path)
    folder = RunDirectory(str(tmp_path))
    recorded = folder.trial_key()
    assert recorded == _key(folder.read_config())
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    del metadata["starts"][-1]["trial"]  # a run written before keys were recorded
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    assert folder.trial_key() == recorded
