//! Quickstart: plan one forward step of a small mixed batch on the CPU reference.
//!
//! This is the crate's main job. An engine describes its batch (which `req_to_token` row each
//! request uses, how many tokens are already cached, how many it writes now), and the **plan** op
//! turns that into the two work lists the canary kernels consume:
//!
//! * a `VerifyPlan`: one entry per cached token to re-check (slot, position, predecessor slot,
//!   expected token id);
//! * a `WritePlan`: for each request, the range of this step's flat tokens it writes and the slot
//!   its hash chain continues from.
//!
//! The numbers are those of the worked example in spec §3.6, plus one decode request:
//! `req_to_token[r][p] = 8r + p`, an expected-token pool `pool[r][p] = 100r + p`.
//!
//! Run it with `cargo run --example quickstart`.

mod common;

use kv_canary::{cpu, Batch, Cap, ExpectedTokenTable, PlanInputs, ReqToToken, Shape};

/// Most requests in one batch: the write-request capacity.
const MAX_BS: usize = 4;
/// Width of `req_to_token`: the longest sequence a request can hold.
const MAX_SEQ_LEN: usize = 8;

/// Every capacity, written once: verify every cached token of every request (`MAX_BS x
/// MAX_SEQ_LEN` entries, so this batch cannot overflow), `MAX_BS` write requests, and as many
/// written tokens as the pool holds.
type Spec = Shape<Cap<{ MAX_BS * MAX_SEQ_LEN }>, Cap<MAX_BS>, Cap<{ MAX_BS * MAX_SEQ_LEN }>>;

fn main() -> Result<(), kv_canary::Error> {
    // 1. The shape, and every buffer allocated from it (no capacity is ever typed twice).
    let shape = Spec::new();
    let mut verify = shape.verify_plan();
    let mut write = shape.write_plan();
    println!(
        "shape: verify capacity {:?}, write-request capacity {:?}, write-entry capacity {:?}\n",
        shape.verify_capacity(),
        shape.write_req_capacity(),
        shape.write_entry_capacity()
    );

    // 2. The engine's tables: request row r, position p lives in KV slot 8r + p. Row 0 of the
    //    request pool is the padding row (`req_pool_index == 0`), and slot 0 is reserved.
    let cells = (MAX_BS * MAX_SEQ_LEN) as i32;
    let req_to_token = ReqToToken::from_vec(MAX_BS, MAX_SEQ_LEN, (0..cells).collect())?;
    let tokens = (0..cells).map(|i| 100 * (i / 8) + i % 8).collect();
    let pool = ExpectedTokenTable::from_vec(MAX_BS, MAX_SEQ_LEN, tokens)?;

    // 3. This step's batch. Columns are built together, so they cannot differ in length.
    let batch = Batch::from_columns(
        [2, 0, 1, 3],  // req_pool_indices (0 = padding)
        [3, 99, 0, 5], // prefix_lens: tokens already in the KV cache
        [2, 99, 4, 1], // extend_seq_lens: tokens written this step
    );
    // How many tokens of each request the pool knows (one per batch row).
    let valid_lens = [2, 0, 8, 5];
    common::print_batch(&batch);

    // 4. Plan: a FULL group with the expected-token pool, position offset 0 (target model).
    let inputs =
        PlanInputs::full(&batch, &req_to_token).with_expected(pool.with_valid_lens(&valid_lens));
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write)?;

    println!();
    common::print_plan(&verify, &write, &batch, &summary, usize::MAX);
    println!(
        "\nNext: the write op stamps this step's tokens into the canary slots along the write \
         plan, and the verify op re-derives every entry above and reports mismatches."
    );
    Ok(())
}
