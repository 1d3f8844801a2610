//! What a device write or verify launch needs besides its buffers ([`DeviceSettings`], the twin
//! of [`crate::Launch`]): the tag, real-KV sources in device memory, the chain-position assert.

use super::gpu::Gpu;
use crate::canary::{ChainPositionAssert, LaunchTag};
use crate::consts::MAX_REAL_KV_SOURCES;
use crate::cuda::abi::args::RealKv;
use crate::cuda::abi::kernels::Fold;
use crate::cuda::driver::memory as driver;
use crate::real_kv::{
    check_layout, AtMostFourSources, RealKvHashMode, RealKvParams, RowLayout, SourceCount,
};
use crate::Error;
use cust::memory::{DeviceBox, DeviceBuffer};

/// `enable_chain_position_assert` in device memory (`i32 [1]`), so that a captured graph picks
/// up a flip (0 during warm-up and capture, 1 afterwards) without being captured again.
pub struct ChainAssertFlag {
    pub(crate) flag: DeviceBox<i32>,
}

impl ChainAssertFlag {
    /// A device flag holding `value`.
    pub fn new(gpu: &Gpu, value: ChainPositionAssert) -> Result<Self, Error> {
        gpu.make_current()?;
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

impl DeviceRealKv<'_> {
    /// `Ok` when every source folds (mode not NONE) and reaches slot `slots - 1`; otherwise
    /// [`Error::RealKvSlotOutOfRange`] naming the first source that falls short (the host rule of
    /// the step API: no tail launch may fail half-way through a step).
    pub(crate) fn check_covers(&self, slots: usize) -> Result<(), Error> {
        if self.mode == RealKvHashMode::None || slots == 0 {
            return Ok(());
        }
        let last = slots - 1;
        for (source, s) in self.sources.iter().take(self.len).enumerate() {
            let Some(s) = s else { continue };
            let row = last / s.page_size;
            if row >= s.num_rows {
                return Err(Error::RealKvSlotOutOfRange {
                    source,
                    slot: last as i64,
                    row,
                    num_rows: s.num_rows,
                });
            }
        }
        Ok(())
    }
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

    /// The fold the kernels are picked for.
    pub(crate) fn fold(&self) -> Fold {
        match self.mode {
            _ if self.len == 0 => Fold::None,
            RealKvHashMode::None => Fold::None,
            RealKvHashMode::Partial => Fold::Partial,
            RealKvHashMode::All => Fold::All,
        }
    }

    /// The ABI table (unused sources zero, never read).
    pub(crate) fn abi(&self) -> RealKv {
        let mut a = RealKv {
            num_sources: self.len as i64,
            mode: self.mode.value(),
            ..Default::default()
        };
        for (k, s) in self.sources.iter().enumerate() {
            if let Some(s) = s {
                a.base[k] = driver::ptr(s.bytes);
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
/// [`crate::LaunchSettings`]; formerly `DeviceLaunch`): the tag, the real-KV fingerprint over
/// device sources, and where write reads the chain-position assert from.
#[derive(Clone, Copy)]
pub struct DeviceSettings<'a> {
    /// Stamped into field 0 of every violation row.
    pub tag: LaunchTag,
    /// The fingerprint.
    pub real_kv: DeviceRealKv<'a>,
    /// `enable_chain_position_assert` (write only).
    pub chain_position_assert: ChainAssert<'a>,
}

impl DeviceSettings<'static> {
    /// Tag `tag`, no fingerprint, chain-position assert fixed on.
    pub const fn new(tag: LaunchTag) -> Self {
        DeviceSettings {
            tag,
            real_kv: DeviceRealKv::NONE,
            chain_position_assert: ChainAssert::Fixed(ChainPositionAssert::ON),
        }
    }
}

impl<'a> DeviceSettings<'a> {
    /// The same launch with another fingerprint.
    pub fn with_real_kv<'b>(self, real_kv: DeviceRealKv<'b>) -> DeviceSettings<'b>
    where
        'a: 'b,
    {
        DeviceSettings {
            tag: self.tag,
            real_kv,
            chain_position_assert: self.chain_position_assert,
        }
    }

    /// The same launch reading the chain-position assert from `flag` on the device.
    pub fn with_chain_assert_flag<'b>(self, flag: &'b ChainAssertFlag) -> DeviceSettings<'b>
    where
        'a: 'b,
    {
        DeviceSettings {
            tag: self.tag,
            real_kv: self.real_kv,
            chain_position_assert: ChainAssert::Flag(flag),
        }
    }

    /// The same launch with the chain-position assert fixed to `value`.
    pub fn with_chain_position_assert(self, value: ChainPositionAssert) -> Self {
        DeviceSettings {
            chain_position_assert: ChainAssert::Fixed(value),
            ..self
        }
    }
}
