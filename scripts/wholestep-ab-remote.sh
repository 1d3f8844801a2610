#!/usr/bin/env bash
# ab-remote.sh [--rounds N] [-- BENCH-ARGS] — the GPU machine's half of scripts/wholestep-ab.sh
# (staged as .device-ab/ab-remote.sh): runs every staged variant of the whole-step benchmark N
# times (default 2), alternating (A B C A B C ...), each with BENCH-ARGS (default
# `--devices 1`; e.g. `-- --devices 1 --filter decode` for the decode rows only, ~5 s a run),
# and writes $OUT/ab.log (every run's output, headed `=== NAME round R`) and $OUT/ab-summary.txt
# (per row, each variant's median graph time and eager launches; ab-summary.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
rounds=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "ab-remote: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--devices 1)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
mapfile -t names < <(cut -f1 "$work/bins/VARIANTS")
{
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo "variants:"
  sed 's/^/  /' "$work/bins/VARIANTS"
  echo "bench args: ${args[*]}; rounds: $rounds"
} >"$OUT/ab.log"
status=0
for ((r = 1; r <= rounds; r++)); do
  for n in "${names[@]}"; do
    echo "=== $n round $r" >>"$OUT/ab.log"
    "$work/bins/$n" "${args[@]}" --out "$work/out-$n-$r" >>"$OUT/ab.log" 2>&1 || status=1
  done
done
python3 "$here/ab-summary.py" "$OUT/ab.log" | tee "$OUT/ab-summary.txt"
exit $status
