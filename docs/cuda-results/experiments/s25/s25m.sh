#!/usr/bin/env bash
# Session 25's last device call, for a short budget (the same binaries as s25.sh): two lanes in
# parallel, correctness only (nothing here is a timing to compare): lane A runs every GPU test
# (quick), the cuda_engine example and the candle serving loop's bug runs; lane B runs
# initcheck then synccheck over every GPU test (quick). Logs in $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
export KV_CANARY_GOLDEN_DIR="$PWD/.device-run/golden"
(
  export KV_CANARY_GPU_QUICK=1 KV_CANARY_UNDER_SANITIZER=1
  run "sanitizer initcheck" 100 "$OUT/sanitizer.log" compute-sanitizer --tool initcheck --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
  run "sanitizer synccheck" 65 "$OUT/sanitizer.log" compute-sanitizer --tool synccheck --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
) &
KV_CANARY_GPU_QUICK=1 run "gpu tests (quick)" 70 "$OUT/tests.log" .device-run/cuda_gpu
run "cuda_engine example" 20 "$OUT/cuda_engine.log" .device-run/cuda_engine
run "candle serve" 75 "$OUT/candle-serve.log" .device-candle/run.sh --serve --layers 2 --steps 300
wait
grep -E "ERROR SUMMARY|test result" "$OUT/sanitizer.log" >> "$S"
grep -E "test result" "$OUT/tests.log" >> "$S"
cat "$S"
