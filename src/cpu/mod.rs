//! The CPU reference backend: SGLang's ops on host buffers, byte for byte.
//!
//! Every op takes [`Host`](crate::Host) buffers only; the CUDA backend takes device buffers only.

mod plan;

pub use plan::{plan, PlanSummary};
