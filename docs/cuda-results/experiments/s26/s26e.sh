#!/usr/bin/env bash
# Session 26's last device call (issue 34), alone on the card: the serving loop again on the
# integration as it landed (guard::CachedBlocks, kv-canary-candle's TensorMemory: every bug flag,
# then the 1000-step clean run), then the candle decode benchmark with guarded and model-only
# steps alternating in 5 rounds (40 timed steps each a variant), twice, and the canary-only
# StepGraph experiment alternated the same way.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "candle serve (clean 300 + six bugs)" 120 "$OUT/candle-serve.log" .device-candle/run.sh --serve --layers 2 --steps 300
run "candle serve clean 1000" 80 "$OUT/candle-serve.log" .device-candle/run.sh --serve --clean --layers 2 --steps 1000
run "candle bench decode (1)" 90 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 40 --no-prefill
run "candle graph (canary part)" 150 "$OUT/candle-graph.log" .device-candle/run.sh --graph --bs 1,64,256 --steps 40 --no-prefill
run "candle bench decode (2)" 90 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 40 --no-prefill
cat "$S"
