//! [`Step`]: one forward step in progress, typed by its stage, so that its launches can only run
//! in order: `plan` -> [`verify_head`](Step::verify_head) -> [`write`](Step::write) -> (forward
//! pass) -> [`verify_tail`](Step::verify_tail).

use super::head_findings::{HeadVerifyDone, ReadsHeadFindings};
use super::{Canary, GroupKind, Halves, KvPair, StepReport};
use crate::backend::{
    Backend, BufferPairMut, CountersPairMut, Cpu, EndWrites, EndsDone, WritesFrom,
};
use crate::canary::{
    CanaryBuffer, HealthCounters, TokenCheck, TokenCheckOff, TokenCheckOn, Violation, ViolationRing,
};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::error::Error;
use crate::input::{WriteInputAssert, WriteInputSource};
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use core::fmt;

mod sealed {
    pub trait Sealed {}
}

/// Stage of a step whose plan is made: next, [`Step::verify_head`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned;

/// Stage of a step whose head buffers are verified: next, [`Step::write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadVerified;

/// Stage of a step whose tokens are stamped into the head buffers: next, the engine's forward
/// pass, then [`Step::verify_tail`], which stamps the same inputs into the tail buffers.
///
/// `I` is what the step writes from: the owned [`WriteInputs`](crate::WriteInputs) in the
/// backend's memory, or (on the CPU) a [`WriteInputsView`](crate::WriteInputsView) of the
/// engine's own slices.
pub struct Written<'w, I: WriteInputSource + ?Sized> {
    inputs: &'w I,
}

impl<I: WriteInputSource + ?Sized> fmt::Debug for Written<'_, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Written")
            .field("write_entry_capacity", &self.inputs.entries())
            .field("input_assert", &<I::Assert as WriteInputAssert>::ENABLED)
            .finish()
    }
}

impl sealed::Sealed for Planned {}
impl sealed::Sealed for HeadVerified {}
impl<I: WriteInputSource + ?Sized> sealed::Sealed for Written<'_, I> {}

/// A stage of a [`Step`] ([`Planned`], [`HeadVerified`], [`Written`]): what a step cancelled
/// there ([`Step::cancel`]) has done.
pub trait StepStage: sealed::Sealed {
    /// The stage's name, as [`Cancelled::stage`] gives it.
    const NAME: &'static str;
    /// Whether the step's `write` ran (its head writes queued, or deferred to the tail's).
    const WRITTEN: bool;
}

impl StepStage for Planned {
    const NAME: &'static str = "planned";
    const WRITTEN: bool = false;
}

impl StepStage for HeadVerified {
    const NAME: &'static str = "head verified";
    const WRITTEN: bool = false;
}

impl<I: WriteInputSource + ?Sized> StepStage for Written<'_, I> {
    const NAME: &'static str = "written";
    const WRITTEN: bool = true;
}

/// What a step ended by [`Step::cancel`] left behind: which stage it reached, whether its
/// tokens are in the head buffers, and what the next report will count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// The stage the step was cancelled at ([`StepStage::NAME`]: `planned`, `head verified`,
    /// `written`).
    pub stage: &'static str,
    /// Whether the step's tokens were stamped into the head buffers: its `write` ran and its
    /// head writes were not deferred to the tail launch (the CPU; a CUDA stream with
    /// `KernelTuning::defer_head_writes` off). The tail buffers never hold them.
    pub head_stamped: bool,
    /// Steps abandoned since the last report, this one included: the next report's
    /// [`Unverified::abandoned_steps`](super::Unverified::abandoned_steps).
    pub abandoned_steps: u64,
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step cancelled at stage {} (head buffers {}, tail buffers not stamped); {} step(s) \
             abandoned since the last report",
            self.stage,
            if self.head_stamped {
                "stamped"
            } else {
                "not stamped"
            },
            self.abandoned_steps
        )
    }
}

/// The stage a step must be at to verify its head buffers: [`Planned`].
#[diagnostic::on_unimplemented(
    message = "kv-canary: this step cannot verify its head buffers now: it is at stage `{Self}`, and the head verify runs once, right after `plan`",
    label = "the head verify belongs right after `canary.plan(..)`",
    note = "a step runs `canary.plan(..)` -> `.verify_head()` -> `.write(..)` -> forward pass -> `.verify_tail(..)`"
)]
pub trait ReadyForHeadVerify: sealed::Sealed {}
impl ReadyForHeadVerify for Planned {}

/// The stage a step must be at to write: [`HeadVerified`].
#[diagnostic::on_unimplemented(
    message = "kv-canary: this step cannot write yet: it is at stage `{Self}`, and a step writes only after its head verify",
    label = "call `.verify_head()` before `.write(..)`",
    note = "a step runs `canary.plan(..)` -> `.verify_head()` -> `.write(..)` -> forward pass -> `.verify_tail(..)`"
)]
pub trait ReadyToWrite: sealed::Sealed {}
impl ReadyToWrite for HeadVerified {}

/// The stage a step must be at to verify its tail buffers: [`Written`], which also holds the
/// write inputs the tail launches stamp again.
#[diagnostic::on_unimplemented(
    message = "kv-canary: this step cannot verify its tail buffers now: it is at stage `{Self}`, and the tail verify runs after `.write(..)` and the forward pass",
    label = "the tail launches stamp the inputs given to `.write(..)`, so they need it first",
    note = "a step runs `canary.plan(..)` -> `.verify_head()` -> `.write(..)` -> forward pass -> `.verify_tail(..)`"
)]
pub trait ReadyForTailVerify<E: Capacity, B: Backend>: sealed::Sealed {
    /// Stamps the write inputs of this stage into one canary buffer (the step API's writes).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments, reason = "the write op's own arguments")]
    fn stamp<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        backend: &B,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W, B::Memory>,
        settings: &B::Settings<'_>,
        buffer: &mut CanaryBuffer<S, B::Memory>,
        ring: &mut ViolationRing<R, B::Memory>,
        counters: &mut HealthCounters<B::Memory>,
    ) -> Result<B::WriteDone, Error>;

    /// Stamps the write inputs of this stage into a K and a V buffer (see
    /// [`Writes::write_pair`](crate::backend::Writes::write_pair)).
    #[doc(hidden)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the write op's own arguments, twice"
    )]
    fn stamp_pair<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        backend: &B,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W, B::Memory>,
        settings: (&B::Settings<'_>, &B::Settings<'_>),
        buffers: BufferPairMut<'_, S, B::Memory>,
        ring: &mut ViolationRing<R, B::Memory>,
        counters: CountersPairMut<'_, B::Memory>,
    ) -> Result<(B::WriteDone, B::WriteDone), Error>;

    /// Stamps the write inputs of this stage into both ends' buffers at once
    /// ([`Writes::write_ends`](crate::backend::Writes::write_ends)); `None`, nothing done, when
    /// the backend has no such launch.
    #[doc(hidden)]
    fn stamp_ends<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        backend: &B,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W, B::Memory>,
        tail: EndWrites<'_, '_, S, B>,
        head: EndWrites<'_, '_, S, B>,
        ring: &mut ViolationRing<R, B::Memory>,
    ) -> Result<Option<EndsDone<B::WriteDone>>, Error>;
}

impl<E, I, B> ReadyForTailVerify<E, B> for Written<'_, I>
where
    I: WriteInputSource + ?Sized,
    E: SameWriteEntryCapacity<I::Capacity>,
    B: WritesFrom<I>,
{
    fn stamp<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        backend: &B,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W, B::Memory>,
        settings: &B::Settings<'_>,
        buffer: &mut CanaryBuffer<S, B::Memory>,
        ring: &mut ViolationRing<R, B::Memory>,
        counters: &mut HealthCounters<B::Memory>,
    ) -> Result<B::WriteDone, Error> {
        backend.write_from(shape, plan, self.inputs, settings, buffer, ring, counters)
    }

    fn stamp_pair<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        backend: &B,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W, B::Memory>,
        settings: (&B::Settings<'_>, &B::Settings<'_>),
        buffers: BufferPairMut<'_, S, B::Memory>,
        ring: &mut ViolationRing<R, B::Memory>,
        counters: CountersPairMut<'_, B::Memory>,
    ) -> Result<(B::WriteDone, B::WriteDone), Error> {
        backend.write_from_pair(shape, plan, self.inputs, settings, buffers, ring, counters)
    }

    fn stamp_ends<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        backend: &B,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W, B::Memory>,
        tail: EndWrites<'_, '_, S, B>,
        head: EndWrites<'_, '_, S, B>,
        ring: &mut ViolationRing<R, B::Memory>,
    ) -> Result<Option<EndsDone<B::WriteDone>>, Error> {
        backend.write_from_ends(shape, plan, self.inputs, tail, head, ring)
    }
}

/// A backend whose steps end in a report: reads back what the launches of a step did.
///
/// The CPU's report is a [`StepReport`], complete when the tail verify returns.
pub trait Reports: Backend + Sized {
    /// What [`Step::verify_tail`] returns.
    type Report;

    /// The report of the step that just ended.
    fn report<V: Capacity, W: Capacity, R: Capacity>(
        &self,
        step: &FinishedStep<'_, Self, V, W, R>,
    ) -> Result<Self::Report, Error>;

    /// Violations `report` holds, stored or dropped (what [`Canary::total_violations`] adds up),
    /// as far as known when the step ends (0 for a report that is still being read back).
    fn recorded(report: &Self::Report) -> u64;

    /// Violations of reports that were not known when their steps ended and have been
    /// delivered since (a CUDA stream's reports, counted when taken); 0 for the CPU.
    fn delivered_violations(&self) -> u64 {
        0
    }
}

/// Everything a step did, handed to [`Reports::report`] when its tail launches have run.
#[non_exhaustive]
pub struct FinishedStep<'c, B: Backend, V: Capacity, W: Capacity, R: Capacity> {
    /// What the plan launch returned.
    pub plan: B::PlanDone,
    /// The step's verify plan.
    pub verify_plan: &'c VerifyPlan<V, B::Memory>,
    /// The step's write plan.
    pub write_plan: &'c WritePlan<W, B::Memory>,
    /// The shape's verify capacity.
    pub verify_capacity: usize,
    /// The head verify launches' returns (K, V).
    pub head_verify: KvPair<B::VerifyDone>,
    /// The head write launches' returns.
    pub head_write: KvPair<B::WriteDone>,
    /// The tail verify launches' returns.
    pub tail_verify: KvPair<B::VerifyDone>,
    /// The tail write launches' returns.
    pub tail_write: KvPair<B::WriteDone>,
    /// The head launches' counters (cumulative).
    pub head_counters: &'c KvPair<HealthCounters<B::Memory>>,
    /// The tail launches' counters (cumulative).
    pub tail_counters: &'c KvPair<HealthCounters<B::Memory>>,
    /// The ring holding this step's rows.
    pub ring: &'c ViolationRing<R, B::Memory>,
    /// Steps abandoned before this one since the last report.
    pub abandoned_steps: u64,
}

impl Reports for Cpu {
    type Report = StepReport;

    fn report<V: Capacity, W: Capacity, R: Capacity>(
        &self,
        step: &FinishedStep<'_, Cpu, V, W, R>,
    ) -> Result<StepReport, Error> {
        // A negative (wrapped) write index is an error naming it, never a clean report.
        let count = step.ring.count()?;
        Ok(StepReport {
            plan: step.plan,
            verify_capacity: step.verify_capacity,
            head_verify: step.head_verify,
            head_write: step.head_write,
            tail_verify: step.tail_verify,
            tail_write: step.tail_write,
            head_counters: step.head_counters.clone(),
            tail_counters: step.tail_counters.clone(),
            violations: step.ring.violations().collect(),
            dropped: count.dropped,
            abandoned_steps: step.abandoned_steps,
        })
    }

    fn recorded(report: &StepReport) -> u64 {
        report.recorded()
    }
}

// A host canary may be built on one thread and driven from another, or read through `&` from
// several (docs/reliability.md, "Concurrency").
static_assertions::assert_impl_all!(
    Canary<
        crate::capacity::Cap<8>,
        crate::capacity::Cap<4>,
        crate::capacity::Cap<16>,
        crate::capacity::Cap<64>,
        crate::capacity::Cap<16>,
        crate::input::Full,
        Cpu,
    >: Send,
    Sync
);

/// What the launches of a step have done so far.
struct Progress<B: Backend> {
    plan: B::PlanDone,
    /// Whether the plan had an expected-token pool (verify then checks tokens).
    token_check: bool,
    head_verify: KvPair<B::VerifyDone>,
    head_write: KvPair<B::WriteDone>,
    /// The plan and the head verify ran as one launch (nothing of this crate's between the
    /// plan and the next launch).
    fused_plan: bool,
    /// The head writes wait for the tail writes' launch ([`Backend::defers_head_writes`]).
    head_write_deferred: bool,
}

/// One forward step in progress on a [`Canary`], at stage `St` ([`Planned`], [`HeadVerified`],
/// [`Written`]).
///
/// Each transition consumes the step and returns it at the next stage, so a launch out of order
/// does not compile (`ui-tests/fail/step_out_of_order.rs`); the step mutably borrows the canary,
/// so a second step cannot start before this one ends. The engine's forward pass runs between
/// [`write`](Step::write) and [`verify_tail`](Step::verify_tail): the step borrows neither the
/// KV bytes nor the plan inputs, only the write inputs.
///
/// An error ends the step. The launch that failed modified nothing; launches before it stand, as
/// they would on a device. A step dropped before [`verify_tail`](Step::verify_tail) leaves its
/// rows in the ring ([`Canary::ring`]) until the next `plan`, which counts it as abandoned.
///
/// An abandoned step's tokens are not in the canary: its tail records were never stamped, and
/// on a CUDA stream with `KernelTuning::defer_head_writes` (the default) neither were its head
/// records (they go with the tail writes, in `verify_tail`). An engine that stops a step before
/// `verify_tail` (a head finding, an error) treats every request of the batch as not having
/// written those tokens: it runs them again in a later step, or frees their slots; committing
/// them makes the next step that verifies them report violations.
#[must_use = "a step checks nothing until it runs `.verify_head()`, `.write(..)` and `.verify_tail(..)`"]
pub struct Step<'c, St, C: StepCanary> {
    canary: &'c mut C,
    stage: St,
    progress: Progress<C::Backend>,
}

/// The canary a [`Step`] runs on: names its backend.
pub trait StepCanary: sealed::Sealed {
    /// The backend of the canary.
    type Backend: Backend;
}

impl<V, W, E, S, R, G, B> sealed::Sealed for Canary<V, W, E, S, R, G, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
}

impl<V, W, E, S, R, G, B> StepCanary for Canary<V, W, E, S, R, G, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    type Backend = B;
}

/// A canary of capacities `V, W, E, S, R`, group `G` and backend `B`.
type CanaryOf<V, W, E, S, R, G, B> = Canary<V, W, E, S, R, G, B>;

impl<'c, V, W, E, S, R, G, B> Step<'c, Planned, CanaryOf<V, W, E, S, R, G, B>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    /// Starts a step (called by [`Canary::plan`]).
    pub(super) fn planned(
        canary: &'c mut CanaryOf<V, W, E, S, R, G, B>,
        plan: B::PlanDone,
        token_check: bool,
    ) -> Self {
        Step {
            canary,
            stage: Planned,
            progress: Progress {
                plan,
                token_check,
                head_verify: KvPair::default(),
                head_write: KvPair::default(),
                fused_plan: false,
                head_write_deferred: false,
            },
        }
    }
}

impl<'c, V, W, E, S, R, G, B> Step<'c, HeadVerified, CanaryOf<V, W, E, S, R, G, B>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    /// A step whose plan and head verify ran as one call (called by
    /// [`Canary::plan_and_verify_head`]; never a token check: its inputs had no pool).
    pub(super) fn head_verified(
        canary: &'c mut CanaryOf<V, W, E, S, R, G, B>,
        plan: B::PlanDone,
        head_verify: KvPair<B::VerifyDone>,
    ) -> Self {
        Step {
            canary,
            stage: HeadVerified,
            progress: Progress {
                plan,
                token_check: false,
                head_verify,
                head_write: KvPair::default(),
                fused_plan: true,
                head_write_deferred: false,
            },
        }
    }
}

impl<'c, St, V, W, E, S, R, G, B> Step<'c, St, CanaryOf<V, W, E, S, R, G, B>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    /// The backend the step's launches run on (a device canary's stream): for the engine's
    /// work between [`write`](Step::write) and [`verify_tail`](Step::verify_tail), e.g. its
    /// forward pass queued on the same stream, or `wait_for` an event of its compute stream so
    /// that the tail verify runs after it.
    pub fn backend(&self) -> &B {
        &self.canary.backend
    }

    /// Ends the step here, before its tail verify: for an engine that stops a step (a head
    /// finding, its forward pass failed). Nothing is queued. The step counts as abandoned
    /// now, once (the next report's `abandoned_steps`; the next `plan` does not count it
    /// again), and the rows its launches recorded stay in the ring until that `plan`.
    ///
    /// What it returns says what the step stamped: its tokens are never in the tail buffers,
    /// and in the head buffers only when [`Cancelled::head_stamped`]. Treat every request of
    /// the batch as not having written those tokens (run them again, or free their slots), as
    /// for a step dropped before [`verify_tail`](Step::verify_tail), which this makes explicit.
    pub fn cancel(self) -> Cancelled
    where
        St: StepStage,
    {
        let Step {
            canary: c,
            progress,
            ..
        } = self;
        if core::mem::take(&mut c.in_flight) {
            c.abandoned += 1;
        }
        Cancelled {
            stage: St::NAME,
            head_stamped: St::WRITTEN && !progress.head_write_deferred,
            abandoned_steps: c.abandoned,
        }
    }
}

impl<'c, St, V, W, E, S, R, G> Step<'c, St, Canary<V, W, E, S, R, G, Cpu>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// The violations recorded so far in this step, decoded. After
    /// [`verify_head`](Step::verify_head) these are the head verify's findings: an engine can
    /// stop before its forward pass reads a corrupted KV cache.
    pub fn violations(&self) -> impl ExactSizeIterator<Item = Violation> + '_ {
        self.canary.ring.violations()
    }
}

impl<'c, V, W, E, S, R, G, B> Step<'c, HeadVerified, CanaryOf<V, W, E, S, R, G, B>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: ReadsHeadFindings,
{
    /// What the head verify found (its ring rows, their count, the plan overflow), for an
    /// engine that chooses to wait for them before its forward pass: on the CPU the
    /// [`HeadFindings`](super::HeadFindings) at once; on a CUDA stream a queued readback
    /// (`cuda::PendingHeadFindings`), readable without blocking
    /// once its copies have landed.
    ///
    /// Called at this stage, right after the head verify, so the findings hold its rows only;
    /// the step may go on to [`write`](Step::write) before a device readback is taken. A peek:
    /// the step's final report still holds these rows, once.
    pub fn head_findings(&self) -> Result<B::HeadFindings, Error> {
        let c = &*self.canary;
        c.backend.head_findings(&HeadVerifyDone {
            plan: self.progress.plan,
            verify_plan: &c.verify_plan,
            verify_capacity: c.shape.verify_capacity().get(),
            ring: &c.ring,
        })
    }
}

impl<'c, St, V, W, E, S, R, G, B> Step<'c, St, CanaryOf<V, W, E, S, R, G, B>>
where
    V: SameVerifyCapacity<V>,
    W: SameWriteReqCapacity<W>,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    /// What the plan op produced for this step.
    pub fn plan_summary(&self) -> B::PlanDone {
        self.progress.plan
    }

    /// Checks every planned prefix slot against the head buffers (K, then V): tags `HEAD_K_*` and
    /// `HEAD_V_*`, no real-KV fold. Tokens are checked when the plan had an expected-token pool.
    #[allow(
        clippy::type_complexity,
        reason = "the next stage's type spells out the canary's seven parameters"
    )]
    pub fn verify_head(self) -> Result<Step<'c, HeadVerified, CanaryOf<V, W, E, S, R, G, B>>, Error>
    where
        St: ReadyForHeadVerify,
    {
        let Step {
            canary: c,
            mut progress,
            ..
        } = self;
        let settings = G::HEAD.map(|tag| c.settings(tag, B::no_real_kv()));
        progress.head_verify = verify_both(c, Verified::Head, &settings, progress.token_check)?;
        Ok(Step {
            canary: c,
            stage: HeadVerified,
            progress,
        })
    }

    /// Stamps this step's tokens into the head buffers (K, then V): tags `HEAD_K_*` and
    /// `HEAD_V_*`, no real-KV fold. The step keeps `inputs` to stamp them into the tail buffers
    /// after the forward pass.
    ///
    /// `inputs` must be allocated from the canary's shape ([`Canary::write_inputs`]), or be a
    /// [`WriteInputsView`](crate::WriteInputsView) of its write-entry capacity over the engine's
    /// own slices (CPU canaries): the write-entry capacities are compared as in
    /// [`cpu::write`](crate::cpu::write).
    #[allow(
        clippy::type_complexity,
        reason = "the next stage's type spells out the canary's seven parameters"
    )]
    pub fn write<'w, I>(
        self,
        inputs: &'w I,
    ) -> Result<Step<'c, Written<'w, I>, CanaryOf<V, W, E, S, R, G, B>>, Error>
    where
        St: ReadyToWrite,
        I: WriteInputSource + ?Sized,
        E: SameWriteEntryCapacity<I::Capacity>,
        B: WritesFrom<I>,
    {
        self.write_head(inputs, false)
    }

    /// [`verify_head`](Self::verify_head) and then [`write`](Self::write) of `inputs`, queued
    /// back to back, for an engine whose write inputs are ready before its head verify: the
    /// same launches, rows, counters and report. On a CUDA stream the head writes then do the
    /// reading half of their decode-sized requests while the head verify still runs, as the
    /// tail writes do behind the tail verify; after a separate `verify_head` they cannot,
    /// since the engine may queue work between the two calls that writes the inputs. No
    /// [`head_findings`](Step::head_findings) between the two.
    #[allow(
        clippy::type_complexity,
        reason = "the next stage's type spells out the canary's seven parameters"
    )]
    pub fn verify_head_and_write<'w, I>(
        self,
        inputs: &'w I,
    ) -> Result<Step<'c, Written<'w, I>, CanaryOf<V, W, E, S, R, G, B>>, Error>
    where
        St: ReadyForHeadVerify,
        I: WriteInputSource + ?Sized,
        E: SameWriteEntryCapacity<I::Capacity>,
        B: WritesFrom<I>,
    {
        self.verify_head()?.write_head(inputs, true)
    }

    /// [`write`](Self::write), its settings marked as following this step's own head verify
    /// launches when `behind_own_verify` ([`Backend::after_own_verify`]).
    #[allow(
        clippy::type_complexity,
        reason = "the next stage's type spells out the canary's seven parameters"
    )]
    pub(super) fn write_head<'w, I>(
        self,
        inputs: &'w I,
        behind_own_verify: bool,
    ) -> Result<Step<'c, Written<'w, I>, CanaryOf<V, W, E, S, R, G, B>>, Error>
    where
        St: ReadyToWrite,
        I: WriteInputSource + ?Sized,
        E: SameWriteEntryCapacity<I::Capacity>,
        B: WritesFrom<I>,
    {
        let Step {
            canary: c,
            mut progress,
            ..
        } = self;
        let stage = Written { inputs };
        if c.backend.defers_head_writes() {
            // Queued with the tail writes (verify_tail, which computes their settings):
            // nothing reads or writes the head buffers in between.
            progress.head_write_deferred = true;
        } else {
            let settings = G::HEAD.map(|tag| {
                let settings = c.settings(tag, B::no_real_kv());
                if behind_own_verify {
                    B::after_own_verify(settings)
                } else {
                    settings
                }
            });
            progress.head_write = write_both(c, End::Head, &settings, &stage)?;
        }
        Ok(Step {
            canary: c,
            stage,
            progress,
        })
    }

    /// Runs the tail launches after the forward pass and ends the step: checks every planned
    /// prefix slot against the tail buffers (K, then V), folding each half's real-KV bytes, then
    /// stamps this step's tokens into them with the fingerprints of their fresh KV bytes. Tags
    /// `TAIL_K_*` and `TAIL_V_*`.
    ///
    /// `real_kv` holds the K and V halves' sources ([`TailKv`](super::TailKv)); a [`KOnly`](super::KOnly)
    /// canary takes the K half's alone and launches `TAIL_K_*` only.
    ///
    /// Every active source of `real_kv` must cover all the canary's slots; otherwise
    /// [`Error::RealKvSlotOutOfRange`] is returned before any tail launch runs.
    ///
    /// On a device stream the write launches queued here are the last to read the step's write
    /// inputs (`input_ids`, `positions`, `out_cache_loc`: the tail writes, and the head writes
    /// too when the backend deferred them), and the plan's launch the last to read the plan
    /// inputs. An engine that refills them on another stream for the next step waits for an
    /// event recorded on the canary's stream (`canary.backend()`) after this call.
    pub fn verify_tail(self, real_kv: G::Sources<B::RealKv<'_>>) -> Result<B::Report, Error>
    where
        St: ReadyForTailVerify<E, B>,
        B: Reports,
    {
        let Step {
            canary: c,
            stage,
            mut progress,
        } = self;
        let settings = c.checked_settings(G::TAIL, real_kv)?;
        // The head verify and write launches lie between the plan and these (unless the plan
        // was fused with the head verify and the head write deferred: then none does).
        let settings = if progress.fused_plan && progress.head_write_deferred {
            settings
        } else {
            KvPair {
                k: B::after_own_head_stage(settings.k),
                v: B::after_own_head_stage(settings.v),
            }
        };
        let tail_verify = verify_both(c, Verified::Tail, &settings, progress.token_check)?;
        // The tail writes follow the tail verify launches just queued, nothing between (and so
        // do deferred head writes: the tail verify writes nothing they read).
        let write_settings = KvPair {
            k: B::after_own_verify(settings.k),
            v: B::after_own_verify(settings.v),
        };
        let tail_write = if progress.head_write_deferred {
            let head_settings =
                G::HEAD.map(|tag| B::after_own_verify(c.settings(tag, B::no_real_kv())));
            let tail = end_writes(&write_settings, &mut c.tail, &mut c.tail_counters);
            let head = end_writes(&head_settings, &mut c.head, &mut c.head_counters);
            let ends =
                stage.stamp_ends(&c.backend, &c.shape, &c.write_plan, tail, head, &mut c.ring)?;
            match ends {
                Some(((tk, tv), (hk, hv))) => {
                    progress.head_write = KvPair { k: hk, v: hv };
                    KvPair { k: tk, v: tv }
                }
                None => {
                    let tail = write_both(c, End::Tail, &write_settings, &stage)?;
                    progress.head_write = write_both(c, End::Head, &head_settings, &stage)?;
                    tail
                }
            }
        } else {
            write_both(c, End::Tail, &write_settings, &stage)?
        };
        let abandoned_steps = core::mem::take(&mut c.abandoned);
        c.in_flight = false;
        let report = c.backend.report(&FinishedStep {
            plan: progress.plan,
            verify_plan: &c.verify_plan,
            write_plan: &c.write_plan,
            verify_capacity: c.shape.verify_capacity().get(),
            head_verify: progress.head_verify,
            head_write: progress.head_write,
            tail_verify,
            tail_write,
            head_counters: &c.head_counters,
            tail_counters: &c.tail_counters,
            ring: &c.ring,
            abandoned_steps,
        })?;
        c.steps += 1;
        c.violations += B::recorded(&report);
        Ok(report)
    }
}

/// The buffers and counters a pair of verify launches use: the head's, the tail's, or the
/// tail buffers with the sweep counters (a sweep).
#[derive(Clone, Copy, Debug)]
pub(super) enum Verified {
    Head,
    Tail,
    Sweep,
}

/// The head or the tail buffers of a canary (what a write stamps).
#[derive(Clone, Copy, Debug)]
enum End {
    Head,
    Tail,
}

/// Verifies the K and then (when the pool has one) the V buffer of `which`; a missing V half's
/// summary is the default.
pub(super) fn verify_both<V, W, E, S, R, G, B>(
    c: &mut Canary<V, W, E, S, R, G, B>,
    which: Verified,
    settings: &KvPair<B::Settings<'_>>,
    token_check: bool,
) -> Result<KvPair<B::VerifyDone>, Error>
where
    V: SameVerifyCapacity<V>,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    let (buffers, counters) = match which {
        Verified::Head => (&c.head, &mut c.head_counters),
        Verified::Tail => (&c.tail, &mut c.tail_counters),
        Verified::Sweep => (&c.tail, &mut c.sweep_counters),
    };
    let (backend, shape, plan, ring) = (&c.backend, &c.shape, &c.verify_plan, &mut c.ring);
    if token_check {
        verify_halves(
            backend,
            shape,
            plan,
            TokenCheckOn,
            settings,
            buffers,
            ring,
            counters,
        )
    } else {
        verify_halves(
            backend,
            shape,
            plan,
            TokenCheckOff,
            settings,
            buffers,
            ring,
            counters,
        )
    }
}

/// The verify launches of one end with the token check `check`: the K buffer alone (a missing V
/// half's summary is the default), or K and V as one pair ([`Backend::verify_pair`]).
#[allow(clippy::too_many_arguments, reason = "the verify op's own arguments")]
fn verify_halves<V, W, E, S, R, B, K>(
    backend: &B,
    shape: &Shape<V, W, E>,
    plan: &VerifyPlan<V, B::Memory>,
    check: K,
    settings: &KvPair<B::Settings<'_>>,
    buffers: &Halves<CanaryBuffer<S, B::Memory>>,
    ring: &mut ViolationRing<R, B::Memory>,
    counters: &mut KvPair<HealthCounters<B::Memory>>,
) -> Result<KvPair<B::VerifyDone>, Error>
where
    V: SameVerifyCapacity<V>,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    B: Backend,
    K: TokenCheck,
{
    let Some(v_buffer) = &buffers.v else {
        let k = backend.verify(
            shape,
            plan,
            check,
            &settings.k,
            &buffers.k,
            ring,
            &mut counters.k,
        )?;
        return Ok(KvPair {
            k,
            v: B::VerifyDone::default(),
        });
    };
    let (k, v) = backend.verify_pair(
        shape,
        plan,
        check,
        (&settings.k, &settings.v),
        (&buffers.k, v_buffer),
        ring,
        (&mut counters.k, &mut counters.v),
    )?;
    Ok(KvPair { k, v })
}

/// The deferred writes of one end ([`EndWrites`]): `settings`, `buffers` and `counters` of the
/// K half, and of the V half when the pool has one (its buffer decides: the head and the tail
/// both have a V half exactly when [`GroupKind::HAS_V`]).
fn end_writes<'e, 'k, S, B>(
    settings: &'e KvPair<B::Settings<'k>>,
    buffers: &'e mut Halves<CanaryBuffer<S, B::Memory>>,
    counters: &'e mut KvPair<HealthCounters<B::Memory>>,
) -> EndWrites<'e, 'k, S, B>
where
    S: Capacity,
    B: Backend,
{
    let has_v = buffers.v.is_some();
    EndWrites {
        settings: (&settings.k, has_v.then_some(&settings.v)),
        canary: (&mut buffers.k, buffers.v.as_mut()),
        counters: (&mut counters.k, has_v.then_some(&mut counters.v)),
    }
}

/// Stamps the write inputs held by a [`Written`] stage into the K and then (when the pool has
/// one) the V buffer of one end; a missing V half's summary is the default.
fn write_both<V, W, E, S, R, G, B, T>(
    c: &mut Canary<V, W, E, S, R, G, B>,
    end: End,
    settings: &KvPair<B::Settings<'_>>,
    inputs: &T,
) -> Result<KvPair<B::WriteDone>, Error>
where
    V: Capacity,
    W: SameWriteReqCapacity<W>,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
    T: ReadyForTailVerify<E, B>,
{
    let (buffers, counters) = match end {
        End::Head => (&mut c.head, &mut c.head_counters),
        End::Tail => (&mut c.tail, &mut c.tail_counters),
    };
    let (backend, shape, plan, ring) = (&c.backend, &c.shape, &c.write_plan, &mut c.ring);
    let Some(v_buffer) = &mut buffers.v else {
        let k = inputs.stamp(
            backend,
            shape,
            plan,
            &settings.k,
            &mut buffers.k,
            ring,
            &mut counters.k,
        )?;
        return Ok(KvPair {
            k,
            v: B::WriteDone::default(),
        });
    };
    let (k, v) = inputs.stamp_pair(
        backend,
        shape,
        plan,
        (&settings.k, &settings.v),
        (&mut buffers.k, v_buffer),
        ring,
        (&mut counters.k, &mut counters.v),
    )?;
    Ok(KvPair { k, v })
}
