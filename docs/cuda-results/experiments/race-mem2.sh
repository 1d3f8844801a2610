#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
source <(sed -n '/^one()/,/^}/p' "$here/race-mem.sh")
bin=$here/cuda_gpu
export KV_CANARY_UNDER_SANITIZER=1
compute-sanitizer --version | tail -1
one race-10-all 10 views_step_over compute-sanitizer --tool racecheck
for k in plan verify write readback memset; do
  one race-10-only-$k 10 views_step_over compute-sanitizer --tool racecheck --kernel-name kns=$k
done
one race-10-excl-readback 10 views_step_over compute-sanitizer --tool racecheck --kernel-name-exclude kns=readback
one race-10-nopatch 10 views_step_over compute-sanitizer --tool racecheck --racecheck-detect-level error
