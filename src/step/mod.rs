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
//! the head verify or ending a step without its write does not compile.
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
//! runs one `Canary` per group. Sweep launches (verify-only passes over idle requests,
//! `SWEEP_*` tags) are not modelled: build a [`VerifyPlan`] with
//! [`VerifyPlan::set_entries`] and call [`cpu::verify`] on [`Canary::buffer`] with
//! [`Canary::shape`] and a ring of its own.
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
//! // Step 2: it decodes token 10 into slot 11; all four buffers re-check its 3-token prefix.
//! let batch = Batch::from_columns([1], [3], [1]);
//! let p = inputs.parts_mut();
//! (p.input_ids[0], p.positions[0], p.out_cache_loc[0]) = (10, 3, 11);
//! let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?.write(&inputs)?;
//! let report = step.verify_tail(TailKv::NONE)?;
//! assert_eq!((report.entries_checked(), report.recorded()), (4 * 3, 0));
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

mod group;
mod report;
mod stage;

pub use group::{GroupKind, SwaGroup};
pub use report::{KvPair, StepReport, TailKv};
pub use stage::{
    HeadVerified, Planned, ReadyForHeadVerify, ReadyForTailVerify, ReadyToWrite, Step, Written,
};

use crate::canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchSettings, LaunchTag, ViolationRing,
};
use crate::capacity::{Cap, Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::cpu;
use crate::input::{ExpectedTokens, Full, PlanInputs, WriteInputs};
use crate::memory::static_size;
use crate::plan::{VerifyPlan, WritePlan};
use crate::real_kv::RealKv;
use crate::shape::Shape;
use crate::Error;
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
/// `G` is the group: [`Full`] ([`Canary::full`]) or [`SwaGroup`] ([`Canary::swa`]).
pub struct Canary<V, W, E, S, R, G = Full>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    shape: Shape<V, W, E>,
    verify_plan: VerifyPlan<V>,
    write_plan: WritePlan<W>,
    head: KvPair<CanaryBuffer<S>>,
    tail: KvPair<CanaryBuffer<S>>,
    ring: ViolationRing<R>,
    head_counters: KvPair<HealthCounters>,
    tail_counters: KvPair<HealthCounters>,
    chain_position_assert: ChainPositionAssert,
    steps: u64,
    violations: u64,
    group: PhantomData<G>,
}

impl<V, W, E, S, R> Canary<V, W, E, S, R, Full>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
{
    /// A canary for the FULL group: every buffer allocated from `shape`, canary buffers of
    /// `slots` slots (the KV pool's size, slot 0 included), a ring of `ring_rows` rows. A
    /// buffer that cannot be allocated is [`Error::AllocationFailed`] naming its size.
    pub fn try_full(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        Canary::try_new(shape, slots, ring_rows)
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
    /// A canary for the SWA group: as [`Canary::try_full`], with `slots` the size of the SWA
    /// sub-pool. Steps are planned with an [`Swa`](crate::Swa) group.
    pub fn try_swa(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        Canary::try_new(shape, slots, ring_rows)
    }
}

/// The infallible constructors of a canary whose every capacity is static (sizes fixed when the
/// engine is compiled; each panics only if the machine cannot hold them, like a
/// `Box<[i64; N]>`). Run-time capacities use [`Canary::try_full`] and [`Canary::try_swa`].
impl<const V: usize, const W: usize, const E: usize, const S: usize, const R: usize>
    Canary<Cap<V>, Cap<W>, Cap<E>, Cap<S>, Cap<R>, Full>
{
    /// [`Canary::try_full`] for static capacities.
    pub fn full(shape: Shape<Cap<V>, Cap<W>, Cap<E>>, slots: Cap<S>, ring_rows: Cap<R>) -> Self {
        static_size(Canary::try_new(shape, slots, ring_rows))
    }
}

impl<const V: usize, const W: usize, const E: usize, const S: usize, const R: usize>
    Canary<Cap<V>, Cap<W>, Cap<E>, Cap<S>, Cap<R>, SwaGroup>
{
    /// [`Canary::try_swa`] for static capacities.
    pub fn swa(shape: Shape<Cap<V>, Cap<W>, Cap<E>>, slots: Cap<S>, ring_rows: Cap<R>) -> Self {
        static_size(Canary::try_new(shape, slots, ring_rows))
    }
}

impl<V, W, const E: usize, S, R, G> Canary<V, W, Cap<E>, S, R, G>
where
    V: Capacity,
    W: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// Per-token write inputs of the shape's static write-entry capacity `E` (input assert
    /// off); run-time capacities use [`try_write_inputs`](Canary::try_write_inputs).
    pub fn write_inputs(&self) -> WriteInputs<Cap<E>> {
        WriteInputs::new()
    }
}

impl<V, W, E, S, R, G> Canary<V, W, E, S, R, G>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    fn try_new(shape: Shape<V, W, E>, slots: S, ring_rows: R) -> Result<Self, Error> {
        let buffers = || -> Result<_, Error> {
            Ok(KvPair {
                k: CanaryBuffer::try_with_capacity(slots)?,
                v: CanaryBuffer::try_with_capacity(slots)?,
            })
        };
        Ok(Canary {
            verify_plan: shape.try_verify_plan()?,
            write_plan: shape.try_write_plan()?,
            shape,
            head: buffers()?,
            tail: buffers()?,
            ring: ViolationRing::try_with_capacity(ring_rows)?,
            head_counters: KvPair::default(),
            tail_counters: KvPair::default(),
            chain_position_assert: ChainPositionAssert::ON,
            steps: 0,
            violations: 0,
            group: PhantomData,
        })
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

    /// Per-token write inputs of the shape's write-entry capacity (input assert off); inputs
    /// that cannot be allocated are [`Error::AllocationFailed`] naming their size.
    pub fn try_write_inputs(&self) -> Result<WriteInputs<E>, Error> {
        self.shape.try_write_inputs()
    }

    /// The shape every buffer was allocated from.
    pub fn shape(&self) -> &Shape<V, W, E> {
        &self.shape
    }

    /// The verify and write plans of the current (or last) step.
    pub fn plans(&self) -> (&VerifyPlan<V>, &WritePlan<W>) {
        (&self.verify_plan, &self.write_plan)
    }

    /// The four launch tags of this canary: head (K, V) and tail (K, V).
    pub fn tags(&self) -> [LaunchTag; 4] {
        [G::HEAD.k, G::HEAD.v, G::TAIL.k, G::TAIL.v]
    }

    /// The canary buffer the launches tagged `tag` use; `None` for a tag of another group or a
    /// sweep tag.
    pub fn buffer(&self, tag: LaunchTag) -> Option<&CanaryBuffer<S>> {
        let i = self.launch_index(tag)?;
        Some([&self.head.k, &self.head.v, &self.tail.k, &self.tail.v][i])
    }

    /// The canary buffer of `tag`, mutable: for tests that tamper with a record.
    pub fn buffer_mut(&mut self, tag: LaunchTag) -> Option<&mut CanaryBuffer<S>> {
        let i = self.launch_index(tag)?;
        let (head, tail) = (&mut self.head, &mut self.tail);
        [&mut head.k, &mut head.v, &mut tail.k, &mut tail.v]
            .into_iter()
            .nth(i)
    }

    /// The health counters of the launches tagged `tag` (cumulative over every step); `None` for
    /// a tag this canary does not launch.
    pub fn counters(&self, tag: LaunchTag) -> Option<&HealthCounters> {
        let i = self.launch_index(tag)?;
        let (head, tail) = (&self.head_counters, &self.tail_counters);
        Some([&head.k, &head.v, &tail.k, &tail.v][i])
    }

    /// The violation ring: the rows of the current (or last) step. Each `plan` empties it.
    pub fn ring(&self) -> &ViolationRing<R> {
        &self.ring
    }

    /// Steps completed (those that reached [`Step::verify_tail`]).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Violations recorded by every completed step (stored or dropped).
    pub fn total_violations(&self) -> u64 {
        self.violations
    }

    /// Where `tag` stands in [`tags`](Canary::tags) (head K, head V, tail K, tail V): the order
    /// in which [`buffer`](Canary::buffer), [`buffer_mut`](Canary::buffer_mut) and
    /// [`counters`](Canary::counters) list their fields.
    fn launch_index(&self, tag: LaunchTag) -> Option<usize> {
        self.tags().iter().position(|&t| t == tag)
    }

    /// The launch settings of `tag` with `real_kv`.
    fn launch<'k>(&self, tag: LaunchTag, real_kv: RealKv<'k>) -> LaunchSettings<'k> {
        LaunchSettings::new(tag)
            .with_real_kv(real_kv)
            .with_chain_position_assert(self.chain_position_assert)
    }

    /// Fills in the violations of the step that just ended and counts it.
    fn finish_step(&mut self, mut report: StepReport) -> StepReport {
        report.violations = self.ring.violations().collect();
        report.dropped = self.ring.dropped();
        self.steps += 1;
        self.violations += report.recorded();
        report
    }
}

impl<V, W, E, S, R, G> Canary<V, W, E, S, R, G>
where
    V: SameVerifyCapacity<V>,
    W: SameWriteReqCapacity<W>,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    /// Starts a step: runs the plan op on `inputs` (a batch planned for this canary's group) and
    /// empties the ring, so the step's report holds its own rows only.
    ///
    /// Tokens are checked by the verify launches exactly when `inputs` carry an expected-token
    /// pool. On error nothing is modified.
    pub fn plan<'a, X: ExpectedTokens>(
        &mut self,
        inputs: &PlanInputs<'a, G::Plan<'a>, X>,
    ) -> Result<Step<'_, Planned, Self>, Error> {
        let summary = cpu::plan(
            &self.shape,
            inputs,
            &mut self.verify_plan,
            &mut self.write_plan,
        )?;
        if self.ring.write_index() != 0 {
            self.ring.clear();
        }
        let token_check = inputs.expected.pool().is_some();
        Ok(Step::planned(self, summary, token_check))
    }
}

impl<V, W, E, S, R, G> fmt::Debug for Canary<V, W, E, S, R, G>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Canary")
            .field("group", &G::NAME)
            .field("shape", &self.shape)
            .field("slots", &self.head.k.capacity())
            .field("ring_rows", &self.ring.capacity())
            .field("steps", &self.steps)
            .field("violations", &self.violations)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
