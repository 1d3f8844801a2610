//! The CPU plan op (spec §3.2): batch description -> verify work list and write metadata.
//!
//! The op runs in two phases. **Validate** reads every input the plan will read and returns an
//! error for anything out of range, before any output is touched. **Emit** then writes the outputs
//! with plain slice copies (no per-entry search, no bounds checks in the inner loops), which is
//! why planning costs about as much as copying its output bytes.

use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::input::{
    check_fits, read_i64, BatchColumns, ExpectedTokenPool, ExpectedTokens, Group, IndexElement,
    PlanInputs, ReqToTokenView,
};
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use crate::Error;

/// What one plan call produced, for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanSummary {
    /// Batch size (padding rows included).
    pub bs: usize,
    /// Verify entries the batch asks for (`T`, before the capacity clamp).
    pub requested_entries: u64,
    /// `verify_num_valid` as written: `min(T, verify_capacity)`.
    pub verify_num_valid: usize,
    /// `enable` as written: false when `T > verify_capacity` (no entries were written).
    pub enabled: bool,
    /// Tokens the write op will stamp: `write_offsets[bs]`.
    pub write_tokens: u64,
}

/// Per-row facts derived once by validation and reused by emission.
#[derive(Clone, Copy)]
struct RowPlan {
    /// `req_pool_index` as a table row (only meaningful when `verify_len > 0` or `seeds`).
    rp: usize,
    window_start: usize,
    verify_len: usize,
    write_len: i64,
    /// Whether the row's seed is read from the table (active, extend > 0, prefix > 0).
    seeded: bool,
}

/// Runs the plan op of spec §3.2 on the CPU, writing `verify` and `write` in place.
///
/// The shape's capacities must match the buffers' (a compile error for static and branded
/// capacities; [`Error::CapacityMismatch`] for unchecked ones). On any error no output is modified.
///
/// # Choices where SGLang's reference and GPU paths differ (spec §9)
///
/// * **LUT index past the end** (`translate(x)` with `x >= lut_len`): an error,
///   [`Error::LutIndexOutOfRange`], as the reference (the GPU path clamps to the last element).
///   Every slot the plan would translate is checked, also when the verify entries overflow the
///   capacity and are not written.
/// * **`bs > write_req_capacity`**: an error, [`Error::BatchExceedsWriteCapacity`], as the GPU
///   path (the reference truncates silently).
/// * **`bs > 4096`**: accepted; the limit belongs to SGLang's GPU offsets kernel, not the contract.
/// * **Malformed rows the reference would index out of bounds**: an active row whose
///   `req_pool_index` is not a table row is [`Error::ReqPoolIndexOutOfRange`]; one whose positive
///   prefix exceeds the row width is [`Error::PrefixBeyondRow`]; an expected-token read outside
///   the pool is [`Error::ExpectedTokenReadOutOfRange`]. Padding rows are never read, whatever
///   their values.
/// * **`valid_lens` length**: must equal `bs` with SGLang's columns, be at least `bs` with
///   vLLM's (the rest is never read) ([`Error::LengthMismatch`]).
///
/// # Views of the engine's element types
///
/// Inputs borrowed from the engine's slices ([`BatchView`](crate::BatchView),
/// [`ReqToTokenView`](crate::ReqToTokenView), an [`ExpectedTokenPool`] over a view) are read as
/// the owned inputs with the same values; each element read is converted to `i64`, and one past
/// `i64::MAX` (a `u64` or `usize` element) is [`Error::ElementOutOfRange`] naming the array,
/// the index and the value. Padding rows are still never read beyond their `req_pool_index`.
pub fn plan<V, W, E, VB, WB, G, X, B, T>(
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'_, G, X, B, T>,
    verify: &mut VerifyPlan<VB>,
    write: &mut WritePlan<WB>,
) -> Result<PlanSummary, Error>
where
    V: SameVerifyCapacity<VB>,
    W: SameWriteReqCapacity<WB>,
    E: Capacity,
    VB: Capacity,
    WB: Capacity,
    G: Group,
    X: ExpectedTokens,
    B: BatchColumns,
    T: IndexElement,
{
    shape.verify_capacity().check(verify.capacity())?;
    shape.write_req_capacity().check(write.capacity())?;
    let pool = inputs.expected.pool();
    let mut rows = Vec::with_capacity(inputs.batch.len());
    let totals = validate(inputs, pool, write.capacity().get(), &mut rows)?;
    Ok(emit(inputs, pool, &rows, totals, verify, write))
}

/// Each batch row's verify slots and written-token count, as [`plan`] derives them from
/// `inputs` (the same validation and errors; the slots exactly as it writes
/// `verify_slot_indices`, translated through an SWA group's LUT; nothing written). Row r's
/// tokens are flat indices `[W_r, W_r + written_r)` of the write inputs (`W_r` the exclusive
/// sum over rows), its slots the verify plan's entries `[V_r, V_r + len)` likewise.
pub(crate) fn row_slots<G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement>(
    inputs: &PlanInputs<'_, G, X, B, T>,
) -> Result<Vec<(Vec<i64>, usize)>, Error> {
    let mut rows = Vec::with_capacity(inputs.batch.len());
    validate(inputs, inputs.expected.pool(), usize::MAX, &mut rows)?;
    let table = inputs.req_to_token;
    let lut = inputs.group.lut();
    Ok(rows
        .iter()
        .map(|plan| {
            let written = usize::try_from(plan.write_len).unwrap_or(0);
            if plan.verify_len == 0 {
                return (Vec::new(), written);
            }
            // Validated: the window lies inside the row (check_slots).
            let mut slots = vec![0; plan.verify_len];
            table.fill_slots(plan.rp, plan.window_start, &mut slots);
            if let Some(lut) = lut {
                translate(&mut slots, lut);
            }
            (slots, written)
        })
        .collect())
}

struct Totals {
    verify_entries: u64,
    write_tokens: i64,
}

fn validate<G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement>(
    inputs: &PlanInputs<'_, G, X, B, T>,
    pool: Option<ExpectedTokenPool<'_, X::Token, X::Len>>,
    write_req_capacity: usize,
    rows: &mut Vec<RowPlan>,
) -> Result<Totals, Error> {
    let batch = inputs.batch;
    let bs = batch.len();
    if bs > write_req_capacity {
        return Err(Error::BatchExceedsWriteCapacity {
            bs,
            write_req_capacity,
        });
    }
    if i32::try_from(bs).is_err() {
        return Err(Error::OutOfRange {
            what: "bs",
            value: bs as i64,
            allowed: "[0, i32::MAX]",
        });
    }
    if let Some(pool) = pool {
        // SGLang's columns: one valid length a row, exactly. vLLM's (bucketed batches): at
        // least one a row (an engine passes its `context_lens`), the rest never read.
        let len = pool.valid_lens().len();
        if if B::POOL_ROWS { len != bs } else { len < bs } {
            return Err(Error::LengthMismatch {
                what: "req_to_verify_expected_tokens_valid_lens",
                expected: bs,
                found: pool.valid_lens().len(),
            });
        }
    }
    let table = inputs.req_to_token;
    let window = inputs.group.window();
    let mut totals = Totals {
        verify_entries: 0,
        write_tokens: 0,
    };
    for r in 0..bs {
        let row = batch.read_row(r)?;
        let mut plan = RowPlan {
            rp: 0,
            window_start: 0,
            verify_len: 0,
            write_len: 0,
            seeded: false,
        };
        if let Some(table_row) = row.table_row {
            plan.write_len = row.extend_len.max(0);
            let prefix = row.prefix_len.max(0);
            if prefix > 0 {
                plan.rp = usize::try_from(table_row)
                    .ok()
                    .filter(|&rp| rp < table.rows())
                    .ok_or(Error::ReqPoolIndexOutOfRange {
                        row: r,
                        req_pool_index: table_row,
                        rows: table.rows(),
                    })?;
                let prefix_u = usize::try_from(prefix)
                    .ok()
                    .filter(|&p| p <= table.tokens_per_row())
                    .ok_or(Error::PrefixBeyondRow {
                        row: r,
                        prefix_len: row.prefix_len,
                        width: table.tokens_per_row(),
                    })?;
                plan.window_start = if window > 0 {
                    prefix_u.saturating_sub(usize::try_from(window).unwrap_or(usize::MAX))
                } else {
                    0
                };
                plan.verify_len = prefix_u - plan.window_start;
                plan.seeded = plan.write_len > 0;
                // The window's slots and its head's predecessor.
                table.check_slots(r, plan.rp, plan.window_start.saturating_sub(1), prefix_u)?;
                if let Some(pool) = pool {
                    check_pool_reads(r, table_row, &plan, pool, inputs.offset.value())?;
                }
            }
            totals.verify_entries += plan.verify_len as u64;
            totals.write_tokens = totals.write_tokens.checked_add(plan.write_len).ok_or(
                Error::WriteTokenCountOverflow {
                    row: r,
                    lengths: Some((totals.write_tokens, plan.write_len)),
                },
            )?;
        }
        rows.push(plan);
    }
    if let Some(lut) = inputs.group.lut() {
        check_lut(table, rows, lut)?;
    }
    Ok(totals)
}

/// The pool reads of one row: columns `[ws + off, ws + off + k)` of row `rp`, where `k` is the
/// number of entries whose `pos + off < valid_len`.
fn check_pool_reads<T: IndexElement, L: IndexElement>(
    r: usize,
    req_pool_index: i64,
    plan: &RowPlan,
    pool: ExpectedTokenPool<'_, T, L>,
    offset: i64,
) -> Result<(), Error> {
    let valid_len = read_i64(
        "req_to_verify_expected_tokens_valid_lens",
        r,
        pool.valid_lens()[r],
    )?;
    let reads = pool_read_count(valid_len, plan, offset);
    if reads == 0 {
        return Ok(());
    }
    let last_column = plan.window_start as i64 + offset + reads as i64 - 1;
    let table = pool.table();
    if plan.rp >= table.rows() || last_column >= table.width() as i64 {
        return Err(Error::ExpectedTokenReadOutOfRange {
            row: r,
            req_pool_index,
            column: last_column,
            rows: table.rows(),
            cols: table.width(),
        });
    }
    let first = plan.rp * table.width() + (last_column + 1) as usize - reads;
    check_fits(
        "req_to_verify_expected_tokens",
        first,
        &table.as_slice()[first..first + reads],
    )
}

/// How many leading entries of a row read the pool: `clamp(valid_len - off - ws, 0, verify_len)`.
#[inline]
fn pool_read_count(valid_len: i64, plan: &RowPlan, offset: i64) -> usize {
    let k = valid_len
        .saturating_sub(offset)
        .saturating_sub(plan.window_start as i64);
    (k.max(0) as u64).min(plan.verify_len as u64) as usize
}

/// Every slot a plan translates must be inside the LUT: the window's slots, the window head's
/// predecessor, and the seed (the last prefix slot, already among the window's slots).
///
/// A slot `x` is outside when `x >= 0 && x >= lut_len`, which (as `lut_len >= 0`) is just
/// `x >= lut_len`: each row is checked with one branch-free maximum, and only a row that fails
/// is scanned again for its first offending slot.
fn check_lut<T: IndexElement, L: IndexElement>(
    table: ReqToTokenView<'_, T>,
    rows: &[RowPlan],
    lut: &[L],
) -> Result<(), Error> {
    // The cells are checked (`check_slots`), so the slots are exact.
    let lut_len = lut.len() as i64;
    let mut slots = Vec::new();
    for plan in rows.iter().filter(|p| p.verify_len > 0) {
        let first = plan.window_start.saturating_sub(1);
        let end = plan.window_start + plan.verify_len;
        slots.resize(end - first, 0);
        table.fill_slots(plan.rp, first, &mut slots);
        let max = slots.iter().fold(i64::MIN, |m, &x| m.max(x));
        if max >= lut_len {
            let x = slots.iter().copied().find(|&x| x >= lut_len).unwrap_or(max);
            return Err(Error::LutIndexOutOfRange {
                slot: x,
                lut_len: lut.len(),
            });
        }
        if !L::FITS_I64 {
            // Every entry the plan translates through must fit in i64 too.
            for &x in slots.iter().filter(|&&x| x >= 0) {
                read_i64("full_to_swa_index_mapping", x as usize, lut[x as usize])?;
            }
        }
    }
    Ok(())
}

#[allow(
    clippy::type_complexity,
    reason = "the pool's element types come from the inputs"
)]
fn emit<
    VB: Capacity,
    WB: Capacity,
    G: Group,
    X: ExpectedTokens,
    B: BatchColumns,
    T: IndexElement,
>(
    inputs: &PlanInputs<'_, G, X, B, T>,
    pool: Option<ExpectedTokenPool<'_, X::Token, X::Len>>,
    rows: &[RowPlan],
    totals: Totals,
    verify: &mut VerifyPlan<VB>,
    write: &mut WritePlan<WB>,
) -> PlanSummary {
    let capacity = verify.capacity().get();
    let requested = totals.verify_entries;
    let enabled = requested <= capacity as u64;
    if enabled {
        emit_entries(inputs, pool, rows, verify);
        verify.num_valid = requested as i32;
    } else {
        verify.num_valid = capacity.min(i32::MAX as usize) as i32;
    }
    verify.enable = i32::from(enabled);
    verify.requested = i64::try_from(requested).unwrap_or(i64::MAX);
    emit_write(inputs, rows, write);
    PlanSummary {
        bs: rows.len(),
        requested_entries: requested,
        verify_num_valid: verify.num_valid as usize,
        enabled,
        write_tokens: totals.write_tokens as u64,
    }
}

fn emit_entries<VB: Capacity, G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement>(
    inputs: &PlanInputs<'_, G, X, B, T>,
    pool: Option<ExpectedTokenPool<'_, X::Token, X::Len>>,
    rows: &[RowPlan],
    verify: &mut VerifyPlan<VB>,
) {
    let table = inputs.req_to_token;
    let lut = inputs.group.lut();
    let offset = inputs.offset.value();
    let mut at = 0usize;
    for (r, plan) in rows.iter().enumerate() {
        let n = plan.verify_len;
        if n == 0 {
            continue;
        }
        let ws = plan.window_start;
        let slots = &mut verify.slot_indices[at..at + n];
        let prevs = &mut verify.prev_slot_indices[at..at + n];
        let positions = &mut verify.expected_positions[at..at + n];
        let tokens = &mut verify.expected_tokens[at..at + n];
        table.fill_slots(plan.rp, ws, slots);
        if let Some(lut) = lut {
            translate(slots, lut);
        }
        // prev of position p is the slot of p - 1, already written one entry earlier; the window
        // head's predecessor is read from the table, and position 0 is a chain head (-1).
        prevs[0] = match (ws, lut) {
            (0, _) => -1,
            (_, None) => table.slot(plan.rp, ws - 1),
            (_, Some(lut)) => translate_one(table.slot(plan.rp, ws - 1), lut),
        };
        prevs[1..].copy_from_slice(&slots[..n - 1]);
        for (i, p) in positions.iter_mut().enumerate() {
            *p = (ws + i) as i64;
        }
        let reads = match pool {
            // Validated: the valid length fits in i64.
            Some(pool) => pool_read_count(pool.valid_lens()[r].as_i64(), plan, offset),
            None => 0,
        };
        if reads > 0 {
            let pool = pool.expect("reads > 0 only with a pool");
            let src = pool
                .table()
                .row(plan.rp)
                .expect("validated: pool row exists");
            let col = ws + offset as usize;
            widen(&mut tokens[..reads], &src[col..col + reads]);
        }
        tokens[reads..].fill(-1);
        at += n;
    }
}

/// The cells as `i64`; validation checked that they fit.
#[inline]
fn widen<T: IndexElement>(dst: &mut [i64], src: &[T]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.as_i64();
    }
}

/// Slots in SWA index space, in place.
#[inline]
fn translate<L: IndexElement>(slots: &mut [i64], lut: &[L]) {
    for s in slots {
        *s = translate_one(*s, lut);
    }
}

/// A slot in SWA index space: negative slots pass through, others go through the LUT.
#[inline]
fn translate_one<L: IndexElement>(s: i64, lut: &[L]) -> i64 {
    // A negative slot converts to an index past any LUT, so one bounds check covers both cases;
    // validation guarantees every non-negative slot is inside the LUT (and its entry fits i64).
    lut.get(s as usize).map_or(s, |&x| x.as_i64())
}

fn emit_write<WB: Capacity, G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement>(
    inputs: &PlanInputs<'_, G, X, B, T>,
    rows: &[RowPlan],
    write: &mut WritePlan<WB>,
) {
    let table = inputs.req_to_token;
    let lut = inputs.group.lut();
    let bs = rows.len();
    let mut sum = 0i64;
    for (r, plan) in rows.iter().enumerate() {
        write.offsets[r] = sum;
        sum += plan.write_len;
        write.seed_slot_indices[r] = if plan.seeded {
            let x = table.slot(plan.rp, plan.window_start + plan.verify_len - 1);
            match lut {
                Some(lut) => translate_one(x, lut),
                None => x,
            }
        } else {
            -1
        };
    }
    write.offsets[bs] = sum;
    write.offsets[bs + 1..].fill(0);
    write.num_valid_reqs = bs as i32;
}

#[cfg(test)]
mod tests;
