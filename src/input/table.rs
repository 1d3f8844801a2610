//! [`ReqTable`]: a 2-D `i32` table with one row per request-pool entry.
//!
//! Two tables share this shape (spec §3.1): `req_to_token` ([`ReqToToken`], full-pool slot ids)
//! and the expected-token pool `req_to_verify_expected_tokens` ([`ExpectedTokenTable`], token ids).
//! A marker type keeps them apart, so one cannot be passed where the other is read.
//!
//! [`ReqTableView`] is the same table borrowed from an engine's own slice, of any
//! [`IndexElement`] type: the plan op reads both.

use super::element::{check_fits, IndexElement};
use crate::memory::host_table;
use crate::Error;
use core::fmt;
use core::marker::PhantomData;

mod sealed {
    pub trait Sealed {}
}

/// What a [`ReqTable`]'s cells hold.
pub trait TableKind: sealed::Sealed + 'static {
    /// The table's name in errors and debug output.
    const NAME: &'static str;
}

/// Cells are full-pool KV slot ids: `req_to_token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotIds {}
/// Cells are token ids: the expected-token pool `req_to_verify_expected_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenIds {}

impl sealed::Sealed for SlotIds {}
impl TableKind for SlotIds {
    const NAME: &'static str = "req_to_token";
}
impl sealed::Sealed for TokenIds {}
impl TableKind for TokenIds {
    const NAME: &'static str = "req_to_verify_expected_tokens";
}

/// `req_to_token [max_reqs, max_seq_len]` (i32): the full-pool slot of every (request, position).
pub type ReqToToken = ReqTable<SlotIds>;
/// `req_to_verify_expected_tokens [max_reqs, max_context_len]` (i32): token ids the model should
/// see, filled by [`scatter_req_token_ids`](crate::cpu).
pub type ExpectedTokenTable = ReqTable<TokenIds>;

/// A dense row-major `[rows, width]` table of `i32`, with a known row width.
#[derive(Clone, PartialEq, Eq)]
pub struct ReqTable<K: TableKind> {
    data: Vec<i32>,
    rows: usize,
    width: usize,
    kind: PhantomData<K>,
}

impl<K: TableKind> ReqTable<K> {
    /// A zero-filled table (`req_to_token` is zero-initialised in SGLang: slot 0 is the padding
    /// slot). `width` must be positive; a table that cannot be allocated is
    /// [`Error::AllocationFailed`] naming `rows` and `width`.
    pub fn zeros(rows: usize, width: usize) -> Result<Self, Error> {
        if width == 0 {
            return Err(Error::TableShape {
                what: K::NAME,
                rows,
                cols: width,
                len: 0,
            });
        }
        let data = host_table(K::NAME, rows, width, 0)?;
        Self::from_vec(rows, width, data.into_vec())
    }

    /// A table from row-major data of exactly `rows x width` cells; `width` must be positive.
    pub fn from_vec(rows: usize, width: usize, data: Vec<i32>) -> Result<Self, Error> {
        if width == 0 || rows.checked_mul(width) != Some(data.len()) {
            return Err(Error::TableShape {
                what: K::NAME,
                rows,
                cols: width,
                len: data.len(),
            });
        }
        Ok(ReqTable {
            data,
            rows,
            width,
            kind: PhantomData,
        })
    }

    /// Number of rows (`max_reqs`).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Row width (`max_seq_len` or `max_context_len`).
    pub fn width(&self) -> usize {
        self.width
    }
    /// All cells, row-major.
    pub fn as_slice(&self) -> &[i32] {
        &self.data
    }
    /// All cells, row-major, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [i32] {
        &mut self.data
    }
    /// Row `r`, if it exists.
    pub fn row(&self, r: usize) -> Option<&[i32]> {
        self.data.get(self.row_range(r)?)
    }
    /// Row `r`, mutable, if it exists.
    pub fn row_mut(&mut self, r: usize) -> Option<&mut [i32]> {
        let range = self.row_range(r)?;
        self.data.get_mut(range)
    }
    /// The cells of row `r`, if its end does not overflow (`get` checks it lies in the data).
    fn row_range(&self, r: usize) -> Option<core::ops::Range<usize>> {
        let start = r.checked_mul(self.width)?;
        Some(start..start.checked_add(self.width)?)
    }
    /// Cell `[r][c]`, if it exists.
    pub fn get(&self, r: usize, c: usize) -> Option<i32> {
        if c >= self.width {
            return None;
        }
        self.row(r).map(|row| row[c])
    }
    /// The table as a view (what the ops read).
    pub fn view(&self) -> ReqTableView<'_, K, i32> {
        ReqTableView {
            data: &self.data,
            rows: self.rows,
            width: self.width,
            block_size: 1,
            kind: PhantomData,
        }
    }
    /// Sets cell `[r][c]`; out of range is an error naming the cell.
    pub fn set(&mut self, r: usize, c: usize, value: i32) -> Result<(), Error> {
        let (rows, width) = (self.rows, self.width);
        match self.row_mut(r).and_then(|row| row.get_mut(c)) {
            Some(cell) => {
                *cell = value;
                Ok(())
            }
            None => Err(Error::Malformed {
                detail: format!(
                    "{} cell [{r}][{c}] is outside its {rows} x {width} cells",
                    K::NAME
                ),
            }),
        }
    }
}

// Written out, not derived: it prints the table's SGLang name and shape, not its cells (a
// pool's worth of them) or the kind marker.
impl<K: TableKind> fmt::Debug for ReqTable<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(K::NAME)
            .field("rows", &self.rows)
            .field("width", &self.width)
            .finish_non_exhaustive()
    }
}

/// `req_to_token` borrowed from an engine's own slice: `[rows, width]` row-major cells of the
/// engine's element type `T`, no copy.
///
/// ```
/// use kv_canary::{cpu, Batch, Cap, PlanInputs, ReqToTokenView, Shape};
/// let cells: Vec<u32> = (0..32).collect(); // the engine's own table, 4 rows of 8
/// let table = ReqToTokenView::new(4, 8, &cells)?;
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
/// let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
/// let batch = Batch::from_columns([2], [3], [1]);
/// cpu::plan(&shape, &PlanInputs::from_views(batch.view(), table), &mut verify, &mut write)?;
/// assert_eq!(&verify.slot_indices()[..3], &[16, 17, 18]);
/// # Ok::<(), kv_canary::Error>(())
/// ```
pub struct ReqTableView<'a, K: TableKind, T: IndexElement = i32> {
    data: &'a [T],
    rows: usize,
    width: usize,
    block_size: usize,
    kind: PhantomData<K>,
}

/// `req_to_token` borrowed from the engine's slice ([`ReqTableView`] of [`SlotIds`]).
pub type ReqToTokenView<'a, T = i32> = ReqTableView<'a, SlotIds, T>;
/// The expected-token pool borrowed from the engine's slice ([`ReqTableView`] of [`TokenIds`]).
pub type ExpectedTokenTableView<'a, T = i32> = ReqTableView<'a, TokenIds, T>;

impl<K: TableKind, T: IndexElement> Clone for ReqTableView<'_, K, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: TableKind, T: IndexElement> Copy for ReqTableView<'_, K, T> {}

impl<'a, K: TableKind, T: IndexElement> ReqTableView<'a, K, T> {
    /// A view of row-major `data` of exactly `rows x width` cells; `width` must be positive
    /// (the checks of [`ReqTable::from_vec`]).
    pub fn new(rows: usize, width: usize, data: &'a [T]) -> Result<Self, Error> {
        if width == 0 || rows.checked_mul(width) != Some(data.len()) {
            return Err(Error::TableShape {
                what: K::NAME,
                rows,
                cols: width,
                len: data.len(),
            });
        }
        Ok(ReqTableView {
            data,
            rows,
            width,
            block_size: 1,
            kind: PhantomData,
        })
    }
    /// Number of rows (`max_reqs`, or the batch rows of a block table indexed by batch row).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Cells a row holds (`max_seq_len` or `max_context_len`; a block table's blocks a row).
    pub fn width(&self) -> usize {
        self.width
    }
    /// Tokens a row can place: [`width`](Self::width) x [`block_size`](Self::block_size)
    /// (the row width of a token table).
    pub fn tokens_per_row(&self) -> usize {
        // The constructors checked that the product fits.
        self.width * self.block_size
    }
    /// Tokens a cell places: 1 for a token table (`req_to_token`), the block size of a block
    /// table ([`ReqToTokenView::block_table`]).
    pub fn block_size(&self) -> usize {
        self.block_size
    }
    /// All cells, row-major.
    pub fn as_slice(&self) -> &'a [T] {
        self.data
    }
    /// Row `r`, if it exists.
    pub fn row(&self, r: usize) -> Option<&'a [T]> {
        let start = r.checked_mul(self.width)?;
        self.data.get(start..start.checked_add(self.width)?)
    }
    /// Cell `[r][c]`, if it exists.
    pub fn get(&self, r: usize, c: usize) -> Option<T> {
        if c >= self.width {
            return None;
        }
        self.row(r).map(|row| row[c])
    }
}

/// The largest block size a block table may have (no engine's block is near it).
pub const MAX_BLOCK_SIZE: usize = 1 << 16;

impl<'a, T: IndexElement> ReqTableView<'a, SlotIds, T> {
    /// A **block table** borrowed from the engine: `[rows, blocks_per_row]` row-major block
    /// ids of `block_size` slots each (vLLM's and mistral.rs's `block_tables`, `u32` there).
    /// The plan reads the slot of position `pos` of a row as
    /// `table[row][pos / block_size] * block_size + pos % block_size`, directly from these
    /// cells, with no expansion; block size 1 is a token table (`req_to_token`).
    ///
    /// `block_size` is a checked run-time value in `[1, MAX_BLOCK_SIZE]`
    /// ([`Error::OutOfRange`] otherwise); the data must hold exactly `rows x blocks_per_row`
    /// cells ([`Error::TableShape`]). The rows are the request's pool rows or the batch rows,
    /// as the batch's columns say ([`BatchColumns`](crate::BatchColumns)). A block the plan
    /// reads that is negative, or whose slots pass `i64::MAX`, is [`Error::BlockOutOfRange`].
    ///
    /// ```
    /// use kv_canary::{cpu, BatchView, Cap, PlanInputs, ReqToTokenView, Shape};
    /// // mistral.rs's shape: two batch rows, blocks of 16 slots, u32 block ids.
    /// let blocks: [u32; 4] = [3, 7, 5, 0];
    /// let table = ReqToTokenView::block_table(2, 2, 16, &blocks)?;
    /// let (context_lens, query_lens) = ([18u32, 4], [1u32, 4]); // a decode row, a prefill row
    /// let batch = BatchView::from_query_lens(2, &context_lens, &query_lens)?;
    /// let shape = Shape::<Cap<32>, Cap<2>, Cap<8>>::new();
    /// let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    /// cpu::plan(&shape, &PlanInputs::from_views(batch, table), &mut verify, &mut write)?;
    /// // Row 0 caches 17 tokens: positions 0..16 in block 3, position 16 in block 7.
    /// assert_eq!(verify.num_valid(), 17);
    /// assert_eq!(&verify.slot_indices()[15..17], &[63, 112]);
    /// assert_eq!(write.seed_slot_indices()[..2], [112, -1]);
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn block_table(
        rows: usize,
        blocks_per_row: usize,
        block_size: usize,
        data: &'a [T],
    ) -> Result<Self, Error> {
        if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(Error::OutOfRange {
                what: "block_size",
                value: i64::try_from(block_size).unwrap_or(i64::MAX),
                allowed: "[1, 65536]",
            });
        }
        let view = ReqTableView::new(rows, blocks_per_row, data)?;
        if blocks_per_row
            .checked_mul(block_size)
            .and_then(|t| i64::try_from(t).ok())
            .is_none()
        {
            return Err(Error::OutOfRange {
                what: "blocks_per_row x block_size",
                value: i64::try_from(blocks_per_row).unwrap_or(i64::MAX),
                allowed: "a token count that fits in i64",
            });
        }
        Ok(ReqTableView { block_size, ..view })
    }
}

impl<K: TableKind, T: IndexElement> ReqTableView<'_, K, T> {
    /// The slot of position `pos` of table row `row`, from a cell the plan has validated
    /// ([`check_slots`](Self::check_slots)).
    #[inline]
    pub(crate) fn slot(&self, row: usize, pos: usize) -> i64 {
        let b = self.block_size;
        let cell = self.data[row * self.width + pos / b].as_i64();
        if b == 1 {
            cell
        } else {
            cell * b as i64 + (pos % b) as i64
        }
    }

    /// The slots of positions `[start, start + dst.len())` of table row `row` (validated).
    #[inline]
    pub(crate) fn fill_slots(&self, row: usize, start: usize, dst: &mut [i64]) {
        let base = row * self.width;
        if self.block_size == 1 {
            for (d, &s) in dst.iter_mut().zip(&self.data[base + start..]) {
                *d = s.as_i64();
            }
        } else {
            // A block at a time: one division a block, then consecutive slots.
            let b = self.block_size;
            let (mut pos, mut done) = (start, 0);
            while done < dst.len() {
                let first = self.data[base + pos / b].as_i64() * b as i64;
                let offset = pos % b;
                let n = (b - offset).min(dst.len() - done);
                for (k, d) in dst[done..done + n].iter_mut().enumerate() {
                    *d = first + (offset + k) as i64;
                }
                (pos, done) = (pos + n, done + n);
            }
        }
    }

    /// Checks the cells that place positions `[first, end)` of table row `row` (which the
    /// caller checked lies inside the table): each fits in `i64`, and for a block table each
    /// block is non-negative with its slots inside `i64`. `batch_row` names the row in errors.
    pub(crate) fn check_slots(
        &self,
        batch_row: usize,
        row: usize,
        first: usize,
        end: usize,
    ) -> Result<(), Error> {
        if first >= end {
            return Ok(());
        }
        let b = self.block_size;
        let base = row * self.width;
        let cells = &self.data[base + first / b..base + (end - 1) / b + 1];
        if b == 1 {
            return check_fits(K::NAME, base + first, cells);
        }
        let last_block = (i64::MAX - (b as i64 - 1)) / b as i64;
        for (i, &cell) in cells.iter().enumerate() {
            let ok = cell.to_i64().is_some_and(|c| (0..=last_block).contains(&c));
            if !ok {
                return Err(Error::BlockOutOfRange {
                    row: batch_row,
                    position: (first.max((first / b + i) * b)) as i64,
                    block: cell.wide(),
                    block_size: b,
                });
            }
        }
        Ok(())
    }
}

impl<'a, K: TableKind> From<&'a ReqTable<K>> for ReqTableView<'a, K, i32> {
    fn from(table: &'a ReqTable<K>) -> Self {
        table.view()
    }
}

/// A view from a reference to one (views are `Copy`), so that what takes
/// `impl Into<ReqTableView>` takes `&table` whether `table` is an owned table or a view.
impl<'a, K: TableKind, T: IndexElement> From<&ReqTableView<'a, K, T>> for ReqTableView<'a, K, T> {
    fn from(view: &ReqTableView<'a, K, T>) -> Self {
        *view
    }
}

impl<K: TableKind, T: IndexElement> fmt::Debug for ReqTableView<'_, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(K::NAME)
            .field("rows", &self.rows)
            .field("width", &self.width)
            .field("block_size", &self.block_size)
            .field("element", &T::NAME)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_are_errors_not_aborts() {
        // The issue's aborts were 4 TiB tables; whether the allocator refuses 4 TiB depends on
        // the machine's memory and overcommit policy, so these sizes are past any machine's
        // address space (2^52 and 2^52 bytes) or past isize::MAX.
        assert!(ReqToToken::zeros(1 << 48, 4).is_err());
        assert_eq!(
            ExpectedTokenTable::zeros(1 << 20, 1 << 30).unwrap_err(),
            Error::AllocationFailed {
                what: "req_to_verify_expected_tokens",
                rows: 1 << 20,
                cols: 1 << 30,
                element_bytes: 4
            }
        );
        assert_eq!(
            ReqToToken::zeros(1 << 62, 1).unwrap_err().to_string(),
            "kv-canary: cannot allocate req_to_token: 4611686018427387904 elements of 4 bytes = 18446744073709551616 bytes"
        );
        let err = ReqToToken::zeros(usize::MAX, 2).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("{} x 2 elements", usize::MAX)),
            "{err}"
        );
        assert!(ReqToToken::zeros(3, 0).is_err());
    }

    #[test]
    fn rows_past_usize_are_absent_not_panics() {
        // A width whose last row would end past usize::MAX: start fits, start + width does not.
        let mut t = ReqToToken::zeros(1, 1).unwrap();
        t.width = usize::MAX / 2 + 1;
        assert_eq!(t.row(1), None);
        assert_eq!(t.get(1, 0), None);
        assert!(t.set(1, 0, 5).is_err());
        assert_eq!(t.row_mut(1), None);
    }

    #[test]
    fn shape_is_checked_and_named() {
        let err = ReqToToken::from_vec(2, 3, vec![0; 5]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: req_to_token must hold rows x cols = 2 x 3 = 6 elements, got 5"
        );
        assert!(ReqToToken::zeros(4, 0).is_err());
    }

    #[test]
    fn views_check_the_shape_and_read_the_engine_cells() {
        let cells = [1u64, 2, 3, 4, 5, 6];
        let v = ReqToTokenView::new(2, 3, &cells).unwrap();
        assert_eq!(
            (v.row(1), v.get(0, 2), v.get(0, 3)),
            (Some(&cells[3..]), Some(3), None)
        );
        assert_eq!(v.row(2), None);
        let err = ReqToTokenView::new(2, 4, &cells).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: req_to_token must hold rows x cols = 2 x 4 = 8 elements, got 6"
        );
        assert!(ReqToTokenView::<u64>::new(0, 0, &[]).is_err());
        let owned = ReqToToken::from_vec(1, 2, vec![7, 8]).unwrap();
        assert_eq!(owned.view().as_slice(), &[7, 8]);
    }

    #[test]
    fn rows_and_cells() {
        let mut t = ExpectedTokenTable::zeros(2, 3).unwrap();
        t.set(1, 2, 9).unwrap();
        assert_eq!(t.row(1).unwrap(), &[0, 0, 9]);
        assert_eq!(t.get(1, 3), None);
        assert!(t.set(2, 0, 1).is_err());
    }
}
