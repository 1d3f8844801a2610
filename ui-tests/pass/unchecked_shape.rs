// Unbranded run-time capacities: a shape that outlives any closure, checked at each call.
use kv_canary::{cpu, Batch, EngineKnobs, Error, PlanInputs, ReqToToken, Shape, VerifyPlan};

fn main() -> Result<(), Error> {
    let shape = Shape::unchecked(&EngineKnobs::draft_step(4, 1, 32))?;
    let (mut verify, mut write) = (shape.try_verify_plan()?, shape.try_write_plan()?);
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let inputs = PlanInputs::full(&batch, &table);
    cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    // A plan of another capacity type-checks, and is refused at the call.
    let other = kv_canary::UncheckedCapacity::new("verify_capacity", 5)?;
    let mut stale = VerifyPlan::try_with_capacity(other)?;
    let err = cpu::plan(&shape, &inputs, &mut stale, &mut write).unwrap_err();
    assert!(matches!(
        err,
        Error::CapacityMismatch {
            expected: 8,
            found: 5,
            ..
        }
    ));
    Ok(())
}
