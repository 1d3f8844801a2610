//! Device twins of the canary state (canary buffer, violation ring, health counters) and of the
//! launch settings (real-KV sources in device memory, the chain-position assert flag).

use super::driver;
use super::gpu::Gpu;
use crate::canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchTag, SlotStride, ViolationRing,
};
use crate::capacity::Capacity;
use crate::consts::{MAX_REAL_KV_SOURCES, VIOLATION_FIELDS};
use crate::real_kv::{
    check_layout, AtMostFourSources, RealKvHashMode, RealKvParams, RowLayout, SourceCount,
};
use crate::{Device, Error};
use cust::memory::{DeviceBox, DeviceBuffer};

impl<S: Capacity> CanaryBuffer<S, Device> {
    /// A zeroed device buffer of `capacity` slots of `stride` bytes.
    pub fn on_device(_gpu: &Gpu, capacity: S, stride: SlotStride) -> Result<Self, Error> {
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
    pub fn device_bytes(&self) -> &DeviceBuffer<u8> {
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
    pub fn on_device(_gpu: &Gpu, capacity: R) -> Result<Self, Error> {
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
    pub fn on_device(_gpu: &Gpu) -> Result<Self, Error> {
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

/// `enable_chain_position_assert` in device memory (`i32 [1]`), so that a captured graph picks
/// up a flip (0 during warm-up and capture, 1 afterwards) without being captured again.
pub struct ChainAssertFlag {
    pub(crate) flag: DeviceBox<i32>,
}

impl ChainAssertFlag {
    /// A device flag holding `value`.
    pub fn new(_gpu: &Gpu, value: ChainPositionAssert) -> Result<Self, Error> {
        Ok(ChainAssertFlag {
            flag: driver::scalar(value.flag())?,
        })
    }

    /// Sets the flag (synchronous; ordered after the queued launches).
    pub fn set(&self, value: ChainPositionAssert) -> Result<(), Error> {
        driver::set_scalar(&self.flag, value.flag())
    }
}

/// Where the write launch reads `enable_chain_position_assert` from.
#[derive(Clone, Copy)]
pub enum ChainAssert<'a> {
    /// A value fixed when the launch is queued (or captured).
    Fixed(ChainPositionAssert),
    /// A device flag, read when the launch runs.
    Flag(&'a ChainAssertFlag),
}

/// One real-KV source in device memory: a byte view `[num_rows, row_bytes]` with a row stride,
/// validated once by the rules of [`RealKvSource`](crate::RealKvSource) (spec §2.10).
#[derive(Clone, Copy)]
pub struct DeviceRealKvSource<'a> {
    bytes: &'a DeviceBuffer<u8>,
    num_rows: usize,
    row_stride: usize,
    page_size: usize,
    num_bytes_per_token: usize,
    read_bytes: usize,
}

impl<'a> DeviceRealKvSource<'a> {
    /// A source over `bytes` laid out as `layout`, checked like
    /// [`RealKvSource::strided`](crate::RealKvSource::strided). The device buffer's base is
    /// 16-byte aligned (cuMemAlloc aligns to 256).
    pub fn new(
        bytes: &'a DeviceBuffer<u8>,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        let (page_size, num_bytes_per_token, read_bytes) =
            check_layout(bytes.len(), layout, params)?;
        Ok(DeviceRealKvSource {
            bytes,
            num_rows: layout.num_rows,
            row_stride: layout.row_stride_bytes,
            page_size,
            num_bytes_per_token,
            read_bytes,
        })
    }
}

/// The real-KV part of a device launch: a mode and up to four device sources, in fold order.
#[derive(Clone, Copy)]
pub struct DeviceRealKv<'a> {
    mode: RealKvHashMode,
    sources: [Option<DeviceRealKvSource<'a>>; MAX_REAL_KV_SOURCES],
    len: usize,
}

impl<'a> DeviceRealKv<'a> {
    /// No fingerprint: expected hashes are 0 and nothing is read.
    pub const NONE: DeviceRealKv<'static> = DeviceRealKv {
        mode: RealKvHashMode::None,
        sources: [None; MAX_REAL_KV_SOURCES],
        len: 0,
    };

    /// `N <= 4` sources under `mode` (five do not compile, as on the host).
    pub fn new<const N: usize>(mode: RealKvHashMode, sources: [DeviceRealKvSource<'a>; N]) -> Self
    where
        SourceCount<N>: AtMostFourSources,
    {
        let mut out = DeviceRealKv {
            mode,
            sources: [None; MAX_REAL_KV_SOURCES],
            len: N,
        };
        for (slot, s) in out.sources.iter_mut().zip(sources) {
            *slot = Some(s);
        }
        out
    }

    /// Sources counted at run time; more than four is [`Error::TooManyRealKvSources`].
    pub fn try_from_slice(
        mode: RealKvHashMode,
        sources: &[DeviceRealKvSource<'a>],
    ) -> Result<Self, Error> {
        if sources.len() > MAX_REAL_KV_SOURCES {
            return Err(Error::TooManyRealKvSources {
                count: sources.len(),
                max: MAX_REAL_KV_SOURCES,
            });
        }
        let mut out = DeviceRealKv {
            mode,
            sources: [None; MAX_REAL_KV_SOURCES],
            len: sources.len(),
        };
        for (slot, s) in out.sources.iter_mut().zip(sources) {
            *slot = Some(*s);
        }
        Ok(out)
    }

    /// Kernel variant: 0 no fold, 1 PARTIAL, 2 ALL.
    pub(crate) fn kind(&self) -> usize {
        match self.mode {
            _ if self.len == 0 => 0,
            RealKvHashMode::None => 0,
            RealKvHashMode::Partial => 1,
            RealKvHashMode::All => 2,
        }
    }

    /// The ABI table (unused sources zero, never read).
    pub(crate) fn abi(&self) -> super::abi::RealKvArgs {
        let mut a = super::abi::RealKvArgs {
            num_sources: self.len as i64,
            mode: self.mode.value(),
            ..Default::default()
        };
        for (k, s) in self.sources.iter().enumerate() {
            if let Some(s) = s {
                a.base[k] = driver::addr(s.bytes);
                a.row_stride[k] = s.row_stride as i64;
                a.num_rows[k] = s.num_rows as i64;
                a.page_size[k] = s.page_size as i64;
                a.bytes_per_token[k] = s.num_bytes_per_token as i64;
                a.read_bytes[k] = s.read_bytes as i64;
            }
        }
        a
    }
}

/// What one device write or verify launch needs besides its buffers (the twin of
/// [`crate::LaunchSettings`]): the tag, the real-KV fingerprint over device sources, and where write
/// reads the chain-position assert from.
#[derive(Clone, Copy)]
pub struct DeviceLaunch<'a> {
    /// Stamped into field 0 of every violation row.
    pub tag: LaunchTag,
    /// The fingerprint.
    pub real_kv: DeviceRealKv<'a>,
    /// `enable_chain_position_assert` (write only).
    pub chain_position_assert: ChainAssert<'a>,
}

impl DeviceLaunch<'static> {
    /// Tag `tag`, no fingerprint, chain-position assert fixed on.
    pub const fn new(tag: LaunchTag) -> Self {
        DeviceLaunch {
            tag,
            real_kv: DeviceRealKv::NONE,
            chain_position_assert: ChainAssert::Fixed(ChainPositionAssert::ON),
        }
    }
}

impl<'a> DeviceLaunch<'a> {
    /// The same launch with another fingerprint.
    pub fn with_real_kv<'b>(self, real_kv: DeviceRealKv<'b>) -> DeviceLaunch<'b>
    where
        'a: 'b,
    {
        DeviceLaunch {
            tag: self.tag,
            real_kv,
            chain_position_assert: self.chain_position_assert,
        }
    }

    /// The same launch reading the chain-position assert from `flag` on the device.
    pub fn with_chain_assert_flag<'b>(self, flag: &'b ChainAssertFlag) -> DeviceLaunch<'b>
    where
        'a: 'b,
    {
        DeviceLaunch {
            tag: self.tag,
            real_kv: self.real_kv,
            chain_position_assert: ChainAssert::Flag(flag),
        }
    }

    /// The same launch with the chain-position assert fixed to `value`.
    pub fn with_chain_position_assert(self, value: ChainPositionAssert) -> Self {
        DeviceLaunch {
            chain_position_assert: ChainAssert::Fixed(value),
            ..self
        }
    }
}
