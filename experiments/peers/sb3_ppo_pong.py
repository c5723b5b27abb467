"""SB3 PPO on Pong at RL-Baselines3-Zoo's Atari settings (hyperparams/ppo.yml, atari): the
throughput peer of gin_configs/ppo/pong.gin, under the same protocol (PongNoFrameskip-v4:
no sticky actions, up to 30 no-ops, FIRE on reset, a lost life ends the learner's episode,
clipped rewards, max-pooled frame skip 4, 84x84 grayscale, 4 frames stacked).

  <sb3 venv with ale-py and opencv>/bin/python experiments/peers/sb3_ppo_pong.py \
      [--steps 200000] [--threads 1] [--seed 0]

Zoo: 8 envs (make_atari_env, a DummyVecEnv, then VecFrameStack 4), CnnPolicy, n_steps 128,
batch_size 256, n_epochs 4, ent_coef 0.01, vf_coef 0.5, learning_rate lin_2.5e-4,
clip_range lin_0.1 over the Zoo's 1e7 steps (--schedule_steps), so a 200k-step measurement
runs at the rates the first 200k of a full run do, as ours does; SB3 defaults otherwise.

Prints the in-loop figure (environment steps / seconds of `model.learn`); no evaluation.
"""

import time

PROCESS_START = time.perf_counter()

import ale_py  # noqa: E402
import gymnasium as gym  # noqa: E402
from sb3_common import parse_peer_arguments, peer_arguments, timed_learn  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_atari_env  # noqa: E402
from stable_baselines3.common.vec_env import VecFrameStack  # noqa: E402


def linear(initial: float, steps: int, schedule_steps: int):
    """The Zoo's linear schedule over `schedule_steps`, for a `learn` of `steps`: SB3 passes
    the remaining fraction of `learn`'s own steps."""
    return lambda remaining: initial * (1.0 - (1.0 - remaining) * steps / schedule_steps)


def main() -> None:
    parser = peer_arguments(steps=200_000)
    parser.add_argument("--schedule_steps", type=int, default=10_000_000)
    args = parse_peer_arguments(parser)
    gym.register_envs(ale_py)
    env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=8, seed=args.seed), 4)
    model = PPO(
        "CnnPolicy",
        env,
        n_steps=128,
        batch_size=256,
        n_epochs=4,
        ent_coef=0.01,
        vf_coef=0.5,
        learning_rate=linear(2.5e-4, args.steps, args.schedule_steps),
        clip_range=linear(0.1, args.steps, args.schedule_steps),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    timed_learn(model, args.steps, "PPO Pong", PROCESS_START, "8 envs, ")
    print(f"SB3 PPO Pong: whole process {time.perf_counter() - PROCESS_START:.2f} s", flush=True)


if __name__ == "__main__":
    main()
