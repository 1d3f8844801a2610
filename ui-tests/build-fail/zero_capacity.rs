// Invariant: capacities are positive (spec §2.4/§2.5, "VerifyPlan verify_capacity must be
// positive, got 0"). `Cap<0>` is rejected when a buffer of it is built. This is a
// post-monomorphization error: `cargo check` does not report it, `cargo build` does, so this
// case runs with the compile-pass cases (which trybuild builds rather than checks).
use kv_canary::{Cap, VerifyPlan};

fn main() {
    let plan = VerifyPlan::<Cap<0>>::new();
    println!("{}", plan.slot_indices().len());
}
