//! Device twins of the plan inputs: batch columns (with the batch size in device memory),
//! `req_to_token` and the expected-token pool, the SWA lookup table and valid lengths.

use super::gpu::Gpu;
use crate::capacity::{Capacity, SameWriteReqCapacity};
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::driver::memory as driver;
use crate::input::{
    Batch, Full, NoExpectedTokens, PositionOffset, ReqTable, SlotIds, SwaWindow, TableKind,
    TokenIds,
};
use crate::Error;
use core::marker::PhantomData;
use cust::memory::{DeviceBox, DeviceBuffer};

/// Device batch columns `req_pool_indices`, `prefix_lens`, `extend_seq_lens` for up to `W` rows
/// (the write-request capacity), with the batch size `bs` in device memory.
///
/// The plan launch reads `bs` on the device, so a graph captured once serves every batch:
/// [`upload`](Self::upload) the next batch in place and replay.
pub struct DeviceBatch<W: Capacity> {
    capacity: W,
    pub(crate) req_pool_indices: DeviceBuffer<i64>,
    pub(crate) prefix_lens: DeviceBuffer<i64>,
    pub(crate) extend_seq_lens: DeviceBuffer<i64>,
    pub(crate) bs: DeviceBox<i32>,
}

impl<W: Capacity> DeviceBatch<W> {
    /// Empty columns (`bs = 0`) for up to `capacity` rows. Prefer [`crate::Shape::device_batch`].
    pub fn new(gpu: &Gpu, capacity: W) -> Result<Self, Error> {
        gpu.make_current()?;
        let n = capacity.get();
        Ok(DeviceBatch {
            capacity,
            req_pool_indices: driver::zeroed(n)?,
            prefix_lens: driver::zeroed(n)?,
            extend_seq_lens: driver::zeroed(n)?,
            bs: driver::scalar(0)?,
        })
    }

    /// The row capacity.
    pub fn capacity(&self) -> W {
        self.capacity
    }

    /// Replaces the device batch by `batch` (synchronous copies of its `bs` rows and of `bs`).
    /// More rows than the capacity is [`Error::BatchExceedsWriteCapacity`], nothing copied.
    pub fn upload(&self, batch: &Batch) -> Result<(), Error> {
        let bs = batch.len();
        if bs > self.capacity.get() || i32::try_from(bs).is_err() {
            return Err(Error::BatchExceedsWriteCapacity {
                bs,
                write_req_capacity: self.capacity.get(),
            });
        }
        driver::upload(&self.req_pool_indices, 0, batch.req_pool_indices())?;
        driver::upload(&self.prefix_lens, 0, batch.prefix_lens())?;
        driver::upload(&self.extend_seq_lens, 0, batch.extend_seq_lens())?;
        driver::set_scalar(&self.bs, bs as i32)
    }

    /// The batch on the device (synchronous): `bs` rows, `bs` clamped to `[0, capacity]`.
    pub fn to_host(&self) -> Result<Batch, Error> {
        let bs = usize::try_from(driver::get_scalar(&self.bs)?)
            .unwrap_or(0)
            .min(self.capacity.get());
        let mut cols = [vec![0; bs], vec![0; bs], vec![0; bs]];
        driver::download(&mut cols[0], &self.req_pool_indices, 0)?;
        driver::download(&mut cols[1], &self.prefix_lens, 0)?;
        driver::download(&mut cols[2], &self.extend_seq_lens, 0)?;
        let [a, b, c] = cols;
        Batch::try_from_columns(a, b, c)
    }
}

/// A device copy of a [`ReqTable`]: `req_to_token` ([`DeviceReqToToken`]) or the expected-token
/// pool ([`DeviceExpectedTable`]), kept apart by the same marker types.
pub struct DeviceTable<K: TableKind> {
    pub(crate) data: DeviceBuffer<i32>,
    rows: usize,
    width: usize,
    kind: PhantomData<K>,
}

/// `req_to_token` on the device.
pub type DeviceReqToToken = DeviceTable<SlotIds>;
/// `req_to_verify_expected_tokens` on the device.
pub type DeviceExpectedTable = DeviceTable<TokenIds>;

impl<K: TableKind> DeviceTable<K> {
    /// A device copy of `host` (same rows and width). Rows or widths of 2^31 or more are
    /// rejected (the plan kernel keeps rows and positions in 32 bits).
    pub fn from_host(gpu: &Gpu, host: &ReqTable<K>) -> Result<Self, Error> {
        gpu.make_current()?;
        if i32::try_from(host.width()).is_err() || i32::try_from(host.rows()).is_err() {
            return Err(Error::TableShape {
                what: K::NAME,
                rows: host.rows(),
                cols: host.width(),
                len: host.as_slice().len(),
            });
        }
        let data = driver::zeroed(host.as_slice().len())?;
        driver::upload(&data, 0, host.as_slice())?;
        Ok(DeviceTable {
            data,
            rows: host.rows(),
            width: host.width(),
            kind: PhantomData,
        })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Replaces the whole table (synchronous); `host` must have the same rows and width.
    pub fn upload(&self, host: &ReqTable<K>) -> Result<(), Error> {
        if host.rows() != self.rows || host.width() != self.width {
            return Err(Error::TableShape {
                what: K::NAME,
                rows: self.rows,
                cols: self.width,
                len: host.as_slice().len(),
            });
        }
        driver::upload(&self.data, 0, host.as_slice())
    }

    /// Replaces row `r` (synchronous); `cells` must hold exactly one row.
    pub fn upload_row(&self, r: usize, cells: &[i32]) -> Result<(), Error> {
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
        driver::upload(&self.data, r * self.width, cells)
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<ReqTable<K>, Error> {
        let mut data = vec![0; self.rows * self.width];
        driver::download(&mut data, &self.data, 0)?;
        ReqTable::from_vec(self.rows, self.width, data)
    }
}

/// `full_to_swa_index_mapping` on the device (non-empty).
pub struct DeviceLut {
    pub(crate) data: DeviceBuffer<i64>,
}

impl DeviceLut {
    /// A device copy of `lut`; an empty table is rejected.
    pub fn from_host(gpu: &Gpu, lut: &[i64]) -> Result<Self, Error> {
        gpu.make_current()?;
        if lut.is_empty() {
            return Err(Error::ZeroCapacity {
                what: "full_to_swa_index_mapping length",
                value: 0,
            });
        }
        let data = driver::zeroed(lut.len())?;
        driver::upload(&data, 0, lut)?;
        Ok(DeviceLut { data })
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Always false (an empty LUT cannot be built).
    pub fn is_empty(&self) -> bool {
        self.data.len() == 0
    }

    /// Replaces the table (synchronous); `lut` must have the same length.
    pub fn upload(&self, lut: &[i64]) -> Result<(), Error> {
        if lut.len() != self.len() {
            return Err(Error::LengthMismatch {
                what: "full_to_swa_index_mapping",
                expected: self.len(),
                found: lut.len(),
            });
        }
        driver::upload(&self.data, 0, lut)
    }
}

/// `req_to_verify_expected_tokens_valid_lens` on the device: up to `W` lengths, one per batch
/// row, with their count in device memory (the plan launch checks it equals `bs`).
pub struct DeviceValidLens<W: Capacity> {
    capacity: W,
    pub(crate) lens: DeviceBuffer<i64>,
    pub(crate) len: DeviceBox<i32>,
}

impl<W: Capacity> DeviceValidLens<W> {
    /// No lengths yet, room for `capacity`. Prefer [`crate::Shape::device_valid_lens`].
    pub fn new(gpu: &Gpu, capacity: W) -> Result<Self, Error> {
        gpu.make_current()?;
        Ok(DeviceValidLens {
            capacity,
            lens: driver::zeroed(capacity.get())?,
            len: driver::scalar(0)?,
        })
    }

    /// The capacity.
    pub fn capacity(&self) -> W {
        self.capacity
    }

    /// Replaces the lengths (synchronous); more than the capacity is an error, nothing copied.
    pub fn upload(&self, valid_lens: &[i64]) -> Result<(), Error> {
        if valid_lens.len() > self.capacity.get() {
            return Err(Error::LengthMismatch {
                what: "req_to_verify_expected_tokens_valid_lens",
                expected: self.capacity.get(),
                found: valid_lens.len(),
            });
        }
        driver::upload(&self.lens, 0, valid_lens)?;
        driver::set_scalar(&self.len, valid_lens.len() as i32)
    }
}

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
pub type ExpectedPoolPtrs<'a> = (&'a DeviceExpectedTable, DevPtr<i64>, DevPtr<i32>);

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
            driver::ptr(&self.valid_lens.lens),
            driver::box_ptr(&self.valid_lens.len),
        )))
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
