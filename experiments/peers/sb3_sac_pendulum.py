"""SB3 SAC on Pendulum-v1 at RL-Baselines3-Zoo's settings (hyperparams/sac.yml, Pendulum-v1):
the peer of gin_configs/sac/pendulum.gin (issue 39's whole-process pair, 5k steps).

  <sb3 venv>/bin/python experiments/peers/sb3_sac_pendulum.py [--steps 5000] [--threads 1]

Zoo: n_timesteps 2e4, MlpPolicy, learning_rate 1e-3; SB3 defaults otherwise (buffer 1M, batch
256, learning_starts 100, tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1, ent_coef auto,
256-256 ReLU). Prints steps / seconds of model.learn, then the whole process's seconds.
"""

import time

PROCESS_START = time.perf_counter()

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from sb3_common import parse_peer_arguments, peer_arguments  # noqa: E402
from stable_baselines3 import SAC  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402


def main() -> None:
    args = parse_peer_arguments(peer_arguments(steps=5000))
    model = SAC(
        "MlpPolicy",
        Monitor(gym.make("Pendulum-v1")),
        learning_rate=1e-3,
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(args.steps)
    seconds = time.perf_counter() - start
    print(
        f"SB3 SAC: {args.steps} steps in learn {seconds:.1f} s: {args.steps / seconds:.1f} steps/s "
        f"(in-loop; torch {torch.__version__}, {args.threads} thread); whole process "
        f"{time.perf_counter() - PROCESS_START:.1f} s"
    )


if __name__ == "__main__":
    main()
