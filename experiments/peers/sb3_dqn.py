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

import time

PROCESS_START = time.perf_counter()

import gymnasium as gym  # noqa: E402
from sb3_common import parse_peer_arguments, peer_arguments, timed_evaluation, timed_learn  # noqa: E402
from stable_baselines3 import DQN  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402


def main() -> None:
    args = parse_peer_arguments(peer_arguments(steps=50_000, eval_episodes=10))
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
    timed_learn(model, args.steps, "DQN", PROCESS_START)
    if args.eval_episodes:
        timed_evaluation(model, Monitor(gym.make("CartPole-v1")), args.eval_episodes, "DQN")


if __name__ == "__main__":
    main()
