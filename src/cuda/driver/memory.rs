//! Device memory: allocation, synchronous and stream-ordered transfers, stream-ordered zeroing
//! and setting, typed addresses, and the count of host<->device transfers issued.
//!
//! cust 0.3 copies through `&mut self`; the backend needs copies into buffers it only shares
//! (see the module docs of `cuda`), so it calls the driver. Allocation runs in the context
//! current on the calling thread (the device layer's constructors make their `Gpu`'s current
//! first); every transfer makes the context that owns its device buffer current first
//! ([`make_owner_current`]), so it runs in the right context on any thread.

use super::array::{DeviceArray, DeviceScalar, ViewableSlice};
use super::context::make_owner_current;
use super::error::{check, cust_error};
use crate::cuda::abi::ptr::DevPtr;
use crate::memory::Element;
use crate::Error;
use core::cell::Cell;
use cust::memory::{DeviceBox, DeviceBuffer};
use cust::sys::{self, CUstream};

/// Host<->device copies issued by this crate's driver layer on one thread (synchronous and
/// stream-ordered, transfers and report readbacks alike; memsets are not copies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Transfers {
    /// Host-to-device copies (`cuMemcpyHtoD`, `cuMemcpyHtoDAsync`).
    pub host_to_device: u64,
    /// Device-to-host copies (`cuMemcpyDtoH`, and each piece of a report readback: the ring
    /// rows, a counter, a scalar, ...; those pieces are copied into pinned memory by one
    /// readback kernel launch per report, not one `cuMemcpyDtoHAsync` each).
    pub device_to_host: u64,
}

impl Transfers {
    /// The copies issued since `earlier` (a previous reading on the same thread).
    pub fn since(self, earlier: Transfers) -> Transfers {
        Transfers {
            host_to_device: self.host_to_device.wrapping_sub(earlier.host_to_device),
            device_to_host: self.device_to_host.wrapping_sub(earlier.device_to_host),
        }
    }
}

thread_local! {
    /// This thread's [`Transfers`] so far.
    static TRANSFERS: Cell<Transfers> = const { Cell::new(Transfers { host_to_device: 0, device_to_host: 0 }) };
}

/// The copies the calling thread has issued so far through this crate.
pub fn transfers_issued() -> Transfers {
    TRANSFERS.with(Cell::get)
}

/// Counts one host-to-device copy.
fn count_upload() {
    TRANSFERS.with(|t| {
        let mut v = t.get();
        v.host_to_device += 1;
        t.set(v);
    });
}

/// Counts one device-to-host copy (also the report readbacks of `pinned`).
pub(crate) fn count_download() {
    TRANSFERS.with(|t| {
        let mut v = t.get();
        v.device_to_host += 1;
        t.set(v);
    });
}

/// The raw device address of an array's (or a `cust` buffer's) first element.
pub(crate) fn addr<T: Element>(buffer: &(impl ViewableSlice<T> + ?Sized)) -> u64 {
    buffer.device_addr()
}

/// The typed device address of an array's (or a `cust` buffer's) first element.
pub(crate) fn ptr<T: Element>(buffer: &(impl ViewableSlice<T> + ?Sized)) -> DevPtr<T> {
    DevPtr::from_addr(addr(buffer))
}

/// The typed device address of a scalar.
pub(crate) fn box_ptr<T: Element>(b: &DeviceScalar<T>) -> DevPtr<T> {
    DevPtr::from_addr(b.as_raw())
}

/// The raw device address of a scalar.
fn box_addr<T: Element>(b: &DeviceScalar<T>) -> u64 {
    b.as_raw()
}

/// A zero-filled device array of `len` elements, owned by the crate.
pub(crate) fn zeroed<T: Element>(len: usize) -> Result<DeviceArray<T>, Error> {
    zeroed_buffer(len).map(DeviceArray::owned)
}

/// A zero-filled `cust` device buffer of `len` elements.
fn zeroed_buffer<T: Element>(len: usize) -> Result<DeviceBuffer<T>, Error> {
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
        // SAFETY: the buffer's address points to a live allocation of exactly `bytes` bytes.
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(buffer.as_device_ptr().as_raw(), 0, bytes)
        })?;
    }
    Ok(buffer)
}

/// A device scalar holding `value`, owned by the crate.
pub(crate) fn scalar<T: Element>(value: T) -> Result<DeviceScalar<T>, Error> {
    count_upload();
    DeviceBox::new(&value)
        .map(DeviceScalar::owned)
        .map_err(cust_error("cuMemAlloc"))
}

/// The device address of `dst[at]` after checking that `len` elements from `at` fit in `dst`.
fn range_addr<T: Element>(
    what: &'static str,
    dst: &(impl ViewableSlice<T> + ?Sized),
    at: usize,
    len: usize,
) -> Result<u64, Error> {
    if at.checked_add(len).is_none_or(|e| e > dst.len()) {
        return Err(Error::LengthMismatch {
            what,
            expected: dst.len().saturating_sub(at),
            found: len,
        });
    }
    Ok(addr(dst) + (at * core::mem::size_of::<T>()) as u64)
}

/// Copies `src` into `dst[at..at + src.len()]`; synchronous, on the legacy default stream.
pub(crate) fn upload<T: Element>(
    dst: &(impl ViewableSlice<T> + ?Sized),
    at: usize,
    src: &[T],
) -> Result<(), Error> {
    let dst_addr = range_addr("device upload", dst, at, src.len())?;
    if src.is_empty() {
        return Ok(());
    }
    make_owner_current(addr(dst))?;
    count_upload();
    // SAFETY: `[dst_addr, dst_addr + size_of_val(src))` lies inside `dst`'s memory (checked
    // above; a view's memory is live by its constructor's contract), `src` is a live host slice
    // of that many bytes, and the copy is synchronous, so `src` outlives it. Device memory is
    // not Rust memory: writing it through `&` creates no aliasing, and stream ordering keeps
    // kernels from racing this copy (module docs).
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(dst_addr, src.as_ptr().cast(), core::mem::size_of_val(src))
    })
}

/// Queues copying `src` into `dst[at..at + src.len()]` on `stream` (`cuMemcpyHtoDAsync`,
/// stream-ordered: after the work queued on `stream` before it, before the work queued after).
///
/// `src` may be freed or reused as soon as this returns: from pageable host memory the driver
/// stages the bytes before returning. (Such a copy cannot be captured into a graph: during a
/// capture the driver refuses it with an error.)
pub(crate) fn upload_async<T: Element>(
    dst: &(impl ViewableSlice<T> + ?Sized),
    at: usize,
    src: &[T],
    stream: CUstream,
) -> Result<(), Error> {
    let dst_addr = range_addr("device upload", dst, at, src.len())?;
    if src.is_empty() {
        return Ok(());
    }
    make_owner_current(addr(dst))?;
    count_upload();
    // SAFETY: the destination range lies inside `dst`'s memory (checked above); `src` is a live
    // host slice of exactly the copied size, and a copy from pageable host memory has read it
    // into the driver's staging before `cuMemcpyHtoDAsync` returns; `stream` is a live stream
    // of the caller's. Stream ordering keeps kernels on `stream` from racing the copy.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            dst_addr,
            src.as_ptr().cast(),
            core::mem::size_of_val(src),
            stream,
        )
    })
}

/// Copies `src[at..at + dst.len()]` to the host; synchronous, on the legacy default stream.
pub(crate) fn download<T: Element>(
    dst: &mut [T],
    src: &(impl ViewableSlice<T> + ?Sized),
    at: usize,
) -> Result<(), Error> {
    let src_addr = range_addr("device download", src, at, dst.len())?;
    if dst.is_empty() {
        return Ok(());
    }
    make_owner_current(addr(src))?;
    count_download();
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
pub(crate) fn set_scalar<T: Element>(dst: &DeviceScalar<T>, value: T) -> Result<(), Error> {
    make_owner_current(box_addr(dst))?;
    count_upload();
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
pub(crate) fn get_scalar<T: Element>(src: &DeviceScalar<T>) -> Result<T, Error> {
    make_owner_current(box_addr(src))?;
    count_download();
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

/// Queues setting a device `i64` scalar to `value` on `stream` (two `cuMemsetD32Async`, one a
/// word: no host memory involved, as [`set_i32_async`]).
pub(crate) fn set_i64_async(
    dst: &DeviceScalar<i64>,
    value: i64,
    stream: CUstream,
) -> Result<(), Error> {
    make_owner_current(box_addr(dst))?;
    let bits = value as u64;
    for (word, half) in [(0u64, bits as u32), (4, (bits >> 32) as u32)] {
        // SAFETY: `dst` is one live, 8-byte aligned `i64` of device memory (a crate allocation,
        // or a view whose constructor checked its alignment and whose caller keeps it
        // allocated), so both of its 4-byte words at offsets 0 and 4 are in bounds; stream
        // ordering keeps the kernels of `stream` from racing the memsets. Little-endian: the
        // low word first.
        check("cuMemsetD32Async", unsafe {
            sys::cuMemsetD32Async(box_addr(dst) + word, half, 1, stream)
        })?;
    }
    Ok(())
}

/// Queues setting a device `i32` scalar to `value` on `stream` (`cuMemsetD32Async`: no host
/// memory involved, so it is graph-capturable and records the value as it is now).
pub(crate) fn set_i32_async(
    dst: &DeviceScalar<i32>,
    value: i32,
    stream: CUstream,
) -> Result<(), Error> {
    make_owner_current(box_addr(dst))?;
    // SAFETY: `dst` is one live, 4-byte aligned `i32` of device memory (a crate allocation, or a
    // view whose constructor checked its alignment and whose caller keeps it allocated); stream
    // ordering keeps the kernels of `stream` from racing the memset.
    check("cuMemsetD32Async", unsafe {
        sys::cuMemsetD32Async(box_addr(dst), value as u32, 1, stream)
    })
}
