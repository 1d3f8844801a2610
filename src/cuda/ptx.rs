//! The kernels of `kernels/*.cu`, compiled to PTX by `build.rs` and embedded here. Under
//! `DOCS_RS` the strings are empty (docs.rs has no CUDA), so only documentation builds use them.

/// `kernels/plan.cu`.
pub(crate) const PLAN: &str = include_str!(concat!(env!("OUT_DIR"), "/plan.ptx"));
/// `kernels/verify.cu`.
pub(crate) const VERIFY: &str = include_str!(concat!(env!("OUT_DIR"), "/verify.ptx"));
/// `kernels/write.cu`.
pub(crate) const WRITE: &str = include_str!(concat!(env!("OUT_DIR"), "/write.ptx"));
/// `kernels/scatter.cu`.
pub(crate) const SCATTER: &str = include_str!(concat!(env!("OUT_DIR"), "/scatter.ptx"));
/// `kernels/bench.cu`: the hardware floors of the benchmark.
pub(crate) const BENCH: &str = include_str!(concat!(env!("OUT_DIR"), "/bench.ptx"));

#[cfg(test)]
mod tests {
    #[test]
    fn kernels_are_embedded_for_sm_90() {
        if std::env::var_os("DOCS_RS").is_some() {
            return;
        }
        for (ptx, entry) in [
            (super::PLAN, "kv_canary_plan_large_pool_lut"),
            (super::VERIFY, "kv_canary_verify"),
            (super::WRITE, "kv_canary_write"),
            (super::SCATTER, "kv_canary_scatter"),
            (super::BENCH, "kv_canary_chain_floor"),
        ] {
            assert!(ptx.contains(&format!(".entry {entry}(")), "{entry} missing");
            assert!(
                ptx.lines().any(|l| l.starts_with(".target sm_")),
                "no target"
            );
        }
    }
}
