#!/usr/bin/env bash
# Session 10 A/B, second run (device half): p3 (4 blocks a SM, landed) and p4 (5 blocks a SM),
# 5 alternating rounds of the decode rows. Writes $OUT/ab.log and $OUT/ab-summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
: >"$OUT/ab.log"
for r in 1 2 3 4 5; do
  for v in p3 p4; do
    echo "=== $v round $r" >>"$OUT/ab.log"
    timeout 60 "$work/bins/$v" --devices 1 --filter decode --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1
    echo "$v $r rc=$?"
  done
done
python3 "$here/ab-summary.py" "$OUT/ab.log" >"$OUT/ab-summary.txt" 2>&1
head -14 "$OUT/ab-summary.txt"
