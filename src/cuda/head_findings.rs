//! A device step's head findings before its forward pass: [`PendingHeadFindings`], what
//! [`Step::head_findings`](crate::step::Step::head_findings) returns for a device canary.
//!
//! The call queues, on the canary's stream right after the head verify launches, copies of the
//! ring rows, the write index, the stream's status word, the plan's `enable` and the entries it
//! requested into pinned host memory and an event after them; nothing blocks. The engine takes
//! them with [`try_take`](PendingHeadFindings::try_take) (never blocks) or
//! [`wait`](PendingHeadFindings::wait) before it runs its forward pass. They are a peek: they are
//! not counted as delivered, and the step's final report still holds the same rows once.

use super::device::stream::Stream;
use super::driver::memory::box_ptr;
use super::pending::{Landed, RingLayout, Staged};
use crate::capacity::Capacity;
use crate::step::{HeadFindings, HeadVerifyDone, PlanOverflow, ReadsHeadFindings};
use crate::Error;

/// The head findings of a device step whose copies are queued on the canary's stream: take them
/// once with [`try_take`](Self::try_take) (never blocks) or [`wait`](Self::wait) (blocks).
///
/// The staging rule of [`PendingDeviceReport`](super::PendingDeviceReport): the pending
/// findings own a staging of the stream's pool until taken or dropped.
#[must_use = "pending head findings say nothing until taken (try_take or wait)"]
#[derive(Debug)]
pub struct PendingHeadFindings {
    staged: Staged,
    layout: RingLayout,
    verify_capacity: usize,
}

static_assertions::assert_impl_all!(PendingHeadFindings: Send);

impl PendingHeadFindings {
    /// Whether the copies have landed, so that taking the findings does not block.
    pub fn is_ready(&self) -> Result<bool, Error> {
        self.staged.is_ready()
    }

    /// The findings if their copies have landed, else these pending findings back; never
    /// blocks. A malformed-data error the stream's kernels recorded is the CPU op's [`Error`].
    pub fn try_take(mut self) -> Result<Landed<HeadFindings, Self>, Error> {
        if !self.staged.is_ready()? {
            return Ok(Landed::Pending(self));
        }
        self.decode().map(Landed::Ready)
    }

    /// The findings, blocking the host until their copies have landed.
    pub fn wait(mut self) -> Result<HeadFindings, Error> {
        self.staged.wait()?;
        self.decode()
    }

    fn decode(&mut self) -> Result<HeadFindings, Error> {
        let (layout, capacity) = (self.layout, self.verify_capacity);
        self.staged.decode(|wide, narrow| {
            let (violations, dropped) = layout.decode(wide, narrow)?;
            Ok(HeadFindings {
                violations,
                dropped,
                plan_overflow: (narrow[1] == 0).then_some(PlanOverflow {
                    needed: u64::try_from(wide[layout.extra_at()]).ok(),
                    capacity,
                }),
            })
        })
    }
}

impl ReadsHeadFindings for Stream {
    type HeadFindings = PendingHeadFindings;

    /// Queues the readback on the stream (no host synchronisation).
    fn head_findings<V: Capacity, R: Capacity>(
        &self,
        head: &HeadVerifyDone<'_, Self, V, R>,
    ) -> Result<PendingHeadFindings, Error> {
        let context = self.gpu().context();
        let raw = self.as_raw();
        let enable = box_ptr(&head.verify_plan.enable).addr();
        let requested = box_ptr(&head.verify_plan.requested).addr();
        let (staged, layout) = Staged::queue(self, head.ring, false, 1, 1, |readback, at| {
            readback.copy_narrow(context, 1, enable, 1, raw)?;
            readback.copy_wide(context, at.extra_at(), requested, 1, raw)
        })?;
        Ok(PendingHeadFindings {
            staged,
            layout,
            verify_capacity: head.verify_capacity,
        })
    }
}

super::pending::pending_readback!(PendingHeadFindings => HeadFindings);
