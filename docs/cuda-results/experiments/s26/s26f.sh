#!/usr/bin/env bash
# Session 26's device call f (issue 34), alone on the card: the candle decode benchmark, guarded
# and model-only steps alternating in 5 rounds at the same context lengths (the model-only
# steps write their K and V into the null block; s26e's model-only rounds ran ~55 tokens
# deeper and so were slower), 40 timed steps a variant, twice.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "candle bench decode (1)" 100 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 40 --no-prefill
run "candle bench decode (2)" 100 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 40 --no-prefill
cat "$S"
