"""experiments/ppo_against_sb3.py's reading of SB3's PPO: its weights in our network, its
minibatches in our learner's order (SB3 itself is not needed: its layouts are written out)."""

import numpy as np
import pytest

from experiments.ppo_against_sb3 import learner_batch, load_sb3_weights
from framework.parts import networks

OBS, HIDDEN, ACTIONS = 5, (4, 6), 3


def _network(**kwargs):
    return networks.gaussian_actor_critic_mlp(
        (OBS,), ACTIONS, HIDDEN, "relu", orthogonal_init=False, torch_init=True, **kwargs
    )


def _sb3_state(rng) -> dict[str, np.ndarray]:
    """An SB3 MlpPolicy's state_dict, net_arch pi and vf HIDDEN: torch.nn.Linear's weights are
    [out, in]; the ReLUs sit at indices 1 and 3 of each Sequential, hence .0 and .2."""
    state = {"log_std": rng.normal(size=ACTIONS)}
    for net in ("policy_net", "value_net"):
        state[f"mlp_extractor.{net}.0.weight"] = rng.normal(size=(HIDDEN[0], OBS))
        state[f"mlp_extractor.{net}.0.bias"] = rng.normal(size=HIDDEN[0])
        state[f"mlp_extractor.{net}.2.weight"] = rng.normal(size=(HIDDEN[1], HIDDEN[0]))
        state[f"mlp_extractor.{net}.2.bias"] = rng.normal(size=HIDDEN[1])
    state["action_net.weight"] = rng.normal(size=(ACTIONS, HIDDEN[1]))
    state["action_net.bias"] = rng.normal(size=ACTIONS)
    state["value_net.weight"] = rng.normal(size=(1, HIDDEN[1]))
    state["value_net.bias"] = rng.normal(size=1)
    return {name: value.astype(np.float32) for name, value in state.items()}


def _sb3_forward(state, x):
    """SB3's ActorCriticPolicy on observations x: y = x W^T + b per Linear."""

    def mlp(net):
        h = np.maximum(
            x @ state[f"mlp_extractor.{net}.0.weight"].T + state[f"mlp_extractor.{net}.0.bias"], 0
        )
        return np.maximum(
            h @ state[f"mlp_extractor.{net}.2.weight"].T + state[f"mlp_extractor.{net}.2.bias"], 0
        )

    mean = mlp("policy_net") @ state["action_net.weight"].T + state["action_net.bias"]
    value = mlp("value_net") @ state["value_net.weight"].T + state["value_net.bias"]
    return mean, value[:, 0]


def test_our_network_on_sb3s_weights_computes_sb3s_policy_and_value():
    rng = np.random.default_rng(0)
    state = _sb3_state(rng)
    network = _network()
    load_sb3_weights(network, state)
    x = rng.normal(size=(7, OBS)).astype(np.float32)
    (mean, log_std), value = network(x)
    sb3_mean, sb3_value = _sb3_forward(state, x)
    np.testing.assert_allclose(mean, sb3_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, sb3_value, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(log_std, np.broadcast_to(state["log_std"], (7, ACTIONS)))


def test_a_network_not_shaped_as_sb3s_is_refused_by_name():
    with pytest.raises(ValueError, match="separate torsos"):
        load_sb3_weights(_network(shared_torso=True), _sb3_state(np.random.default_rng(0)))


def test_sb3s_permutations_become_our_minibatches_in_its_order():
    steps, batch_size, epochs = 8, 4, 2
    rng = np.random.default_rng(0)
    order = np.stack([rng.permutation(steps) for _ in range(epochs)])
    rows = {"observation": (steps, 1, OBS), "actions": (steps, 1, ACTIONS)}
    saved = {
        "order": order,
        "settings/batch_size": np.asarray(batch_size),
        "buffer/observations": np.zeros(rows["observation"]),
        "buffer/actions": np.zeros(rows["actions"]),
        "buffer/log_probs": np.zeros((steps, 1)),
        "buffer/values": np.zeros((steps, 1)),
        "step/clipped_action": np.zeros(rows["actions"]),
        "step/reward": np.arange(steps, dtype=np.float32)[:, None],
        "step/next_observation": np.zeros(rows["observation"]),
        "step/terminated": np.zeros((steps, 1)),
        "step/truncated": np.zeros((steps, 1)),
    }
    batch = learner_batch(saved)
    # SB3's RolloutBuffer.get: each epoch's permutation cut into consecutive minibatches.
    np.testing.assert_array_equal(batch["order"][0], order.reshape(epochs * 2, batch_size))
    assert batch["reward"].shape == (1, steps, 1) and batch["reward"].dtype == np.float32
