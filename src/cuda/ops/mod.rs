//! The ops layer: the plan, write, verify and scatter launches on device buffers. Imports the
//! device, driver and ABI layers below it; nothing imports it but the module root.

pub(crate) mod custom;
pub(crate) mod plan;
pub(crate) mod prepared;
pub(crate) mod scatter;
pub(crate) mod verify;
pub(crate) mod write;

use crate::cuda::abi::args::{PlanArgs, VerifyArgs};
use crate::cuda::device::stream::Target;
use crate::cuda::driver::launch::{launch_struct, LaunchDims};
use crate::cuda::driver::module::Function;
use crate::Error;

/// One kernel launch, checked and built: the function, its dimensions and argument struct.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prepared<A> {
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
