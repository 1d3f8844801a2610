#!/usr/bin/env bash
# Peak RSS of the cuda_gpu process under various tools and step counts.
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/cuda_gpu}
export KV_CANARY_UNDER_SANITIZER=1
one() { # label steps test cmd...
  local label=$1 steps=$2 test=$3; shift 3
  local t0=$SECONDS
  KV_CANARY_VIEW_STEPS=$steps "$@" "$bin" "$test" >"$OUT/rm-$label.log" 2>&1 &
  local pid=$! peak=0
  while kill -0 $pid 2>/dev/null; do
    for p in $(pgrep -x cuda_gpu); do
      r=$(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null); r=${r:-0}
      (( r > peak )) && peak=$r
    done
    sleep 0.2
  done
  wait $pid; local rc=$?
  printf '%-34s steps=%-4s rc=%-3s %4ss peak RSS %7d MiB  %s\n' "$label" "$steps" "$rc" "$((SECONDS-t0))" "$((peak/1024))" "$(grep -E 'test .* ok|SUMMARY' "$OUT/rm-$label.log" | tr '\n' ' ' | cut -c1-120)"
}
one plain-120 120 views_step_over
one memcheck-40 40 views_step_over compute-sanitizer --tool memcheck
one race-10 10 views_step_over compute-sanitizer --tool racecheck
one race-20 20 views_step_over compute-sanitizer --tool racecheck
one race-40 40 views_step_over compute-sanitizer --tool racecheck
one race-40-nocpasync 40 views_step_over compute-sanitizer --tool racecheck --racecheck-memcpy-async no
one race-graph-views 0 step_graph_over_views compute-sanitizer --tool racecheck
one race-step-api 0 step_api_on_the_gpu compute-sanitizer --tool racecheck
