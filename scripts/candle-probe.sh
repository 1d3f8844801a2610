#!/usr/bin/env bash
# candle-probe.sh: checks that candle-core 0.10.2 (`cuda`) and kv-canary (`cudarc`) resolve to
# one cudarc (issue 32 item 4). Resolves crates/candle-probe (its dependency graph only: nothing
# is compiled) and prints `cargo tree -i cudarc` for the cudarc candle-core uses; fails unless
# kv-canary depends on that same version. candle's `ug-cuda` brings an older cudarc of its own,
# which nothing of ours touches.
set -euo pipefail
cd "$(dirname "$0")/../crates/candle-probe"
cargo generate-lockfile --quiet
version=$(cargo tree -e normal -p candle-core --depth 1 --prefix none | sed -n 's/^cudarc v\([0-9.]*\).*/\1/p' | sort -u)
[ -n "$version" ] || { echo "candle-core depends on no cudarc" >&2; exit 1; }
tree=$(cargo tree -e normal -i "cudarc@$version")
echo "$tree"
grep -q '^├── candle-core v0.10.2\|^└── candle-core v0.10.2' <<<"$tree"
grep -q '^├── kv-canary v\|^└── kv-canary v' <<<"$tree"
echo "one cudarc ($version) for candle-core 0.10.2 and kv-canary"
rm -f Cargo.lock
