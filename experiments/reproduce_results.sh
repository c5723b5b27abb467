#!/usr/bin/env bash
# docs/results.md: every shipped config except Pong (days on a CPU), swept over 5 seeds and
# analysed.
#   bash experiments/reproduce_results.sh [results_dir]
# Each config: results_dir/<family>_<config>/ (run folders, sweep.json) and its analysis/
# (trials.md, trials.csv, learning_curves.png). About 2 hours on 2 quiet cores, estimated (A3C's
# and PPO Acrobot's 1M steps a seed, and SAC's gradient step at every environment step, take
# most of it; A3C's 4 worker threads use both cores, so its seeds run one at a time).
#
# The interpreter: $PYTHON where set; else the active virtual environment's ($VIRTUAL_ENV, as
# `source .venv/bin/activate` sets it); else the repository's own .venv (the README's quick
# start makes it); else python3 on the PATH. Not a bare `python`, which outside a virtual
# environment is another interpreter, or none. It must import this package and its analysis
# extra (pip install -e '.[analysis]'), which is checked before anything runs.
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
if ! "$python" -c 'import experiments.sweep, pandas, matplotlib, rliable' 2>/dev/null; then
  echo "reproduce_results.sh: $python cannot import experiments with its analysis extra" \
    "(pandas, matplotlib, rliable): run pip install -e '.[analysis]' with it, or set PYTHON" \
    "to an interpreter that has them." >&2
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
for config in "${!threshold[@]}"; do
  folder="$out/${config/\//_}"
  "$python" -m experiments.sweep --gin_file="gin_configs/$config.gin" --seeds=5 \
    --base_dir="$folder" ${parallel[$config]:+--parallel=${parallel[$config]}}
  "$python" -m experiments.analyze "$folder" --threshold="${threshold[$config]}"
done
