// Invariant: a verify plan holds exactly the shape's verify capacity, also when both capacities
// are read at run time and the canary lives in an engine struct. Named capacities carry the
// engine's configuration type: a plan of the draft configuration's shape cannot be launched with
// the target configuration's, although both numbers come from the config at run time.
use kv_canary::{cpu, Batch, EngineKnobs, NamedShape, PlanInputs, ReqToToken};

#[derive(Clone, Copy, Debug)]
struct Draft;
#[derive(Clone, Copy, Debug)]
struct Target;

fn main() -> Result<(), kv_canary::Error> {
    let table = ReqToToken::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 0], [1, 7]);
    let draft = NamedShape::<Draft>::named(&EngineKnobs::speculative(8, 4, 512))?;
    let target = NamedShape::<Target>::named(&EngineKnobs::speculative(8, 3, 512))?;
    let mut cached = draft.try_verify_plan()?;
    let mut write = target.try_write_plan()?;
    cpu::plan(&target, &PlanInputs::full(&batch, &table), &mut cached, &mut write)?;
    Ok(())
}
