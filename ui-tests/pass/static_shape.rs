// A static shape from `const` items, every buffer allocated from it.
use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape};

const MAX_BS: usize = 4;
const MAX_SEQ_LEN: usize = 8;

type Spec = Shape<Cap<{ 2 * MAX_SEQ_LEN }>, Cap<MAX_BS>, Cap<{ MAX_BS * MAX_SEQ_LEN }>>;

fn main() -> Result<(), kv_canary::Error> {
    let shape = Spec::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    let table = ReqToToken::from_vec(MAX_BS, MAX_SEQ_LEN, (0..32).collect())?;
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let inputs = PlanInputs::full(&batch, &table);
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    assert_eq!(summary.verify_num_valid, 3);
    assert_eq!(write.offsets(), &[0, 2, 2, 6, 0]);
    Ok(())
}
