#!/usr/bin/env bash
# Session 26's device call h (issue 34), alone on the card, after the benchmark's views became
# the serving loop's (PagedStepViews): the candle decode benchmark (guarded and model-only steps
# alternating in 5 rounds at the same context lengths, 40 timed steps a variant, twice) and the
# canary-only StepGraph rows.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "candle bench decode (1)" 170 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 40 --no-prefill
run "candle bench decode (2)" 70 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 40 --no-prefill
run "candle graph (canary part)" 80 "$OUT/candle-graph.log" .device-candle/run.sh --graph --bs 1,64,256 --steps 40 --no-prefill
cat "$S"
