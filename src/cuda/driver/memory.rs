//! Device memory: allocation, synchronous transfers, stream-ordered zeroing and typed addresses.
//!
//! cust 0.3 copies through `&mut self`; the backend needs copies into buffers it only shares
//! (see the module docs of `cuda`), so it calls the driver. Allocation runs in the context
//! current on the calling thread (the device layer's constructors make their `Gpu`'s current
//! first); every transfer makes the context that owns its device buffer current first
//! ([`make_owner_current`]), so it runs in the right context on any thread.

use super::context::make_owner_current;
use super::error::{check, cust_error};
use crate::cuda::abi::ptr::DevPtr;
use crate::memory::Element;
use crate::Error;
use cust::memory::{DeviceBox, DeviceBuffer};
use cust::sys::{self, CUstream};

/// The raw device address of a buffer's first element.
pub(crate) fn addr<T: Element>(buffer: &DeviceBuffer<T>) -> u64 {
    buffer.as_device_ptr().as_raw()
}

/// The typed device address of a buffer's first element.
pub(crate) fn ptr<T: Element>(buffer: &DeviceBuffer<T>) -> DevPtr<T> {
    DevPtr::from_addr(addr(buffer))
}

/// The typed device address of a boxed scalar.
pub(crate) fn box_ptr<T: Element>(b: &DeviceBox<T>) -> DevPtr<T> {
    DevPtr::from_addr(b.as_device_ptr().as_raw())
}

/// The raw device address of a boxed scalar.
fn box_addr<T: Element>(b: &DeviceBox<T>) -> u64 {
    box_ptr(b).addr()
}

/// A zero-filled device buffer of `len` elements.
pub(crate) fn zeroed<T: Element>(len: usize) -> Result<DeviceBuffer<T>, Error> {
    let bytes = len
        .checked_mul(core::mem::size_of::<T>())
        .ok_or(Error::OutOfRange {
            what: "device buffer size in bytes",
            value: i64::MAX,
            allowed: "[0, usize::MAX]",
        })?;
    // SAFETY: the buffer is filled with zero bytes below before anything can read it, and zero
    // bytes are a valid value of every element type of this crate (i32, i64, u8).
    let buffer =
        unsafe { DeviceBuffer::<T>::uninitialized(len) }.map_err(cust_error("cuMemAlloc"))?;
    if bytes > 0 {
        // SAFETY: `addr(&buffer)` points to a live allocation of exactly `bytes` bytes.
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(addr(&buffer), 0, bytes)
        })?;
    }
    Ok(buffer)
}

/// A device scalar holding `value`.
pub(crate) fn scalar<T: Element>(value: T) -> Result<DeviceBox<T>, Error> {
    DeviceBox::new(&value).map_err(cust_error("cuMemAlloc"))
}

/// Copies `src` into `dst[at..at + src.len()]`; synchronous, on the legacy default stream.
pub(crate) fn upload<T: Element>(dst: &DeviceBuffer<T>, at: usize, src: &[T]) -> Result<(), Error> {
    let end = at.checked_add(src.len()).filter(|&e| e <= dst.len());
    if end.is_none() {
        return Err(Error::LengthMismatch {
            what: "device upload",
            expected: dst.len().saturating_sub(at),
            found: src.len(),
        });
    }
    if src.is_empty() {
        return Ok(());
    }
    make_owner_current(addr(dst))?;
    let dst_addr = addr(dst) + (at * core::mem::size_of::<T>()) as u64;
    // SAFETY: `[dst_addr, dst_addr + size_of_val(src))` lies inside `dst`'s allocation (checked
    // above), `src` is a live host slice of that many bytes, and the copy is synchronous, so
    // `src` outlives it. Device memory is not Rust memory: writing it through `&` creates no
    // aliasing, and stream ordering keeps kernels from racing this copy (module docs).
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(dst_addr, src.as_ptr().cast(), core::mem::size_of_val(src))
    })
}

/// Copies `src[at..at + dst.len()]` to the host; synchronous, on the legacy default stream.
pub(crate) fn download<T: Element>(
    dst: &mut [T],
    src: &DeviceBuffer<T>,
    at: usize,
) -> Result<(), Error> {
    if at.checked_add(dst.len()).is_none_or(|e| e > src.len()) {
        return Err(Error::LengthMismatch {
            what: "device download",
            expected: src.len().saturating_sub(at),
            found: dst.len(),
        });
    }
    if dst.is_empty() {
        return Ok(());
    }
    make_owner_current(addr(src))?;
    let src_addr = addr(src) + (at * core::mem::size_of::<T>()) as u64;
    // SAFETY: the source range lies inside `src`'s allocation (checked above); `dst` is a live,
    // exclusively borrowed host slice of exactly the copied size; the copy is synchronous; every
    // bit pattern is a valid value of the crate's element types.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(
            dst.as_mut_ptr().cast(),
            src_addr,
            core::mem::size_of_val(dst),
        )
    })
}

/// Writes `value` into a device scalar; synchronous.
pub(crate) fn set_scalar<T: Element>(dst: &DeviceBox<T>, value: T) -> Result<(), Error> {
    make_owner_current(box_addr(dst))?;
    // SAFETY: `dst` is a live device allocation of `size_of::<T>()` bytes; `value` lives on the
    // stack for the duration of the synchronous copy.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(
            box_addr(dst),
            (&value as *const T).cast(),
            core::mem::size_of::<T>(),
        )
    })
}

/// Reads a device scalar; synchronous.
pub(crate) fn get_scalar<T: Element>(src: &DeviceBox<T>) -> Result<T, Error> {
    make_owner_current(box_addr(src))?;
    let mut value = T::default();
    // SAFETY: `src` is a live device allocation of `size_of::<T>()` bytes, `value` a live host
    // value of that size; the copy is synchronous and every bit pattern is valid for T here.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(
            (&mut value as *mut T).cast(),
            box_addr(src),
            core::mem::size_of::<T>(),
        )
    })?;
    Ok(value)
}

/// Queues zeroing `bytes` bytes at device address `addr` on `stream` (stream-ordered, no host
/// synchronisation): `cuMemsetD32Async` when `bytes` is a multiple of 4, else `cuMemsetD8Async`.
fn zero_async_raw(addr: u64, bytes: usize, stream: CUstream) -> Result<(), Error> {
    if bytes == 0 {
        return Ok(());
    }
    make_owner_current(addr)?;
    if bytes.is_multiple_of(4) && addr.is_multiple_of(4) {
        // SAFETY: `[addr, addr + bytes)` is one live device allocation (the callers pass a
        // whole buffer or scalar they hold); device memory is not Rust memory, and stream
        // ordering keeps the kernels of `stream` from racing the memset.
        check("cuMemsetD32Async", unsafe {
            sys::cuMemsetD32Async(addr, 0, bytes / 4, stream)
        })
    } else {
        // SAFETY: as above.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(addr, 0, bytes, stream)
        })
    }
}

/// Queues zeroing every element of `buffer` on `stream` (no host synchronisation).
pub(crate) fn zero_async<T: Element>(
    buffer: &DeviceBuffer<T>,
    stream: CUstream,
) -> Result<(), Error> {
    zero_async_raw(
        addr(buffer),
        core::mem::size_of::<T>() * buffer.len(),
        stream,
    )
}

/// Queues zeroing a device scalar on `stream` (no host synchronisation).
pub(crate) fn zero_scalar_async<T: Element>(
    scalar: &DeviceBox<T>,
    stream: CUstream,
) -> Result<(), Error> {
    zero_async_raw(box_addr(scalar), core::mem::size_of::<T>(), stream)
}
