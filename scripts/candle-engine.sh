#!/usr/bin/env bash
# candle-engine.sh: the candle engine of issue 34 (engines/candle, its own workspace, never built
# by the root workspace): rustfmt, clippy with warnings denied, and its tests (a clean run of
# 1000 steps and every bug flag caught), on candle's CPU backend, then the same for the
# kv-canary-candle adapter (crates/candle). The engine's lock file is the project's own
# (`--locked`). Only the CPU path is built; `--features cuda` is the GPU path's.
set -euo pipefail
cd "$(dirname "$0")/../engines/candle"
# cudarc picks its bindings from this if the `cuda` feature is ever built (as .ci/run does).
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
# kv-canary-candle, the adapter the engine's GPU path uses (crates/candle, its own workspace;
# a library: no lock file of its own, candle-core pinned): its device-free checks and lints.
cd ../../crates/candle
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test
rm -rf target
