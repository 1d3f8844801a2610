#!/usr/bin/env bash
# wholestep-ab.sh [--tests] NAME=REV [NAME=REV ...] — stage a same-machine A/B comparison of the
# whole-step benchmark (`cuda_wholestep`) across git revisions, for one command on the GPU machine.
#
#   scripts/wholestep-ab.sh base=main new=HEAD wip=.     # here (no GPU needed)
#   # on the GPU machine, from the repository root, with .device-ab/ carried there:
#   bash .device-ab/ab-remote.sh [--tests] [--rounds N] [--as NAME=VARIANT:ARGS] [-- BENCH-ARGS]
#
# --tests also stages each revision's GPU test binary (`cuda_gpu`, release, features cudarc, as
# scripts/gpu-build.sh builds it; about 5 MB a variant more), so that ab-remote.sh --tests runs
# every variant's GPU tests before the rounds: candidates tested and compared in one command
# (each command on the GPU machine may cost a cold start of about a minute of device time).
#
# REV is anything `git rev-parse` takes, or `.` for the working tree as it is (uncommitted
# changes included). Each revision is built in a detached worktree under target/ab/ (`.`: here),
# each NAME with a target directory of its own (target/ab/target-NAME): cargo decides freshness
# by file times, so worktrees sharing one would take one another's stale builds. A NAME's first
# build takes a few minutes (the dependencies); later ones rebuild the workspace crates only
# (about a minute on 2 cores). The binaries go, compressed, to .device-ab/bins.tgz (about 3-7 MB a
# variant; the device tool carries 64 MiB), beside ab-remote.sh and ab-summary.py.
# Variants run alternately (A B C A B C ...) on one machine, so the machine-to-machine spread of
# the H200s (5 % seen in session 7) does not enter the comparison; ab-summary.py prints, per
# row, each variant's median over the rounds (graph µs, and every eager launch).
#
# Session 7 did its A/B runs so by hand (docs/cuda-results/experiments/s7/); this is that,
# kept. Needs the toolchain of scripts/install-cuda-toolchain.sh.
set -euo pipefail
# cudarc's bindings are chosen by the build, not the library (Cargo.toml): CUDA 13.0 here.
export CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-13000}
root=$(git rev-parse --show-toplevel)
cd "$root"
with_tests=0
if [[ ${1:-} == --tests ]]; then
  with_tests=1
  shift
fi
[[ $# -gt 0 ]] || { sed -n '2,12p' "$0" >&2; exit 2; }
export CARGO_TERM_COLOR=never
dest=.device-ab
ab=target/ab
mkdir -p "$ab"
rm -rf "$dest" "$ab/bins"
mkdir -p "$dest" "$ab/bins"

# The path of the executable of target $1 that cargo reports (JSON messages on stdin).
exe_path() { python3 "$root/scripts/cargo-executables.py" "$1" | cut -d' ' -f2-; }

names=()
for spec in "$@"; do
  name=${spec%%=*}
  rev=${spec#*=}
  [[ $name != "$spec" && $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "wholestep-ab: want NAME=REV, got '$spec'" >&2; exit 2; }
  if [[ $rev == . ]]; then
    src=$root
    label="working tree of $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + changes')"
  else
    sha=$(git rev-parse --verify "$rev^{commit}")
    src=$root/$ab/wt-$name
    git worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
    git worktree add --detach --quiet "$src" "$sha"
    label="$(git log -1 --format='%h %s' "$sha" | cut -c1-100)"
  fi
  echo "[wholestep-ab] $name: $label"
  exe=$(cd "$src" && CARGO_TARGET_DIR="$root/$ab/target-$name" cargo bench --features cuda --bench cuda_wholestep --no-run --message-format=json | exe_path cuda_wholestep)
  [[ -n $exe ]] || { echo "wholestep-ab: no cuda_wholestep executable for $name" >&2; exit 1; }
  cp "$exe" "$ab/bins/$name"
  if [[ $with_tests == 1 ]]; then
    exe=$(cd "$src" && CARGO_TARGET_DIR="$root/$ab/target-$name" cargo test --release --features cudarc --test cuda_gpu --no-run --message-format=json | exe_path cuda_gpu)
    [[ -n $exe ]] || { echo "wholestep-ab: no cuda_gpu executable for $name" >&2; exit 1; }
    cp "$exe" "$ab/bins/$name.tests"
  fi
  echo "$name	$label" >>"$ab/bins/VARIANTS"
  names+=("$name")
  [[ $rev == . ]] || git worktree remove --force "$src"
done
tar czf "$dest/bins.tgz" -C "$ab" bins
cp scripts/wholestep-ab-remote.sh "$dest/ab-remote.sh"
cp scripts/wholestep-ab-summary.py "$dest/ab-summary.py"
echo "[wholestep-ab] staged ${names[*]} in $dest ($(du -sh "$dest" | cut -f1)); carry it, then: bash $dest/ab-remote.sh"
