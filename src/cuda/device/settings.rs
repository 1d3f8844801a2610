//! What a device write or verify launch needs besides its buffers ([`DeviceSettings`], the twin
//! of [`crate::Launch`]): the tag, real-KV sources in device memory, the chain-position assert.

use super::gpu::Gpu;
use crate::canary::{ChainPositionAssert, LaunchTag};
use crate::consts::MAX_REAL_KV_SOURCES;
use crate::cuda::abi::args::RealKv;
use crate::cuda::abi::kernels::Fold;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::driver::array::{
    check_in_allocation, check_view_bytes, DeviceScalar, ViewableSlice,
};
use crate::cuda::driver::memory as driver;
use crate::real_kv::{
    check_layout, AtMostFourSources, PagedShape, RealKvHashMode, RealKvParams, RowLayout,
    SourceCount, TokenLayout,
};
use crate::Error;
use core::marker::PhantomData;

/// `enable_chain_position_assert` in device memory (`i32 [1]`), so that a captured graph picks
/// up a flip (0 during warm-up and capture, 1 afterwards) without being captured again.
pub struct ChainAssertFlag {
    pub(crate) flag: DeviceScalar<i32>,
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

/// One real-KV source in device memory: a byte view `[num_rows, row_bytes]` with a row stride
/// and a page size, over memory the crate or the engine owns, validated once by the rules of
/// [`RealKvSource`](crate::RealKvSource) (spec §2.10), and on the device also the base rule
/// the spec assumes: the first row's address is a multiple of 16 (the kernels' 128-bit loads).
///
/// Layouts of engine KV pools:
/// * a paged pool `[pages, page_size, heads, head_dim]` is one source with `page_size` tokens a
///   row: `RowLayout { num_rows: pages, row_bytes: page_size x token_bytes, row_stride_bytes:
///   row_bytes }` and `RealKvParams::new(page_size, token_bytes, read_bytes)`;
/// * separate K and V pools are two sources (each over its own memory, or at two byte offsets
///   of one allocation, [`at`](Self::at));
/// * a latent (MLA) pool is one source, serving the K half only;
/// * a paged engine's K or V cache in vLLM's layouts (or FlashInfer's HND), whose tokens are not
///   strips, is one source each: [`paged`](Self::paged), folded by the same logical bytes as
///   on the host ([`TokenLayout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRealKvSource<'a> {
    /// The device address of row 0.
    base: u64,
    num_rows: usize,
    row_bytes: usize,
    row_stride: usize,
    page_size: usize,
    num_bytes_per_token: usize,
    read_bytes: usize,
    token: TokenLayout,
    memory: PhantomData<&'a [u8]>,
}

impl<'a> DeviceRealKvSource<'a> {
    /// A source over `bytes` (a crate [`DeviceArray`](crate::cuda::DeviceArray), a view of the engine's memory included,
    /// or a `cust` `DeviceBuffer`) laid out as `layout` from its first byte, checked like
    /// [`RealKvSource::strided`](crate::RealKvSource::strided).
    pub fn new<B: ViewableSlice<u8> + ?Sized>(
        bytes: &'a B,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        Self::at(bytes, 0, layout, params)
    }

    /// A source whose row 0 starts `byte_offset` bytes into `bytes` (a layer's or the V half's
    /// place in a larger allocation); the rows must fit in the bytes after the offset. An
    /// offset past the end is [`Error::RealKvShape`]; a row 0 whose address is not a multiple
    /// of 16 is [`Error::DeviceView`].
    pub fn at<B: ViewableSlice<u8> + ?Sized>(
        bytes: &'a B,
        byte_offset: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        let len = bytes.len();
        let Some(rest) = len.checked_sub(byte_offset) else {
            return Err(Error::RealKvShape {
                shape: vec![len],
                detail: format!("byte offset {byte_offset} is past the {len} bytes given"),
            });
        };
        Self::validated(
            bytes.device_addr() + byte_offset as u64,
            rest,
            layout,
            params,
        )
    }

    /// A source over `byte_len` bytes of engine memory at device address `addr` (row 0 at
    /// `addr`), laid out as `layout`. Checked like [`new`](Self::new), and the range must lie
    /// inside one allocation as far as the driver knows (`cuMemGetAddressRange`): a null or
    /// unaligned address or a range past its allocation is [`Error::DeviceView`].
    ///
    /// # Safety
    ///
    /// `[addr, addr + byte_len)` is device memory of one live allocation in `gpu`'s context (or
    /// one its device can read), and it stays allocated for `'a` and while any launch or graph
    /// that used this source can run. The kernels only read it.
    pub unsafe fn from_raw(
        gpu: &Gpu,
        addr: u64,
        byte_len: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        let source = Self::validated(addr, byte_len, layout, params)?;
        check_in_allocation(
            gpu.context(),
            REAL_KV_VIEW,
            addr,
            byte_len,
            1,
            byte_len as u64,
        )?;
        Ok(source)
    }

    /// The rules of a source whose row 0 is at `base`, within `len` bytes.
    fn validated(
        base: u64,
        len: usize,
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        check_view_bytes(REAL_KV_VIEW, base, len, 1, REAL_KV_ALIGN)?;
        let (page_size, num_bytes_per_token, read_bytes) = check_layout(len, layout, params)?;
        Ok(DeviceRealKvSource {
            base,
            num_rows: layout.num_rows,
            row_bytes: layout.row_bytes,
            row_stride: layout.row_stride_bytes,
            page_size,
            num_bytes_per_token,
            read_bytes,
            token: TokenLayout::Strip,
            memory: PhantomData,
        })
    }

    /// A paged engine's cache of `num_blocks` blocks of `shape`, its tokens' bytes where
    /// `layout` says ([`TokenLayout::vllm_k`], [`TokenLayout::vllm_v`], [`TokenLayout::hnd`]):
    /// the twin of [`RealKvSource::paged`](crate::RealKvSource::paged), with the same
    /// fingerprints (canary slot `s` is token `s % block_size` of block `s / block_size`).
    pub fn paged<B: ViewableSlice<u8> + ?Sized>(
        bytes: &'a B,
        num_blocks: usize,
        layout: TokenLayout,
        shape: PagedShape,
        read_bytes: usize,
    ) -> Result<Self, Error> {
        let rows = RowLayout::dense(num_blocks, shape.block_bytes());
        let params = RealKvParams::from_sizes(shape.block_size, shape.token_bytes(), read_bytes);
        Self::new(bytes, rows, params)?.with_token_layout(layout)
    }

    /// The same source with its tokens' bytes where `layout` says (the host's
    /// [`RealKvSource::with_token_layout`](crate::RealKvSource::with_token_layout) rules), and on
    /// the device also: every gathered element aligned to its size (the strides multiples of
    /// the element bytes), else [`Error::RealKvSource`].
    pub fn with_token_layout(self, layout: TokenLayout) -> Result<Self, Error> {
        layout.check_row(self.page_size, self.num_bytes_per_token, self.row_bytes)?;
        if let TokenLayout::Pieces(p) = layout {
            let strides = [
                ("token_stride", p.token_stride),
                ("piece_stride", p.piece_stride),
                ("group_stride", p.group_stride),
                ("element_stride", p.element_stride),
                ("row stride", self.row_stride),
            ];
            if let Some((what, value)) = strides.into_iter().find(|(_, v)| v % p.element_bytes != 0)
            {
                return Err(Error::RealKvSource {
                    what,
                    value: value as i128,
                    rule: "a multiple of element_bytes on the device (aligned element loads)",
                });
            }
        }
        Ok(DeviceRealKvSource {
            token: layout,
            ..self
        })
    }

    /// Where a token's bytes lie in its row.
    pub fn token_layout(&self) -> TokenLayout {
        self.token
    }

    /// Rows.
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// The device address of row 0.
    pub fn base_addr(&self) -> u64 {
        self.base
    }
}

/// What a real-KV source's view errors name.
const REAL_KV_VIEW: &str = "real-KV source";
/// The alignment of a real-KV source's row 0 (the kernels' 128-bit loads).
const REAL_KV_ALIGN: usize = 16;

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

    /// Whether a source in use is gathered (not a strip): the kernels that copy whole strips
    /// are not picked for it.
    pub(crate) fn gathered(&self) -> bool {
        self.sources
            .iter()
            .take(self.len)
            .flatten()
            .any(|s| s.token != TokenLayout::Strip)
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
                a.base[k] = DevPtr::from_addr(s.base);
                a.row_stride[k] = s.row_stride as i64;
                a.num_rows[k] = s.num_rows as i64;
                a.page_size[k] = s.page_size as i64;
                a.bytes_per_token[k] = s.num_bytes_per_token as i64;
                a.read_bytes[k] = s.read_bytes as i64;
                a.token_stride[k] = s.num_bytes_per_token as i64;
                if let TokenLayout::Pieces(p) = s.token {
                    // Offsets checked to fit an int32 (TokenLayout::check_row); a group larger
                    // than the token's pieces is the same layout as one of exactly its pieces.
                    let pieces = (s.num_bytes_per_token / 16).max(1);
                    a.token_stride[k] = p.token_stride as i64;
                    a.gather_bytes[k] = p.element_bytes as i64;
                    a.pieces_per_group[k] = p.per_group.min(pieces) as i64;
                    a.piece_stride[k] = p.piece_stride as i64;
                    a.group_stride[k] = p.group_stride as i64;
                    a.gather_stride[k] = p.element_stride as i64;
                }
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
    /// A write launch queued right behind this crate's verify launches, with nothing of the
    /// engine's between (the step API's tail stage): its decode-sized requests may load, fold
    /// and chain before waiting for them (`WriteArgs::early_fold`). Set by the step API, or by
    /// [`DeviceSettings::following_verify`].
    pub(crate) follows_verify: bool,
    /// A verify launch queued after this crate's launches of the step's head stage (the head
    /// verify and write, on the same queue as the plan and this launch; the step API's tail
    /// verify): the plan was complete before this launch could start, so the PARTIAL verify
    /// loads its first plan columns before waiting for the launch ahead
    /// (`VerifyArgs::early_columns`). Set by the step API, or by
    /// [`DeviceSettings::following_head_stage`].
    pub(crate) follows_head_stage: bool,
}

impl DeviceSettings<'static> {
    /// Tag `tag`, no fingerprint, chain-position assert fixed on.
    pub const fn new(tag: LaunchTag) -> Self {
        DeviceSettings {
            tag,
            real_kv: DeviceRealKv::NONE,
            chain_position_assert: ChainAssert::Fixed(ChainPositionAssert::ON),
            follows_verify: false,
            follows_head_stage: false,
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
            follows_verify: self.follows_verify,
            follows_head_stage: self.follows_head_stage,
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
            follows_verify: self.follows_verify,
            follows_head_stage: self.follows_head_stage,
        }
    }

    /// The same write launch, marked as queued right behind this crate's verify launches of
    /// the same stage ([`verify`](crate::cuda::verify) or [`verify_pair`](crate::cuda::verify_pair)
    /// on the same queue, and perhaps the other half's write, nothing of the engine's between;
    /// the step API's tail stage marks its writes so itself). On compute capability 9.0 and
    /// later with overlapped launches, such a write does the reading half of its decode-sized
    /// requests (at most 32 entries: the plan's offsets and seeds, the inputs, the seed
    /// records, the real-KV bytes, the folds and the chain) while the launch ahead still runs,
    /// and only its stores, counters and violation rows after it: verify launches write no
    /// canary record, no KV byte, no plan and no input, the other half's write only its own
    /// buffer, and what the kernels before them wrote (the forward pass's KV bytes, the plan,
    /// the head writes) was complete before the first of them started. Mark nothing else:
    /// behind another kernel the write could read records, KV bytes or inputs that kernel is
    /// still writing (every read stays bounds-checked, but the chain or the fingerprint would be
    /// wrong); that includes a head verify made in one launch with the plan
    /// ([`plan_verify_head`](crate::cuda::plan_verify_head)), which writes the write plan.
    /// Verify launches ignore it.
    pub fn following_verify(self) -> Self {
        DeviceSettings {
            follows_verify: true,
            ..self
        }
    }

    /// The same verify launch, marked as queued after this crate's launches of the step's head
    /// stage: after the plan launch that wrote its plan, at least one of this crate's verify or
    /// write launches on the same queue, and nothing that writes the plan (the step API's tail
    /// verify marks its launches so itself). On compute capability 9.0 and later with
    /// overlapped launches, the PARTIAL verify then loads its first round of plan columns (and
    /// the plan's `enable` and `verify_num_valid`) while the launch ahead still runs, and
    /// everything else (records, real-KV bytes, counters, rows) after it: a launch can start
    /// early only once the launch ahead has passed its own wait, which this crate's launches
    /// do before anything else, so the plan launch before them has completed. Mark nothing
    /// else: right behind the plan launch the verify would read columns still being written.
    /// Write launches ignore it.
    pub fn following_head_stage(self) -> Self {
        DeviceSettings {
            follows_head_stage: true,
            ..self
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::cuda::driver::array::DeviceArray;
    use crate::cuda::Stream;

    #[test]
    fn only_a_write_marked_behind_its_verify_folds_early() {
        let plain = DeviceSettings::new(LaunchTag::TailKFull);
        assert!(
            !plain.follows_verify,
            "a new launch waits for the launch ahead"
        );
        let marked = plain.following_verify();
        assert!(marked.follows_verify);
        // The builders keep the mark, and the tag.
        let kept = marked
            .with_real_kv(DeviceRealKv::NONE)
            .with_chain_position_assert(ChainPositionAssert::OFF);
        assert!(kept.follows_verify && kept.tag == LaunchTag::TailKFull);
        // The step API's hook marks its tail writes; its settings start unmarked.
        let from_step = <Stream as Backend>::settings(
            LaunchTag::TailVFull,
            DeviceRealKv::NONE,
            ChainPositionAssert::ON,
        );
        assert!(!from_step.follows_verify);
        assert!(<Stream as Backend>::after_own_verify(from_step).follows_verify);
    }

    #[test]
    fn only_a_verify_marked_behind_the_head_stage_loads_columns_early() {
        let plain = DeviceSettings::new(LaunchTag::TailKFull);
        assert!(!plain.follows_head_stage);
        let marked = plain.following_head_stage();
        assert!(marked.follows_head_stage && !marked.follows_verify);
        let kept = marked
            .with_real_kv(DeviceRealKv::NONE)
            .with_chain_position_assert(ChainPositionAssert::OFF)
            .following_verify();
        assert!(kept.follows_head_stage && kept.tag == LaunchTag::TailKFull);
        let from_step = <Stream as Backend>::settings(
            LaunchTag::TailVFull,
            DeviceRealKv::NONE,
            ChainPositionAssert::ON,
        );
        assert!(!from_step.follows_head_stage);
        assert!(<Stream as Backend>::after_own_head_stage(from_step).follows_head_stage);
    }

    /// A view at a made-up address that no test dereferences (only the host-side checks run).
    fn fake_view(addr: u64, len: usize) -> DeviceArray<u8> {
        // SAFETY: the view is only measured by the constructors under test, never passed to
        // the driver or a kernel.
        unsafe { DeviceArray::view(addr, len) }
    }

    const PAGED: RowLayout = RowLayout {
        num_rows: 4,
        row_bytes: 16 * 64,
        row_stride_bytes: 16 * 64,
    };
    const PARAMS: RealKvParams = RealKvParams::new(16, 64, 32);

    #[test]
    fn sources_at_a_byte_offset_are_checked_against_the_rest() {
        let pool = fake_view(0x10_0000, 2 * 4 * 16 * 64);
        // K at 0, V at the second half: both fit.
        let k = DeviceRealKvSource::at(&pool, 0, PAGED, PARAMS).unwrap();
        let v = DeviceRealKvSource::at(&pool, 4 * 16 * 64, PAGED, PARAMS).unwrap();
        assert_eq!(v.base_addr() - k.base_addr(), 4 * 16 * 64);
        assert_eq!(k.num_rows(), 4);
        // One byte further and V's last row runs past the allocation's end.
        let e = DeviceRealKvSource::at(&pool, 4 * 16 * 64 + 16, PAGED, PARAMS).unwrap_err();
        assert!(
            matches!(e, Error::RealKvShape { .. }) && e.to_string().contains("4080 bytes given"),
            "{e}"
        );
        // An offset past the end names it and the length.
        let e = DeviceRealKvSource::at(&pool, 1 << 20, PAGED, PARAMS).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kv-canary: RealKvSource.tensor has shape [8192]: byte offset 1048576 is past the 8192 bytes given"
        );
    }

    #[test]
    fn sources_whose_row_zero_is_not_16_byte_aligned_are_rejected() {
        let pool = fake_view(0x10_0000, 8192);
        let e = DeviceRealKvSource::at(&pool, 8, PAGED, PARAMS).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kv-canary: the device view of real-KV source at 0x100008 (8184 elements of 1 bytes) is not aligned to 16 bytes"
        );
        let odd = fake_view(0x10_0004, 8192);
        assert!(matches!(
            DeviceRealKvSource::new(&odd, PAGED, PARAMS),
            Err(Error::DeviceView {
                addr: 0x10_0004,
                ..
            })
        ));
        let null = fake_view(0, 8192);
        let e = DeviceRealKvSource::new(&null, PAGED, PARAMS).unwrap_err();
        assert!(e.to_string().ends_with("is a null address"), "{e}");
    }

    #[test]
    fn sources_keep_the_host_rules() {
        let pool = fake_view(0x10_0000, 8192);
        // A page of 16 tokens of 64 bytes needs rows of 1024 bytes.
        let narrow = RowLayout {
            num_rows: 4,
            row_bytes: 512,
            row_stride_bytes: 1024,
        };
        assert!(matches!(
            DeviceRealKvSource::new(&pool, narrow, PARAMS),
            Err(Error::RealKvRowTooNarrow {
                row_bytes: 512,
                page_size: 16,
                num_bytes_per_token: 64
            })
        ));
        let unaligned_stride = RowLayout {
            row_stride_bytes: 1032,
            ..PAGED
        };
        assert!(matches!(
            DeviceRealKvSource::new(&pool, unaligned_stride, PARAMS),
            Err(Error::RealKvSource { value: 1032, .. })
        ));
    }
}
