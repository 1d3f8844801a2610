//! Safe views of cudarc device memory (feature `cudarc`): the device inputs over `&CudaSlice<T>`
//! or `CudaView<T>`, borrowed for `'a`, so the slices outlive every view made of them.
//!
//! A view borrows its slices (`from_cudarc`: [`Borrowed`], [`CudarcKvSource::new`]) or keeps
//! `Arc`s of them (`from_cudarc_shared`: [`Shared`], [`CudarcKvSource::shared`], for an engine's
//! struct or a stored graph's inputs); the launches borrow the view.
//! Dropping the view synchronises the slices' context (`cuCtxSynchronize`), so no launch or
//! graph replay that read the memory can still run when the borrow ends and cudarc may free it
//! (cudarc frees stream-ordered, on the slice's own stream, which the canary's streams are not
//! ordered with). Make views once and keep them: the drop is the only synchronisation.
//!
//! cudarc's automatic multi-stream synchronisation does not see the canary's launches: the
//! engine orders its writes of the memory and the canary's launches by streams and events, as
//! for any kernel of its own.

use super::borrowed::{at_least, Borrowed, Fence, Shared};
use super::gpu::Gpu;
use super::plan_inputs::{
    two_columns, DeviceBatch, DeviceColumns, DeviceIndex, DeviceLut, DeviceReqToToken, DeviceTable,
    DeviceTableCell, DeviceValidLens,
};
use super::settings::DeviceRealKvSource;
use super::write_inputs::RawWriteInputs;
use crate::capacity::Capacity;
use crate::input::{
    InputAssertOff, InputAssertOn, PoolRows, QueryLens, QueryStarts, TableKind, WriteInputs,
};
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

/// The `Shared` view `view` of cudarc memory of `context`, keeping `slices` alive (type-erased,
/// released after its drop has synchronised the context).
fn shared<T>(
    view: T,
    context: Arc<CudaContext>,
    slices: impl IntoIterator<Item = Arc<dyn Send + Sync>>,
) -> Shared<T> {
    Shared::new(view, Fence::Cudarc(context), slices.into_iter().collect())
}

/// `slice` type-erased, for a [`Shared`] view's kept buffers.
fn kept<S: Send + Sync + 'static>(slice: &Arc<S>) -> Arc<dyn Send + Sync> {
    Arc::clone(slice) as Arc<dyn Send + Sync>
}

impl<K: TableKind> DeviceTable<K> {
    /// The table over `cells`, checked as [`from_raw`](Self::from_raw) and for its length,
    /// with the slice's context.
    ///
    /// # Safety
    ///
    /// `cells` stays allocated while the table, or any launch or graph that read it, can run.
    unsafe fn over_cudarc<T: DeviceTableCell, S: DevicePtr<T>>(
        gpu: &Gpu,
        cells: &S,
        rows: usize,
        width: usize,
    ) -> Result<(Self, Arc<CudaContext>), Error> {
        let (addr, len, context) = parts(cells);
        at_least(K::NAME, len, rows.saturating_mul(width))?;
        // SAFETY: `cells` is a live cudarc allocation of `len >= rows x width` elements of
        // `T`, which the caller keeps allocated while the table can be read.
        let table = unsafe { Self::from_raw_of::<T>(gpu, addr, rows, width)? };
        Ok((table, context))
    }

    /// A view of a cudarc slice holding at least `rows x width` cells of `T` (`i32`, or `u32`
    /// as mistral.rs keeps token ids: zero-extended, as on the CPU), row-major, checked as
    /// [`from_raw`](Self::from_raw); a shorter slice is [`Error::LengthMismatch`].
    pub fn from_cudarc<'a, T: DeviceTableCell, S: DevicePtr<T>>(
        gpu: &Gpu,
        cells: &'a S,
        rows: usize,
        width: usize,
    ) -> Result<Borrowed<'a, Self>, Error> {
        // SAFETY: `cells` is borrowed for 'a, which the returned view cannot outlive, and the
        // view's drop waits for every launch that read it.
        let (table, context) = unsafe { Self::over_cudarc::<T, S>(gpu, cells, rows, width)? };
        Ok(Borrowed::new(table, Fence::Cudarc(context)))
    }

    /// [`from_cudarc`](Self::from_cudarc) over a slice the view keeps alive (an `Arc` of a
    /// cudarc `CudaSlice`): the view borrows nothing, so an engine's struct or a stored
    /// graph's inputs hold it.
    pub fn from_cudarc_shared<T, S>(
        gpu: &Gpu,
        cells: Arc<S>,
        rows: usize,
        width: usize,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceTableCell,
        S: DevicePtr<T> + Send + Sync + 'static,
    {
        // SAFETY: the view keeps `cells` alive, and its drop waits for every launch that read
        // it before releasing it.
        let (table, context) = unsafe { Self::over_cudarc::<T, S>(gpu, &*cells, rows, width)? };
        Ok(shared(table, context, [kept(&cells)]))
    }
}

impl DeviceLut {
    /// The LUT over the whole of `lut`, with its context.
    ///
    /// # Safety
    ///
    /// As `DeviceTable::over_cudarc`.
    unsafe fn over_cudarc<S: DevicePtr<i64>>(
        gpu: &Gpu,
        lut: &S,
    ) -> Result<(Self, Arc<CudaContext>), Error> {
        let (addr, len, context) = parts(lut);
        // SAFETY: `lut` is a live cudarc allocation of `len` elements, kept by the caller.
        let lut = unsafe { Self::from_raw(gpu, addr, len)? };
        Ok((lut, context))
    }

    /// A view of a whole cudarc slice of `i64`s, checked as [`from_raw`](Self::from_raw).
    pub fn from_cudarc<'a, S: DevicePtr<i64>>(
        gpu: &Gpu,
        lut: &'a S,
    ) -> Result<Borrowed<'a, Self>, Error> {
        // SAFETY: as `DeviceTable::from_cudarc`.
        let (lut, context) = unsafe { Self::over_cudarc(gpu, lut)? };
        Ok(Borrowed::new(lut, Fence::Cudarc(context)))
    }

    /// [`from_cudarc`](Self::from_cudarc) over a slice the view keeps alive.
    pub fn from_cudarc_shared<S>(gpu: &Gpu, lut: Arc<S>) -> Result<Shared<Self>, Error>
    where
        S: DevicePtr<i64> + Send + Sync + 'static,
    {
        // SAFETY: as `DeviceTable::from_cudarc_shared`.
        let (view, context) = unsafe { Self::over_cudarc(gpu, &*lut)? };
        Ok(shared(view, context, [kept(&lut)]))
    }
}

/// The addresses of `slices` after checking each holds at least `needed` elements (named by
/// `names`).
fn addrs_of<T, S: DevicePtr<T>, const N: usize>(
    slices: [&S; N],
    names: [&'static str; N],
    needed: usize,
) -> Result<[u64; N], Error> {
    let mut addrs = [0u64; N];
    for ((addr, slice), what) in addrs.iter_mut().zip(slices).zip(names) {
        let (a, len, _) = parts(slice);
        at_least(what, len, needed)?;
        *addr = a;
    }
    Ok(addrs)
}

/// The address of an optional count slice (`bs`, the valid lengths' count) after checking it
/// holds an element.
fn count_of<C: DevicePtr<i32>>(
    what: &'static str,
    count: Option<&C>,
) -> Result<Option<u64>, Error> {
    count
        .map(|c| {
            let (a, len, _) = parts(c);
            at_least(what, len, 1).map(|()| a)
        })
        .transpose()
}

impl<W: Capacity> DeviceBatch<W> {
    /// The batch over SGLang's three columns (`R`, `P`, `E`) and `bs`, with the columns'
    /// context.
    ///
    /// # Safety
    ///
    /// As `DeviceTable::over_cudarc`, for every slice.
    unsafe fn over_cudarc<R, P, E, SR, SP, SE, B>(
        gpu: &Gpu,
        capacity: W,
        columns: (&SR, &SP, &SE),
        bs: Option<&B>,
    ) -> Result<(Self, Arc<CudaContext>), Error>
    where
        R: DeviceIndex,
        P: DeviceIndex,
        E: DeviceIndex,
        SR: DevicePtr<R>,
        SP: DevicePtr<P>,
        SE: DevicePtr<E>,
        B: DevicePtr<i32>,
    {
        let n = capacity.get();
        let (rpi, prefix, extend) = columns;
        let [a] = addrs_of([rpi], ["req_pool_indices"], n)?;
        let [b] = addrs_of([prefix], ["prefix_lens"], n)?;
        let [c] = addrs_of([extend], ["extend_seq_lens"], n)?;
        let bs = count_of("bs", bs)?;
        // SAFETY: every slice is a live cudarc allocation holding what the batch reads
        // (checked), kept by the caller.
        let mut batch =
            unsafe { Self::from_raw_columns::<PoolRows<R, P, E>>(gpu, capacity, [a, b, c], bs)? };
        batch.record_rooms([parts(rpi).1, parts(prefix).1, parts(extend).1]);
        let (_, _, context) = parts(rpi);
        Ok((batch, context))
    }

    /// Views of SGLang's three batch columns in cudarc slices of at least `capacity` elements
    /// each, `(req_pool_indices, prefix_lens, extend_seq_lens)`, each of its own element type
    /// (`i64`, `i32` or `u32`; SGLang's are `i64`), and optionally the engine's `bs` (an `i32`
    /// slice of at least one element; `None`: [`set_len_on`](Self::set_len_on)), checked as
    /// [`from_raw`](Self::from_raw). The plan reads them in place, in their types.
    pub fn from_cudarc<'a, R, P, E, SR, SP, SE, B>(
        gpu: &Gpu,
        capacity: W,
        columns: (&'a SR, &'a SP, &'a SE),
        bs: Option<&'a B>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        R: DeviceIndex,
        P: DeviceIndex,
        E: DeviceIndex,
        SR: DevicePtr<R>,
        SP: DevicePtr<P>,
        SE: DevicePtr<E>,
        B: DevicePtr<i32>,
    {
        // SAFETY: as `DeviceTable::from_cudarc`, for every slice.
        let (batch, context) =
            unsafe { Self::over_cudarc::<R, P, E, SR, SP, SE, B>(gpu, capacity, columns, bs)? };
        Ok(Borrowed::new(batch, Fence::Cudarc(context)))
    }

    /// [`from_cudarc`](Self::from_cudarc) over slices the view keeps alive.
    #[allow(clippy::type_complexity)]
    pub fn from_cudarc_shared<R, P, E, SR, SP, SE, B>(
        gpu: &Gpu,
        capacity: W,
        columns: (Arc<SR>, Arc<SP>, Arc<SE>),
        bs: Option<Arc<B>>,
    ) -> Result<Shared<Self>, Error>
    where
        R: DeviceIndex,
        P: DeviceIndex,
        E: DeviceIndex,
        SR: DevicePtr<R> + Send + Sync + 'static,
        SP: DevicePtr<P> + Send + Sync + 'static,
        SE: DevicePtr<E> + Send + Sync + 'static,
        B: DevicePtr<i32> + Send + Sync + 'static,
    {
        let (a, b, c) = &columns;
        let refs = (&**a, &**b, &**c);
        // SAFETY: as `DeviceTable::from_cudarc_shared`, for every slice.
        let (batch, context) = unsafe {
            Self::over_cudarc::<R, P, E, SR, SP, SE, B>(gpu, capacity, refs, bs.as_deref())?
        };
        let slices = [kept(a), kept(b), kept(c)]
            .into_iter()
            .chain(bs.as_ref().map(kept));
        Ok(shared(batch, context, slices))
    }
}

impl<W: Capacity> DeviceBatch<W> {
    /// vLLM's two columns over cudarc slices (the first `capacity` elements of `first`, and of
    /// `second` `capacity + extra`), with the context of `first`.
    ///
    /// # Safety
    ///
    /// As `DeviceTable::over_cudarc`, for every slice.
    unsafe fn over_cudarc_columns<L, C, Q, SC, SQ, B>(
        gpu: &Gpu,
        capacity: W,
        first: &SC,
        second: &SQ,
        bs: Option<&B>,
    ) -> Result<(Self, Arc<CudaContext>), Error>
    where
        L: DeviceColumns,
        SC: DevicePtr<C>,
        SQ: DevicePtr<Q>,
        B: DevicePtr<i32>,
    {
        let n = capacity.get();
        let (names, extra) = two_columns::<L>();
        let (a, a_len, context) = parts(first);
        let (b, b_len, _) = parts(second);
        at_least(names[0], a_len, n)?;
        at_least(names[1], b_len, n.saturating_add(extra))?;
        let bs = count_of("bs", bs)?;
        // SAFETY: every slice is a live cudarc allocation holding what the batch reads
        // (checked), kept by the caller.
        let mut batch = unsafe { Self::from_raw_columns::<L>(gpu, capacity, [a, b, 0], bs)? };
        batch.record_rooms([a_len, b_len, 0]);
        Ok((batch, context))
    }

    /// vLLM's two columns of layout `L` over cudarc slices the view keeps alive (the
    /// `from_cudarc_query_*_shared` views).
    fn shared_columns<L, C, Q, SC, SQ, B>(
        gpu: &Gpu,
        capacity: W,
        first: Arc<SC>,
        second: Arc<SQ>,
        bs: Option<Arc<B>>,
    ) -> Result<Shared<Self>, Error>
    where
        L: DeviceColumns,
        SC: DevicePtr<C> + Send + Sync + 'static,
        SQ: DevicePtr<Q> + Send + Sync + 'static,
        B: DevicePtr<i32> + Send + Sync + 'static,
    {
        // SAFETY: the view keeps every slice alive, and its drop waits for every launch that
        // read them before releasing them.
        let (batch, context) = unsafe {
            Self::over_cudarc_columns::<L, C, Q, SC, SQ, B>(
                gpu,
                capacity,
                &*first,
                &*second,
                bs.as_deref(),
            )?
        };
        let slices = [kept(&first), kept(&second)]
            .into_iter()
            .chain(bs.as_ref().map(kept));
        Ok(shared(batch, context, slices))
    }

    /// vLLM's columns over cudarc slices, as candle and mistral.rs hold them: `context_lens`
    /// and `query_lens` (at least `capacity` elements each; `u32`, `i32` or `i64`) and
    /// optionally the engine's `bs`; the table is indexed by batch row. Checked as
    /// [`from_raw_columns`](Self::from_raw_columns).
    pub fn from_cudarc_query_lens<'a, C, Q, SC, SQ, B>(
        gpu: &Gpu,
        capacity: W,
        context_lens: &'a SC,
        query_lens: &'a SQ,
        bs: Option<&'a B>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        C: DeviceIndex,
        Q: DeviceIndex,
        SC: DevicePtr<C>,
        SQ: DevicePtr<Q>,
        B: DevicePtr<i32>,
    {
        // SAFETY: as `DeviceTable::from_cudarc`, for every slice.
        let (batch, context) = unsafe {
            Self::over_cudarc_columns::<QueryLens<C, Q>, C, Q, SC, SQ, B>(
                gpu,
                capacity,
                context_lens,
                query_lens,
                bs,
            )?
        };
        Ok(Borrowed::new(batch, Fence::Cudarc(context)))
    }

    /// [`from_cudarc_query_lens`](Self::from_cudarc_query_lens) with cumulative query offsets
    /// (`cu_seqlens_q`, at least `capacity + 1` elements).
    pub fn from_cudarc_query_starts<'a, C, Q, SC, SQ, B>(
        gpu: &Gpu,
        capacity: W,
        context_lens: &'a SC,
        query_starts: &'a SQ,
        bs: Option<&'a B>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        C: DeviceIndex,
        Q: DeviceIndex,
        SC: DevicePtr<C>,
        SQ: DevicePtr<Q>,
        B: DevicePtr<i32>,
    {
        // SAFETY: as `DeviceTable::from_cudarc`, for every slice.
        let (batch, context) = unsafe {
            Self::over_cudarc_columns::<QueryStarts<C, Q>, C, Q, SC, SQ, B>(
                gpu,
                capacity,
                context_lens,
                query_starts,
                bs,
            )?
        };
        Ok(Borrowed::new(batch, Fence::Cudarc(context)))
    }

    /// [`from_cudarc_query_lens`](Self::from_cudarc_query_lens) over slices the view keeps
    /// alive: it borrows nothing, so an engine's struct or a stored graph's inputs hold it.
    pub fn from_cudarc_query_lens_shared<C, Q, SC, SQ, B>(
        gpu: &Gpu,
        capacity: W,
        context_lens: Arc<SC>,
        query_lens: Arc<SQ>,
        bs: Option<Arc<B>>,
    ) -> Result<Shared<Self>, Error>
    where
        C: DeviceIndex,
        Q: DeviceIndex,
        SC: DevicePtr<C> + Send + Sync + 'static,
        SQ: DevicePtr<Q> + Send + Sync + 'static,
        B: DevicePtr<i32> + Send + Sync + 'static,
    {
        Self::shared_columns::<QueryLens<C, Q>, C, Q, SC, SQ, B>(
            gpu,
            capacity,
            context_lens,
            query_lens,
            bs,
        )
    }

    /// [`from_cudarc_query_starts`](Self::from_cudarc_query_starts) over slices the view keeps
    /// alive.
    pub fn from_cudarc_query_starts_shared<C, Q, SC, SQ, B>(
        gpu: &Gpu,
        capacity: W,
        context_lens: Arc<SC>,
        query_starts: Arc<SQ>,
        bs: Option<Arc<B>>,
    ) -> Result<Shared<Self>, Error>
    where
        C: DeviceIndex,
        Q: DeviceIndex,
        SC: DevicePtr<C> + Send + Sync + 'static,
        SQ: DevicePtr<Q> + Send + Sync + 'static,
        B: DevicePtr<i32> + Send + Sync + 'static,
    {
        Self::shared_columns::<QueryStarts<C, Q>, C, Q, SC, SQ, B>(
            gpu,
            capacity,
            context_lens,
            query_starts,
            bs,
        )
    }
}

impl DeviceReqToToken {
    /// The block table over `cells` (at least `rows x blocks_per_row` of them, checked), with
    /// the slice's context.
    ///
    /// # Safety
    ///
    /// As `DeviceTable::over_cudarc`.
    unsafe fn over_cudarc_blocks<T: DeviceTableCell, S: DevicePtr<T>>(
        gpu: &Gpu,
        cells: &S,
        rows: usize,
        blocks_per_row: usize,
        block_size: usize,
    ) -> Result<(Self, Arc<CudaContext>), Error> {
        let (addr, len, context) = parts(cells);
        at_least("req_to_token", len, rows.saturating_mul(blocks_per_row))?;
        // SAFETY: `cells` is a live cudarc allocation holding the table's cells (checked),
        // kept by the caller.
        let table = unsafe {
            Self::block_table_from_raw::<T>(gpu, addr, rows, blocks_per_row, block_size)?
        };
        Ok((table, context))
    }

    /// A view of the engine's block table in a cudarc slice of at least
    /// `rows x blocks_per_row` cells of `T` (`u32` or `i32`), blocks of `block_size` slots,
    /// checked as [`block_table_from_raw`](Self::block_table_from_raw).
    pub fn block_table_from_cudarc<'a, T: DeviceTableCell, S: DevicePtr<T>>(
        gpu: &Gpu,
        cells: &'a S,
        rows: usize,
        blocks_per_row: usize,
        block_size: usize,
    ) -> Result<Borrowed<'a, Self>, Error> {
        // SAFETY: `cells` is borrowed for 'a, which the view cannot outlive; the view's drop
        // waits for every launch that read it.
        let (table, context) = unsafe {
            Self::over_cudarc_blocks::<T, S>(gpu, cells, rows, blocks_per_row, block_size)?
        };
        Ok(Borrowed::new(table, Fence::Cudarc(context)))
    }

    /// [`block_table_from_cudarc`](Self::block_table_from_cudarc) over a slice the view keeps
    /// alive (an `Arc` of the engine's block table): it borrows nothing.
    pub fn block_table_from_cudarc_shared<T, S>(
        gpu: &Gpu,
        cells: Arc<S>,
        rows: usize,
        blocks_per_row: usize,
        block_size: usize,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceTableCell,
        S: DevicePtr<T> + Send + Sync + 'static,
    {
        // SAFETY: the view keeps `cells` alive, and its drop waits for every launch that read
        // them before releasing them.
        let (table, context) = unsafe {
            Self::over_cudarc_blocks::<T, S>(gpu, &*cells, rows, blocks_per_row, block_size)?
        };
        Ok(shared(table, context, [kept(&cells)]))
    }
}

impl<W: Capacity> DeviceValidLens<W> {
    /// The lengths over `lens` and `count`, with the context of `lens`.
    ///
    /// # Safety
    ///
    /// As `DeviceTable::over_cudarc`, for both slices.
    unsafe fn over_cudarc<T: DeviceIndex, S: DevicePtr<T>, C: DevicePtr<i32>>(
        gpu: &Gpu,
        capacity: W,
        lens: &S,
        count: Option<&C>,
    ) -> Result<(Self, Arc<CudaContext>), Error> {
        let [addr] = addrs_of(
            [lens],
            ["req_to_verify_expected_tokens_valid_lens"],
            capacity.get(),
        )?;
        let count = count_of("valid_lens count", count)?;
        // SAFETY: both slices are live cudarc allocations holding what the view reads
        // (checked), kept by the caller.
        let mut view = unsafe { Self::from_raw_of::<T>(gpu, capacity, addr, count)? };
        let (_, len, context) = parts(lens);
        view.record_room(len);
        Ok((view, context))
    }

    /// Views of a cudarc slice of at least `capacity` lengths (`i64`, `i32` or `u32`; the plan
    /// reads them in their type) and optionally of their count (an `i32` slice; `None`:
    /// [`set_len_on`](Self::set_len_on)), checked as [`from_raw`](Self::from_raw).
    pub fn from_cudarc<'a, T: DeviceIndex, S: DevicePtr<T>, C: DevicePtr<i32>>(
        gpu: &Gpu,
        capacity: W,
        lens: &'a S,
        count: Option<&'a C>,
    ) -> Result<Borrowed<'a, Self>, Error> {
        // SAFETY: as `DeviceTable::from_cudarc`, for both slices.
        let (view, context) = unsafe { Self::over_cudarc::<T, S, C>(gpu, capacity, lens, count)? };
        Ok(Borrowed::new(view, Fence::Cudarc(context)))
    }

    /// [`from_cudarc`](Self::from_cudarc) over slices the view keeps alive.
    pub fn from_cudarc_shared<T, S, C>(
        gpu: &Gpu,
        capacity: W,
        lens: Arc<S>,
        count: Option<Arc<C>>,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceIndex,
        S: DevicePtr<T> + Send + Sync + 'static,
        C: DevicePtr<i32> + Send + Sync + 'static,
    {
        // SAFETY: as `DeviceTable::from_cudarc_shared`, for both slices.
        let (view, context) =
            unsafe { Self::over_cudarc::<T, S, C>(gpu, capacity, &*lens, count.as_deref())? };
        let slices = [kept(&lens)].into_iter().chain(count.as_ref().map(kept));
        Ok(shared(view, context, slices))
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOff, Device> {
    /// The write inputs over three slices (`input_ids` of `T`, `positions` of `P`,
    /// `out_cache_loc` of `L`), with the context of `input_ids`.
    ///
    /// # Safety
    ///
    /// As `DeviceTable::over_cudarc`, for every slice.
    unsafe fn over_cudarc<T, P, L, ST, SP, SL>(
        gpu: &Gpu,
        capacity: E,
        input_ids: &ST,
        positions: &SP,
        out_cache_loc: &SL,
    ) -> Result<(Self, Arc<CudaContext>), Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        L: DeviceIndex,
        ST: DevicePtr<T>,
        SP: DevicePtr<P>,
        SL: DevicePtr<L>,
    {
        let n = capacity.get();
        let [ids] = addrs_of([input_ids], ["input_ids"], n)?;
        let [pos] = addrs_of([positions], ["positions"], n)?;
        let [loc] = addrs_of([out_cache_loc], ["out_cache_loc"], n)?;
        let raw = RawWriteInputs {
            input_ids: ids,
            positions: pos,
            out_cache_loc: loc,
        };
        // SAFETY: every slice is a live cudarc allocation of at least `capacity` elements of
        // its type (checked), kept by the caller.
        let mut inputs = unsafe { Self::from_raw_of::<T, P, L>(gpu, capacity, raw)? };
        let (_, ids_len, context) = parts(input_ids);
        inputs.record_rooms([ids_len, parts(positions).1, parts(out_cache_loc).1]);
        Ok((inputs, context))
    }

    /// Views of three cudarc slices of at least `capacity` elements each: `input_ids`,
    /// `positions` and `out_cache_loc`, each of its own element type (`i64`, `i32` or `u32`;
    /// mistral.rs and candle-vllm: `u32` token ids, `i64` positions and slot mapping), checked
    /// as [`from_raw`](Self::from_raw). The write launch reads them in place, in their types.
    pub fn from_cudarc<'a, T, P, L, ST, SP, SL>(
        gpu: &Gpu,
        capacity: E,
        input_ids: &'a ST,
        positions: &'a SP,
        out_cache_loc: &'a SL,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        L: DeviceIndex,
        ST: DevicePtr<T>,
        SP: DevicePtr<P>,
        SL: DevicePtr<L>,
    {
        // SAFETY: as `DeviceTable::from_cudarc`, for every slice.
        let (inputs, context) = unsafe {
            Self::over_cudarc::<T, P, L, ST, SP, SL>(
                gpu,
                capacity,
                input_ids,
                positions,
                out_cache_loc,
            )?
        };
        Ok(Borrowed::new(inputs, Fence::Cudarc(context)))
    }

    /// [`from_cudarc`](Self::from_cudarc) over slices the view keeps alive.
    pub fn from_cudarc_shared<T, P, L, ST, SP, SL>(
        gpu: &Gpu,
        capacity: E,
        input_ids: Arc<ST>,
        positions: Arc<SP>,
        out_cache_loc: Arc<SL>,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        L: DeviceIndex,
        ST: DevicePtr<T> + Send + Sync + 'static,
        SP: DevicePtr<P> + Send + Sync + 'static,
        SL: DevicePtr<L> + Send + Sync + 'static,
    {
        // SAFETY: as `DeviceTable::from_cudarc_shared`, for every slice.
        let (inputs, context) = unsafe {
            Self::over_cudarc::<T, P, L, ST, SP, SL>(
                gpu,
                capacity,
                &*input_ids,
                &*positions,
                &*out_cache_loc,
            )?
        };
        let slices = [kept(&input_ids), kept(&positions), kept(&out_cache_loc)];
        Ok(shared(inputs, context, slices))
    }
}

impl<'a, E: Capacity> Borrowed<'a, WriteInputs<E, InputAssertOff, Device>> {
    /// The same write inputs with the input assert on (the host's
    /// [`WriteInputsView::with_expected`](crate::WriteInputsView::with_expected)): views of
    /// two more cudarc slices of at least the capacity's elements, the tokens the engine
    /// expects at each write entry (`T`: `i64`, `i32` or `u32`) and their positions (`P`), in
    /// the inputs' context, checked as [`WriteInputs::from_raw_asserted`]. A token or position
    /// that differs is a write violation (`INPUT_ASSERT`, recorded by the write launch).
    pub fn with_expected_cudarc<T, P, ST, SP>(
        &self,
        gpu: &Gpu,
        expected_tokens: &'a ST,
        expected_positions: &'a SP,
    ) -> Result<Borrowed<'a, WriteInputs<E, InputAssertOn, Device>>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        ST: DevicePtr<T>,
        SP: DevicePtr<P>,
    {
        self.derive(|inputs| {
            // SAFETY: both slices are borrowed for 'a, as the inputs' memory, and the derived
            // view's drop waits for every launch that read them.
            unsafe { asserted_over_cudarc(gpu, inputs, expected_tokens, expected_positions) }
        })
    }
}

impl<E: Capacity> Shared<WriteInputs<E, InputAssertOff, Device>> {
    /// [`Borrowed::with_expected_cudarc`] over slices the view keeps alive (with the inputs'
    /// own).
    pub fn with_expected_cudarc<T, P, ST, SP>(
        &self,
        gpu: &Gpu,
        expected_tokens: Arc<ST>,
        expected_positions: Arc<SP>,
    ) -> Result<Shared<WriteInputs<E, InputAssertOn, Device>>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        ST: DevicePtr<T> + Send + Sync + 'static,
        SP: DevicePtr<P> + Send + Sync + 'static,
    {
        let more = vec![kept(&expected_tokens), kept(&expected_positions)];
        self.derive(more, |inputs| {
            // SAFETY: the derived view keeps both slices alive, and its drop waits for every
            // launch that read them before releasing them.
            unsafe { asserted_over_cudarc(gpu, inputs, &*expected_tokens, &*expected_positions) }
        })
    }
}

/// `inputs` with the input assert on over two cudarc slices (lengths checked).
///
/// # Safety
///
/// Both slices stay allocated while the returned inputs, or any launch or graph that read
/// them, can run.
unsafe fn asserted_over_cudarc<E, T, P, ST, SP>(
    gpu: &Gpu,
    inputs: &WriteInputs<E, InputAssertOff, Device>,
    expected_tokens: &ST,
    expected_positions: &SP,
) -> Result<WriteInputs<E, InputAssertOn, Device>, Error>
where
    E: Capacity,
    T: DeviceIndex,
    P: DeviceIndex,
    ST: DevicePtr<T>,
    SP: DevicePtr<P>,
{
    let n = inputs.capacity().get();
    let [tokens] = addrs_of([expected_tokens], ["expected input_ids"], n)?;
    let [positions] = addrs_of([expected_positions], ["expected positions"], n)?;
    let rooms = [parts(expected_tokens).1, parts(expected_positions).1];
    // SAFETY: both are live cudarc allocations of at least `n` elements of their types
    // (checked), kept by the caller.
    unsafe { inputs.asserted_of::<T, P>(gpu, tokens, positions, Some(rooms)) }
}

/// A real-KV source over cudarc bytes, borrowed for `'a` ([`new`](Self::new)) or kept alive
/// by the value itself ([`shared`](Self::shared), a `CudarcKvSource<'static>` that an engine's
/// struct or a stored graph's closure holds): [`source`](Self::source) gives the
/// [`DeviceRealKvSource`] for launches, bounded by this value's borrow; dropping it synchronises
/// the memory's context (then releases a kept slice).
pub struct CudarcKvSource<'a> {
    source: DeviceRealKvSource<'static>,
    context: Arc<CudaContext>,
    /// The slice a shared source keeps alive (released after the drop's synchronisation).
    kept: Option<Arc<dyn Send + Sync>>,
    bytes: PhantomData<&'a ()>,
}

impl<'a> CudarcKvSource<'a> {
    /// The source over `bytes` from `byte_offset`, with its context.
    ///
    /// # Safety
    ///
    /// `bytes` stays allocated while the source, or any launch or graph that used it, can run.
    unsafe fn over<T, S: DevicePtr<T>>(
        gpu: &Gpu,
        bytes: &S,
        byte_offset: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<(DeviceRealKvSource<'static>, Arc<CudaContext>), Error> {
        let (addr, elements, context) = parts(bytes);
        let len = elements
            .checked_mul(core::mem::size_of::<T>())
            .ok_or(Error::RealKvShape {
                shape: vec![elements, core::mem::size_of::<T>()],
                detail: "the slice's bytes overflow usize".to_owned(),
            })?;
        let Some(rest) = len.checked_sub(byte_offset) else {
            return Err(Error::RealKvShape {
                shape: vec![len],
                detail: format!("byte offset {byte_offset} is past the {len} bytes given"),
            });
        };
        // SAFETY: `bytes` is a live cudarc allocation of `len` bytes, kept by the caller; the
        // range from the offset lies inside it (checked above, and by `from_raw`).
        let source = unsafe {
            DeviceRealKvSource::from_raw(gpu, addr + byte_offset as u64, rest, layout, params)?
        };
        Ok((source, context))
    }

    /// The source whose row 0 starts `byte_offset` bytes into the cudarc slice `bytes` (of any
    /// element type: a `u8` pool, or an engine's `bf16` / `f16` KV cache read as its bytes),
    /// checked as [`DeviceRealKvSource::at`] (and the slice's range as
    /// [`DeviceRealKvSource::from_raw`]).
    pub fn new<T, S: DevicePtr<T>>(
        gpu: &Gpu,
        bytes: &'a S,
        byte_offset: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        // SAFETY: `bytes` is borrowed for 'a; the source is handed out only for borrows of
        // this value, whose drop waits for every launch that read it.
        let (source, context) = unsafe { Self::over(gpu, bytes, byte_offset, layout, params)? };
        Ok(CudarcKvSource {
            source,
            context,
            kept: None,
            bytes: PhantomData,
        })
    }

    /// The source that `new` gives, over a slice this value keeps alive (an `Arc` of the
    /// engine's cudarc KV pool): it borrows nothing.
    pub fn shared<T, S>(
        gpu: &Gpu,
        bytes: Arc<S>,
        byte_offset: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<CudarcKvSource<'static>, Error>
    where
        S: DevicePtr<T> + Send + Sync + 'static,
    {
        // SAFETY: the value keeps `bytes` alive; its drop waits for every launch that read
        // them before releasing them.
        let (source, context) = unsafe { Self::over(gpu, &*bytes, byte_offset, layout, params)? };
        Ok(CudarcKvSource {
            source,
            context,
            kept: Some(kept(&bytes)),
            bytes: PhantomData,
        })
    }

    /// The same source with its tokens' bytes where `layout` says: a paged engine's cache in
    /// vLLM's K or V layout or HND ([`DeviceRealKvSource::with_token_layout`], its errors).
    pub fn with_token_layout(mut self, layout: crate::real_kv::TokenLayout) -> Result<Self, Error> {
        self.source = self.source.with_token_layout(layout)?;
        Ok(self)
    }

    /// The source, for launches borrowing this value.
    pub fn source(&self) -> DeviceRealKvSource<'_> {
        self.source
    }
}

impl Drop for CudarcKvSource<'_> {
    fn drop(&mut self) {
        // As `Borrowed`'s drop; a kept slice is released after it (fields drop after this).
        let _ = self.context.synchronize();
    }
}

impl core::fmt::Debug for CudarcKvSource<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudarcKvSource")
            .field("source", &self.source)
            .field("shared", &self.kept.is_some())
            .finish()
    }
}
