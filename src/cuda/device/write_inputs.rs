//! Device twins of the write op's per-token inputs, typed by the write-entry capacity and by
//! the input assert like the host ones: allocated by the crate or views of the engine's
//! arrays, filled synchronously (`upload`) or stream-ordered (`upload_on`).

use super::gpu::Gpu;
use super::plan_inputs::{column_view, DeviceIndex};
use super::stream::Stream;
use crate::capacity::Capacity;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::driver::array::{checked_view, DeviceArray, DeviceColumn};
use crate::cuda::driver::memory as driver;
use crate::input::{
    ExpectedWriteInputs, InputAssertOff, InputAssertOn, WriteInputAssert, WriteInputs,
};
use crate::memory::{Device, Host};
use crate::Error;
use cust::sys::CUstream;

mod sealed {
    pub trait Sealed {}
}

/// The input-assert states a device launch supports (both): how their expected tensors are
/// allocated, copied and passed to the kernel. Sealed.
pub trait DeviceInputAssert: WriteInputAssert + sealed::Sealed {
    #[doc(hidden)]
    fn alloc(n: usize) -> Result<Self::Expected<Device>, Error>;
    #[doc(hidden)]
    fn upload(device: &Self::Expected<Device>, host: &Self::Expected<Host>) -> Result<(), Error>;
    #[doc(hidden)]
    fn upload_async(
        device: &Self::Expected<Device>,
        host: &Self::Expected<Host>,
        stream: CUstream,
    ) -> Result<(), Error>;
    #[doc(hidden)]
    fn host_inputs<E: Capacity>(capacity: E) -> WriteInputs<E, Self>
    where
        Self: Sized;
    #[doc(hidden)]
    fn download(
        host: &mut Self::Expected<Host>,
        device: &Self::Expected<Device>,
    ) -> Result<(), Error>;
    /// Device addresses of the expected tokens and positions (null when off), and their
    /// element kinds as bytes 3 and 4 of `WriteArgs::kinds`.
    #[doc(hidden)]
    fn addrs(device: &Self::Expected<Device>) -> (DevPtr<i64>, DevPtr<i64>, i64);
}

impl sealed::Sealed for InputAssertOff {}
impl DeviceInputAssert for InputAssertOff {
    fn alloc(_: usize) -> Result<(), Error> {
        Ok(())
    }
    fn upload(_: &(), _: &()) -> Result<(), Error> {
        Ok(())
    }
    fn upload_async(_: &(), _: &(), _: CUstream) -> Result<(), Error> {
        Ok(())
    }
    fn host_inputs<E: Capacity>(capacity: E) -> WriteInputs<E, Self> {
        WriteInputs::with_capacity(capacity)
    }
    fn download(_: &mut (), _: &()) -> Result<(), Error> {
        Ok(())
    }
    fn addrs(_: &()) -> (DevPtr<i64>, DevPtr<i64>, i64) {
        (DevPtr::NULL, DevPtr::NULL, 0)
    }
}

impl sealed::Sealed for InputAssertOn {}
impl DeviceInputAssert for InputAssertOn {
    fn alloc(n: usize) -> Result<ExpectedWriteInputs<Device>, Error> {
        Ok(ExpectedWriteInputs {
            tokens: DeviceColumn::I64(driver::zeroed(n)?),
            positions: DeviceColumn::I64(driver::zeroed(n)?),
        })
    }
    fn upload(
        device: &ExpectedWriteInputs<Device>,
        host: &ExpectedWriteInputs,
    ) -> Result<(), Error> {
        driver::upload(device.tokens.i64s(EXPECTED_TOKENS)?, 0, &host.tokens)?;
        driver::upload(
            device.positions.i64s(EXPECTED_POSITIONS)?,
            0,
            &host.positions,
        )
    }
    fn upload_async(
        device: &ExpectedWriteInputs<Device>,
        host: &ExpectedWriteInputs,
        stream: CUstream,
    ) -> Result<(), Error> {
        driver::upload_async(
            device.tokens.i64s(EXPECTED_TOKENS)?,
            0,
            &host.tokens,
            stream,
        )?;
        let positions = device.positions.i64s(EXPECTED_POSITIONS)?;
        driver::upload_async(positions, 0, &host.positions, stream)
    }
    fn host_inputs<E: Capacity>(capacity: E) -> WriteInputs<E, Self> {
        WriteInputs::with_capacity(capacity).expect_input_assert()
    }
    fn download(
        host: &mut ExpectedWriteInputs,
        device: &ExpectedWriteInputs<Device>,
    ) -> Result<(), Error> {
        driver::download(&mut host.tokens, device.tokens.i64s(EXPECTED_TOKENS)?, 0)?;
        driver::download(
            &mut host.positions,
            device.positions.i64s(EXPECTED_POSITIONS)?,
            0,
        )
    }
    fn addrs(device: &ExpectedWriteInputs<Device>) -> (DevPtr<i64>, DevPtr<i64>, i64) {
        (
            DevPtr::from_addr(device.tokens.addr()),
            DevPtr::from_addr(device.positions.addr()),
            (device.tokens.kind() << 24) | (device.positions.kind() << 32),
        )
    }
}

impl<E: Capacity, A: DeviceInputAssert> WriteInputs<E, A, Device> {
    /// Device inputs of `capacity` entries: tokens and positions 0, every `out_cache_loc` -1
    /// (skip), expected tensors (assert on) 0.
    pub fn on_device(gpu: &Gpu, capacity: E) -> Result<Self, Error> {
        gpu.make_current()?;
        let n = capacity.get();
        let out_cache_loc = driver::zeroed(n)?;
        driver::upload(&out_cache_loc, 0, &vec![-1; n])?;
        Ok(WriteInputs {
            capacity,
            input_ids: DeviceColumn::I64(driver::zeroed(n)?),
            positions: DeviceColumn::I64(driver::zeroed(n)?),
            out_cache_loc: DeviceColumn::I64(out_cache_loc),
            expected: A::alloc(n)?,
        })
    }

    /// Overwrites every array with `host`'s (synchronous; same capacity type, same lengths).
    pub fn upload(&self, host: &WriteInputs<E, A>) -> Result<(), Error> {
        let [ids, pos, loc] = self.i64_arrays()?;
        driver::upload(ids, 0, &host.input_ids)?;
        driver::upload(pos, 0, &host.positions)?;
        driver::upload(loc, 0, &host.out_cache_loc)?;
        A::upload(&self.expected, &host.expected)
    }

    /// The three per-token arrays as the crate's transfers copy them (`i64`), or the error of
    /// a view of the engine's 32-bit arrays.
    fn i64_arrays(&self) -> Result<[&DeviceArray<i64>; 3], Error> {
        Ok([
            self.input_ids.i64s("input_ids")?,
            self.positions.i64s("positions")?,
            self.out_cache_loc.i64s("out_cache_loc")?,
        ])
    }

    /// The kernels' codes of every array's element type (`WriteArgs::kinds`).
    pub(crate) fn kinds(&self) -> i64 {
        let (_, _, expected) = A::addrs(&self.expected);
        self.input_ids.kind()
            | (self.positions.kind() << 8)
            | (self.out_cache_loc.kind() << 16)
            | expected
    }

    /// [`upload`](Self::upload) queued on `stream` (`cuMemcpyHtoDAsync`, no host
    /// synchronisation); `host` may be dropped as soon as this returns.
    pub fn upload_on(&self, stream: &Stream, host: &WriteInputs<E, A>) -> Result<(), Error> {
        let raw = stream.as_raw();
        let [ids, pos, loc] = self.i64_arrays()?;
        driver::upload_async(ids, 0, &host.input_ids, raw)?;
        driver::upload_async(pos, 0, &host.positions, raw)?;
        driver::upload_async(loc, 0, &host.out_cache_loc, raw)?;
        A::upload_async(&self.expected, &host.expected, raw)
    }

    /// Overwrites the first `n` entries of the three per-token arrays (a step's tokens),
    /// leaving the rest; all three slices must have the same length, at most the capacity.
    pub fn upload_prefix(
        &self,
        input_ids: &[i64],
        positions: &[i64],
        out_cache_loc: &[i64],
    ) -> Result<(), Error> {
        same_lengths(input_ids, positions, out_cache_loc)?;
        let [ids, pos, loc] = self.i64_arrays()?;
        driver::upload(ids, 0, input_ids)?;
        driver::upload(pos, 0, positions)?;
        driver::upload(loc, 0, out_cache_loc)
    }

    /// [`upload_prefix`](Self::upload_prefix) queued on `stream` (no host synchronisation).
    pub fn upload_prefix_on(
        &self,
        stream: &Stream,
        input_ids: &[i64],
        positions: &[i64],
        out_cache_loc: &[i64],
    ) -> Result<(), Error> {
        same_lengths(input_ids, positions, out_cache_loc)?;
        let raw = stream.as_raw();
        let [ids, pos, loc] = self.i64_arrays()?;
        driver::upload_async(ids, 0, input_ids, raw)?;
        driver::upload_async(pos, 0, positions, raw)?;
        driver::upload_async(loc, 0, out_cache_loc, raw)
    }

    /// Whether the per-token arrays are the engine's (views).
    pub fn is_view(&self) -> bool {
        self.input_ids.is_view()
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<WriteInputs<E, A>, Error> {
        let mut host = A::host_inputs(self.capacity);
        let [ids, pos, loc] = self.i64_arrays()?;
        driver::download(&mut host.input_ids, ids, 0)?;
        driver::download(&mut host.positions, pos, 0)?;
        driver::download(&mut host.out_cache_loc, loc, 0)?;
        A::download(&mut host.expected, &self.expected)?;
        Ok(host)
    }
}

/// The device addresses (`CUdeviceptr`) of an engine's write inputs, for
/// [`WriteInputs::from_raw`] (input assert off) and [`WriteInputs::from_raw_asserted`] (on):
/// `i64` arrays of at least the capacity's elements each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawWriteInputs {
    /// `input_ids`.
    pub input_ids: u64,
    /// `positions`.
    pub positions: u64,
    /// `out_cache_loc`.
    pub out_cache_loc: u64,
}

/// Views of `n` elements at each of `raw`'s addresses: `T`s, `P`s and `L`s.
///
/// # Safety
///
/// As [`WriteInputs::from_raw`], for the three element types.
unsafe fn raw_views<T: DeviceIndex, P: DeviceIndex, L: DeviceIndex>(
    gpu: &Gpu,
    n: usize,
    raw: RawWriteInputs,
) -> Result<[DeviceColumn; 3], Error> {
    // SAFETY: forwarded to the caller; `column_view` checks the rest.
    unsafe {
        Ok([
            column_view::<T>(gpu, "input_ids", raw.input_ids, n)?,
            column_view::<P>(gpu, "positions", raw.positions, n)?,
            column_view::<L>(gpu, "out_cache_loc", raw.out_cache_loc, n)?,
        ])
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOff, Device> {
    /// Views of the engine's `input_ids`, `positions` and `out_cache_loc` (`capacity` `i64`s
    /// each; nothing copied, the write launch reads them in place). A null or unaligned address
    /// or a range past the end of its allocation is [`Error::DeviceView`].
    ///
    /// # Safety
    ///
    /// Each address is the start of `capacity` `i64`s of device memory in one live allocation
    /// of `gpu`'s context (or one its device can access), 8-byte aligned, which stays allocated
    /// while these inputs, or any launch or graph that read them, can run; the engine writes
    /// them only in stream order with those launches.
    pub unsafe fn from_raw(gpu: &Gpu, capacity: E, raw: RawWriteInputs) -> Result<Self, Error> {
        // SAFETY: forwarded to the caller.
        unsafe { Self::from_raw_of::<i64, i64, i64>(gpu, capacity, raw) }
    }

    /// [`from_raw`](Self::from_raw) over arrays of `T` (`input_ids`), `P` (`positions`) and
    /// `L` (`out_cache_loc`) (the typed views').
    ///
    /// # Safety
    ///
    /// As [`from_raw`](Self::from_raw), for `capacity` aligned elements of each array's type.
    pub(crate) unsafe fn from_raw_of<T: DeviceIndex, P: DeviceIndex, L: DeviceIndex>(
        gpu: &Gpu,
        capacity: E,
        raw: RawWriteInputs,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded to the caller.
        let [input_ids, positions, out_cache_loc] =
            unsafe { raw_views::<T, P, L>(gpu, capacity.get(), raw)? };
        Ok(WriteInputs {
            capacity,
            input_ids,
            positions,
            out_cache_loc,
            expected: (),
        })
    }

    /// Records the lengths of the buffers the arrays view (a safe constructor's).
    pub(crate) fn record_rooms(&mut self, arrays: [usize; 3]) {
        self.input_ids.record_room(arrays[0]);
        self.positions.record_room(arrays[1]);
        self.out_cache_loc.record_room(arrays[2]);
    }

    /// The same views with `capacity` entries, each checked against its buffer.
    pub(crate) fn rebound<E2: Capacity>(
        &self,
        capacity: E2,
    ) -> Result<WriteInputs<E2, InputAssertOff, Device>, Error> {
        let n = capacity.get();
        Ok(WriteInputs {
            capacity,
            input_ids: self.input_ids.rebound("input_ids", n)?,
            positions: self.positions.rebound("positions", n)?,
            out_cache_loc: self.out_cache_loc.rebound("out_cache_loc", n)?,
            expected: (),
        })
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOff, Device> {
    /// The same views with the input assert on: `capacity` expected tokens of `T` at
    /// `expected_tokens` and positions of `P` at `expected_positions` (the typed views'
    /// `with_expected`), checked as [`from_raw`](Self::from_raw); `rooms` are the lengths of
    /// the buffers they view (`None`: unknown).
    ///
    /// # Safety
    ///
    /// As [`WriteInputs::from_raw_asserted`], for the two expected arrays of their types.
    pub(crate) unsafe fn asserted_of<T: DeviceIndex, P: DeviceIndex>(
        &self,
        gpu: &Gpu,
        expected_tokens: u64,
        expected_positions: u64,
        rooms: Option<[usize; 2]>,
    ) -> Result<WriteInputs<E, InputAssertOn, Device>, Error> {
        let n = self.capacity.get();
        // SAFETY: forwarded to the caller; `column_view` checks the rest.
        let (mut tokens, mut positions) = unsafe {
            (
                column_view::<T>(gpu, EXPECTED_TOKENS, expected_tokens, n)?,
                column_view::<P>(gpu, EXPECTED_POSITIONS, expected_positions, n)?,
            )
        };
        if let Some([t, p]) = rooms {
            tokens.record_room(t);
            positions.record_room(p);
        }
        Ok(WriteInputs {
            capacity: self.capacity,
            input_ids: self.input_ids.rebound("input_ids", n)?,
            positions: self.positions.rebound("positions", n)?,
            out_cache_loc: self.out_cache_loc.rebound("out_cache_loc", n)?,
            expected: ExpectedWriteInputs { tokens, positions },
        })
    }
}

impl<E: Capacity> WriteInputs<E, InputAssertOn, Device> {
    /// [`WriteInputs::from_raw`] with the input assert on: also views of the engine's expected
    /// tokens and positions (`capacity` `i64`s each at `expected_tokens` and
    /// `expected_positions`).
    ///
    /// # Safety
    ///
    /// As [`WriteInputs::from_raw`], for all five addresses.
    pub unsafe fn from_raw_asserted(
        gpu: &Gpu,
        capacity: E,
        raw: RawWriteInputs,
        expected_tokens: u64,
        expected_positions: u64,
    ) -> Result<Self, Error> {
        let n = capacity.get();
        let ctx = gpu.context();
        // SAFETY: forwarded to the caller; `checked_view` checks the rest.
        let ([input_ids, positions, out_cache_loc], tokens, exp_positions) = unsafe {
            (
                raw_views::<i64, i64, i64>(gpu, n, raw)?,
                checked_view(ctx, EXPECTED_TOKENS, expected_tokens, n)?,
                checked_view(ctx, EXPECTED_POSITIONS, expected_positions, n)?,
            )
        };
        Ok(WriteInputs {
            capacity,
            input_ids,
            positions,
            out_cache_loc,
            expected: ExpectedWriteInputs {
                tokens: DeviceColumn::I64(tokens),
                positions: DeviceColumn::I64(exp_positions),
            },
        })
    }
}

/// What the expected tensors' errors name.
const EXPECTED_TOKENS: &str = "expected input_ids";
/// What the expected tensors' errors name.
const EXPECTED_POSITIONS: &str = "expected positions";

/// `Ok` when `positions` and `out_cache_loc` have `input_ids`' length.
fn same_lengths(input_ids: &[i64], positions: &[i64], out_cache_loc: &[i64]) -> Result<(), Error> {
    for (what, v) in [("positions", positions), ("out_cache_loc", out_cache_loc)] {
        if v.len() != input_ids.len() {
            return Err(Error::LengthMismatch {
                what,
                expected: input_ids.len(),
                found: v.len(),
            });
        }
    }
    Ok(())
}

impl<E: Capacity, A: DeviceInputAssert> WriteInputs<E, A> {
    /// A device copy with the same capacity type and input-assert state.
    pub fn to_device(&self, gpu: &Gpu) -> Result<WriteInputs<E, A, Device>, Error> {
        let device = WriteInputs::on_device(gpu, self.capacity)?;
        device.upload(self)?;
        Ok(device)
    }
}
