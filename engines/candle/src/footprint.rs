//! The size of the canary integration: the lines of `src/canary.rs` (the CPU path) and of
//! `src/gpu_canary.rs` (the GPU path's, which also uses `canary.rs`'s finding and sweep
//! helpers) — code lines, neither blank nor comments — and the distinct kv-canary names each
//! imports.

/// (code lines, distinct kv-canary names) of `src/canary.rs`.
pub fn canary_footprint() -> (usize, Vec<String>) {
    footprint(include_str!("canary.rs"))
}

/// (code lines, distinct kv-canary names) of `src/gpu_canary.rs`.
pub fn gpu_canary_footprint() -> (usize, Vec<String>) {
    footprint(include_str!("gpu_canary.rs"))
}

fn footprint(source: &str) -> (usize, Vec<String>) {
    let lines = source
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count();
    let mut names = Vec::new();
    for stmt in source.split("use kv_canary").skip(1) {
        let stmt = &stmt[..stmt.find(';').unwrap_or(stmt.len())];
        // Only the imported items (after the last `::` of each path), not module names.
        for word in stmt.split(|c: char| !c.is_alphanumeric() && c != '_') {
            if word.starts_with(|c: char| c.is_ascii_uppercase())
                && !names.iter().any(|n| n == word)
            {
                names.push(word.to_string());
            }
        }
    }
    names.sort();
    (lines, names)
}
