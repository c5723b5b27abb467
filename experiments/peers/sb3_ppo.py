"""SB3 PPO on CartPole-v1 at RL-Baselines3-Zoo's settings (hyperparams/ppo.yml, CartPole-v1):
the peer of gin_configs/ppo/cartpole.gin.

  <sb3 venv>/bin/python experiments/peers/sb3_ppo.py [--steps 100000] [--threads 1] [--seed 0]
                                                  [--eval_episodes 10]

Zoo: n_envs 8 (make_vec_env: a DummyVecEnv of 8 CartPole-v1s, each in a Monitor), n_timesteps
1e5, MlpPolicy, n_steps 32, batch_size 256, gae_lambda 0.8, gamma 0.98, n_epochs 20,
ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2 (the Zoo's linear_schedule:
progress_remaining * initial value, so both reach 0 at the end of --steps); SB3 defaults
otherwise (vf_coef 0.5, max_grad_norm 0.5, normalize_advantage, no value clipping, separate
64-64 tanh networks with orthogonal init).

Prints the in-loop figure: environment steps / seconds of `model.learn` (no evaluation inside
learn). Then, outside that figure, evaluates the policy for --eval_episodes episodes on one
CartPole-v1 (ours runs one 10-episode evaluation at the end); --eval_episodes 0 skips it.
"""

import time

PROCESS_START = time.perf_counter()

import gymnasium as gym  # noqa: E402
from sb3_common import parse_peer_arguments, peer_arguments, timed_evaluation, timed_learn  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402


def linear(initial_value: float):
    """RL-Zoo's `lin_<value>`: the value times the progress remaining (1 at the start, 0 at the
    end)."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial_value

    return schedule


def main() -> None:
    args = parse_peer_arguments(peer_arguments(steps=100_000, eval_episodes=10))
    env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    timed_learn(model, args.steps, "PPO", PROCESS_START)
    if args.eval_episodes:
        timed_evaluation(model, Monitor(gym.make("CartPole-v1")), args.eval_episodes, "PPO")


if __name__ == "__main__":
    main()
