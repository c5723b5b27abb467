"""One PPO update of ours on Stable-Baselines3's weights, rollout and minibatch order, against
SB3's own (issue 41: is our PPO on Hopper the same update as SB3's?).

`experiments/peers/sb3_ppo_update.py` (run in a venv with SB3) saves SB3's initial weights,
one 512-step Hopper-v5 rollout as its buffer held it, the permutations it drew in each epoch and
its weights after `model.train()`. This builds our PPOAgent from the config, copies SB3's
initial weights into its network, gives its learner the same rollout in the same minibatch
order, runs one learner call and prints, each against SB3's: V(s) and log pi(a|s) of the
rollout (the copy's check), GAE's advantages and returns, and every weight after the update
beside the change SB3's update made to it.

  /work/sb3-venv/bin/python experiments/peers/sb3_ppo_update.py --out /tmp/sb3_ppo_hopper.npz
  python -m experiments.ppo_against_sb3 --sb3_npz=/tmp/sb3_ppo_hopper.npz
"""

from typing import Any

import numpy as np
from absl import app, flags

from experiments import quiet

FLAGS = flags.FLAGS

# Our layer's weight <- SB3's state_dict entry (torch.nn.Linear's weight is [out, in], a Keras
# Dense kernel [in, out]).
SB3_NAMES = {
    "policy_0/kernel": "mlp_extractor.policy_net.0.weight",
    "policy_0/bias": "mlp_extractor.policy_net.0.bias",
    "policy_1/kernel": "mlp_extractor.policy_net.2.weight",
    "policy_1/bias": "mlp_extractor.policy_net.2.bias",
    "value_0/kernel": "mlp_extractor.value_net.0.weight",
    "value_0/bias": "mlp_extractor.value_net.0.bias",
    "value_1/kernel": "mlp_extractor.value_net.2.weight",
    "value_1/bias": "mlp_extractor.value_net.2.bias",
    "mean/kernel": "action_net.weight",
    "mean/bias": "action_net.bias",
    "value/kernel": "value_net.weight",
    "value/bias": "value_net.bias",
    "log_std/log_std": "log_std",
}
# The npz's settings that must equal the agent's (name -> how to read ours).
SETTINGS = {
    "gamma": lambda agent: agent.gamma,
    "gae_lambda": lambda agent: agent.returns.lambda_,
    "n_epochs": lambda agent: agent.minibatches.n_epochs,
    "batch_size": lambda agent: agent.minibatches.batch_size,
    "n_steps": lambda agent: agent.rollout.n_steps,
    "clip_range": lambda agent: agent.loss.surrogate_loss.clip_range,
    "ent_coef": lambda agent: agent.loss.entropy_bonus.coef,
    "vf_coef": lambda agent: agent.loss.value_loss_coef,
    "learning_rate": lambda agent: float(agent.learner.groups[0].optimizer.learning_rate),
    "sb3_adam_eps": lambda agent: agent.learner.groups[0].optimizer.epsilon,
    "max_grad_norm": lambda agent: agent.learner.groups[0].gradient_processor.max_norm,
}


def sb3_weights_as_ours(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """SB3's ActorCriticPolicy state_dict (separate pi and vf MLPs of two layers, action_net,
    value_net, log_std) by our gaussian_actor_critic_mlp's weight paths, in Keras layouts."""
    ours = {}
    for path, name in SB3_NAMES.items():
        value = np.asarray(state[name])
        ours[path] = value.T if path.endswith("/kernel") else value
    return ours


def load_sb3_weights(network, state: dict[str, np.ndarray]) -> None:
    """Sets `network`'s weights to SB3's `state`; every weight is set exactly once."""
    weights = sb3_weights_as_ours(state)
    paths = sorted(w.path for w in network.weights)
    if paths != sorted(weights):
        raise ValueError(
            f"The network's weights {paths} are not SB3's MlpPolicy's {sorted(weights)}: build "
            "it with networks.gaussian_actor_critic_mlp, separate torsos of two layers."
        )
    for variable in network.weights:
        variable.assign(weights[variable.path])


def learner_batch(saved: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """SB3's rollout as our learner's batch `[1, T, N, ...]`, with its minibatch order."""
    rollout = {
        "observation": saved["buffer/observations"],
        "action": saved["step/clipped_action"],
        "reward": saved["step/reward"],  # without SB3's bootstrap: ours adds its own
        "next_observation": saved["step/next_observation"],
        "terminated": saved["step/terminated"],
        "truncated": saved["step/truncated"],
        "log_prob": saved["buffer/log_probs"],
        "value": saved["buffer/values"],
        "sample": saved["buffer/actions"],  # the unclipped Gaussian sample
    }
    batch = {name: np.asarray(array, np.float32)[None] for name, array in rollout.items()}
    batch_size = int(saved["settings/batch_size"])
    batch["order"] = saved["order"].astype(np.int32).reshape(1, -1, batch_size)
    return batch


def check_settings(agent, saved: dict[str, np.ndarray]) -> None:
    """Raises unless the agent's settings are the ones SB3's update ran with."""
    differ = {
        name: (float(saved[f"settings/{name}"]), float(read(agent)))
        for name, read in SETTINGS.items()
        if not np.isclose(float(saved[f"settings/{name}"]), float(read(agent)), rtol=1e-6)
    }
    if differ:
        raise ValueError(f"The config's settings differ from SB3's run (SB3, ours): {differ}.")


def compare(gin_file: str, bindings: list[str], saved: dict[str, np.ndarray]) -> dict[str, Any]:
    """Ours on SB3's weights and batch: the differences, each as a max absolute difference."""
    tf = quiet.import_tensorflow()
    import gin

    import agents  # noqa: F401  (registers every configurable the config may name)
    from framework import config, runner  # noqa: F401  (runner registers Runner)
    from framework.agent import Health
    from framework.parts.environments import make_env

    config.parse([gin_file], bindings)
    env = make_env(max_episode_steps=int(saved["settings/max_episode_steps"]))
    agent_class = gin.query_parameter("Runner.agent").configurable.wrapped
    agent = agent_class(env.observation_space, env.action_space, seed=0)
    check_settings(agent, saved)
    initial = {k.removeprefix("initial/"): saved[k] for k in saved if k.startswith("initial/")}
    final = {k.removeprefix("final/"): saved[k] for k in saved if k.startswith("final/")}
    load_sb3_weights(agent.network, initial)
    agent.weights_changed()

    batch = learner_batch(saved)
    observations = tf.constant(batch["observation"][0, :, 0])
    parameters, values = agent.network(observations)
    log_prob = agent.distribution.log_prob(parameters, batch["sample"][0, :, 0])
    samples = batch["reward"][0].size
    in_time_order = {**batch, "order": np.arange(samples, dtype=np.int32)[None, None]}
    prepared = agent._minibatches({k: tf.constant(v) for k, v in in_time_order.items()})
    report = {
        "V(s) at the initial weights": _max_diff(values, saved["buffer/values"]),
        "log pi(a|s) at the initial weights": _max_diff(log_prob, saved["buffer/log_probs"]),
        "GAE advantages": _max_diff(prepared["advantage"], saved["buffer/advantages"]),
        "GAE returns": _max_diff(prepared["return"], saved["buffer/returns"]),
    }
    _, health = agent.learner.run(batch, int(saved["settings/n_steps"]))
    health = Health.from_tensor(health)
    expected = batch["order"].shape[1]
    if (health.gradient_steps, health.applied_updates) != (expected, expected):
        raise RuntimeError(f"Our learner's call {health} did not apply SB3's {expected} steps.")
    steps = health.applied_updates
    ours = {w.path: w.numpy() for w in agent.network.weights}
    sb3_final, sb3_initial = sb3_weights_as_ours(final), sb3_weights_as_ours(initial)
    weights = {
        path: (
            float(np.abs(ours[path] - sb3_final[path]).max()),
            float(np.abs(sb3_final[path] - sb3_initial[path]).max()),
        )
        for path in sorted(ours)
    }
    return {"rollout": report, "weights": weights, "steps": steps}


def _max_diff(ours, sb3: np.ndarray) -> float:
    return float(np.abs(np.reshape(np.asarray(ours), -1) - np.reshape(sb3, -1)).max())


def main(argv: list[str]) -> None:
    del argv
    with np.load(FLAGS.sb3_npz) as loaded:
        saved = dict(loaded)
    result = compare(FLAGS.gin_file, FLAGS.gin_bindings, saved)
    cuts = int(saved["step/truncated"].sum()), int(saved["step/terminated"].sum())
    print(
        f"{FLAGS.gin_file} on SB3's weights and rollout ({FLAGS.sb3_npz}: {cuts[1]} "
        f"terminations, {cuts[0]} time-limit cuts), {result['steps']} gradient steps in SB3's order"
    )
    for name, difference in result["rollout"].items():
        print(f"  {name:40s} max |ours - SB3| {difference:.3g}")
    scale = np.abs(saved["buffer/advantages"]).max()
    print(f"  {'(max |SB3 advantage|)':40s} {scale:.3g}")
    print(f"  {'weight after the update':40s} {'max |ours - SB3|':>18s} {'SB3 own change':>16s}")
    for path, (difference, change) in result["weights"].items():
        print(f"  {path:40s} {difference:18.3g} {change:16.3g}")


def _define_flags() -> None:
    """On the command line only: other commands define flags of the same names."""
    flags.DEFINE_string("sb3_npz", None, "What experiments/peers/sb3_ppo_update.py saved.")
    flags.DEFINE_string("gin_file", "gin_configs/ppo/hopper.gin", "Our PPO at SB3's settings.")
    flags.DEFINE_multi_string("gin_bindings", [], "Bindings on top of the config.")
    flags.mark_flag_as_required("sb3_npz")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
