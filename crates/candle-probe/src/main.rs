//! Never built: the manifest is the probe (`scripts/candle-probe.sh`).
fn main() {}
