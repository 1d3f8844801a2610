#!/usr/bin/env bash
# Session 26's second device call (issue 34), alone on the card: the candle decode benchmark
# (bs 1, 64, 256 over 2048-token prefixes, PARTIAL and ALL, 10 timed steps a variant) and the
# 8192-token prefill row (3 timed steps a variant, after one bs-1 decode row).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "candle bench decode" 200 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 10 --no-prefill
run "candle prefill 8192" 250 "$OUT/candle-prefill.log" .device-candle/run.sh --bs 1 --steps 3 --prefill 8192
cat "$S"
# The graph experiment's model capture hit CUDA_ERROR_ILLEGAL_ADDRESS in s26a (27 layers): where,
# under memcheck, at 2 layers (the canary-only graph and the model capture; not a timing).
run "candle graph memcheck (2 layers)" 120 "$OUT/candle-graph-memcheck.log" compute-sanitizer --tool memcheck --print-limit 8 .device-candle/run.sh --graph --layers 2 --bs 1 --steps 2 --no-prefill --modes partial
cat "$S"
