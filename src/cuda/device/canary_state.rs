//! Device twins of the canary state: canary buffer, violation ring, health counters.

use super::gpu::Gpu;
use super::stream::Stream;
use crate::canary::{CanaryBuffer, HealthCounters, SlotStride, ViolationRing};
use crate::capacity::Capacity;
use crate::consts::VIOLATION_FIELDS;
use crate::cuda::abi::args::RingClearArgs;
use crate::cuda::abi::kernels::Kernel;
use crate::cuda::driver::array::DeviceArray;
use crate::cuda::driver::launch::LaunchDims;
use crate::cuda::driver::memory as driver;
use crate::cuda::ops::Prepared;
use crate::memory::Device;
use crate::Error;

impl<S: Capacity> CanaryBuffer<S, Device> {
    /// A zeroed device buffer of `capacity` slots of `stride` bytes.
    pub fn on_device(gpu: &Gpu, capacity: S, stride: SlotStride) -> Result<Self, Error> {
        gpu.make_current()?;
        let len = capacity
            .get()
            .checked_mul(stride.get())
            .ok_or(Error::OutOfRange {
                what: "canary buffer bytes",
                value: i64::MAX,
                allowed: "[0, usize::MAX]",
            })?;
        Ok(CanaryBuffer {
            capacity,
            stride,
            bytes: driver::zeroed(len)?,
        })
    }

    /// Overwrites every byte with `host`'s (synchronous); the strides must agree.
    pub fn upload(&self, host: &CanaryBuffer<S>) -> Result<(), Error> {
        if host.stride != self.stride {
            return Err(Error::LengthMismatch {
                what: "canary slot_stride_bytes",
                expected: self.stride.get(),
                found: host.stride.get(),
            });
        }
        driver::upload(&self.bytes, 0, &host.bytes)
    }

    /// The raw device bytes (`num_slots x stride`), for kernels of the engine's own.
    pub fn device_bytes(&self) -> &DeviceArray<u8> {
        &self.bytes
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<CanaryBuffer<S>, Error> {
        let mut host = CanaryBuffer::with_stride(self.capacity, self.stride);
        driver::download(&mut host.bytes, &self.bytes, 0)?;
        Ok(host)
    }
}

impl<S: Capacity> CanaryBuffer<S> {
    /// A device copy with the same capacity type and stride.
    pub fn to_device(&self, gpu: &Gpu) -> Result<CanaryBuffer<S, Device>, Error> {
        let device = CanaryBuffer::on_device(gpu, self.capacity, self.stride)?;
        device.upload(self)?;
        Ok(device)
    }
}

impl<R: Capacity> ViolationRing<R, Device> {
    /// An empty device ring of `capacity` rows.
    pub fn on_device(gpu: &Gpu, capacity: R) -> Result<Self, Error> {
        gpu.make_current()?;
        let len = capacity
            .get()
            .checked_mul(VIOLATION_FIELDS)
            .ok_or(Error::OutOfRange {
                what: "violation ring fields",
                value: i64::MAX,
                allowed: "[0, usize::MAX]",
            })?;
        Ok(ViolationRing {
            capacity,
            rows: driver::zeroed(len)?,
            write_index: driver::scalar(0)?,
        })
    }

    /// Overwrites rows and write index with `host`'s (synchronous).
    pub fn upload(&self, host: &ViolationRing<R>) -> Result<(), Error> {
        driver::upload(&self.rows, 0, &host.rows)?;
        driver::set_scalar(&self.write_index, host.write_index)
    }

    /// Queues emptying the ring on `stream` (rows zeroed, write index 0): one stream-ordered
    /// launch (`kv_canary_ring_clear`, counted by [`launches_queued`](crate::cuda::launches_queued)),
    /// no host synchronisation; kernels queued after it on `stream` see an empty ring. The ring
    /// must live on `stream`'s device, as every launch's buffers.
    pub fn clear_on(&self, stream: &Stream) -> Result<(), Error> {
        let words = self.rows.len();
        let threads = Kernel::RingClear.threads();
        // Enough blocks for a word a thread, at most 1024 (grid-stride beyond).
        let grid = words.div_ceil(threads as usize).clamp(1, 1024) as u32;
        let target = stream.target();
        let launch = Prepared {
            kernel: Kernel::RingClear,
            function: target.gpu.function(Kernel::RingClear)?,
            dims: LaunchDims {
                grid,
                grid_y: 1,
                block: threads,
                shared_bytes: 0,
                cooperative: false,
                early_start: target.gpu.early_start(),
            },
            args: RingClearArgs {
                rows: driver::ptr(&self.rows),
                words: words as i64,
                write_index: driver::box_ptr(&self.write_index),
            },
        };
        // SAFETY: `RingClearArgs` mirrors the kernel's parameter (layout asserted by the
        // generated header); the kernel stores zeros to `rows[0 .. words)`, exactly this ring's
        // live row allocation, and to its write index, both owned by `self`, which the caller
        // keeps alive until the stream's work is done, as for every launch on the ring; the
        // function was looked up on `stream`'s `Gpu`.
        unsafe { launch.queue(&target) }
    }

    /// Empties the ring: rows zeroed, write index 0 (synchronous).
    pub fn clear(&self) -> Result<(), Error> {
        driver::upload(&self.rows, 0, &vec![0; self.rows.len()])?;
        driver::set_scalar(&self.write_index, 0)
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<ViolationRing<R>, Error> {
        let mut host = ViolationRing::with_capacity(self.capacity);
        driver::download(&mut host.rows, &self.rows, 0)?;
        host.write_index = driver::get_scalar(&self.write_index)?;
        Ok(host)
    }
}

impl<R: Capacity> ViolationRing<R> {
    /// A device copy with the same capacity type.
    pub fn to_device(&self, gpu: &Gpu) -> Result<ViolationRing<R, Device>, Error> {
        let device = ViolationRing::on_device(gpu, self.capacity)?;
        device.upload(self)?;
        Ok(device)
    }
}

impl HealthCounters<Device> {
    /// Both device counters at 0.
    pub fn on_device(gpu: &Gpu) -> Result<Self, Error> {
        gpu.make_current()?;
        Ok(HealthCounters {
            slot_run_counter: driver::scalar(0)?,
            kernel_run_counter: driver::scalar(0)?,
        })
    }

    /// Overwrites both counters (synchronous).
    pub fn upload(&self, host: &HealthCounters) -> Result<(), Error> {
        driver::set_scalar(&self.slot_run_counter, host.slot_run_counter)?;
        driver::set_scalar(&self.kernel_run_counter, host.kernel_run_counter)
    }

    /// A host copy (synchronous).
    pub fn to_host(&self) -> Result<HealthCounters, Error> {
        Ok(HealthCounters::from_parts(
            driver::get_scalar(&self.slot_run_counter)?,
            driver::get_scalar(&self.kernel_run_counter)?,
        ))
    }
}

impl HealthCounters {
    /// A device copy.
    pub fn to_device(&self, gpu: &Gpu) -> Result<HealthCounters<Device>, Error> {
        let device = HealthCounters::on_device(gpu)?;
        device.upload(self)?;
        Ok(device)
    }
}
