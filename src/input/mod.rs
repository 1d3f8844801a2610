//! Plan inputs as types (spec §3.1): the batch's per-request columns, the `req_to_token` table,
//! the KV group (FULL, or SWA with its window and LUT), the optional expected-token pool with its
//! valid lengths, and the position offset; and the write op's per-token [`WriteInputs`] (spec §4).

mod batch;
mod choice;
mod expected;
mod group;
mod table;
mod write_inputs;

pub use batch::{Batch, BatchRow};
pub use choice::RuntimePlanInputs;
pub use expected::{ExpectedTokenPool, ExpectedTokens, NoExpectedTokens};
pub use group::{Full, Group, Swa, SwaWindow};
pub use table::{ExpectedTokenTable, ReqTable, ReqToToken, SlotIds, TableKind, TokenIds};
pub use write_inputs::{
    ExpectedWriteInputs, ExpectedWriteInputsMut, InputAssertOff, InputAssertOn, WriteInputAssert,
    WriteInputs, WriteInputsMut,
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
#[derive(Clone, Copy, Debug)]
pub struct PlanInputs<'a, G: Group, X: ExpectedTokens> {
    /// Per-request columns.
    pub batch: &'a Batch,
    /// Full-pool slot of every (request, position).
    pub req_to_token: &'a ReqToToken,
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
        PlanInputs {
            batch,
            req_to_token,
            group: Full,
            expected: NoExpectedTokens,
            offset: PositionOffset::Target,
        }
    }
}

impl<'a, G: Group, X: ExpectedTokens> PlanInputs<'a, G, X> {
    /// The same inputs with another group.
    pub fn with_group<G2: Group>(self, group: G2) -> PlanInputs<'a, G2, X> {
        PlanInputs {
            batch: self.batch,
            req_to_token: self.req_to_token,
            group,
            expected: self.expected,
            offset: self.offset,
        }
    }

    /// The same inputs with an expected-token pool (or [`NoExpectedTokens`]).
    pub fn with_expected<X2: ExpectedTokens>(self, expected: X2) -> PlanInputs<'a, G, X2> {
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
