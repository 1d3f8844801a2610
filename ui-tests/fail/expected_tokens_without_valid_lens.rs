// Invariant: an expected-token pool travels with its valid lengths (spec §3.3 check 7 and §3.5,
// "requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set").
// A bare table, borrowed or owned, is not `ExpectedTokens`; `table.with_valid_lens(&lens)` is.
use kv_canary::{Batch, ExpectedTokenTable, PlanInputs, ReqToToken};

fn main() -> Result<(), kv_canary::Error> {
    let table = ReqToToken::zeros(9, 64)?;
    let pool = ExpectedTokenTable::zeros(9, 64)?;
    let batch = Batch::from_columns([1, 2], [5, 0], [1, 7]);
    let _borrowed = PlanInputs::full(&batch, &table).with_expected(&pool);
    let _owned = PlanInputs::full(&batch, &table).with_expected(pool);
    Ok(())
}
