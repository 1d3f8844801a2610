#!/usr/bin/env bash
# candle-engine.sh: the candle engine of issue 34 (engines/candle, its own workspace, never built
# by the root workspace): rustfmt, clippy with warnings denied, and its tests (a clean run of
# 1000 steps and every bug flag caught), on candle's CPU backend. The lock file is the
# project's own (`--locked`). Only the CPU path is built; `--features cuda` is the GPU path's.
set -euo pipefail
cd "$(dirname "$0")/../engines/candle"
# cudarc picks its bindings from this if the `cuda` feature is ever built (as .ci/run does).
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
