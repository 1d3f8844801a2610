#!/usr/bin/env bash
# Session 24's device calls (PART=a, then PART=b): every part under its own timeout, an overall
# deadline, logs in $OUT.
# Carried: .devrun.tgz = .device-run/{cuda_gpu,golden_gpu,conformance,cuda_bench,wholestep,
# cuda_engine,golden,gpu-run-remote.sh}, .device-base/cuda_bench_base (write kernels of 9d4124d),
# .device-candle/ (the candle GPU engine).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
scratch=$(mktemp -d)
start=$SECONDS; deadline=${DEADLINE:-560}
S="$OUT/summary.txt"
say() { echo "$*" | tee -a "$S"; }
left() { echo $((deadline - (SECONDS - start))); }
part() { # name seconds log cmd...
  local name=$1 t=$2 log=$3; shift 3
  local l; l=$(left); (( l < 5 )) && { say "SKIP $name (no time left)"; return; }
  (( t > l )) && t=$l
  echo "=== $name (timeout ${t}s): $* ===" >>"$log"
  local t0=$SECONDS; timeout -k 5 "$t" "$@" >>"$log" 2>&1; local rc=$?
  say "$(printf '%-34s rc=%-3s %4ss (%s)' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
}
say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
R=.device-run
export KV_CANARY_GOLDEN_DIR="$PWD/$R/golden"
if [[ "${PART:-a}" == a ]]; then
# 1. GPU tests (quick), golden, conformance
export KV_CANARY_GPU_QUICK=1
part "gpu tests (quick)" 90 "$OUT/tests.log" $R/cuda_gpu
part "golden gpu" 40 "$OUT/tests.log" $R/golden_gpu
part "conformance cuda" 40 "$OUT/tests.log" $R/conformance $R/golden --backend cuda
unset KV_CANARY_GPU_QUICK
# 2. the candle engine on the GPU (never run before): the serving loop, clean and six bugs
part "candle serve" 150 "$OUT/candle-serve.log" .device-candle/run.sh --serve --steps 1000
# 3. the candle benchmark (model alone and guarded, PARTIAL and ALL)
part "candle bench" 170 "$OUT/candle.log" .device-candle/run.sh --steps 10
else
# 4. whole-step rows per KV layout
for L in strip vllm hnd; do
  mkdir -p "$scratch/ws-$L"
  part "wholestep $L" 50 "$OUT/wholestep.log" $R/wholestep --quick --kv-layout $L --filter "decode bs" --out "$scratch/ws-$L"
done
# 5. write kernels: base (named barrier) vs new, alternating
for i in 1 2; do
  part "write base #$i" 25 "$OUT/write_ab.log" .device-base/cuda_bench_base --only write --reps 50 --out "$scratch/wb$i"
  part "write new #$i" 25 "$OUT/write_ab.log" $R/cuda_bench --only write --reps 50 --out "$scratch/wn$i"
done
# 6. sanitizers (quick): racecheck first (issue 35), then memcheck
export KV_CANARY_GPU_QUICK=1
for tool in racecheck memcheck; do
  part "sanitizer $tool" 160 "$OUT/sanitizer.log" env KV_CANARY_UNDER_SANITIZER=1 compute-sanitizer --tool $tool --error-exitcode 97 --print-limit 20 $R/cuda_gpu
done
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" "$OUT/sanitizer.log" | tee -a "$S"
fi
tar -czf "$OUT/extra.tgz" -C "$scratch" . 2>/dev/null
say "total $((SECONDS - start))s"
