//! Sweeps on the device: [`Stream`] runs [`Canary::sweep`](crate::step::Canary::sweep), and the
//! sweep's report is read back asynchronously ([`PendingSweepReport`]), like a step's.
//!
//! The entries the engine hands in (its radix-cache walk, on the host) are copied into the
//! canary's device verify plan by stream-ordered copies from pageable memory
//! (`cuMemcpyHtoDAsync`: the driver stages the host words before each call returns, the only
//! host work), ordered after the stream's earlier launches and before its later ones; then the
//! ring clear, the `SWEEP_K_*` / `SWEEP_V_*` verify launches and the readback of the ring rows,
//! the write index, the four sweep counters and the status word are queued on the stream, and
//! `sweep` returns without waiting for the GPU. A sweep of table rows (`sweep_table_rows`)
//! queues the plan launch instead of the copies, so its entries are derived from the engine's
//! device table on the device; the report reads back how many it derived.

use super::device::stream::Stream;
use super::driver::memory::box_ptr;
use super::driver::memory::{set_i32_async, set_i64_async, upload_async};
use super::pending::{Landed, RingLayout, Staged};
use crate::canary::{HealthCounters, Violation};
use crate::capacity::Capacity;
use crate::memory::Device;
use crate::plan::{VerifyEntry, VerifyPlan};
use crate::step::{FinishedSweep, KvPair, Sweeps};
use crate::Error;

/// `i64` words of the sweep counters: (K, V) x (slot run, kernel run).
const COUNTER_WORDS: usize = 4;
/// `i64` words read back after the counters: the sweep plan's requested entries.
const EXTRA_WIDE: usize = COUNTER_WORDS + 1;

/// What a device sweep did, read back once its copies have landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSweepReport {
    /// Entries the engine handed to the sweep, or those the plan op derived from the table rows
    /// (`Canary::sweep_table_rows`, read back with the rest).
    pub entries: usize,
    /// The verify capacity of the canary's shape.
    pub verify_capacity: usize,
    /// The sweep launches' health counters after this sweep (cumulative; a K-only canary's V
    /// counters stay at 0).
    pub counters: KvPair<HealthCounters>,
    /// The sweep's violation rows, decoded (in no fixed order across entries: compare as
    /// sets).
    pub violations: Vec<Violation>,
    /// Rows that did not fit in the ring.
    pub dropped: u64,
}

/// One line, as the CPU's `SweepReport`: `sweep of 12 entries; clean` — or `2 violations (0
/// dropped)`, or `UNVERIFIED: ...`.
impl core::fmt::Display for DeviceSweepReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use crate::step::status::Counted;
        write!(
            f,
            "sweep of {}; ",
            Counted(self.entries as u64, "entry", "entries")
        )?;
        self.status().write_line(f, self.dropped)
    }
}

// Unverified when the sweep had more entries than the verify capacity.
crate::step::findings!(DeviceSweepReport, unverified: |report| {
    crate::step::sweep_gaps(report.entries, report.verify_capacity)
});

/// The report of a device sweep whose copies are queued on the canary's stream: take it once
/// with [`try_take`](Self::try_take) (never blocks) or [`wait`](Self::wait) (blocks). Its
/// violations are counted by the stream when taken
/// ([`Stream::delivered_violations`]), like a step report's.
#[must_use = "a pending sweep report holds the sweep's findings: take it (try_take or wait)"]
#[derive(Debug)]
pub struct PendingSweepReport {
    staged: Staged,
    layout: RingLayout,
    verify_capacity: usize,
}

static_assertions::assert_impl_all!(PendingSweepReport: Send);

impl PendingSweepReport {
    /// Whether the copies have landed, so that taking the report does not block.
    pub fn is_ready(&self) -> Result<bool, Error> {
        self.staged.is_ready()
    }

    /// The report if its copies have landed, else this pending report back; never blocks. A
    /// malformed-data error the stream's kernels recorded is the CPU op's [`Error`].
    pub fn try_take(mut self) -> Result<Landed<DeviceSweepReport, Self>, Error> {
        if !self.staged.is_ready()? {
            return Ok(Landed::Pending(self));
        }
        self.decode().map(Landed::Ready)
    }

    /// The report, blocking the host until its copies have landed.
    pub fn wait(mut self) -> Result<DeviceSweepReport, Error> {
        self.staged.wait()?;
        self.decode()
    }

    fn decode(&mut self) -> Result<DeviceSweepReport, Error> {
        let (layout, verify_capacity) = (self.layout, self.verify_capacity);
        let report = self.staged.decode(|wide, narrow| {
            let (violations, dropped) = layout.decode(wide, narrow)?;
            let c = &wide[layout.extra_at()..layout.extra_at() + EXTRA_WIDE];
            Ok(DeviceSweepReport {
                // Never negative: the sweep's plan was loaded or planned just before.
                entries: usize::try_from(c[COUNTER_WORDS]).unwrap_or(0),
                verify_capacity,
                counters: KvPair {
                    k: HealthCounters::from_parts(c[0], c[1]),
                    v: HealthCounters::from_parts(c[2], c[3]),
                },
                violations,
                dropped,
            })
        })?;
        self.staged.deliver(report.recorded());
        Ok(report)
    }
}

impl Sweeps for Stream {
    type SweepReport = PendingSweepReport;

    /// Stream-ordered copies of the entries' four columns and the two scalars (module docs).
    fn load_sweep<C: Capacity>(
        &self,
        plan: &mut VerifyPlan<C, Device>,
        entries: &[VerifyEntry],
    ) -> Result<bool, Error> {
        let raw = self.as_raw();
        if entries.len() > plan.capacity().get() {
            set_i32_async(&plan.enable, 0, raw)?;
            set_i32_async(&plan.num_valid, 0, raw)?;
            set_i64_async(&plan.requested, entries.len() as i64, raw)?;
            return Ok(false);
        }
        let num_valid = i32::try_from(entries.len()).map_err(|_| Error::SweepTooLong {
            entries: entries.len(),
            verify_capacity: plan.capacity().get(),
        })?;
        let column = |f: fn(&VerifyEntry) -> i64| entries.iter().map(f).collect::<Vec<_>>();
        upload_async(&plan.slot_indices, 0, &column(|e| e.slot), raw)?;
        upload_async(&plan.expected_tokens, 0, &column(|e| e.expected_token), raw)?;
        upload_async(
            &plan.expected_positions,
            0,
            &column(|e| e.expected_position),
            raw,
        )?;
        upload_async(&plan.prev_slot_indices, 0, &column(|e| e.prev_slot), raw)?;
        set_i32_async(&plan.num_valid, num_valid, raw)?;
        set_i32_async(&plan.enable, 1, raw)?;
        set_i64_async(&plan.requested, i64::from(num_valid), raw)?;
        Ok(true)
    }

    /// Disables the plan (`enable = 0`, `verify_num_valid = 0`): a plan launch that finds
    /// malformed rows writes nothing, and the sweep's launches must not check the last step's
    /// entries then.
    fn ready_planned_sweep<C: Capacity>(
        &self,
        plan: &mut VerifyPlan<C, Device>,
    ) -> Result<(), Error> {
        let raw = self.as_raw();
        set_i32_async(&plan.enable, 0, raw)?;
        set_i32_async(&plan.num_valid, 0, raw)?;
        set_i64_async(&plan.requested, -1, raw)
    }

    /// Queues the readback on the stream (no host synchronisation).
    fn sweep_report<R: Capacity>(
        &self,
        sweep: &FinishedSweep<'_, Self, R>,
    ) -> Result<PendingSweepReport, Error> {
        let context = self.gpu().context();
        let raw = self.as_raw();
        let counters = [&sweep.counters.k, &sweep.counters.v];
        let (staged, layout) =
            Staged::queue(self, sweep.ring, true, EXTRA_WIDE, 0, |readback, layout| {
                for (i, c) in counters.into_iter().enumerate() {
                    let at = layout.extra_at() + 2 * i;
                    let slot_run = box_ptr(&c.slot_run_counter).addr();
                    readback.copy_wide(context, at, slot_run, 1, raw)?;
                    let kernel_run = box_ptr(&c.kernel_run_counter).addr();
                    readback.copy_wide(context, at + 1, kernel_run, 1, raw)?;
                }
                let requested = box_ptr(sweep.requested).addr();
                readback.copy_wide(
                    context,
                    layout.extra_at() + COUNTER_WORDS,
                    requested,
                    1,
                    raw,
                )
            })?;
        Ok(PendingSweepReport {
            staged,
            layout,
            verify_capacity: sweep.verify_capacity,
        })
    }

    /// Unknown when the sweep returns: counted when the report is taken.
    fn sweep_recorded(_report: &PendingSweepReport) -> u64 {
        0
    }
}

super::pending::pending_readback!(PendingSweepReport => DeviceSweepReport);
