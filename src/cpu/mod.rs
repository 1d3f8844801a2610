//! The CPU reference backend: SGLang's ops on host buffers, byte for byte.
//!
//! Every op takes [`Host`](crate::Host) buffers only; the CUDA backend takes device buffers only.
//! Every op validates all the indices it will follow before it mutates anything, so an op that
//! returns an error has modified nothing.

#[cfg(test)]
mod block_tests;
mod fingerprints;
mod plan;
mod scatter;
#[cfg(test)]
mod testing;
mod verify;
mod write;

pub(crate) use plan::row_slots;
pub use plan::{plan, PlanSummary};
pub use scatter::{scatter_req_token_ids, ScatterSummary};
pub use verify::{verify, VerifySummary};
pub use write::{write, WriteSummary};
