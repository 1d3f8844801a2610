//! Device twins of the plan inputs: batch columns (with the batch size in device memory),
//! `req_to_token` and the expected-token pool, the SWA lookup table and valid lengths; each
//! allocated by the crate or a view of the engine's memory, filled synchronously (`upload`) or
//! stream-ordered (`upload_on`).

use super::gpu::Gpu;
use super::stream::Stream;
use crate::capacity::{Capacity, SameWriteReqCapacity};
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::driver::array::{
    checked_scalar_view, checked_view, DeviceArray, DeviceColumn, DeviceScalar,
};
use crate::cuda::driver::memory as driver;
use crate::input::{
    Batch, BatchColumns, Full, IndexElement, NoExpectedTokens, PoolRows, PositionOffset, QueryLens,
    QueryStarts, ReqTable, ReqToTokenView, SlotIds, SwaWindow, TableKind, TokenIds, MAX_BLOCK_SIZE,
};
use crate::memory::Element;
use crate::Error;
use core::marker::PhantomData;

/// Device batch columns `req_pool_indices`, `prefix_lens`, `extend_seq_lens` for up to `W` rows
/// (the write-request capacity), with the batch size `bs` in device memory.
///
/// The plan launch reads `bs` on the device, so a graph captured once serves every batch:
/// [`upload`](Self::upload) the next batch in place and replay. The columns are the crate's
/// ([`new`](Self::new)) or views of the engine's own tensors ([`from_raw`](Self::from_raw)),
/// which the launches then read in place, with no copy.
pub struct DeviceBatch<W: Capacity> {
    capacity: W,
    /// The columns: SGLang's three, or vLLM's two (the third unused, empty).
    pub(crate) columns: [DeviceColumn; 3],
    /// The kernels' code of the columns' layout (`PlanArgs::layout`).
    pub(crate) layout: i64,
    /// The layout's columns: names and elements past the capacity ([`DeviceColumns::COLUMNS`]).
    spec: ColumnSpec,
    pub(crate) bs: DeviceScalar<i32>,
}

/// Each column of a layout: its name and how many elements past the capacity it holds; `None`
/// for an unused column.
type ColumnSpec = [Option<(&'static str, usize)>; 3];

/// The two columns of one of vLLM's layouts `L`: their names, and the elements past the
/// capacity the second holds (cumulative offsets: one).
pub(crate) fn two_columns<L: DeviceColumns>() -> ([&'static str; 2], usize) {
    match L::COLUMNS {
        [Some((a, _)), Some((b, extra)), None] => ([a, b], extra),
        _ => unreachable!("vLLM's layouts have two columns"),
    }
}

mod index_sealed {
    pub trait Sealed {}
}

/// Element types the device reads batch columns and block tables in: `i64`, `i32` and `u32`
/// (the host views also take `u64` and `usize`). Sealed.
pub trait DeviceIndex: IndexElement + Element + index_sealed::Sealed {
    /// A column over `array`.
    #[doc(hidden)]
    fn column(array: DeviceArray<Self>) -> DeviceColumn;
}
impl index_sealed::Sealed for i64 {}
impl DeviceIndex for i64 {
    fn column(array: DeviceArray<i64>) -> DeviceColumn {
        DeviceColumn::I64(array)
    }
}
impl index_sealed::Sealed for i32 {}
impl DeviceIndex for i32 {
    fn column(array: DeviceArray<i32>) -> DeviceColumn {
        DeviceColumn::I32(array)
    }
}
impl index_sealed::Sealed for u32 {}
impl DeviceIndex for u32 {
    fn column(array: DeviceArray<u32>) -> DeviceColumn {
        DeviceColumn::U32(array)
    }
}

/// Batch columns the device reads ([`PoolRows`], [`QueryLens`], [`QueryStarts`] of
/// [`DeviceIndex`] elements): their layout and element types as the plan kernel reads them.
/// Sealed.
pub trait DeviceColumns: BatchColumns {
    /// The kernels' code of the layout.
    #[doc(hidden)]
    const LAYOUT: i64;
    /// The columns' names, and how many elements past the capacity each holds (cumulative
    /// offsets: one); `None` for an unused third column.
    #[doc(hidden)]
    const COLUMNS: ColumnSpec;
    /// Checked views of the columns at `addrs`.
    ///
    /// # Safety
    ///
    /// As [`DeviceBatch::from_raw_columns`].
    #[doc(hidden)]
    unsafe fn views(
        gpu: &Gpu,
        addrs: [u64; 3],
        capacity: usize,
    ) -> Result<[DeviceColumn; 3], Error>;
}

/// A checked view of column `name` of `len` elements of `T` at `addr`.
///
/// # Safety
///
/// As [`DeviceBatch::from_raw_columns`].
pub(crate) unsafe fn column_view<T: DeviceIndex>(
    gpu: &Gpu,
    name: &'static str,
    addr: u64,
    len: usize,
) -> Result<DeviceColumn, Error> {
    // SAFETY: forwarded to the caller; `checked_view` checks the rest.
    Ok(T::column(unsafe {
        checked_view(gpu.context(), name, addr, len)?
    }))
}

/// An unused third column (vLLM's layouts): an empty crate allocation.
fn no_column() -> Result<DeviceColumn, Error> {
    Ok(DeviceColumn::I64(driver::zeroed(0)?))
}

impl<R: DeviceIndex, P: DeviceIndex, E: DeviceIndex> DeviceColumns for PoolRows<R, P, E> {
    const LAYOUT: i64 = 0;
    const COLUMNS: ColumnSpec = [
        Some(("req_pool_indices", 0)),
        Some(("prefix_lens", 0)),
        Some(("extend_seq_lens", 0)),
    ];
    unsafe fn views(gpu: &Gpu, a: [u64; 3], n: usize) -> Result<[DeviceColumn; 3], Error> {
        // SAFETY: forwarded to the caller.
        unsafe {
            Ok([
                column_view::<R>(gpu, "req_pool_indices", a[0], n)?,
                column_view::<P>(gpu, "prefix_lens", a[1], n)?,
                column_view::<E>(gpu, "extend_seq_lens", a[2], n)?,
            ])
        }
    }
}

/// The views of one of vLLM's layouts `L` (`context_lens` of `C`, the second column of `Q`) at
/// `a`, as [`two_columns`] names and sizes them.
///
/// # Safety
///
/// As [`DeviceBatch::from_raw_columns`].
unsafe fn vllm_views<L: DeviceColumns, C: DeviceIndex, Q: DeviceIndex>(
    gpu: &Gpu,
    a: [u64; 3],
    n: usize,
) -> Result<[DeviceColumn; 3], Error> {
    let ([first, second], extra) = two_columns::<L>();
    // SAFETY: forwarded to the caller.
    unsafe {
        Ok([
            column_view::<C>(gpu, first, a[0], n)?,
            column_view::<Q>(gpu, second, a[1], n + extra)?,
            no_column()?,
        ])
    }
}

impl<C: DeviceIndex, Q: DeviceIndex> DeviceColumns for QueryLens<C, Q> {
    const LAYOUT: i64 = 1;
    const COLUMNS: ColumnSpec = [Some(("context_lens", 0)), Some(("query_lens", 0)), None];
    unsafe fn views(gpu: &Gpu, a: [u64; 3], n: usize) -> Result<[DeviceColumn; 3], Error> {
        // SAFETY: forwarded to the caller.
        unsafe { vllm_views::<Self, C, Q>(gpu, a, n) }
    }
}

impl<C: DeviceIndex, Q: DeviceIndex> DeviceColumns for QueryStarts<C, Q> {
    const LAYOUT: i64 = 2;
    const COLUMNS: ColumnSpec = [Some(("context_lens", 0)), Some(("query_starts", 1)), None];
    unsafe fn views(gpu: &Gpu, a: [u64; 3], n: usize) -> Result<[DeviceColumn; 3], Error> {
        // SAFETY: forwarded to the caller.
        unsafe { vllm_views::<Self, C, Q>(gpu, a, n) }
    }
}

/// The device addresses (`CUdeviceptr`) of an engine's batch columns, for
/// [`DeviceBatch::from_raw`]: three `i64` arrays of at least the capacity's elements each, and
/// where `bs` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBatch {
    /// `req_pool_indices`.
    pub req_pool_indices: u64,
    /// `prefix_lens`.
    pub prefix_lens: u64,
    /// `extend_seq_lens`.
    pub extend_seq_lens: u64,
    /// The engine's batch size: an `i32` in its device memory, or `None` for a scalar of the
    /// batch's own (0 until [`DeviceBatch::set_len_on`] or [`DeviceBatch::upload`]).
    pub bs: Option<u64>,
}

impl<W: Capacity> DeviceBatch<W> {
    /// Empty columns (`bs = 0`) for up to `capacity` rows. Prefer [`crate::Shape::device_batch`].
    pub fn new(gpu: &Gpu, capacity: W) -> Result<Self, Error> {
        gpu.make_current()?;
        let n = capacity.get();
        Ok(DeviceBatch {
            capacity,
            columns: [
                DeviceColumn::I64(driver::zeroed(n)?),
                DeviceColumn::I64(driver::zeroed(n)?),
                DeviceColumn::I64(driver::zeroed(n)?),
            ],
            layout: 0,
            spec: <PoolRows as DeviceColumns>::COLUMNS,
            bs: driver::scalar(0)?,
        })
    }

    /// Views of the engine's batch columns at `raw` (`capacity` elements each; nothing is
    /// copied, the launches read them in place): each address is checked as
    /// [`DeviceArray`] views are (a null or unaligned address, or a range past the end of its
    /// allocation, is [`Error::DeviceView`]).
    ///
    /// # Safety
    ///
    /// Each column address is the start of `capacity` `i64`s of device memory in one live
    /// allocation of `gpu`'s context (or one its device can access), aligned to 8 bytes, and
    /// `raw.bs`, when given, one aligned `i32` likewise; they stay allocated while this batch,
    /// or any launch or graph that read it, can run. The engine writes them only in stream
    /// order with the launches that read them.
    pub unsafe fn from_raw(gpu: &Gpu, capacity: W, raw: RawBatch) -> Result<Self, Error> {
        let addrs = [raw.req_pool_indices, raw.prefix_lens, raw.extend_seq_lens];
        // SAFETY: the caller's contract is `from_raw_columns`'s for SGLang's i64 columns.
        unsafe { Self::from_raw_columns::<PoolRows>(gpu, capacity, addrs, raw.bs) }
    }

    /// Views of the engine's batch columns in any layout the device reads
    /// ([`DeviceColumns`]: SGLang's [`PoolRows`], or vLLM's [`QueryLens`] /
    /// [`QueryStarts`] with the table indexed by batch row), each of its own element type
    /// (`i64`, `i32`, `u32`): `addrs` holds one address a column (vLLM's layouts: two, the third
    /// ignored), each column `capacity` elements (cumulative query offsets: `capacity + 1`),
    /// checked as [`from_raw`](Self::from_raw). Nothing is copied: the plan reads the engine's
    /// columns in place, `bs` from `bs` (or a scalar of the batch's own, see
    /// [`set_len_on`](Self::set_len_on)).
    ///
    /// # Safety
    ///
    /// Each column address is the start of its elements of device memory in one live
    /// allocation of `gpu`'s context (or one its device can access), aligned to its element,
    /// and `bs`, when given, one aligned `i32` likewise; they stay allocated while this batch,
    /// or any launch or graph that read it, can run. The engine writes them only in stream
    /// order with the launches that read them.
    pub unsafe fn from_raw_columns<C: DeviceColumns>(
        gpu: &Gpu,
        capacity: W,
        addrs: [u64; 3],
        bs: Option<u64>,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded to the caller (`checked_view` checks the rest).
        let columns = unsafe { C::views(gpu, addrs, capacity.get())? };
        let bs = match bs {
            // SAFETY: forwarded to the caller, for `bs` (`checked_scalar_view` checks the rest).
            Some(addr) => unsafe { checked_scalar_view(gpu.context(), "bs", addr)? },
            None => {
                gpu.make_current()?;
                driver::scalar(0)?
            }
        };
        Ok(DeviceBatch {
            capacity,
            columns,
            layout: C::LAYOUT,
            spec: C::COLUMNS,
            bs,
        })
    }

    /// The kernels' codes of the columns' element types (`PlanArgs::kinds`).
    pub(crate) fn kinds(&self) -> i64 {
        self.columns
            .iter()
            .enumerate()
            .map(|(k, c)| c.kind() << (8 * k))
            .sum()
    }

    /// The row capacity.
    pub fn capacity(&self) -> W {
        self.capacity
    }

    /// Records the lengths of the buffers the columns view (a safe constructor's).
    pub(crate) fn record_rooms(&mut self, columns: [usize; 3]) {
        for (column, room) in self.columns.iter_mut().zip(columns) {
            column.record_room(room);
        }
    }

    /// The same views with `capacity` rows (each column checked against its buffer); the
    /// engine's `bs` viewed again, or a new `bs` of 0 where the batch had its own (the context
    /// must be current).
    pub(crate) fn rebound<W2: Capacity>(&self, capacity: W2) -> Result<DeviceBatch<W2>, Error> {
        let n = capacity.get();
        let rebound = |k: usize| match self.spec[k] {
            Some((name, extra)) => self.columns[k].rebound(name, n + extra),
            None => no_column(),
        };
        Ok(DeviceBatch {
            capacity,
            columns: [rebound(0)?, rebound(1)?, rebound(2)?],
            layout: self.layout,
            spec: self.spec,
            bs: match self.bs.rebound() {
                Some(bs) => bs,
                None => driver::scalar(0)?,
            },
        })
    }

    /// SGLang's three `i64` columns (an upload's or a download's), or the error of a batch of
    /// another layout or element type.
    fn sglang_columns(&self) -> Result<[&DeviceArray<i64>; 3], Error> {
        if self.layout != 0 {
            return Err(Error::Malformed {
                detail: "a device batch of vLLM's columns (context and query lengths) is the \
                         engine's own: it is not uploaded from, or downloaded to, a Batch"
                    .to_owned(),
            });
        }
        Ok([
            self.columns[0].i64s("req_pool_indices")?,
            self.columns[1].i64s("prefix_lens")?,
            self.columns[2].i64s("extend_seq_lens")?,
        ])
    }

    /// `bs` as the device reads it, after checking it against the capacity.
    fn checked_len(&self, bs: usize) -> Result<i32, Error> {
        match i32::try_from(bs) {
            Ok(v) if bs <= self.capacity.get() => Ok(v),
            _ => Err(Error::BatchExceedsWriteCapacity {
                bs,
                write_req_capacity: self.capacity.get(),
            }),
        }
    }

    /// Replaces the device batch by `batch` (synchronous copies of its `bs` rows and of `bs`).
    /// More rows than the capacity is [`Error::BatchExceedsWriteCapacity`], nothing copied.
    pub fn upload(&self, batch: &Batch) -> Result<(), Error> {
        let bs = self.checked_len(batch.len())?;
        let [a, b, c] = self.sglang_columns()?;
        driver::upload(a, 0, batch.req_pool_indices())?;
        driver::upload(b, 0, batch.prefix_lens())?;
        driver::upload(c, 0, batch.extend_seq_lens())?;
        driver::set_scalar(&self.bs, bs)
    }

    /// [`upload`](Self::upload) queued on `stream` (`cuMemcpyHtoDAsync` of the three columns,
    /// `bs` by a stream-ordered memset): ordered after the work queued on `stream` before it,
    /// no host synchronisation. `batch` may be dropped as soon as this returns.
    pub fn upload_on(&self, stream: &Stream, batch: &Batch) -> Result<(), Error> {
        let bs = self.checked_len(batch.len())?;
        let raw = stream.as_raw();
        let [a, b, c] = self.sglang_columns()?;
        driver::upload_async(a, 0, batch.req_pool_indices(), raw)?;
        driver::upload_async(b, 0, batch.prefix_lens(), raw)?;
        driver::upload_async(c, 0, batch.extend_seq_lens(), raw)?;
        driver::set_i32_async(&self.bs, bs, raw)
    }

    /// Sets `bs` on the device by a stream-ordered memset on `stream` (no host memory is
    /// copied, so a capture records it): for columns the engine fills itself. More than the
    /// capacity is [`Error::BatchExceedsWriteCapacity`], nothing queued.
    pub fn set_len_on(&self, stream: &Stream, bs: usize) -> Result<(), Error> {
        let bs = self.checked_len(bs)?;
        driver::set_i32_async(&self.bs, bs, stream.as_raw())
    }

    /// The batch on the device (synchronous): `bs` rows, `bs` clamped to `[0, capacity]`.
    pub fn to_host(&self) -> Result<Batch, Error> {
        let bs = usize::try_from(driver::get_scalar(&self.bs)?)
            .unwrap_or(0)
            .min(self.capacity.get());
        let mut cols = [vec![0; bs], vec![0; bs], vec![0; bs]];
        for (col, device) in cols.iter_mut().zip(self.sglang_columns()?) {
            driver::download(col, device, 0)?;
        }
        let [a, b, c] = cols;
        Batch::try_from_columns(a, b, c)
    }
}

/// A device [`ReqTable`]: `req_to_token` ([`DeviceReqToToken`]) or the expected-token pool
/// ([`DeviceExpectedTable`]), kept apart by the same marker types; a crate copy
/// ([`from_host`](Self::from_host)) or a view of the engine's table
/// ([`from_raw`](Self::from_raw)).
pub struct DeviceTable<K: TableKind> {
    /// The cells' bits (`u32` cells are read as their `i32` bits and zero-extended).
    pub(crate) data: DeviceArray<i32>,
    rows: usize,
    width: usize,
    /// Tokens a cell places: 1, or a block table's block size.
    block_size: usize,
    /// Whether the cells are `u32`.
    unsigned: bool,
    kind: PhantomData<K>,
}

/// `req_to_token` on the device.
pub type DeviceReqToToken = DeviceTable<SlotIds>;
/// `req_to_verify_expected_tokens` on the device.
pub type DeviceExpectedTable = DeviceTable<TokenIds>;

/// Checks a table's shape for the device: rows and widths of 2^31 or more are rejected (the
/// plan kernel keeps rows and positions in 32 bits), and so is a product that overflows.
/// Returns the cells.
fn device_table_cells(
    what: &'static str,
    rows: usize,
    width: usize,
    len: Option<usize>,
) -> Result<usize, Error> {
    let cells = rows.checked_mul(width);
    match cells {
        Some(c) if i32::try_from(width).is_ok() && i32::try_from(rows).is_ok() => Ok(c),
        _ => Err(Error::TableShape {
            what,
            rows,
            cols: width,
            len: len.or(cells).unwrap_or(usize::MAX),
        }),
    }
}

impl<K: TableKind> DeviceTable<K> {
    /// A device copy of `host` (same rows and width). Rows or widths of 2^31 or more are
    /// rejected (the plan kernel keeps rows and positions in 32 bits).
    pub fn from_host(gpu: &Gpu, host: &ReqTable<K>) -> Result<Self, Error> {
        gpu.make_current()?;
        device_table_cells(
            K::NAME,
            host.rows(),
            host.width(),
            Some(host.as_slice().len()),
        )?;
        let data = driver::zeroed(host.as_slice().len())?;
        driver::upload(&data, 0, host.as_slice())?;
        Ok(DeviceTable {
            data,
            rows: host.rows(),
            width: host.width(),
            block_size: 1,
            unsigned: false,
            kind: PhantomData,
        })
    }

    /// A view of the engine's table: `rows x width` `i32` cells, row-major and contiguous, at
    /// device address `addr` (nothing copied; the launches read the engine's table in place).
    /// Rows or widths of 2^31 or more are [`Error::TableShape`]; a null or unaligned address or
    /// a range past the end of its allocation is [`Error::DeviceView`].
    ///
    /// # Safety
    ///
    /// `addr` is the start of `rows x width` `i32`s of device memory in one live allocation of
    /// `gpu`'s context (or one its device can access), 4-byte aligned, which stays allocated
    /// while this table, or any launch or graph that read it, can run; the engine writes it
    /// only in stream order with those launches.
    pub unsafe fn from_raw(gpu: &Gpu, addr: u64, rows: usize, width: usize) -> Result<Self, Error> {
        // SAFETY: forwarded to the caller.
        unsafe { Self::from_raw_of::<i32>(gpu, addr, rows, width) }
    }

    /// [`from_raw`](Self::from_raw) over cells of `T` (`i32`, or `u32`: zero-extended, as the
    /// CPU widens them), for the typed views.
    ///
    /// # Safety
    ///
    /// As [`from_raw`](Self::from_raw), for `rows x width` aligned `T`s (4 bytes each).
    pub(crate) unsafe fn from_raw_of<T: DeviceTableCell>(
        gpu: &Gpu,
        addr: u64,
        rows: usize,
        width: usize,
    ) -> Result<Self, Error> {
        let cells = device_table_cells(K::NAME, rows, width, None)?;
        // SAFETY: forwarded to the caller (`T` is 4 bytes wide, as the `i32` view);
        // `checked_view` checks the rest.
        let data = unsafe { checked_view(gpu.context(), K::NAME, addr, cells)? };
        Ok(DeviceTable {
            data,
            rows,
            width,
            block_size: 1,
            unsigned: T::UNSIGNED,
            kind: PhantomData,
        })
    }

    /// Tokens a cell places: 1 for a token table, the block size of a block table.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Whether the cells are `u32` (zero-extended: `u32` block ids, slots or token ids).
    pub fn is_unsigned(&self) -> bool {
        self.unsigned
    }

    /// Tokens a row places (`width x block_size`).
    pub(crate) fn tokens_per_row(&self) -> usize {
        self.width * self.block_size
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Whether the cells are the engine's (a view).
    pub fn is_view(&self) -> bool {
        self.data.is_view()
    }

    /// The error of a table of another shape.
    fn check_shape(&self, host: &ReqTable<K>) -> Result<(), Error> {
        if host.rows() != self.rows || host.width() != self.width {
            return Err(Error::TableShape {
                what: K::NAME,
                rows: self.rows,
                cols: self.width,
                len: host.as_slice().len(),
            });
        }
        Ok(())
    }

    /// Replaces the whole table (synchronous); `host` must have the same rows and width.
    pub fn upload(&self, host: &ReqTable<K>) -> Result<(), Error> {
        self.check_shape(host)?;
        driver::upload(&self.data, 0, host.as_slice())
    }

    /// [`upload`](Self::upload) queued on `stream` (no host synchronisation).
    pub fn upload_on(&self, stream: &Stream, host: &ReqTable<K>) -> Result<(), Error> {
        self.check_shape(host)?;
        driver::upload_async(&self.data, 0, host.as_slice(), stream.as_raw())
    }

    /// Where row `r` starts, after checking `cells` is one row and `r` a row.
    fn row_start(&self, r: usize, cells: &[i32]) -> Result<usize, Error> {
        if cells.len() != self.width {
            return Err(Error::LengthMismatch {
                what: K::NAME,
                expected: self.width,
                found: cells.len(),
            });
        }
        if r >= self.rows {
            return Err(Error::Malformed {
                detail: format!("{} row {r} is outside its {} rows", K::NAME, self.rows),
            });
        }
        Ok(r * self.width)
    }

    /// Replaces row `r` (synchronous); `cells` must hold exactly one row.
    pub fn upload_row(&self, r: usize, cells: &[i32]) -> Result<(), Error> {
        driver::upload(&self.data, self.row_start(r, cells)?, cells)
    }

    /// [`upload_row`](Self::upload_row) queued on `stream` (no host synchronisation).
    pub fn upload_row_on(&self, stream: &Stream, r: usize, cells: &[i32]) -> Result<(), Error> {
        driver::upload_async(
            &self.data,
            self.row_start(r, cells)?,
            cells,
            stream.as_raw(),
        )
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<ReqTable<K>, Error> {
        let mut data = vec![0; self.rows * self.width];
        driver::download(&mut data, &self.data, 0)?;
        ReqTable::from_vec(self.rows, self.width, data)
    }
}

/// Cells a device block table may hold: `i32` and `u32`. Sealed.
pub trait DeviceTableCell: DeviceIndex {
    /// Whether the kernels zero-extend the cells.
    #[doc(hidden)]
    const UNSIGNED: bool;
    /// The cell's bits as the device keeps them.
    #[doc(hidden)]
    fn bits(self) -> i32;
}
impl DeviceTableCell for i32 {
    const UNSIGNED: bool = false;
    fn bits(self) -> i32 {
        self
    }
}
impl DeviceTableCell for u32 {
    const UNSIGNED: bool = true;
    fn bits(self) -> i32 {
        i32::from_ne_bytes(self.to_ne_bytes())
    }
}

/// The checks of a block table for the device: a block size in `[1, MAX_BLOCK_SIZE]`, rows
/// and widths as [`device_table_cells`], and tokens a row below 2^31 (the plan kernel keeps
/// positions in 32 bits). Returns the cells.
fn device_block_table_cells(
    rows: usize,
    blocks_per_row: usize,
    block_size: usize,
) -> Result<usize, Error> {
    if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
        return Err(Error::OutOfRange {
            what: "block_size",
            value: i64::try_from(block_size).unwrap_or(i64::MAX),
            allowed: "[1, 65536]",
        });
    }
    let cells = device_table_cells(SlotIds::NAME, rows, blocks_per_row, None)?;
    match blocks_per_row.checked_mul(block_size) {
        Some(t) if i32::try_from(t).is_ok() => Ok(cells),
        _ => Err(Error::OutOfRange {
            what: "blocks_per_row x block_size on the GPU",
            value: i64::try_from(blocks_per_row.saturating_mul(block_size)).unwrap_or(i64::MAX),
            allowed: "[0, i32::MAX] tokens a row",
        }),
    }
}

impl DeviceTable<SlotIds> {
    /// A device copy of a host block table (or token table: block size 1) of `i32` or `u32`
    /// cells, as [`ReqToTokenView::block_table`] describes it; the plan reads the slot of
    /// position `pos` of a row as `table[row][pos / B] * B + pos % B`, as on the CPU.
    pub fn block_table_from_host<T: DeviceTableCell>(
        gpu: &Gpu,
        table: ReqToTokenView<'_, T>,
    ) -> Result<Self, Error> {
        gpu.make_current()?;
        device_block_table_cells(table.rows(), table.width(), table.block_size())?;
        let bits: Vec<i32> = table.as_slice().iter().map(|&c| c.bits()).collect();
        let data = driver::zeroed(bits.len())?;
        driver::upload(&data, 0, &bits)?;
        Ok(DeviceTable {
            data,
            rows: table.rows(),
            width: table.width(),
            block_size: table.block_size(),
            unsigned: T::UNSIGNED,
            kind: PhantomData,
        })
    }

    /// A view of the engine's **block table**: `rows x blocks_per_row` cells of `T` (`u32` in
    /// mistral.rs and candle-vllm, or `i32`), row-major, at device address `addr`, blocks of
    /// `block_size` slots (nothing copied; the plan reads the engine's table in place, as
    /// [`ReqToTokenView::block_table`] on the CPU). The rows are the request's pool rows or
    /// the batch rows, as the batch's columns say ([`DeviceColumns`]). A block size outside
    /// `[1, MAX_BLOCK_SIZE]` or rows of 2^31 tokens or more is an error; the address is
    /// checked as [`from_raw`](Self::from_raw)'s.
    ///
    /// A negative block of an `i32` table that the plan reads is recorded on the device
    /// ([`Error::BlockOutOfRange`], the step's error) and its entries get slot 0, which no op
    /// reads; `u32` blocks past `i32::MAX` are blocks like any other.
    ///
    /// # Safety
    ///
    /// As [`from_raw`](Self::from_raw), for `rows x blocks_per_row` cells of `T`.
    pub unsafe fn block_table_from_raw<T: DeviceTableCell>(
        gpu: &Gpu,
        addr: u64,
        rows: usize,
        blocks_per_row: usize,
        block_size: usize,
    ) -> Result<Self, Error> {
        let cells = device_block_table_cells(rows, blocks_per_row, block_size)?;
        // SAFETY: forwarded to the caller: `T` is 4 bytes wide, as the `i32` view.
        let data = unsafe { checked_view(gpu.context(), SlotIds::NAME, addr, cells)? };
        Ok(DeviceTable {
            data,
            rows,
            width: blocks_per_row,
            block_size,
            unsigned: T::UNSIGNED,
            kind: PhantomData,
        })
    }
}

/// `full_to_swa_index_mapping` on the device (non-empty): a crate copy or a view of the
/// engine's table.
pub struct DeviceLut {
    pub(crate) data: DeviceArray<i64>,
}

/// The error of an empty LUT.
const EMPTY_LUT: Error = Error::ZeroCapacity {
    what: "full_to_swa_index_mapping length",
    value: 0,
};

impl DeviceLut {
    /// A device copy of `lut`; an empty table is rejected.
    pub fn from_host(gpu: &Gpu, lut: &[i64]) -> Result<Self, Error> {
        gpu.make_current()?;
        if lut.is_empty() {
            return Err(EMPTY_LUT);
        }
        let data = driver::zeroed(lut.len())?;
        driver::upload(&data, 0, lut)?;
        Ok(DeviceLut { data })
    }

    /// A view of the engine's LUT: `len` `i64`s at device address `addr` (nothing copied). An
    /// empty table is [`Error::ZeroCapacity`]; a null or unaligned address or a range past the
    /// end of its allocation is [`Error::DeviceView`].
    ///
    /// # Safety
    ///
    /// `addr` is the start of `len` `i64`s of device memory in one live allocation of `gpu`'s
    /// context (or one its device can access), 8-byte aligned, which stays allocated while this
    /// LUT, or any launch or graph that read it, can run.
    pub unsafe fn from_raw(gpu: &Gpu, addr: u64, len: usize) -> Result<Self, Error> {
        if len == 0 {
            return Err(EMPTY_LUT);
        }
        // SAFETY: forwarded to the caller; `checked_view` checks the rest.
        let data = unsafe { checked_view(gpu.context(), "full_to_swa_index_mapping", addr, len)? };
        Ok(DeviceLut { data })
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Always false (an empty LUT cannot be built).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The error of a LUT of another length.
    fn check_len(&self, lut: &[i64]) -> Result<(), Error> {
        if lut.len() != self.len() {
            return Err(Error::LengthMismatch {
                what: "full_to_swa_index_mapping",
                expected: self.len(),
                found: lut.len(),
            });
        }
        Ok(())
    }

    /// Replaces the table (synchronous); `lut` must have the same length.
    pub fn upload(&self, lut: &[i64]) -> Result<(), Error> {
        self.check_len(lut)?;
        driver::upload(&self.data, 0, lut)
    }

    /// [`upload`](Self::upload) queued on `stream` (no host synchronisation).
    pub fn upload_on(&self, stream: &Stream, lut: &[i64]) -> Result<(), Error> {
        self.check_len(lut)?;
        driver::upload_async(&self.data, 0, lut, stream.as_raw())
    }
}

/// `req_to_verify_expected_tokens_valid_lens` on the device: up to `W` lengths, one per batch
/// row, with their count in device memory (the plan launch checks it equals `bs`). The crate's
/// own lengths are `i64`s; a view keeps the engine's element type (`i64`, `i32` or `u32`).
pub struct DeviceValidLens<W: Capacity> {
    capacity: W,
    pub(crate) lens: DeviceColumn,
    pub(crate) len: DeviceScalar<i32>,
}

impl<W: Capacity> DeviceValidLens<W> {
    /// No lengths yet, room for `capacity`. Prefer [`crate::Shape::device_valid_lens`].
    pub fn new(gpu: &Gpu, capacity: W) -> Result<Self, Error> {
        gpu.make_current()?;
        Ok(DeviceValidLens {
            capacity,
            lens: DeviceColumn::I64(driver::zeroed(capacity.get())?),
            len: driver::scalar(0)?,
        })
    }

    /// A view of the engine's valid lengths: `capacity` `i64`s at device address `lens`, and
    /// their count: an `i32` of the engine's at `count`, or `None` for a count of the view's own
    /// (0 until [`set_len_on`](Self::set_len_on) or [`upload`](Self::upload)). Checked as
    /// [`DeviceBatch::from_raw`] checks its columns.
    ///
    /// # Safety
    ///
    /// As [`DeviceBatch::from_raw`]: `lens` starts `capacity` aligned `i64`s and `count` one
    /// aligned `i32` of live device memory of `gpu`'s context (or one its device can access),
    /// allocated while this value, or any launch or graph that read it, can run.
    pub unsafe fn from_raw(
        gpu: &Gpu,
        capacity: W,
        lens: u64,
        count: Option<u64>,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded to the caller.
        unsafe { Self::from_raw_of::<i64>(gpu, capacity, lens, count) }
    }

    /// [`from_raw`](Self::from_raw) over lengths of element type `T` (the typed views').
    ///
    /// # Safety
    ///
    /// As [`from_raw`](Self::from_raw), for `capacity` aligned `T`s at `lens`.
    pub(crate) unsafe fn from_raw_of<T: DeviceIndex>(
        gpu: &Gpu,
        capacity: W,
        lens: u64,
        count: Option<u64>,
    ) -> Result<Self, Error> {
        let ctx = gpu.context();
        // SAFETY: forwarded to the caller; `checked_view` checks the rest.
        unsafe {
            Ok(DeviceValidLens {
                capacity,
                lens: column_view::<T>(gpu, VALID_LENS, lens, capacity.get())?,
                len: match count {
                    Some(addr) => checked_scalar_view(ctx, "valid_lens count", addr)?,
                    None => {
                        gpu.make_current()?;
                        driver::scalar(0)?
                    }
                },
            })
        }
    }

    /// The capacity.
    pub fn capacity(&self) -> W {
        self.capacity
    }

    /// Records the length of the buffer the lengths view (a safe constructor's).
    pub(crate) fn record_room(&mut self, lens: usize) {
        self.lens.record_room(lens);
    }

    /// The same views with room for `capacity` lengths (checked against the buffer); the
    /// engine's count viewed again, or a new count of 0 (the context must be current).
    pub(crate) fn rebound<W2: Capacity>(&self, capacity: W2) -> Result<DeviceValidLens<W2>, Error> {
        Ok(DeviceValidLens {
            capacity,
            lens: self.lens.rebound(VALID_LENS, capacity.get())?,
            len: match self.len.rebound() {
                Some(len) => len,
                None => driver::scalar(0)?,
            },
        })
    }

    /// The count as the device reads it, after checking it against the capacity.
    fn checked_len(&self, n: usize) -> Result<i32, Error> {
        match i32::try_from(n) {
            Ok(v) if n <= self.capacity.get() => Ok(v),
            _ => Err(Error::LengthMismatch {
                what: VALID_LENS,
                expected: self.capacity.get(),
                found: n,
            }),
        }
    }

    /// Replaces the lengths (synchronous); more than the capacity is an error, nothing copied.
    pub fn upload(&self, valid_lens: &[i64]) -> Result<(), Error> {
        let n = self.checked_len(valid_lens.len())?;
        driver::upload(self.lens.i64s(VALID_LENS)?, 0, valid_lens)?;
        driver::set_scalar(&self.len, n)
    }

    /// [`upload`](Self::upload) queued on `stream` (the count by a stream-ordered memset; no
    /// host synchronisation).
    pub fn upload_on(&self, stream: &Stream, valid_lens: &[i64]) -> Result<(), Error> {
        let n = self.checked_len(valid_lens.len())?;
        driver::upload_async(self.lens.i64s(VALID_LENS)?, 0, valid_lens, stream.as_raw())?;
        driver::set_i32_async(&self.len, n, stream.as_raw())
    }

    /// Sets the count by a stream-ordered memset on `stream` (for lengths the engine writes
    /// itself); more than the capacity is an error, nothing queued.
    pub fn set_len_on(&self, stream: &Stream, n: usize) -> Result<(), Error> {
        let n = self.checked_len(n)?;
        driver::set_i32_async(&self.len, n, stream.as_raw())
    }
}

/// What the valid lengths' errors name.
const VALID_LENS: &str = "req_to_verify_expected_tokens_valid_lens";

impl DeviceExpectedTable {
    /// Pairs the pool with this step's device valid lengths, making it usable by the plan
    /// launch (a pool without its lengths is not accepted, as on the host).
    pub fn with_valid_lens<'a, W: Capacity>(
        &'a self,
        valid_lens: &'a DeviceValidLens<W>,
    ) -> DeviceExpectedPool<'a, W> {
        DeviceExpectedPool {
            table: self,
            valid_lens,
        }
    }
}

/// The device expected-token pool with its valid lengths.
pub struct DeviceExpectedPool<'a, W: Capacity> {
    pub(crate) table: &'a DeviceExpectedTable,
    pub(crate) valid_lens: &'a DeviceValidLens<W>,
}

impl<W: Capacity> Clone for DeviceExpectedPool<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W: Capacity> Copy for DeviceExpectedPool<'_, W> {}

/// The SWA group on the device: a window and the device LUT (see [`crate::Swa`]).
#[derive(Clone, Copy)]
pub struct Swa<'a> {
    window: u64,
    lut: &'a DeviceLut,
    strict: bool,
}

impl<'a> Swa<'a> {
    /// An SWA group of `window` positions translating through `lut`, checked like the CPU op:
    /// a slot past the LUT's end is [`Error::LutIndexOutOfRange`] and nothing is written (the
    /// plan then runs as one cooperative launch, see [`plan`](crate::cuda::plan())).
    pub fn new(window: u64, lut: &'a DeviceLut) -> Self {
        Swa {
            window,
            lut,
            strict: true,
        }
    }

    /// The same group with SGLang's GPU semantics for a slot past the LUT's end: the index is
    /// clamped to the last element (-1 in production LUTs), the error is recorded in the status
    /// word, and the outputs are written. One launch instead of two.
    pub fn clamping(window: u64, lut: &'a DeviceLut) -> Self {
        Swa {
            window,
            lut,
            strict: false,
        }
    }
}

impl SwaWindow {
    /// Attaches the device `full_to_swa_index_mapping`, making a device [`Swa`] group.
    pub fn with_device_lut(self, lut: &DeviceLut) -> Swa<'_> {
        Swa::new(self.size(), lut)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A KV group the device plan can plan for: [`Full`] or a device [`Swa`] whose LUT is borrowed
/// for at least `'a`. Sealed.
pub trait DeviceGroup<'a>: Copy + sealed::Sealed {
    /// The window (0 = none).
    fn window(&self) -> u64;
    /// The LUT, if any.
    fn lut(&self) -> Option<&'a DeviceLut>;
    /// Whether LUT indices are checked before anything is written (a separate launch).
    fn checks_lut(&self) -> bool;
}

impl sealed::Sealed for Full {}
impl<'a> DeviceGroup<'a> for Full {
    fn window(&self) -> u64 {
        0
    }
    fn lut(&self) -> Option<&'a DeviceLut> {
        None
    }
    fn checks_lut(&self) -> bool {
        false
    }
}

impl sealed::Sealed for Swa<'_> {}
impl<'a, 'l: 'a> DeviceGroup<'a> for Swa<'l> {
    fn window(&self) -> u64 {
        self.window
    }
    fn lut(&self) -> Option<&'a DeviceLut> {
        Some(self.lut)
    }
    fn checks_lut(&self) -> bool {
        self.strict
    }
}

/// A device expected-token pool as the plan launch passes it: the table, the valid lengths and
/// their count.
pub type ExpectedPoolPtrs<'a> = (&'a DeviceExpectedTable, DevPtr<i64>, i64, DevPtr<i32>);

/// Where the device plan takes expected tokens from: [`NoExpectedTokens`] or a
/// [`DeviceExpectedPool`] whose lengths have the write-request capacity `W` and whose buffers
/// are borrowed for at least `'a`. Sealed.
pub trait DeviceExpectedTokens<'a, W: Capacity>: Copy + sealed::Sealed {
    /// The pool and its lengths, after checking the lengths' capacity against `w`.
    fn pool(&self, w: W) -> Result<Option<ExpectedPoolPtrs<'a>>, Error>;
}

impl sealed::Sealed for NoExpectedTokens {}
impl<'a, W: Capacity> DeviceExpectedTokens<'a, W> for NoExpectedTokens {
    fn pool(&self, _: W) -> Result<Option<ExpectedPoolPtrs<'a>>, Error> {
        Ok(None)
    }
}

impl<W: Capacity> sealed::Sealed for DeviceExpectedPool<'_, W> {}
impl<'a, 'l: 'a, W, LB> DeviceExpectedTokens<'a, W> for DeviceExpectedPool<'l, LB>
where
    W: SameWriteReqCapacity<LB>,
    LB: Capacity,
{
    fn pool(&self, w: W) -> Result<Option<ExpectedPoolPtrs<'a>>, Error> {
        w.check(self.valid_lens.capacity)?;
        Ok(Some((
            self.table,
            DevPtr::from_addr(self.valid_lens.lens.addr()),
            self.valid_lens.lens.kind(),
            driver::box_ptr(&self.valid_lens.len),
        )))
    }
}

impl<W: Capacity> sealed::Sealed for Option<DeviceExpectedPool<'_, W>> {}
/// An expected-token pool chosen at run time (the plan inputs of `PagedStepViews`, feature
/// `cudarc`): `None` plans as [`NoExpectedTokens`], `Some` as its pool.
impl<'a, 'l: 'a, W, LB> DeviceExpectedTokens<'a, W> for Option<DeviceExpectedPool<'l, LB>>
where
    W: SameWriteReqCapacity<LB>,
    LB: Capacity,
{
    fn pool(&self, w: W) -> Result<Option<ExpectedPoolPtrs<'a>>, Error> {
        match self {
            Some(pool) => pool.pool(w),
            None => Ok(None),
        }
    }
}

/// Everything the device plan reads besides its output buffers (the twin of
/// [`crate::PlanInputs`]), every buffer borrowed for `'a`.
pub struct PlanInputs<'a, B: Capacity, G, X> {
    /// Per-request columns and `bs`.
    pub batch: &'a DeviceBatch<B>,
    /// Full-pool slot of every (request, position).
    pub req_to_token: &'a DeviceReqToToken,
    /// [`Full`] or a device [`Swa`].
    pub group: G,
    /// [`NoExpectedTokens`] or a [`DeviceExpectedPool`].
    pub expected: X,
    /// 0 for target pools, +1 for EAGLE draft pools.
    pub offset: PositionOffset,
}

impl<'a, B: Capacity> PlanInputs<'a, B, Full, NoExpectedTokens> {
    /// Inputs for a FULL group without an expected-token pool, offset 0.
    pub fn full(batch: &'a DeviceBatch<B>, req_to_token: &'a DeviceReqToToken) -> Self {
        PlanInputs {
            batch,
            req_to_token,
            group: Full,
            expected: NoExpectedTokens,
            offset: PositionOffset::Target,
        }
    }
}

impl<'a, B: Capacity, G, X> PlanInputs<'a, B, G, X> {
    /// The same inputs with another group.
    pub fn with_group<G2>(self, group: G2) -> PlanInputs<'a, B, G2, X> {
        PlanInputs {
            batch: self.batch,
            req_to_token: self.req_to_token,
            group,
            expected: self.expected,
            offset: self.offset,
        }
    }

    /// The same inputs with an expected-token pool (or [`NoExpectedTokens`]).
    pub fn with_expected<X2>(self, expected: X2) -> PlanInputs<'a, B, G, X2> {
        PlanInputs {
            batch: self.batch,
            req_to_token: self.req_to_token,
            group: self.group,
            expected,
            offset: self.offset,
        }
    }

    /// The same inputs with another position offset.
    pub fn with_offset(self, offset: PositionOffset) -> Self {
        PlanInputs { offset, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::Cap;

    /// Made-up addresses that no test dereferences (only the host-side checks run).
    fn fake_batch<W: Capacity>(capacity: W) -> DeviceBatch<W> {
        // SAFETY: the views are only checked by the methods under test, which fail before any
        // driver call; dropping a view frees nothing.
        unsafe {
            DeviceBatch {
                capacity,
                columns: [
                    DeviceColumn::I64(DeviceArray::view(0x1000, capacity.get())),
                    DeviceColumn::I64(DeviceArray::view(0x2000, capacity.get())),
                    DeviceColumn::I64(DeviceArray::view(0x3000, capacity.get())),
                ],
                layout: 0,
                spec: <PoolRows as DeviceColumns>::COLUMNS,
                bs: DeviceScalar::view(0x4000),
            }
        }
    }

    #[test]
    fn a_batch_size_past_the_capacity_is_refused_before_the_driver() {
        let b = fake_batch(Cap::<4>::new());
        assert_eq!(b.checked_len(4), Ok(4));
        assert_eq!(
            b.checked_len(5),
            Err(Error::BatchExceedsWriteCapacity {
                bs: 5,
                write_req_capacity: 4
            })
        );
        assert!(matches!(&b.columns[0], DeviceColumn::I64(c) if c.is_view()) && b.bs.is_view());
        assert_eq!(b.kinds(), 0);
    }

    #[test]
    fn table_views_of_impossible_shapes_are_refused() {
        assert_eq!(device_table_cells("req_to_token", 3, 5, None), Ok(15));
        assert_eq!(
            device_table_cells("req_to_token", 1 << 31, 1, None),
            Err(Error::TableShape {
                what: "req_to_token",
                rows: 1 << 31,
                cols: 1,
                len: 1 << 31
            })
        );
        let e = device_table_cells("req_to_token", usize::MAX, 2, None).unwrap_err();
        assert!(
            matches!(
                e,
                Error::TableShape {
                    rows: usize::MAX,
                    cols: 2,
                    ..
                }
            ),
            "{e}"
        );
    }
}
