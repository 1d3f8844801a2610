// An expected-token pool together with one valid length per batch row.
use kv_canary::{cpu, Batch, Cap, ExpectedTokenTable, PlanInputs, ReqToToken, Shape};

fn main() -> Result<(), kv_canary::Error> {
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let pool =
        ExpectedTokenTable::from_vec(4, 8, (0..32).map(|i| 100 * (i / 8) + i % 8).collect())?;
    let valid_lens = [2, 0, 8];
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let inputs = PlanInputs::full(&batch, &table).with_expected(pool.with_valid_lens(&valid_lens));
    cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    assert_eq!(&verify.expected_tokens()[..3], &[200, 201, -1]);
    Ok(())
}
