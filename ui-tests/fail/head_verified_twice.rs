// Invariant: `verify_head_and_write` is the head verify and the write in one call, so it belongs
// where the head verify does, right after `plan`. On a step whose head is verified already it
// would run the head verify twice and report its rows twice: it does not compile.
use kv_canary::step::{Canary, TailKv};
use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let inputs = canary.write_inputs();
    let batch = Batch::from_columns([1], [3], [1]);

    let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
    let step = step.verify_head_and_write(&inputs)?;
    step.verify_tail(TailKv::NONE)?;
    Ok(())
}
