#!/usr/bin/env bash
# Session 24's last device call: the write A/B (base 9d4124d against this build), initcheck and
# synccheck over all GPU tests (quick), the cuda_engine example, then the candle GPU serving
# loop; logs in $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "write base" 60 "$OUT/write_ab.log" .device-base/cuda_bench_base --only write --reps 50 --out "$OUT/wb"
run "write new" 15 "$OUT/write_ab.log" .device-run/cuda_bench --only write --reps 50 --out "$OUT/wn"
export KV_CANARY_GPU_QUICK=1 KV_CANARY_UNDER_SANITIZER=1 KV_CANARY_GOLDEN_DIR="$PWD/.device-run/golden"
run "sanitizer initcheck" 40 "$OUT/sanitizer.log" compute-sanitizer --tool initcheck --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
run "sanitizer synccheck" 30 "$OUT/sanitizer.log" compute-sanitizer --tool synccheck --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
unset KV_CANARY_GPU_QUICK KV_CANARY_UNDER_SANITIZER
run "candle serve" "${SERVE_S:-55}" "$OUT/candle-serve.log" .device-candle/run.sh --serve --steps "${SERVE_STEPS:-1000}"
run "cuda_engine example" 15 "$OUT/cuda_engine.log" .device-run/cuda_engine
grep -E "ERROR SUMMARY|test result" "$OUT/sanitizer.log" >> "$S"
cat "$S"
