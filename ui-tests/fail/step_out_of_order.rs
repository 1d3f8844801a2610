// Invariant: a step runs its launches in order: plan, head verify, write, (forward pass), tail
// verify. Each stage consumes the previous one, so an engine that writes this step's tokens
// before verifying the prefix they extend, ends a step without writing, or verifies without a
// plan does not compile. The last case is a missing method (E0599) on `Canary`: launches exist
// only on a `Step`, which only `Canary::plan` makes.
use kv_canary::step::{Canary, TailKv};
use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let inputs = canary.write_inputs();
    let batch = Batch::from_columns([1], [3], [1]);

    // Writes before the head verify: the prefix it extends is never checked.
    let step = canary.plan(&PlanInputs::full(&batch, &table))?.write(&inputs)?;
    step.verify_tail(TailKv::NONE)?;

    // Ends the step without its write: the tail buffers would miss this step's tokens.
    let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
    step.verify_tail(TailKv::NONE)?;

    // Verifies without a plan: a canary has no launches, only `plan`, which starts a step.
    canary.verify_head()?;
    Ok(())
}
