//! The ops layer: the plan, write, verify and scatter launches on device buffers. Imports the
//! device, driver and ABI layers below it; nothing imports it but the module root.

pub(crate) mod custom;
pub(crate) mod plan;
pub(crate) mod plan_verify;
pub(crate) mod prepared;
pub(crate) mod scatter;
pub(crate) mod verify;
pub(crate) mod write;

use crate::cuda::abi::args::{PlanArgs, VerifyArgs};
use crate::cuda::abi::kernels::Kernel;
use crate::cuda::device::stream::Target;
use crate::cuda::driver::launch::{launch_struct, LaunchDims};
use crate::cuda::driver::module::Function;
use crate::Error;

/// One kernel launch, checked and built: the kernel and its function, its dimensions and
/// argument struct.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prepared<A> {
    pub(crate) kernel: Kernel,
    pub(crate) function: Function,
    pub(crate) dims: LaunchDims,
    pub(crate) args: A,
}

/// A prepared plan launch.
pub(crate) type PlanLaunch = Prepared<PlanArgs>;
/// A prepared verify launch.
pub(crate) type VerifyLaunch = Prepared<VerifyArgs>;

impl<A: Copy> Prepared<A> {
    /// Queues the launch on `target`'s stream, in its `Gpu`'s context (the one launch
    /// function makes it current).
    ///
    /// # Safety
    ///
    /// `A` is the kernel's parameter type and every address in `args` is live (and as large
    /// as `args` says) for as long as the launch can run; `target` is the stream whose status
    /// and scratch words `args` names (or any of the same `Gpu`, for a launch that names none),
    /// and `function` was looked up on `target`'s `Gpu`.
    pub(crate) unsafe fn queue(&self, target: &Target<'_>) -> Result<(), Error> {
        // SAFETY: forwarded; the caller's contract is this function's.
        unsafe {
            launch_struct(
                target.gpu.context(),
                target.stream,
                self.function,
                self.dims,
                &self.args,
            )
        }
    }
}

/// Whether [`queue_pair`] queues `k` and `v` as one pair launch (given that their kernel has a
/// pair entry point): the same kernel and grid, and pair launches on in the tuning.
pub(crate) fn fuses_as_pair<A>(target: &Target<'_>, k: &Prepared<A>, v: &Prepared<A>) -> bool {
    k.kernel == v.kernel && k.dims == v.dims && target.gpu.kernel_tuning().pair_launches
}

/// Queues the K and the V launch of one stage of a step (`k`, then `v`, built for `target`):
/// as one pair launch when the [tuning](crate::cuda::KernelTuning::pair_launches) allows it and
/// both halves have the same kernel and dimensions (the kernel's `_pair` entry point over a grid
/// of `grid` x 2 blocks, whose parameter `pair` builds from the two argument structs), else as
/// two launches, K first.
///
/// # Safety
///
/// As for [`Prepared::queue`], for `k` and for `v`; and `pair(k.args, v.args)` is the
/// parameter of the pair entry point of their kernel (`K` then `V` argument struct, laid out
/// as the kernel's `*PairArgs`).
pub(crate) unsafe fn queue_pair<A: Copy, P: Copy>(
    target: &Target<'_>,
    k: &Prepared<A>,
    v: &Prepared<A>,
    pair: impl FnOnce(A, A) -> P,
) -> Result<(), Error> {
    match k.kernel.paired().filter(|_| fuses_as_pair(target, k, v)) {
        Some(kernel) => {
            let launch = Prepared {
                kernel,
                function: target.gpu.function(kernel)?,
                dims: LaunchDims {
                    grid_y: 2,
                    ..k.dims
                },
                args: pair(k.args, v.args),
            };
            // SAFETY: the pair entry point runs the kernel of `k` and `v` over each half's own
            // arguments (blocks of y 0: `k.args`, y 1: `v.args`) on the same grid x, so its
            // accesses are those of the two single launches, which the caller vouches for.
            unsafe { launch.queue(target) }
        }
        None => {
            // SAFETY: forwarded; the caller's contract covers both launches.
            unsafe {
                k.queue(target)?;
                v.queue(target)
            }
        }
    }
}
