#!/usr/bin/env bash
# Session 24's last device call: the write A/B (base 9d4124d against this build), initcheck and
# synccheck over all GPU tests (quick), then the candle GPU serving loop; logs in $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
run "write base" 70 "$OUT/write_ab.log" .device-base/cuda_bench_base --only write --reps 50 --out "$OUT/wb"
run "write new" 20 "$OUT/write_ab.log" .device-run/cuda_bench --only write --reps 50 --out "$OUT/wn"
export KV_CANARY_GPU_QUICK=1 KV_CANARY_UNDER_SANITIZER=1 KV_CANARY_GOLDEN_DIR="$PWD/.device-run/golden"
for tool in initcheck synccheck; do
  run "sanitizer $tool" 45 "$OUT/sanitizer.log" compute-sanitizer --tool $tool --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
done
unset KV_CANARY_GPU_QUICK KV_CANARY_UNDER_SANITIZER
run "candle serve" "${SERVE_S:-75}" "$OUT/candle-serve.log" .device-candle/run.sh --serve --steps "${SERVE_STEPS:-1000}"
grep -E "ERROR SUMMARY|test result" "$OUT/sanitizer.log" >> "$S"
cat "$S"
