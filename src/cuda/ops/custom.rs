//! [`launch_custom`]: a [`CustomKernel`] queued through the backend's one launch function.

use crate::cuda::device::custom_module::CustomKernel;
use crate::cuda::device::stream::Queue;
use crate::cuda::driver::launch::{launch, LaunchDims};
use crate::Error;

/// Queues `kernel<<<grid, block, shared_bytes>>>(params...)` on `on` (a stream, or a capture).
///
/// # Safety
///
/// `params` holds one pointer per kernel parameter, in order, each to a value laid out as the
/// kernel reads that parameter (the driver copies them before returning, so temporaries do);
/// `kernel` belongs to a module loaded on `on`'s device that stays loaded while the launch (or a
/// graph replaying it) can run; every device address the parameters
/// hold points to a live allocation at least as large as the parameters tell the kernel it may
/// access, for as long as the launch (or a graph replaying it) can run.
pub unsafe fn launch_custom<'a, Q: Queue<'a> + ?Sized>(
    on: &Q,
    kernel: &CustomKernel,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    params: &mut [*mut core::ffi::c_void],
) -> Result<(), Error> {
    let target = on.target();
    let dims = LaunchDims {
        grid,
        grid_y: 1,
        block: block.max(1),
        shared_bytes,
        cooperative: false,
        early_start: false,
    };
    // SAFETY: forwarded; the caller's contract is `launch`'s.
    unsafe {
        launch(
            target.gpu.context(),
            target.stream,
            kernel.function(),
            dims,
            params,
        )
    }
}
