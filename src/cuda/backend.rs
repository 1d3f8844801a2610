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
//! let report = step.verify_tail(cuda::TailKvOnDevice::NONE)?;
//! assert!(report.is_clean());
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! What this first device step does and does not do yet: the launches are queued on the
//! canary's stream without a host synchronisation, but emptying the ring before a step is a
//! synchronous copy and the report ([`Reports::report`]) synchronises the stream and downloads
//! the ring, the counters and the plan scalars. Asynchronous reports and graph capture of a
//! whole step are not part of this API yet (capture the raw launches with [`Stream::capture`]).

use super::device::plan_inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use super::device::settings::{ChainAssert, DeviceRealKv, DeviceSettings};
use super::device::stream::Stream;
use super::device::write_inputs::DeviceInputAssert;
use super::ops;
use crate::backend::{Backend, PlanWith, Writes};
use crate::canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchTag, SlotStride, TokenCheck,
    Violation, ViolationRing,
};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::input::{InputAssertOff, WriteInputs};
use crate::memory::Device;
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use crate::step::{FinishedStep, KvPair, PlanInputsOf, Reports, StepStatus, SwaGroup, Unverified};
use crate::Error;

/// The real-KV fingerprints of a device step's tail launches (K half, V half).
pub type TailKvOnDevice<'a> = KvPair<DeviceRealKv<'a>>;

impl KvPair<DeviceRealKv<'static>> {
    /// No fingerprint on either half.
    pub const NONE: TailKvOnDevice<'static> = KvPair {
        k: DeviceRealKv::NONE,
        v: DeviceRealKv::NONE,
    };
}

// A device canary can be built on one thread and driven from another (one canary per device,
// each on its own thread).
static_assertions::assert_impl_all!(
    crate::step::Canary<
        crate::capacity::Cap<8>,
        crate::capacity::Cap<4>,
        crate::capacity::Cap<16>,
        crate::capacity::Cap<64>,
        crate::capacity::Cap<16>,
        crate::input::Full,
        Stream<'static>,
    >: Send
);

impl<'g> Backend for Stream<'g> {
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
        }
    }

    fn check_real_kv_covers(real_kv: &DeviceRealKv<'_>, slots: usize) -> Result<(), Error> {
        real_kv.check_covers(slots)
    }

    fn verify_plan<C: Capacity>(&self, capacity: C) -> Result<VerifyPlan<C, Device>, Error> {
        VerifyPlan::on_device(self.gpu(), capacity)
    }

    fn write_plan<C: Capacity>(&self, capacity: C) -> Result<WritePlan<C, Device>, Error> {
        WritePlan::on_device(self.gpu(), capacity)
    }

    fn canary_buffer<S: Capacity>(&self, slots: S) -> Result<CanaryBuffer<S, Device>, Error> {
        CanaryBuffer::on_device(self.gpu(), slots, SlotStride::DEFAULT)
    }

    fn violation_ring<R: Capacity>(&self, rows: R) -> Result<ViolationRing<R, Device>, Error> {
        ViolationRing::on_device(self.gpu(), rows)
    }

    fn health_counters(&self) -> Result<HealthCounters<Device>, Error> {
        HealthCounters::on_device(self.gpu())
    }

    fn write_inputs<E: Capacity>(
        &self,
        capacity: E,
    ) -> Result<WriteInputs<E, InputAssertOff, Device>, Error> {
        WriteInputs::on_device(self.gpu(), capacity)
    }

    fn clear_ring<R: Capacity>(&self, ring: &mut ViolationRing<R, Device>) -> Result<(), Error> {
        ring.clear()
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
}

/// The device write kernels implement both input-assert states.
impl<A: DeviceInputAssert> Writes<A> for Stream<'_> {
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
}

impl<'a, 'g, V, W, E, BB, G, X> PlanWith<PlanInputs<'a, BB, G, X>, V, W, E> for Stream<'g>
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
}

/// Device plan inputs for a FULL canary: the [`Full`](crate::Full) group.
impl<BB: Capacity, X: DeviceGroupTokens> PlanInputsOf<crate::Full>
    for PlanInputs<'_, BB, crate::Full, X>
{
    fn checks_tokens(&self) -> bool {
        X::HAS_POOL
    }
}

/// Device plan inputs for an SWA canary: a device [`Swa`](super::Swa) group.
impl<BB: Capacity, X: DeviceGroupTokens> PlanInputsOf<SwaGroup>
    for PlanInputs<'_, BB, super::Swa<'_>, X>
{
    fn checks_tokens(&self) -> bool {
        X::HAS_POOL
    }
}

/// Whether device plan inputs carry an expected-token pool (the verify launches then check
/// tokens).
pub trait DeviceGroupTokens {
    /// `true` for a pool.
    const HAS_POOL: bool;
}

impl DeviceGroupTokens for crate::input::NoExpectedTokens {
    const HAS_POOL: bool = false;
}

impl<LB: Capacity> DeviceGroupTokens for super::DeviceExpectedPool<'_, LB> {
    const HAS_POOL: bool = true;
}

/// What a device step did, downloaded from the device when its tail launches have run.
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

impl Reports for Stream<'_> {
    type Report = DeviceStepReport;

    /// Synchronises the stream, returns the first malformed-data error its kernels recorded
    /// (as the CPU op's [`Error`]), then downloads the ring, the counters and the plan scalars.
    fn report<V: Capacity, W: Capacity, R: Capacity>(
        &self,
        step: &FinishedStep<'_, Self, V, W, R>,
    ) -> Result<DeviceStepReport, Error> {
        self.status()?;
        let ring = step.ring.to_host()?;
        let counters = |pair: &KvPair<HealthCounters<Device>>| -> Result<_, Error> {
            Ok(KvPair {
                k: pair.k.to_host()?,
                v: pair.v.to_host()?,
            })
        };
        let (verify, write) = (step.verify_plan.to_host()?, step.write_plan.to_host()?);
        let bs = usize::try_from(write.num_valid_reqs()).unwrap_or(0);
        let write_tokens = write
            .offsets()
            .get(bs)
            .map_or(0, |&n| u64::try_from(n).unwrap_or(0));
        Ok(DeviceStepReport {
            bs,
            verify_num_valid: usize::try_from(verify.num_valid()).unwrap_or(0),
            enabled: verify.is_enabled(),
            verify_capacity: step.verify_capacity,
            write_tokens,
            head_counters: counters(step.head_counters)?,
            tail_counters: counters(step.tail_counters)?,
            violations: ring.violations().collect(),
            dropped: ring.dropped(),
            abandoned_steps: step.abandoned_steps,
        })
    }

    fn recorded(report: &DeviceStepReport) -> u64 {
        report.recorded()
    }
}
