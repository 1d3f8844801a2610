// Invariant: `req_to_token` (slot ids) and the expected-token pool (token ids) are both
// `[max_reqs, width]` i32 tables, and SGLang takes either in either place. Here a marker type
// keeps them apart: `ReqToToken` is `ReqTable<SlotIds>`, `ExpectedTokenTable` is
// `ReqTable<TokenIds>`.
//
// The first line reads "mismatched types" (E0308), which no attribute can reword; the next line
// names both table kinds.
use kv_canary::{Batch, ExpectedTokenTable, PlanInputs};

fn main() -> Result<(), kv_canary::Error> {
    let pool = ExpectedTokenTable::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 0], [1, 7]);
    let _inputs = PlanInputs::full(&batch, &pool);
    Ok(())
}
