//! One step on the GPU: plan (more to come).
fn main() {}
