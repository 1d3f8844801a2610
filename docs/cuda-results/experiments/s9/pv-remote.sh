#!/usr/bin/env bash
# The device half of the prepared plan-and-head-verify A/B (docs/benchmarks.md, session 9):
#   here:  scripts/wholestep-ab.sh --tests main=main pv=exp/plan-verify
#          cp docs/cuda-results/experiments/s9/pv-remote.sh .device-ab/
#   there: bash .device-ab/pv-remote.sh            (carry .device-ab; ~4 minutes)
# Runs pv's GPU tests (with plan_verify_head_matches_two_launches), then 4 alternating rounds of
# main, pv (the two launches) and pvf (pv with KVC_BENCH_FUSE_PLAN=1), decode rows; writes
# $OUT/ab-tests.log, $OUT/ab.log and $OUT/ab-summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
: >"$OUT/ab-tests.log"
echo "=== pv tests" >>"$OUT/ab-tests.log"
timeout 240 "$work/bins/pv.tests" >>"$OUT/ab-tests.log" 2>&1
echo "pv tests rc=$? $(grep -E 'GPU test result' "$OUT/ab-tests.log" | tail -1)"
grep -A2 "plan_verify_head" "$OUT/ab-tests.log" | head -6
: >"$OUT/ab.log"
for r in 1 2 3 4; do
  for v in main pv pvf; do
    echo "=== $v round $r" >>"$OUT/ab.log"
    case $v in
      pvf) KVC_BENCH_FUSE_PLAN=1 timeout 60 "$work/bins/pv" --devices 1 --filter decode --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1 ;;
      *) timeout 60 "$work/bins/$v" --devices 1 --filter decode --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1 ;;
    esac
    echo "$v $r rc=$?"
  done
done
python3 "$here/ab-summary.py" "$OUT/ab.log" | tee "$OUT/ab-summary.txt" | head -12
