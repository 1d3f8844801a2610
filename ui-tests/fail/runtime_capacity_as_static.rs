// A run-time capacity where engine code asks for a static one: generic code bound by
// `StaticCapacity` (here, a buffer sized when the engine is compiled) handed the unchecked
// capacity of a config read at start-up. The error names the capacity type and points to the
// fallible `try_` forms that run-time capacities use.
use kv_canary::{StaticCapacity, UncheckedCapacity};

/// Engine code that sizes an array from a static capacity.
fn slots_of<C: StaticCapacity>() -> usize {
    C::NUMBER
}

fn main() {
    let _ = UncheckedCapacity::new("slots", 64);
    let _ = slots_of::<UncheckedCapacity>();
}
