//! Device twins of the write op's per-token inputs, typed by the write-entry capacity and by
//! the input assert like the host ones.

use super::gpu::Gpu;
use crate::capacity::Capacity;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::driver::memory as driver;
use crate::input::{
    ExpectedWriteInputs, InputAssertOff, InputAssertOn, WriteInputAssert, WriteInputs,
};
use crate::memory::{Device, Host};
use crate::Error;

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
    fn host_inputs<E: Capacity>(capacity: E) -> WriteInputs<E, Self>
    where
        Self: Sized;
    #[doc(hidden)]
    fn download(
        host: &mut Self::Expected<Host>,
        device: &Self::Expected<Device>,
    ) -> Result<(), Error>;
    /// Device addresses of the expected tokens and positions (null when off).
    #[doc(hidden)]
    fn addrs(device: &Self::Expected<Device>) -> (DevPtr<i64>, DevPtr<i64>);
}

impl sealed::Sealed for InputAssertOff {}
impl DeviceInputAssert for InputAssertOff {
    fn alloc(_: usize) -> Result<(), Error> {
        Ok(())
    }
    fn upload(_: &(), _: &()) -> Result<(), Error> {
        Ok(())
    }
    fn host_inputs<E: Capacity>(capacity: E) -> WriteInputs<E, Self> {
        WriteInputs::with_capacity(capacity)
    }
    fn download(_: &mut (), _: &()) -> Result<(), Error> {
        Ok(())
    }
    fn addrs(_: &()) -> (DevPtr<i64>, DevPtr<i64>) {
        (DevPtr::NULL, DevPtr::NULL)
    }
}

impl sealed::Sealed for InputAssertOn {}
impl DeviceInputAssert for InputAssertOn {
    fn alloc(n: usize) -> Result<ExpectedWriteInputs<Device>, Error> {
        Ok(ExpectedWriteInputs {
            tokens: driver::zeroed(n)?,
            positions: driver::zeroed(n)?,
        })
    }
    fn upload(
        device: &ExpectedWriteInputs<Device>,
        host: &ExpectedWriteInputs,
    ) -> Result<(), Error> {
        driver::upload(&device.tokens, 0, &host.tokens)?;
        driver::upload(&device.positions, 0, &host.positions)
    }
    fn host_inputs<E: Capacity>(capacity: E) -> WriteInputs<E, Self> {
        WriteInputs::with_capacity(capacity).expect_input_assert()
    }
    fn download(
        host: &mut ExpectedWriteInputs,
        device: &ExpectedWriteInputs<Device>,
    ) -> Result<(), Error> {
        driver::download(&mut host.tokens, &device.tokens, 0)?;
        driver::download(&mut host.positions, &device.positions, 0)
    }
    fn addrs(device: &ExpectedWriteInputs<Device>) -> (DevPtr<i64>, DevPtr<i64>) {
        (driver::ptr(&device.tokens), driver::ptr(&device.positions))
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
            input_ids: driver::zeroed(n)?,
            positions: driver::zeroed(n)?,
            out_cache_loc,
            expected: A::alloc(n)?,
        })
    }

    /// Overwrites every array with `host`'s (synchronous; same capacity type, same lengths).
    pub fn upload(&self, host: &WriteInputs<E, A>) -> Result<(), Error> {
        driver::upload(&self.input_ids, 0, &host.input_ids)?;
        driver::upload(&self.positions, 0, &host.positions)?;
        driver::upload(&self.out_cache_loc, 0, &host.out_cache_loc)?;
        A::upload(&self.expected, &host.expected)
    }

    /// Overwrites the first `n` entries of the three per-token arrays (a step's tokens),
    /// leaving the rest; all three slices must have the same length, at most the capacity.
    pub fn upload_prefix(
        &self,
        input_ids: &[i64],
        positions: &[i64],
        out_cache_loc: &[i64],
    ) -> Result<(), Error> {
        for (what, v) in [("positions", positions), ("out_cache_loc", out_cache_loc)] {
            if v.len() != input_ids.len() {
                return Err(Error::LengthMismatch {
                    what,
                    expected: input_ids.len(),
                    found: v.len(),
                });
            }
        }
        driver::upload(&self.input_ids, 0, input_ids)?;
        driver::upload(&self.positions, 0, positions)?;
        driver::upload(&self.out_cache_loc, 0, out_cache_loc)
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<WriteInputs<E, A>, Error> {
        let mut host = A::host_inputs(self.capacity);
        driver::download(&mut host.input_ids, &self.input_ids, 0)?;
        driver::download(&mut host.positions, &self.positions, 0)?;
        driver::download(&mut host.out_cache_loc, &self.out_cache_loc, 0)?;
        A::download(&mut host.expected, &self.expected)?;
        Ok(host)
    }
}

impl<E: Capacity, A: DeviceInputAssert> WriteInputs<E, A> {
    /// A device copy with the same capacity type and input-assert state.
    pub fn to_device(&self, gpu: &Gpu) -> Result<WriteInputs<E, A, Device>, Error> {
        let device = WriteInputs::on_device(gpu, self.capacity)?;
        device.upload(self)?;
        Ok(device)
    }
}
