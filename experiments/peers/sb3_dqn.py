"""SB3 DQN on CartPole-v1 at RL-Baselines3-Zoo's settings (hyperparams/dqn.yml, CartPole-v1):
the peer of gin_configs/dqn/cartpole_rlzoo.gin.

  <sb3 venv>/bin/python experiments/peers/sb3_dqn.py [--steps 50000] [--threads 1] [--seed 0]
                                                  [--eval_episodes 10]

Zoo: n_timesteps 5e4, MlpPolicy net_arch [256, 256], lr 2.3e-3, batch 64, buffer 100k,
learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256, gradient_steps 128,
exploration_fraction 0.16, exploration_final_eps 0.04; SB3 defaults otherwise (Huber loss,
max_grad_norm 10, Adam, tau 1.0, exploration_initial_eps 1.0).

Prints the in-loop figure: environment steps / seconds of `model.learn` (no evaluation inside
learn). Then, outside that figure, evaluates the policy for --eval_episodes episodes (ours runs
one 10-episode evaluation at the end of its run, so the whole-process times compare like with
like); --eval_episodes 0 skips it.
"""

import argparse
import time

PROCESS_START = time.perf_counter()

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import DQN  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_episodes", type=int, default=10)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    env = gym.make("CartPole-v1")
    model = DQN(
        "MlpPolicy",
        env,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    learn_seconds = time.perf_counter() - start
    steps = model.num_timesteps
    print(
        f"SB3 DQN: {steps} steps in learn {learn_seconds:.2f} s: "
        f"{steps / learn_seconds:.0f} steps/s (in-loop; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); start-up before learn "
        f"{start - PROCESS_START:.2f} s)",
        flush=True,
    )
    if args.eval_episodes:
        start = time.perf_counter()
        mean, std = evaluate_policy(
            model,
            Monitor(gym.make("CartPole-v1")),
            n_eval_episodes=args.eval_episodes,
            deterministic=True,
        )
        print(
            f"SB3 DQN: eval over {args.eval_episodes} episodes {mean:.1f} +- {std:.1f} "
            f"({time.perf_counter() - start:.2f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
