// The bug that started this crate: a verify plan cached for `bs * topk` entries, launched with a
// speculative-decoding step that verifies `bs * (topk + 1)`. SGLang raised at run time:
//   verify_capacity=40 does not match verify_plan_out.verify_slot_indices.shape[0]=32
// Here it is a compile error with the same two numbers, in decimal, whichever way the shape was
// derived: from `const` items, or by `SpeculativeShape` (typenum arithmetic converted back).
use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape, SpeculativeShape, VerifyPlan};
use typenum::{U4, U8};

const BS: usize = 8;
const TOPK: usize = 4;

/// Allocated once at start-up, when the draft step verified `topk` tokens per request.
type CachedVerifyPlan = VerifyPlan<Cap<{ BS * TOPK }>>;

fn with_const_items(cached: &mut CachedVerifyPlan) -> Result<(), kv_canary::Error> {
    let shape = Shape::<Cap<{ BS * (TOPK + 1) }>, Cap<BS>, Cap<{ BS * (TOPK + 1) }>>::new();
    let mut write = shape.write_plan();
    let table = ReqToToken::zeros(BS + 1, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 3], [5, 5]);
    let inputs = PlanInputs::full(&batch, &table);
    cpu::plan(&shape, &inputs, cached, &mut write)?;
    Ok(())
}

fn with_speculative_shape(cached: &mut CachedVerifyPlan) -> Result<(), kv_canary::Error> {
    let shape = Shape::of::<SpeculativeShape<U8, U4>>();
    let mut write = shape.write_plan();
    let table = ReqToToken::zeros(BS + 1, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 3], [5, 5]);
    let inputs = PlanInputs::full(&batch, &table);
    cpu::plan(&shape, &inputs, cached, &mut write)?;
    Ok(())
}

fn main() -> Result<(), kv_canary::Error> {
    let mut cached = CachedVerifyPlan::new();
    with_const_items(&mut cached)?;
    with_speculative_shape(&mut cached)
}
