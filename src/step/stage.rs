//! [`Step`]: one forward step in progress, typed by its stage, so that its launches can only run
//! in order: `plan` -> [`verify_head`](Step::verify_head) -> [`write`](Step::write) -> (forward
//! pass) -> [`verify_tail`](Step::verify_tail).

use super::{Canary, GroupKind, KvPair, StepReport, TailKv};
use crate::canary::{
    CanaryBuffer, HealthCounters, LaunchSettings, TokenCheckOff, TokenCheckOn, Violation,
    ViolationRing,
};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::cpu::{self, PlanSummary, VerifySummary, WriteSummary};
use crate::input::{WriteInputAssert, WriteInputs};
use crate::plan::{VerifyPlan, WritePlan};
use crate::real_kv::RealKv;
use crate::shape::Shape;
use crate::Error;
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
pub struct Written<'w, EB: Capacity, A: WriteInputAssert> {
    inputs: &'w WriteInputs<EB, A>,
}

impl<EB: Capacity, A: WriteInputAssert> fmt::Debug for Written<'_, EB, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Written")
            .field("write_entry_capacity", &self.inputs.capacity())
            .field("input_assert", &A::ENABLED)
            .finish()
    }
}

impl sealed::Sealed for Planned {}
impl sealed::Sealed for HeadVerified {}
impl<EB: Capacity, A: WriteInputAssert> sealed::Sealed for Written<'_, EB, A> {}

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
pub trait ReadyForTailVerify<E: Capacity>: sealed::Sealed {
    /// Stamps the write inputs of this stage into one canary buffer (the step API's writes).
    #[doc(hidden)]
    fn stamp<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W>,
        launch: &LaunchSettings<'_>,
        buffer: &mut CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<WriteSummary, Error>;
}

impl<E, EB, A> ReadyForTailVerify<E> for Written<'_, EB, A>
where
    E: SameWriteEntryCapacity<EB>,
    EB: Capacity,
    A: WriteInputAssert,
{
    fn stamp<V: Capacity, W: SameWriteReqCapacity<W>, S: Capacity, R: Capacity>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<W>,
        launch: &LaunchSettings<'_>,
        buffer: &mut CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<WriteSummary, Error> {
        cpu::write(shape, plan, self.inputs, launch, buffer, ring, counters)
    }
}

/// What the launches of a step have done so far.
#[derive(Clone, Copy, Debug)]
struct Progress {
    plan: PlanSummary,
    /// Whether the plan had an expected-token pool (verify then checks tokens).
    token_check: bool,
    head_verify: KvPair<VerifySummary>,
    head_write: KvPair<WriteSummary>,
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
/// rows in the ring ([`Canary::ring`]) until the next `plan`.
#[must_use = "a step checks nothing until it runs `.verify_head()`, `.write(..)` and `.verify_tail(..)`"]
pub struct Step<'c, St, C> {
    canary: &'c mut C,
    stage: St,
    progress: Progress,
}

impl<'c, V, W, E, S, R, G> Step<'c, Planned, Canary<V, W, E, S, R, G>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// Starts a step (called by [`Canary::plan`]).
    pub(super) fn planned(
        canary: &'c mut Canary<V, W, E, S, R, G>,
        plan: PlanSummary,
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
            },
        }
    }
}

impl<'c, St, V, W, E, S, R, G> Step<'c, St, Canary<V, W, E, S, R, G>>
where
    V: SameVerifyCapacity<V>,
    W: SameWriteReqCapacity<W>,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// What the plan op produced for this step.
    pub fn plan_summary(&self) -> PlanSummary {
        self.progress.plan
    }

    /// The violations recorded so far in this step, decoded. After
    /// [`verify_head`](Step::verify_head) these are the head verify's findings: an engine can
    /// stop before its forward pass reads a corrupted KV cache.
    pub fn violations(&self) -> impl ExactSizeIterator<Item = Violation> + '_ {
        self.canary.ring.violations()
    }

    /// Checks every planned prefix slot against the head buffers (K, then V): tags `HEAD_K_*` and
    /// `HEAD_V_*`, no real-KV fold. Tokens are checked when the plan had an expected-token pool.
    #[allow(
        clippy::type_complexity,
        reason = "the next stage's type spells out the canary's six parameters"
    )]
    pub fn verify_head(self) -> Result<Step<'c, HeadVerified, Canary<V, W, E, S, R, G>>, Error>
    where
        St: ReadyForHeadVerify,
    {
        let Step {
            canary: c,
            mut progress,
            ..
        } = self;
        let launches = G::HEAD.map(|tag| c.launch(tag, RealKv::NONE));
        progress.head_verify = verify_both(c, End::Head, &launches, progress.token_check)?;
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
    /// `inputs` must be allocated from the canary's shape ([`Canary::write_inputs`]): the
    /// write-entry capacities are compared as in [`cpu::write`].
    #[allow(
        clippy::type_complexity,
        reason = "the next stage's type spells out the canary's six parameters"
    )]
    pub fn write<'w, EB, A>(
        self,
        inputs: &'w WriteInputs<EB, A>,
    ) -> Result<Step<'c, Written<'w, EB, A>, Canary<V, W, E, S, R, G>>, Error>
    where
        St: ReadyToWrite,
        E: SameWriteEntryCapacity<EB>,
        EB: Capacity,
        A: WriteInputAssert,
    {
        let Step {
            canary: c,
            mut progress,
            ..
        } = self;
        let launches = G::HEAD.map(|tag| c.launch(tag, RealKv::NONE));
        let stage = Written { inputs };
        progress.head_write = write_both(c, End::Head, &launches, &stage)?;
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
    /// Every active source of `real_kv` must cover all the canary's slots; otherwise
    /// [`Error::RealKvSlotOutOfRange`] is returned before any tail launch runs.
    pub fn verify_tail(self, real_kv: TailKv<'_>) -> Result<StepReport, Error>
    where
        St: ReadyForTailVerify<E>,
    {
        let Step {
            canary: c,
            stage,
            progress,
        } = self;
        let slots = c.head.k.num_slots();
        covers_every_slot(&real_kv.k, slots)?;
        covers_every_slot(&real_kv.v, slots)?;
        let launches = KvPair {
            k: c.launch(G::TAIL.k, real_kv.k),
            v: c.launch(G::TAIL.v, real_kv.v),
        };
        let tail_verify = verify_both(c, End::Tail, &launches, progress.token_check)?;
        let tail_write = write_both(c, End::Tail, &launches, &stage)?;
        Ok(c.finish_step(StepReport {
            plan: progress.plan,
            head_verify: progress.head_verify,
            head_write: progress.head_write,
            tail_verify,
            tail_write,
            head_counters: c.head_counters.clone(),
            tail_counters: c.tail_counters.clone(),
            violations: Vec::new(),
            dropped: 0,
        }))
    }
}

/// The head or the tail buffers of a canary.
#[derive(Clone, Copy, Debug)]
enum End {
    Head,
    Tail,
}

/// Verifies the K and then the V buffer of one end.
fn verify_both<V, W, E, S, R, G>(
    c: &mut Canary<V, W, E, S, R, G>,
    end: End,
    launches: &KvPair<LaunchSettings<'_>>,
    token_check: bool,
) -> Result<KvPair<VerifySummary>, Error>
where
    V: SameVerifyCapacity<V>,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    let (buffers, counters) = match end {
        End::Head => (&c.head, &mut c.head_counters),
        End::Tail => (&c.tail, &mut c.tail_counters),
    };
    let (shape, plan, ring) = (&c.shape, &c.verify_plan, &mut c.ring);
    let mut one =
        |launch, buffer, counters| verify(token_check, shape, plan, launch, buffer, ring, counters);
    Ok(KvPair {
        k: one(&launches.k, &buffers.k, &mut counters.k)?,
        v: one(&launches.v, &buffers.v, &mut counters.v)?,
    })
}

/// Stamps the write inputs held by a [`Written`] stage into the K and then the V buffer of
/// one end.
fn write_both<V, W, E, S, R, G, T>(
    c: &mut Canary<V, W, E, S, R, G>,
    end: End,
    launches: &KvPair<LaunchSettings<'_>>,
    inputs: &T,
) -> Result<KvPair<WriteSummary>, Error>
where
    V: Capacity,
    W: SameWriteReqCapacity<W>,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    T: ReadyForTailVerify<E>,
{
    let (buffers, counters) = match end {
        End::Head => (&mut c.head, &mut c.head_counters),
        End::Tail => (&mut c.tail, &mut c.tail_counters),
    };
    let (shape, plan, ring) = (&c.shape, &c.write_plan, &mut c.ring);
    let mut one =
        |launch, buffer, counters| inputs.stamp(shape, plan, launch, buffer, ring, counters);
    Ok(KvPair {
        k: one(&launches.k, &mut buffers.k, &mut counters.k)?,
        v: one(&launches.v, &mut buffers.v, &mut counters.v)?,
    })
}

/// The verify op with the token check chosen at run time from the plan's inputs.
fn verify<V, W, E, S, R>(
    token_check: bool,
    shape: &Shape<V, W, E>,
    plan: &VerifyPlan<V>,
    launch: &LaunchSettings<'_>,
    buffer: &CanaryBuffer<S>,
    ring: &mut ViolationRing<R>,
    counters: &mut HealthCounters,
) -> Result<VerifySummary, Error>
where
    V: SameVerifyCapacity<V>,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
{
    if token_check {
        cpu::verify(shape, plan, TokenCheckOn, launch, buffer, ring, counters)
    } else {
        cpu::verify(shape, plan, TokenCheckOff, launch, buffer, ring, counters)
    }
}

/// Every active source must reach the last slot of the canary.
fn covers_every_slot(real_kv: &RealKv<'_>, slots: usize) -> Result<(), Error> {
    if !real_kv.is_active() {
        return Ok(());
    }
    for (source, src) in real_kv.sources().as_slice().iter().enumerate() {
        if src.num_slots() < slots {
            let last = slots - 1;
            return Err(Error::RealKvSlotOutOfRange {
                source,
                slot: last as i64,
                row: last / src.page_size(),
                num_rows: src.num_rows(),
            });
        }
    }
    Ok(())
}
