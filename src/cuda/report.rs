//! Asynchronous device step reports: [`PendingDeviceReport`], what
//! [`Step::verify_tail`](crate::step::Step::verify_tail) returns for a device canary.
//!
//! When a device step ends, its report is *queued*, not read: stream-ordered copies of the
//! ring rows, the write index, the eight health counters (head/tail x K/V x slot/kernel run),
//! the plan scalars (`verify_num_valid`, `enable`, the entries requested, `write_num_valid_reqs`,
//! the write offsets) and the stream's status word go into pinned host memory on the canary's
//! stream, and an event is recorded after them. Nothing blocks. The report is then taken when
//! the engine wants it: [`try_take`](PendingDeviceReport::try_take) never blocks (it hands the
//! pending report back while the event has not completed), [`wait`](PendingDeviceReport::wait)
//! blocks until it has. Both consume the pending report, so a report is decoded and
//! delivered once.
//!
//! The staging rule: each pending report owns its staging (pinned words and event) until it
//! is taken or dropped; the staging then returns to its stream's pool. A later step's copies
//! therefore never overwrite an unread report; with reports taken one step late two stagings
//! serve every step, and a step queued while both are held by unread reports gets a third
//! (a pinned allocation, which can stall the host once; [`Stream::report_stagings_allocated`]
//! counts them).

use super::abi::kernels::Kernel;
use super::abi::status::{decode_at, STATUS_WORDS};
use super::device::gpu::Gpu;
use super::device::readbacks::ReadbackPool;
use super::device::stream::Stream;
use super::driver::memory::{addr, box_ptr};
use super::driver::pinned::Readback;
use super::pending::Landed;
use crate::canary::{decode_rows, HealthCounters, RingCount, Violation};
use crate::capacity::Capacity;
use crate::consts::VIOLATION_FIELDS;
use crate::memory::Device;
use crate::step::{FinishedStep, KvPair};
use crate::Error;
use std::sync::Arc;

use crate::step::Unverified;

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
    fn requested_at(self) -> usize {
        self.status_at() + STATUS_WORDS
    }
    fn wide(self) -> usize {
        self.requested_at() + 1
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
    /// The verify entries the plan asked for (`T`, before the capacity clamp): above
    /// [`verify_capacity`](Self::verify_capacity) when the plan overflowed.
    pub requested_entries: u64,
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

// Unverified when the plan overflowed its verify capacity (the entries it needed and the
// capacity) or earlier steps were abandoned.
crate::step::findings!(DeviceStepReport, unverified: |report| Unverified {
    plan_overflow: (!report.enabled).then_some(crate::step::PlanOverflow {
        needed: Some(report.requested_entries),
        capacity: report.verify_capacity,
    }),
    abandoned_steps: report.abandoned_steps,
});

/// One line, as the CPU's `StepReport`: `bs 3, 12 verify entries (enabled), 5 tokens written;
/// clean` — or `2 violations (0 dropped)`, or `UNVERIFIED: ...` naming what was not checked (a
/// plan over its verify capacity: `bs 3, 12 verify entries (DISABLED: over capacity), ...;
/// UNVERIFIED: the plan needed 12 verify entries but the verify capacity is 8, ...`).
impl core::fmt::Display for DeviceStepReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use crate::step::status::Counted;
        write!(
            f,
            "bs {}, {} ({})",
            self.bs,
            Counted(self.requested_entries, "verify entry", "verify entries"),
            if self.enabled {
                "enabled"
            } else {
                "DISABLED: over capacity"
            }
        )?;
        write!(
            f,
            ", {} written; ",
            Counted(self.write_tokens, "token", "tokens")
        )?;
        self.status().write_line(f, self.dropped)
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
pub struct PendingDeviceReport {
    pool: Arc<ReadbackPool>,
    /// `Some` until taken (then back in the pool).
    readback: Option<Readback>,
    layout: Layout,
    verify_capacity: usize,
    abandoned_steps: u64,
    /// Whether the copies were captured into a graph (a [`CapturedReport`] then takes the
    /// report of each replay) instead of queued.
    captured: bool,
    /// Dropped after the staging (it may hold the last handle of the staging's context).
    gpu: Gpu,
}

static_assertions::assert_impl_all!(PendingDeviceReport: Send);

/// What [`PendingDeviceReport::try_take`] found: [`Landed::Ready`] with the decoded report, or
/// [`Landed::Pending`] with the pending report, to try again later (the same shape as a sweep's
/// and the head findings' takes).
pub type Polled = Landed<DeviceStepReport, PendingDeviceReport>;

impl PendingDeviceReport {
    /// Whether the step was captured into a graph (its `verify_tail` ran while the stream was
    /// capturing): then nothing was copied, and [`into_captured`](Self::into_captured) gives
    /// the report of each replay; [`try_take`](Self::try_take) and [`wait`](Self::wait) are
    /// errors.
    pub fn is_captured(&self) -> bool {
        self.captured
    }

    /// The per-replay report of a step captured into a graph (see [`CapturedReport`]); an
    /// error for a step that ran eagerly.
    pub fn into_captured(mut self) -> Result<CapturedReport, Error> {
        if !self.captured {
            return Err(Error::Malformed {
                detail: "this device step ran eagerly, not in a capture: take its report with \
                         try_take or wait"
                    .to_owned(),
            });
        }
        let readback = self.readback.take().ok_or(Error::OutOfRange {
            what: "captured device report without its staging",
            value: 0,
            allowed: "a staging",
        })?;
        Ok(CapturedReport {
            readback,
            pool: Arc::clone(&self.pool),
            layout: self.layout,
            verify_capacity: self.verify_capacity,
            abandoned_steps: self.abandoned_steps,
            gpu: self.gpu.clone(),
        })
    }

    fn refuse_captured(&self) -> Result<(), Error> {
        if self.captured {
            return Err(Error::Malformed {
                detail: "this device step was captured into a graph: its report is read per \
                         replay (PendingDeviceReport::into_captured, or StepGraph)"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// Whether the report's copies have landed, so that taking it does not block (`false`
    /// for a captured step).
    pub fn is_ready(&self) -> Result<bool, Error> {
        match &self.readback {
            Some(r) => r.is_done(self.gpu.context()),
            None => Ok(true),
        }
    }

    /// The report if its copies have landed ([`Landed::Ready`]), else this pending report back
    /// ([`Landed::Pending`]); never blocks. A malformed-data error the stream's kernels
    /// recorded (the status word) is returned as the CPU op's [`Error`].
    pub fn try_take(mut self) -> Result<Polled, Error> {
        self.refuse_captured()?;
        if !self.is_ready()? {
            return Ok(Landed::Pending(self));
        }
        self.decode().map(Landed::Ready)
    }

    /// The report, blocking the host until its copies have landed (the synchronous behaviour
    /// of the first device step API); errors as [`try_take`](Self::try_take).
    pub fn wait(mut self) -> Result<DeviceStepReport, Error> {
        self.refuse_captured()?;
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
            Some((wide, narrow)) => decode_words(
                self.layout,
                self.verify_capacity,
                self.abandoned_steps,
                wide,
                narrow,
            ),
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
}

/// The report of a device step captured into a CUDA graph, read once per replay: the graph's
/// copies land in this one pinned staging at every replay, so a replay may be queued only
/// once the previous replay's report was taken ([`can_replay`](Self::can_replay)), and each
/// replay's report is taken once ([`try_take`](Self::try_take) never blocks,
/// [`wait`](Self::wait) blocks).
///
/// [`StepGraph`](crate::cuda::StepGraph) drives two of these (two graph instances
/// alternating), so the report of replay N is read while replay N+1 runs. An engine that
/// captures a step on its own stream calls [`replayed`](Self::replayed) after each of its
/// own launches of the graph (an `unsafe` promise).
///
/// The staging must outlive every replay of the graph: dropping it waits for the last replay
/// it was told about.
#[derive(Debug)]
pub struct CapturedReport {
    readback: Readback,
    pool: Arc<ReadbackPool>,
    layout: Layout,
    verify_capacity: usize,
    /// Reported by the first replay's report, 0 after.
    abandoned_steps: u64,
    /// Dropped after the staging.
    gpu: Gpu,
}

static_assertions::assert_impl_all!(CapturedReport: Send);

impl CapturedReport {
    /// Whether the last replay's report is still unread (another replay would overwrite it).
    pub fn is_unread(&self) -> bool {
        self.readback.is_armed()
    }

    /// `Ok` when a replay may be queued: no replay's report is unread;
    /// [`Error::ReportUnread`] otherwise, naming replay `replays_so_far - 1` as the unread one
    /// and `replays_so_far` as the refused one (replays of this graph counted from 0).
    pub fn can_replay(&self, replays_so_far: u64) -> Result<(), Error> {
        if self.is_unread() {
            return Err(Error::ReportUnread {
                unread: replays_so_far.saturating_sub(1),
                replay: replays_so_far,
            });
        }
        Ok(())
    }

    /// Tells the staging that one replay of the graph was just queued on `stream`: records its
    /// event there, after the replay's copies.
    ///
    /// # Safety
    ///
    /// A launch of the graph that captured this report must have just been queued on `stream`
    /// (a stream of this report's `Gpu`), after [`can_replay`](Self::can_replay) returned
    /// `Ok`; no other launch of that graph may be queued until this report is taken. The
    /// staging (this value) must outlive every replay.
    pub unsafe fn replayed(&mut self, stream: &Stream) -> Result<(), Error> {
        // SAFETY: the caller's promise: the replay was just queued on `stream`, and the next
        // one waits for this report to be read.
        unsafe { self.readback.rearm(self.gpu.context(), stream.as_raw()) }
    }

    /// Whether the last replay's report has landed (`false` when no replay is unread).
    pub fn is_ready(&self) -> Result<bool, Error> {
        Ok(self.is_unread() && self.readback.is_done(self.gpu.context())?)
    }

    /// The last replay's report if it has landed and was not taken yet; `None` otherwise.
    /// Never blocks.
    pub fn try_take(&mut self) -> Result<Option<DeviceStepReport>, Error> {
        if !self.is_ready()? {
            return Ok(None);
        }
        self.decode().map(Some)
    }

    /// The last replay's report, blocking until it has landed; `None` when there is no
    /// unread replay.
    pub fn wait(&mut self) -> Result<Option<DeviceStepReport>, Error> {
        if !self.is_unread() {
            return Ok(None);
        }
        self.readback.wait(self.gpu.context())?;
        self.decode().map(Some)
    }

    fn decode(&mut self) -> Result<DeviceStepReport, Error> {
        let (layout, capacity) = (self.layout, self.verify_capacity);
        let abandoned = core::mem::take(&mut self.abandoned_steps);
        let report = match self.readback.read(self.gpu.context())? {
            Some((wide, narrow)) => decode_words(layout, capacity, abandoned, wide, narrow)?,
            None => {
                return Err(Error::OutOfRange {
                    what: "captured device report read before its copies landed",
                    value: 0,
                    allowed: "a completed event",
                })
            }
        };
        self.pool.deliver(report.recorded());
        Ok(report)
    }
}

/// Decodes the landed words of one report.
fn decode_words(
    l: Layout,
    verify_capacity: usize,
    abandoned_steps: u64,
    wide: &[i64],
    narrow: &[i32],
) -> Result<DeviceStepReport, Error> {
    decode_at(wide, l.status_at())?;
    let [write_index, verify_num_valid, enable, num_valid_reqs] =
        [narrow[0], narrow[1], narrow[2], narrow[3]];
    // A negative (wrapped) index is an error naming it, never a clean report.
    let RingCount { stored, dropped } = RingCount::decode(write_index, l.ring_rows)?;
    let violations = decode_rows(wide, stored);
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
        requested_entries: u64::try_from(wide[l.requested_at()]).unwrap_or(0),
        verify_capacity,
        write_tokens,
        head_counters: pair(0),
        tail_counters: pair(4),
        violations,
        dropped,
        abandoned_steps,
    })
}

impl Drop for PendingDeviceReport {
    fn drop(&mut self) {
        // Unread: the staging goes back; the copies still queued into it run before any later
        // copy into it (one stream), and nothing reads it before its next event completes.
        if let Some(readback) = self.readback.take() {
            self.pool.give_back(readback);
        }
    }
}

/// Allocates pinned stagings on `stream` until `count` fit the report of a canary with a ring
/// of `ring_rows` rows and a write plan of `offsets` write offsets (before a capture, which
/// may not allocate).
pub(crate) fn reserve(
    stream: &Stream,
    ring_rows: usize,
    offsets: usize,
    count: usize,
) -> Result<(), Error> {
    let layout = Layout {
        ring_fields: ring_rows.saturating_mul(VIOLATION_FIELDS),
        ring_rows,
        offsets,
    };
    stream
        .readbacks()
        .reserve(stream.gpu(), layout.wide(), NARROW_WORDS, count)
}

/// Queues the readback of a finished step on `stream`: no host synchronisation.
pub(crate) fn queue<V: Capacity, W: Capacity, R: Capacity>(
    stream: &Stream,
    step: &FinishedStep<'_, Stream, V, W, R>,
) -> Result<PendingDeviceReport, Error> {
    let gpu = stream.gpu();
    let context = gpu.context();
    let raw = stream.as_raw();
    let layout = Layout {
        ring_fields: step.ring.rows.len(),
        ring_rows: step.ring.capacity().get(),
        offsets: step.write_plan.offsets.len(),
    };
    let pool = Arc::clone(stream.readbacks());
    let captured = stream.is_capturing()?;
    let mut readback = if captured {
        // A capture may not allocate: the staging was reserved before it began.
        pool.take_free(layout.wide(), NARROW_WORDS)
            .ok_or_else(|| Error::Malformed {
                detail: format!(
                    "a device step captured into a graph needs a report staging reserved \
                     before the capture (Canary::prepare_capture); none of {} i64 and \
                     {NARROW_WORDS} i32 words is free",
                    layout.wide()
                ),
            })?
    } else {
        pool.take(gpu, layout.wide(), NARROW_WORDS)?
    };
    readback.begin(gpu.function(Kernel::Readback)?, gpu.early_start());
    // Only the rows the step recorded travel (the write index, clamped to the ring).
    readback.copy_wide_counted(
        context,
        0,
        addr(&step.ring.rows),
        layout.ring_fields,
        box_ptr(&step.ring.write_index).addr(),
        VIOLATION_FIELDS,
        raw,
    )?;
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
    // The report consumes the status word: the next report holds the errors recorded after it.
    readback.copy_wide_consumed(
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
    readback.copy_wide(
        context,
        layout.requested_at(),
        box_ptr(&step.verify_plan.requested).addr(),
        1,
        raw,
    )?;
    if captured {
        readback.captured(context, raw)?;
    } else {
        readback.finish(context, raw)?;
    }
    Ok(PendingDeviceReport {
        pool,
        readback: Some(readback),
        layout,
        verify_capacity: step.verify_capacity,
        abandoned_steps: step.abandoned_steps,
        captured,
        gpu: gpu.clone(),
    })
}

super::pending::pending_readback!(PendingDeviceReport => DeviceStepReport);

#[cfg(test)]
mod tests {
    use super::DeviceStepReport;
    use crate::canary::HealthCounters;
    use crate::cuda::DeviceSweepReport;
    use crate::step::KvPair;

    fn report(enabled: bool, dropped: u64) -> DeviceStepReport {
        let counters = KvPair {
            k: HealthCounters::new(),
            v: HealthCounters::new(),
        };
        DeviceStepReport {
            bs: 3,
            verify_num_valid: if enabled { 12 } else { 8 },
            enabled,
            requested_entries: 12,
            verify_capacity: 8,
            write_tokens: 1,
            head_counters: counters.clone(),
            tail_counters: counters,
            violations: Vec::new(),
            dropped,
            abandoned_steps: 0,
        }
    }

    #[test]
    fn a_device_report_reads_as_the_cpu_reports_line() {
        assert_eq!(
            report(true, 0).to_string(),
            "bs 3, 12 verify entries (enabled), 1 token written; clean"
        );
        assert_eq!(
            report(true, 2).to_string(),
            "bs 3, 12 verify entries (enabled), 1 token written; 2 violations (2 dropped)"
        );
        let unverified = report(false, 0).to_string();
        assert!(
            unverified.starts_with(
                "bs 3, 12 verify entries (DISABLED: over capacity), 1 token written; UNVERIFIED: \
                 the plan needed 12 verify entries but the verify capacity is 8"
            ),
            "{unverified}"
        );
        let sweep = DeviceSweepReport {
            entries: 1,
            verify_capacity: 4,
            counters: KvPair {
                k: HealthCounters::new(),
                v: HealthCounters::new(),
            },
            violations: Vec::new(),
            dropped: 0,
        };
        assert_eq!(sweep.to_string(), "sweep of 1 entry; clean");
    }
}
