#!/usr/bin/env bash
# docs/results.md: every shipped config, analysed.
#   bash experiments/reproduce_results.sh [results_dir] [all | classic | mujoco | pixels]
# classic: every config on classic control, over 5 seeds: results_dir/<family>_<config>/
# (run folders, sweep.json) and its analysis/ (trials.md, trials.csv, learning_curves.png). About
# 2 hours on 2 quiet cores, estimated (A3C's and PPO Acrobot's 1M steps a seed, and SAC's
# gradient step at every environment step, take most of it; A3C's 4 worker threads use both
# cores, so its seeds run one at a time).
# mujoco (the mujoco extra): PPO on HalfCheetah and Hopper at the configs' 1M steps over 3
# seeds; SAC and TD3 on them at 300k of their 1M steps over 2 seeds; Walker2d at 300k, one seed
# per agent: results_dir/<family>_<config>_<steps>/, then each task's agents analysed together
# in results_dir/mujoco_<task>/. About 10 hours on 2 cores, estimated from in-loop steps/s
# measured over 2k steps under nice on a shared machine (PPO ~1,200 steps/s: about 15 minutes
# a 1M run; SAC ~75-100 and TD3 ~50-60: about 1 and 1.5 hours a 300k run alone, more where two
# share the cores); SAC and TD3 at their 1M steps take about 3-4 and 5 hours a run.
# pixels (the atari and minatar extras): days; each run resumes exactly where it stopped, so the script may be stopped (Ctrl-C
# checkpoints) and started again with the same arguments. Estimates from in-loop rates measured
# over short runs on 2 shared cores (load 6-8, at nice 19), so upper bounds:
#   - PPO Pong (ppo/pong.gin, the peers' protocol), seed 0, in pieces of 2.5M agent steps (10M
#     frames): PONG_STEPS=2500000 (the default) stops after the first, 10000000 goes on to the
#     peers' 1e7. Its schedules span 1e7 whatever the piece. ~370-400 steps/s alone on 2 quiet
#     cores (measured 2026-11-28): ~2 h a piece.
#   - DQN on MinAtar Breakout and Asterix (the MinAtar paper's settings), 3 seeds x 1M steps:
#     one TensorFlow thread a run (the config's tf_threads), ~560 steps/s each with two at once
#     on 2 cores: measured 2026-11-28, 37-60 min a run (some of it beside other runs), so
#     ~1-1.5 h a game (two seeds, then the third alone).
#   - Rainbow's parts on MinAtar Breakout, 3 seeds x 1M steps: ~300 steps/s each, two at once
#     (measured 2026-11-28 over its first 300k steps): ~1 h a run, ~2-3 h for the three.
#   - Asynchronous n-step Q on MinAtar Breakout (4 worker threads), 3 seeds x 1M of the
#     config's 2M steps, one at a time: ~1,800 steps/s on 2 quiet cores, ~10 min a seed
#     (measured, docs/results.md).
# The throughput pair, by hand, not run here: the first 200k steps of this framework's
# ppo/pong.gin (in-loop steps/s: progress.csv's train/steps_per_second) against
# Stable-Baselines3's PPO at the same settings and protocol, in a venv of its own
# (pip install stable-baselines3 ale-py opencv-python-headless), once with 1 torch thread and
# once with 2, each beside a run of ours on the same quiet machine:
#   python -m experiments.run --gin_file=gin_configs/ppo/pong.gin --base_dir=runs/pong_200k \
#     --gin_bindings='Runner.num_steps = 200000' --gin_bindings='Runner.eval_interval = 200000'
#   <sb3 venv>/bin/python experiments/peers/sb3_ppo_pong.py --threads 1   # then --threads 2
# A stopped script started again skips the finished runs and resumes the others.
#
# The interpreter: $PYTHON where set; else the active virtual environment's ($VIRTUAL_ENV, as
# `source .venv/bin/activate` sets it); else the repository's own .venv (the README's quick
# start makes it); else python3 on the PATH. Not a bare `python`, which outside a virtual
# environment is another interpreter, or none. It must import this package and its analysis
# extra (pip install -e '.[analysis]'), and for the MuJoCo part the mujoco extra too, which is
# checked before anything runs.
set -euo pipefail
out=${1:-results}
repository=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${PYTHON:-} ]]; then
  python=$PYTHON
elif [[ -n ${VIRTUAL_ENV:-} ]]; then
  python=$VIRTUAL_ENV/bin/python
elif [[ -x $repository/.venv/bin/python ]]; then
  python=$repository/.venv/bin/python
else
  python=python3
fi
which=${2:-all}
case $which in
  all) needs=', mujoco, ale_py, minatar' extras='analysis,mujoco,atari,minatar' ;;
  classic) needs='' extras='analysis' ;;
  mujoco) needs=', mujoco' extras='analysis,mujoco' ;;
  pixels) needs=', ale_py, minatar' extras='analysis,atari,minatar' ;;
  *)
    echo "reproduce_results.sh: '$which' is not a part of the results: give all, classic," \
      "mujoco or pixels." >&2
    exit 2
    ;;
esac
if ! "$python" -c "import experiments.sweep, pandas, matplotlib, rliable$needs" 2>/dev/null; then
  echo "reproduce_results.sh: $python cannot import experiments with its extras ($extras):" \
    "run pip install -e '.[$extras]' with it, or set PYTHON to an interpreter that has them." >&2
  exit 1
fi
echo "reproduce_results.sh: running $python" >&2
declare -A threshold=(
  [dqn/cartpole]=475 [dqn/cartpole_rlzoo]=475 [dqn/cartpole_soft_target]=475
  [dqn/cartpole_tfagents]=475 [dqn/cartpole_per]=475 [dqn/cartpole_c51]=475
  [dqn/cartpole_rainbow]=475 [reinforce/cartpole]=475 [a2c/cartpole]=475
  [reinforce/bandit]=0.8 [ddpg/pendulum]=-200 [ddpg/pendulum_classic]=-200
  [td3/pendulum]=-200 [sac/pendulum]=-200 [a3c/cartpole]=475 [ppo/cartpole]=475
  [ppo/pendulum]=-200 [ppo/acrobot]=-100
)
declare -A parallel=([a3c/cartpole]=1)

classic() {
  for config in "${!threshold[@]}"; do
    folder="$out/${config/\//_}"
    "$python" -m experiments.sweep --gin_file="gin_configs/$config.gin" --seeds=5 \
      --base_dir="$folder" ${parallel[$config]:+--parallel=${parallel[$config]}}
    "$python" -m experiments.analyze "$folder" --threshold="${threshold[$config]}"
  done
}

# config, seeds, environment steps (and as the folder names them), threshold: the issue's bar
# for PPO (HalfCheetah 3,000, Hopper 1,800 at 1M) and for SAC and TD3 (5,000 and 2,000 at
# 300k); 3,000 on Walker2d.
mujoco_runs='
ppo/halfcheetah 3 1000000 1M 3000
ppo/hopper 3 1000000 1M 1800
sac/halfcheetah 2 300000 300k 5000
sac/hopper 2 300000 300k 2000
td3/halfcheetah 2 300000 300k 5000
td3/hopper 2 300000 300k 2000
ppo/walker2d 1 300000 300k 3000
sac/walker2d 1 300000 300k 3000
td3/walker2d 1 300000 300k 3000
'

mujoco() {
  local config seeds steps label bar folder task
  while read -r config seeds steps label bar; do
    [[ -n $config ]] || continue
    folder="$out/${config/\//_}_$label"
    "$python" -m experiments.sweep --gin_file="gin_configs/$config.gin" --seeds="$seeds" \
      --gin_bindings="Runner.num_steps = $steps" --base_dir="$folder"
    "$python" -m experiments.analyze "$folder" --threshold="$bar"
  done <<<"$mujoco_runs"
  for task in halfcheetah hopper walker2d; do  # the agents' curves on one plot, per task
    "$python" -m experiments.analyze "$out"/{ppo,sac,td3}_"$task"_* \
      --output_dir="$out/mujoco_$task"
  done
}

pixels() {
  local pong steps config folder
  pong="$out/ppo_pong"
  for steps in 2500000 5000000 7500000 10000000; do
    (( steps > ${PONG_STEPS:-2500000} )) && break
    "$python" -m experiments.run --gin_file=gin_configs/ppo/pong.gin --seed=0 \
      --base_dir="$pong/seed0" --gin_bindings="Runner.num_steps = $steps"
  done
  "$python" -m experiments.analyze "$pong" --threshold=10
  declare -A pixel_steps=(
    [dqn/minatar_breakout]=1000000 [dqn/minatar_asterix]=1000000
    [dqn/minatar_breakout_rainbow]=1000000 [a3c/minatar_breakout_nstep_q]=1000000
  )
  declare -A pixel_parallel=([dqn/minatar_breakout]=2 [dqn/minatar_asterix]=2
    [dqn/minatar_breakout_rainbow]=2 [a3c/minatar_breakout_nstep_q]=1)
  declare -A pixel_threshold=([a3c/minatar_breakout_nstep_q]=2.3)  # 5x random's 0.46
  for config in dqn/minatar_breakout dqn/minatar_asterix dqn/minatar_breakout_rainbow \
    a3c/minatar_breakout_nstep_q; do
    folder="$out/${config/\//_}"
    "$python" -m experiments.sweep --gin_file="gin_configs/$config.gin" --seeds=3 \
      --gin_bindings="Runner.num_steps = ${pixel_steps[$config]}" --base_dir="$folder" \
      --parallel="${pixel_parallel[$config]}"
    "$python" -m experiments.analyze "$folder" \
      ${pixel_threshold[$config]:+--threshold=${pixel_threshold[$config]}}
  done
  # The n-step Q workers' bar: 5x a random policy's mean over 100 episodes.
  folder="$out/a3c_minatar_breakout_nstep_q"
  mkdir -p "$folder"
  "$python" -m experiments.random_baseline --gin_file=gin_configs/a3c/minatar_breakout_nstep_q.gin \
    --episodes=100 | tee "$folder/random_baseline.txt"
}

case $which in  # each a command of its own: set -e stops inside it (not so in `a && b`)
  all)
    classic
    mujoco
    pixels
    ;;
  classic) classic ;;
  mujoco) mujoco ;;
  pixels) pixels ;;
esac
