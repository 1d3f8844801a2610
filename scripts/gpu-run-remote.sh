#!/usr/bin/env bash
# gpu-run-remote.sh — run the staged GPU binaries on the GPU machine; logs go to $OUT.
#
#   .device-run/gpu-run-remote.sh [all|tests|sanitize|step|bench|bench-quick|host|profile|wholestep
#                                  |sanitize-full|sanitize-full-1..4|racecheck-write|racecheck-views ...]
#
# Run from the repository root of the copy on the GPU machine, after scripts/gpu-build.sh
# staged .device-run/ here and it was carried there. With no argument it runs `all`: the GPU
# tests (the library's and the conformance runner's golden_gpu), the golden vectors through the
# conformance runner's command line on the GPU, compute-sanitizer
# memcheck, racecheck, initcheck and synccheck over the GPU tests (reduced case counts), the cuda_step and cuda_engine examples and
# the benchmark (with its plot) and the host-cost benchmark (criterion: a typed launch against
# the raw driver launch). `profile` (not in `all`) runs Nsight Compute on a few kernels of the
# benchmark. `wholestep` (not in `all`, whose logs already fill the device tool's 8 files) runs
# the whole-step benchmark of the device step API (`wholestep`, the `cuda_wholestep` bench) on
# one device, then with `--devices 2` (one canary per device at once; on a one-GPU machine it
# says loudly that N=2 needs nvidia-h200-x2 and runs N=1; WHOLESTEP_ARGS replaces the flag) and writes
# $OUT/wholestep.log, $OUT/wholestep.csv and $OUT/wholestep.json; its verdict lines go to
# summary.txt.
# benchmark. `sanitize-full-1` .. `-4` (not in `all`) run the four sanitizers at full case counts,
# split so that each part fits the GPU machine's 10 minutes a command (1: memcheck and
# synccheck; 2: initcheck; 3 and 4: racecheck over two halves of the tests); `sanitize-full` all
# four parts at once. `racecheck-write` (not in `all`) runs racecheck over the write kernel's
# tests with every hazard printed. Logs (the device tool returns at most 8 files):
#   $OUT/tests.log  $OUT/sanitizer.log  $OUT/step.log  $OUT/bench.log  $OUT/bench.csv
#   $OUT/bench.json  $OUT/bench.png  $OUT/summary.txt; the host-cost report goes to bench.log,
#   `profile` writes $OUT/profile.log
# Exit status: non-zero when any part failed; summary.txt says which.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
export KV_CANARY_GOLDEN_DIR="$here/golden"
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(all)
summary="$OUT/summary.txt"
: >"$summary"
status=0
note() { echo "$*" | tee -a "$summary"; }
run_part() { # name, log, command...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-28s rc=%-3s %4ss  (%s)' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  [[ $rc -eq 0 ]] || status=1
}
want() { local p; for p in "${parts[@]}"; do [[ $p == all || $p == "$1" ]] && return 0; done; return 1; }
want_only() { local p; for p in "${parts[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } >"$OUT/tests.log" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
if want tests; then
  run_part "gpu tests" "$OUT/tests.log" "$here/cuda_gpu"
  run_part "golden gpu test" "$OUT/tests.log" "$here/golden_gpu"
  run_part "conformance --backend cuda" "$OUT/tests.log" "$here/conformance" "$here/golden" --backend cuda
fi
# sanitize QUICK LABEL TOOLS -- TEST-ARGS: each compute-sanitizer tool over the GPU tests that
# TEST-ARGS select (name filters, `--skip NAME`; none: all), at a tenth of the cases when QUICK
# is 1, at full case counts when it is 0; then the summary lines of every tool run so far.
sanitize() {
  local quick=$1 label=$2 tools=() tool
  shift 2
  while [[ $# -gt 0 && $1 != -- ]]; do tools+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  local env=(KV_CANARY_UNDER_SANITIZER=1)
  [[ $quick == 1 ]] && env+=(KV_CANARY_GPU_QUICK=1)
  for tool in "${tools[@]}"; do
    echo "=== compute-sanitizer --tool $tool ($label: $("$here/cuda_gpu" --list "$@" | wc -l) tests${*:+, selected by: $*}) ===" >>"$OUT/sanitizer.log"
    run_part "sanitizer $tool ($label)" "$OUT/sanitizer.log" \
      env "${env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 97 --print-limit 20 "$here/cuda_gpu" "$@"
  done
  grep -E "=== compute-sanitizer|ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|Uninitialized|Barrier" "$OUT/sanitizer.log" | uniq -c | tee -a "$summary"
}
if want sanitize; then
  sanitize 1 quick memcheck racecheck initcheck synccheck
fi
# Full case counts (issue 11). Estimated from the quick run's per-test times x 10 for the scaled
# tests (docs/reliability.md, "Sanitizers at full case counts"): memcheck ~140 s, synccheck
# ~95 s, initcheck ~150 s, racecheck ~455 s. The GPU machine allows 10 minutes a command, so
# the full run is four parts of 2.5-4 minutes each: run them as four commands (or 1 and 2
# together).
# `sanitize-full` runs all four parts in one command (for a machine without that limit).
race_split=(plan hostile)  # racecheck part 3: every test whose name contains one; part 4: the rest
if want_only sanitize-full || want_only sanitize-full-1; then
  sanitize 0 full-1 memcheck synccheck
fi
if want_only sanitize-full || want_only sanitize-full-2; then
  sanitize 0 full-2 initcheck
fi
if want_only sanitize-full || want_only sanitize-full-3; then
  sanitize 0 full-3 racecheck -- "${race_split[@]}"
fi
if want_only sanitize-full || want_only sanitize-full-4; then
  skips=()
  for f in "${race_split[@]}"; do skips+=(--skip "$f"); done
  sanitize 0 full-4 racecheck -- "${skips[@]}"
fi
if want_only racecheck-write; then
  # The write kernel's racecheck question (docs/reliability.md): the tests with multi-tile write
  # requests and the probe of the named barrier, full case counts, every hazard printed
  # (~1-2 minutes).
  echo "=== compute-sanitizer --tool racecheck (write kernel tests) ===" >>"$OUT/sanitizer.log"
  KV_CANARY_RACECHECK_PROBE_NAMED=1 KV_CANARY_UNDER_SANITIZER=1 run_part "racecheck write tests" "$OUT/sanitizer.log" \
    compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 97 --print-limit 200 \
    "$here/cuda_gpu" write_differential hostile_write nothing_lost racecheck_probe
  grep -E "RACECHECK SUMMARY|Race reported|Hazard" "$OUT/sanitizer.log" | sort | uniq -c | tee -a "$summary"
fi
if want_only racecheck-views; then
  # The racecheck exit-9 item of docs/reliability.md: the view-step test under racecheck at
  # growing step counts (RACE_VIEW_STEPS, default "12 30 60 120"), each run's exit status, wall
  # time, peak resident memory of the test process (racecheck's own memory is in it; sampled
  # every 0.5 s) and peak device memory; then the kernel log's last lines (an OOM kill names its
  # victim there). docs/cuda-results/racecheck-memory.log has the runs.
  log="$OUT/racecheck-views.log"
  for n in ${RACE_VIEW_STEPS:-12 30 60 120}; do
    echo "=== racecheck, views_step_over_engine_memory, KV_CANARY_VIEW_STEPS=$n ===" >>"$log"
    t0=$SECONDS
    KV_CANARY_UNDER_SANITIZER=1 KV_CANARY_VIEW_STEPS=$n compute-sanitizer --tool racecheck \
      --error-exitcode 97 --print-limit 20 "$here/cuda_gpu" views_step_over >>"$log" 2>&1 &
    pid=$!
    peak_rss=0 peak_gpu=0
    while kill -0 "$pid" 2>/dev/null; do
      rss=0  # the test process's own (racecheck runs inside it), not the tool's launcher
      for p in $(pgrep -x cuda_gpu); do
        r=$(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null)
        (( ${r:-0} > rss )) && rss=${r:-0}
      done
      gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
      (( rss > peak_rss )) && peak_rss=$rss
      (( ${gpu:-0} > peak_gpu )) && peak_gpu=${gpu:-0}
      sleep 0.5
    done
    wait "$pid"
    rc=$?
    note "$(printf 'racecheck views steps=%-4s rc=%-3s %4ss  peak RSS %s MiB, peak GPU %s MiB' "$n" "$rc" "$((SECONDS - t0))" "$((peak_rss / 1024))" "$peak_gpu")"
    [[ $rc -eq 0 ]] || status=1
  done
  { echo "=== dmesg (last lines) ==="; dmesg 2>&1 | tail -n 15; } >>"$log"
  grep -E "RACECHECK SUMMARY|test views|Error|error|Killed|oom" "$log" | tail -n 30 | tee -a "$summary"
fi
if want step; then
  run_part "cuda_step example" "$OUT/step.log" "$here/cuda_step"
  run_part "cuda_engine example" "$OUT/step.log" "$here/cuda_engine"
fi
if want bench || want bench-quick; then
  extra=()
  want bench-quick && ! want bench && extra=(--quick --reps 50)
  run_part "benchmark" "$OUT/bench.log" "$here/cuda_bench" --out "$OUT" "${extra[@]}"
  run_part "bench plot" "$OUT/bench.log" python3 "$here/bench-plot.py" "$OUT/bench.csv" "$OUT/bench.png"
fi
if want host; then
  echo "=== host cost (criterion) ===" >>"$OUT/bench.log"
  run_part "host-cost benchmark" "$OUT/bench.log" "$here/cuda_host" --bench --noplot
  grep "host cost, " "$OUT/bench.log" | tee -a "$summary"
fi
if want_only wholestep; then
  # WHOLESTEP_ARGS: default "--devices 2"; e.g. "--devices 2 --quick".
  # shellcheck disable=SC2086
  run_part "whole-step benchmark" "$OUT/wholestep.log" "$here/wholestep" --out "$OUT" ${WHOLESTEP_ARGS:---devices 2}
  grep -E "  (met|NOT MET) +(met|NOT MET|-) *$|targets:|stalls over|every measured step|!!!" "$OUT/wholestep.log" | tee -a "$summary"
fi
if want_only profile; then
  # One kernel of one workload each: Nsight Compute, clocks and caches left alone.
  profile() { # label, kernel regex, bench args...
    local label=$1 kernel=$2; shift 2
    echo "=== ncu: $label ($kernel) ===" >>"$OUT/profile.log"
    timeout 120 ncu --clock-control none --cache-control none -k "regex:$kernel" --launch-skip 3 -c 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters \
      "$here/cuda_bench" --out /tmp/prof --reps 20 --quick "$@" >>"$OUT/profile.log" 2>&1
    note "$(printf '%-28s rc=%s' "profile $label" "$?")"
  }
  profile "plan decode bs=1" '^kv_canary_plan_lean$' --only plan --filter "decode bs=1,"
  profile "plan SWA checked" '^kv_canary_plan_lean_lut$' --only plan --filter "with LUT"
  profile "plan bs=1024" '^kv_canary_plan_lean$' --only plan --filter "bs=1024"
  profile "plan bs=4096" '^kv_canary_plan_large$' --only plan --filter "bs=4096"
fi
echo "---- summary ----"
cat "$summary"
exit $status
