//! Safe views of device buffers the engine allocated through the crate or cust (a
//! `cust::memory::DeviceBuffer<T>` or a [`DeviceArray<T>`](crate::cuda::DeviceArray), anything
//! [`ViewableSlice`]): the device inputs over buffers borrowed for `'a` (`from_buffer`,
//! `from_buffers`: a [`Borrowed`] view, for a scope that outlives it) or over `Arc`s of them
//! (`from_shared`: a [`Shared`] view, which keeps them alive and can live in an engine's struct
//! or a stored graph's inputs). Both synchronise the `Gpu`'s context when dropped: make views
//! once and keep them (a view made and dropped every step stalls the host every step). The
//! `unsafe` `from_raw` constructors remain for memory the crate cannot name (raw pointers of
//! another framework).

use super::borrowed::{at_least, Borrowed, Fence, Shared};
use super::gpu::Gpu;
use super::plan_inputs::{
    two_columns, DeviceBatch, DeviceColumns, DeviceIndex, DeviceLut, DeviceReqToToken, DeviceTable,
    DeviceTableCell, DeviceValidLens,
};
use super::write_inputs::RawWriteInputs;
use crate::capacity::Capacity;
use crate::cuda::driver::array::ViewableSlice;
use crate::input::{
    InputAssertOff, InputAssertOn, PoolRows, QueryLens, QueryStarts, TableKind, WriteInputs,
};
use crate::memory::{Device, Element};
use crate::Error;
use std::sync::Arc;

/// The address of `buffer` after checking it holds at least `needed` elements.
fn addr_of<T: Element, B: ViewableSlice<T> + ?Sized>(
    what: &'static str,
    buffer: &B,
    needed: usize,
) -> Result<u64, Error> {
    at_least(what, buffer.len(), needed)?;
    Ok(buffer.device_addr())
}

/// The [`Shared`] view `view` of `gpu`'s memory, keeping alive the buffers it was built over:
/// `buffers`, then `optional`'s (their `Arc`s, type-erased, released after its drop has
/// synchronised the context).
fn shared_view<T, B, O>(
    gpu: &Gpu,
    view: T,
    buffers: impl IntoIterator<Item = Arc<B>>,
    optional: Option<Arc<O>>,
) -> Shared<T>
where
    B: Send + Sync + 'static,
    O: Send + Sync + 'static,
{
    let kept = buffers
        .into_iter()
        .map(|b| b as Arc<dyn Send + Sync>)
        .chain(optional.map(|o| o as Arc<dyn Send + Sync>))
        .collect();
    Shared::new(view, Fence::Gpu(gpu.clone()), kept)
}

impl<K: TableKind> DeviceTable<K> {
    /// The table over `cells`, checked as [`from_raw`](Self::from_raw) and for its length.
    ///
    /// # Safety
    ///
    /// `cells` stays allocated while the returned table, or any launch or graph that read it,
    /// can run.
    unsafe fn over<T: DeviceTableCell, B: ViewableSlice<T> + ?Sized>(
        gpu: &Gpu,
        cells: &B,
        rows: usize,
        width: usize,
    ) -> Result<Self, Error> {
        let addr = addr_of(K::NAME, cells, rows.saturating_mul(width))?;
        // SAFETY: `cells` is a live device allocation of at least `rows x width` elements of
        // `T` (checked); the caller keeps it allocated as long as the table can be read.
        unsafe { Self::from_raw_of::<T>(gpu, addr, rows, width) }
    }

    /// A view of a device buffer holding at least `rows x width` cells of `T` (`i32`, or
    /// `u32`: zero-extended, as on the CPU), row-major, checked as
    /// [`from_raw`](Self::from_raw); a shorter buffer is [`Error::LengthMismatch`]. The buffer
    /// is allocated in `gpu`'s context (or one its device can access). Dropping the view
    /// synchronises the context: make it once and keep it.
    pub fn from_buffer<'a, T: DeviceTableCell, B: ViewableSlice<T> + ?Sized>(
        gpu: &Gpu,
        cells: &'a B,
        rows: usize,
        width: usize,
    ) -> Result<Borrowed<'a, Self>, Error> {
        // SAFETY: `cells` is borrowed for 'a, which the view cannot outlive, and the view's
        // drop waits for every launch that read it.
        let table = unsafe { Self::over::<T, B>(gpu, cells, rows, width)? };
        Ok(Borrowed::new(table, Fence::Gpu(gpu.clone())))
    }

    /// [`from_buffer`](Self::from_buffer) over a buffer the view keeps alive (an engine's
    /// struct or a stored graph's inputs hold the view).
    pub fn from_shared<T, B>(
        gpu: &Gpu,
        cells: Arc<B>,
        rows: usize,
        width: usize,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceTableCell,
        B: ViewableSlice<T> + Send + Sync + 'static,
    {
        // SAFETY: the view keeps `cells` alive, and its drop waits for every launch that read
        // it before releasing it.
        let table = unsafe { Self::over::<T, B>(gpu, &*cells, rows, width)? };
        Ok(shared_view(gpu, table, [cells], None::<Arc<B>>))
    }
}

impl DeviceLut {
    /// A view of a whole device buffer of `i64`s, checked as [`from_raw`](Self::from_raw).
    /// Dropping the view synchronises the context: make it once and keep it.
    pub fn from_buffer<'a, B: ViewableSlice<i64> + ?Sized>(
        gpu: &Gpu,
        lut: &'a B,
    ) -> Result<Borrowed<'a, Self>, Error> {
        // SAFETY: as `DeviceTable::from_buffer`.
        let view = unsafe { Self::from_raw(gpu, lut.device_addr(), lut.len())? };
        Ok(Borrowed::new(view, Fence::Gpu(gpu.clone())))
    }

    /// [`from_buffer`](Self::from_buffer) over a buffer the view keeps alive.
    pub fn from_shared<B>(gpu: &Gpu, lut: Arc<B>) -> Result<Shared<Self>, Error>
    where
        B: ViewableSlice<i64> + Send + Sync + 'static,
    {
        // SAFETY: as `DeviceTable::from_shared`.
        let view = unsafe { Self::from_raw(gpu, lut.device_addr(), lut.len())? };
        Ok(shared_view(gpu, view, [lut], None::<Arc<B>>))
    }
}

impl<W: Capacity> DeviceBatch<W> {
    /// The batch over SGLang's three columns (`req_pool_indices` of `R`, `prefix_lens` of `P`,
    /// `extend_seq_lens` of `E`) and `bs`, checked as [`from_raw`](Self::from_raw) and for
    /// their lengths.
    ///
    /// # Safety
    ///
    /// As [`DeviceTable::over`], for every buffer.
    unsafe fn over<R, P, E, BR, BP, BE, S>(
        gpu: &Gpu,
        capacity: W,
        columns: (&BR, &BP, &BE),
        bs: Option<&S>,
    ) -> Result<Self, Error>
    where
        R: DeviceIndex,
        P: DeviceIndex,
        E: DeviceIndex,
        BR: ViewableSlice<R> + ?Sized,
        BP: ViewableSlice<P> + ?Sized,
        BE: ViewableSlice<E> + ?Sized,
        S: ViewableSlice<i32> + ?Sized,
    {
        let n = capacity.get();
        let (rpi, prefix, extend) = columns;
        let addrs = [
            addr_of("req_pool_indices", rpi, n)?,
            addr_of("prefix_lens", prefix, n)?,
            addr_of("extend_seq_lens", extend, n)?,
        ];
        let bs = bs.map(|b| addr_of("bs", b, 1)).transpose()?;
        // SAFETY: every buffer holds what its view claims (checked); the caller keeps them.
        let mut batch =
            unsafe { Self::from_raw_columns::<PoolRows<R, P, E>>(gpu, capacity, addrs, bs)? };
        batch.record_rooms([rpi.len(), prefix.len(), extend.len()]);
        Ok(batch)
    }

    /// Views of SGLang's three batch columns in device buffers of at least `capacity`
    /// elements each, `(req_pool_indices, prefix_lens, extend_seq_lens)`, each of its own
    /// element type (`i64`, `i32` or `u32`; SGLang's are `i64`), and optionally of the
    /// engine's `bs` (an `i32` buffer of at least one element; `None`:
    /// [`set_len_on`](Self::set_len_on), and the type of the absent buffer must be named,
    /// `None::<&DeviceBuffer<i32>>`), checked as [`from_raw`](Self::from_raw). The plan reads
    /// them in place, in their types. Dropping the view synchronises the context: make it once
    /// and keep it.
    pub fn from_buffers<'a, R, P, E, BR, BP, BE, S>(
        gpu: &Gpu,
        capacity: W,
        columns: (&'a BR, &'a BP, &'a BE),
        bs: Option<&'a S>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        R: DeviceIndex,
        P: DeviceIndex,
        E: DeviceIndex,
        BR: ViewableSlice<R> + ?Sized,
        BP: ViewableSlice<P> + ?Sized,
        BE: ViewableSlice<E> + ?Sized,
        S: ViewableSlice<i32> + ?Sized,
    {
        // SAFETY: as `DeviceTable::from_buffer`, for every buffer.
        let batch = unsafe { Self::over::<R, P, E, BR, BP, BE, S>(gpu, capacity, columns, bs)? };
        Ok(Borrowed::new(batch, Fence::Gpu(gpu.clone())))
    }

    /// [`from_buffers`](Self::from_buffers) over buffers the view keeps alive.
    #[allow(clippy::type_complexity)]
    pub fn from_shared<R, P, E, BR, BP, BE, S>(
        gpu: &Gpu,
        capacity: W,
        columns: (Arc<BR>, Arc<BP>, Arc<BE>),
        bs: Option<Arc<S>>,
    ) -> Result<Shared<Self>, Error>
    where
        R: DeviceIndex,
        P: DeviceIndex,
        E: DeviceIndex,
        BR: ViewableSlice<R> + Send + Sync + 'static,
        BP: ViewableSlice<P> + Send + Sync + 'static,
        BE: ViewableSlice<E> + Send + Sync + 'static,
        S: ViewableSlice<i32> + Send + Sync + 'static,
    {
        let (a, b, c) = &columns;
        let refs = (&**a, &**b, &**c);
        // SAFETY: as `DeviceTable::from_shared`, for every buffer.
        let batch =
            unsafe { Self::over::<R, P, E, BR, BP, BE, S>(gpu, capacity, refs, bs.as_deref())? };
        let (a, b, c) = columns;
        let kept: Vec<Arc<dyn Send + Sync>> = vec![a, b, c];
        let kept = kept
            .into_iter()
            .chain(bs.map(|b| b as Arc<dyn Send + Sync>))
            .collect();
        Ok(Shared::new(batch, Fence::Gpu(gpu.clone()), kept))
    }
}

impl<W: Capacity> DeviceBatch<W> {
    /// vLLM's two columns `L` over the engine's buffers (`first`: `capacity` elements,
    /// `second`: `capacity` plus the layout's extra), borrowed for `'a`.
    fn over_columns<'a, L, C, Q, BC, BQ, S>(
        gpu: &Gpu,
        capacity: W,
        first: &'a BC,
        second: &'a BQ,
        bs: Option<&'a S>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        L: DeviceColumns,
        C: DeviceIndex,
        Q: DeviceIndex,
        BC: ViewableSlice<C> + ?Sized,
        BQ: ViewableSlice<Q> + ?Sized,
        S: ViewableSlice<i32> + ?Sized,
    {
        let (names, extra) = two_columns::<L>();
        let n = capacity.get();
        let addrs = [
            addr_of(names[0], first, n)?,
            addr_of(names[1], second, n.saturating_add(extra))?,
            0,
        ];
        let bs = bs.map(|b| addr_of("bs", b, 1)).transpose()?;
        // SAFETY: every buffer is borrowed for 'a, which the returned view cannot outlive, holds
        // what the batch reads (checked), and the view's drop waits for every launch that read it.
        let mut batch = unsafe { Self::from_raw_columns::<L>(gpu, capacity, addrs, bs)? };
        batch.record_rooms([first.len(), second.len(), 0]);
        Ok(Borrowed::new(batch, Fence::Gpu(gpu.clone())))
    }

    /// vLLM's columns over the engine's buffers: `context_lens` (the whole context, this
    /// step's tokens included) and `query_lens`, at least `capacity` elements each, of their own
    /// element types (`u32`, `i32` or `i64`), and optionally the engine's `bs` (`None`:
    /// [`set_len_on`](Self::set_len_on)). The table is indexed by batch row; checked as
    /// [`from_raw_columns`](Self::from_raw_columns). Dropping the view synchronises the
    /// context: make it once and keep it.
    pub fn from_query_lens<'a, C, Q, BC, BQ, S>(
        gpu: &Gpu,
        capacity: W,
        context_lens: &'a BC,
        query_lens: &'a BQ,
        bs: Option<&'a S>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        C: DeviceIndex,
        Q: DeviceIndex,
        BC: ViewableSlice<C> + ?Sized,
        BQ: ViewableSlice<Q> + ?Sized,
        S: ViewableSlice<i32> + ?Sized,
    {
        Self::over_columns::<QueryLens<C, Q>, C, Q, BC, BQ, S>(
            gpu,
            capacity,
            context_lens,
            query_lens,
            bs,
        )
    }

    /// [`from_query_lens`](Self::from_query_lens) with cumulative query offsets
    /// (`cu_seqlens_q`): `query_starts` holds at least `capacity + 1` elements.
    pub fn from_query_starts<'a, C, Q, BC, BQ, S>(
        gpu: &Gpu,
        capacity: W,
        context_lens: &'a BC,
        query_starts: &'a BQ,
        bs: Option<&'a S>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        C: DeviceIndex,
        Q: DeviceIndex,
        BC: ViewableSlice<C> + ?Sized,
        BQ: ViewableSlice<Q> + ?Sized,
        S: ViewableSlice<i32> + ?Sized,
    {
        Self::over_columns::<QueryStarts<C, Q>, C, Q, BC, BQ, S>(
            gpu,
            capacity,
            context_lens,
            query_starts,
            bs,
        )
    }
}

impl DeviceReqToToken {
    /// A view of the engine's block table in a buffer of at least `rows x blocks_per_row`
    /// cells of `T` (`u32` or `i32`), blocks of `block_size` slots, checked as
    /// [`block_table_from_raw`](Self::block_table_from_raw). Dropping the view synchronises
    /// the context: make it once and keep it.
    pub fn block_table_from_buffer<'a, T: DeviceTableCell, B: ViewableSlice<T> + ?Sized>(
        gpu: &Gpu,
        cells: &'a B,
        rows: usize,
        blocks_per_row: usize,
        block_size: usize,
    ) -> Result<Borrowed<'a, Self>, Error> {
        let addr = addr_of("req_to_token", cells, rows.saturating_mul(blocks_per_row))?;
        // SAFETY: `cells` is borrowed for 'a, which the view cannot outlive, and holds the
        // table's cells (checked); the view's drop waits for every launch that read it.
        let table = unsafe {
            Self::block_table_from_raw::<T>(gpu, addr, rows, blocks_per_row, block_size)?
        };
        Ok(Borrowed::new(table, Fence::Gpu(gpu.clone())))
    }
}

impl<W: Capacity> DeviceValidLens<W> {
    /// The lengths over `lens` and `count`, checked as [`from_raw`](Self::from_raw) and for
    /// their lengths.
    ///
    /// # Safety
    ///
    /// As [`DeviceTable::over`], for both buffers.
    unsafe fn over<T, B, C>(
        gpu: &Gpu,
        capacity: W,
        lens: &B,
        count: Option<&C>,
    ) -> Result<Self, Error>
    where
        T: DeviceIndex,
        B: ViewableSlice<T> + ?Sized,
        C: ViewableSlice<i32> + ?Sized,
    {
        let addr = addr_of(
            "req_to_verify_expected_tokens_valid_lens",
            lens,
            capacity.get(),
        )?;
        let count = count
            .map(|c| addr_of("valid_lens count", c, 1))
            .transpose()?;
        // SAFETY: both buffers hold what their views claim (checked); the caller keeps them.
        let mut view = unsafe { Self::from_raw_of::<T>(gpu, capacity, addr, count)? };
        view.record_room(lens.len());
        Ok(view)
    }

    /// Views of a device buffer of at least `capacity` lengths (`i64`, `i32` or `u32`) and optionally of their
    /// count (an `i32` buffer; `None`: [`set_len_on`](Self::set_len_on)), checked as
    /// [`from_raw`](Self::from_raw). Dropping the view synchronises the context: make it once
    /// and keep it.
    pub fn from_buffers<'a, T, B, C>(
        gpu: &Gpu,
        capacity: W,
        lens: &'a B,
        count: Option<&'a C>,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        T: DeviceIndex,
        B: ViewableSlice<T> + ?Sized,
        C: ViewableSlice<i32> + ?Sized,
    {
        // SAFETY: as `DeviceTable::from_buffer`, for both buffers.
        let view = unsafe { Self::over::<T, B, C>(gpu, capacity, lens, count)? };
        Ok(Borrowed::new(view, Fence::Gpu(gpu.clone())))
    }

    /// [`from_buffers`](Self::from_buffers) over buffers the view keeps alive.
    pub fn from_shared<T, B, C>(
        gpu: &Gpu,
        capacity: W,
        lens: Arc<B>,
        count: Option<Arc<C>>,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceIndex,
        B: ViewableSlice<T> + Send + Sync + 'static,
        C: ViewableSlice<i32> + Send + Sync + 'static,
    {
        // SAFETY: as `DeviceTable::from_shared`, for both buffers.
        let view = unsafe { Self::over::<T, B, C>(gpu, capacity, &*lens, count.as_deref())? };
        Ok(shared_view(gpu, view, [lens], count))
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOff, Device> {
    /// The inputs over three buffers (`input_ids` of `T`, `positions` of `P`, `out_cache_loc`
    /// of `L`), checked as [`from_raw`](Self::from_raw) and for their lengths.
    ///
    /// # Safety
    ///
    /// As [`DeviceTable::over`], for every buffer.
    unsafe fn over<T, P, L, BT, BP, BL>(
        gpu: &Gpu,
        capacity: E,
        input_ids: &BT,
        positions: &BP,
        out_cache_loc: &BL,
    ) -> Result<Self, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        L: DeviceIndex,
        BT: ViewableSlice<T> + ?Sized,
        BP: ViewableSlice<P> + ?Sized,
        BL: ViewableSlice<L> + ?Sized,
    {
        let n = capacity.get();
        let raw = RawWriteInputs {
            input_ids: addr_of("input_ids", input_ids, n)?,
            positions: addr_of("positions", positions, n)?,
            out_cache_loc: addr_of("out_cache_loc", out_cache_loc, n)?,
        };
        // SAFETY: every buffer holds what its view claims (checked); the caller keeps them.
        let mut inputs = unsafe { Self::from_raw_of::<T, P, L>(gpu, capacity, raw)? };
        inputs.record_rooms([input_ids.len(), positions.len(), out_cache_loc.len()]);
        Ok(inputs)
    }

    /// Views of three device buffers of at least `capacity` elements each: `input_ids`,
    /// `positions` and `out_cache_loc`, each of its own element type (`i64`, `i32` or `u32`;
    /// mistral.rs: `u32` token ids, `i64` positions and slot mapping), checked as
    /// [`from_raw`](Self::from_raw). The write launch reads them in place, in their types.
    /// Dropping the view synchronises the context: make it once and keep it.
    pub fn from_buffers<'a, T, P, L, BT, BP, BL>(
        gpu: &Gpu,
        capacity: E,
        input_ids: &'a BT,
        positions: &'a BP,
        out_cache_loc: &'a BL,
    ) -> Result<Borrowed<'a, Self>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        L: DeviceIndex,
        BT: ViewableSlice<T> + ?Sized,
        BP: ViewableSlice<P> + ?Sized,
        BL: ViewableSlice<L> + ?Sized,
    {
        // SAFETY: as `DeviceTable::from_buffer`, for every buffer.
        let inputs = unsafe {
            Self::over::<T, P, L, BT, BP, BL>(gpu, capacity, input_ids, positions, out_cache_loc)?
        };
        Ok(Borrowed::new(inputs, Fence::Gpu(gpu.clone())))
    }

    /// [`from_buffers`](Self::from_buffers) over buffers the view keeps alive.
    pub fn from_shared<T, P, L, BT, BP, BL>(
        gpu: &Gpu,
        capacity: E,
        input_ids: Arc<BT>,
        positions: Arc<BP>,
        out_cache_loc: Arc<BL>,
    ) -> Result<Shared<Self>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        L: DeviceIndex,
        BT: ViewableSlice<T> + Send + Sync + 'static,
        BP: ViewableSlice<P> + Send + Sync + 'static,
        BL: ViewableSlice<L> + Send + Sync + 'static,
    {
        // SAFETY: as `DeviceTable::from_shared`, for every buffer.
        let inputs = unsafe {
            Self::over::<T, P, L, BT, BP, BL>(
                gpu,
                capacity,
                &*input_ids,
                &*positions,
                &*out_cache_loc,
            )?
        };
        let kept: Vec<Arc<dyn Send + Sync>> = vec![input_ids, positions, out_cache_loc];
        Ok(Shared::new(inputs, Fence::Gpu(gpu.clone()), kept))
    }
}

impl<'a, E: Capacity> Borrowed<'a, WriteInputs<E, InputAssertOff, Device>> {
    /// The same write inputs with the input assert on (the host's
    /// [`WriteInputsView::with_expected`](crate::WriteInputsView::with_expected)): views of
    /// two more device buffers of at least the capacity's elements, the tokens the engine
    /// expects at each write entry (`T`: `i64`, `i32` or `u32`) and their positions (`P`),
    /// checked as [`WriteInputs::from_raw_asserted`]. A token or position that differs is a
    /// write violation (`INPUT_ASSERT`, recorded by the write launch).
    pub fn with_expected<T, P, BT, BP>(
        &self,
        gpu: &Gpu,
        expected_tokens: &'a BT,
        expected_positions: &'a BP,
    ) -> Result<Borrowed<'a, WriteInputs<E, InputAssertOn, Device>>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        BT: ViewableSlice<T> + ?Sized,
        BP: ViewableSlice<P> + ?Sized,
    {
        self.derive(|inputs| {
            // SAFETY: both buffers are borrowed for 'a, as the inputs' memory, and the derived
            // view's drop waits for every launch that read them.
            unsafe { asserted_over(gpu, inputs, expected_tokens, expected_positions) }
        })
    }
}

impl<E: Capacity> Shared<WriteInputs<E, InputAssertOff, Device>> {
    /// [`Borrowed::with_expected`] over buffers the view keeps alive (with the inputs' own).
    pub fn with_expected<T, P, BT, BP>(
        &self,
        gpu: &Gpu,
        expected_tokens: Arc<BT>,
        expected_positions: Arc<BP>,
    ) -> Result<Shared<WriteInputs<E, InputAssertOn, Device>>, Error>
    where
        T: DeviceIndex,
        P: DeviceIndex,
        BT: ViewableSlice<T> + Send + Sync + 'static,
        BP: ViewableSlice<P> + Send + Sync + 'static,
    {
        let more: Vec<Arc<dyn Send + Sync>> =
            vec![expected_tokens.clone(), expected_positions.clone()];
        self.derive(more, |inputs| {
            // SAFETY: the derived view keeps both buffers alive, and its drop waits for every
            // launch that read them before releasing them.
            unsafe { asserted_over(gpu, inputs, &*expected_tokens, &*expected_positions) }
        })
    }
}

/// `inputs` with the input assert on over two device buffers (lengths checked).
///
/// # Safety
///
/// Both buffers stay allocated while the returned inputs, or any launch or graph that read
/// them, can run.
unsafe fn asserted_over<E, T, P, BT, BP>(
    gpu: &Gpu,
    inputs: &WriteInputs<E, InputAssertOff, Device>,
    expected_tokens: &BT,
    expected_positions: &BP,
) -> Result<WriteInputs<E, InputAssertOn, Device>, Error>
where
    E: Capacity,
    T: DeviceIndex,
    P: DeviceIndex,
    BT: ViewableSlice<T> + ?Sized,
    BP: ViewableSlice<P> + ?Sized,
{
    let n = inputs.capacity().get();
    let tokens = addr_of("expected input_ids", expected_tokens, n)?;
    let positions = addr_of("expected positions", expected_positions, n)?;
    let rooms = [expected_tokens.len(), expected_positions.len()];
    // SAFETY: both are live device allocations of at least `n` elements of their types
    // (checked), kept by the caller.
    unsafe { inputs.asserted_of::<T, P>(gpu, tokens, positions, Some(rooms)) }
}
