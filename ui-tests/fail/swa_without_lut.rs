// Invariant: an SWA plan has its full-to-SWA lookup table (spec §3.3 check 1, "needs
// full_to_swa_index_mapping when swa_window_size > 0"). A bare window is not a `Group`.
use kv_canary::{Batch, PlanInputs, ReqToToken, Swa};

fn main() -> Result<(), kv_canary::Error> {
    let table = ReqToToken::zeros(9, 512)?;
    let batch = Batch::from_columns([1, 2], [200, 3], [1, 1]);
    let _inputs = PlanInputs::full(&batch, &table).with_group(Swa::window(128));
    Ok(())
}
