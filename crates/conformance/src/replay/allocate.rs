//! Replay of `verify_plan_allocate` / `write_plan_allocate`: building a plan buffer of a
//! run-time capacity. The golden files hold only failing allocations (capacity 0, which
//! [`UncheckedCapacity::new`](kv_canary::UncheckedCapacity::new) rejects); a successful allocation
//! produces no outputs to compare.

use super::{capacity, Replayed};
use crate::case::Case;
use kv_canary::{VerifyPlan, WritePlan};

/// `VerifyPlan.allocate(verify_capacity)`.
pub(super) fn replay_verify_plan(case: &Case) -> Replayed {
    let run = || {
        let cap = capacity("verify_capacity", case.inputs().int("verify_capacity")?)?;
        let _ = VerifyPlan::try_with_capacity(cap)?;
        Ok(Vec::new())
    };
    run().into()
}

/// `WritePlan.allocate(write_req_capacity)`.
pub(super) fn replay_write_plan(case: &Case) -> Replayed {
    let run = || {
        let cap = capacity(
            "write_req_capacity",
            case.inputs().int("write_req_capacity")?,
        )?;
        let _ = WritePlan::try_with_capacity(cap)?;
        Ok(Vec::new())
    };
    run().into()
}
