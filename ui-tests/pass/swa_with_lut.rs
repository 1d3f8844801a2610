// An SWA group: a window together with its full-to-SWA lookup table.
use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToToken, Shape, Swa};

fn main() -> Result<(), kv_canary::Error> {
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    let lut: Vec<i64> = (0..33).map(|x| x + 100).collect();
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let inputs = PlanInputs::full(&batch, &table).with_group(Swa::window(2).with_lut(&lut));
    cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    assert_eq!(&verify.slot_indices()[..2], &[117, 118]);
    Ok(())
}
