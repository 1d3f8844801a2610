#!/usr/bin/env bash
# Exports the kernels' PTX for builds without nvcc: builds the crate with the `cuda` feature
# (nvcc needed here, scripts/install-cuda-toolchain.sh), then copies the build script's PTX
# files and their stamp into DIR. Elsewhere, `KV_CANARY_PTX_DIR=DIR cargo build --features cuda`
# then embeds that PTX without nvcc, once the stamp matches the crate's kernels and ABI.
#
#   scripts/export-ptx.sh DIR            # the default targets (sm_80, sm_90)
#   KV_CANARY_CUDA_ARCH=sm_90 scripts/export-ptx.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/export-ptx.sh DIR}
cd "$(dirname "$0")/.."
# The build script's output folder, from cargo's own report of it.
out=$(env -u KV_CANARY_PTX_DIR cargo build --locked --features cuda --message-format=json \
  | grep '"reason":"build-script-executed"' \
  | grep -E '"package_id":"[^"]*kv-canary[#@ ]' \
  | sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$out" ] || [ ! -f "$out/kv_canary_ptx.stamp" ]; then
  echo "export-ptx: no PTX found in the build script's output (${out:-none})" >&2
  exit 1
fi
mkdir -p "$dir"
cp "$out"/*.ptx "$out/kv_canary_ptx.stamp" "$dir/"
echo "export-ptx: $(ls "$out"/*.ptx | wc -l) PTX files and the stamp ($(cat "$out/kv_canary_ptx.stamp")) in $dir"
