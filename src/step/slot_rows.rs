//! [`SlotRows`]: which batch rows a step's violation rows belong to, so that an engine can act
//! on a report per request (abort, recompute) instead of per slot.
//!
//! A violation row names a slot, not a request: a verify row the slot it checked, a write row
//! the slot it wrote. The step's plan knows more: its verify entries lie row after row in the
//! verify plan, its written tokens row after row in the write inputs (spec §3.2). `SlotRows`
//! derives both as the plan op does ([`cpu::plan`](crate::cpu::plan)'s validation and its
//! verify slots) and maps every slot to the rows that hold it. A slot may belong to several rows
//! (a prefix shared through the radix cache), and all of them read the corrupted entry.

use crate::canary::Violation;
use crate::cpu::row_slots;
use crate::error::Error;
use crate::input::{ExpectedTokens, Group, IndexElement, PlanInputs};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The batch rows of a step's slots: which rows verified each slot, which wrote it. Built on
/// the host from what the step was planned from, after its report named violations (an engine
/// with a clean report needs none).
///
/// ```
/// use kv_canary::step::{Canary, SlotRows, TailKv};
/// use kv_canary::{
///     Batch, Cap, CanarySlot, LaunchTag, PlanInputs, RealKv, RealKvHashMode, RealKvParams,
///     RealKvSource, RealKvSources, ReqToToken, RowLayout, Shape,
/// };
/// let mut canary = Canary::full(Shape::<Cap<16>, Cap<2>, Cap<4>>::new(), Cap::<32>, Cap::<8>);
/// // Two requests share the prefix slots 1, 2 (pool rows 1 and 2); each decodes one token.
/// let table = ReqToToken::from_vec(3, 4, vec![0, 0, 0, 0, 1, 2, 5, 0, 1, 2, 6, 0])?;
/// let kv = vec![0u8; 32 * 16];
/// let params = RealKvParams::from_sizes(1, 16, 16);
/// let source = RealKvSource::strided(&kv, RowLayout::dense(32, 16), params)?;
/// let tail = || TailKv::new(
///     RealKv::new(RealKvHashMode::All, RealKvSources::from_array([source])),
///     RealKv::new(RealKvHashMode::All, RealKvSources::from_array([source])),
/// );
/// let prefill = Batch::from_columns([1], [0], [2]);
/// let mut inputs = canary.write_inputs();
/// let p = inputs.parts_mut();
/// (p.out_cache_loc[0], p.input_ids[0], p.positions[0]) = (1, 10, 0);
/// (p.out_cache_loc[1], p.input_ids[1], p.positions[1]) = (2, 11, 1);
/// let step = canary.plan(&PlanInputs::full(&prefill, &table))?.verify_head()?.write(&inputs)?;
/// assert!(step.verify_tail(tail())?.is_clean());
/// // A stray write corrupts the head K record of shared slot 1: the chain link into slot 2
/// // breaks, and the head verify of both requests reports it at slot 2.
/// let head_k = canary.buffer_mut(LaunchTag::HeadKFull).unwrap();
/// let bad = CanarySlot { token: 99, ..head_k.slot(1).unwrap() };
/// head_k.set_slot(1, bad)?;
/// let decode = Batch::from_columns([1, 2], [2, 2], [1, 1]);
/// let plan_inputs = PlanInputs::full(&decode, &table);
/// let mut inputs = canary.write_inputs();
/// let p = inputs.parts_mut();
/// (p.out_cache_loc[0], p.input_ids[0], p.positions[0]) = (5, 12, 2);
/// (p.out_cache_loc[1], p.input_ids[1], p.positions[1]) = (6, 13, 2);
/// let step = canary.plan(&plan_inputs)?.verify_head()?.write(&inputs)?;
/// let report = step.verify_tail(tail())?;
/// let rows = SlotRows::new(&plan_inputs, inputs.out_cache_loc())?;
/// let mut hit: Vec<usize> = report.violations.iter().flat_map(|v| rows.rows_of(v)).copied()
///     .collect();
/// hit.sort();
/// hit.dedup();
/// assert_eq!(hit, [0, 1], "both requests read the corrupted shared prefix: {report}");
/// # Ok::<(), kv_canary::Error>(())
/// ```
///
/// Cheap for a clean step: the verify slots are kept per row as the plan derives them, and the
/// map from slot to rows is built on the first question about a verified slot (an engine asks
/// only when a report has violations).
#[derive(Clone, Debug, Default)]
pub struct SlotRows {
    /// Each batch row's verify slots, in entry order.
    per_row: Vec<Vec<i64>>,
    /// Slot -> the batch rows whose verify entries checked it (ascending), built on first use.
    verified: OnceLock<SortedRows>,
    /// Slot -> the batch rows whose tokens wrote it (ascending).
    written: HashMap<i64, Vec<usize>>,
}

impl PartialEq for SlotRows {
    fn eq(&self, other: &Self) -> bool {
        self.per_row == other.per_row && self.written == other.written
    }
}
impl Eq for SlotRows {}

impl SlotRows {
    /// The rows of a step planned from `inputs` (the batch, table and group it was planned
    /// from, unchanged since) whose write inputs' `out_cache_loc` is `out_cache_loc` (SWA
    /// slots for an SWA group, as the write op takes them), at least as long as the step's
    /// written tokens (a capacity-long array is fine; entries past them are ignored). The
    /// verify entries are derived from `inputs` as the plan op derives them, so a report taken
    /// one step late, or a plan over its verify capacity, is attributed all the same. On a
    /// CUDA stream: the host copies of the plan inputs and write inputs the engine uploaded.
    ///
    /// Errors: the plan op's for `inputs` (the same validation), and
    /// [`Error::LengthMismatch`] when `out_cache_loc` holds fewer entries than the step writes.
    pub fn new<G: Group, X: ExpectedTokens, B: crate::input::BatchColumns, T: IndexElement>(
        inputs: &PlanInputs<'_, G, X, B, T>,
        out_cache_loc: &[i64],
    ) -> Result<Self, Error> {
        let per_row = row_slots(inputs)?;
        let tokens = per_row.iter().fold(0usize, |w, r| w.saturating_add(r.1));
        if out_cache_loc.len() < tokens {
            return Err(Error::LengthMismatch {
                what: "out_cache_loc",
                expected: tokens,
                found: out_cache_loc.len(),
            });
        }
        let mut rows = SlotRows::default();
        let mut w = 0;
        for (r, (slots, written)) in per_row.into_iter().enumerate() {
            for &slot in &out_cache_loc[w..w + written] {
                add(&mut rows.written, slot, r);
            }
            w += written;
            rows.per_row.push(slots);
        }
        Ok(rows)
    }

    /// The batch rows a violation row belongs to: for a write row
    /// ([`Violation::is_write`]) the rows that wrote its slot, for a verify row the rows that
    /// verified it. Empty for a slot the step did not touch (a sweep's row, or one of another
    /// step).
    pub fn rows_of(&self, violation: &Violation) -> &[usize] {
        if violation.is_write() {
            self.written_by(violation.slot)
        } else {
            self.verified_by(violation.slot)
        }
    }

    /// The batch rows whose verify entries checked `slot` (ascending; empty: none).
    pub fn verified_by(&self, slot: i64) -> &[usize] {
        let verified = self.verified.get_or_init(|| SortedRows::of(&self.per_row));
        let lo = verified.slots.partition_point(|&s| s < slot);
        let hi = lo + verified.slots[lo..].partition_point(|&s| s == slot);
        &verified.rows[lo..hi]
    }

    /// The batch rows whose tokens wrote `slot` (ascending; empty: none).
    pub fn written_by(&self, slot: i64) -> &[usize] {
        self.written.get(&slot).map_or(&[], Vec::as_slice)
    }

    /// Every slot the step's tokens wrote (non-negative slots only, in no fixed order), with
    /// the batch rows that wrote it.
    pub fn writes(&self) -> impl Iterator<Item = (i64, &[usize])> + '_ {
        self.written
            .iter()
            .filter(|(&slot, _)| slot >= 0)
            .map(|(&slot, rows)| (slot, rows.as_slice()))
    }
}

/// Adds row `r` to `slot`'s rows (rows arrive in ascending order; a row once).
/// Every (slot, row) of the verify entries, sorted by slot then row, each pair once: the rows
/// of a slot are one contiguous run of `rows`. Built with one sort instead of a map of one
/// vector a slot (a step of 32 Ki verify entries: about a tenth of the time).
#[derive(Clone, Debug, Default)]
struct SortedRows {
    slots: Vec<i64>,
    rows: Vec<usize>,
}

impl SortedRows {
    fn of(per_row: &[Vec<i64>]) -> Self {
        let mut pairs: Vec<(i64, usize)> = (per_row.iter().enumerate())
            .flat_map(|(r, slots)| slots.iter().map(move |&s| (s, r)))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let (slots, rows) = pairs.into_iter().unzip();
        SortedRows { slots, rows }
    }
}

fn add(map: &mut HashMap<i64, Vec<usize>>, slot: i64, r: usize) {
    let rows = map.entry(slot).or_default();
    if rows.last() != Some(&r) {
        rows.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::FailReason;
    use crate::input::{Batch, ReqToToken};

    /// Pool rows 1 and 2 share the prefix slots 1, 2; pool row 3 holds 7, 8, 9.
    fn table() -> ReqToToken {
        ReqToToken::from_vec(4, 4, vec![0, 0, 0, 0, 1, 2, 5, 0, 1, 2, 6, 0, 7, 8, 9, 0]).unwrap()
    }

    fn violation(slot: i64, reasons: FailReason) -> Violation {
        let mut row = [0; crate::consts::VIOLATION_FIELDS];
        row[1] = slot;
        row[7] = reasons.bits();
        Violation::from_row(row)
    }

    #[test]
    fn verify_and_write_rows_map_to_the_rows_that_hold_their_slots() {
        let table = table();
        // Rows: 0 decodes over pool row 1 (prefix 2), 1 is padding, 2 decodes over pool row 2
        // (prefix 2), 3 prefills two tokens of pool row 3 (no prefix).
        let batch = Batch::from_columns([1, 0, 2, 3], [2, 5, 2, 0], [1, 3, 1, 2]);
        let inputs = PlanInputs::full(&batch, &table);
        // Verify slots: row 0's [1, 2], row 2's [1, 2]; tokens: row 0 writes 5, row 2 writes 6,
        // row 3 writes 7, 8 (a capacity-long array).
        let out_cache_loc = [5, 6, 7, 8, -1, -1];
        let rows = SlotRows::new(&inputs, &out_cache_loc).unwrap();
        assert_eq!(rows.verified_by(1), [0, 2]);
        assert_eq!(rows.verified_by(2), [0, 2]);
        assert_eq!(rows.verified_by(5), [] as [usize; 0]);
        assert_eq!(rows.written_by(5), [0]);
        assert_eq!(rows.written_by(6), [2]);
        assert_eq!(rows.written_by(8), [3]);
        assert_eq!(
            rows.written_by(-1),
            [] as [usize; 0],
            "past the step's tokens"
        );
        let chain_break = violation(2, FailReason::VERIFY_CHAIN_HASH_MISMATCH);
        assert!(!chain_break.is_write());
        assert_eq!(rows.rows_of(&chain_break), [0, 2]);
        let write_row = violation(8, FailReason::WRITE_POSITION_MISMATCH);
        assert!(write_row.is_write());
        assert_eq!(rows.rows_of(&write_row), [3]);
        assert_eq!(
            rows.rows_of(&violation(30, FailReason::WRITE_TOKEN_MISMATCH)),
            [] as [usize; 0]
        );
    }

    #[test]
    fn a_short_out_cache_loc_and_bad_batches_are_errors() {
        let table = table();
        let batch = Batch::from_columns([1, 3], [2, 3], [1, 1]);
        let inputs = PlanInputs::full(&batch, &table);
        let err = SlotRows::new(&inputs, &[5]).unwrap_err();
        assert_eq!(
            err,
            Error::LengthMismatch {
                what: "out_cache_loc",
                expected: 2,
                found: 1
            }
        );
        assert!(err.to_string().starts_with("kv-canary: "), "{err}");
        // The plan op's own validation: pool row 9 does not exist.
        let bad = Batch::from_columns([9], [1], [1]);
        let err = SlotRows::new(&PlanInputs::full(&bad, &table), &[0; 4]).unwrap_err();
        assert!(
            matches!(err, Error::ReqPoolIndexOutOfRange { row: 0, .. }),
            "{err:?}"
        );
    }
}
