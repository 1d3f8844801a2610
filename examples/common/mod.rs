//! Printing helpers shared by the examples: a plan as readable tables.

use kv_canary::cpu::PlanSummary;
use kv_canary::{Batch, Capacity, VerifyPlan, WritePlan};

/// Prints the batch columns, one line per row.
pub fn print_batch(batch: &Batch) {
    println!("batch (bs = {}):", batch.len());
    println!("  row  req_pool_index  prefix_len  extend_len");
    for (r, row) in batch.rows().enumerate() {
        let what = if !row.is_active() {
            "padding row: never read"
        } else if row.prefix_len <= 0 {
            "new request: prefill"
        } else if row.extend_len == 1 {
            "decode"
        } else {
            "cached prefix, extending"
        };
        println!(
            "  {r:>3}  {:>14}  {:>10}  {:>10}   {what}",
            row.req_pool_index, row.prefix_len, row.extend_len
        );
    }
}

/// Prints what one plan call produced: the verify plan (at most `limit` entries), the write
/// plan and the summary, a blank line between them.
pub fn print_plan<V: Capacity, W: Capacity>(
    verify: &VerifyPlan<V>,
    write: &WritePlan<W>,
    batch: &Batch,
    summary: &PlanSummary,
    limit: usize,
) {
    print_verify_plan(verify, batch, limit);
    println!();
    print_write_plan(write, batch);
    println!();
    print_summary(summary);
}

/// Prints the valid verify entries (at most `limit` of them), each with the batch row it belongs
/// to. The row is recovered from the FULL-group rule of spec §3.2: an active row contributes one
/// entry per cached position, `max(prefix_len, 0)` of them, in row order.
fn print_verify_plan<C: Capacity>(plan: &VerifyPlan<C>, batch: &Batch, limit: usize) {
    println!(
        "verify plan: {} of {} entries valid, enable = {}",
        plan.num_valid(),
        plan.capacity().get(),
        plan.enable()
    );
    if !plan.is_enabled() {
        println!(
            "  (disabled: the batch asks for more entries than the capacity; nothing to verify)"
        );
        return;
    }
    let owners = batch
        .rows()
        .enumerate()
        .filter(|(_, row)| row.is_active())
        .flat_map(|(r, row)| std::iter::repeat_n(r, row.prefix_len.max(0) as usize));
    println!("  entry  row  slot  position  prev slot  expected token");
    for (i, (entry, row)) in plan.entries().zip(owners).enumerate().take(limit) {
        let mut notes = Vec::new();
        if entry.prev_slot < 0 {
            notes.push("chain head");
        }
        if entry.expected_token < 0 {
            notes.push("token check skipped");
        }
        let line = format!(
            "  {i:>5}  {row:>3}  {:>4}  {:>8}  {:>9}  {:>14}   {}",
            entry.slot,
            entry.expected_position,
            entry.prev_slot,
            entry.expected_token,
            notes.join(", ")
        );
        println!("{}", line.trim_end());
    }
    if plan.active_len() > limit {
        println!("  ... {} more entries", plan.active_len() - limit);
    }
}

/// Prints the write metadata: each request's flat token range and seed slot, then the raw arrays.
fn print_write_plan<C: Capacity>(plan: &WritePlan<C>, batch: &Batch) {
    println!(
        "write plan: {} requests (write_num_valid_reqs), capacity {}",
        plan.num_valid_reqs(),
        plan.capacity().get()
    );
    println!("  row  req_pool_index  tokens    seed slot");
    for req in plan.requests() {
        let rp = batch.row(req.row).map_or(0, |row| row.req_pool_index);
        let note = match (req.tokens.is_empty(), req.seed_slot) {
            (true, _) if rp == 0 => "padding row: writes nothing".to_owned(),
            (true, _) => "writes nothing".to_owned(),
            (false, s) if s < 0 => "chain starts at the anchor (no prefix)".to_owned(),
            (false, s) => format!("chain continues from the token in slot {s}"),
        };
        let range = format!("[{}, {})", req.tokens.start, req.tokens.end);
        println!(
            "  {:>3}  {rp:>14}  {range:<8}  {:>9}   {note}",
            req.row, req.seed_slot
        );
    }
    println!("  write_offsets           = {:?}", plan.offsets());
    println!("  write_seed_slot_indices = {:?}", plan.seed_slot_indices());
}

/// Prints what one plan call produced.
pub fn print_summary(summary: &PlanSummary) {
    println!(
        "summary: bs {}, {} verify entries requested, verify_num_valid {}, {}, {} tokens to write",
        summary.bs,
        summary.requested_entries,
        summary.verify_num_valid,
        if summary.enabled {
            "verify enabled"
        } else {
            "verify DISABLED (overflow)"
        },
        summary.write_tokens
    );
}
