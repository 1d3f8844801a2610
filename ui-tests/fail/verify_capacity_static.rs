// Invariant: a verify plan holds exactly the shape's verify capacity (spec §3.3 check 4,
// "verify_capacity=X does not match verify_plan_out.verify_slot_indices.shape[0]=Y").
// Here the capacities are static numbers, so the mismatch is a type error naming both.
use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape, VerifyPlan};

fn main() -> Result<(), kv_canary::Error> {
    let shape = Shape::<Cap<40>, Cap<8>, Cap<40>>::new();
    // Allocated by hand with another number instead of `shape.verify_plan()`.
    let mut verify = VerifyPlan::<Cap<32>>::new();
    let mut write = shape.write_plan();
    let table = ReqToToken::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 0], [1, 7]);
    let inputs = PlanInputs::full(&batch, &table);
    cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    Ok(())
}
