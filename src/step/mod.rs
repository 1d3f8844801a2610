//! The per-step API engines call: a [`Canary`] owns every buffer of one KV group, allocated from
//! one [`Shape`], and runs each forward step's launches in the only order that checks anything.
//!
//! ```text
//! canary.plan(&inputs)?      plan op: batch -> verify work list + write metadata
//!   .verify_head()?          HEAD_K / HEAD_V verify: the prefix every request will attend to
//!   .write(&write_inputs)?   HEAD_K / HEAD_V write: stamp this step's tokens
//!   ... forward pass: the engine writes the real KV bytes of this step's tokens ...
//!   .verify_tail(real_kv)?   TAIL_K / TAIL_V verify (folding real-KV bytes), then write
//!  -> StepReport             the step's decoded violations, launch summaries, plan summary
//! ```
//!
//! Each stage consumes the previous one ([`Step`]), so verifying before planning, writing before
//! the head verify or ending a step without its write does not compile. Fewer calls give the
//! same report, and let a CUDA canary queue fewer or overlapped launches:
//! [`Canary::plan_verify_head_and_write`] runs the whole head stage (for an engine whose write
//! inputs are ready when it plans: on a CUDA stream the plan and the head verify become one
//! launch), [`Canary::plan_and_verify_head`] the first two stages (then
//! [`head_findings`](Step::head_findings) and `write`), and
//! [`verify_head_and_write`](Step::verify_head_and_write) the last two (the head writes' reads
//! overlap the head verify).
//!
//! # What is modelled
//!
//! SGLang keeps, per KV group and per (K|V) half of the pool, two canary buffers: a **head**
//! buffer staged before the forward pass and a **tail** buffer staged after it (spec §1). A
//! [`Canary`] models one group (FULL or SWA, the type parameter `G`) with both halves, so four
//! buffers of `S` slots:
//!
//! * head launches (`HEAD_K_*`, `HEAD_V_*`) never fold real-KV bytes: they catch bookkeeping
//!   bugs (aliased slots, wrong `req_to_token` rows, stale rows) before the forward pass uses the
//!   cache;
//! * tail launches (`TAIL_K_*`, `TAIL_V_*`) fold each half's KV bytes ([`TailKv`]): they also
//!   catch KV bytes that changed after they were written. The two halves differ only in their
//!   fingerprints, so a corruption of V bytes is reported by `TAIL_V_*` alone.
//!
//! All launches share one [`ViolationRing`] of `R` rows. An engine with a FULL and an SWA group
//! runs one `Canary` per group. A pool without a V half (an MLA-style latent cache) is a
//! [`KOnly`] group: two buffers (head and tail K), the K launches only, and one set of real-KV
//! sources for its tail verify and sweeps (a V source does not compile).
//!
//! # Sweeps and head findings
//!
//! Between steps the engine can [`sweep`](Canary::sweep) idle cached slots (SGLang's radix-cache
//! sweep): a verify-only pass over the entries it hands in (slot, position, predecessor; built
//! while it walks its cache with [`SweepEntries`], translated into SWA slots for an SWA group),
//! on the tail buffers with the group's real-KV sources, tags `SWEEP_K_*` / `SWEEP_V_*`, in the
//! canary's own verify plan. It finds KV bytes of finished, still cached requests that changed, which no
//! step attends to. A sweep borrows the canary mutably, so it cannot start while a step is in
//! flight (it does not compile), and its [`SweepReport`] follows the rules below (more entries
//! than the verify capacity: unverified, with the numbers). On a device its report is read back
//! asynchronously, like a step's.
//!
//! An engine that chooses to wait reads a step's [`head_findings`](Step::head_findings) after its
//! head verify and before its forward pass: the head verify's rows, their count and the plan
//! overflow (on a device a queued readback). The step's final report still holds them, once.
//!
//! ```
//! use kv_canary::step::{Canary, SweepEntries, TailKv};
//! use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
//!
//! let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
//! let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
//! let mut inputs = canary.write_inputs();
//! let p = inputs.parts_mut();
//! p.input_ids[..3].copy_from_slice(&[7, 8, 9]);
//! p.positions[..3].copy_from_slice(&[0, 1, 2]);
//! p.out_cache_loc[..3].copy_from_slice(&[8, 9, 10]);
//! let batch = Batch::from_columns([1], [0], [3]);
//! let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
//! assert!(step.head_findings()?.is_clean()); // read before the forward pass
//! step.write(&inputs)?.verify_tail(TailKv::NONE)?;
//!
//! // The request finishes; slots 8, 9, 10 stay in the radix cache. Between steps, sweep them:
//! // entries (slot, position, predecessor) (8, 0, -1), (9, 1, 8), (10, 2, 9), token check off.
//! let mut entries = SweepEntries::new();
//! entries.push_table_row(&table, 1, 3)?; // or push_node(..) per radix node while walking
//! let sweep = canary.sweep(&entries, TailKv::NONE)?;
//! assert_eq!((sweep.entries_checked(), sweep.recorded()), (2 * 3, 0));
//! assert!(sweep.is_clean());
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! # Not checked is not clean
//!
//! A report is [`clean`](StepReport::is_clean) only when every launch of the step ran over
//! every slot the step attends to and recorded nothing. [`StepReport::status`] tells the three
//! outcomes apart: clean, violations, or [`StepStatus::Unverified`] with the numbers, which a
//! step gets when
//!
//! * its plan needed more verify entries than the verify capacity (`enable = 0`: SGLang then
//!   checks nothing, silently) — [`Unverified::plan_overflow`] names both numbers;
//! * an earlier step was planned and never reached [`Step::verify_tail`] (cancelled with
//!   [`Step::cancel`], dropped, or ended by an error) — [`Unverified::abandoned_steps`] counts
//!   them, once.
//!
//! # Sizing the verify capacity
//!
//! A verify plan holds one entry per cached token that the step's requests attend to (the last
//! `window` of each prefix for an SWA group), not per token the step writes: a decode batch of
//! 64 requests with 2,000-token prefixes needs 128,000 entries. SGLang sizes it at `3 x` the KV
//! pool's slots ([`EngineKnobs::speculative`](crate::EngineKnobs::speculative),
//! [`VerifyCapacityRule::PoolSlots`](crate::VerifyCapacityRule::PoolSlots),
//! [`PoolShape`](crate::PoolShape)), which no batch of distinct requests can exceed; a capacity of
//! the step's own tokens (`bs x (topk + 1)`, SGLang's draft-step sizing) leaves most steps with
//! real prefixes unverified.
//!
//! # Reconfiguration
//!
//! [`Canary::try_reshape`] moves a canary to a new [`Shape`] (a new top-k, a new batch size) and
//! keeps its canary buffers, ring and counters, so requests in flight stay verified; a new
//! canary would report every cached prefix as a violation. A canary of run-time capacities held
//! in an engine struct ([`NamedShape`](crate::NamedShape)) moves in place with
//! [`Canary::reshape`].
//!
//! ```
//! use kv_canary::step::{Canary, TailKv};
//! use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
//!
//! // Verify 32 entries, 4 requests, 16 tokens per step; 64 KV slots, a 16-row ring.
//! let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
//! let table = ReqToToken::from_vec(4, 8, (0..32).collect())?; // row r, position p: slot 8r + p
//! let mut inputs = canary.write_inputs();
//!
//! // Step 1: the request in row 1 prefills tokens 7, 8, 9 into slots 8, 9, 10.
//! let batch = Batch::from_columns([1], [0], [3]);
//! let p = inputs.parts_mut();
//! p.input_ids[..3].copy_from_slice(&[7, 8, 9]);
//! p.positions[..3].copy_from_slice(&[0, 1, 2]);
//! p.out_cache_loc[..3].copy_from_slice(&[8, 9, 10]);
//! let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?.write(&inputs)?;
//! // ... the forward pass runs here ...
//! let report = step.verify_tail(TailKv::NONE)?;
//! assert!(report.is_clean());
//!
//! // The configuration changes: 64 verify entries, 8 requests, 32 tokens a step. The canary
//! // buffers, ring and counters move over; the plans and write inputs are the new shape's.
//! let mut canary = canary
//!     .try_reshape(Shape::<Cap<64>, Cap<8>, Cap<32>>::new())
//!     .map_err(|(_, err)| err)?;
//! let mut inputs = canary.write_inputs();
//!
//! // Step 2: it decodes token 10 into slot 11; all four buffers re-check its 3-token prefix,
//! // stamped before the change.
//! let batch = Batch::from_columns([1], [3], [1]);
//! let p = inputs.parts_mut();
//! (p.input_ids[0], p.positions[0], p.out_cache_loc[0]) = (10, 3, 11);
//! let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?.write(&inputs)?;
//! let report = step.verify_tail(TailKv::NONE)?;
//! assert_eq!((report.entries_checked(), report.recorded()), (4 * 3, 0));
//! assert_eq!(canary.steps(), 2);
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! Writing before the head verify does not compile:
//!
//! ```compile_fail
//! use kv_canary::step::Canary;
//! use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
//! let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
//! let table = ReqToToken::zeros(4, 8).unwrap();
//! let inputs = canary.write_inputs();
//! let batch = Batch::from_columns([1], [0], [3]);
//! canary.plan(&PlanInputs::full(&batch, &table)).unwrap().write(&inputs);
//! ```
//!
//! Nor does a sweep while a step is in flight:
//!
//! ```compile_fail
//! use kv_canary::step::{Canary, TailKv};
//! use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
//! let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
//! let table = ReqToToken::zeros(4, 8).unwrap();
//! let inputs = canary.write_inputs();
//! let batch = Batch::from_columns([1], [0], [3]);
//! let step = canary.plan(&PlanInputs::full(&batch, &table)).unwrap().verify_head().unwrap();
//! canary.sweep(&[], TailKv::NONE).unwrap();
//! step.write(&inputs).unwrap().verify_tail(TailKv::NONE).unwrap();
//! ```
//!
//! A K-only canary takes one set of sources: a [`TailKv`] pair does not compile.
//!
//! ```compile_fail
//! use kv_canary::step::{Canary, KOnly, TailKv};
//! use kv_canary::{Batch, Cap, Full, PlanInputs, ReqToToken, Shape};
//! let mut canary: Canary<_, _, _, _, _, KOnly<Full>> =
//!     Canary::k_only(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
//! let table = ReqToToken::zeros(4, 8).unwrap();
//! let inputs = canary.write_inputs();
//! let batch = Batch::from_columns([1], [0], [3]);
//! let step = canary.plan(&PlanInputs::full(&batch, &table)).unwrap().verify_head().unwrap();
//! step.write(&inputs).unwrap().verify_tail(TailKv::NONE).unwrap();
//! ```

mod findings;
mod group;
mod head_findings;
pub(crate) mod moves;
pub(crate) mod report;
mod slot_rows;
mod stage;
pub(crate) mod status;
mod sweep;
mod sweep_entries;

/// For the CUDA reports' [`Findings`].
#[cfg(feature = "cuda")]
pub(crate) use findings::findings;
pub use findings::Findings;
pub use group::{GroupKind, GroupOf, KOnly, SwaGroup};
pub use head_findings::{HeadFindings, HeadVerifyDone, ReadsHeadFindings};
pub use moves::MovedRecords;
pub use report::{KvPair, StepReport, TailKv};
pub use slot_rows::SlotRows;
pub use stage::{
    Cancelled, FinishedStep, HeadVerified, Planned, ReadyForHeadVerify, ReadyForTailVerify,
    ReadyToWrite, Reports, Step, StepCanary, StepStage, Written,
};
pub use status::{PlanOverflow, StepStatus, Unverified};
#[cfg(feature = "cuda")]
pub(crate) use sweep::sweep_gaps;
pub use sweep::{FinishedSweep, SweepReport, Sweeps};
pub use sweep_entries::SweepEntries;

use crate::backend::{Backend, Cpu, PlanWith, WritesFrom};
use crate::canary::{CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchTag, ViolationRing};
use crate::capacity::{
    Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity, StaticCapacity,
};
use crate::error::Error;
use crate::input::{Full, InputAssertOff, WriteInputSource, WriteInputs};
use crate::memory::static_size;
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use core::fmt;
use core::marker::PhantomData;

/// Every canary buffer of one KV group, allocated once from one [`Shape`], `S` slots and an
/// `R`-row ring: the verify and write plans, head and tail canary buffers for the K and V halves,
/// the violation ring and one pair of health counters per launch tag.
///
/// No buffer can come from another shape: the canary allocates them all. The only buffers an
/// engine passes in are the per-step [`WriteInputs`], whose capacity is checked against the
/// shape's (allocate them with [`write_inputs`](Canary::write_inputs)).
///
/// `G` is the group: [`Full`] ([`Canary::full`]) or [`SwaGroup`] ([`Canary::swa`]). `B` is the
/// [`Backend`] the launches run on and the buffers live in: the CPU reference ([`Cpu`]) unless
/// built with [`Canary::full_on`] / [`Canary::swa_on`].
pub struct Canary<V, W, E, S, R, G = Full, B = Cpu>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    backend: B,
    shape: Shape<V, W, E>,
    verify_plan: VerifyPlan<V, B::Memory>,
    write_plan: WritePlan<W, B::Memory>,
    head: Halves<CanaryBuffer<S, B::Memory>>,
    tail: Halves<CanaryBuffer<S, B::Memory>>,
    ring: ViolationRing<R, B::Memory>,
    head_counters: KvPair<HealthCounters<B::Memory>>,
    tail_counters: KvPair<HealthCounters<B::Memory>>,
    /// The counters of the sweep launches (`SWEEP_K_*`, `SWEEP_V_*`).
    sweep_counters: KvPair<HealthCounters<B::Memory>>,
    chain_position_assert: ChainPositionAssert,
    steps: u64,
    /// Sweeps run.
    sweeps: u64,
    violations: u64,
    /// Whether a step is planned and has not reached its tail verify yet.
    in_flight: bool,
    /// Steps abandoned (planned, never finished) since the last report.
    abandoned: u64,
    group: PhantomData<G>,
}

/// A canary of run-time capacities named by the engine's configuration type `T`
/// ([`NamedShape`](crate::NamedShape)) with run-time slot and ring-row counts: the type an engine
/// struct holds when its capacities come from its configuration (the example on `NamedShape`).
/// `G` and `B` as for [`Canary`].
pub type NamedCanary<T, G = Full, B = Cpu> = Canary<
    crate::NamedVerifyCapacity<T>,
    crate::NamedWriteReqCapacity<T>,
    crate::NamedWriteEntryCapacity<T>,
    crate::UncheckedCapacity,
    crate::UncheckedCapacity,
    G,
    B,
>;

impl<V, W, E, S, R> Canary<V, W, E, S, R, Full>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
{
    /// A canary for the FULL group on the CPU: every buffer allocated from `shape`, canary
    /// buffers of `slots` slots (the KV pool's size, slot 0 included), a ring of `ring_rows`
    /// rows. A buffer that cannot be allocated is [`Error::AllocationFailed`] naming its size.
    pub fn try_full(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        Canary::on(Cpu, shape, slots, ring_rows)
    }
}

impl<V, W, E, S, R> Canary<V, W, E, S, R, SwaGroup>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
{
    /// A canary for the SWA group on the CPU: as [`Canary::try_full`], with `slots` the size of
    /// the SWA sub-pool. Steps are planned with an [`Swa`](crate::Swa) group.
    pub fn try_swa(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        Canary::on(Cpu, shape, slots, ring_rows)
    }
}

/// The infallible constructors of a CPU canary whose every capacity is static (sizes fixed when
/// the engine is compiled; each panics only if the machine cannot hold them, like a
/// `Box<[i64; N]>`). Run-time capacities use [`Canary::try_full`] and [`Canary::try_swa`].
impl<V, W, E, S, R> Canary<V, W, E, S, R, Full>
where
    V: StaticCapacity,
    W: StaticCapacity,
    E: StaticCapacity,
    S: StaticCapacity,
    R: StaticCapacity,
{
    /// [`Canary::try_full`] for static capacities.
    pub fn full(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Self {
        static_size(Canary::on(Cpu, shape, slots, ring_rows))
    }
}

impl<V, W, E, S, R> Canary<V, W, E, S, R, SwaGroup>
where
    V: StaticCapacity,
    W: StaticCapacity,
    E: StaticCapacity,
    S: StaticCapacity,
    R: StaticCapacity,
{
    /// [`Canary::try_swa`] for static capacities.
    pub fn swa(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Self {
        static_size(Canary::on(Cpu, shape, slots, ring_rows))
    }
}

impl<V, W, E, S, R, G> Canary<V, W, E, S, R, G>
where
    V: Capacity,
    W: Capacity,
    E: StaticCapacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// Per-token host write inputs of the shape's static write-entry capacity `E` (input assert
    /// off); run-time capacities and device canaries use
    /// [`try_write_inputs`](Canary::try_write_inputs).
    pub fn write_inputs(&self) -> WriteInputs<E> {
        static_size(self.shape.try_write_inputs())
    }
}

impl<V, W, E, S, R, B> Canary<V, W, E, S, R, Full, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    B: Backend,
{
    /// A canary for the FULL group on `backend`: as [`Canary::full`], every buffer allocated
    /// by the backend (in its memory).
    pub fn full_on(
        backend: B,
        shape: Shape<V, W, E>,
        slots: S,
        ring_rows: R,
    ) -> Result<Self, Error> {
        Canary::on(backend, shape, slots, ring_rows)
    }
}

impl<V, W, E, S, R, B> Canary<V, W, E, S, R, SwaGroup, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    B: Backend,
{
    /// A canary for the SWA group on `backend`: as [`Canary::swa`], every buffer allocated by
    /// the backend (in its memory).
    pub fn swa_on(
        backend: B,
        shape: Shape<V, W, E>,
        slots: S,
        ring_rows: R,
    ) -> Result<Self, Error> {
        Canary::on(backend, shape, slots, ring_rows)
    }
}

impl<V, W, E, S, R, P> Canary<V, W, E, S, R, KOnly<P>>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    KOnly<P>: GroupKind,
{
    /// A canary on the CPU for a pool without a V half (an MLA-style latent cache) of group `P`
    /// ([`Full`] or [`SwaGroup`]): two canary buffers (head and tail K) of `slots` slots, a ring
    /// of `ring_rows` rows; its steps launch the K tags only. Errors as [`Canary::try_full`].
    pub fn try_k_only(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        Canary::on(Cpu, shape, slots, ring_rows)
    }
}

impl<V, W, E, S, R, P> Canary<V, W, E, S, R, KOnly<P>>
where
    V: StaticCapacity,
    W: StaticCapacity,
    E: StaticCapacity,
    S: StaticCapacity,
    R: StaticCapacity,
    KOnly<P>: GroupKind,
{
    /// [`Canary::try_k_only`] for static capacities.
    pub fn k_only(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Self {
        static_size(Canary::on(Cpu, shape, slots, ring_rows))
    }
}

impl<V, W, E, S, R, P, B> Canary<V, W, E, S, R, KOnly<P>, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    KOnly<P>: GroupKind,
    B: Backend,
{
    /// A K-only canary ([`Canary::try_k_only`]) on `backend`, every buffer allocated by the
    /// backend (in its memory).
    pub fn k_only_on(
        backend: B,
        shape: Shape<V, W, E>,
        slots: S,
        ring_rows: R,
    ) -> Result<Self, Error> {
        Canary::on(backend, shape, slots, ring_rows)
    }
}

impl<V, W, E, S, R, G, B> Canary<V, W, E, S, R, G, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    fn on(backend: B, shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        let buffers = || -> Result<_, Error> {
            Ok(Halves {
                k: backend.canary_buffer(slots)?,
                v: match G::HAS_V {
                    true => Some(backend.canary_buffer(slots)?),
                    false => None,
                },
            })
        };
        let counters = || -> Result<_, Error> {
            Ok(KvPair {
                k: backend.health_counters()?,
                v: backend.health_counters()?,
            })
        };
        Ok(Canary {
            verify_plan: backend.verify_plan(shape.verify_capacity())?,
            write_plan: backend.write_plan(shape.write_req_capacity())?,
            head: buffers()?,
            tail: buffers()?,
            ring: backend.violation_ring(ring_rows)?,
            head_counters: counters()?,
            tail_counters: counters()?,
            sweep_counters: counters()?,
            shape,
            backend,
            chain_position_assert: ChainPositionAssert::ON,
            steps: 0,
            sweeps: 0,
            violations: 0,
            in_flight: false,
            abandoned: 0,
            group: PhantomData,
        })
    }

    /// The same canary planned with another shape (a new top-k, batch size or verify capacity
    /// read from the engine's run-time configuration), keeping its state: the four canary
    /// buffers, the ring, the health counters and the step counts move over unchanged, so every
    /// request in flight stays verified across the change. Only the plans are allocated anew, for
    /// the new capacities; the write inputs of the old shape no longer fit (allocate new ones with
    /// [`write_inputs`](Canary::write_inputs)).
    ///
    /// On error (the backend could not allocate the new plans) the canary is returned unchanged
    /// beside the error. A canary in a struct field whose capacity types stay the same (run-time
    /// capacities with new numbers) is moved more simply with [`reshape`](Self::reshape), in
    /// place.
    #[allow(
        clippy::type_complexity,
        clippy::result_large_err,
        reason = "the error hands the unchanged canary back"
    )]
    pub fn try_reshape<V2, W2, E2>(
        self,
        shape: Shape<V2, W2, E2>,
    ) -> Result<Canary<V2, W2, E2, S, R, G, B>, (Self, Error)>
    where
        V2: Capacity,
        W2: Capacity,
        E2: Capacity,
    {
        match self.plans_for(&shape) {
            Ok((verify_plan, write_plan)) => Ok(self.with_plans(shape, verify_plan, write_plan)),
            Err(err) => Err((self, err)),
        }
    }

    /// The backend's plans for `shape` (what a reshape allocates anew).
    #[allow(
        clippy::type_complexity,
        reason = "the two plans of the new shape's capacities"
    )]
    fn plans_for<V2, W2, E2>(
        &self,
        shape: &Shape<V2, W2, E2>,
    ) -> Result<(VerifyPlan<V2, B::Memory>, WritePlan<W2, B::Memory>), Error>
    where
        V2: Capacity,
        W2: Capacity,
        E2: Capacity,
    {
        let verify_plan = self.backend.verify_plan(shape.verify_capacity())?;
        Ok((
            verify_plan,
            self.backend.write_plan(shape.write_req_capacity())?,
        ))
    }

    /// [`try_reshape`](Self::try_reshape) in place, to a shape of the same capacity types: the
    /// form for a canary held in an engine struct whose capacities are read from its run-time
    /// configuration ([`NamedShape`](crate::NamedShape) or
    /// [`UncheckedShape`](crate::UncheckedShape) with new numbers). The canary buffers, the
    /// ring, the counters and the step counts stay; only the plans are allocated anew. The
    /// inputs of the next steps must be of the new capacities: the batch (a `DeviceBatch` or a
    /// view carries its write request capacity) and the write inputs (the crate's or views of
    /// the engine's own slices, of the write entry capacity). Host views are made anew over
    /// the same slices; a device view of the engine's buffers is rebound to the new capacity
    /// with `cuda::Shared::rebind` or `cuda::Borrowed::rebind` (checked against the buffers'
    /// lengths; nothing copied).
    ///
    /// On error (the backend could not allocate the new plans) the canary is unchanged.
    pub fn reshape(&mut self, shape: Shape<V, W, E>) -> Result<(), Error> {
        (self.verify_plan, self.write_plan) = self.plans_for(&shape)?;
        self.shape = shape;
        Ok(())
    }

    /// This canary's state with another shape and its plans.
    fn with_plans<V2, W2, E2>(
        self,
        shape: Shape<V2, W2, E2>,
        verify_plan: VerifyPlan<V2, B::Memory>,
        write_plan: WritePlan<W2, B::Memory>,
    ) -> Canary<V2, W2, E2, S, R, G, B>
    where
        V2: Capacity,
        W2: Capacity,
        E2: Capacity,
    {
        Canary {
            verify_plan,
            write_plan,
            shape,
            backend: self.backend,
            head: self.head,
            tail: self.tail,
            ring: self.ring,
            head_counters: self.head_counters,
            tail_counters: self.tail_counters,
            sweep_counters: self.sweep_counters,
            chain_position_assert: self.chain_position_assert,
            steps: self.steps,
            sweeps: self.sweeps,
            violations: self.violations,
            in_flight: self.in_flight,
            abandoned: self.abandoned,
            group: PhantomData,
        }
    }

    /// The same canary with another `enable_chain_position_assert` flag (off during CUDA-graph
    /// warm-up; on by default).
    pub fn with_chain_position_assert(mut self, flag: ChainPositionAssert) -> Self {
        self.chain_position_assert = flag;
        self
    }

    /// Sets `enable_chain_position_assert` for the following steps.
    pub fn set_chain_position_assert(&mut self, flag: ChainPositionAssert) {
        self.chain_position_assert = flag;
    }

    /// The `enable_chain_position_assert` flag the following steps' writes get.
    pub fn chain_position_assert(&self) -> ChainPositionAssert {
        self.chain_position_assert
    }

    /// Per-token write inputs of the shape's write-entry capacity (input assert off), allocated
    /// by the backend; inputs that cannot be allocated are [`Error::AllocationFailed`] naming
    /// their size.
    pub fn try_write_inputs(&self) -> Result<WriteInputs<E, InputAssertOff, B::Memory>, Error> {
        self.backend.write_inputs(self.shape.write_entry_capacity())
    }

    /// The backend the launches run on.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The shape every buffer was allocated from.
    pub fn shape(&self) -> &Shape<V, W, E> {
        &self.shape
    }

    /// The slots of each canary buffer (the KV pool's, slot 0 included).
    pub fn slots(&self) -> S {
        self.head.k.capacity()
    }

    /// The verify and write plans of the current (or last) step.
    #[allow(
        clippy::type_complexity,
        reason = "two plan types in the backend's memory"
    )]
    pub fn plans(&self) -> (&VerifyPlan<V, B::Memory>, &WritePlan<W, B::Memory>) {
        (&self.verify_plan, &self.write_plan)
    }

    /// The launch tags of this canary's steps: head (K, V) and tail (K, V); head K and tail K
    /// for a [`KOnly`] canary. Its sweeps launch [`GroupKind::SWEEP`]'s tags (K only for a
    /// [`KOnly`] canary).
    pub fn tags(&self) -> Vec<LaunchTag> {
        let (head, tail) = (G::HEAD, G::TAIL);
        match G::HAS_V {
            true => vec![head.k, head.v, tail.k, tail.v],
            false => vec![head.k, tail.k],
        }
    }

    /// The canary buffer the launches tagged `tag` use (a sweep tag: the tail buffer of its
    /// half, which sweeps share); `None` for a tag of another group or of a half this canary
    /// does not have.
    pub fn buffer(&self, tag: LaunchTag) -> Option<&CanaryBuffer<S, B::Memory>> {
        let (end, half) = Self::locate(tag)?;
        let buffers = match end {
            Launches::Head => &self.head,
            Launches::Tail | Launches::Sweep => &self.tail,
        };
        match half {
            Half::K => Some(&buffers.k),
            Half::V => buffers.v.as_ref(),
        }
    }

    /// The canary buffer of `tag`, mutable: for tests that tamper with a record.
    pub fn buffer_mut(&mut self, tag: LaunchTag) -> Option<&mut CanaryBuffer<S, B::Memory>> {
        let (end, half) = Self::locate(tag)?;
        let buffers = match end {
            Launches::Head => &mut self.head,
            Launches::Tail | Launches::Sweep => &mut self.tail,
        };
        match half {
            Half::K => Some(&mut buffers.k),
            Half::V => buffers.v.as_mut(),
        }
    }

    /// The health counters of the launches tagged `tag` (cumulative over every step, or every
    /// sweep for a sweep tag); `None` for a tag this canary does not launch.
    pub fn counters(&self, tag: LaunchTag) -> Option<&HealthCounters<B::Memory>> {
        let (end, half) = Self::locate(tag)?;
        let counters = match end {
            Launches::Head => &self.head_counters,
            Launches::Tail => &self.tail_counters,
            Launches::Sweep => &self.sweep_counters,
        };
        Some(match half {
            Half::K => &counters.k,
            Half::V => &counters.v,
        })
    }

    /// The violation ring: the rows of the current (or last) step. Each `plan` empties it.
    pub fn ring(&self) -> &ViolationRing<R, B::Memory> {
        &self.ring
    }

    /// Steps completed (those that reached [`Step::verify_tail`]).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Steps planned since the last report that never reached [`Step::verify_tail`] (dropped,
    /// or ended by an error), the one in flight excluded; the next report carries the count
    /// and is not clean.
    pub fn abandoned_steps(&self) -> u64 {
        self.abandoned
    }

    /// Violations recorded by every completed step (stored or dropped). For a backend whose
    /// reports arrive after the step (a CUDA stream), the violations of the reports taken so
    /// far ([`Reports::delivered_violations`]).
    pub fn total_violations(&self) -> u64
    where
        B: Reports,
    {
        self.violations + self.backend.delivered_violations()
    }

    /// Which launches of this canary `tag` names, and their half; `None` for a tag of another
    /// group, or of the V half on a [`KOnly`] canary.
    fn locate(tag: LaunchTag) -> Option<(Launches, Half)> {
        let ends = [
            (Launches::Head, G::HEAD),
            (Launches::Tail, G::TAIL),
            (Launches::Sweep, G::SWEEP),
        ];
        ends.into_iter().find_map(|(end, tags)| {
            if tag == tags.k {
                Some((end, Half::K))
            } else if G::HAS_V && tag == tags.v {
                Some((end, Half::V))
            } else {
                None
            }
        })
    }

    /// The launch settings of `tag` with `real_kv`.
    fn settings<'k>(&self, tag: LaunchTag, real_kv: B::RealKv<'k>) -> B::Settings<'k> {
        B::settings(tag, real_kv, self.chain_position_assert)
    }

    /// The settings of a pair of launches tagged `tags` folding `real_kv` (tail verify, sweep),
    /// once every active source is known to cover the canary's slots (else
    /// [`Error::RealKvSlotOutOfRange`], before anything runs). Without a V half the V settings
    /// repeat the K sources under the V tag; no launch uses them.
    fn checked_settings<'k>(
        &self,
        tags: KvPair<LaunchTag>,
        real_kv: G::Sources<B::RealKv<'k>>,
    ) -> Result<KvPair<B::Settings<'k>>, Error> {
        let slots = self.head.k.num_slots();
        let (k, v) = G::split_sources(real_kv);
        B::check_real_kv_covers(&k, slots)?;
        if let Some(v) = &v {
            B::check_real_kv_covers(v, slots)?;
        }
        Ok(KvPair {
            k: self.settings(tags.k, k),
            v: self.settings(tags.v, v.unwrap_or(k)),
        })
    }

    /// Starts a step: runs the plan op on `inputs` (a batch planned for this canary's group:
    /// [`PlanInputsOf`]) and empties the ring, so the step's report holds its own rows only.
    ///
    /// Tokens are checked by the verify launches exactly when `inputs` carry an expected-token
    /// pool. On error no buffer is modified, and the step counts as abandoned: the next report
    /// says that a step went unchecked ([`StepReport::abandoned_steps`]).
    ///
    /// A step still in flight (planned, never brought to [`Step::verify_tail`]) is counted as
    /// abandoned here.
    pub fn plan<I>(&mut self, inputs: &I) -> Result<Step<'_, Planned, Self>, Error>
    where
        I: PlanInputsOf<G::Pool> + ?Sized,
        B: PlanWith<I, V, W, E>,
        V: SameVerifyCapacity<V>,
        W: SameWriteReqCapacity<W>,
    {
        let summary = self.start_step(|c| c.queue_plan(inputs))?;
        let token_check = inputs.checks_tokens();
        Ok(Step::planned(self, summary, token_check))
    }

    /// Starts a step with `queue` (its first launches): a step still in flight is counted as
    /// abandoned first, and so is this one when `queue` fails; otherwise it is in flight.
    fn start_step<T>(
        &mut self,
        queue: impl FnOnce(&mut Self) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if core::mem::take(&mut self.in_flight) {
            self.abandoned += 1;
        }
        let started = queue(self).inspect_err(|_| self.abandoned += 1)?;
        self.in_flight = true;
        Ok(started)
    }

    /// The plan op on `inputs`, then the ring emptied.
    fn queue_plan<I>(&mut self, inputs: &I) -> Result<B::PlanDone, Error>
    where
        B: PlanWith<I, V, W, E>,
        I: ?Sized,
        V: SameVerifyCapacity<V>,
        W: SameWriteReqCapacity<W>,
    {
        let summary = self.backend.plan(
            &self.shape,
            inputs,
            &mut self.verify_plan,
            &mut self.write_plan,
        )?;
        self.backend.clear_ring(&mut self.ring)?;
        Ok(summary)
    }

    /// [`plan`](Self::plan) and then [`verify_head`](Step::verify_head), for an engine that
    /// queues nothing of its own between the two: the same plan, rows, counters, head findings
    /// and report. On a CUDA stream the plan and the head verify are one launch whenever the
    /// plan is the lean kernel without a LUT or an expected-token pool
    /// (`cuda::KernelTuning::plan_verify_fusion`): each entry is checked by the thread that
    /// plans it, and a step has a launch fewer. Otherwise, and on the CPU, the two calls.
    ///
    /// Errors as for `plan` and `verify_head`; an error ends the step, counted as abandoned.
    #[allow(
        clippy::type_complexity,
        reason = "the step's type spells out the canary's seven parameters"
    )]
    pub fn plan_and_verify_head<I>(
        &mut self,
        inputs: &I,
    ) -> Result<Step<'_, HeadVerified, Self>, Error>
    where
        I: PlanInputsOf<G::Pool> + ?Sized,
        B: PlanWith<I, V, W, E>,
        V: SameVerifyCapacity<V>,
        W: SameWriteReqCapacity<W>,
    {
        self.plan_and_verify_head_as(inputs).map(|(step, _)| step)
    }

    /// [`plan_and_verify_head`](Self::plan_and_verify_head), and whether the backend made the
    /// plan and the head verify one launch.
    #[allow(
        clippy::type_complexity,
        reason = "the step's type spells out the canary's seven parameters"
    )]
    fn plan_and_verify_head_as<I>(
        &mut self,
        inputs: &I,
    ) -> Result<(Step<'_, HeadVerified, Self>, bool), Error>
    where
        I: PlanInputsOf<G::Pool> + ?Sized,
        B: PlanWith<I, V, W, E>,
        V: SameVerifyCapacity<V>,
        W: SameWriteReqCapacity<W>,
    {
        if inputs.checks_tokens() {
            return Ok((self.plan(inputs)?.verify_head()?, false));
        }
        let settings = G::HEAD.map(|tag| self.settings(tag, B::no_real_kv()));
        // The backend's fused launch, or (None: it queued nothing) the plan alone.
        let (summary, head_verify) = self.start_step(|c| {
            let (v_settings, v_buffer, v_counters) = match &c.head.v {
                Some(buffer) => (
                    Some(&settings.v),
                    Some(buffer),
                    Some(&mut c.head_counters.v),
                ),
                None => (None, None, None),
            };
            let fused = c.backend.plan_verify_head(
                &c.shape,
                inputs,
                &mut c.verify_plan,
                &mut c.write_plan,
                (&settings.k, v_settings),
                (&c.head.k, v_buffer),
                &mut c.ring,
                (&mut c.head_counters.k, v_counters),
            )?;
            match fused {
                Some((summary, k, v)) => Ok((summary, Some(KvPair { k, v }))),
                None => Ok((c.queue_plan(inputs)?, None)),
            }
        })?;
        Ok(match head_verify {
            Some(head_verify) => (Step::head_verified(self, summary, head_verify), true),
            None => (Step::planned(self, summary, false).verify_head()?, false),
        })
    }

    /// The whole head stage in one call, for an engine whose write inputs are ready when it
    /// plans: [`plan`](Self::plan), [`verify_head`](Step::verify_head) and
    /// [`write`](Step::write) of `write_inputs`, with the same rows, counters and report as the
    /// three calls, queued the fastest way the backend has. On a CUDA stream: the plan and the
    /// head verify as one launch where [`plan_and_verify_head`](Self::plan_and_verify_head)
    /// makes them one, the head write after it (or, with the CUDA backend's
    /// `KernelTuning::defer_head_writes`, the default, in the tail
    /// writes' launch: a K+V step is then three launches, the plan with the head verify, the
    /// tail verify, the writes; without it four); otherwise
    /// `plan` and then [`Step::verify_head_and_write`], whose head writes do the reading half
    /// of their decode-sized requests while the head verify runs. (A head write right behind
    /// the fused launch cannot read early: it reads the write plan that launch writes.)
    #[allow(
        clippy::type_complexity,
        reason = "the step's type spells out the canary's seven parameters"
    )]
    pub fn plan_verify_head_and_write<'w, I, WI>(
        &mut self,
        inputs: &I,
        write_inputs: &'w WI,
    ) -> Result<Step<'_, Written<'w, WI>, Self>, Error>
    where
        I: PlanInputsOf<G::Pool> + ?Sized,
        B: PlanWith<I, V, W, E> + WritesFrom<WI>,
        V: SameVerifyCapacity<V>,
        W: SameWriteReqCapacity<W>,
        WI: WriteInputSource + ?Sized,
        E: SameWriteEntryCapacity<WI::Capacity>,
    {
        let (step, fused) = self.plan_and_verify_head_as(inputs)?;
        step.write_head(write_inputs, !fused)
    }
}

/// The canary buffers of one end (head or tail): the K half's, and the V half's when the pool
/// has one ([`GroupKind::HAS_V`]).
struct Halves<T> {
    k: T,
    v: Option<T>,
}

/// The launches of a canary that one tag can name.
#[derive(Clone, Copy, Debug)]
enum Launches {
    Head,
    Tail,
    Sweep,
}

/// The half of a KV pool a launch works on.
#[derive(Clone, Copy, Debug)]
enum Half {
    K,
    V,
}

/// Plan inputs for a canary of group `G`: a FULL canary plans with a [`Full`] group, an SWA
/// canary with an [`Swa`](crate::Swa) group, on the host or (with the `cuda` feature) on the
/// device.
#[diagnostic::on_unimplemented(
    message = "kv-canary: `{Self}` are not plan inputs for a `{G}` canary",
    label = "plan inputs of another group",
    note = "a FULL canary plans `PlanInputs` with the `Full` group, an SWA canary with `.with_group(Swa::window(w).with_lut(&lut))` on the host or `.with_group(cuda::Swa::new(w, &device_lut))` on the device"
)]
pub trait PlanInputsOf<G: GroupKind> {
    /// Whether the inputs carry an expected-token pool (the verify launches then check tokens).
    fn checks_tokens(&self) -> bool;
}

impl<'a, G, P, X, BE, TE> PlanInputsOf<G> for crate::input::PlanInputs<'a, P, X, BE, TE>
where
    G: GroupKind,
    P: GroupOf<G>,
    X: crate::input::ExpectedTokens,
    BE: crate::input::BatchColumns,
    TE: crate::input::IndexElement,
{
    fn checks_tokens(&self) -> bool {
        self.expected.pool().is_some()
    }
}

impl<V, W, E, S, R, G, B> fmt::Debug for Canary<V, W, E, S, R, G, B>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
    B: Backend,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Canary")
            .field("group", &G::NAME)
            .field("shape", &self.shape)
            .field("slots", &self.head.k.capacity())
            .field("v_half", &G::HAS_V)
            .field("ring_rows", &self.ring.capacity())
            .field("steps", &self.steps)
            .field("violations", &self.violations)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
