// Invariant: a write plan holds exactly the shape's write-request capacity (`max_bs` rows;
// spec §3.3 check 6, "write_offsets_len must equal write_req_capacity + 1" and the seeds'
// length). Static capacities, so the mismatch is a type error naming both numbers.
use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape, WritePlan};

fn main() -> Result<(), kv_canary::Error> {
    let shape = Shape::<Cap<40>, Cap<8>, Cap<40>>::new();
    let mut verify = shape.verify_plan();
    // Sized for an older max batch size of 4.
    let mut write = WritePlan::<Cap<4>>::new();
    let table = ReqToToken::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 0], [1, 7]);
    let inputs = PlanInputs::full(&batch, &table);
    cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    Ok(())
}
