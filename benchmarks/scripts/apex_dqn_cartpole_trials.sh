#!/usr/bin/env bash
# Ape-X DQN CartPole-v1 trials: the zoo entry (zoo_configs/apex_dqn.yml, CartPole-v1; BASE and NET below) with one
# change per argument, each run through benchmarks/scripts/apex_trial.py: SB3's EvalCallback every $EVAL_FREQ env steps
# (default 10000, the benchmark's grid) off the clock, stop at the first 475, at most $MAX_STEPS env steps (default
# 60000), then the returned model on 20 fresh episodes. One JSON line per run appended to $OUT; seeds from $SEEDS
# (default "0 1 2"). A change overrides BASE's value of the same key (the last one wins in JSON), e.g.
#   SEEDS="200 201 202" OUT=trials.jsonl benchmarks/scripts/apex_dqn_cartpole_trials.sh '"buffer_size": 100000'
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/apex_dqn_cartpole_trials.jsonl}
BASE=${BASE:-'"batch_size": 256, "replay_ratio": 32, "learning_rate": 0.002, "buffer_size": 2500, "learning_starts": 1000, "n_actors": 1, "n_envs_per_actor": 2, "target_update_interval": 25'}
NET=${NET:-'"policy_kwargs": {"net_arch": [64, 64], "optimizer_class": "Adam", "optimizer_kwargs": {"fused": true}}'}
for change in "$@"; do
  for seed in ${SEEDS:-0 1 2}; do
    out=$(python benchmarks/scripts/apex_trial.py apex_dqn CartPole-v1 "{$BASE, $NET, $change}" "$seed" "${MAX_STEPS:-60000}" "${EVAL_FREQ:-10000}" 475 2>/dev/null | tail -1)
    python - "$change" "$out" "$OUT" <<'PY'
import json, sys
change, result, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with open(path, "a") as f:
    f.write(json.dumps({"change": change, "result": result}) + "\n")
print(f"{change} seed {result['seed']}: reached at {result['reached_at_steps']} steps, {result['train_clock']} s, {result['curve']}")
PY
  done
done
