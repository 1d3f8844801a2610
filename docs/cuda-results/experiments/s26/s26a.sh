#!/usr/bin/env bash
# Session 26's first device call (issue 34): the candle serving loop on the GPU (every bug flag,
# then the 1000-step clean run) with the GPU tests (quick) and the cuda_engine example beside it
# (correctness only: nothing in this lane is timed), then the graph experiment alone on the card.
# Binaries: .device-run (scripts/gpu-build.sh), .device-candle (scripts/candle-engine-gpu-build.sh).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
export KV_CANARY_GOLDEN_DIR="$PWD/.device-run/golden"
if [[ -x .device-run/cuda_gpu ]]; then
  (
    KV_CANARY_GPU_QUICK=1 run "gpu tests (quick)" 90 "$OUT/tests.log" .device-run/cuda_gpu
    run "cuda_engine example" 25 "$OUT/cuda_engine.log" .device-run/cuda_engine
  ) &
fi
run "candle serve (clean 300 + six bugs)" 200 "$OUT/candle-serve.log" .device-candle/run.sh --serve --layers 2 --steps 300
run "candle serve clean 1000" 150 "$OUT/candle-serve.log" .device-candle/run.sh --serve --clean --layers 2 --steps 1000
wait
run "candle graph" 150 "$OUT/candle-graph.log" .device-candle/run.sh --graph --bs 1,64 --steps 10 --no-prefill
grep -E "test result" "$OUT/tests.log" >> "$S" 2>/dev/null
cat "$S"
