//! Asynchronous device step reports: [`PendingDeviceReport`], what
//! [`Step::verify_tail`](crate::step::Step::verify_tail) returns for a device canary.
//!
//! When a device step ends, its report is *queued*, not read: stream-ordered copies of the
//! ring rows, the write index, the eight health counters (head/tail x K/V x slot/kernel run),
//! the plan scalars (`verify_num_valid`, `enable`, `write_num_valid_reqs`, the write offsets)
//! and the stream's status word go into pinned host memory on the canary's stream, and an
//! event is recorded after them. Nothing blocks. The report is then taken when the engine
//! wants it: [`try_take`](PendingDeviceReport::try_take) never blocks (it hands the pending
//! report back while the event has not completed), [`wait`](PendingDeviceReport::wait)
//! blocks until it has. Both consume the pending report, so a report is decoded and
//! delivered once.
//!
//! The staging rule: each pending report owns its staging (pinned words and event) until it
//! is taken or dropped; the staging then returns to its stream's pool. A later step's copies
//! therefore never overwrite an unread report; with reports taken one step late two stagings
//! serve every step, and a step queued while both are held by unread reports gets a third
//! (a pinned allocation, which can stall the host once; [`Stream::report_stagings_allocated`]
//! counts them).

use super::abi::status::{decode, STATUS_WORDS};
use super::device::gpu::Gpu;
use super::device::readbacks::ReadbackPool;
use super::device::stream::Stream;
use super::driver::memory::{addr, box_ptr};
use super::driver::pinned::Readback;
use crate::canary::{HealthCounters, RingCount, Violation};
use crate::capacity::Capacity;
use crate::consts::VIOLATION_FIELDS;
use crate::memory::Device;
use crate::step::{FinishedStep, KvPair};
use crate::Error;
use std::sync::Arc;

use crate::step::{StepStatus, Unverified};

/// `i32` words of a report's staging: write index, `verify_num_valid`, `enable`,
/// `write_num_valid_reqs`.
const NARROW_WORDS: usize = 4;
/// `i64` words of the health counters: 4 launches x (slot run, kernel run).
const COUNTER_WORDS: usize = 8;

/// Where a report's words lie in its staging.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Ring fields (`rows x 8`), at `i64` word 0.
    ring_fields: usize,
    /// Ring rows (the capacity).
    ring_rows: usize,
    /// Write offsets (`W + 1`), after the counters.
    offsets: usize,
}

impl Layout {
    fn counters_at(self) -> usize {
        self.ring_fields
    }
    fn offsets_at(self) -> usize {
        self.counters_at() + COUNTER_WORDS
    }
    fn status_at(self) -> usize {
        self.offsets_at() + self.offsets
    }
    fn wide(self) -> usize {
        self.status_at() + STATUS_WORDS
    }
}

/// What a device step did, read back from pinned host memory once its copies have landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStepReport {
    /// Rows of the batch the plan wrote (`write_num_valid_reqs`).
    pub bs: usize,
    /// `verify_num_valid` as the plan wrote it.
    pub verify_num_valid: usize,
    /// `enable` as the plan wrote it: false when the batch needed more verify entries than the
    /// verify capacity (no slot was checked).
    pub enabled: bool,
    /// The shape's verify capacity.
    pub verify_capacity: usize,
    /// Tokens the write launches stamped per buffer (`write_offsets[bs]`).
    pub write_tokens: u64,
    /// The health counters of the head launches after this step (cumulative).
    pub head_counters: KvPair<HealthCounters>,
    /// The health counters of the tail launches after this step (cumulative).
    pub tail_counters: KvPair<HealthCounters>,
    /// This step's violation rows, decoded (the device records them in no fixed order across
    /// requests; compare as sets).
    pub violations: Vec<Violation>,
    /// This step's rows that did not fit in the ring.
    pub dropped: u64,
    /// Steps abandoned before this one since the last report.
    pub abandoned_steps: u64,
}

impl DeviceStepReport {
    /// Violations recorded, stored or dropped.
    pub fn recorded(&self) -> u64 {
        self.violations.len() as u64 + self.dropped
    }

    /// What went unchecked: a plan over the verify capacity (the kernel records only that it
    /// was exceeded, so the needed count is unknown), abandoned steps.
    pub fn unverified(&self) -> Unverified {
        Unverified {
            plan_overflow: (!self.enabled).then_some(crate::step::PlanOverflow {
                needed: None,
                capacity: self.verify_capacity,
            }),
            abandoned_steps: self.abandoned_steps,
        }
    }

    /// Clean, violations, or unverified.
    pub fn status(&self) -> StepStatus {
        StepStatus::of(self.unverified(), self.recorded())
    }

    /// Whether every check ran over every planned slot and recorded nothing.
    pub fn is_clean(&self) -> bool {
        self.status() == StepStatus::Clean
    }
}

/// The report of a device step whose copies are queued on the canary's stream: take it once
/// with [`try_take`](Self::try_take) (never blocks) or [`wait`](Self::wait) (blocks).
///
/// The staging rule: each pending report owns its pinned staging (words and event) until it is
/// taken or dropped, then the staging returns to its stream's pool. So later steps' copies never
/// overwrite an unread report; with reports taken one step late two stagings serve every step,
/// and a step queued while every staging is held by an unread report allocates one more (a
/// possible host stall, counted by [`Stream::report_stagings_allocated`]). Nothing blocks
/// until [`wait`](Self::wait); dropping a pending report unread discards that step's report.
#[must_use = "a pending report holds a step's findings: take it (try_take or wait)"]
#[derive(Debug)]
pub struct PendingDeviceReport<'g> {
    gpu: &'g Gpu,
    pool: Arc<ReadbackPool>,
    /// `Some` until taken (then back in the pool).
    readback: Option<Readback>,
    layout: Layout,
    verify_capacity: usize,
    abandoned_steps: u64,
}

static_assertions::assert_impl_all!(PendingDeviceReport<'static>: Send);

/// What [`PendingDeviceReport::try_take`] found.
#[derive(Debug)]
pub enum Polled<'g> {
    /// The copies have landed: the decoded report.
    Ready(DeviceStepReport),
    /// The copies are still queued or running: the pending report, to try again later.
    Pending(PendingDeviceReport<'g>),
}

impl<'g> PendingDeviceReport<'g> {
    /// Whether the report's copies have landed, so that taking it does not block.
    pub fn is_ready(&self) -> Result<bool, Error> {
        match &self.readback {
            Some(r) => r.is_done(self.gpu.context()),
            None => Ok(true),
        }
    }

    /// The report if its copies have landed ([`Polled::Ready`]), else this pending report back
    /// ([`Polled::Pending`]); never blocks. A malformed-data error the stream's kernels
    /// recorded (the status word) is returned as the CPU op's [`Error`].
    pub fn try_take(mut self) -> Result<Polled<'g>, Error> {
        if !self.is_ready()? {
            return Ok(Polled::Pending(self));
        }
        self.decode().map(Polled::Ready)
    }

    /// The report, blocking the host until its copies have landed (the synchronous behaviour
    /// of the first device step API); errors as [`try_take`](Self::try_take).
    pub fn wait(mut self) -> Result<DeviceStepReport, Error> {
        if let Some(r) = &self.readback {
            r.wait(self.gpu.context())?;
        }
        self.decode()
    }

    /// Decodes the landed words and gives the staging back.
    fn decode(&mut self) -> Result<DeviceStepReport, Error> {
        let mut readback = self.readback.take().ok_or(Error::OutOfRange {
            what: "device report taken twice",
            value: 1,
            allowed: "one take",
        })?;
        let result = match readback.read(self.gpu.context())? {
            Some((wide, narrow)) => self.decode_words(wide, narrow),
            None => Err(Error::OutOfRange {
                what: "device report read before its copies landed",
                value: 0,
                allowed: "a completed event",
            }),
        };
        self.pool.give_back(readback);
        let report = result?;
        self.pool.deliver(report.recorded());
        Ok(report)
    }

    fn decode_words(&self, wide: &[i64], narrow: &[i32]) -> Result<DeviceStepReport, Error> {
        let l = self.layout;
        let mut status = [0i64; STATUS_WORDS];
        status.copy_from_slice(&wide[l.status_at()..l.status_at() + STATUS_WORDS]);
        decode(&status)?;
        let [write_index, verify_num_valid, enable, num_valid_reqs] =
            [narrow[0], narrow[1], narrow[2], narrow[3]];
        // A negative (wrapped) index is an error naming it, never a clean report.
        let RingCount { stored, dropped } = RingCount::decode(write_index, l.ring_rows)?;
        let violations = wide[..stored * VIOLATION_FIELDS]
            .chunks_exact(VIOLATION_FIELDS)
            .map(|row| {
                let mut out = [0; VIOLATION_FIELDS];
                out.copy_from_slice(row);
                Violation::from_row(out)
            })
            .collect();
        let c = &wide[l.counters_at()..l.counters_at() + COUNTER_WORDS];
        let pair = |at: usize| KvPair {
            k: HealthCounters::from_parts(c[at], c[at + 1]),
            v: HealthCounters::from_parts(c[at + 2], c[at + 3]),
        };
        let bs = usize::try_from(num_valid_reqs).unwrap_or(0);
        let offsets = &wide[l.offsets_at()..l.offsets_at() + l.offsets];
        let write_tokens = offsets
            .get(bs)
            .map_or(0, |&n| u64::try_from(n).unwrap_or(0));
        Ok(DeviceStepReport {
            bs,
            verify_num_valid: usize::try_from(verify_num_valid).unwrap_or(0),
            enabled: enable != 0,
            verify_capacity: self.verify_capacity,
            write_tokens,
            head_counters: pair(0),
            tail_counters: pair(4),
            violations,
            dropped,
            abandoned_steps: self.abandoned_steps,
        })
    }
}

impl Drop for PendingDeviceReport<'_> {
    fn drop(&mut self) {
        // Unread: the staging goes back; the copies still queued into it run before any later
        // copy into it (one stream), and nothing reads it before its next event completes.
        if let Some(readback) = self.readback.take() {
            self.pool.give_back(readback);
        }
    }
}

/// Queues the readback of a finished step on `stream`: no host synchronisation.
pub(crate) fn queue<'g, V: Capacity, W: Capacity, R: Capacity>(
    stream: &Stream<'g>,
    step: &FinishedStep<'_, Stream<'g>, V, W, R>,
) -> Result<PendingDeviceReport<'g>, Error> {
    let gpu = stream.gpu();
    let context = gpu.context();
    let raw = stream.as_raw();
    let layout = Layout {
        ring_fields: step.ring.rows.len(),
        ring_rows: step.ring.capacity().get(),
        offsets: step.write_plan.offsets.len(),
    };
    let pool = Arc::clone(stream.readbacks());
    let mut readback = pool.take(gpu, layout.wide(), NARROW_WORDS)?;
    readback.begin();
    readback.copy_wide(context, 0, addr(&step.ring.rows), layout.ring_fields, raw)?;
    let counters: [&HealthCounters<Device>; 4] = [
        &step.head_counters.k,
        &step.head_counters.v,
        &step.tail_counters.k,
        &step.tail_counters.v,
    ];
    for (i, c) in counters.into_iter().enumerate() {
        let at = layout.counters_at() + 2 * i;
        readback.copy_wide(context, at, box_ptr(&c.slot_run_counter).addr(), 1, raw)?;
        readback.copy_wide(
            context,
            at + 1,
            box_ptr(&c.kernel_run_counter).addr(),
            1,
            raw,
        )?;
    }
    readback.copy_wide(
        context,
        layout.offsets_at(),
        addr(&step.write_plan.offsets),
        layout.offsets,
        raw,
    )?;
    readback.copy_wide(
        context,
        layout.status_at(),
        stream.status_addr(),
        STATUS_WORDS,
        raw,
    )?;
    let narrow = [
        box_ptr(&step.ring.write_index).addr(),
        box_ptr(&step.verify_plan.num_valid).addr(),
        box_ptr(&step.verify_plan.enable).addr(),
        box_ptr(&step.write_plan.num_valid_reqs).addr(),
    ];
    for (at, src) in narrow.into_iter().enumerate() {
        readback.copy_narrow(context, at, src, 1, raw)?;
    }
    readback.finish(context, raw)?;
    Ok(PendingDeviceReport {
        gpu,
        pool,
        readback: Some(readback),
        layout,
        verify_capacity: step.verify_capacity,
        abandoned_steps: step.abandoned_steps,
    })
}
