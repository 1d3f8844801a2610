#!/usr/bin/env bash
# The first device command of the next session with device time (session 11 had none):
#   here:  scripts/wholestep-ab.sh --tests main=s11-main ends=exp/write-ends-s11
#          cp docs/cuda-results/experiments/s11/next-remote.sh .device-ab/
#   there: bash .device-ab/next-remote.sh            (carry .device-ab; ~5 minutes)
# s11-main is main with two host-side commits that have not run on the H200: session 10's two
# refactors again (6dc1c55, 1ac4415, taken off main in session 11 for that reason) and session
# 11's PlanVerifyLaunches (cuda::plan_verify_head[_pair] say which launches they queued; the GPU
# test plan_verify_head_matches_two_launches asserts it); exp/write-ends-s11 is the prepared
# deferred-head-writes experiment (docs/benchmarks.md, session 10, "Prepared, not run") on top
# of it. Runs both variants' GPU tests, then 4 alternating rounds of main, ends and endsn (ends
# with --no-defer-head-writes: main's launches), decode rows; writes $OUT/ab-tests.log,
# $OUT/ab.log and $OUT/ab-summary.txt. The refactors land when main's tests pass (then the full
# sanitizers as usual); the experiment lands only if it wins and its own tests and sanitizers pass.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
: >"$OUT/ab-tests.log"
for v in main ends; do
  echo "=== $v tests" >>"$OUT/ab-tests.log"
  timeout 240 "$work/bins/$v.tests" >>"$OUT/ab-tests.log" 2>&1
  rc=$?
  echo "$v tests rc=$rc $(sed -n "/^=== $v tests\$/,\$p" "$OUT/ab-tests.log" | grep -E 'GPU test result' | tail -1)"
done
grep -A2 "write_ends" "$OUT/ab-tests.log" | head -6
: >"$OUT/ab.log"
for r in 1 2 3 4; do
  for v in main ends endsn; do
    echo "=== $v round $r" >>"$OUT/ab.log"
    case $v in
      endsn) timeout 60 "$work/bins/ends" --devices 1 --filter decode --no-defer-head-writes --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1 ;;
      *) timeout 60 "$work/bins/$v" --devices 1 --filter decode --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1 ;;
    esac
    echo "$v $r rc=$?"
  done
done
python3 "$here/ab-summary.py" "$OUT/ab.log" >"$OUT/ab-summary.txt" 2>&1
head -14 "$OUT/ab-summary.txt"
