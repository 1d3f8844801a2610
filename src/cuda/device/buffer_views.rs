//! Safe views of device buffers the engine allocated through the crate or cust (a
//! `cust::memory::DeviceBuffer<T>` or a [`DeviceArray<T>`](crate::cuda::DeviceArray), anything
//! [`DeviceSlice`]): the device inputs over buffers borrowed for `'a`, so the buffers outlive
//! every view made of them ([`Borrowed`], which synchronises the `Gpu`'s context when dropped).
//! The `unsafe` `from_raw` constructors remain for memory the crate cannot name (raw pointers of
//! another framework, an engine struct owning both its memory and a stored graph).

use super::borrowed::{at_least, Borrowed, Fence};
use super::gpu::Gpu;
use super::plan_inputs::{DeviceBatch, DeviceLut, DeviceTable, DeviceValidLens, RawBatch};
use super::write_inputs::RawWriteInputs;
use crate::capacity::Capacity;
use crate::cuda::driver::array::DeviceSlice;
use crate::input::{InputAssertOff, TableKind, WriteInputs};
use crate::memory::Device;
use crate::Error;

/// The address of `buffer` after checking it holds at least `needed` elements.
fn addr_of<T, B>(what: &'static str, buffer: &B, needed: usize) -> Result<u64, Error>
where
    T: crate::memory::Element,
    B: DeviceSlice<T> + ?Sized,
{
    at_least(what, buffer.len(), needed)?;
    Ok(buffer.device_addr())
}

impl<K: TableKind> DeviceTable<K> {
    /// A view of a device buffer holding at least `rows x width` `i32` cells (row-major),
    /// checked as [`from_raw`](Self::from_raw); a shorter buffer is [`Error::LengthMismatch`].
    /// The buffer is allocated in `gpu`'s context (or one its device can access).
    pub fn from_buffer<'a, B: DeviceSlice<i32> + ?Sized>(
        gpu: &Gpu,
        cells: &'a B,
        rows: usize,
        width: usize,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let addr = addr_of(K::NAME, cells, rows.saturating_mul(width))?;
        // SAFETY: `cells` is a live device allocation of at least `rows x width` elements
        // (checked), borrowed for 'a, which the returned view cannot outlive and whose drop
        // waits for every launch that read it.
        let table = unsafe { Self::from_raw(gpu, addr, rows, width)? };
        Ok(Borrowed::new(table, Fence::Gpu(gpu.clone())))
    }
}

impl DeviceLut {
    /// A view of a whole device buffer of `i64`s, checked as [`from_raw`](Self::from_raw).
    pub fn from_buffer<'a, B: DeviceSlice<i64> + ?Sized>(
        gpu: &Gpu,
        lut: &'a B,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let addr = lut.device_addr();
        // SAFETY: as `DeviceTable::from_buffer`.
        let view = unsafe { Self::from_raw(gpu, addr, lut.len())? };
        Ok(Borrowed::new(view, Fence::Gpu(gpu.clone())))
    }
}

impl<W: Capacity> DeviceBatch<W> {
    /// Views of three device buffers of at least `capacity` `i64`s (`req_pool_indices`,
    /// `prefix_lens`, `extend_seq_lens`) and optionally of the engine's `bs` (an `i32` buffer
    /// of at least one element; `None`: [`set_len_on`](Self::set_len_on)), checked as
    /// [`from_raw`](Self::from_raw).
    pub fn from_buffers<'a, B, S>(
        gpu: &Gpu,
        capacity: W,
        columns: [&'a B; 3],
        bs: Option<&'a S>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        B: DeviceSlice<i64> + ?Sized,
        S: DeviceSlice<i32> + ?Sized,
    {
        let n = capacity.get();
        let raw = RawBatch {
            req_pool_indices: addr_of("req_pool_indices", columns[0], n)?,
            prefix_lens: addr_of("prefix_lens", columns[1], n)?,
            extend_seq_lens: addr_of("extend_seq_lens", columns[2], n)?,
            bs: bs.map(|b| addr_of("bs", b, 1)).transpose()?,
        };
        // SAFETY: as `DeviceTable::from_buffer`, for every buffer.
        let batch = unsafe { Self::from_raw(gpu, capacity, raw)? };
        Ok(Borrowed::new(batch, Fence::Gpu(gpu.clone())))
    }
}

impl<W: Capacity> DeviceValidLens<W> {
    /// Views of a device buffer of at least `capacity` `i64` lengths and optionally of their
    /// count (an `i32` buffer; `None`: [`set_len_on`](Self::set_len_on)), checked as
    /// [`from_raw`](Self::from_raw).
    pub fn from_buffers<'a, B, C>(
        gpu: &Gpu,
        capacity: W,
        lens: &'a B,
        count: Option<&'a C>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        B: DeviceSlice<i64> + ?Sized,
        C: DeviceSlice<i32> + ?Sized,
    {
        let addr = addr_of(
            "req_to_verify_expected_tokens_valid_lens",
            lens,
            capacity.get(),
        )?;
        let count = count
            .map(|c| addr_of("valid_lens count", c, 1))
            .transpose()?;
        // SAFETY: as `DeviceTable::from_buffer`, for both buffers.
        let view = unsafe { Self::from_raw(gpu, capacity, addr, count)? };
        Ok(Borrowed::new(view, Fence::Gpu(gpu.clone())))
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOff, Device> {
    /// Views of three device buffers of at least `capacity` `i64`s (`input_ids`, `positions`,
    /// `out_cache_loc`), checked as [`from_raw`](Self::from_raw).
    pub fn from_buffers<'a, B: DeviceSlice<i64> + ?Sized>(
        gpu: &Gpu,
        capacity: E,
        arrays: [&'a B; 3],
    ) -> Result<Borrowed<'a, Self>, Error> {
        let n = capacity.get();
        let raw = RawWriteInputs {
            input_ids: addr_of("input_ids", arrays[0], n)?,
            positions: addr_of("positions", arrays[1], n)?,
            out_cache_loc: addr_of("out_cache_loc", arrays[2], n)?,
        };
        // SAFETY: as `DeviceTable::from_buffer`, for every buffer.
        let inputs = unsafe { Self::from_raw(gpu, capacity, raw)? };
        Ok(Borrowed::new(inputs, Fence::Gpu(gpu.clone())))
    }
}
