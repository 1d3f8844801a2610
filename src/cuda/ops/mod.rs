//! The ops layer: the plan, write, verify and scatter launches on device buffers. Imports the
//! device, driver and ABI layers below it; nothing imports it but the module root.

pub(crate) mod custom;
pub(crate) mod plan;
pub(crate) mod prepared;
pub(crate) mod scatter;
pub(crate) mod verify;
pub(crate) mod write;

use crate::cuda::abi::args::{PlanArgs, VerifyArgs};
use crate::cuda::driver::launch::{launch_struct, LaunchDims};
use crate::Error;
use cust::sys::{CUfunction, CUstream};

/// One kernel launch, checked and built: the function, its dimensions and argument struct.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prepared<A> {
    pub(crate) function: CUfunction,
    pub(crate) dims: LaunchDims,
    pub(crate) args: A,
}

/// A prepared plan launch.
pub(crate) type PlanLaunch = Prepared<PlanArgs>;
/// A prepared verify launch.
pub(crate) type VerifyLaunch = Prepared<VerifyArgs>;

impl<A: Copy> Prepared<A> {
    /// Queues the launch on `stream`.
    ///
    /// # Safety
    ///
    /// `A` is the kernel's parameter type and every address in `args` is live (and as large
    /// as `args` says) for as long as the launch can run; `stream` is the stream whose status
    /// and scratch words `args` names (or any, for a launch that names none).
    pub(crate) unsafe fn queue(&self, stream: CUstream) -> Result<(), Error> {
        // SAFETY: forwarded; the caller's contract is this function's.
        unsafe { launch_struct(stream, self.function, self.dims, &self.args) }
    }
}
