// `SpeculativeShape<MaxBs, TopK>` derives bs x (topk + 1) by typenum arithmetic and hands back
// decimal capacities: the verify plan is a `VerifyPlan<Cap<40>>`.
use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape, SpeculativeShape, VerifyPlan};
use typenum::{U4, U8};

fn main() -> Result<(), kv_canary::Error> {
    let shape = Shape::of::<SpeculativeShape<U8, U4>>();
    let mut verify: VerifyPlan<Cap<40>> = shape.verify_plan();
    let mut write = shape.write_plan();
    let table = ReqToToken::from_vec(9, 8, (0..72).collect())?;
    let batch = Batch::from_columns([1, 2], [3, 3], [5, 5]);
    let inputs = PlanInputs::full(&batch, &table);
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    assert_eq!(summary.verify_num_valid, 6);
    assert_eq!(summary.write_tokens, 10);
    Ok(())
}
