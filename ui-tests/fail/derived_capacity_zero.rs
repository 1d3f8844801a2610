// Invariant: capacities are positive (spec §2.4). A typenum-derived capacity of zero (here a
// speculative shape of 0 requests) is rejected by the type checker, naming the typenum number.
use kv_canary::{Shape, SpeculativeShape};
use typenum::{U0, U4};

fn main() {
    let _shape = Shape::of::<SpeculativeShape<U0, U4>>();
}
