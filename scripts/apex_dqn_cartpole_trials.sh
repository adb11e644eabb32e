#!/usr/bin/env bash
# Ape-X DQN CartPole-v1 trials: the first tuned entry (BASE below: 2 actors x 1 env, target copied every 100 batches;
# apex_dqn.yml has moved on since, and the recorded trials name each difference in their change) with one change each,
# through scripts/apex_trial.py
# (evaluation every 5000 env steps off the clock, stop at the first 475, at most 60k env steps), one JSON line per run
# appended to OUT. Seeds from $SEEDS (default "0 1 2"), at most $MAX_STEPS env steps (default 60000).
#   SEEDS="0 1 2" OUT=trials.jsonl scripts/apex_dqn_cartpole_trials.sh '"target_update_interval": 25' '"n_steps": 5'
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/apex_dqn_cartpole_trials/trials_target.jsonl}
BASE='"batch_size": 256, "replay_ratio": 32, "learning_rate": 0.002, "buffer_size": 100000, "learning_starts": 1000'
BASE="$BASE"', "n_actors": 2, "target_update_interval": 100'
NET='"policy_kwargs": {"net_arch": [64, 64], "optimizer_class": "Adam", "optimizer_kwargs": {"fused": true}}'
for change in "$@"; do
  for seed in ${SEEDS:-0 1 2}; do
    out=$(python scripts/apex_trial.py apex_dqn CartPole-v1 "{$BASE, $NET, $change}" "$seed" "${MAX_STEPS:-60000}" 5000 475 2>/dev/null | tail -1)
    python - "$change" "$out" "$OUT" <<'PY'
import json, sys
change, result, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with open(path, "a") as f:
    f.write(json.dumps({"change": change, "result": result}) + "\n")
print(f"{change} seed {result['seed']}: reached at {result['reached_at_steps']} steps, {result['train_clock']} s, {result['curve']}")
PY
  done
done
