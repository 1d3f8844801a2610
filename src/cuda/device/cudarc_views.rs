//! Safe views of cudarc device memory (feature `cudarc`): the device inputs over `&CudaSlice<T>`
//! or `CudaView<T>`, borrowed for `'a`, so the slices outlive every view made of them.
//!
//! A view borrows its slices ([`Borrowed`], [`CudarcKvSource`]); the launches borrow the view.
//! Dropping the view synchronises the slices' context (`cuCtxSynchronize`), so no launch or
//! graph replay that read the memory can still run when the borrow ends and cudarc may free it
//! (cudarc frees stream-ordered, on the slice's own stream, which the canary's streams are not
//! ordered with). Make views once and keep them: the drop is the only synchronisation.
//!
//! cudarc's automatic multi-stream synchronisation does not see the canary's launches: the
//! engine orders its writes of the memory and the canary's launches by streams and events, as
//! for any kernel of its own.

use super::borrowed::{at_least, Borrowed, Fence};
use super::gpu::Gpu;
use super::plan_inputs::{DeviceBatch, DeviceLut, DeviceTable, DeviceValidLens, RawBatch};
use super::settings::DeviceRealKvSource;
use super::write_inputs::RawWriteInputs;
use crate::capacity::Capacity;
use crate::input::{InputAssertOff, TableKind, WriteInputs};
use crate::memory::Device;
use crate::real_kv::{RealKvParams, RowLayout};
use crate::Error;
use core::marker::PhantomData;
use cudarc::driver::{CudaContext, DevicePtr};
use std::sync::Arc;

/// The address, length and context of a cudarc slice or view.
fn parts<T, S: DevicePtr<T>>(slice: &S) -> (u64, usize, Arc<CudaContext>) {
    let stream = slice.stream();
    // The guard records a read of the slice on its own stream when dropped (at once): cudarc's
    // bookkeeping, which the canary's launches are outside of (module docs).
    let (addr, _read) = slice.device_ptr(stream);
    (addr, slice.len(), Arc::clone(stream.context()))
}

impl<K: TableKind> DeviceTable<K> {
    /// A view of a cudarc slice holding at least `rows x width` `i32` cells (row-major),
    /// checked as [`from_raw`](Self::from_raw); a shorter slice is [`Error::LengthMismatch`].
    pub fn from_cudarc<'a, S: DevicePtr<i32>>(
        gpu: &Gpu,
        cells: &'a S,
        rows: usize,
        width: usize,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let (addr, len, context) = parts(cells);
        at_least(K::NAME, len, rows.saturating_mul(width))?;
        // SAFETY: `cells` is a live cudarc allocation of `len >= rows x width` elements,
        // borrowed for 'a, which the returned view cannot outlive, and whose drop waits for
        // every launch that read it.
        let table = unsafe { Self::from_raw(gpu, addr, rows, width)? };
        Ok(Borrowed::new(table, Fence::Cudarc(context)))
    }
}

impl DeviceLut {
    /// A view of a whole cudarc slice of `i64`s, checked as [`from_raw`](Self::from_raw).
    pub fn from_cudarc<'a, S: DevicePtr<i64>>(
        gpu: &Gpu,
        lut: &'a S,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let (addr, len, context) = parts(lut);
        // SAFETY: as `DeviceTable::from_cudarc`.
        let lut = unsafe { Self::from_raw(gpu, addr, len)? };
        Ok(Borrowed::new(lut, Fence::Cudarc(context)))
    }
}

impl<W: Capacity> DeviceBatch<W> {
    /// Views of three cudarc slices of at least `capacity` `i64`s (`req_pool_indices`,
    /// `prefix_lens`, `extend_seq_lens`) and optionally the engine's `bs` (an `i32` slice of at
    /// least one element; `None`: [`set_len_on`](Self::set_len_on)), checked as
    /// [`from_raw`](Self::from_raw).
    pub fn from_cudarc<'a, S: DevicePtr<i64>, B: DevicePtr<i32>>(
        gpu: &Gpu,
        capacity: W,
        columns: [&'a S; 3],
        bs: Option<&'a B>,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let names = ["req_pool_indices", "prefix_lens", "extend_seq_lens"];
        let mut addrs = [0u64; 3];
        for ((addr, column), what) in addrs.iter_mut().zip(columns).zip(names) {
            let (a, len, _) = parts(column);
            at_least(what, len, capacity.get())?;
            *addr = a;
        }
        let bs = match bs {
            Some(b) => {
                let (a, len, _) = parts(b);
                at_least("bs", len, 1)?;
                Some(a)
            }
            None => None,
        };
        let raw = RawBatch {
            req_pool_indices: addrs[0],
            prefix_lens: addrs[1],
            extend_seq_lens: addrs[2],
            bs,
        };
        // SAFETY: as `DeviceTable::from_cudarc`, for every slice.
        let batch = unsafe { Self::from_raw(gpu, capacity, raw)? };
        let (_, _, context) = parts(columns[0]);
        Ok(Borrowed::new(batch, Fence::Cudarc(context)))
    }
}

impl<W: Capacity> DeviceValidLens<W> {
    /// Views of a cudarc slice of at least `capacity` `i64` lengths and optionally of their
    /// count (an `i32` slice; `None`: [`set_len_on`](Self::set_len_on)), checked as
    /// [`from_raw`](Self::from_raw).
    pub fn from_cudarc<'a, S: DevicePtr<i64>, C: DevicePtr<i32>>(
        gpu: &Gpu,
        capacity: W,
        lens: &'a S,
        count: Option<&'a C>,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let (addr, len, context) = parts(lens);
        at_least(
            "req_to_verify_expected_tokens_valid_lens",
            len,
            capacity.get(),
        )?;
        let count = match count {
            Some(c) => {
                let (a, n, _) = parts(c);
                at_least("valid_lens count", n, 1)?;
                Some(a)
            }
            None => None,
        };
        // SAFETY: as `DeviceTable::from_cudarc`, for both slices.
        let lens = unsafe { Self::from_raw(gpu, capacity, addr, count)? };
        Ok(Borrowed::new(lens, Fence::Cudarc(context)))
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOff, Device> {
    /// Views of three cudarc slices of at least `capacity` `i64`s (`input_ids`, `positions`,
    /// `out_cache_loc`), checked as [`from_raw`](Self::from_raw).
    pub fn from_cudarc<'a, S: DevicePtr<i64>>(
        gpu: &Gpu,
        capacity: E,
        arrays: [&'a S; 3],
    ) -> Result<Borrowed<'a, Self>, Error> {
        let names = ["input_ids", "positions", "out_cache_loc"];
        let mut addrs = [0u64; 3];
        for ((addr, array), what) in addrs.iter_mut().zip(arrays).zip(names) {
            let (a, len, _) = parts(array);
            at_least(what, len, capacity.get())?;
            *addr = a;
        }
        let raw = RawWriteInputs {
            input_ids: addrs[0],
            positions: addrs[1],
            out_cache_loc: addrs[2],
        };
        // SAFETY: as `DeviceTable::from_cudarc`, for every slice.
        let inputs = unsafe { Self::from_raw(gpu, capacity, raw)? };
        let (_, _, context) = parts(arrays[0]);
        Ok(Borrowed::new(inputs, Fence::Cudarc(context)))
    }
}

/// A real-KV source over cudarc bytes borrowed for `'a`: [`source`](Self::source) gives the
/// [`DeviceRealKvSource`] for launches, bounded by this value's borrow; dropping it synchronises
/// the memory's context.
pub struct CudarcKvSource<'a> {
    source: DeviceRealKvSource<'static>,
    context: Arc<CudaContext>,
    bytes: PhantomData<&'a ()>,
}

impl<'a> CudarcKvSource<'a> {
    /// The source whose row 0 starts `byte_offset` bytes into the cudarc byte slice `bytes`,
    /// checked as [`DeviceRealKvSource::at`] (and the slice's range as
    /// [`DeviceRealKvSource::from_raw`]).
    pub fn new<S: DevicePtr<u8>>(
        gpu: &Gpu,
        bytes: &'a S,
        byte_offset: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        let (addr, len, context) = parts(bytes);
        let Some(rest) = len.checked_sub(byte_offset) else {
            return Err(Error::RealKvShape {
                shape: vec![len],
                detail: format!("byte offset {byte_offset} is past the {len} bytes given"),
            });
        };
        // SAFETY: `bytes` is a live cudarc allocation of `len` bytes, borrowed for 'a; the
        // source is handed out only for borrows of this value, whose drop waits for every
        // launch that read it.
        let source = unsafe {
            DeviceRealKvSource::from_raw(gpu, addr + byte_offset as u64, rest, layout, params)?
        };
        Ok(CudarcKvSource {
            source,
            context,
            bytes: PhantomData,
        })
    }

    /// The source, for launches borrowing this value.
    pub fn source(&self) -> DeviceRealKvSource<'_> {
        self.source
    }
}

impl Drop for CudarcKvSource<'_> {
    fn drop(&mut self) {
        // As `Borrowed`'s drop.
        let _ = self.context.synchronize();
    }
}
