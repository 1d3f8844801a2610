#!/usr/bin/env bash
# gpu-build.sh — build the CUDA backend's GPU binaries here (no GPU needed) and stage them for
# the GPU machine.
#
#   scripts/gpu-build.sh [DEST]        # DEST defaults to .device-run in the repository root
#
# Builds with `--features cuda` (release; `cuda_gpu` with `cudarc` and `faults` too, for its interop and fault-injection tests): the GPU test binaries (`cuda_gpu` of the library,
# `golden_gpu` of crates/conformance; `cargo test --no-run --message-format=json` names them),
# the `cuda_step` and `cuda_engine` examples, the conformance runner (`kv-canary-conformance`, staged as
# `conformance`) and the `cuda`, `cuda_host` and `cuda_wholestep` benchmarks, then copies into
# DEST:
#   cuda_gpu  golden_gpu  cuda_step  cuda_engine  conformance  cuda_bench  cuda_host  wholestep
#                                                   the binaries (PTX embedded; `wholestep` is
#                                                   the `cuda_wholestep` bench)
#   ptx/*.ptx                                       the kernels as built (<file>.<arch>.ptx for
#                                                   sm_80 and sm_90, bench.ptx of the testkit)
#   golden/                                         tests/golden (the conformance vectors)
#   gpu-run-remote.sh  bench-plot.py                what runs there
# DEST is meant to be ignored by git (.device-run is in .git/info/exclude) and carried to the
# GPU machine, where `DEST/gpu-run-remote.sh` runs everything (see that script).
#
# Needs the toolchain of scripts/install-cuda-toolchain.sh (nvcc 13.0, libcuda to link).
set -euo pipefail
# cudarc's bindings are chosen by the build, not the library (Cargo.toml): CUDA 13.0 here.
export CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-13000}
root=$(git rev-parse --show-toplevel)
cd "$root"
dest=${1:-.device-run}
export CARGO_TERM_COLOR=never

# Paths of the executables cargo reports for a build (JSON messages on stdout).
executables() { python3 "$root/scripts/cargo-executables.py" "$@"; }

echo "[gpu-build] cargo test --no-run (cuda_gpu, golden_gpu)"
tests=$(cargo test --release --features cudarc,faults --test cuda_gpu --no-run --message-format=json | executables cuda_gpu)
tests+=$'\n'$(cargo test --release -p kv-canary-conformance --features cuda --test golden_gpu --no-run --message-format=json | executables golden_gpu)
echo "[gpu-build] cargo build the cuda_step and cuda_engine examples and the conformance runner"
examples=$(cargo build --release --features cuda --example cuda_step --example cuda_engine --message-format=json | executables cuda_step cuda_engine)
examples+=$'\n'$(cargo build --release -p kv-canary-conformance --features cuda --bin kv-canary-conformance --message-format=json | executables kv-canary-conformance)
echo "[gpu-build] cargo bench --no-run (cuda, cuda_host, cuda_wholestep)"
benches=$(cargo bench --features cuda --bench cuda --bench cuda_host --bench cuda_wholestep --no-run --message-format=json | executables cuda cuda_host cuda_wholestep)

rm -rf "$dest"
mkdir -p "$dest/ptx"
while read -r name path; do
  [[ -n "$name" ]] || continue
  case $name in cuda) target=cuda_bench ;; cuda_wholestep) target=wholestep ;; kv-canary-conformance) target=conformance ;; *) target=$name ;; esac
  cp "$path" "$dest/$target"
  echo "[gpu-build] $dest/$target <- $path"
done <<<"$tests
$examples
$benches"
for bin in cuda_gpu golden_gpu cuda_step cuda_engine conformance cuda_bench cuda_host wholestep; do
  [[ -x "$dest/$bin" ]] || { echo "[gpu-build] ERROR: $bin was not built" >&2; exit 1; }
done
# The library's PTX (<file>.<arch>.ptx for sm_80 and sm_90) and the testkit's bench kernels.
ptx_dir=$(dirname "$(ls -t target/release/build/kv-canary-[0-9a-f]*/out/plan.sm_90.ptx | sed -n 1p)")
cp "$ptx_dir"/*.ptx "$ptx_dir/kv_canary_shared.h" "$dest/ptx/"
bench_ptx=$(ls -t target/release/build/kv-canary-testkit-*/out/bench.ptx | sed -n 1p)
cp "$bench_ptx" "$dest/ptx/bench.ptx"
cp -r tests/golden "$dest/golden"
cp scripts/gpu-run-remote.sh scripts/bench-plot.py "$dest/"
echo "[gpu-build] staged $(du -sh "$dest" | cut -f1) in $dest"
