#!/usr/bin/env bash
# Session 26's third device call (issue 34), alone on the card: the canary's part as a StepGraph
# after the eager model step at bs 1, 64, 256 (PARTIAL and ALL; the model step's own capture
# is off: candle 0.10.2's replay reads out of bounds, s26b's memcheck), and the eager decode
# benchmark again in the same lease for comparison.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "candle graph (canary part)" 200 "$OUT/candle-graph.log" .device-candle/run.sh --graph --bs 1,64,256 --steps 10 --no-prefill
run "candle bench decode" 150 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 10 --no-prefill
cat "$S"
