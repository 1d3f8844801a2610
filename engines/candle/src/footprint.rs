//! The size of the canary integration, the figure issue 34 asks for: code lines (neither blank
//! nor comments) and the distinct kv-canary names the engine's canary code uses, imported or
//! written as a `kv_canary::` path. The CPU path is `src/canary.rs`, the GPU path
//! `src/gpu_canary.rs`; both count `src/canary_common.rs`, the helpers they share.

/// (code lines, distinct kv-canary names) of the CPU path: `src/canary.rs` and
/// `src/canary_common.rs`.
pub fn canary_footprint() -> (usize, Vec<String>) {
    footprint(&[include_str!("canary.rs"), include_str!("canary_common.rs")])
}

/// (code lines, distinct kv-canary names) of the GPU path: `src/gpu_canary.rs` and
/// `src/canary_common.rs`.
pub fn gpu_canary_footprint() -> (usize, Vec<String>) {
    footprint(&[
        include_str!("gpu_canary.rs"),
        include_str!("canary_common.rs"),
    ])
}

fn footprint(sources: &[&str]) -> (usize, Vec<String>) {
    let mut lines = 0;
    let mut names: Vec<String> = Vec::new();
    for source in sources {
        let code: Vec<&str> = (source.lines().map(str::trim))
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .collect();
        lines += code.len();
        let source = code.join("\n");
        for (i, _) in source.match_indices("kv_canary") {
            let rest = &source[i + "kv_canary".len()..];
            // A `use` statement runs to its `;`, an inline path to its last segment.
            let is_use = source[..i].ends_with("use ");
            let end = match is_use {
                true => rest.find(';').unwrap_or(rest.len()),
                false => rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len()),
            };
            // Only the items (capitalised: types, traits), not module names.
            for word in rest[..end].split(|c: char| !c.is_alphanumeric() && c != '_') {
                if word.starts_with(|c: char| c.is_ascii_uppercase())
                    && !names.iter().any(|n| n == word)
                {
                    names.push(word.to_string());
                }
            }
        }
    }
    names.sort();
    (lines, names)
}

#[cfg(test)]
mod tests {
    use super::footprint;

    #[test]
    fn counts_imports_and_inline_paths_once() {
        let source = "// a comment\nuse kv_canary::step::{Canary, KvPair};\n\nfn f(x: kv_canary::cuda::Gpu) -> kv_canary::Error {}\nlet c: Canary = kv_canary::step::Canary::new();\n";
        let (lines, names) = footprint(&[source, "use kv_canary::Cap;"]);
        assert_eq!(lines, 4);
        assert_eq!(names, ["Canary", "Cap", "Error", "Gpu", "KvPair"]);
    }
}
