"""The acting copy is proven, or not used (issue 38), end to end: a network part copied from
`networks.mlp` with a `LayerNormalization` after each layer (names and the model's name kept),
bound through gin, trains DQN on CartPole. Training's acting, the run's evaluation,
`experiments.load(run).act` and the exported SavedModel act as the network does on 1,000
observations drawn from the space, where a copy skipping the normalisation would not."""

import re

import numpy as np
import pytest
import tensorflow as tf

import experiments
from framework.export import export
from framework.parts.acting import CompiledForward
from framework.parts.acting_proof import probe_observations

NETWORK = '''"""A network part of the user's own: networks.mlp, normalised after each layer."""

import gin
import keras


@gin.configurable
def normalized_mlp(input_shape, num_outputs, hidden_units=(64, 64)):
    """`networks.mlp` with a LayerNormalization after each hidden layer, its names kept."""
    inputs = keras.Input(shape=tuple(input_shape), dtype="float32")
    features = inputs
    for index, units in enumerate(hidden_units):
        features = keras.layers.Dense(units, activation="relu", name=f"hidden_{index}")(features)
        features = keras.layers.LayerNormalization()(features)
    outputs = keras.layers.Dense(num_outputs, name="output")(features)
    return keras.Model(inputs, outputs, name="mlp")
'''
CONFIG = """import normalized_network
include 'gin_configs/dqn/cartpole.gin'
DQNAgent.network = @normalized_mlp
"""
BINDINGS = [
    "Runner.num_steps = 2000",
    "Runner.eval_interval = 1000",
    "Runner.checkpoint_interval = 1000",
    "Runner.eval_episodes = 2",
    "ReplaySchedule.learning_starts = 500",
]


def _skipping_normalisation(model, observations: np.ndarray) -> np.ndarray:
    """The greedy actions of a copy that reads the layers by their names and skips the rest, as
    the acting copy chosen by the network's name did."""
    x = observations
    for name in ("hidden_0", "hidden_1"):
        kernel, bias = model.get_layer(name).get_weights()
        x = np.maximum(x @ kernel + bias, 0.0)
    kernel, bias = model.get_layer("output").get_weights()
    return np.argmax(x @ kernel + bias, axis=-1)


@pytest.mark.integration
def test_a_copied_and_normalised_network_acts_as_itself_everywhere(tmp_path, caplog):
    (tmp_path / "normalized_network.py").write_text(NETWORK)
    (tmp_path / "normalized.gin").write_text(CONFIG)
    run = str(tmp_path / "run")

    result = experiments.train([str(tmp_path / "normalized.gin")], BINDINGS, run)

    agent = result.runner.agent
    assert isinstance(agent.acting, CompiledForward)
    [warning] = [r.getMessage() for r in caplog.records if "compiled call" in r.getMessage()]
    # Keras numbers a layer's name by the layers made before it in the process: any suffix.
    assert re.search(r"network 'mlp': its layer 'layer_normalization(_\d+)?' \(LayerNorm", warning)
    observations = probe_observations(agent.observation_space, count=1000, seed=7)
    network = np.argmax(agent.online(observations).numpy(), axis=-1)  # the network that learns
    training = agent.act(observations, explore=False)
    policy = experiments.load(run)
    try:
        loaded = policy.act(observations)
        assert policy.evaluate().mean_return == dict(result.eval_returns)[policy.step]
        export(policy, run, str(tmp_path / "export"))
    finally:
        policy.close()
    signature = tf.saved_model.load(str(tmp_path / "export")).signatures["action"]
    exported = signature(observation=tf.constant(observations))["action"].numpy()

    for actions in (training, loaded, exported):
        np.testing.assert_array_equal(actions, network)  # 100% of the 1,000
    assert np.mean(_skipping_normalisation(agent.online, observations) == network) < 0.9
