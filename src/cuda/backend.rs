//! The CUDA side of the backend seam: a [`Stream`] is a [`Backend`] whose buffers live in
//! device memory, so the step API ([`step::Canary`](crate::step::Canary)) runs on the GPU with
//! the same type-state stages as on the CPU:
//!
//! ```no_run
//! use kv_canary::cuda::{self, Gpu, Stream};
//! use kv_canary::step::Canary;
//! use kv_canary::{Batch, Cap, ReqToToken, Shape};
//!
//! let gpu = Gpu::new()?;
//! let shape = Shape::<Cap<32>, Cap<4>, Cap<16>>::new();
//! // Every buffer of the canary allocated on the device, from the one shape.
//! let mut canary = Canary::full_on(Stream::new(&gpu)?, shape, Cap::<64>, Cap::<16>)?;
//! let inputs = canary.try_write_inputs()?; // device write inputs, filled by the engine
//! let batch = shape.device_batch(&gpu)?;
//! let table = cuda::DeviceReqToToken::from_host(&gpu, &ReqToToken::from_vec(4, 8, (0..32).collect())?)?;
//! batch.upload(&Batch::from_columns([1], [0], [3]))?;
//! let step = canary
//!     .plan(&cuda::PlanInputs::full(&batch, &table))?
//!     .verify_head()?
//!     .write(&inputs)?;
//! // ... the forward pass writes this step's KV bytes ...
//! let pending = step.verify_tail(cuda::TailKvOnDevice::NONE)?; // queued, returns at once
//! // ... queue the next step here; take this one when its copies have landed ...
//! let report = pending.wait()?; // or `try_take()`, which never blocks
//! assert!(report.is_clean());
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! # The host timeline of a device step
//!
//! Every call below queues work on the canary's stream and returns; none waits for the GPU.
//!
//! | host call | queued on the stream |
//! |---|---|
//! | `plan` | the ring clear (one `kv_canary_ring_clear` launch) and the plan launch (the clear ahead of the plan when the plan is fused with the head verify, after it otherwise) |
//! | `verify_head` | `HEAD_K` + `HEAD_V` verify (one pair launch) |
//! | `write` | `HEAD_K` + `HEAD_V` write (one pair launch) |
//! | `verify_tail` | `TAIL_K` + `TAIL_V` verify, then write (a pair launch each), then the report's copies into pinned host memory (one `kv_canary_readback` launch writing into the mapped staging: the ring rows the step recorded, write index, 8 counters, 3 plan scalars, the write offsets, the status word) and an event |
//! | [`PendingDeviceReport::try_take`](super::PendingDeviceReport::try_take) | nothing: queries the event (`cuEventQuery`), decodes if it completed |
//! | [`PendingDeviceReport::wait`](super::PendingDeviceReport::wait) | nothing: blocks on the event (`cuEventSynchronize`) |
//!
//! Where the host can block: `wait` (by design); a step queued while every pinned staging of
//! the stream is held by unread reports allocates a new one (`cuMemHostAlloc`, the first two
//! steps of a canary and never again when reports are taken one step late); and the
//! synchronous uploads of inputs (`upload`), which views of the engine's own memory (`from_raw`)
//! or the stream-ordered `upload_on` replace. So
//! an engine that queues step N+1 and then takes step N's report (by then complete, or
//! `try_take` at step N+2) stalls zero times per step. Step N+1's ring clear is ordered after
//! step N's copies on the one stream, so it never erases rows that have not been copied.
//!
//! # Graph capture of a whole step
//!
//! Nothing in a step needs the host: no synchronisation, and no allocation once the kernels
//! are loaded and the report stagings reserved ([`Canary::prepare_capture`]). So a whole step
//! can be captured into a CUDA graph and replayed over refilled inputs, in two ways:
//!
//! * [`StepGraph`](super::StepGraph) owns the canary, the inputs and the step closure, captures
//!   the step into two graph instances and alternates them, so that replay N's report is read
//!   while replay N+1 runs; it refuses a replay that would overwrite an unread report
//!   ([`Error::ReportUnread`]).
//! * The engine's own capture: the engine calls [`Canary::prepare_capture`], begins a capture
//!   on its stream (its own `cuStreamBeginCapture` on the stream it wrapped with
//!   [`Stream::from_raw`]), runs the step stages on the canary (and its own kernels on the
//!   same stream, through [`Step::backend`](crate::step::Step::backend)), and ends the
//!   capture. `verify_tail` sees the stream capturing ([`Stream::is_capturing`]): it takes a
//!   reserved staging, captures the report's copies instead of queueing them and returns a
//!   pending report that [`into_captured`](super::PendingDeviceReport::into_captured) turns
//!   into a [`CapturedReport`](super::CapturedReport). After each of its own launches of the
//!   graph the engine calls [`CapturedReport::replayed`](super::CapturedReport::replayed)
//!   (unsafe: the engine promises the launch, and keeps the canary, its inputs and the
//!   `CapturedReport` alive while the graph can replay), checks
//!   [`can_replay`](super::CapturedReport::can_replay) before the next launch, and takes each
//!   replay's report with `try_take` or `wait`. GPU test `step_graph_engine_capture` does
//!   this on a raw stream of its own.

use super::device::plan_inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use super::device::settings::{ChainAssert, DeviceRealKv, DeviceRealKvSource, DeviceSettings};
use super::device::stream::Stream;
use super::device::write_inputs::DeviceInputAssert;
use super::driver::array::ViewableSlice;
use super::ops;
use super::report::{self, PendingDeviceReport};
use crate::backend::{
    Backend, BufferPair, BufferPairMut, CountersPairMut, EndWrites, EndsDone, PlanWith, Writes,
};
use crate::canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchTag, SlotStride, TokenCheck,
    ViolationRing,
};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::input::{InputAssertOff, WriteInputs};
use crate::memory::Device;
use crate::plan::{VerifyPlan, WritePlan};
use crate::real_kv::{PagedShape, RealKvHashMode, TokenLayout};
use crate::shape::Shape;
use crate::step::{FinishedStep, KvPair, PlanInputsOf, Reports, SwaGroup};
use crate::Error;
#[cfg(feature = "cudarc")]
use std::sync::Arc;

/// A canary whose launches run on a CUDA [`Stream`]: the type an engine's struct holds for
/// [`Canary::full_on`](crate::step::Canary::full_on) (`G` = [`Full`](crate::Full)) or
/// [`Canary::swa_on`](crate::step::Canary::swa_on) (`G` = [`SwaGroup`]) on a stream, capacities
/// as for [`Canary`](crate::step::Canary).
pub type StreamCanary<V, W, E, S, R, G = crate::input::Full> =
    crate::step::Canary<V, W, E, S, R, G, Stream>;

/// The real-KV fingerprints of a device step's tail launches (K half, V half).
pub type TailKvOnDevice<'a> = KvPair<DeviceRealKv<'a>>;

impl KvPair<DeviceRealKv<'static>> {
    /// No fingerprint on either half.
    pub const NONE: TailKvOnDevice<'static> = KvPair {
        k: DeviceRealKv::NONE,
        v: DeviceRealKv::NONE,
    };
}

impl<'a> KvPair<DeviceRealKv<'a>> {
    /// The tail fingerprints of a paged engine's K and V caches in device memory, `num_blocks`
    /// blocks of `shape` in vLLM's layouts, hashed under `mode` (ALL: a token's whole vector):
    /// the twin of the host's [`TailKv::vllm_paged`](crate::step::TailKv::vllm_paged), with
    /// the errors of [`DeviceRealKvSource::paged`].
    pub fn vllm_paged<B: ViewableSlice<u8> + ?Sized>(
        mode: RealKvHashMode,
        k: &'a B,
        v: &'a B,
        num_blocks: usize,
        shape: PagedShape,
    ) -> Result<Self, Error> {
        let one = |bytes: &'a B, layout| -> Result<DeviceRealKv<'a>, Error> {
            let source =
                DeviceRealKvSource::paged(bytes, num_blocks, layout, shape, shape.token_bytes())?;
            Ok(DeviceRealKv::new(mode, [source]))
        };
        Ok(KvPair {
            k: one(k, TokenLayout::vllm_k(shape)?)?,
            v: one(v, TokenLayout::vllm_v(shape)?)?,
        })
    }
}

#[cfg(feature = "cudarc")]
impl KvPair<super::device::cudarc_views::CudarcKvSource<'static>> {
    /// A paged engine's K and V caches in cudarc memory this pair keeps alive (`Arc`s of the
    /// engine's slices, of any element type: a bf16 cache is read as its bytes), `num_blocks`
    /// blocks of `shape` in vLLM's layouts, every byte of a token read: made once and kept,
    /// its [`fingerprints`](KvPair::fingerprints) are each step's tail (and each sweep's). The
    /// twin of [`vllm_paged`](KvPair::vllm_paged) for memory the crate only views through
    /// cudarc, with the errors of `CudarcKvSource::shared` and `with_token_layout`.
    pub fn vllm_paged_cudarc<T, S>(
        gpu: &super::device::gpu::Gpu,
        k: Arc<S>,
        v: Arc<S>,
        num_blocks: usize,
        shape: PagedShape,
    ) -> Result<Self, Error>
    where
        S: cudarc::driver::DevicePtr<T> + Send + Sync + 'static,
    {
        use super::device::cudarc_views::CudarcKvSource;
        use crate::real_kv::{RealKvParams, RowLayout};
        let rows = RowLayout::dense(num_blocks, shape.block_bytes());
        let params =
            RealKvParams::from_sizes(shape.block_size, shape.token_bytes(), shape.token_bytes());
        let one = |bytes, layout| -> Result<CudarcKvSource<'static>, Error> {
            CudarcKvSource::shared(gpu, bytes, 0, rows, params)?.with_token_layout(layout)
        };
        Ok(KvPair {
            k: one(k, TokenLayout::vllm_k(shape)?)?,
            v: one(v, TokenLayout::vllm_v(shape)?)?,
        })
    }
}

#[cfg(feature = "cudarc")]
impl KvPair<super::device::cudarc_views::CudarcKvSource<'_>> {
    /// Both halves' sources hashed under `mode` (ALL: a token's whole vector): a step's tail
    /// fingerprints ([`TailKvOnDevice`]) or a sweep's.
    pub fn fingerprints(&self, mode: RealKvHashMode) -> TailKvOnDevice<'_> {
        KvPair {
            k: DeviceRealKv::new(mode, [self.k.source()]),
            v: DeviceRealKv::new(mode, [self.v.source()]),
        }
    }
}

// A device canary can be built on one thread and driven from another (one canary per device,
// each on its own thread), and it borrows nothing (its stream holds a `Gpu` handle), so an
// engine can keep it in its own structs.
const _: fn() = || {
    fn owned<T: Send + 'static>() {}
    owned::<
        crate::step::Canary<
            crate::capacity::Cap<8>,
            crate::capacity::Cap<4>,
            crate::capacity::Cap<16>,
            crate::capacity::Cap<64>,
            crate::capacity::Cap<16>,
            crate::input::Full,
            Stream,
        >,
    >();
};

impl Backend for Stream {
    type Memory = Device;
    type RealKv<'k> = DeviceRealKv<'k>;
    type Settings<'k> = DeviceSettings<'k>;
    type VerifyDone = ();
    type WriteDone = ();
    type PlanDone = ();

    fn no_real_kv() -> DeviceRealKv<'static> {
        DeviceRealKv::NONE
    }

    fn settings<'k>(
        tag: LaunchTag,
        real_kv: Self::RealKv<'k>,
        chain_position_assert: ChainPositionAssert,
    ) -> Self::Settings<'k> {
        DeviceSettings {
            tag,
            real_kv,
            chain_position_assert: ChainAssert::Fixed(chain_position_assert),
            follows_verify: false,
            follows_head_stage: false,
        }
    }

    fn after_own_verify<'k>(settings: Self::Settings<'k>) -> Self::Settings<'k> {
        settings.following_verify()
    }

    fn after_own_head_stage<'k>(settings: Self::Settings<'k>) -> Self::Settings<'k> {
        settings.following_head_stage()
    }

    fn defers_head_writes(&self) -> bool {
        self.gpu().kernel_tuning().defer_head_writes
    }

    fn check_real_kv_covers(real_kv: &DeviceRealKv<'_>, slots: usize) -> Result<(), Error> {
        real_kv.check_covers(slots)
    }

    // Each allocation zeroes its buffer with a synchronous memset on the legacy default stream;
    // on a non-blocking or foreign stream `settle` synchronises the context after it, so the
    // canary's first launch never races its own zeroing.

    fn verify_plan<C: Capacity>(&self, capacity: C) -> Result<VerifyPlan<C, Device>, Error> {
        settle(self, VerifyPlan::on_device(self.gpu(), capacity))
    }

    fn write_plan<C: Capacity>(&self, capacity: C) -> Result<WritePlan<C, Device>, Error> {
        settle(self, WritePlan::on_device(self.gpu(), capacity))
    }

    fn canary_buffer<S: Capacity>(&self, slots: S) -> Result<CanaryBuffer<S, Device>, Error> {
        settle(
            self,
            CanaryBuffer::on_device(self.gpu(), slots, SlotStride::DEFAULT),
        )
    }

    fn violation_ring<R: Capacity>(&self, rows: R) -> Result<ViolationRing<R, Device>, Error> {
        settle(self, ViolationRing::on_device(self.gpu(), rows))
    }

    fn health_counters(&self) -> Result<HealthCounters<Device>, Error> {
        settle(self, HealthCounters::on_device(self.gpu()))
    }

    fn write_inputs<E: Capacity>(
        &self,
        capacity: E,
    ) -> Result<WriteInputs<E, InputAssertOff, Device>, Error> {
        settle(self, WriteInputs::on_device(self.gpu(), capacity))
    }

    /// Queues the clear on the stream (one `kv_canary_ring_clear` launch, no host
    /// synchronisation).
    fn clear_ring<R: Capacity>(&self, ring: &mut ViolationRing<R, Device>) -> Result<(), Error> {
        ring.clear_on(self)
    }

    fn verify<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB, Device>,
        check: K,
        settings: &DeviceSettings<'_>,
        canary: &CanaryBuffer<S, Device>,
        ring: &mut ViolationRing<R, Device>,
        counters: &mut HealthCounters<Device>,
    ) -> Result<(), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity,
    {
        ops::verify::verify(self, shape, plan, check, settings, canary, ring, counters)
    }

    /// One pair launch for both halves when they use the same kernel and grid
    /// ([`KernelTuning::pair_launches`](super::KernelTuning::pair_launches)), else two.
    fn verify_pair<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB, Device>,
        check: K,
        settings: (&DeviceSettings<'_>, &DeviceSettings<'_>),
        canary: BufferPair<'_, S, Device>,
        ring: &mut ViolationRing<R, Device>,
        counters: CountersPairMut<'_, Device>,
    ) -> Result<((), ()), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity,
    {
        ops::verify::verify_pair(
            self,
            shape,
            plan,
            check,
            settings,
            canary,
            ring,
            (&*counters.0, &*counters.1),
        )
        .map(|()| ((), ()))
    }
}

impl<V, W, E, S, R, G> crate::step::Canary<V, W, E, S, R, G, Stream>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: crate::step::GroupKind,
{
    /// Prepares the canary for steps captured into a graph, which may not load modules or
    /// allocate: loads every kernel file and makes sure `reports` pinned report stagings of
    /// this canary's size are free on its stream (allocating the missing ones now; each
    /// captured step takes one, for the graph's lifetime).
    /// [`StepGraph::capture`](super::StepGraph::capture) calls it itself; an engine that
    /// captures steps on its own stream calls it before each capture.
    pub fn prepare_capture(&self, reports: usize) -> Result<(), Error> {
        let stream = self.backend();
        stream.gpu().load_all()?;
        let offsets = self.plans().1.offsets.len();
        report::reserve(stream, self.ring().capacity().get(), offsets, reports)
    }
}

/// `allocated`, once its zeroing has landed for work on `stream` (a context synchronisation for
/// a stream not ordered with the legacy default stream, nothing for a blocking one).
fn settle<T>(stream: &Stream, allocated: Result<T, Error>) -> Result<T, Error> {
    let buffer = allocated?;
    stream.settle_transfers()?;
    Ok(buffer)
}

/// The device write kernels implement both input-assert states.
impl<A: DeviceInputAssert> Writes<A> for Stream {
    /// One `kv_canary_write*_ends` launch (K and V of both ends), or one pair launch of the tail
    /// and the head write of a K-only pool.
    fn write_ends<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Device>,
        inputs: &WriteInputs<EB, A, Device>,
        tail: EndWrites<'_, '_, S, Self>,
        head: EndWrites<'_, '_, S, Self>,
        ring: &mut ViolationRing<R, Device>,
    ) -> Result<Option<EndsDone<()>>, Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        // One kernel for all the halves: the tail halves fold alike, the head halves fold nothing
        // (else the caller writes the ends separately).
        let fold = tail.settings.0.real_kv.fold();
        if tail.settings.1.is_some_and(|v| v.real_kv.fold() != fold)
            || head.settings.0.real_kv.fold() != crate::cuda::abi::kernels::Fold::None
            || head
                .settings
                .1
                .is_some_and(|v| v.real_kv.fold() != crate::cuda::abi::kernels::Fold::None)
        {
            return Ok(None);
        }
        match (
            tail.settings.1,
            tail.canary.1,
            tail.counters.1,
            head.settings.1,
            head.canary.1,
            head.counters.1,
        ) {
            (Some(tsv), Some(tbv), Some(tcv), Some(hsv), Some(hbv), Some(hcv)) => {
                ops::write::write_ends(
                    self,
                    shape,
                    plan,
                    inputs,
                    [tail.settings.0, tsv, head.settings.0, hsv],
                    [&*tail.canary.0, &*tbv, &*head.canary.0, &*hbv],
                    ring,
                    [&*tail.counters.0, &*tcv, &*head.counters.0, &*hcv],
                )?
            }
            (None, None, None, None, None, None) => ops::write::write_ends_k(
                self,
                shape,
                plan,
                inputs,
                [tail.settings.0, head.settings.0],
                [&*tail.canary.0, &*head.canary.0],
                ring,
                [&*tail.counters.0, &*head.counters.0],
            )?,
            _ => return Ok(None),
        }
        Ok(Some((((), ()), ((), ()))))
    }

    fn write<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Device>,
        inputs: &WriteInputs<EB, A, Device>,
        settings: &DeviceSettings<'_>,
        canary: &mut CanaryBuffer<S, Device>,
        ring: &mut ViolationRing<R, Device>,
        counters: &mut HealthCounters<Device>,
    ) -> Result<(), Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        ops::write::write(self, shape, plan, inputs, settings, canary, ring, counters)
    }

    /// One pair launch for both halves when they use the same kernel
    /// ([`KernelTuning::pair_launches`](super::KernelTuning::pair_launches)), else two.
    fn write_pair<V, W, E, WB, EB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB, Device>,
        inputs: &WriteInputs<EB, A, Device>,
        settings: (&DeviceSettings<'_>, &DeviceSettings<'_>),
        canary: BufferPairMut<'_, S, Device>,
        ring: &mut ViolationRing<R, Device>,
        counters: CountersPairMut<'_, Device>,
    ) -> Result<((), ()), Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        ops::write::write_pair(
            self,
            shape,
            plan,
            inputs,
            settings,
            (&*canary.0, &*canary.1),
            ring,
            (&*counters.0, &*counters.1),
        )
        .map(|()| ((), ()))
    }
}

impl<'a, V, W, E, BB, G, X> PlanWith<PlanInputs<'a, BB, G, X>, V, W, E> for Stream
where
    V: Capacity,
    W: SameWriteReqCapacity<BB>,
    E: Capacity,
    BB: Capacity,
    G: DeviceGroup<'a>,
    X: DeviceExpectedTokens<'a, W>,
{
    fn plan<VB, WB>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &PlanInputs<'a, BB, G, X>,
        verify: &mut VerifyPlan<VB, Device>,
        write: &mut WritePlan<WB, Device>,
    ) -> Result<(), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
    {
        ops::plan::plan(self, shape, inputs, verify, write)
    }

    /// One `kv_canary_plan_verify_head[_pair]` launch after the ring's clear when
    /// [`plan_verify_head`](super::plan_verify_head) would fuse (checked before anything is
    /// queued); else `None`, nothing queued.
    fn plan_verify_head<VB, WB, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &PlanInputs<'a, BB, G, X>,
        verify: &mut VerifyPlan<VB, Device>,
        write: &mut WritePlan<WB, Device>,
        settings: (&DeviceSettings<'_>, Option<&DeviceSettings<'_>>),
        canary: (&CanaryBuffer<S, Device>, Option<&CanaryBuffer<S, Device>>),
        ring: &mut ViolationRing<R, Device>,
        counters: (
            &mut HealthCounters<Device>,
            Option<&mut HealthCounters<Device>>,
        ),
    ) -> Result<Option<((), (), ())>, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
        S: Capacity,
        R: Capacity,
    {
        let target = super::device::stream::sealed::LaunchTarget::target(self);
        let v = match (settings.1, canary.1, counters.1) {
            (Some(s), Some(c), Some(n)) => Some((s, c, &*n)),
            (None, None, None) => None,
            _ => return Ok(None),
        };
        let launches = ops::plan_verify::prepare(
            &target,
            shape,
            inputs,
            verify,
            write,
            (settings.0, canary.0, &*counters.0),
            v,
            ring,
        )?;
        if !launches.fused() {
            return Ok(None);
        }
        Backend::clear_ring(self, ring)?;
        // SAFETY: built by `prepare` for this stream's target (the bounds of `plan::prepare`
        // and `verify::prepare` hold), over buffers the caller keeps alive for as long as the
        // stream's launches can run, as for the backend's other launches on this stream.
        unsafe { launches.queue(&target) }?;
        Ok(Some(((), (), ())))
    }
}

/// Device plan inputs for a FULL canary: the [`Full`](crate::Full) group.
impl<BB: Capacity, X: DeviceGroupTokens> PlanInputsOf<crate::Full>
    for PlanInputs<'_, BB, crate::Full, X>
{
    fn checks_tokens(&self) -> bool {
        self.expected.has_pool()
    }
}

/// Device plan inputs for an SWA canary: a device [`Swa`](super::Swa) group.
impl<BB: Capacity, X: DeviceGroupTokens> PlanInputsOf<SwaGroup>
    for PlanInputs<'_, BB, super::Swa<'_>, X>
{
    fn checks_tokens(&self) -> bool {
        self.expected.has_pool()
    }
}

/// Whether device plan inputs carry an expected-token pool (the verify launches then check
/// tokens).
pub trait DeviceGroupTokens {
    /// `true` for a pool.
    fn has_pool(&self) -> bool;
}

impl DeviceGroupTokens for crate::input::NoExpectedTokens {
    fn has_pool(&self) -> bool {
        false
    }
}

impl<LB: Capacity> DeviceGroupTokens for super::DeviceExpectedPool<'_, LB> {
    fn has_pool(&self) -> bool {
        true
    }
}

/// A pool chosen at run time (the plan inputs of `PagedStepViews`, feature `cudarc`).
impl<LB: Capacity> DeviceGroupTokens for Option<super::DeviceExpectedPool<'_, LB>> {
    fn has_pool(&self) -> bool {
        self.is_some()
    }
}

impl Reports for Stream {
    type Report = PendingDeviceReport;

    /// Queues the readback of the step's ring, counters, plan scalars and status word into
    /// pinned host memory on the stream, records an event after it and returns at once
    /// ([`PendingDeviceReport`](super::PendingDeviceReport) gives the rules).
    fn report<V: Capacity, W: Capacity, R: Capacity>(
        &self,
        step: &FinishedStep<'_, Self, V, W, R>,
    ) -> Result<PendingDeviceReport, Error> {
        report::queue(self, step)
    }

    /// Unknown when the step ends: counted when the report is taken
    /// ([`delivered_violations`](Reports::delivered_violations)).
    fn recorded(_report: &PendingDeviceReport) -> u64 {
        0
    }

    fn delivered_violations(&self) -> u64 {
        Stream::delivered_violations(self)
    }
}
