//! [`SweepEntries`]: the entries of a sweep ([`Canary::sweep`](super::Canary::sweep)), built by
//! the engine while it walks what its cache holds.
//!
//! The rule is SGLang's radix-cache walker's (`radix_cache_walker.py`, spec §1): every slot the
//! cache holds is one entry of (slot, position, predecessor slot), where the position is the
//! slot's depth from the root and the predecessor is the slot before it in its node, or the
//! parent node's last slot for a node's first slot, or -1 (a chain head) under the root. A
//! request-table row is the same chain from the root. The token check is off for sweeps (spec
//! §1), so every entry's expected token is -1 ("skip"). For an SWA group the entries are then
//! translated into SWA slot space through the full-to-SWA lookup table, negative values kept
//! (SGLang's `sweep_plan_builder.py`).

use crate::error::Error;
use crate::input::{read_i64, IndexElement, ReqToTokenView};
use crate::plan::VerifyEntry;
use core::ops::Deref;

/// The name of the lookup table in errors, as the plan op names it.
const LUT: &str = "full_to_swa_index_mapping";

/// The entries of one sweep, filled by an engine while it walks its cache, handed to
/// [`Canary::sweep`](super::Canary::sweep) as they are (`&entries` derefs to
/// `&[VerifyEntry]`).
///
/// * [`push_node`](Self::push_node): a radix-tree node's slots, chained to the parent's last
///   slot (SGLang's walker);
/// * [`push_row`](Self::push_row), [`push_table_row`](Self::push_table_row): the first `len`
///   slots of a request-table row (`req_to_token`), a chain from position 0;
/// * [`through_lut`](Self::through_lut): for an SWA group, every slot and predecessor
///   translated through `full_to_swa_index_mapping`, negative values kept.
///
/// Which nodes to push is the walker's choice (SGLang's: every node, or `unlocked_only`, nodes
/// no running request holds, or `swa_resident_only`); slots that running requests hold too are
/// swept as well, harmlessly.
///
/// Slots are read in the engine's own [`IndexElement`] type; a value past `i64::MAX` is
/// [`Error::ElementOutOfRange`] naming it. A push or a translation that fails appends or
/// changes nothing. [`clear`](Self::clear) keeps the allocation, so an engine that keeps one
/// builder allocates nothing per sweep once it has held its largest sweep;
/// [`clone_from`](Clone::clone_from) reuses the target's allocation too (one walk, copied into
/// the SWA group's builder and translated there).
///
/// ```
/// use kv_canary::step::{Canary, SweepEntries, TailKv};
/// use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
///
/// let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
/// // Row 1 holds the request's slots: 8, 9, 10, then 20, 21 (its second page).
/// let mut cells = vec![0; 32];
/// cells[8..13].copy_from_slice(&[8, 9, 10, 20, 21]);
/// let table = ReqToToken::from_vec(4, 8, cells)?;
/// let mut inputs = canary.write_inputs();
/// let p = inputs.parts_mut();
/// p.input_ids[..5].copy_from_slice(&[7, 8, 9, 10, 11]);
/// p.positions[..5].copy_from_slice(&[0, 1, 2, 3, 4]);
/// p.out_cache_loc[..5].copy_from_slice(&[8, 9, 10, 20, 21]);
/// let batch = Batch::from_columns([1], [0], [5]);
/// let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
/// step.write(&inputs)?.verify_tail(TailKv::NONE)?;
///
/// // The request finished; its radix cache holds a node [8, 9, 10] under the root and a
/// // child [20, 21]. Walk it into the builder and sweep:
/// let mut entries = SweepEntries::new();
/// let root_child: &[u32] = &[8, 9, 10];
/// entries.push_node(None, 0, root_child)?;
/// entries.push_node(root_child.last().copied(), 3, &[20u32, 21])?;
/// assert_eq!(entries[3].prev_slot, 10); // the child's first slot chains to its parent's last
/// let sweep = canary.sweep(&entries, TailKv::NONE)?;
/// assert!(sweep.is_clean(), "{sweep}");
/// assert_eq!(sweep.entries_checked(), 2 * 5);
///
/// // The next sweep reuses the allocation; the same request from its table row:
/// entries.clear();
/// entries.push_table_row(&table, 1, 5)?;
/// assert!(canary.sweep(&entries, TailKv::NONE)?.is_clean());
///
/// // An engine's own table, viewed ([`ReqToTokenView`]), by reference or by value:
/// let view = table.view();
/// let mut again = SweepEntries::new();
/// again.push_table_row(&view, 1, 5)?;
/// assert_eq!(again, entries);
/// # Ok::<(), kv_canary::Error>(())
/// ```
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SweepEntries {
    entries: Vec<VerifyEntry>,
}

impl SweepEntries {
    /// An empty builder; it allocates on its first push.
    pub fn new() -> Self {
        SweepEntries::default()
    }

    /// An empty builder with room for `entries` entries (a sweep's usual size, say the verify
    /// capacity); a size that cannot be allocated is [`Error::AllocationFailed`] naming it.
    pub fn with_capacity(entries: usize) -> Result<Self, Error> {
        let mut builder = SweepEntries::new();
        builder.reserve(entries)?;
        Ok(builder)
    }

    /// Removes every entry, keeping the allocation for the next sweep.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entries, in push order.
    pub fn as_slice(&self) -> &[VerifyEntry] {
        &self.entries
    }

    /// Appends the slots of one radix-tree node: `slots[i]` at position `first_position + i`
    /// (the node's depth from the root plus `i`), its predecessor `slots[i - 1]`, and for the
    /// node's first slot `parent_last` (the parent node's last slot), or -1 (a chain head) for a
    /// node under the root (`None`). A node without slots appends nothing.
    ///
    /// A slot or `parent_last` past `i64::MAX` is [`Error::ElementOutOfRange`] naming it
    /// (`radix node slots[i]`, `parent_last`), a position past `i64::MAX` the same, naming the
    /// position; nothing is appended then.
    pub fn push_node<T: IndexElement>(
        &mut self,
        parent_last: Option<T>,
        first_position: usize,
        slots: &[T],
    ) -> Result<(), Error> {
        let predecessor = match parent_last {
            Some(slot) => read_i64("parent_last", 0, slot)?,
            None => -1,
        };
        self.push_chain("radix node slots", 0, predecessor, first_position, slots)
    }

    /// Appends the first `len` slots of a request-table row (`req_to_token[r]`, `len` its cached
    /// tokens): `row[p]` at position `p`, its predecessor `row[p - 1]`, -1 for `p = 0`.
    ///
    /// A `len` past the row is [`Error::CachedBeyondRow`] naming both; a slot past `i64::MAX`
    /// is [`Error::ElementOutOfRange`] naming it (`req_to_token row[p]`); nothing is appended
    /// then.
    pub fn push_row<T: IndexElement>(&mut self, row: &[T], len: usize) -> Result<(), Error> {
        let cells = row.get(..len).ok_or(Error::CachedBeyondRow {
            row: None,
            cached: len,
            width: row.len(),
        })?;
        self.push_chain("req_to_token row", 0, -1, 0, cells)
    }

    /// [`push_row`](Self::push_row) of row `req_pool_index` of a request table (a
    /// [`ReqToToken`](crate::input::ReqToToken) or an engine's
    /// [`ReqToTokenView`], a token table or a block table): its first `len` slots, read as
    /// the plan reads them (a block table's `block x block_size + offset`).
    ///
    /// A row the table does not have is [`Error::SweepRowOutOfRange`], a `len` past the table's
    /// width [`Error::CachedBeyondRow`], each naming the values; a slot past `i64::MAX` is
    /// [`Error::ElementOutOfRange`] naming its row-major index in `req_to_token`. Nothing is
    /// appended then.
    pub fn push_table_row<'t, T: IndexElement>(
        &mut self,
        table: impl Into<ReqToTokenView<'t, T>>,
        req_pool_index: usize,
        len: usize,
    ) -> Result<(), Error> {
        let table = table.into();
        let row = table.row(req_pool_index).ok_or(Error::SweepRowOutOfRange {
            row: req_pool_index,
            rows: table.rows(),
        })?;
        if len > table.tokens_per_row() {
            return Err(Error::CachedBeyondRow {
                row: Some(req_pool_index),
                cached: len,
                width: table.tokens_per_row(),
            });
        }
        // The row is inside the table, so its first cell's row-major index fits in usize.
        let first_index = req_pool_index * table.width();
        if table.block_size() == 1 {
            return self.push_chain("req_to_token", first_index, -1, 0, &row[..len]);
        }
        // A block table: the row's slots, read as the plan reads them.
        table.check_slots(req_pool_index, req_pool_index, 0, len)?;
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(len)
            .map_err(|_| Error::AllocationFailed {
                what: "sweep entries",
                rows: len as u128,
                cols: 1,
                element_bytes: 8,
            })?;
        slots.resize(len, 0);
        table.fill_slots(req_pool_index, 0, &mut slots);
        self.push_chain("block_tables", first_index, -1, 0, &slots)
    }

    /// Translates every entry's slot and predecessor into SWA slot space through `lut`
    /// (`full_to_swa_index_mapping`), as the plan op translates (spec §3.2): a negative value
    /// (a chain head) stays as it is, any other `x` becomes `lut[x]`. Call it once, after the
    /// walk: the entries are then the SWA group's.
    ///
    /// A value `x >= lut.len()` is [`Error::LutIndexOutOfRange`] naming it and the length (the
    /// CPU plan's choice; SGLang's reference raises too), an entry of `lut` past `i64::MAX` is
    /// [`Error::ElementOutOfRange`] naming it; no entry is translated then. A slot that the LUT
    /// maps to -1 (not resident in the SWA pool) stays -1, which the sweep rejects
    /// ([`Error::SlotOutOfRange`]): skip such nodes while walking (SGLang's
    /// `swa_resident_only`).
    pub fn through_lut<L: IndexElement>(&mut self, lut: &[L]) -> Result<(), Error> {
        for entry in &self.entries {
            lut_entry(lut, entry.slot)?;
            lut_entry(lut, entry.prev_slot)?;
        }
        for entry in &mut self.entries {
            // Every lookup was checked above: none fails, and every entry fits in i64.
            entry.slot = lut_entry(lut, entry.slot)?;
            entry.prev_slot = lut_entry(lut, entry.prev_slot)?;
        }
        Ok(())
    }

    /// Appends `slots` as one chain: `slots[i]` at position `first_position + i`, chained to
    /// `slots[i - 1]` and the first to `predecessor`. Errors name `what[first_index + i]`.
    fn push_chain<T: IndexElement>(
        &mut self,
        what: &'static str,
        first_index: usize,
        predecessor: i64,
        first_position: usize,
        slots: &[T],
    ) -> Result<(), Error> {
        if !T::FITS_I64 {
            for (i, &slot) in slots.iter().enumerate() {
                read_i64(what, first_index.saturating_add(i), slot)?;
            }
        }
        check_positions(first_position, slots.len())?;
        self.reserve(slots.len())?;
        let mut prev_slot = predecessor;
        for (i, &slot) in slots.iter().enumerate() {
            // Checked above: every slot fits in i64, and so does every position.
            let slot = slot.as_i64();
            self.entries.push(VerifyEntry {
                slot,
                expected_token: -1,
                expected_position: (first_position + i) as i64,
                prev_slot,
            });
            prev_slot = slot;
        }
        Ok(())
    }

    /// Room for `more` entries past the current ones; [`Error::AllocationFailed`] if there is
    /// none.
    fn reserve(&mut self, more: usize) -> Result<(), Error> {
        self.entries
            .try_reserve(more)
            .map_err(|_| Error::AllocationFailed {
                what: "sweep entries",
                rows: self.entries.len() as u128 + more as u128,
                cols: 1,
                element_bytes: core::mem::size_of::<VerifyEntry>(),
            })
    }
}

/// Checks that the positions `first_position .. first_position + len` fit in `i64`; the first
/// that does not is [`Error::ElementOutOfRange`] naming it.
fn check_positions(first_position: usize, len: usize) -> Result<(), Error> {
    let first = first_position as u128;
    let limit = i64::MAX as u128;
    if len == 0 || first + (len as u128 - 1) <= limit {
        return Ok(());
    }
    // The first position past i64::MAX: the first slot, or the one at i64::MAX + 1.
    let index = (limit + 1).saturating_sub(first);
    Err(Error::ElementOutOfRange {
        what: "radix node positions",
        index: index as usize,
        value: (first + index) as i128,
        element: "usize",
    })
}

/// `x` in SWA slot space: `x` itself when negative, else `lut[x]` as `i64`.
fn lut_entry<L: IndexElement>(lut: &[L], x: i64) -> Result<i64, Error> {
    if x < 0 {
        return Ok(x);
    }
    let outside = || Error::LutIndexOutOfRange {
        slot: x,
        lut_len: lut.len(),
    };
    let index = usize::try_from(x).map_err(|_| outside())?;
    match lut.get(index) {
        Some(&value) => read_i64(LUT, index, value),
        None => Err(outside()),
    }
}

impl Clone for SweepEntries {
    fn clone(&self) -> Self {
        SweepEntries {
            entries: self.entries.clone(),
        }
    }

    /// Copies `source`'s entries into this builder's allocation.
    fn clone_from(&mut self, source: &Self) {
        self.entries.clone_from(&source.entries);
    }
}

impl Deref for SweepEntries {
    type Target = [VerifyEntry];

    fn deref(&self) -> &[VerifyEntry] {
        &self.entries
    }
}

impl AsRef<[VerifyEntry]> for SweepEntries {
    fn as_ref(&self) -> &[VerifyEntry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests;
