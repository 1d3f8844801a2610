//! The backend seam: one trait, [`Backend`], that every place the ops can run implements — the
//! CPU reference ([`Cpu`]) and, with the `cuda` feature, a CUDA stream — so that code driving
//! the ops (the step API, the conformance runner, an engine's own loop) is written once, generic
//! over the backend.
//!
//! A backend fixes where buffers live ([`Backend::Memory`]), allocates them, and runs the verify
//! op on them; [`Writes`] runs the write op and [`PlanWith`] the plan op on the
//! inputs a backend accepts (every backend that plans the four typed host combinations also
//! plans [`RuntimePlanInputs`], whose group and pool are chosen at run time); [`Scatters`] runs
//! `scatter_req_token_ids`.
//! Every op keeps the contract of its CPU reference: capacities are compared by the types
//! (the same `Same*Capacity` bounds as [`cpu::plan`], [`cpu::write`] and [`cpu::verify`]), and an
//! op that returns an error has modified none of its outputs.
//!
//! What an op reports back differs by backend: the CPU ops return their summaries at once; a
//! device op only queues work. Each backend names what it returns ([`Backend::VerifyDone`],
//! [`Backend::WriteDone`], [`Backend::PlanDone`]).
//!
//! ```
//! use kv_canary::backend::{Backend, Cpu, PlanWith};
//! use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
//!
//! // Written once, for any backend that plans host inputs.
//! type Inputs<'a> = PlanInputs<'a, kv_canary::Full, kv_canary::NoExpectedTokens>;
//! fn plan_on<'a, B>(backend: &B, inputs: &Inputs<'a>) -> Result<B::PlanDone, kv_canary::Error>
//! where
//!     B: PlanWith<Inputs<'a>, Cap<8>, Cap<4>, Cap<16>>,
//! {
//!     let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
//!     let mut verify = backend.verify_plan(shape.verify_capacity())?;
//!     let mut write = backend.write_plan(shape.write_req_capacity())?;
//!     backend.plan(&shape, inputs, &mut verify, &mut write)
//! }
//!
//! let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
//! let batch = Batch::from_columns([2], [3], [1]);
//! let summary = plan_on(&Cpu, &PlanInputs::full(&batch, &table))?;
//! assert_eq!(summary.verify_num_valid, 3);
//! # Ok::<(), kv_canary::Error>(())
//! ```

use crate::canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchSettings, LaunchTag, TokenCheck,
    ViolationRing,
};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::cpu::{self, PlanSummary, ScatterSummary, VerifySummary, WriteSummary};
use crate::error::Error;
use crate::input::{
    BatchColumns, ExpectedTokenPool, ExpectedTokenTable, ExpectedTokens, Full, Group, IndexElement,
    NoExpectedTokens, PlanInputs, RuntimePlanInputs, Swa, WriteInputAssert, WriteInputSource,
    WriteInputs, WriteInputsView,
};
use crate::memory::{Host, Memory};
use crate::plan::{VerifyPlan, WritePlan};
use crate::real_kv::RealKv;
use crate::shape::Shape;

/// A place the canary ops run: allocates buffers in its [`Memory`] and runs verify on them (the
/// write op: [`Writes`]; the plan op: [`PlanWith`]).
pub trait Backend {
    /// Where this backend's buffers live: [`Host`] for the CPU, `Device` for CUDA.
    type Memory: Memory;
    /// The real-KV sources a launch of this backend folds (host byte slices for the CPU).
    type RealKv<'k>: Copy;
    /// The per-launch settings of this backend's write and verify ops.
    type Settings<'k>: Copy;
    /// What a verify launch returns (the CPU: its [`VerifySummary`]).
    type VerifyDone: Copy + Default + core::fmt::Debug;
    /// What a write launch returns (the CPU: its [`WriteSummary`]).
    type WriteDone: Copy + Default + core::fmt::Debug;
    /// What a plan launch returns (the CPU: its [`PlanSummary`]).
    type PlanDone: Copy + core::fmt::Debug;

    /// No real-KV fingerprint (head launches, sweeps).
    fn no_real_kv() -> Self::RealKv<'static>;

    /// The settings of one launch: its tag, the real-KV sources it folds, the chain-position
    /// assert flag (read by write only).
    fn settings<'k>(
        tag: LaunchTag,
        real_kv: Self::RealKv<'k>,
        chain_position_assert: ChainPositionAssert,
    ) -> Self::Settings<'k>;

    /// The settings of a write launch the step API queues right behind its own verify
    /// launches, with nothing of the engine's between (the tail stage); a backend may use that
    /// (the CUDA one lets such a write load, fold and chain its decode-sized requests before
    /// the verify completes, which writes none of what they read). Unchanged by default.
    #[doc(hidden)]
    fn after_own_verify<'k>(settings: Self::Settings<'k>) -> Self::Settings<'k> {
        settings
    }

    /// The settings of a verify launch the step API queues after its own launches of the
    /// step's head stage (the tail verify: the plan, then the head verify and write, perhaps
    /// the engine's forward pass, then this launch); a backend may use that (the CUDA one lets
    /// such a verify load its first plan columns before the launch ahead completes, since the
    /// plan completed before the head launches started). Unchanged by default.
    #[doc(hidden)]
    fn after_own_head_stage<'k>(settings: Self::Settings<'k>) -> Self::Settings<'k> {
        settings
    }

    /// Whether the step API queues a step's head writes with its tail writes
    /// ([`Writes::write_ends`]) instead of at `write`. `false` by default.
    #[doc(hidden)]
    fn defers_head_writes(&self) -> bool {
        false
    }

    /// `Ok` when every active source of `real_kv` covers slots `[0, slots)`, so that no launch
    /// over a canary of `slots` slots can fail on a real-KV read half-way through a step;
    /// otherwise [`Error::RealKvSlotOutOfRange`] naming the first source that falls short.
    fn check_real_kv_covers(real_kv: &Self::RealKv<'_>, slots: usize) -> Result<(), Error>;

    /// A verify plan of `capacity` entries (disabled, empty).
    fn verify_plan<C: Capacity>(&self, capacity: C) -> Result<VerifyPlan<C, Self::Memory>, Error>;
    /// A write plan of `capacity` requests (no request).
    fn write_plan<C: Capacity>(&self, capacity: C) -> Result<WritePlan<C, Self::Memory>, Error>;
    /// A canary buffer of `slots` slots, every record zero.
    fn canary_buffer<S: Capacity>(&self, slots: S) -> Result<CanaryBuffer<S, Self::Memory>, Error>;
    /// An empty violation ring of `rows` rows.
    fn violation_ring<R: Capacity>(&self, rows: R)
        -> Result<ViolationRing<R, Self::Memory>, Error>;
    /// A pair of health counters at 0.
    fn health_counters(&self) -> Result<HealthCounters<Self::Memory>, Error>;
    /// Per-token write inputs of `capacity` entries, input assert off, all zero.
    fn write_inputs<E: Capacity>(
        &self,
        capacity: E,
    ) -> Result<WriteInputs<E, crate::input::InputAssertOff, Self::Memory>, Error>;
    /// Empties `ring` (its write index back to 0).
    fn clear_ring<R: Capacity>(
        &self,
        ring: &mut ViolationRing<R, Self::Memory>,
    ) -> Result<(), Error>;

    /// The verify op (spec §5): checks the active entries of `plan` against `canary`, records
    /// mismatches into `ring` and counts into `counters`. Contract of [`cpu::verify`].
    #[allow(clippy::too_many_arguments, reason = "the verify op's own arguments")]
    fn verify<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB, Self::Memory>,
        check: K,
        settings: &Self::Settings<'_>,
        canary: &CanaryBuffer<S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: &mut HealthCounters<Self::Memory>,
    ) -> Result<Self::VerifyDone, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity;

    /// The verify op over a K and a V buffer against one plan (the step API's verify of one
    /// end): each half with its own settings, buffer and counters (`(K, V)` pairs), into one
    /// ring. Returns the halves' summaries, K first.
    ///
    /// The default runs [`verify`](Backend::verify) on K, then on V. A backend may queue both
    /// halves as one launch (the CUDA backend does: see `cuda::KernelTuning::pair_launches`,
    /// feature `cuda`); each half's rows and
    /// counters are then those of its own verify, and the two halves' rows may interleave in
    /// the ring.
    #[allow(
        clippy::too_many_arguments,
        reason = "the verify op's own arguments, twice"
    )]
    fn verify_pair<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB, Self::Memory>,
        check: K,
        settings: (&Self::Settings<'_>, &Self::Settings<'_>),
        canary: BufferPair<'_, S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: CountersPairMut<'_, Self::Memory>,
    ) -> Result<(Self::VerifyDone, Self::VerifyDone), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity,
    {
        let k = self.verify(shape, plan, check, settings.0, canary.0, ring, counters.0)?;
        let v = self.verify(shape, plan, check, settings.1, canary.1, ring, counters.1)?;
        Ok((k, v))
    }
}

/// Deferred head writes: the writes of one end of a step, the K half's and the V
/// half's when the pool has one: their settings, canary buffers and counters.
#[doc(hidden)]
#[allow(
    clippy::type_complexity,
    reason = "a half and an optional half of each"
)]
pub struct EndWrites<'e, 'k, S: Capacity, B: Backend + ?Sized> {
    /// The K half's settings, and the V half's.
    pub settings: (&'e B::Settings<'k>, Option<&'e B::Settings<'k>>),
    /// The K half's buffer, and the V half's.
    pub canary: (
        &'e mut CanaryBuffer<S, B::Memory>,
        Option<&'e mut CanaryBuffer<S, B::Memory>>,
    ),
    /// The K half's counters, and the V half's.
    pub counters: (
        &'e mut HealthCounters<B::Memory>,
        Option<&'e mut HealthCounters<B::Memory>>,
    ),
}

/// What [`Writes::write_ends`] returns: the tail writes' returns and the head writes' (K, V).
#[doc(hidden)]
pub type EndsDone<D> = ((D, D), (D, D));

/// The K and the V half's canary buffers of one end, for the pair ops (`(K, V)`).
pub type BufferPair<'a, S, M> = (&'a CanaryBuffer<S, M>, &'a CanaryBuffer<S, M>);
/// The K and the V half's canary buffers of one end, writable (`(K, V)`).
pub type BufferPairMut<'a, S, M> = (&'a mut CanaryBuffer<S, M>, &'a mut CanaryBuffer<S, M>);
/// The K and the V half's health counters (`(K, V)`).
pub type CountersPairMut<'a, M> = (&'a mut HealthCounters<M>, &'a mut HealthCounters<M>);

/// A backend that runs the plan op on inputs `I` (spec §3) for a shape of capacities `V`, `W`,
/// `E`: the CPU on host [`PlanInputs`], a CUDA stream on device plan inputs.
///
/// The shape's capacities are parameters of the trait (not of its method) so that a backend can
/// demand more of them than every backend does (the CUDA plan also compares the device batch's
/// capacity with `W`).
pub trait PlanWith<I: ?Sized, V: Capacity, W: Capacity, E: Capacity>: Backend {
    /// Plans `inputs` into `verify` and `write`. Contract of [`cpu::plan`].
    fn plan<VB, WB>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &I,
        verify: &mut VerifyPlan<VB, Self::Memory>,
        write: &mut WritePlan<WB, Self::Memory>,
    ) -> Result<Self::PlanDone, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity;

    /// [`plan`](Self::plan), then [`Backend::clear_ring`] of `ring`, then the head verify
    /// against the plan just made, with no token check ([`Backend::verify`] of the K half,
    /// [`Backend::verify_pair`] when a V half is given): the calls of the step API's
    /// `plan_and_verify_head`, for a backend that can make them in fewer launches (the CUDA
    /// one: `cuda::plan_verify_head`). Returns the plan's and the verify launches' returns (the
    /// V half's default when there is none), or `None`, having done nothing, when it has no
    /// such form for these inputs: the caller then makes the three calls. `None` by default.
    #[doc(hidden)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the plan's and the verify's own arguments"
    )]
    #[allow(clippy::type_complexity, reason = "the returns of the three launches")]
    fn plan_verify_head<VB, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &I,
        verify: &mut VerifyPlan<VB, Self::Memory>,
        write: &mut WritePlan<WB, Self::Memory>,
        settings: (&Self::Settings<'_>, Option<&Self::Settings<'_>>),
        canary: (
            &CanaryBuffer<S, Self::Memory>,
            Option<&CanaryBuffer<S, Self::Memory>>,
        ),
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: (
            &mut HealthCounters<Self::Memory>,
            Option<&mut HealthCounters<Self::Memory>>,
        ),
    ) -> Result<Option<(Self::PlanDone, Self::VerifyDone, Self::VerifyDone)>, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        let _ = (
            shape, inputs, verify, write, settings, canary, ring, counters,
        );
        Ok(None)
    }
}

/// The write op (spec §4) of a backend, for write inputs with the input assert `A`
/// ([`InputAssertOff`](crate::InputAssertOff) or [`InputAssertOn`](crate::InputAssertOn)): the
/// CPU writes both, the CUDA backend both states its kernels implement. A trait of its own so
/// that a backend can implement it for the assert states it supports.
pub trait Writes<A: WriteInputAssert>: Backend {
    /// Stamps the planned tokens of `inputs` into `canary`, extending each request's hash
    /// chain. Contract of [`cpu::write`].
    #[allow(clippy::too_many_arguments, reason = "the write op's own arguments")]
    fn write<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &WriteInputs<EB, A, Self::Memory>,
        settings: &Self::Settings<'_>,
        canary: &mut CanaryBuffer<S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: &mut HealthCounters<Self::Memory>,
    ) -> Result<Self::WriteDone, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity;

    /// The write op into a K and a V buffer from one plan and one set of inputs (the step
    /// API's write of one end): each half with its own settings, buffer and counters (`(K, V)`
    /// pairs), into one ring. Returns the halves' summaries, K first.
    ///
    /// The default runs [`write`](Writes::write) into K, then into V; a backend may queue both
    /// halves as one launch (see [`Backend::verify_pair`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "the write op's own arguments, twice"
    )]
    fn write_pair<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &WriteInputs<EB, A, Self::Memory>,
        settings: (&Self::Settings<'_>, &Self::Settings<'_>),
        canary: BufferPairMut<'_, S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: CountersPairMut<'_, Self::Memory>,
    ) -> Result<(Self::WriteDone, Self::WriteDone), Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        let k = self.write(shape, plan, inputs, settings.0, canary.0, ring, counters.0)?;
        let v = self.write(shape, plan, inputs, settings.1, canary.1, ring, counters.1)?;
        Ok((k, v))
    }

    /// The tail writes and the head writes of a step in as few launches as the
    /// backend can (the CUDA one: one), or `None`, having done nothing: the caller then writes
    /// the tail and then the head. `None` by default.
    #[doc(hidden)]
    fn write_ends<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &WriteInputs<EB, A, Self::Memory>,
        tail: EndWrites<'_, '_, S, Self>,
        head: EndWrites<'_, '_, S, Self>,
        ring: &mut ViolationRing<R, Self::Memory>,
    ) -> Result<Option<EndsDone<Self::WriteDone>>, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        let _ = (shape, plan, inputs, tail, head, ring);
        Ok(None)
    }
}

/// The write op of a backend on write inputs `I`, owned or borrowed: every backend writes its
/// owned [`WriteInputs`] in its memory (through [`Writes`]), and the CPU also writes
/// [`WriteInputsView`]s of an engine's own host slices. The step API's write stage takes any
/// inputs its backend writes from.
pub trait WritesFrom<I: WriteInputSource + ?Sized>: Backend {
    /// Stamps the planned tokens of `inputs` into `canary`. Contract of [`cpu::write`].
    #[allow(clippy::too_many_arguments, reason = "the write op's own arguments")]
    fn write_from<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &I,
        settings: &Self::Settings<'_>,
        canary: &mut CanaryBuffer<S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: &mut HealthCounters<Self::Memory>,
    ) -> Result<Self::WriteDone, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<I::Capacity>,
        WB: Capacity,
        S: Capacity,
        R: Capacity;

    /// The write op into a K and a V buffer (see [`Writes::write_pair`]). The default runs
    /// [`write_from`](WritesFrom::write_from) into K, then into V.
    #[allow(
        clippy::too_many_arguments,
        reason = "the write op's own arguments, twice"
    )]
    fn write_from_pair<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &I,
        settings: (&Self::Settings<'_>, &Self::Settings<'_>),
        canary: BufferPairMut<'_, S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: CountersPairMut<'_, Self::Memory>,
    ) -> Result<(Self::WriteDone, Self::WriteDone), Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<I::Capacity>,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        let k = self.write_from(shape, plan, inputs, settings.0, canary.0, ring, counters.0)?;
        let v = self.write_from(shape, plan, inputs, settings.1, canary.1, ring, counters.1)?;
        Ok((k, v))
    }

    /// [`Writes::write_ends`] on these inputs; `None` by default.
    #[doc(hidden)]
    fn write_from_ends<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &I,
        tail: EndWrites<'_, '_, S, Self>,
        head: EndWrites<'_, '_, S, Self>,
        ring: &mut ViolationRing<R, Self::Memory>,
    ) -> Result<Option<EndsDone<Self::WriteDone>>, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<I::Capacity>,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        let _ = (shape, plan, inputs, tail, head, ring);
        Ok(None)
    }
}

/// Every backend writes its own [`WriteInputs`] through its [`Writes`] implementation.
impl<B, EB, A> WritesFrom<WriteInputs<EB, A, B::Memory>> for B
where
    B: Writes<A>,
    EB: Capacity,
    A: WriteInputAssert,
{
    fn write_from<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &WriteInputs<EB, A, B::Memory>,
        settings: &Self::Settings<'_>,
        canary: &mut CanaryBuffer<S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: &mut HealthCounters<Self::Memory>,
    ) -> Result<Self::WriteDone, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        self.write(shape, plan, inputs, settings, canary, ring, counters)
    }

    fn write_from_pair<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &WriteInputs<EB, A, B::Memory>,
        settings: (&Self::Settings<'_>, &Self::Settings<'_>),
        canary: BufferPairMut<'_, S, Self::Memory>,
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: CountersPairMut<'_, Self::Memory>,
    ) -> Result<(Self::WriteDone, Self::WriteDone), Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        self.write_pair(shape, plan, inputs, settings, canary, ring, counters)
    }

    fn write_from_ends<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Self::Memory>,
        inputs: &WriteInputs<EB, A, B::Memory>,
        tail: EndWrites<'_, '_, S, Self>,
        head: EndWrites<'_, '_, S, Self>,
        ring: &mut ViolationRing<R, Self::Memory>,
    ) -> Result<Option<EndsDone<Self::WriteDone>>, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        self.write_ends(shape, plan, inputs, tail, head, ring)
    }
}

/// The CPU writes views of an engine's host slices, of any element type.
impl<EB, A, T, P, L> WritesFrom<WriteInputsView<'_, EB, A, T, P, L>> for Cpu
where
    EB: Capacity,
    A: WriteInputAssert,
    T: IndexElement,
    P: IndexElement,
    L: IndexElement,
{
    fn write_from<V, W, E, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB>,
        inputs: &WriteInputsView<'_, EB, A, T, P, L>,
        settings: &LaunchSettings<'_>,
        canary: &mut CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<WriteSummary, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        cpu::write(shape, plan, inputs, settings, canary, ring, counters)
    }
}

/// Plans inputs whose group and expected-token source are chosen at run time on any backend
/// that plans the four typed host combinations: the choice becomes types through
/// [`with_plan_inputs_choice!`](crate::with_plan_inputs_choice), then the typed plan runs.
impl<'a, B, V, W, E> PlanWith<RuntimePlanInputs<'a>, V, W, E> for B
where
    B: PlanWith<PlanInputs<'a, Full, NoExpectedTokens>, V, W, E>
        + PlanWith<PlanInputs<'a, Full, ExpectedTokenPool<'a>>, V, W, E>
        + PlanWith<PlanInputs<'a, Swa<'a>, NoExpectedTokens>, V, W, E>
        + PlanWith<PlanInputs<'a, Swa<'a>, ExpectedTokenPool<'a>>, V, W, E>,
    V: Capacity,
    W: Capacity,
    E: Capacity,
{
    fn plan<VB, WB>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &RuntimePlanInputs<'a>,
        verify: &mut VerifyPlan<VB, Self::Memory>,
        write: &mut WritePlan<WB, Self::Memory>,
    ) -> Result<Self::PlanDone, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
    {
        crate::with_plan_inputs_choice!(
            inputs.base,
            group: inputs.swa,
            expected: inputs.expected,
            |typed| PlanWith::plan(self, shape, &typed, verify, write)
        )
    }

    fn plan_verify_head<VB, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &RuntimePlanInputs<'a>,
        verify: &mut VerifyPlan<VB, Self::Memory>,
        write: &mut WritePlan<WB, Self::Memory>,
        settings: (&Self::Settings<'_>, Option<&Self::Settings<'_>>),
        canary: (
            &CanaryBuffer<S, Self::Memory>,
            Option<&CanaryBuffer<S, Self::Memory>>,
        ),
        ring: &mut ViolationRing<R, Self::Memory>,
        counters: (
            &mut HealthCounters<Self::Memory>,
            Option<&mut HealthCounters<Self::Memory>>,
        ),
    ) -> Result<Option<(Self::PlanDone, Self::VerifyDone, Self::VerifyDone)>, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        crate::with_plan_inputs_choice!(
            inputs.base,
            group: inputs.swa,
            expected: inputs.expected,
            |typed| PlanWith::plan_verify_head(
                self, shape, &typed, verify, write, settings, canary, ring, counters
            )
        )
    }
}

/// A backend that runs `scatter_req_token_ids` (spec §6) into a host expected-token pool.
pub trait Scatters: Backend {
    /// What a scatter returns (the CPU: its [`ScatterSummary`]).
    type ScatterDone: Copy + Default + core::fmt::Debug;

    /// Copies each request's tokens of `flat_in` (bounded by `offsets`) into its row
    /// `req_pool_indices[r]` of `pool_out`. Contract of [`cpu::scatter_req_token_ids`].
    fn scatter_req_token_ids(
        &self,
        flat_in: &[i64],
        offsets: &[i64],
        req_pool_indices: &[i64],
        pool_out: &mut ExpectedTokenTable,
    ) -> Result<Self::ScatterDone, Error>;
}

/// The CPU reference backend: host buffers, the ops of [`cpu`], which return their summaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cpu;

impl Backend for Cpu {
    type Memory = Host;
    type RealKv<'k> = RealKv<'k>;
    type Settings<'k> = LaunchSettings<'k>;
    type VerifyDone = VerifySummary;
    type WriteDone = WriteSummary;
    type PlanDone = PlanSummary;

    fn no_real_kv() -> RealKv<'static> {
        RealKv::NONE
    }

    fn settings<'k>(
        tag: LaunchTag,
        real_kv: Self::RealKv<'k>,
        chain_position_assert: ChainPositionAssert,
    ) -> Self::Settings<'k> {
        LaunchSettings::new(tag)
            .with_real_kv(real_kv)
            .with_chain_position_assert(chain_position_assert)
    }

    fn check_real_kv_covers(real_kv: &RealKv<'_>, slots: usize) -> Result<(), Error> {
        if !real_kv.is_active() || slots == 0 {
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

    fn verify_plan<C: Capacity>(&self, capacity: C) -> Result<VerifyPlan<C>, Error> {
        VerifyPlan::try_with_capacity(capacity)
    }

    fn write_plan<C: Capacity>(&self, capacity: C) -> Result<WritePlan<C>, Error> {
        WritePlan::try_with_capacity(capacity)
    }

    fn canary_buffer<S: Capacity>(&self, slots: S) -> Result<CanaryBuffer<S>, Error> {
        CanaryBuffer::try_with_capacity(slots)
    }

    fn violation_ring<R: Capacity>(&self, rows: R) -> Result<ViolationRing<R>, Error> {
        ViolationRing::try_with_capacity(rows)
    }

    fn health_counters(&self) -> Result<HealthCounters, Error> {
        Ok(HealthCounters::new())
    }

    fn write_inputs<E: Capacity>(&self, capacity: E) -> Result<WriteInputs<E>, Error> {
        WriteInputs::try_with_capacity(capacity)
    }

    fn clear_ring<R: Capacity>(&self, ring: &mut ViolationRing<R>) -> Result<(), Error> {
        if ring.write_index() != 0 {
            ring.clear();
        }
        Ok(())
    }

    fn verify<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB>,
        check: K,
        settings: &LaunchSettings<'_>,
        canary: &CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<VerifySummary, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity,
    {
        cpu::verify(shape, plan, check, settings, canary, ring, counters)
    }
}

impl<A: WriteInputAssert> Writes<A> for Cpu {
    fn write<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB>,
        inputs: &WriteInputs<EB, A>,
        settings: &LaunchSettings<'_>,
        canary: &mut CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<WriteSummary, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        cpu::write(shape, plan, inputs, settings, canary, ring, counters)
    }
}

impl<'a, G, X, BE, TE, V, W, E> PlanWith<PlanInputs<'a, G, X, BE, TE>, V, W, E> for Cpu
where
    G: Group,
    X: ExpectedTokens,
    BE: BatchColumns,
    TE: IndexElement,
    V: Capacity,
    W: Capacity,
    E: Capacity,
{
    fn plan<VB, WB>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &PlanInputs<'a, G, X, BE, TE>,
        verify: &mut VerifyPlan<VB>,
        write: &mut WritePlan<WB>,
    ) -> Result<PlanSummary, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
    {
        cpu::plan(shape, inputs, verify, write)
    }
}

impl Scatters for Cpu {
    type ScatterDone = ScatterSummary;

    fn scatter_req_token_ids(
        &self,
        flat_in: &[i64],
        offsets: &[i64],
        req_pool_indices: &[i64],
        pool_out: &mut ExpectedTokenTable,
    ) -> Result<ScatterSummary, Error> {
        cpu::scatter_req_token_ids(flat_in, offsets, req_pool_indices, pool_out)
    }
}
