//! Sweeps: verify-only passes over idle cached slots between steps ([`Canary::sweep`]), and what
//! they report ([`SweepReport`]).
//!
//! SGLang's sweep re-verifies every slot its radix cache holds every `sweep_interval` steps:
//! KV of finished requests that stays cached (and that a later prefix hit would reuse) is
//! checked, chain and real-KV bytes, though no step attends to it. A sweep launches `SWEEP_K_*`
//! and `SWEEP_V_*` (`SWEEP_K_*` only for a [`KOnly`](super::KOnly) canary) over the **tail**
//! buffers ("sweep verifies the most recent canary state"), folding the group's real-KV sources
//! like the tail verify, token check off (spec §1).

use super::findings::findings;
use super::report::KvPair;
use super::stage::{verify_both, Verified};
use super::status::{Counted, PlanOverflow, Unverified};
use super::{Canary, GroupKind, PlanInputsOf};
use crate::backend::{Backend, Cpu, PlanWith};
use crate::canary::{HealthCounters, Violation, ViolationRing};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::cpu::VerifySummary;
use crate::error::Error;
use crate::memory::Memory;
use crate::plan::{VerifyEntry, VerifyPlan};
use core::fmt;

/// What one sweep did: the entries it was handed, one summary per verify launch, the sweep
/// counters and the violations it recorded.
///
/// Not checked is not clean: a sweep handed more entries than the verify capacity checks
/// nothing ([`unverified`](Self::unverified) names both numbers) and is never clean.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepReport {
    /// Entries the engine handed to the sweep.
    pub entries: usize,
    /// The verify capacity of the canary's shape (the most entries one sweep checks).
    pub verify_capacity: usize,
    /// The sweep's verify launches (K, V; a [`KOnly`](super::KOnly) canary's V summary is the
    /// default: no launch).
    pub verify: KvPair<VerifySummary>,
    /// The health counters of the sweep launches after this sweep (cumulative over sweeps).
    pub counters: KvPair<HealthCounters>,
    /// The sweep's violation rows, decoded, in recording order (K launch, then V).
    pub violations: Vec<Violation>,
    /// Rows that did not fit in the ring.
    pub dropped: u64,
}

// Unverified when handed more entries than the verify capacity.
findings!(SweepReport, unverified: |report| sweep_gaps(report.entries, report.verify_capacity));

impl SweepReport {
    /// Canary slots checked over the sweep's verify launches (slot-0 entries excluded).
    pub fn entries_checked(&self) -> u64 {
        self.verify.iter().map(|s| s.checked as u64).sum()
    }
}

/// One line: `sweep of 12 entries: 24 slots checked; clean` — or `2 violations (0 dropped)`, or
/// `UNVERIFIED: ...`.
impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sweep of {}: {} checked; ",
            Counted(self.entries as u64, "entry", "entries"),
            Counted(self.entries_checked(), "slot", "slots")
        )?;
        self.status().write_line(f, self.dropped)
    }
}

/// The gaps of a sweep of `entries` entries with a verify capacity of `capacity`.
pub(crate) fn sweep_gaps(entries: usize, capacity: usize) -> Unverified {
    Unverified {
        plan_overflow: (entries > capacity).then_some(PlanOverflow {
            needed: Some(entries as u64),
            capacity,
        }),
        abandoned_steps: 0,
    }
}

/// A backend that runs sweeps: loads the engine's entries into a verify plan and reads back
/// what the sweep launches did.
///
/// The CPU's sweep report is a [`SweepReport`], complete when [`Canary::sweep`] returns.
pub trait Sweeps: Backend + Sized {
    /// What [`Canary::sweep`] returns.
    type SweepReport;

    /// Loads `entries` into `plan` (`verify_num_valid = entries.len()`, `enable = 1`) and
    /// returns `true`; with more entries than the plan's capacity it loads none, disables the
    /// plan (`enable = 0`, so the sweep launches check nothing) and returns `false`. Either way
    /// the plan's requested word is `entries.len()` (what the report says was asked for).
    fn load_sweep<C: Capacity>(
        &self,
        plan: &mut VerifyPlan<C, Self::Memory>,
        entries: &[VerifyEntry],
    ) -> Result<bool, Error>;

    /// Readies `plan` for a sweep whose entries the backend's plan op derives
    /// ([`Canary::sweep_table_rows`]): a backend whose plan op reports malformed rows only
    /// later (a device plan writes nothing then, and its error comes with the report) disables
    /// the plan first, so that the sweep's launches never check the last step's stale entries.
    /// The CPU's plan op returns its error before anything runs: nothing to do.
    fn ready_planned_sweep<C: Capacity>(
        &self,
        plan: &mut VerifyPlan<C, Self::Memory>,
    ) -> Result<(), Error> {
        let _ = plan;
        Ok(())
    }

    /// The report of the sweep that just ran.
    fn sweep_report<R: Capacity>(
        &self,
        sweep: &FinishedSweep<'_, Self, R>,
    ) -> Result<Self::SweepReport, Error>;

    /// Violations `report` holds, as far as known when the sweep returns (0 for a report that
    /// is still being read back: counted when taken, [`Reports::delivered_violations`]).
    ///
    /// [`Reports::delivered_violations`]: super::Reports::delivered_violations
    fn sweep_recorded(report: &Self::SweepReport) -> u64;
}

/// Everything a sweep did, handed to [`Sweeps::sweep_report`] when its launches have run.
#[non_exhaustive]
pub struct FinishedSweep<'c, B: Backend, R: Capacity> {
    /// The sweep plan's requested word: the entries the engine handed in, or those the plan op
    /// derived from the table rows ([`Canary::sweep_table_rows`]), before the capacity clamp.
    pub requested: &'c <B::Memory as Memory>::Scalar<i64>,
    /// The shape's verify capacity.
    pub verify_capacity: usize,
    /// The sweep's verify launches' returns (K, V).
    pub verify: KvPair<B::VerifyDone>,
    /// The sweep launches' counters (cumulative).
    pub counters: &'c KvPair<HealthCounters<B::Memory>>,
    /// The ring holding the sweep's rows.
    pub ring: &'c ViolationRing<R, B::Memory>,
}

impl Sweeps for Cpu {
    type SweepReport = SweepReport;

    fn load_sweep<C: Capacity>(
        &self,
        plan: &mut VerifyPlan<C>,
        entries: &[VerifyEntry],
    ) -> Result<bool, Error> {
        if entries.len() > plan.capacity().get() {
            let parts = plan.parts_mut();
            (*parts.num_valid, *parts.enable) = (0, 0);
            *parts.requested = i64::try_from(entries.len()).unwrap_or(i64::MAX);
            return Ok(false);
        }
        plan.set_entries(entries)?;
        Ok(true)
    }

    fn sweep_report<R: Capacity>(
        &self,
        sweep: &FinishedSweep<'_, Cpu, R>,
    ) -> Result<SweepReport, Error> {
        Ok(SweepReport {
            // Never negative here: a sweep's plan was loaded or planned just before.
            entries: usize::try_from(*sweep.requested).unwrap_or(0),
            verify_capacity: sweep.verify_capacity,
            verify: sweep.verify,
            counters: sweep.counters.clone(),
            violations: sweep.ring.violations().collect(),
            // A wrapped (negative) write index is an error naming it, never a clean report.
            dropped: sweep.ring.count()?.dropped,
        })
    }

    fn sweep_recorded(report: &SweepReport) -> u64 {
        report.recorded()
    }
}

impl<V, W, E, S, R, G, B> Canary<V, W, E, S, R, G, B>
where
    V: SameVerifyCapacity<V>,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Sweeps,
{
    /// Sweeps idle cached slots between steps: re-verifies `entries` (the radix cache's slots,
    /// each with its position and predecessor slot, as SGLang's walker emits them: a
    /// [`SweepEntries`](super::SweepEntries) the engine filled while walking) against the
    /// tail buffers, folding `real_kv` (the group's sources, as for
    /// [`Step::verify_tail`](super::Step::verify_tail); the K half's alone for a
    /// [`KOnly`](super::KOnly) canary), token check off. Tags `SWEEP_K_*` and `SWEEP_V_*`.
    ///
    /// The sweep runs in the canary's own verify plan (the step's plan is free between steps;
    /// [`plans`](Canary::plans) then shows the sweep's) and ring, which it empties first; the
    /// sweep counters are its own ([`counters`](Canary::counters) of a sweep tag). A sweep
    /// cannot start while a step is in flight: the step borrows the canary mutably, so the call
    /// does not compile. Rows a dropped step left in the ring are emptied with it (that step is
    /// still counted as abandoned by the next report).
    ///
    /// More entries than the verify capacity check nothing: the report is unverified, naming
    /// both numbers. Every active source of `real_kv` must cover all the canary's slots;
    /// otherwise [`Error::RealKvSlotOutOfRange`] is returned before anything runs.
    pub fn sweep(
        &mut self,
        entries: &[VerifyEntry],
        real_kv: G::Sources<B::RealKv<'_>>,
    ) -> Result<B::SweepReport, Error> {
        let settings = self.checked_settings(G::SWEEP, real_kv)?;
        self.backend.load_sweep(&mut self.verify_plan, entries)?;
        self.finish_sweep(&settings)
    }

    /// Sweeps the cached prefixes of request-table rows, their entries derived where the table
    /// lives: `rows` are plan inputs (the step's [`PlanInputs`](crate::PlanInputs) type, or the
    /// device's `cuda::PlanInputs` over a `DeviceReqToToken` and a `DeviceBatch`) whose batch
    /// names the rows to sweep (`req_pool_indices`) and their cached tokens (`prefix_lens`);
    /// the backend's plan op turns them into the sweep's entries, so a CUDA engine sweeps its
    /// device table with no host mirror of it and no copy of it to the host. Then as
    /// [`sweep`](Self::sweep): the ring emptied, `SWEEP_*` launches over the tail buffers,
    /// folding `real_kv`, token check off.
    ///
    /// The entries are the plan op's verify entries (spec §3.2): row `r`'s first
    /// `prefix_lens[r]` slots of `req_to_token[req_pool_indices[r]]`, each chained to the slot
    /// before it, position `p` at index `p` — what
    /// [`SweepEntries::push_table_row`](super::SweepEntries::push_table_row) builds on the host.
    /// For an SWA canary the plan's window applies (the last `window` cached tokens of a row,
    /// the ones the SWA pool still holds) and the LUT translates every slot. Padding rows
    /// (`req_pool_indices[r] = 0`) sweep nothing; `extend_seq_lens` is not used (the plan's
    /// write metadata is overwritten by the next step's plan); an expected-token pool is
    /// ignored (token check off). A batch holds at most the write request capacity of rows:
    /// sweep more rows in several calls.
    ///
    /// More entries than the verify capacity check nothing: the report is unverified, naming
    /// both numbers. Errors as the plan op's: on the CPU before anything runs (nothing
    /// modified, the sweep not counted); on a device stream with the report (the plan disabled
    /// first, so that nothing stale is checked), as for a step. As [`sweep`](Self::sweep), the
    /// sources of `real_kv` must cover all the canary's slots.
    ///
    /// ```
    /// use kv_canary::step::{Canary, TailKv};
    /// use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
    ///
    /// let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
    /// // Row 1 holds the request's slots 8, 9, 10; it prefills them.
    /// let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
    /// let mut inputs = canary.write_inputs();
    /// let p = inputs.parts_mut();
    /// p.input_ids[..3].copy_from_slice(&[7, 8, 9]);
    /// p.positions[..3].copy_from_slice(&[0, 1, 2]);
    /// p.out_cache_loc[..3].copy_from_slice(&[8, 9, 10]);
    /// let batch = Batch::from_columns([1], [0], [3]);
    /// let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
    /// step.write(&inputs)?.verify_tail(TailKv::NONE)?;
    ///
    /// // The request finished, its 3 tokens stay cached: sweep its row (no writes).
    /// let idle = Batch::from_columns([1], [3], [0]);
    /// let sweep = canary.sweep_table_rows(&PlanInputs::full(&idle, &table), TailKv::NONE)?;
    /// assert!(sweep.is_clean(), "{sweep}");
    /// assert_eq!((sweep.entries, sweep.entries_checked()), (3, 2 * 3));
    ///
    /// // A corrupted tail record of slot 9 is found (its position and slot 10's chain).
    /// let tag = kv_canary::LaunchTag::TailKFull;
    /// let mut slot = canary.buffer(tag).unwrap().slot(9).unwrap();
    /// slot.position = 5;
    /// canary.buffer_mut(tag).unwrap().set_slot(9, slot)?;
    /// let sweep = canary.sweep_table_rows(&PlanInputs::full(&idle, &table), TailKv::NONE)?;
    /// assert_eq!(sweep.violations.iter().map(|v| v.slot).collect::<Vec<_>>(), [9, 10]);
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn sweep_table_rows<I>(
        &mut self,
        rows: &I,
        real_kv: G::Sources<B::RealKv<'_>>,
    ) -> Result<B::SweepReport, Error>
    where
        I: PlanInputsOf<G::Pool> + ?Sized,
        B: PlanWith<I, V, W, E>,
        W: SameWriteReqCapacity<W>,
    {
        let settings = self.checked_settings(G::SWEEP, real_kv)?;
        self.backend.ready_planned_sweep(&mut self.verify_plan)?;
        self.backend.plan(
            &self.shape,
            rows,
            &mut self.verify_plan,
            &mut self.write_plan,
        )?;
        self.finish_sweep(&settings)
    }

    /// The rest of a sweep whose plan is loaded: the ring emptied, the verify launches, the
    /// report.
    fn finish_sweep(
        &mut self,
        settings: &KvPair<B::Settings<'_>>,
    ) -> Result<B::SweepReport, Error> {
        self.backend.clear_ring(&mut self.ring)?;
        let verify = verify_both(self, Verified::Sweep, settings, false)?;
        let report = self.backend.sweep_report(&FinishedSweep {
            requested: &self.verify_plan.requested,
            verify_capacity: self.shape.verify_capacity().get(),
            verify,
            counters: &self.sweep_counters,
            ring: &self.ring,
        })?;
        self.sweeps += 1;
        self.violations += B::sweep_recorded(&report);
        Ok(report)
    }

    /// Sweeps run so far.
    pub fn sweeps(&self) -> u64 {
        self.sweeps
    }
}
