// Invariant: a step stamps write inputs of its canary's write-entry capacity. The canary owns
// every other buffer, allocated from its one shape; the per-step write inputs are the engine's,
// and inputs sized for another shape (here 8 tokens per step instead of 16) do not compile.
use kv_canary::step::Canary;
use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
    let stale = Shape::<Cap<32>, Cap<4>, Cap<8>>::new().write_inputs();
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let batch = Batch::from_columns([1], [0], [3]);
    let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
    let _ = step.write(&stale)?;
    Ok(())
}
