// Every typenum-derived capacity works, not only typenum's named constants: 300 requests x
// (4 + 1) tokens is 1500 verify entries, a `TypenumCap` (no `Cap<N>` form on stable Rust without
// `generic_const_exprs`) that launches compare with `Cap<1500>` by value. Shapes take static
// capacities as well as typenum numbers: `SpeculativeShape<Cap<8>, Cap<4>>` is `Cap<40>`. The
// step API takes such a shape like any other.
use kv_canary::step::{Canary, TailKv};
use kv_canary::{
    cpu, Batch, Cap, Capacity, Derived, PlanInputs, ReqToToken, Shape, SpeculativeShape,
    VerifyPlan,
};
use typenum::{Prod, Sub1, U1099511627776, U300, U4, U5};

fn main() -> Result<(), kv_canary::Error> {
    let shape = Shape::of::<SpeculativeShape<U300, U4>>();
    assert_eq!(shape.verify_capacity().get(), 1500);
    // A plan allocated by hand with the same number is accepted.
    let mut verify = VerifyPlan::<Cap<1500>>::new();
    let mut write = shape.write_plan();
    let table = ReqToToken::from_vec(9, 8, (0..72).collect())?;
    let batch = Batch::from_columns([1, 2], [3, 3], [5, 5]);
    let inputs = PlanInputs::full(&batch, &table);
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    assert_eq!(summary.verify_num_valid, 6);
    // And so is one allocated from the shape.
    let mut from_shape = shape.verify_plan();
    cpu::plan(&shape, &inputs, &mut from_shape, &mut write)?;

    let _: Derived<Prod<U300, U5>> = shape.verify_capacity();
    let near_2_pow_40: Derived<Sub1<U1099511627776>> = Default::default();
    assert_eq!(near_2_pow_40.get(), 1_099_511_627_775);

    // The step API takes the derived shape too.
    let mut canary = Canary::full(shape, Cap::<64>, Cap::<16>);
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let mut step_inputs = canary.write_inputs();
    let p = step_inputs.parts_mut();
    (p.input_ids[0], p.positions[0], p.out_cache_loc[0]) = (7, 0, 8);
    let batch = Batch::from_columns([1], [0], [1]);
    let step = canary
        .plan(&PlanInputs::full(&batch, &table))?
        .verify_head()?
        .write(&step_inputs)?;
    assert_eq!(step.verify_tail(TailKv::NONE)?.recorded(), 0);

    let small = Shape::of::<SpeculativeShape<Cap<8>, Cap<4>>>();
    let _: VerifyPlan<Cap<40>> = small.verify_plan();
    Ok(())
}
