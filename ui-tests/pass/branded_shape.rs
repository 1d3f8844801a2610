// Capacities computed at run time, branded: buffers from the shape are accepted by launches of
// the same shape.
use kv_canary::{cpu, Batch, EngineKnobs, PlanInputs, ReqToToken, Shape, VerifyCapacityRule};

fn main() -> Result<(), kv_canary::Error> {
    let max_bs = std::env::args().count() + 3; // not a compile-time number
    let knobs = EngineKnobs {
        max_bs,
        tokens_per_req: 1,
        max_extend_tokens: 64,
        pool_slots: 32,
        verify: VerifyCapacityRule::MaxSeqLen { max_seq_len: 8 },
    };
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let summary = Shape::branded(&knobs, |shape| {
        let (mut verify, mut write) = (shape.try_verify_plan()?, shape.try_write_plan()?);
        let inputs = PlanInputs::full(&batch, &table);
        cpu::plan(&shape, &inputs, &mut verify, &mut write)
    })??;
    assert_eq!(summary.verify_num_valid, 3);
    Ok(())
}
