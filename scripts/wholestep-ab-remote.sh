#!/usr/bin/env bash
# ab-remote.sh [--tests] [--rounds N] [--as NAME=VARIANT:ARGS ...] [-- BENCH-ARGS] — the GPU
# machine's half of scripts/wholestep-ab.sh (staged as .device-ab/ab-remote.sh): runs every staged variant of the
# whole-step benchmark N times (default 2), alternating (A B C A B C ...), each with BENCH-ARGS
# (default `--devices 1`; e.g. `-- --devices 1 --filter decode` for the decode rows only, ~5 s a
# run), and writes $OUT/ab.log (every run's output, headed `=== NAME round R`) and
# $OUT/ab-summary.txt (per row, each variant's median graph time and eager launches;
# ab-summary.py). --tests first runs each variant's GPU tests (staged by wholestep-ab.sh --tests;
# ~45 s a variant) into $OUT/ab-tests.log, headed `=== NAME tests`, and prints each variant's
# result line; the exit status is non-zero when any variant's tests or runs failed.
# --as NAME=VARIANT:ARGS adds a variant to the rounds that runs the staged VARIANT's benchmark
# with ARGS (space-separated) before BENCH-ARGS, e.g. `--as endsn=ends:--no-defer-head-writes`:
# one build measured with a tuning off, beside it with the tuning on (no tests of its own).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
rounds=2
tests=0
aliases=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --tests) tests=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --as) aliases+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "ab-remote: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--devices 1)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
mapfile -t names < <(cut -f1 "$work/bins/VARIANTS")
# Each round runs the staged variants, then the aliases: NAME -> binary and extra arguments.
declare -A binary extra
for n in "${names[@]}"; do binary[$n]=$n; extra[$n]=; done
runs=("${names[@]}")
for a in "${aliases[@]}"; do
  alias_name=${a%%=*}
  rest=${a#*=}
  target=${rest%%:*}
  [[ $alias_name != "$a" && $rest == *:* && -n ${binary[$target]:-} ]] \
    || { echo "ab-remote: --as wants NAME=VARIANT:ARGS of a staged variant, got '$a'" >&2; exit 2; }
  binary[$alias_name]=$target
  extra[$alias_name]=${rest#*:}
  runs+=("$alias_name")
done
{
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo "variants:"
  sed 's/^/  /' "$work/bins/VARIANTS"
  for n in "${runs[@]:${#names[@]}}"; do echo "  $n	${binary[$n]} ${extra[$n]}"; done
  echo "bench args: ${args[*]}; rounds: $rounds"
} >"$OUT/ab.log"
status=0
if [[ $tests == 1 ]]; then
  : >"$OUT/ab-tests.log"
  for n in "${names[@]}"; do
    if [[ ! -x $work/bins/$n.tests ]]; then
      echo "$n: no GPU tests staged (wholestep-ab.sh --tests)" | tee -a "$OUT/ab-tests.log"
      status=1
      continue
    fi
    echo "=== $n tests" >>"$OUT/ab-tests.log"
    "$work/bins/$n.tests" >>"$OUT/ab-tests.log" 2>&1
    rc=$?
    [[ $rc == 0 ]] || status=1
    result=$(sed -n '/^=== '"$n"' tests$/,$p' "$OUT/ab-tests.log" | grep -E 'GPU test result|SKIPPED' | tail -1)
    echo "$n: tests rc=$rc ${result:-no result line}"
  done
fi
for ((r = 1; r <= rounds; r++)); do
  for n in "${runs[@]}"; do
    echo "=== $n round $r" >>"$OUT/ab.log"
    read -ra more <<<"${extra[$n]}"
    "$work/bins/${binary[$n]}" "${more[@]}" "${args[@]}" --out "$work/out-$n-$r" >>"$OUT/ab.log" 2>&1 \
      || status=1
  done
done
python3 "$here/ab-summary.py" "$OUT/ab.log" | tee "$OUT/ab-summary.txt"
exit $status
