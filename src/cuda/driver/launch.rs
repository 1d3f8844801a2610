//! The one kernel launch of the backend: every kernel of the library (and of a custom module)
//! is queued by [`launch`], which makes the kernel's context current on the calling thread
//! first.

use super::context::PrimaryContext;
use super::error::check;
use super::module::Function;
use crate::Error;
use cust::sys::{self, CUstream};

/// Grid and block of a launch (a one-dimensional block; a grid of `grid` x `grid_y`), its
/// dynamic shared memory and whether it is cooperative (every block resident at once, or the
/// launch fails).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchDims {
    /// Blocks along x (0 is launched as 1).
    pub(crate) grid: u32,
    /// Blocks along y: 1, or 2 for a K+V pair launch (one half a row of blocks).
    pub(crate) grid_y: u32,
    /// Threads of a block.
    pub(crate) block: u32,
    /// Dynamic shared memory of a block, in bytes.
    pub(crate) shared_bytes: u32,
    /// `cuLaunchCooperativeKernel` instead of `cuLaunchKernel`.
    pub(crate) cooperative: bool,
}

/// Makes `context` current on the calling thread, then queues `kernel<<<dims>>>(params...)` on
/// `stream`.
///
/// # Safety
///
/// `params` must hold one pointer per kernel parameter, in order, each to a value laid out as
/// the kernel reads that parameter (the driver copies them before returning, also while
/// capturing, so they may be temporaries); `kernel` must be a function of a loaded module of
/// `context`, and `stream` a stream of `context`; every device address the parameters hold must point to a live allocation
/// at least as large as the parameters tell the kernel it may access, for as long as the launch
/// (or a graph replaying it) can run.
pub(crate) unsafe fn launch(
    context: &PrimaryContext,
    stream: CUstream,
    kernel: Function,
    dims: LaunchDims,
    params: &mut [*mut core::ffi::c_void],
) -> Result<(), Error> {
    context.make_current()?;
    let kernel = kernel.raw();
    let params_ptr = if params.is_empty() {
        core::ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    let grid = dims.grid.max(1);
    let grid_y = dims.grid_y.max(1);
    if dims.cooperative {
        // SAFETY: as below; a cooperative launch takes the same parameter array.
        return check("cuLaunchCooperativeKernel", unsafe {
            sys::cuLaunchCooperativeKernel(
                kernel,
                grid,
                grid_y,
                1,
                dims.block,
                1,
                1,
                dims.shared_bytes,
                stream,
                params_ptr,
            )
        });
    }
    // SAFETY: the caller's contract (see above) covers the kernel, its parameters and the
    // memory they name; the driver reads `params` during the call only.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            kernel,
            grid,
            grid_y,
            1,
            dims.block,
            1,
            1,
            dims.shared_bytes,
            stream,
            params_ptr,
            core::ptr::null_mut(),
        )
    })
}

/// [`launch`] of a kernel whose single parameter is `args` (an argument struct of `abi::args`).
///
/// # Safety
///
/// As for [`launch`], with `A` the kernel's one parameter type.
pub(crate) unsafe fn launch_struct<A: Copy>(
    context: &PrimaryContext,
    stream: CUstream,
    kernel: Function,
    dims: LaunchDims,
    args: &A,
) -> Result<(), Error> {
    let mut param = [args as *const A as *mut core::ffi::c_void];
    // SAFETY: forwarded; one pointer to the one parameter.
    unsafe { launch(context, stream, kernel, dims, &mut param) }
}
