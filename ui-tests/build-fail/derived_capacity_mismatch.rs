// Invariant: a verify plan holds exactly the shape's verify capacity (spec §3.3 check 4), also
// when the capacity is a typenum-derived number of 1024 or more (`TypenumCap`). Such a number has
// no `Cap<N>` form on stable Rust, so the two are compared when the program is built: a
// post-monomorphization error (`cargo build` reports it, `cargo check` does not) whose first line
// names both numbers in decimal. Here: a plan cached for 300 x 4 entries, launched with a
// 300 x (4 + 1) speculative shape; and a verify capacity one short of 2^40 against a plan of
// 2^40 entries.
use kv_canary::{
    cpu, Batch, Cap, Derived, PlanInputs, ReqToToken, Shape, SpeculativeShape, StaticShape,
    VerifyPlan,
};
use typenum::{Sub1, U1099511627776, U300, U4};

/// A verify capacity one short of 2^40.
struct Huge;
impl StaticShape for Huge {
    type Verify = Derived<Sub1<U1099511627776>>;
    type WriteReqs = Cap<8>;
    type WriteEntries = Cap<8>;
}

fn stale_plan() -> Result<(), kv_canary::Error> {
    let shape = Shape::of::<SpeculativeShape<U300, U4>>();
    let mut cached = VerifyPlan::<Cap<1200>>::new();
    let mut write = shape.write_plan();
    let table = ReqToToken::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 3], [5, 5]);
    cpu::plan(&shape, &PlanInputs::full(&batch, &table), &mut cached, &mut write)?;
    Ok(())
}

fn plan_of_2_pow_40() -> Result<(), kv_canary::Error> {
    let shape = Shape::of::<Huge>();
    let mut verify = VerifyPlan::<Cap<1099511627776>>::new();
    let mut write = shape.write_plan();
    let table = ReqToToken::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 3], [5, 5]);
    cpu::plan(&shape, &PlanInputs::full(&batch, &table), &mut verify, &mut write)?;
    Ok(())
}

fn main() -> Result<(), kv_canary::Error> {
    stale_plan()?;
    plan_of_2_pow_40()
}
