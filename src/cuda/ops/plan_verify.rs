//! The plan and the head verify of a step in one launch (`kv_canary_plan_verify_head[_pair]`,
//! kernels/plan.cu), where the kernels allow it, else the two launches.

use super::{plan, verify, PlanLaunch, Prepared, VerifyLaunch};
use crate::canary::{CanaryBuffer, HealthCounters, TokenCheckOff, ViolationRing};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::cuda::abi::args::{PlanVerifyHeadArgs, PlanVerifyHeadPairArgs};
use crate::cuda::abi::kernels::{Fold, Kernel, LutMode, PlanFamily};
use crate::cuda::abi::shared::{
    PLAN_VERIFY_BLOCKS_PER_SM, PLAN_VERIFY_THREADS, PLAN_VERIFY_UNROLL,
};
use crate::cuda::device::plan_inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use crate::cuda::device::settings::DeviceSettings;
use crate::cuda::device::stream::{Queue, Target};
use crate::cuda::driver::launch::LaunchDims;
use crate::memory::Device;
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use crate::Error;

/// Queues [`plan`](crate::cuda::plan) and then [`verify`](crate::cuda::verify) of the K half's
/// head buffer against the plan just made (no token check), as one launch whenever the
/// kernels allow it: the plan is the lean kernel (at most 1024 write requests) without a LUT or
/// an expected-token pool, the verify folds no real KV, and
/// [`KernelTuning::plan_verify_fusion`](crate::cuda::KernelTuning::plan_verify_fusion) is on.
/// Otherwise the two launches, plan first.
///
/// The same plan columns, rows (as a set), write index, status word and counters as the two
/// launches: each entry is checked by the thread that plans it, from the slot, predecessor,
/// position and token in its registers (the predecessor's record most often the lane
/// before's), with the verify kernel's range checks and rows. A plan over its verify
/// capacity checks nothing and counts the launch, as the verify launch would. One difference:
/// a plan that fails its launch-level checks (a batch size or valid-lengths error in the status
/// word) records its error and neither verifies nor counts the head verify's launch, where the
/// separate verify launch would have checked the previous step's plan columns.
///
/// Everything is checked before anything is queued: the errors of [`plan`](crate::cuda::plan)
/// and [`verify`](crate::cuda::verify).
///
/// A write queued behind it is not marked
/// [`following_verify`](crate::cuda::DeviceSettings::following_verify): the fused launch is
/// the plan, whose write plan such a write would read before the launch completes.
#[allow(
    clippy::too_many_arguments,
    reason = "the plan's and the verify's own arguments"
)]
pub fn plan_verify_head<'a, Q, V, W, E, VB, WB, BB, G, X, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'a, BB, G, X>,
    verify_plan: &'a VerifyPlan<VB, Device>,
    write_plan: &'a WritePlan<WB, Device>,
    settings: &DeviceSettings<'a>,
    canary: &'a CanaryBuffer<S, Device>,
    ring: &'a ViolationRing<R, Device>,
    counters: &'a HealthCounters<Device>,
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: SameVerifyCapacity<VB>,
    W: SameWriteReqCapacity<WB> + SameWriteReqCapacity<BB>,
    E: Capacity,
    VB: Capacity,
    WB: Capacity,
    BB: Capacity,
    G: DeviceGroup<'a>,
    X: DeviceExpectedTokens<'a, W>,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let launches = prepare(
        &target,
        shape,
        inputs,
        verify_plan,
        write_plan,
        (settings, canary, counters),
        None,
        ring,
    )?;
    // SAFETY: every launch was built by `plan::prepare` and `verify::prepare` for this target
    // (their bounds are stated there) over buffers borrowed for 'a; see `Launches::queue`.
    unsafe { launches.queue(&target) }
}

/// [`plan_verify_head`] of both halves: [`plan`](crate::cuda::plan) and then
/// [`verify_pair`](crate::cuda::verify_pair) of the K and the V head buffer (no token check),
/// as one launch under the same conditions, else the plan and the verify pair.
#[allow(
    clippy::too_many_arguments,
    reason = "the plan's and the verify's own arguments"
)]
pub fn plan_verify_head_pair<'a, Q, V, W, E, VB, WB, BB, G, X, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'a, BB, G, X>,
    verify_plan: &'a VerifyPlan<VB, Device>,
    write_plan: &'a WritePlan<WB, Device>,
    settings: (&DeviceSettings<'a>, &DeviceSettings<'a>),
    canary: (&'a CanaryBuffer<S, Device>, &'a CanaryBuffer<S, Device>),
    ring: &'a ViolationRing<R, Device>,
    counters: (&'a HealthCounters<Device>, &'a HealthCounters<Device>),
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: SameVerifyCapacity<VB>,
    W: SameWriteReqCapacity<WB> + SameWriteReqCapacity<BB>,
    E: Capacity,
    VB: Capacity,
    WB: Capacity,
    BB: Capacity,
    G: DeviceGroup<'a>,
    X: DeviceExpectedTokens<'a, W>,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let launches = prepare(
        &target,
        shape,
        inputs,
        verify_plan,
        write_plan,
        (settings.0, canary.0, counters.0),
        Some((settings.1, canary.1, counters.1)),
        ring,
    )?;
    // SAFETY: as for `plan_verify_head`.
    unsafe { launches.queue(&target) }
}

/// One half's head verify: its settings, head buffer and counters.
type HeadHalf<'s, 'a, S> = (
    &'s DeviceSettings<'a>,
    &'a CanaryBuffer<S, Device>,
    &'a HealthCounters<Device>,
);

/// The launches of a plan and its head verify, checked and built.
pub(crate) struct Launches {
    plan: PlanLaunch,
    k: VerifyLaunch,
    v: Option<VerifyLaunch>,
    /// Whether they run as one `kv_canary_plan_verify_head[_pair]` launch.
    fused: bool,
}

/// Checks and builds the plan's launch and each half's verify launch (`plan::prepare`,
/// `verify::prepare`, no token check), and whether they fuse.
#[allow(
    clippy::too_many_arguments,
    reason = "the plan's and the verify's own arguments"
)]
pub(crate) fn prepare<'s, 'i, 'a, V, W, E, VB, WB, BB, G, X, S, R>(
    target: &Target<'_>,
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'i, BB, G, X>,
    verify_plan: &'a VerifyPlan<VB, Device>,
    write_plan: &'a WritePlan<WB, Device>,
    k: HeadHalf<'s, 'a, S>,
    v: Option<HeadHalf<'s, 'a, S>>,
    ring: &'a ViolationRing<R, Device>,
) -> Result<Launches, Error>
where
    V: SameVerifyCapacity<VB>,
    W: SameWriteReqCapacity<WB> + SameWriteReqCapacity<BB>,
    E: Capacity,
    VB: Capacity,
    WB: Capacity,
    BB: Capacity,
    G: DeviceGroup<'i>,
    X: DeviceExpectedTokens<'i, W>,
    S: Capacity,
    R: Capacity,
{
    let plan = plan::prepare(target, shape, inputs, verify_plan, write_plan)?;
    let half = |(settings, canary, counters): HeadHalf<'s, 'a, S>| {
        verify::prepare(
            target,
            shape,
            verify_plan,
            TokenCheckOff,
            settings,
            canary,
            ring,
            counters,
        )
    };
    let k = half(k)?;
    let v = v.map(half).transpose()?;
    let unfolded = |l: &VerifyLaunch| {
        l.kernel
            == Kernel::Verify {
                fold: Fold::None,
                tokens: false,
                pair: false,
            }
    };
    let fused = target.gpu.kernel_tuning().plan_verify_fusion
        && plan.kernel
            == Kernel::Plan {
                family: PlanFamily::Lean,
                lut: LutMode::None,
                pool: false,
            }
        && plan.dims.block == PLAN_VERIFY_THREADS
        && !plan.dims.cooperative
        && unfolded(&k)
        && v.as_ref().is_none_or(unfolded);
    Ok(Launches { plan, k, v, fused })
}

impl Launches {
    /// Whether they run as one launch.
    pub(crate) fn fused(&self) -> bool {
        self.fused
    }

    /// The fused launch's dimensions: the plan's shared memory and block (the lean family's
    /// 256 threads), as many entry blocks as the verify capacity needs in one round each,
    /// at most the kernel's resident blocks, plus the plan's metadata block below that.
    fn fused_dims(&self, target: &Target<'_>) -> (LaunchDims, i64) {
        let max = target.gpu.sm_count() * PLAN_VERIFY_BLOCKS_PER_SM;
        let capacity = u64::try_from(self.plan.args.verify_capacity).unwrap_or(0);
        let round = u64::from(PLAN_VERIFY_THREADS * PLAN_VERIFY_UNROLL);
        let needed = u32::try_from(capacity.div_ceil(round).max(1)).unwrap_or(u32::MAX);
        let (grid, entry_blocks) = if needed < max {
            (needed + 1, needed)
        } else {
            (max, max)
        };
        (
            LaunchDims {
                grid,
                ..self.plan.dims
            },
            i64::from(entry_blocks),
        )
    }

    /// Queues them on `target`: the fused launch, or the plan and then the verify (a pair
    /// launch for two halves where [`queue_pair`](super::queue_pair) allows).
    ///
    /// # Safety
    ///
    /// Built by [`prepare`] for `target`, every buffer they name live for as long as the
    /// launches can run (the bounds of `plan::prepare` and `verify::prepare` hold).
    pub(crate) unsafe fn queue(mut self, target: &Target<'_>) -> Result<(), Error> {
        if self.fused {
            let (dims, entry_blocks) = self.fused_dims(target);
            let mut plan = self.plan.args;
            plan.entry_blocks = entry_blocks;
            let kernel = Kernel::PlanVerifyHead {
                pair: self.v.is_some(),
            };
            let function = target.gpu.function(kernel)?;
            // SAFETY: the plan's arguments as `plan::prepare` built them (its bounds), on a
            // grid of `entry_blocks` entry blocks of the lean family's 256 threads and its
            // shared memory (the kernel strides by entry_blocks rounds of PLAN_VERIFY_UNROLL
            // entries a thread; its last block writes the metadata); each verify argument as `verify::prepare`
            // built it (no fold, no token check), every entry checked against its buffer's
            // slots before a record is loaded; the parameter types are the kernels'.
            return unsafe {
                match self.v {
                    None => Prepared {
                        kernel,
                        function,
                        dims,
                        args: PlanVerifyHeadArgs {
                            plan,
                            k: self.k.args,
                        },
                    }
                    .queue(target),
                    Some(v) => Prepared {
                        kernel,
                        function,
                        dims,
                        args: PlanVerifyHeadPairArgs {
                            plan,
                            k: self.k.args,
                            v: v.args,
                        },
                    }
                    .queue(target),
                }
            };
        }
        // SAFETY: as for `plan::plan`, `verify::verify` and `verify::verify_pair`, whose
        // launches these are, built by their own `prepare`.
        unsafe {
            self.plan.queue(target)?;
            match &mut self.v {
                None => self.k.queue(target),
                Some(v) => verify::queue_halves(target, &mut self.k, v),
            }
        }
    }
}
