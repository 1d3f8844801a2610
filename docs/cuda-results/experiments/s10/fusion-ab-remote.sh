#!/usr/bin/env bash
# Session 10 A/B (device half): main, pv (plan with head verify), pvoff (pv with
# --no-plan-fusion), p3 (4 blocks a SM), p4 (2 entries a thread a round); 4 alternating
# rounds of the decode rows, then one round of the prefill rows of main and pvh.
# Writes $OUT/ab.log and $OUT/ab-summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
tar xzf "$here/bins.tgz" -C "$work"
: >"$OUT/ab.log"
for r in 1 2 3 4; do
  for v in main pv pvoff p3 p4; do
    echo "=== $v round $r" >>"$OUT/ab.log"
    case $v in
      pvoff) timeout 60 "$work/bins/pv" --devices 1 --filter decode --no-plan-fusion --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1 ;;
      *) timeout 60 "$work/bins/$v" --devices 1 --filter decode --out "$work/o-$v-$r" >>"$OUT/ab.log" 2>&1 ;;
    esac
    echo "$v $r rc=$?"
  done
done
for v in main pv; do
  echo "=== $v round 5" >>"$OUT/ab.log"
  timeout 90 "$work/bins/$v" --devices 1 --filter prefill --out "$work/p-$v" >>"$OUT/ab.log" 2>&1
  echo "$v prefill rc=$?"
done
python3 "$here/ab-summary.py" "$OUT/ab.log" >"$OUT/ab-summary.txt" 2>&1
head -14 "$OUT/ab-summary.txt"
