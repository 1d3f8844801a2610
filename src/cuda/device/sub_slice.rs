//! [`SubSlice`] and [`SharedSubSlice`]: a range of elements of an engine's device buffer, as a
//! [`ViewableSlice`] of its own, so that every safe view constructor (`from_buffer`,
//! `from_buffers`, `from_shared`, `DeviceRealKvSource::new`) can view part of one allocation:
//! an engine that packs its batch columns, its write arrays or several tables into one buffer
//! views each part without `unsafe`.
//!
//! A [`SubSlice`] borrows the buffer, and a view made from it borrows the sub-slice, so the
//! buffer outlives every view of its part. (cust's own `DeviceSlice<T>`, which
//! `DeviceBuffer::index` returns, borrows nothing, so the crate does not accept it: a view of
//! one could outlive the buffer.) A [`SharedSubSlice`] keeps an `Arc` of the buffer instead, for
//! the `from_shared` views an engine's struct or a stored graph holds.

use crate::cuda::driver::array::{sealed::Sealed, ViewableSlice};
use crate::memory::Element;
use crate::Error;
use core::marker::PhantomData;
use core::ops::Range;
use std::sync::Arc;

/// The address and length of elements `range` of `buffer`, checked: a range that is empty the
/// wrong way round or runs past the buffer is [`Error::DeviceView`] naming both.
fn part<T: Element, B: ViewableSlice<T> + ?Sized>(
    buffer: &B,
    range: &Range<usize>,
) -> Result<usize, Error> {
    if range.start > range.end || range.end > buffer.len() {
        return Err(Error::DeviceView {
            what: "sub-slice",
            addr: buffer.device_addr(),
            len: buffer.len(),
            element_bytes: core::mem::size_of::<T>(),
            rule: format!(
                "has no elements {}..{} (a range inside the buffer is)",
                range.start, range.end
            ),
        });
    }
    Ok(range.end - range.start)
}

/// The address of element `start` of `buffer` (inside it: checked by [`part`]).
fn addr_at<T: Element, B: ViewableSlice<T> + ?Sized>(buffer: &B, start: usize) -> u64 {
    // The buffer holds `start` elements, so their bytes fit in its allocation's address range.
    buffer.device_addr() + (start * core::mem::size_of::<T>()) as u64
}

/// Elements `range` of a device buffer borrowed for `'a` (a cust `DeviceBuffer<T>`, a crate
/// `DeviceArray<T>`, or another sub-slice), accepted wherever a whole buffer is.
///
/// ```no_run
/// # fn main() -> Result<(), kv_canary::Error> {
/// use cust::memory::DeviceBuffer;
/// use kv_canary::cuda::{self, Gpu, SubSlice};
/// use kv_canary::Cap;
/// let gpu = Gpu::new()?;
/// // The engine's batch metadata, packed: req_pool_indices | prefix_lens | extend_seq_lens.
/// let packed = DeviceBuffer::from_slice(&[0i64; 3 * 256])?;
/// let columns = [
///     SubSlice::new(&packed, 0..256)?,
///     SubSlice::new(&packed, 256..512)?,
///     SubSlice::new(&packed, 512..768)?,
/// ];
/// let batch = cuda::DeviceBatch::from_buffers(
///     &gpu,
///     Cap::<256>,
///     (&columns[0], &columns[1], &columns[2]),
///     None::<&DeviceBuffer<i32>>,
/// )?;
/// # let _ = batch;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SubSlice<'a, T: Element, B: ViewableSlice<T> + ?Sized> {
    buffer: &'a B,
    start: usize,
    len: usize,
    element: PhantomData<T>,
}

impl<'a, T: Element, B: ViewableSlice<T> + ?Sized> SubSlice<'a, T, B> {
    /// Elements `range` of `buffer`; a range past its end (or reversed) is
    /// [`Error::DeviceView`] naming the range and the buffer's length.
    pub fn new(buffer: &'a B, range: Range<usize>) -> Result<Self, Error> {
        let len = part(buffer, &range)?;
        Ok(SubSlice {
            buffer,
            start: range.start,
            len,
            element: PhantomData,
        })
    }
}

impl<T: Element, B: ViewableSlice<T> + ?Sized> Sealed for SubSlice<'_, T, B> {}
impl<T: Element, B: ViewableSlice<T> + ?Sized> ViewableSlice<T> for SubSlice<'_, T, B> {
    fn device_addr(&self) -> u64 {
        addr_at(self.buffer, self.start)
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Elements `range` of a device buffer kept alive by an `Arc`, for the `from_shared` views
/// (wrap it in an `Arc` of its own: `Arc::new(SharedSubSlice::new(buffer, range)?)`); the
/// views keep it, and so the buffer, alive.
#[derive(Debug)]
pub struct SharedSubSlice<T: Element, B: ViewableSlice<T>> {
    buffer: Arc<B>,
    start: usize,
    len: usize,
    element: PhantomData<fn() -> T>,
}

impl<T: Element, B: ViewableSlice<T>> SharedSubSlice<T, B> {
    /// Elements `range` of `buffer`; a range past its end (or reversed) is
    /// [`Error::DeviceView`] naming the range and the buffer's length.
    pub fn new(buffer: Arc<B>, range: Range<usize>) -> Result<Self, Error> {
        let len = part(&*buffer, &range)?;
        Ok(SharedSubSlice {
            buffer,
            start: range.start,
            len,
            element: PhantomData,
        })
    }
}

impl<T: Element, B: ViewableSlice<T>> Sealed for SharedSubSlice<T, B> {}
impl<T: Element, B: ViewableSlice<T>> ViewableSlice<T> for SharedSubSlice<T, B> {
    fn device_addr(&self) -> u64 {
        addr_at(&*self.buffer, self.start)
    }
    fn len(&self) -> usize {
        self.len
    }
}
