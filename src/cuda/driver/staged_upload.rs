//! Stream-ordered uploads from pageable host memory (`cuMemcpyHtoDAsync`): the sweep's entries
//! into the canary's verify plan.
//!
//! From pageable memory the driver copies the source into its own staging before the call
//! returns (CUDA's API synchronisation rules: "host memory is copied to a staging buffer
//! immediately"), so the host slice may be dropped at once; the device write is ordered on the
//! stream like the kernels around it, whether the stream is blocking or not.

use super::context::make_owner_current;
use super::error::check;
use crate::memory::Element;
use crate::Error;
use cust::memory::{DeviceBox, DeviceBuffer};
use cust::sys::{self, CUstream};

/// Queues copying `src` into `dst[0..src.len()]` on `stream`.
pub(crate) fn upload_prefix_on<T: Element>(
    dst: &DeviceBuffer<T>,
    src: &[T],
    stream: CUstream,
) -> Result<(), Error> {
    if src.len() > dst.len() {
        return Err(Error::LengthMismatch {
            what: "stream-ordered device upload",
            expected: dst.len(),
            found: src.len(),
        });
    }
    if src.is_empty() {
        return Ok(());
    }
    let dst_addr = dst.as_device_ptr().as_raw();
    make_owner_current(dst_addr)?;
    // SAFETY: `[dst_addr, dst_addr + size_of_val(src))` lies inside `dst`'s allocation (checked
    // above); `src` is a live host slice of that many bytes, which the driver stages before the
    // call returns (pageable source), so it may be dropped afterwards. Device memory is not
    // Rust memory, and stream ordering keeps the kernels of `stream` from racing the copy.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            dst_addr,
            src.as_ptr().cast(),
            core::mem::size_of_val(src),
            stream,
        )
    })
}

/// Queues writing `value` into a device scalar on `stream`.
pub(crate) fn set_scalar_on<T: Element>(
    dst: &DeviceBox<T>,
    value: T,
    stream: CUstream,
) -> Result<(), Error> {
    let dst_addr = dst.as_device_ptr().as_raw();
    make_owner_current(dst_addr)?;
    // SAFETY: `dst` is a live device allocation of `size_of::<T>()` bytes; `value` lives on the
    // stack until the call returns, and the driver stages it before then (pageable source).
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            dst_addr,
            (&value as *const T).cast(),
            core::mem::size_of::<T>(),
            stream,
        )
    })
}
