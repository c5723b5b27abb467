"""What the SB3 peer scripts share: their common flags, RL-Zoo's PPO settings for Hopper, and
the timed `learn` and evaluation lines the pairs read. Imported by the scripts beside it (their
folder is on `sys.path` when run as `python experiments/peers/<script>.py`); run in a venv with
SB3."""

import argparse
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

# RL-Baselines3-Zoo's hyperparams/ppo.yml for Hopper (normalize: true as VecNormalize with the
# agent's gamma, one env): gin_configs/ppo/hopper.gin's numbers.
HOPPER_PPO = dict(
    n_steps=512,
    batch_size=32,
    gamma=0.999,
    learning_rate=9.80828e-05,
    ent_coef=0.00229519,
    clip_range=0.2,
    n_epochs=5,
    gae_lambda=0.99,
    max_grad_norm=0.7,
    vf_coef=0.835671,
)


def peer_arguments(steps: int, eval_episodes: int | None = None) -> argparse.ArgumentParser:
    """The flags every pair reads the same way: --steps, --threads (torch's), --seed, and
    --eval_episodes where the script evaluates. A script adds its own before parsing."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    if eval_episodes is not None:
        parser.add_argument("--eval_episodes", type=int, default=eval_episodes)
    return parser


def parse_peer_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parses the flags and sets torch's thread count before any model is built."""
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def hopper_ppo(env, seed: int) -> PPO:
    """SB3's PPO at the Zoo's Hopper settings on `env` (a VecEnv), its rewards normalised."""
    return PPO(
        "MlpPolicy",
        VecNormalize(env, gamma=HOPPER_PPO["gamma"]),
        **HOPPER_PPO,
        policy_kwargs=dict(
            log_std_init=-2,
            ortho_init=False,
            activation_fn=torch.nn.ReLU,
            net_arch=dict(pi=[256, 256], vf=[256, 256]),
        ),
        seed=seed,
        device="cpu",
        verbose=0,
    )


def timed_learn(model, steps: int, name: str, process_start: float, what: str = "") -> None:
    """`model.learn(steps)`, then the in-loop line: steps / seconds of `learn` alone."""
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    seconds = time.perf_counter() - start
    done = model.num_timesteps
    print(
        f"SB3 {name}: {done} steps in learn {seconds:.2f} s: {done / seconds:.0f} steps/s "
        f"(in-loop; {what}torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"start-up before learn {start - process_start:.2f} s)",
        flush=True,
    )


def timed_evaluation(model, env, episodes: int, name: str) -> None:
    """The deterministic policy over `episodes` episodes of `env`, outside the in-loop figure."""
    start = time.perf_counter()
    mean, std = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True)
    print(
        f"SB3 {name}: eval over {episodes} episodes {mean:.1f} +- {std:.1f} "
        f"({time.perf_counter() - start:.2f} s)",
        flush=True,
    )
