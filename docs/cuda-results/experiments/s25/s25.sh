#!/usr/bin/env bash
# Session 25's device call (binaries built from cf19ad9 (cuda_gpu from f4bafc9), staged in .devnew.tgz; the write base from 9d4124d): every GPU test
# (quick, issue 32's typed SGLang columns among them), the cuda_engine example (issue 33), the
# candle serving loop, benchmark and graph experiment (issue 34), initcheck and synccheck (issue 35; run beside the
# serving loop, which is not timed), then the write A/B (issue 35) alone on the card. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
run() { local name=$1 t=$2 log=$3; shift 3; local t0=$SECONDS
  echo "=== $name (timeout ${t}s): $* ===" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" >> "$S"; }
export KV_CANARY_GOLDEN_DIR="$PWD/.device-run/golden"
KV_CANARY_GPU_QUICK=1 run "gpu tests (quick)" 75 "$OUT/tests.log" .device-run/cuda_gpu
run "cuda_engine example" 25 "$OUT/cuda_engine.log" .device-run/cuda_engine
(
  export KV_CANARY_GPU_QUICK=1 KV_CANARY_UNDER_SANITIZER=1
  run "sanitizer initcheck" 110 "$OUT/sanitizer.log" compute-sanitizer --tool initcheck --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
  run "sanitizer synccheck" 60 "$OUT/sanitizer.log" compute-sanitizer --tool synccheck --error-exitcode 97 --print-limit 20 .device-run/cuda_gpu
) &
run "candle serve" 80 "$OUT/candle-serve.log" .device-candle/run.sh --serve --layers 2 --steps 300
run "candle serve clean 1000" 85 "$OUT/candle-serve.log" .device-candle/run.sh --serve --clean --layers 2 --steps 1000
wait
run "write base" 100 "$OUT/write_ab.log" .device-base/cuda_bench_base --only write --reps 50 --out "$OUT/wb"
run "write new" 25 "$OUT/write_ab.log" .device-run/cuda_bench --only write --reps 50 --out "$OUT/wn"
run "candle bench" 100 "$OUT/candle-bench.log" .device-candle/run.sh --bs 1,64,256 --steps 10
run "candle graph" 70 "$OUT/candle-graph.log" .device-candle/run.sh --graph --bs 1,64 --steps 20 --no-prefill
grep -E "ERROR SUMMARY|test result" "$OUT/sanitizer.log" >> "$S"
grep -E "test result" "$OUT/tests.log" >> "$S"
cat "$S"
