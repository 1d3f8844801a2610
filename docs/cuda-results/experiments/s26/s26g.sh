#!/usr/bin/env bash
# Session 26's device call g: is block locality what makes ALL over vLLM's V layout cost 12.5 ms
# at decode bs 256 in the whole-step benchmark (every slot in random order) and ~1.2 ms in the
# candle engine (each request's consecutive blocks)? The whole-step decode rows (quick) per
# layout with shuffled slots (the default) and with sequential slots (`--slots sequential`).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$S"
for layout in vllm strip hnd; do
  for slots in shuffled sequential; do
    t0=$SECONDS
    echo "=== wholestep --quick --kv-layout $layout --slots $slots --filter 'decode bs' ===" >> "$OUT/wholestep.log"
    timeout -k 5 60 .device-run/wholestep --quick --kv-layout "$layout" --slots "$slots" --filter "decode bs" \
      --out "$OUT/$layout-$slots" >> "$OUT/wholestep.log" 2>&1
    echo "wholestep $layout $slots rc=$? $((SECONDS - t0))s" >> "$S"
  done
done
cat "$S"
