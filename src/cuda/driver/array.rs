//! [`DeviceArray`] and [`DeviceScalar`]: the arrays and scalars of [`Device`] memory, either
//! owned by the crate (a `cust` allocation) or a view of memory the engine owns (an address and
//! a length), so that every device buffer type and every launch serves both with one code path.
//!
//! Views are made only by the `unsafe` constructors of the device layer, after [`check_view`]
//! (null, alignment, size) and [`check_in_allocation`] (the view lies inside one allocation the
//! driver knows); dropping a view frees nothing.

use super::context::PrimaryContext;
use super::error::check;
use crate::memory::{Device, DeviceMemorySealed, Element, Memory};
use crate::Error;
use cust::memory::{DeviceBox, DeviceBuffer};
use cust::sys;

/// An array of `T` in device memory: allocated by the crate, or a view of `len` elements at an
/// address the engine owns (made by the `unsafe` `from_raw` constructors of the device buffer
/// types). Launches and transfers treat both alike.
pub struct DeviceArray<T: Element> {
    storage: ArrayStorage<T>,
}

/// Who owns a [`DeviceArray`]'s memory.
enum ArrayStorage<T: Element> {
    /// The crate (freed on drop).
    Owned(DeviceBuffer<T>),
    /// The engine: `len` elements at `addr` (never freed here), in a buffer of `room` elements
    /// from `addr` (`len` where the view's constructor did not know the buffer).
    View { addr: u64, len: usize, room: usize },
}

impl<T: Element> DeviceArray<T> {
    /// An array owning `buffer`.
    pub(crate) fn owned(buffer: DeviceBuffer<T>) -> Self {
        DeviceArray {
            storage: ArrayStorage::Owned(buffer),
        }
    }

    /// A view of `len` elements at `addr`.
    ///
    /// # Safety
    ///
    /// `[addr, addr + len x size_of::<T>())` is device memory of one live allocation, aligned
    /// for `T`, that stays allocated while the view, or any launch or graph that used it, can
    /// run ([`check_view`] has been passed).
    pub(crate) unsafe fn view(addr: u64, len: usize) -> Self {
        DeviceArray {
            storage: ArrayStorage::View {
                addr,
                len,
                room: len,
            },
        }
    }

    /// Records that a view's buffer holds `room` elements from its address (a safe
    /// constructor's buffer length, checked to be at least the view's): what
    /// [`rebound`](Self::rebound) may grow the view to. Nothing for crate memory.
    pub(crate) fn record_room(&mut self, buffer_len: usize) {
        if let ArrayStorage::View { len, room, .. } = &mut self.storage {
            *room = buffer_len.max(*len);
        }
    }

    /// A view of the first `len` elements of the buffer this view views (a capacity changed by
    /// a reshape), or [`Error::DeviceView`] naming `what` when `len` is past the buffer, or when
    /// this is the crate's own memory (which a view cannot keep alive).
    pub(crate) fn rebound(&self, what: &'static str, len: usize) -> Result<Self, Error> {
        let err = |addr, rule: String| Error::DeviceView {
            what,
            addr,
            len,
            element_bytes: core::mem::size_of::<T>(),
            rule,
        };
        match self.storage {
            ArrayStorage::View { addr, room, .. } if len <= room => Ok(DeviceArray {
                storage: ArrayStorage::View { addr, len, room },
            }),
            ArrayStorage::View { addr, room, .. } => Err(err(
                addr,
                format!("is past the {room} elements of the buffer it views"),
            )),
            ArrayStorage::Owned(ref b) => Err(err(
                b.as_device_ptr().as_raw(),
                "is the crate's own memory: only views of the engine's buffers are rebound"
                    .to_owned(),
            )),
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        match &self.storage {
            ArrayStorage::Owned(b) => b.len(),
            ArrayStorage::View { len, .. } => *len,
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the memory is the engine's (a view), not the crate's.
    pub fn is_view(&self) -> bool {
        matches!(self.storage, ArrayStorage::View { .. })
    }

    /// The device address of the first element (`CUdeviceptr`).
    pub fn as_raw(&self) -> u64 {
        match &self.storage {
            ArrayStorage::Owned(b) => b.as_device_ptr().as_raw(),
            ArrayStorage::View { addr, .. } => *addr,
        }
    }
}

/// One `T` in device memory: allocated by the crate, or a view of an engine-owned scalar.
pub struct DeviceScalar<T: Element> {
    storage: ScalarStorage<T>,
}

/// Who owns a [`DeviceScalar`]'s memory.
enum ScalarStorage<T: Element> {
    /// The crate (freed on drop).
    Owned(DeviceBox<T>),
    /// The engine: one `T` at this address (never freed here).
    View(u64),
}

impl<T: Element> DeviceScalar<T> {
    /// A scalar owning `b`.
    pub(crate) fn owned(b: DeviceBox<T>) -> Self {
        DeviceScalar {
            storage: ScalarStorage::Owned(b),
        }
    }

    /// A view of the `T` at `addr`.
    ///
    /// # Safety
    ///
    /// As [`DeviceArray::view`] with one element.
    pub(crate) unsafe fn view(addr: u64) -> Self {
        DeviceScalar {
            storage: ScalarStorage::View(addr),
        }
    }

    /// Whether the memory is the engine's (a view), not the crate's.
    pub fn is_view(&self) -> bool {
        matches!(self.storage, ScalarStorage::View(_))
    }

    /// The same view again (for an input rebound to a new capacity), or `None` for the crate's
    /// own scalar, which only its owner keeps.
    pub(crate) fn rebound(&self) -> Option<Self> {
        match self.storage {
            ScalarStorage::View(addr) => Some(DeviceScalar {
                storage: ScalarStorage::View(addr),
            }),
            ScalarStorage::Owned(_) => None,
        }
    }

    /// The device address (`CUdeviceptr`).
    pub fn as_raw(&self) -> u64 {
        match &self.storage {
            ScalarStorage::Owned(b) => b.as_device_ptr().as_raw(),
            ScalarStorage::View(addr) => *addr,
        }
    }
}

impl<T: Element> core::fmt::Debug for DeviceArray<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceArray")
            .field("addr", &format_args!("{:#x}", self.as_raw()))
            .field("len", &self.len())
            .field("view", &self.is_view())
            .finish()
    }
}

impl<T: Element> core::fmt::Debug for DeviceScalar<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceScalar")
            .field("addr", &format_args!("{:#x}", self.as_raw()))
            .field("view", &self.is_view())
            .finish()
    }
}

/// An array of index values in device memory (batch columns, per-token write inputs, valid
/// lengths) of the element type the engine keeps them in: `i64`, `i32` or `u32`. Arrays the
/// crate allocates are `i64`; a view keeps its buffer's type, and the kernels read each array
/// by its [`kind`](Self::kind). The [`Device`] counterpart of a host `Box<[i64]>`
/// ([`Memory::IndexArray`]).
#[doc(hidden)]
#[derive(Debug)]
pub enum DeviceColumn {
    /// `i64` elements.
    I64(DeviceArray<i64>),
    /// `i32` elements.
    I32(DeviceArray<i32>),
    /// `u32` elements.
    U32(DeviceArray<u32>),
}

/// The kernels' codes of the index element types (`PlanArgs::kinds`, `WriteArgs::kinds`).
pub(crate) mod index_kind {
    /// `i64`.
    pub(crate) const I64: i64 = 0;
    /// `i32`.
    pub(crate) const I32: i64 = 1;
    /// `u32`.
    pub(crate) const U32: i64 = 2;
}

impl DeviceColumn {
    /// The device address.
    pub(crate) fn addr(&self) -> u64 {
        match self {
            DeviceColumn::I64(a) => a.as_raw(),
            DeviceColumn::I32(a) => a.as_raw(),
            DeviceColumn::U32(a) => a.as_raw(),
        }
    }
    /// The kernels' code of the element type ([`index_kind`]).
    pub(crate) fn kind(&self) -> i64 {
        match self {
            DeviceColumn::I64(_) => index_kind::I64,
            DeviceColumn::I32(_) => index_kind::I32,
            DeviceColumn::U32(_) => index_kind::U32,
        }
    }
    /// The element type's name.
    fn element(&self) -> &'static str {
        match self {
            DeviceColumn::I64(_) => "i64",
            DeviceColumn::I32(_) => "i32",
            DeviceColumn::U32(_) => "u32",
        }
    }
    /// Whether the array is a view of the engine's memory.
    pub(crate) fn is_view(&self) -> bool {
        match self {
            DeviceColumn::I64(a) => a.is_view(),
            DeviceColumn::I32(a) => a.is_view(),
            DeviceColumn::U32(a) => a.is_view(),
        }
    }
    /// Records the length of the buffer a view lies in (see [`DeviceArray::record_room`]).
    pub(crate) fn record_room(&mut self, room: usize) {
        match self {
            DeviceColumn::I64(a) => a.record_room(room),
            DeviceColumn::I32(a) => a.record_room(room),
            DeviceColumn::U32(a) => a.record_room(room),
        }
    }
    /// The same view with `len` elements (see [`DeviceArray::rebound`]).
    pub(crate) fn rebound(&self, what: &'static str, len: usize) -> Result<Self, Error> {
        Ok(match self {
            DeviceColumn::I64(a) => DeviceColumn::I64(a.rebound(what, len)?),
            DeviceColumn::I32(a) => DeviceColumn::I32(a.rebound(what, len)?),
            DeviceColumn::U32(a) => DeviceColumn::U32(a.rebound(what, len)?),
        })
    }
    /// The `i64` array the crate's transfers (uploads from, downloads to host `i64`s) use, or
    /// the error naming `what` of a view of the engine's 32-bit array, which the engine fills
    /// on the device.
    pub(crate) fn i64s(&self, what: &'static str) -> Result<&DeviceArray<i64>, Error> {
        match self {
            DeviceColumn::I64(a) => Ok(a),
            other => Err(Error::Malformed {
                detail: format!(
                    "{what} is a view of the engine's {} array: the crate copies i64 arrays \
                     only, the engine fills its own arrays on the device",
                    other.element()
                ),
            }),
        }
    }
}

impl DeviceMemorySealed for Device {}
impl Memory for Device {
    type Array<T: Element> = DeviceArray<T>;
    type Scalar<T: Element> = DeviceScalar<T>;
    type IndexArray = DeviceColumn;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Device memory that a safe view may be made over: [`len`](Self::len) elements of `T` at
/// [`device_addr`](Self::device_addr), kept allocated for as long as it is borrowed. A crate
/// [`DeviceArray`], a `cust` [`DeviceBuffer`] the engine allocated, or a part of either
/// ([`SubSlice`](crate::cuda::SubSlice), [`SharedSubSlice`](crate::cuda::SharedSubSlice)).
/// Sealed. (Not cust's `DeviceSlice<T>`, which borrows nothing, so a view of it could outlive
/// the buffer; this trait's name differs from it so that both crates' items can be imported.)
pub trait ViewableSlice<T: Element>: sealed::Sealed {
    /// The device address of the first element.
    fn device_addr(&self) -> u64;
    /// Elements.
    fn len(&self) -> usize;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Element> sealed::Sealed for DeviceArray<T> {}
impl<T: Element> ViewableSlice<T> for DeviceArray<T> {
    fn device_addr(&self) -> u64 {
        self.as_raw()
    }
    fn len(&self) -> usize {
        DeviceArray::len(self)
    }
}

impl<T: Element> sealed::Sealed for DeviceBuffer<T> {}
impl<T: Element> ViewableSlice<T> for DeviceBuffer<T> {
    fn device_addr(&self) -> u64 {
        self.as_device_ptr().as_raw()
    }
    fn len(&self) -> usize {
        let slice: &cust::memory::DeviceSlice<T> = self;
        slice.len()
    }
}

/// Checks a view of `len` elements of `T` at `addr` before the driver is asked: a null address
/// (for a non-empty view), an address not aligned for `T`, and a byte size or end that
/// overflows are [`Error::DeviceView`] naming `what`, the address and the length. Returns the
/// view's byte size.
pub(crate) fn check_view<T: Element>(
    what: &'static str,
    addr: u64,
    len: usize,
) -> Result<u64, Error> {
    check_view_bytes(
        what,
        addr,
        len,
        core::mem::size_of::<T>(),
        core::mem::align_of::<T>(),
    )
}

/// [`check_view`] for `len` elements of `element_bytes` bytes at an alignment of `align`.
pub(crate) fn check_view_bytes(
    what: &'static str,
    addr: u64,
    len: usize,
    element_bytes: usize,
    align: usize,
) -> Result<u64, Error> {
    let err = |rule: String| Error::DeviceView {
        what,
        addr,
        len,
        element_bytes,
        rule,
    };
    let bytes = (len as u128) * (element_bytes as u128);
    if len > 0 && addr == 0 {
        return Err(err("is a null address".to_owned()));
    }
    if !addr.is_multiple_of(align as u64) {
        return Err(err(format!("is not aligned to {align} bytes")));
    }
    if bytes > u128::from(u64::MAX - addr) {
        return Err(err("ends past the 64-bit address space".to_owned()));
    }
    Ok(bytes as u64)
}

/// Checks that `[addr, addr + bytes)` lies inside one allocation of `context`, as far as the
/// driver knows (`cuMemGetAddressRange`): a view running past the end of its allocation is
/// [`Error::DeviceView`] naming the allocation's range. An address the driver cannot place
/// (memory it does not track, such as some virtual-memory mappings) is accepted: the caller's
/// `unsafe` promise covers it.
pub(crate) fn check_in_allocation(
    context: &PrimaryContext,
    what: &'static str,
    addr: u64,
    len: usize,
    element_bytes: usize,
    bytes: u64,
) -> Result<(), Error> {
    if bytes == 0 {
        return Ok(());
    }
    context.make_current()?;
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: the driver writes one address and one size into the two live locals; an address
    // it does not know is an error code, not a crash.
    let found = check("cuMemGetAddressRange", unsafe {
        sys::cuMemGetAddressRange_v2(&mut base, &mut size, addr)
    });
    if found.is_err() {
        return Ok(());
    }
    let end = u128::from(addr) + u128::from(bytes);
    if end > u128::from(base) + size as u128 {
        return Err(Error::DeviceView {
            what,
            addr,
            len,
            element_bytes,
            rule: format!(
                "runs past the end of its allocation [{base:#x}, {:#x})",
                u128::from(base) + size as u128
            ),
        });
    }
    Ok(())
}

/// A checked view of `len` elements of `T` at `addr` ([`check_view`], then
/// [`check_in_allocation`] in `context`).
///
/// # Safety
///
/// As [`DeviceArray::view`], apart from what the checks establish.
pub(crate) unsafe fn checked_view<T: Element>(
    context: &PrimaryContext,
    what: &'static str,
    addr: u64,
    len: usize,
) -> Result<DeviceArray<T>, Error> {
    let bytes = check_view::<T>(what, addr, len)?;
    check_in_allocation(context, what, addr, len, core::mem::size_of::<T>(), bytes)?;
    // SAFETY: forwarded to the caller; null, alignment and the allocation's end checked above.
    Ok(unsafe { DeviceArray::view(addr, len) })
}

/// A checked view of the one `T` at `addr`, as [`checked_view`].
///
/// # Safety
///
/// As [`DeviceScalar::view`], apart from what the checks establish.
pub(crate) unsafe fn checked_scalar_view<T: Element>(
    context: &PrimaryContext,
    what: &'static str,
    addr: u64,
) -> Result<DeviceScalar<T>, Error> {
    let bytes = check_view::<T>(what, addr, 1)?;
    check_in_allocation(context, what, addr, 1, core::mem::size_of::<T>(), bytes)?;
    // SAFETY: forwarded to the caller; null, alignment and the allocation's end checked above.
    Ok(unsafe { DeviceScalar::view(addr) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_reject_null_misaligned_and_overflowing_ranges() {
        let e = check_view::<i64>("req_pool_indices", 0, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kv-canary: the device view of req_pool_indices at 0x0 (4 elements of 8 bytes) is a null address"
        );
        assert_eq!(check_view::<i64>("x", 0, 0), Ok(0));
        let e = check_view::<i32>("req_to_token", 0x1002, 8).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kv-canary: the device view of req_to_token at 0x1002 (8 elements of 4 bytes) is not aligned to 4 bytes"
        );
        let e = check_view::<i64>("out_cache_loc", u64::MAX - 7, 2).unwrap_err();
        assert!(
            e.to_string().contains("ends past the 64-bit address space"),
            "{e}"
        );
        assert_eq!(check_view::<i64>("positions", 0x1000, 3), Ok(24));
        assert_eq!(check_view::<u8>("bytes", 0x1001, 3), Ok(3));
    }
}
