//! Plan inputs as types (spec §3.1): the batch's per-request columns, the `req_to_token` table,
//! the KV group (FULL, or SWA with its window and LUT), the optional expected-token pool with its
//! valid lengths, and the position offset; and the write op's per-token [`WriteInputs`] (spec §4).
//!
//! Every input the ops read is owned by this crate ([`Batch`], [`ReqToToken`], [`WriteInputs`])
//! or borrowed from the engine's own slices ([`BatchView`], [`ReqToTokenView`],
//! [`WriteInputsView`]) of the engine's element type ([`IndexElement`]: `i32`, `i64`, `u32`,
//! `u64`, `usize`); the ops read both alike, with no copy and no cast on the engine's side.

mod batch;
mod choice;
mod element;
mod expected;
mod group;
mod paged;
mod table;
mod write_inputs;

pub use batch::{Batch, BatchColumns, BatchRow, BatchView, PoolRows, QueryLens, QueryStarts};
pub use choice::RuntimePlanInputs;
pub use element::IndexElement;
pub(crate) use element::{check_fits, read_i64};
pub use expected::{ExpectedTokenPool, ExpectedTokens, NoExpectedTokens};
pub use group::{Full, Group, Swa, SwaWindow};
#[cfg(feature = "cudarc")]
pub(crate) use paged::whole_rows;
pub use paged::{PagedStepArrays, PagedStepSlices};
pub use table::{
    ExpectedTokenTable, ExpectedTokenTableView, ReqTable, ReqTableView, ReqToToken, ReqToTokenView,
    SlotIds, TableKind, TokenIds, MAX_BLOCK_SIZE,
};
pub use write_inputs::{
    ExpectedWriteInputs, ExpectedWriteInputsMut, HostWriteInputs, InputAssertOff, InputAssertOn,
    WriteInputAssert, WriteInputSource, WriteInputs, WriteInputsMut, WriteInputsView,
};

use crate::Error;

/// How a KV token id relates to its position (`kv_token_id_vs_position_offset`, spec §3.1).
///
/// The expected token of the entry at position `pos` is read from the pool at `pos + offset`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PositionOffset {
    /// 0: target-model pools, where the slot at `pos` holds token `pos`.
    #[default]
    Target,
    /// +1: EAGLE draft pools, where the slot at `pos` holds token `pos + 1`.
    EagleDraft,
}

impl PositionOffset {
    /// The offset as a number (0 or 1).
    pub fn value(self) -> i64 {
        match self {
            PositionOffset::Target => 0,
            PositionOffset::EagleDraft => 1,
        }
    }
}

impl TryFrom<i64> for PositionOffset {
    type Error = Error;
    fn try_from(v: i64) -> Result<Self, Error> {
        match v {
            0 => Ok(PositionOffset::Target),
            1 => Ok(PositionOffset::EagleDraft),
            _ => Err(Error::InvalidEnumValue {
                what: "kv_token_id_vs_position_offset",
                value: v,
            }),
        }
    }
}

/// Everything the plan op reads besides its output buffers.
///
/// The batch columns and `req_to_token` are views: of the owned [`Batch`] and [`ReqToToken`]
/// ([`PlanInputs::full`]) or of the engine's own slices ([`PlanInputs::from_views`]), with
/// columns `B` (SGLang's [`PoolRows`] or vLLM's [`QueryLens`] / [`QueryStarts`], each column of
/// its own element type) and table cells of `T` (a token table, or a block table:
/// [`ReqToTokenView::block_table`]).
#[derive(Debug)]
pub struct PlanInputs<
    'a,
    G: Group,
    X: ExpectedTokens,
    B: BatchColumns = PoolRows,
    T: IndexElement = i32,
> {
    /// Per-request columns.
    pub batch: BatchView<'a, B>,
    /// Full-pool slot of every (request, position): a token table, or a block table read as
    /// `table[row][pos / B] * B + pos % B`.
    pub req_to_token: ReqToTokenView<'a, T>,
    /// FULL or SWA.
    pub group: G,
    /// The expected-token pool with its valid lengths, or [`NoExpectedTokens`].
    pub expected: X,
    /// 0 for target pools, +1 for EAGLE draft pools.
    pub offset: PositionOffset,
}

impl<'a> PlanInputs<'a, Full, NoExpectedTokens> {
    /// Inputs for a FULL group without an expected-token pool, offset 0.
    pub fn full(batch: &'a Batch, req_to_token: &'a ReqToToken) -> Self {
        PlanInputs::from_views(batch.view(), req_to_token.view())
    }
}

impl<'a, B: BatchColumns, T: IndexElement> PlanInputs<'a, Full, NoExpectedTokens, B, T> {
    /// Inputs for a FULL group without an expected-token pool, offset 0, over views of the
    /// engine's own slices.
    pub fn from_views(batch: BatchView<'a, B>, req_to_token: ReqToTokenView<'a, T>) -> Self {
        PlanInputs {
            batch,
            req_to_token,
            group: Full,
            expected: NoExpectedTokens,
            offset: PositionOffset::Target,
        }
    }
}

impl<G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement> Clone
    for PlanInputs<'_, G, X, B, T>
{
    fn clone(&self) -> Self {
        *self
    }
}
impl<G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement> Copy
    for PlanInputs<'_, G, X, B, T>
{
}

impl<'a, G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement> PlanInputs<'a, G, X, B, T> {
    /// The same inputs with another group.
    pub fn with_group<G2: Group>(self, group: G2) -> PlanInputs<'a, G2, X, B, T> {
        PlanInputs {
            batch: self.batch,
            req_to_token: self.req_to_token,
            group,
            expected: self.expected,
            offset: self.offset,
        }
    }

    /// The same inputs with an expected-token pool (or [`NoExpectedTokens`]).
    pub fn with_expected<X2: ExpectedTokens>(self, expected: X2) -> PlanInputs<'a, G, X2, B, T> {
        PlanInputs {
            batch: self.batch,
            req_to_token: self.req_to_token,
            group: self.group,
            expected,
            offset: self.offset,
        }
    }

    /// The same inputs with another position offset.
    pub fn with_offset(self, offset: PositionOffset) -> Self {
        PlanInputs { offset, ..self }
    }
}
