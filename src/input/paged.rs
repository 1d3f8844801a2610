//! [`PagedStepArrays`]: the arrays a vLLM-style engine (mistral.rs, candle-vllm) keeps for one
//! step, named as the engine names them, in one value: the block tables by batch row, the
//! context and query lengths, the batch size, and the step's token ids, positions and slot
//! mapping.
//!
//! The same struct describes host slices (this module: the plan inputs and write inputs the CPU
//! ops and [`SlotRows`](crate::step::SlotRows) read) and device memory (`cuda::PagedStepViews`,
//! feature `cudarc`: the device views over the engine's tensors), so an engine names its arrays
//! once, whichever side reads them.

use super::batch::{BatchView, QueryLens};
use super::element::IndexElement;
use super::expected::NoExpectedTokens;
use super::group::Full;
use super::table::ReqToTokenView;
use super::write_inputs::{InputAssertOff, WriteInputsView};
use super::PlanInputs;
use crate::capacity::Capacity;
use crate::Error;

/// A vLLM-style engine's arrays for one step, in its own element types and memory.
///
/// On the host every array field is a slice (`&[u32]`, `&[i64]`, ...) and `bs` a `usize`; for
/// the device views (`cuda::PagedStepViews::from_cudarc`) every array is an `Arc` of the
/// engine's device memory and `bs` an optional device count. The type parameters are inferred
/// from the fields; an engine writes the struct literal and never names them.
///
/// ```
/// use kv_canary::{Cap, PagedStepArrays};
/// // Two sequences in blocks of 4 tokens: row 0 holds blocks 3, 5 and decodes its 6th token;
/// // row 1 holds block 7 and prefills 3 tokens. -1 pads the slot mapping.
/// let block_tables = [3u32, 5, 7, 0];
/// let arrays = PagedStepArrays {
///     block_tables: &block_tables[..],
///     blocks_per_row: 2,
///     block_size: 4,
///     context_lens: &[6u32, 3][..],
///     query_lens: &[1u32, 3][..],
///     bs: 2,
///     input_ids: &[11u32, 20, 21, 22, 0][..],
///     positions: &[5i64, 0, 1, 2, 0][..],
///     slot_mapping: &[21i64, 28, 29, 30, -1][..],
/// };
/// let inputs = arrays.plan_inputs()?;
/// assert_eq!(inputs.batch.len(), 2);
/// let write = arrays.write_inputs(Cap::<5>)?;
/// assert_eq!(write.out_cache_loc()[4], -1);
/// # Ok::<(), kv_canary::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PagedStepArrays<T, L, N, I, P, M> {
    /// The block table, row-major `[rows, blocks_per_row]`: the block ids of each batch row's
    /// sequence (`u32` or `i32` cells).
    pub block_tables: T,
    /// The block table's row width.
    pub blocks_per_row: usize,
    /// Tokens per KV block (the slot of position `p` is `table[p / block_size] * block_size +
    /// p % block_size`).
    pub block_size: usize,
    /// Each row's whole context after this step (cached tokens and this step's).
    pub context_lens: L,
    /// Each row's tokens this step (1 for a decode row, the chunk for a prefill row).
    pub query_lens: L,
    /// The batch's live rows: a `usize` on the host; on the device an optional `i32` count the
    /// engine updates in place (`None`: set on the host before each step).
    pub bs: N,
    /// The step's token ids, one per new token, padded to the write capacity.
    pub input_ids: I,
    /// Each new token's position in its sequence.
    pub positions: P,
    /// Each new token's KV slot (`-1` for padding).
    pub slot_mapping: M,
}

/// [`PagedStepArrays`] of host slices, `bs` a `usize`: the form the host views read, with
/// mistral.rs's element types as defaults (`u32` block tables, lengths and token ids, `i64`
/// positions and slot mapping). A struct literal may name it:
/// `PagedStepSlices { block_tables: &tables, .. }`.
pub type PagedStepSlices<'a, T = u32, L = u32, I = u32, P = i64, M = i64> =
    PagedStepArrays<&'a [T], &'a [L], usize, &'a [I], &'a [P], &'a [M]>;

impl<'a, T, L, I, P, M> PagedStepSlices<'a, T, L, I, P, M>
where
    T: IndexElement,
    L: IndexElement,
    I: IndexElement,
    P: IndexElement,
    M: IndexElement,
{
    /// The plan inputs of the step (FULL group, no expected-token pool, offset 0): the block
    /// table of `block_tables.len() / blocks_per_row` rows and the first `bs` rows of the
    /// lengths, checked as [`ReqToTokenView::block_table`] and
    /// [`BatchView::from_query_lens`] check them. A `blocks_per_row` of 0 is
    /// [`Error::OutOfRange`]; a table whose length is not a multiple of it is
    /// [`Error::LengthMismatch`].
    pub fn plan_inputs(
        &self,
    ) -> Result<PlanInputs<'a, Full, NoExpectedTokens, QueryLens<L, L>, T>, Error> {
        let rows = whole_rows(
            "block_tables (rows x blocks_per_row)",
            "blocks_per_row",
            self.block_tables.len(),
            self.blocks_per_row,
        )?;
        let table = ReqToTokenView::block_table(
            rows,
            self.blocks_per_row,
            self.block_size,
            self.block_tables,
        )?;
        let batch = BatchView::from_query_lens(self.bs, self.context_lens, self.query_lens)?;
        Ok(PlanInputs::from_views(batch, table))
    }

    /// The write inputs of the step: the first `capacity` token ids, positions and slots
    /// (input assert off), checked as [`WriteInputsView::new`] checks them.
    pub fn write_inputs<E: Capacity>(
        &self,
        capacity: E,
    ) -> Result<WriteInputsView<'a, E, InputAssertOff, I, P, M>, Error> {
        WriteInputsView::new(capacity, self.input_ids, self.positions, self.slot_mapping)
    }
}

/// The rows of a row-major array of `len` elements in rows of `width` (host slice or device
/// memory alike): a `width` of 0 is [`Error::OutOfRange`] naming `width_name`; a `len` that is
/// not a whole number of rows is [`Error::LengthMismatch`] naming `array`.
pub(crate) fn whole_rows(
    array: &'static str,
    width_name: &'static str,
    len: usize,
    width: usize,
) -> Result<usize, Error> {
    if width == 0 {
        return Err(Error::OutOfRange {
            what: width_name,
            value: 0,
            allowed: "at least 1",
        });
    }
    let rows = len / width;
    if rows * width != len {
        return Err(Error::LengthMismatch {
            what: array,
            expected: (rows + 1) * width,
            found: len,
        });
    }
    Ok(rows)
}
