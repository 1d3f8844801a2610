//! The plan buffers of spec §2.4 and §2.5: [`VerifyPlan`] and [`WritePlan`].
//!
//! Both are generic over their capacity (so a launch reads it from the type, never from a separate
//! integer) and over the memory they live in ([`Host`](crate::Host) here; device memory with the
//! `cuda` feature). Element types are fixed: `i64` arrays and `i32` scalars, exactly SGLang's.

mod verify_plan;
mod write_plan;

pub use verify_plan::{VerifyEntry, VerifyPlan, VerifyPlanMut};
pub use write_plan::{WritePlan, WritePlanMut, WriteRequest};
