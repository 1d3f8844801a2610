//! Speculative decoding (EAGLE): one draft step, planned with capacities derived once.
//!
//! In an EAGLE draft step every request writes `topk + 1` tokens, so the step's capacities are
//! `bs x (topk + 1)` verify entries and written tokens, and `bs` write requests. This example
//! derives them once, three equivalent ways (a `SpeculativeShape` type, `const` items, and
//! run-time `EngineKnobs::speculative`), plans a draft step with the EAGLE position offset
//! (`PositionOffset::EagleDraft`: the draft pool's slot at position `pos` holds token `pos + 1`)
//! and an expected-token pool, and prints the plan.
//!
//! The bug this replaces: an engine that cached a verify plan of `bs x topk` entries and then
//! launched with a `bs x (topk + 1)` shape got a run-time error from SGLang
//! ("verify_capacity=40 does not match ... shape[0]=32"). Here that program does not compile;
//! see `ui-tests/fail/stale_plan_after_topk_change.rs` and its `.stderr`.
//!
//! Run it with `cargo run --example speculative_decoding`.

mod common;

use kv_canary::{
    cpu, Batch, Cap, Capacity, EngineKnobs, ExpectedTokenTable, PlanInputs, PositionOffset,
    ReqToToken, Shape, SpeculativeShape,
};

/// Requests per batch.
const BS: usize = 4;
/// Draft tokens per request.
const TOPK: usize = 3;
/// The same two knobs as a `SpeculativeShape`, which does the arithmetic in types.
type Draft = SpeculativeShape<Cap<BS>, Cap<TOPK>>;
/// Width of `req_to_token` and of the expected-token pool.
const MAX_SEQ_LEN: usize = 16;
/// Slots of the KV pool: `BS + 1` request rows (row 0 the padding row) of `MAX_SEQ_LEN`.
const SLOTS: usize = (BS + 1) * MAX_SEQ_LEN;

fn main() -> Result<(), kv_canary::Error> {
    // 1. One derivation: bs x (topk + 1) = 16 verify entries and written tokens, bs = 4 requests.
    let shape = Shape::of::<Draft>();
    // The same shape from `const` items: the compiler checks the two derivations agree.
    let _: Shape<Cap<{ BS * (TOPK + 1) }>, Cap<BS>, Cap<{ BS * (TOPK + 1) }>> = shape;
    // And the engine's run-time formula gives the same numbers.
    let knobs = EngineKnobs::draft_step(BS, TOPK, SLOTS);
    assert_eq!(knobs.verify_capacity()?, shape.verify_capacity().get());
    assert_eq!(
        knobs.write_entry_capacity()?,
        shape.write_entry_capacity().get()
    );
    println!(
        "draft step shape (bs = {BS}, topk = {TOPK}): verify {:?}, write requests {:?}, \
         written tokens {:?}\n",
        shape.verify_capacity(),
        shape.write_req_capacity(),
        shape.write_entry_capacity()
    );
    let mut verify = shape.verify_plan();
    let mut write = shape.write_plan();

    // 2. Tables. Request row r, position p lives in KV slot 16r + p; request r's token at
    //    position p is 1000r + p (what the expected-token pool would hold after a scatter).
    let rows = BS + 1; // row 0 is the padding row
    let cells = (rows * MAX_SEQ_LEN) as i32;
    let req_to_token = ReqToToken::from_vec(rows, MAX_SEQ_LEN, (0..cells).collect())?;
    let width = MAX_SEQ_LEN as i32;
    let tokens = (0..cells).map(|i| 1000 * (i / width) + i % width).collect();
    let pool = ExpectedTokenTable::from_vec(rows, MAX_SEQ_LEN, tokens)?;

    // 3. The draft step: four requests with short cached prefixes, each writing topk + 1 tokens.
    let t = (TOPK + 1) as i64;
    let batch = Batch::from_columns([1, 2, 3, 4], [3, 5, 2, 4], [t, t, t, t]);
    // The pool knows each request's tokens up to its prefix. With offset +1 the entry at the
    // last cached position expects the *next* token, not known yet: its token check is skipped.
    let valid_lens = [3, 5, 2, 4];
    common::print_batch(&batch);

    let inputs = PlanInputs::full(&batch, &req_to_token)
        .with_expected(pool.with_valid_lens(&valid_lens))
        .with_offset(PositionOffset::EagleDraft);
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;

    println!();
    common::print_plan(&verify, &write, &batch, &summary, usize::MAX);

    // 4. Longer prefixes than the step was sized for: the plan overflows, exactly as SGLang's.
    //    Verify is disabled for the step (enable = 0); the write metadata is still produced.
    let long = Batch::from_columns([1, 2, 3, 4], [9, 9, 9, 9], [t, t, t, t]);
    let inputs = PlanInputs::full(&long, &req_to_token);
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;
    println!("\nThe same step with four 9-token prefixes (36 entries > 16):");
    common::print_summary(&summary);
    Ok(())
}
