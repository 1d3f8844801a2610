#!/usr/bin/env bash
# The device half of the prepared deferred-head-writes A/B (docs/benchmarks.md, session 10):
#   here:  scripts/wholestep-ab.sh --tests main=main ends=exp/write-ends
#          cp docs/cuda-results/experiments/s10/ends-remote.sh .device-ab/
#   there: bash .device-ab/ends-remote.sh            (carry .device-ab; ~4 minutes)
# Runs the ends variant's GPU tests (with write_ends_match_separate_writes, and the step API
# tests with the head writes deferred), then 4 alternating rounds of main, ends (the head writes
# in the tail writes' launch: 3 launches a K+V step, in the raw launches and the step API alike)
# and endsn (ends with --no-defer-head-writes: main's launches), decode rows; writes
# $OUT/ab-tests.log, $OUT/ab.log and $OUT/ab-summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
: >"$OUT/ab-tests.log"
echo "=== ends tests" >>"$OUT/ab-tests.log"
timeout 240 "$work/bins/ends.tests" >>"$OUT/ab-tests.log" 2>&1
echo "ends tests rc=$? $(grep -E 'GPU test result' "$OUT/ab-tests.log" | tail -1)"
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
