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
    /// A programmatic dependent launch (compute capability 9.0 and later; ignored for a
    /// `cooperative` one): the launch may start while the kernel ahead of it in the stream is still
    /// running. Only for the library's own kernels, which wait for the grid ahead of them
    /// (`griddepcontrol.wait`, `grid_prologue()` in kernels/common.cuh) before they touch any
    /// memory, so what overlaps is the launch and the blocks' start, never a memory access.
    pub(crate) early_start: bool,
}

/// `CUlaunchAttribute` (cuda.h): an attribute id, padding to 8 bytes, a 64-byte value union.
#[repr(C)]
struct LaunchAttribute {
    id: u32,
    pad: [u8; 4],
    value: [u64; 8],
}

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
struct LaunchConfig {
    grid_dim_x: u32,
    grid_dim_y: u32,
    grid_dim_z: u32,
    block_dim_x: u32,
    block_dim_y: u32,
    block_dim_z: u32,
    shared_mem_bytes: u32,
    stream: CUstream,
    attrs: *mut LaunchAttribute,
    num_attrs: u32,
}

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (cuda.h): its value,
/// `programmaticStreamSerializationAllowed`, is the union's first `int`.
const PROGRAMMATIC_STREAM_SERIALIZATION: u32 = 6;

const _: () = assert!(core::mem::size_of::<LaunchAttribute>() == 72);
const _: () = assert!(core::mem::size_of::<LaunchConfig>() == 56);

// `cuLaunchKernelEx` (CUDA 12.0 and later drivers), which cust's bindings do not have; libcuda
// is linked by cust.
unsafe extern "C" {
    fn cuLaunchKernelEx(
        config: *const LaunchConfig,
        f: sys::CUfunction,
        kernel_params: *mut *mut core::ffi::c_void,
        extra: *mut *mut core::ffi::c_void,
    ) -> sys::CUresult;
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
    // SAFETY: forwarded; the caller's contract is this function's.
    let queued = unsafe { queue_kernel(context, stream, kernel, dims, params) };
    if queued.is_ok() {
        LAUNCHES.with(|n| n.set(n.get() + 1));
    }
    queued
}

thread_local! {
    /// Kernel launches this thread has queued through [`launch`].
    static LAUNCHES: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Kernel launches the calling thread has queued through this crate so far: the library's
/// kernels (a K+V pair launch is one), report readbacks and custom kernels, each counted when
/// it is queued on a stream or recorded into a capture (a graph's replays queue none). The
/// difference of two readings around a step is the step's launches.
pub fn launches_queued() -> u64 {
    LAUNCHES.with(core::cell::Cell::get)
}

/// [`launch`] without the count.
///
/// # Safety
///
/// As for [`launch`].
unsafe fn queue_kernel(
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
    if dims.early_start && !dims.cooperative {
        let mut attribute = LaunchAttribute {
            id: PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: [1, 0, 0, 0, 0, 0, 0, 0],
        };
        let config = LaunchConfig {
            grid_dim_x: grid,
            grid_dim_y: grid_y,
            grid_dim_z: 1,
            block_dim_x: dims.block,
            block_dim_y: 1,
            block_dim_z: 1,
            shared_mem_bytes: dims.shared_bytes,
            stream,
            attrs: &mut attribute,
            num_attrs: 1,
        };
        // SAFETY: as below; `config` and its one attribute are laid out as cuda.h's
        // `CUlaunchConfig` and `CUlaunchAttribute` (sizes asserted above) and live through the
        // call, which reads them and `params` during the call only.
        return check("cuLaunchKernelEx", unsafe {
            cuLaunchKernelEx(&config, kernel, params_ptr, core::ptr::null_mut())
        });
    }
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
