// Invariant: a verify plan holds exactly the shape's verify capacity, also when both capacities
// are computed at run time. Each `Shape::branded` call brands its capacities with a fresh
// lifetime `'id`; a plan allocated from the outer shape cannot be launched with the inner one.
//
// The first line cannot say "verify capacity mismatch": two brands that differ are a *borrow-check*
// error (the lifetimes must be equal and cannot be), and rustc offers no way to reword those
// (`#[diagnostic::on_unimplemented]` applies to unmet trait bounds only). The note below it names
// the branded type, `VerifyCapacity<'_>`, which says which capacity is involved.
use kv_canary::{cpu, Batch, EngineKnobs, PlanInputs, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let table = ReqToToken::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 0], [1, 7]);
    // Both read from the engine's config at start-up: bs 8, topk 4 and topk 3.
    let drafts = EngineKnobs::draft_step(8, 4, 512);
    let target = EngineKnobs::draft_step(8, 3, 512);
    Shape::branded(&drafts, |draft_shape| {
        let mut cached = draft_shape.try_verify_plan()?;
        Shape::branded(&target, |shape| {
            let mut write = shape.try_write_plan()?;
            let inputs = PlanInputs::full(&batch, &table);
            cpu::plan(&shape, &inputs, &mut cached, &mut write)
        })
    })???;
    Ok(())
}
