//! What the head verify of a step found, readable before the forward pass: [`HeadFindings`].
//!
//! An engine that chooses to wait reads them between [`Step::verify_head`](super::Step::verify_head)
//! and its forward pass, and can stop before the model attends to a corrupted cache. Reading
//! them is a peek, not a delivery: the step's final report still holds the same rows once, with
//! the rest of the step's.

use super::findings::findings;
use super::status::{PlanOverflow, Unverified};
use crate::backend::{Backend, Cpu};
use crate::canary::{Violation, ViolationRing};
use crate::capacity::Capacity;
use crate::cpu::PlanSummary;
use crate::error::Error;
use crate::plan::VerifyPlan;
use core::fmt;

/// The head verify's findings: the ring rows it recorded (K launch, then V), the rows that did
/// not fit, and whether the plan overflowed its verify capacity (then the head verify checked
/// nothing, and the findings are unverified, not clean).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadFindings {
    /// The head verify's violation rows, decoded (on a device in no fixed order across
    /// requests: compare as sets).
    pub violations: Vec<Violation>,
    /// Rows that did not fit in the ring.
    pub dropped: u64,
    /// The plan needed more entries than the verify capacity: no slot was checked.
    pub plan_overflow: Option<PlanOverflow>,
}

// Unverified when the plan overflowed; abandoned earlier steps are the final report's to count.
findings!(HeadFindings, unverified: |findings| Unverified {
    plan_overflow: findings.plan_overflow,
    abandoned_steps: 0,
});

/// One line: `head verify: clean`, `head verify: 2 violations (0 dropped)` or `head verify:
/// UNVERIFIED: ...`.
impl fmt::Display for HeadFindings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("head verify: ")?;
        self.status().write_line(f, self.dropped)
    }
}

/// What a step's head verify has done, handed to [`ReadsHeadFindings::head_findings`].
#[non_exhaustive]
pub struct HeadVerifyDone<'c, B: Backend, V: Capacity, R: Capacity> {
    /// What the plan launch returned.
    pub plan: B::PlanDone,
    /// The step's verify plan.
    pub verify_plan: &'c VerifyPlan<V, B::Memory>,
    /// The shape's verify capacity.
    pub verify_capacity: usize,
    /// The ring holding the head verify's rows (emptied by the plan).
    pub ring: &'c ViolationRing<R, B::Memory>,
}

/// A backend that reads a step's head findings before its forward pass: the CPU at once (a
/// [`HeadFindings`]), a CUDA stream through a queued readback.
pub trait ReadsHeadFindings: Backend + Sized {
    /// What [`Step::head_findings`](super::Step::head_findings) returns.
    type HeadFindings;

    /// The findings of the head verify that just ran.
    fn head_findings<V: Capacity, R: Capacity>(
        &self,
        head: &HeadVerifyDone<'_, Self, V, R>,
    ) -> Result<Self::HeadFindings, Error>;
}

impl ReadsHeadFindings for Cpu {
    type HeadFindings = HeadFindings;

    fn head_findings<V: Capacity, R: Capacity>(
        &self,
        head: &HeadVerifyDone<'_, Cpu, V, R>,
    ) -> Result<HeadFindings, Error> {
        let plan: PlanSummary = head.plan;
        Ok(HeadFindings {
            violations: head.ring.violations().collect(),
            // A wrapped (negative) write index is an error naming it, never a clean report.
            dropped: head.ring.count()?.dropped,
            plan_overflow: (!plan.enabled).then_some(PlanOverflow {
                needed: Some(plan.requested_entries),
                capacity: head.verify_capacity,
            }),
        })
    }
}
