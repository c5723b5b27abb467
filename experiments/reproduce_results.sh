#!/usr/bin/env bash
# The README's results: every shipped config except Pong (days on a CPU), swept over 5 seeds and
# analysed.
#   bash experiments/reproduce_results.sh [results_dir]
# Each config: results_dir/<family>_<config>/ (run folders, sweep.json) and its analysis/
# (trials.md, trials.csv, learning_curves.png). About 45 minutes on 2 cores (A3C's 1M steps a
# seed take half of it: its 4 worker threads use both cores, so its seeds run one at a time).
set -euo pipefail
out=${1:-results}
python=${PYTHON:-python}
declare -A threshold=(
  [dqn/cartpole]=475 [dqn/cartpole_rlzoo]=475 [dqn/cartpole_soft_target]=475
  [dqn/cartpole_tfagents]=475 [reinforce/cartpole]=475 [a2c/cartpole]=475
  [reinforce/bandit]=0.8 [ddpg/pendulum]=-200 [ddpg/pendulum_classic]=-200
  [td3/pendulum]=-200 [a3c/cartpole]=475
)
declare -A parallel=([a3c/cartpole]=1)
for config in "${!threshold[@]}"; do
  folder="$out/${config/\//_}"
  "$python" -m experiments.sweep --gin_file="gin_configs/$config.gin" --seeds=5 \
    --base_dir="$folder" ${parallel[$config]:+--parallel=${parallel[$config]}}
  "$python" -m experiments.analyze "$folder" --threshold="${threshold[$config]}"
done
