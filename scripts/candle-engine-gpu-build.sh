#!/usr/bin/env bash
# candle-engine-gpu-build.sh: builds the GPU path of the candle engine (issue 34; engines/candle
# with `--features cuda`: candle-core's CUDA backend, mistralrs-paged-attn 0.8.1's kernels,
# kv-canary with `cudarc`) on a machine without a GPU, and stages the binary for the GPU machine
# (which has the driver and CUDA 13 libraries, no Rust, no network):
#
#   .device-candle/candle-gpu   the benchmark binary (release, sm_90a kernels)
#   .device-candle/run.sh       sets LD_LIBRARY_PATH from the machine's nvidia-* wheels and runs it
#   .devcandle.tgz              the folder compressed (the device tool carries at most 64 MiB)
#
# Needs the CUDA 13.0 toolchain of scripts/install-cuda-toolchain.sh (nvcc at /usr/local/cuda,
# libcuda). Installs the extra pieces candle's CUDA build needs from PyPI (idempotent): the CCCL
# headers (cuda_fp16.h includes <nv/target>) and cuBLAS, cuRAND and NVRTC to link against
# (candle forces cudarc's dynamic linking), into $KV_CANARY_CANDLE_CUDA_PREFIX
# (default /opt/kv-canary-candle-cuda-13.0; ~930 MB, never staged).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${KV_CANARY_CANDLE_CUDA_PREFIX:-/opt/kv-canary-candle-cuda-13.0}"
HOME13="$PREFIX/nvidia/cu13"
WHEELS=(
  "nvidia-cuda-cccl==13.0.85"
  "nvidia-cublas==13.0.2.14"
  "nvidia-curand==10.4.0.35"
  "nvidia-cuda-nvrtc==13.0.88"
)
log() { printf '[candle-gpu-build] %s\n' "$*"; }

[[ -x /usr/local/cuda/bin/nvcc ]] || { log "no nvcc at /usr/local/cuda: run scripts/install-cuda-toolchain.sh"; exit 1; }
if [[ "$(cat "$PREFIX/.wheels" 2>/dev/null || true)" != "$(printf '%s\n' "${WHEELS[@]}")" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  log "downloading ${WHEELS[*]}"
  python3 -m pip download --no-deps --no-cache-dir --progress-bar off --only-binary=:all: \
    --implementation py --python-version 3 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$tmp" "${WHEELS[@]}"
  mkdir -p "$PREFIX"
  for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$PREFIX/"; done
  # Unversioned names for the linker (the wheels ship only the sonames).
  (cd "$HOME13/lib" && ln -sfn libcublas.so.13 libcublas.so && ln -sfn libcublasLt.so.13 libcublasLt.so \
     && ln -sfn libcurand.so.10 libcurand.so && ln -sfn libnvrtc.so.13 libnvrtc.so)
  printf '%s\n' "${WHEELS[@]}" > "$PREFIX/.wheels"
fi

export PATH="/usr/local/cuda/bin:$PATH"
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"   # cudarc's bindings: CUDA 13.0
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"             # no nvidia-smi here: sm_90a (H100/H200)
export NVCC_APPEND_FLAGS="-isystem $HOME13/include/cccl -isystem $HOME13/include"
export LIBRARY_PATH="$HOME13/lib:/usr/local/cuda/lib64${LIBRARY_PATH:+:$LIBRARY_PATH}"

cd "$ROOT/engines/candle"
log "cargo build --release --features cuda (first build: ~10 min on 2 cores, the kernels most of it)"
# The link: Debian's libcuda here (driver 535) lacks `cuEventElapsedTime_v2`, which cudarc's CUDA
# 13 bindings link (rust-lld: "undefined symbol: cuEventElapsedTime_v2"). The GPU machine's
# driver (580, CUDA 13) exports it, so the bin's link leaves undefined symbols of objects to
# the dynamic loader (`cargo rustc` passes the flag to the bin's link only: no rebuild).
cargo rustc --locked --release --features cuda --bin candle-gpu -- \
  -C link-arg=-Wl,--unresolved-symbols=ignore-in-object-files
needed=$(nm -D target/release/candle-gpu | awk '$1 == "U" && $2 ~ /^cu[A-Z]/ && $2 !~ /@/ {print $2}' | sort -u)
here=$(nm -D "$(readlink -f "$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ {print $NF}' | sed -n 1p)")" | awk '$2 == "T" {print $3}' | sort -u)
log "left to the GPU machine's libcuda (absent from this machine's): $(comm -23 <(echo "$needed") <(echo "$here") | tr '\n' ' ')"

STAGE="$ROOT/.device-candle"
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp target/release/candle-gpu "$STAGE/"
strip "$STAGE/candle-gpu" 2>/dev/null || true
cat > "$STAGE/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the candle GPU engine's benchmark on the GPU machine: libcublas/libcublasLt.so.13,
# libcurand.so.10 and libcudart.so.13 from the machine's nvidia-* wheels (PyTorch cu130's),
# libcuda from the driver. Arguments go to the binary (see GPU.md).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
NV=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
LIBS=""
for d in "$NV"/cu13/lib "$NV"/*/lib /usr/local/cuda/lib64 /usr/local/nvidia/lib64; do
  [[ -d "$d" ]] && LIBS="$LIBS${LIBS:+:}$d"
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ldd "$HERE/candle-gpu" | grep -q "not found"; then
  echo "missing libraries:"; ldd "$HERE/candle-gpu" | grep "not found"; exit 1
fi
exec "$HERE/candle-gpu" "$@"
RUN
chmod +x "$STAGE/run.sh"
(cd "$ROOT" && tar -czf .devcandle.tgz .device-candle)
size=$(stat -c %s "$ROOT/.devcandle.tgz")
log "staged: $(du -sh "$STAGE" | cut -f1) in .device-candle, .devcandle.tgz $((size / 1024 / 1024)) MiB"
log "needed at run time (ldd):"
ldd "$STAGE/candle-gpu" | sed 's/^/    /'
(( size < 60 * 1024 * 1024 )) || { log "ERROR: .devcandle.tgz is over 60 MiB"; exit 1; }
