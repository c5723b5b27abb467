"""SB3 SAC on HalfCheetah-v5 and PPO on Hopper-v5 at RL-Baselines3-Zoo's settings: the peers of
gin_configs/sac/halfcheetah.gin and gin_configs/ppo/hopper.gin (issue 41's speed pairs, the
first 20k steps).

  <sb3 venv>/bin/python experiments/peers/sb3_mujoco.py sac [--steps 20000] [--threads 1]
                                                          [--seed 0] [--eval_episodes 0]
  <sb3 venv>/bin/python experiments/peers/sb3_mujoco.py ppo [--steps 20000] ...

The SB3 venv needs MuJoCo first (gymnasium 1.4.0 is there already):
  /work/sb3-venv/bin/pip install 'gymnasium[mujoco]==1.4.0'

sac (hyperparams/sac.yml, HalfCheetah-v4 = the MuJoCo defaults): n_timesteps 1e6, MlpPolicy,
learning_starts 10000; SB3 defaults otherwise (lr 3e-4, buffer 1M, batch 256, tau 0.005, gamma
0.99, train_freq 1, gradient_steps 1, ent_coef auto from 1.0, target_entropy -dim(A), 256-256
ReLU). 20k steps: 10k random steps, then 10k gradient steps.

ppo (hyperparams/ppo.yml, Hopper-v4): normalize true (VecNormalize with gamma 0.999), n_envs 1,
n_steps 512, batch 32, gamma 0.999, lr 9.80828e-5, ent_coef 0.00229519, clip 0.2, n_epochs 5,
gae_lambda 0.99, max_grad_norm 0.7, vf_coef 0.835671, policy_kwargs log_std_init -2,
ortho_init False, ReLU, pi and vf [256, 256].

Both as the Zoo builds them: one env in a Monitor in a DummyVecEnv (make_vec_env), on CPU.
Prints the in-loop figure, environment steps / seconds of `model.learn` (no evaluation inside
learn), in one line a pairs script can read ("SB3 SAC: N steps in learn T s: R steps/s
(in-loop; ...").
--eval_episodes N evaluates the deterministic policy afterwards, outside that figure (ppo: on
the VecNormalize statistics, frozen, and the environment's own rewards).
"""

import time

PROCESS_START = time.perf_counter()

from sb3_common import (  # noqa: E402
    hopper_ppo,
    parse_peer_arguments,
    peer_arguments,
    timed_evaluation,
    timed_learn,
)
from stable_baselines3 import SAC  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

ENV = {"sac": "HalfCheetah-v5", "ppo": "Hopper-v5"}


def build(algo: str, seed: int):
    env = make_vec_env(ENV[algo], n_envs=1, seed=seed)
    if algo == "sac":
        return SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, device="cpu", verbose=0)
    return hopper_ppo(env, seed)


def main() -> None:
    parser = peer_arguments(steps=20_000, eval_episodes=0)
    parser.add_argument("algo", choices=sorted(ENV))
    args = parse_peer_arguments(parser)
    model = build(args.algo, args.seed)
    name = args.algo.upper()
    timed_learn(model, args.steps, name, PROCESS_START, f"{ENV[args.algo]}, ")
    if args.eval_episodes:
        env = make_vec_env(ENV[args.algo], n_envs=1, seed=args.seed + 1000)
        if args.algo == "ppo":  # the training statistics, frozen; the env's own rewards
            env = VecNormalize(env, gamma=0.999, training=False, norm_reward=False)
            env.obs_rms = model.get_env().obs_rms
        timed_evaluation(model, env, args.eval_episodes, name)


if __name__ == "__main__":
    main()
