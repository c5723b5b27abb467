"""One Stable-Baselines3 PPO update at gin_configs/ppo/hopper.gin's settings, saved for
`experiments/ppo_against_sb3.py` to repeat on our PPOAgent (issue 41).

A peer script, run in a venv with SB3 and MuJoCo (never imported by the package, which does not
depend on SB3):

  /work/sb3-venv/bin/python experiments/peers/sb3_ppo_update.py --out /tmp/sb3_ppo_hopper.npz \
      [--seed 0] [--max_episode_steps 25]

It builds PPO as RL-Baselines3-Zoo does for Hopper (hyperparams/ppo.yml: VecNormalize with
gamma 0.999, n_steps 512, batch 32, 5 epochs, ...; one Hopper-v5 in a Monitor in a DummyVecEnv),
collects one rollout of 512 steps, runs `model.train()` once, and saves:
  - `initial/<name>`, `final/<name>`: the policy's state_dict before and after (torch layouts);
  - the rollout buffer as SB3 used it (`buffer/<field>`: normalised observations, the unclipped
    actions, rewards with SB3's gamma * V(final observation) added at a time limit's cut,
    episode starts, values, log-probabilities, and the advantages and returns it computed);
  - per step what the environment gave (`step/<field>`): the actions clipped for it, the
    normalised rewards before that bootstrap, the next observation (the final one, normalised,
    where an episode ended), terminated and truncated;
  - `last_value`, `last_done`: what the rollout's last row bootstraps from;
  - `order`: the 5 permutations SB3's RolloutBuffer.get drew, [5, 512];
  - `settings/<name>`: the numbers the update used.
`--max_episode_steps` shortens the time limit so that the rollout holds time-limit cuts (the
random policy falls in ~20-30 steps, well before Hopper's 1,000).
"""

import argparse

import numpy as np
import torch
from sb3_common import HOPPER_PPO, hopper_ppo
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import obs_as_tensor


class StepRecorder(BaseCallback):
    """What each environment step gave, before SB3 adds the bootstrap to the reward."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def _on_step(self) -> bool:
        found = self.locals
        (done,), (info,) = found["dones"], found["infos"]
        truncated = bool(done and info.get("TimeLimit.truncated", False))
        next_observation = info["terminal_observation"] if done else found["new_obs"][0]
        self.rows.append(
            {
                "clipped_action": np.array(found["clipped_actions"][0], np.float32),
                "reward": np.float32(found["rewards"][0]),  # a copy: SB3 adds to it in place
                "next_observation": np.array(next_observation, np.float32),
                "terminated": np.float32(done and not truncated),
                "truncated": np.float32(truncated),
            }
        )
        return True


def build(seed: int, max_episode_steps: int | None) -> PPO:
    env_kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    return hopper_ppo(make_vec_env("Hopper-v5", n_envs=1, seed=seed, env_kwargs=env_kwargs), seed)


def state(model: PPO, prefix: str) -> dict[str, np.ndarray]:
    weights = model.policy.state_dict()
    return {f"{prefix}/{name}": value.detach().numpy().copy() for name, value in weights.items()}


def one_update(seed: int, max_episode_steps: int | None) -> dict[str, np.ndarray]:
    model = build(seed, max_episode_steps)
    recorder = StepRecorder()
    _, callback = model._setup_learn(HOPPER_PPO["n_steps"], recorder)
    saved = state(model, "initial")
    model.collect_rollouts(model.env, callback, model.rollout_buffer, HOPPER_PPO["n_steps"])
    buffer = model.rollout_buffer
    for field in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs"):
        saved[f"buffer/{field}"] = getattr(buffer, field).copy()
    for field in ("advantages", "returns"):
        saved[f"buffer/{field}"] = getattr(buffer, field).copy()
    for field in recorder.rows[0]:
        saved[f"step/{field}"] = np.stack([row[field] for row in recorder.rows])[:, None]
    with torch.no_grad():
        last = model.policy.predict_values(obs_as_tensor(model._last_obs, model.device))
    saved["last_value"] = last.numpy().reshape(1)
    saved["last_done"] = np.asarray(model._last_episode_starts, np.float32).reshape(1)

    drawn = []
    permutation = np.random.permutation

    def recording_permutation(x):
        indices = permutation(x)
        drawn.append(indices.copy())
        return indices

    np.random.permutation = recording_permutation  # what RolloutBuffer.get calls, per epoch
    try:
        model.train()
    finally:
        np.random.permutation = permutation
    if len(drawn) != HOPPER_PPO["n_epochs"]:
        raise RuntimeError(f"SB3 drew {len(drawn)} permutations, not one per epoch.")
    saved["order"] = np.stack(drawn)
    saved.update(state(model, "final"))
    for name, value in HOPPER_PPO.items():
        saved[f"settings/{name}"] = np.asarray(value)
    saved["settings/max_episode_steps"] = np.asarray(max_episode_steps or 1000)
    saved["settings/sb3_adam_eps"] = np.asarray(model.policy.optimizer.defaults["eps"])
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_episode_steps", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    saved = one_update(args.seed, args.max_episode_steps)
    np.savez(args.out, **saved)
    dones = saved["step/terminated"].sum(), saved["step/truncated"].sum()
    print(f"saved {args.out}: 512 steps, {dones[0]:.0f} terminations, {dones[1]:.0f} time limits")


if __name__ == "__main__":
    main()
