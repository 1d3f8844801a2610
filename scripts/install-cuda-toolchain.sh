#!/usr/bin/env bash
# install-cuda-toolchain.sh — install the CUDA 13.0 build toolchain that the
# crate needs on a GPU-less Debian (bookworm) dev/CI machine.
#
# What it sets up (as root):
#   1. libcuda (the CUDA *driver* API library) from Debian's non-free
#      `libcuda1` package, plus an unversioned `libcuda.so` symlink, because
#      cust_raw links with `-lcuda`.  Without a GPU the library still loads;
#      cuInit() simply reports that there is no device.
#   2. nvcc 13.0 from NVIDIA's PyPI wheels (the only place CUDA 13.0 is
#      reachable from here), unpacked into $PREFIX, with /usr/local/cuda
#      pointing at it and a `lib64 -> lib` link so that cust's build helper
#      (find_cuda_helper 0.2.0, which looks at /usr/local/cuda/lib64) is happy.
#   3. A smoke test: `nvcc --version` reports 13.0 and a tiny kernel compiles
#      to PTX with -arch=sm_90.
#
# Idempotent: a re-run on an installed machine only re-checks and re-runs the
# smoke test (a second or two).  Only package registries are needed (Debian
# apt and PyPI); nothing else is downloaded.
#
# Environment knobs (all optional):
#   KV_CANARY_SKIP_APT=1         never touch apt (step 1 only checks/links).
#   KV_CANARY_CUDA_PREFIX=DIR    where the wheels are unpacked
#                                (default /opt/kv-canary-cuda-13.0).
#   KV_CANARY_FORCE_CUDA_LINK=1  replace an existing /usr/local/cuda that is
#                                not ours (by default it is left alone if it
#                                already holds a CUDA 13.0 nvcc, else we fail).
# Pipelines never stop reading early (no `head`, no `awk ... exit` on a pipe): under pipefail
# a writer killed by SIGPIPE (status 141) would fail the script at random.
set -euo pipefail

# ----------------------------------------------------------------------------
# Pinned versions.  All four wheels put their files under nvidia/cu13/.
#   nvidia-cuda-nvcc     bin/{nvcc,ptxas,fatbinary,nvlink,cudafe++,...}
#   nvidia-nvvm          nvvm/bin/cicc, nvvm/libdevice, lib/libnvvm.so.4
#   nvidia-cuda-runtime  include/ (cuda.h, cuda_runtime.h, ...), lib/libcudart*
#   nvidia-cuda-crt      include/crt/ (host_config.h etc., needed by nvcc)
# ----------------------------------------------------------------------------
CUDA_SERIES="13.0"
WHEELS=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-crt==13.0.88"
)
PREFIX="${KV_CANARY_CUDA_PREFIX:-/opt/kv-canary-cuda-${CUDA_SERIES}}"
CUDA_HOME_IN_PREFIX="${PREFIX}/nvidia/cu13"   # layout inside the wheels
CUDA_LINK="/usr/local/cuda"
STAMP="${PREFIX}/.kv-canary-wheels"           # records what was unpacked
APT_SOURCES_FILE="/etc/apt/sources.list.d/kv-canary-nonfree.sources"
MULTIARCH_LIBDIR="/usr/lib/x86_64-linux-gnu"

START_TS=$(date +%s)
log()  { printf '[install-cuda] %s\n' "$*"; }
warn() { printf '[install-cuda] WARNING: %s\n' "$*" >&2; }
die()  { printf '[install-cuda] ERROR: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "must run as root (it writes /etc/apt, /opt, /usr/local)"
[[ "$(uname -m)" == x86_64 ]] || die "only x86_64 is supported (wheels and libcuda are x86_64)"

export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=0
apt_update_once() {
  if [[ "$APT_UPDATED" == 0 ]]; then
    log "apt-get update"
    apt-get update -qq
    APT_UPDATED=1
  fi
}

# ============================================================================
# Step 1: libcuda (driver API) for linking, from Debian contrib/non-free.
# ============================================================================

# Print the path of a libcuda.so.1 that the dynamic loader can find, or
# nothing.  Looks at the ld.so cache first, then at the places where a GPU
# host's driver is usually mounted (e.g. /usr/local/nvidia/lib64, read-only,
# on the device machines) and LD_LIBRARY_PATH.
find_libcuda_so1() {
  local p d
  p=$(awk '/libcuda\.so\.1 \(.*x86-64/ {print $NF; exit}' <<<"$(ldconfig -p 2>/dev/null)")
  if [[ -n "$p" && -e "$p" ]]; then echo "$p"; return; fi
  for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
           "$MULTIARCH_LIBDIR" "$MULTIARCH_LIBDIR/nvidia/current" /usr/lib64 /usr/lib; do
    if [[ -e "$d/libcuda.so.1" ]]; then echo "$d/libcuda.so.1"; return; fi
  done
}

# Print "URI|Signed-By" of the Debian mirror already configured for suite $1
# (deb822 *.sources files first, then one-line *.list / sources.list).
# Security mirrors are skipped: they only serve <codename>-security.
detect_debian_mirror() {
  local codename="$1" f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    # deb822: stanzas separated by blank lines; comment lines start with '#'.
    awk -v cn="$codename" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " cn " ") && enabled != "no" && uri != "" && uri !~ /security/) {
          print uri "|" signed; found = 1; exit
        }
        types = suites = uri = signed = ""; enabled = "yes"
      }
      BEGIN { enabled = "yes" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        key = tolower($1); sub(/:$/, "", key)
        val = $0; sub(/^[^:]*:[ \t]*/, "", val)
        if (key == "types")     types = val
        if (key == "suites")    suites = val
        if (key == "uris")      { split(val, a, /[ \t]+/); uri = a[1] }
        if (key == "signed-by") signed = val
        if (key == "enabled")   enabled = tolower(val)
      }
      END { if (!found) flush() }
    ' "$f" | sed -n 1p | grep . && return 0
  done
  # One-line format: "deb [opts] URI SUITE COMPONENT..."
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    awk -v cn="$codename" '
      $1 == "deb" {
        i = 2; signed = ""
        if ($2 ~ /^\[/) {   # options block, possibly several words
          while (i <= NF) {
            if ($i ~ /^signed-by=/) { signed = $i; sub(/^signed-by=/, "", signed); sub(/\]$/, "", signed) }
            if ($i ~ /\]$/) { i++; break }
            i++
          }
        }
        uri = $i; suite = $(i + 1)
        if (suite == cn && uri !~ /security/) { print uri "|" signed; exit }
      }
    ' "$f" | sed -n 1p | grep . && return 0
  done
  return 1
}

install_libcuda_from_apt() {
  local codename mirror uri signed
  # shellcheck disable=SC1091
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [[ -n "$codename" ]] || codename=bookworm
  [[ "$codename" == bookworm ]] || warn "OS codename is '$codename', not bookworm; trying anyway"

  if [[ ! -f "$APT_SOURCES_FILE" ]]; then
    mirror=$(detect_debian_mirror "$codename" || true)
    uri="${mirror%%|*}"
    signed="${mirror#*|}"
    [[ -n "$uri" ]] || { uri="http://deb.debian.org/debian"; warn "no configured Debian mirror found; using $uri"; }
    [[ -n "$signed" && "$signed" != "$mirror" ]] || signed="/usr/share/keyrings/debian-archive-keyring.gpg"
    log "adding contrib non-free for $codename from $uri -> $APT_SOURCES_FILE"
    # Only the extra components: 'main' is already configured elsewhere, so
    # this adds no duplicate entries.
    cat > "$APT_SOURCES_FILE" <<EOF
# Added by scripts/install-cuda-toolchain.sh: Debian's libcuda1 (CUDA driver
# API library, linked by the cust crate) lives in non-free.
Types: deb
URIs: ${uri}
Suites: ${codename} ${codename}-updates
Components: contrib non-free
Signed-By: ${signed}
EOF
  else
    log "$APT_SOURCES_FILE already present"
  fi
  apt_update_once
  log "apt-get install libcuda1 (no recommends: no kernel module, no X driver)"
  apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends libcuda1
}

# Make sure `-lcuda` resolves: the linker needs an unversioned libcuda.so in
# one of its default search dirs (or in /usr/local/cuda/lib64, which cust's
# build script adds with -L).  Debian's libcuda1 (via nvidia-alternative)
# already provides /usr/lib/x86_64-linux-gnu/libcuda.so -> /etc/alternatives/...;
# a GPU host whose driver is mounted elsewhere (e.g. /usr/local/nvidia/lib64)
# may have only libcuda.so.1, so we add the link ourselves when it is missing.
ensure_libcuda_dev_link() {
  local so1="$1" target
  if grep -qE 'libcuda\.so \(.*x86-64' <<<"$(ldconfig -p 2>/dev/null)"; then
    log "libcuda.so (link-time name) already known to ld.so: $(awk '/libcuda\.so \(.*x86-64/ {print $NF; exit}' <<<"$(ldconfig -p 2>/dev/null)")"
    return
  fi
  if [[ -e "$MULTIARCH_LIBDIR/libcuda.so" ]]; then
    log "libcuda.so present: $MULTIARCH_LIBDIR/libcuda.so"
    return
  fi
  # Relative link when libcuda.so.1 sits in the multiarch dir, absolute link
  # otherwise (e.g. a read-only /usr/local/nvidia/lib64 driver mount).
  if [[ "$(dirname "$so1")" == "$MULTIARCH_LIBDIR" ]]; then target="libcuda.so.1"; else target="$so1"; fi
  log "creating $MULTIARCH_LIBDIR/libcuda.so -> $target"
  ln -sfn "$target" "$MULTIARCH_LIBDIR/libcuda.so"
  ldconfig
}

step_libcuda() {
  local so1
  so1=$(find_libcuda_so1 || true)
  if [[ -n "$so1" ]]; then
    # Already there: either a real driver (GPU host) or a previous run.  Never
    # install Debian's libcuda1 over a real driver: a user-space library that
    # does not match the kernel module breaks the GPU.
    log "libcuda.so.1 already present: $so1 (skipping apt)"
  elif [[ "${KV_CANARY_SKIP_APT:-0}" == 1 ]]; then
    warn "KV_CANARY_SKIP_APT=1 and no libcuda.so.1 found: crates that link -lcuda (cust) will fail to link"
    return
  else
    install_libcuda_from_apt
    ldconfig
    so1=$(find_libcuda_so1 || true)
    [[ -n "$so1" ]] || die "libcuda1 installed but libcuda.so.1 not found"
    log "installed libcuda.so.1: $so1 -> $(readlink -f "$so1")"
  fi
  ensure_libcuda_dev_link "$so1"
}

# ============================================================================
# Step 2: nvcc 13.0 from PyPI wheels into $PREFIX; /usr/local/cuda -> it.
# ============================================================================

ensure_pip() {
  if python3 -m pip --version >/dev/null 2>&1; then return; fi
  [[ "${KV_CANARY_SKIP_APT:-0}" == 1 ]] && die "python3 -m pip is missing and KV_CANARY_SKIP_APT=1"
  log "python3/pip missing: installing Debian's python3-pip (used only for 'pip download')"
  apt_update_once
  apt-get install -y -qq --no-install-recommends python3 python3-pip ca-certificates
}

step_wheels() {
  local want have tmp dl stage
  want=$(printf '%s\n' "${WHEELS[@]}")
  have=$(cat "$STAMP" 2>/dev/null || true)
  if [[ "$have" == "$want" && -x "$CUDA_HOME_IN_PREFIX/bin/nvcc" && -x "$CUDA_HOME_IN_PREFIX/nvvm/bin/cicc" ]]; then
    log "CUDA ${CUDA_SERIES} wheels already unpacked in $PREFIX (skipping download)"
    return
  fi

  ensure_pip
  tmp=$(mktemp -d /tmp/kv-canary-cuda.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  dl="$tmp/wheels"
  stage="${PREFIX}.staging.$$"
  mkdir -p "$dl"

  # The wheels are tagged py3-none-manylinux2014_x86_64 (nvvm: manylinux2010),
  # so ask for those platforms explicitly: the download then does not depend
  # on the local python version/glibc, and --only-binary makes sure we never
  # fall back to an sdist.  --no-deps: the wheels have no deps we want.
  log "downloading wheels: ${WHEELS[*]}"
  python3 -m pip download --no-deps --no-cache-dir --progress-bar off \
    --only-binary=:all: --implementation py --python-version 3 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
    -d "$dl" "${WHEELS[@]}"
  [[ $(find "$dl" -name '*.whl' | wc -l) -eq ${#WHEELS[@]} ]] \
    || die "expected ${#WHEELS[@]} wheels, got: $(ls "$dl")"

  # Unpack into a staging dir and swap it in at the end, so an interrupted
  # run never leaves a half-populated $PREFIX that looks installed.
  rm -rf "$stage"
  mkdir -p "$stage"
  local whl
  for whl in "$dl"/*.whl; do
    log "unpacking $(basename "$whl")"
    python3 -m zipfile -e "$whl" "$stage/"
  done

  local home="$stage/nvidia/cu13"
  [[ -f "$home/bin/nvcc" && -f "$home/nvvm/bin/cicc" && -f "$home/include/cuda.h" ]] \
    || die "unexpected wheel layout under $home"
  # Zip extraction drops the executable bits.
  chmod 0755 "$home"/bin/* "$home"/nvvm/bin/*
  chmod 0644 "$home"/bin/nvcc.profile "$home"/bin/crt/* 2>/dev/null || true
  # The usual toolkit layout has lib64; cust's find_cuda_helper looks only at
  # <root>/lib64 (it adds -L<root>/lib64 and -L<root>/lib64/stubs).
  ln -sfn lib "$home/lib64"
  # Unversioned dev links (the wheels ship only the sonames), so that e.g.
  # `nvcc -lcudart` or a -lnvvm link also works.
  ln -sfn libcudart.so.13 "$home/lib/libcudart.so"
  ln -sfn libnvvm.so.4 "$home/lib/libnvvm.so"
  printf '%s\n' "${WHEELS[@]}" > "$stage/.kv-canary-wheels"

  rm -rf "$PREFIX"
  mkdir -p "$(dirname "$PREFIX")"
  mv "$stage" "$PREFIX"
  log "unpacked into $PREFIX ($(du -sh "$PREFIX" | cut -f1))"
}

step_cuda_link() {
  local cur
  if [[ -L "$CUDA_LINK" ]]; then
    cur=$(readlink "$CUDA_LINK")
    if [[ "$cur" == "$CUDA_HOME_IN_PREFIX" ]]; then
      log "$CUDA_LINK -> $cur (ok)"
      return
    fi
  fi
  if [[ -e "$CUDA_LINK" || -L "$CUDA_LINK" ]] && [[ "${KV_CANARY_FORCE_CUDA_LINK:-0}" != 1 ]]; then
    # Someone else's CUDA (e.g. a GPU image that ships its own toolkit).  Keep
    # it if it is the same release series; refuse otherwise.
    if grep -q "release ${CUDA_SERIES}," <<<"$("$CUDA_LINK/bin/nvcc" --version 2>/dev/null)"; then
      warn "$CUDA_LINK is not ours but already has nvcc ${CUDA_SERIES}; leaving it alone"
      return
    fi
    die "$CUDA_LINK exists and is not CUDA ${CUDA_SERIES} from $PREFIX; set KV_CANARY_FORCE_CUDA_LINK=1 to replace it"
  fi
  if [[ -d "$CUDA_LINK" && ! -L "$CUDA_LINK" ]]; then
    warn "moving existing directory $CUDA_LINK to $CUDA_LINK.bak.$$"
    mv "$CUDA_LINK" "$CUDA_LINK.bak.$$"
  fi
  ln -sfn "$CUDA_HOME_IN_PREFIX" "$CUDA_LINK"
  log "$CUDA_LINK -> $CUDA_HOME_IN_PREFIX"
}

# ============================================================================
# Step 3: verify.
# ============================================================================

step_verify() {
  local nvcc="$CUDA_LINK/bin/nvcc" ver tmp
  [[ -x "$nvcc" ]] || die "$nvcc missing"
  ver=$("$nvcc" --version) || die "nvcc --version failed"
  grep -q "release ${CUDA_SERIES}," <<<"$ver" || die "nvcc is not ${CUDA_SERIES}: $ver"
  command -v gcc >/dev/null || warn "no gcc on PATH: nvcc -ptx works without it only for device-only code; install build-essential"

  tmp=$(mktemp -d /tmp/kv-canary-nvcc-check.XXXXXX)
  cat > "$tmp/check.cu" <<'EOF'
extern "C" __global__ void kv_canary_check(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = 2.0f * a[i];
}
EOF
  if ! "$nvcc" -ptx -arch=sm_90 "$tmp/check.cu" -o "$tmp/check.ptx" 2>"$tmp/err"; then
    cat "$tmp/err" >&2; rm -rf "$tmp"; die "nvcc -ptx -arch=sm_90 failed"
  fi
  if ! grep -q '^\.target sm_90' "$tmp/check.ptx" || ! grep -q 'kv_canary_check' "$tmp/check.ptx"; then
    rm -rf "$tmp"; die "PTX output looks wrong"
  fi
  rm -rf "$tmp"

  local so1 dev
  so1=$(find_libcuda_so1 || true)
  dev=$(awk '/libcuda\.so \(.*x86-64/ {print $NF; exit}' <<<"$(ldconfig -p 2>/dev/null)")
  [[ -n "$dev" ]] || { [[ -e "$MULTIARCH_LIBDIR/libcuda.so" ]] && dev="$MULTIARCH_LIBDIR/libcuda.so"; }

  log "------------------------------------------------------------------"
  log "CUDA toolchain OK ($(( $(date +%s) - START_TS ))s)"
  log "  nvcc       : $nvcc ($(grep -o 'V[0-9][0-9.]*' <<<"$ver" | sed -n 1p)) -> $(readlink -f "$nvcc")"
  log "  CUDA root  : $CUDA_LINK -> $(readlink -f "$CUDA_LINK")"
  log "  include    : $CUDA_LINK/include (cuda.h, cuda_runtime.h)"
  log "  lib64      : $CUDA_LINK/lib64 -> lib (libcudart, libnvvm)"
  log "  libcuda.so.1: ${so1:-MISSING} ${so1:+-> $(readlink -f "$so1")}"
  log "  libcuda.so : ${dev:-MISSING (cust will not link)}"
  log "  PTX check  : nvcc -ptx -arch=sm_90 ok"
  log "------------------------------------------------------------------"
}

step_libcuda
step_wheels
step_cuda_link
step_verify
