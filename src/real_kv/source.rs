//! [`RealKvSource`]: one piece of real KV memory to fingerprint, validated once (spec §2.10).

use super::token_layout::{PagedShape, TokenLayout};
use super::HASH_BLOCK;
#[cfg(test)]
use crate::hash::fold_words;
use crate::hash::splitmix64;
use crate::Error;

/// The three per-source parameters of spec §2.10, as the engine states them (signed, so that a
/// bad value can be reported as given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RealKvParams {
    /// Tokens per row of the tensor (>= 1).
    pub page_size: i64,
    /// Bytes of one token's strip within a row (> 0, a multiple of 16).
    pub num_bytes_per_token: i64,
    /// Leading bytes of each strip hashed in ALL mode (> 0, a multiple of 16,
    /// <= `num_bytes_per_token`).
    pub read_bytes: i64,
}

impl RealKvParams {
    /// The three parameters.
    pub const fn new(page_size: i64, num_bytes_per_token: i64, read_bytes: i64) -> Self {
        RealKvParams {
            page_size,
            num_bytes_per_token,
            read_bytes,
        }
    }

    /// The three parameters from sizes, as an engine's tensor shapes give them (the same units
    /// as [`RowLayout`]'s), without casts at the call site. A size past `i64::MAX` becomes
    /// `i64::MAX`, which every source constructor refuses (the CUDA ABI passes these as int32).
    ///
    /// ```
    /// use kv_canary::{RealKvParams, RowLayout};
    /// // A paged pool: pages of 16 tokens of 8 heads x 128 x 2 bytes; fold the first 256 bytes.
    /// let (page, token_bytes) = (16usize, 8 * 128 * 2);
    /// let params = RealKvParams::from_sizes(page, token_bytes, 256);
    /// assert_eq!(params, RealKvParams::new(16, 2048, 256));
    /// let layout = RowLayout::dense(1024, page * token_bytes);
    /// assert_eq!(layout.row_stride_bytes, 16 * 2048);
    /// ```
    pub const fn from_sizes(
        page_size: usize,
        num_bytes_per_token: usize,
        read_bytes: usize,
    ) -> Self {
        const fn signed(v: usize) -> i64 {
            if v > i64::MAX as usize {
                i64::MAX
            } else {
                v as i64
            }
        }
        RealKvParams::new(
            signed(page_size),
            signed(num_bytes_per_token),
            signed(read_bytes),
        )
    }
}

/// One real-KV source (spec §2.10): a 2-D byte view `[num_rows, row_bytes]` of KV memory with a
/// row stride, plus its page size, bytes per token and read bytes.
///
/// Canary slot `s` maps to row `s / page_size`, strip
/// `[(s % page_size) x num_bytes_per_token, +num_bytes_per_token)` of that row. Bytes of a row
/// past `page_size x num_bytes_per_token` ("holes") are never read.
///
/// Every rule is checked at construction: the parameters of [`RealKvParams`], the 16-byte rules
/// (bytes per token, read bytes and row stride are multiples of 16; the base address is assumed
/// aligned, as in SGLang), the row being wide enough for its page, and every value fitting the
/// CUDA ABI's `int32`. A slot whose row is past `num_rows` is rejected by the ops before anything
/// is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealKvSource<'a> {
    bytes: &'a [u8],
    num_rows: usize,
    row_bytes: usize,
    row_stride: usize,
    page_size: usize,
    num_bytes_per_token: usize,
    read_bytes: usize,
    /// Where a token's bytes lie in its row ([`TokenLayout::Strip`] unless set).
    token: TokenLayout,
}

/// How a source's rows lie in its byte slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowLayout {
    /// Rows in the view.
    pub num_rows: usize,
    /// Bytes per row that belong to the view (dim 1).
    pub row_bytes: usize,
    /// Bytes from one row's start to the next's (dim-0 stride; >= `row_bytes`).
    pub row_stride_bytes: usize,
}

impl RowLayout {
    /// `num_rows` rows of `row_bytes`, `row_stride_bytes` apart.
    pub const fn new(num_rows: usize, row_bytes: usize, row_stride_bytes: usize) -> Self {
        RowLayout {
            num_rows,
            row_bytes,
            row_stride_bytes,
        }
    }

    /// `num_rows` rows of `row_bytes`, one right after another (the stride is the row).
    pub const fn dense(num_rows: usize, row_bytes: usize) -> Self {
        RowLayout::new(num_rows, row_bytes, row_bytes)
    }
}

const ABI_INT32: &str = "at most i32::MAX (the CUDA ABI passes it as int32)";

impl<'a> RealKvSource<'a> {
    /// A dense source: `bytes` is `[num_rows, row_bytes]`, row after row.
    ///
    /// ```
    /// use kv_canary::{RealKvParams, RealKvSource};
    /// let kv = vec![0u8; 4 * 64];
    /// let src = RealKvSource::new(&kv, 64, RealKvParams::new(2, 32, 32))?;
    /// assert_eq!(src.num_rows(), 4);
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn new(bytes: &'a [u8], row_bytes: usize, params: RealKvParams) -> Result<Self, Error> {
        let num_rows = bytes.len().checked_div(row_bytes).unwrap_or(0);
        if row_bytes == 0 || num_rows * row_bytes != bytes.len() {
            return Err(Error::RealKvShape {
                shape: vec![bytes.len()],
                detail: format!(
                    "{} bytes do not form rows of {row_bytes} bytes",
                    bytes.len()
                ),
            });
        }
        let layout = RowLayout {
            num_rows,
            row_bytes,
            row_stride_bytes: row_bytes,
        };
        Self::strided(bytes, layout, params)
    }

    /// A source from a raw dump: `shape` must be 2-D `[num_rows, row_bytes]` and `bytes` hold
    /// exactly that many bytes.
    pub fn from_shape(
        bytes: &'a [u8],
        shape: &[usize],
        params: RealKvParams,
    ) -> Result<Self, Error> {
        check_params(params)?;
        let &[num_rows, row_bytes] = shape else {
            return Err(Error::RealKvShape {
                shape: shape.to_vec(),
                detail: "the tensor (viewed as bytes) must be 2-D".to_owned(),
            });
        };
        if num_rows.checked_mul(row_bytes) != Some(bytes.len()) {
            return Err(Error::RealKvShape {
                shape: shape.to_vec(),
                detail: format!("the shape does not match the {} bytes given", bytes.len()),
            });
        }
        let layout = RowLayout {
            num_rows,
            row_bytes,
            row_stride_bytes: row_bytes,
        };
        Self::strided(bytes, layout, params)
    }

    /// A source whose rows are `layout.row_stride_bytes` apart (a per-layer view into a larger
    /// buffer). `bytes` must reach the end of the last row.
    pub fn strided(
        bytes: &'a [u8],
        layout: RowLayout,
        params: RealKvParams,
    ) -> Result<Self, Error> {
        let (page_size, num_bytes_per_token, read_bytes) =
            check_layout(bytes.len(), layout, params)?;
        let RowLayout {
            num_rows,
            row_bytes,
            row_stride_bytes: stride,
        } = layout;
        Ok(RealKvSource {
            bytes,
            num_rows,
            row_bytes,
            row_stride: stride,
            page_size,
            num_bytes_per_token,
            read_bytes,
            token: TokenLayout::Strip,
        })
    }

    /// One layer's K or V cache of a paged engine: `bytes` holds `num_blocks` blocks of
    /// `shape.block_size` tokens, one after another, each token's bytes where `layout` says
    /// ([`TokenLayout::vllm_k`], [`TokenLayout::vllm_v`], [`TokenLayout::hnd`], or
    /// [`TokenLayout::Strip`] for MLA's latent rows). Canary slot `s` is token `s % block_size`
    /// of block `s / block_size` (vLLM's slot mapping); ALL folds the first `read_bytes` of its
    /// logical bytes (`shape.token_bytes()` to cover the whole vector), PARTIAL the first 16.
    ///
    /// ```
    /// use kv_canary::{PagedShape, RealKvSource, TokenLayout};
    /// let shape = PagedShape::new(2, 64, 2, 16); // 2 heads of 64 bf16, blocks of 16
    /// let cache = vec![0u8; 4 * shape.block_bytes()];
    /// let k = RealKvSource::paged(&cache, 4, TokenLayout::vllm_k(shape)?, shape, shape.token_bytes())?;
    /// assert_eq!(k.num_slots(), 64);
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn paged(
        bytes: &'a [u8],
        num_blocks: usize,
        layout: TokenLayout,
        shape: PagedShape,
        read_bytes: usize,
    ) -> Result<Self, Error> {
        let rows = RowLayout::dense(num_blocks, shape.block_bytes());
        let params = RealKvParams::from_sizes(shape.block_size, shape.token_bytes(), read_bytes);
        Self::strided(bytes, rows, params)?.with_token_layout(layout)
    }

    /// The same source with its tokens' bytes where `layout` says (each row a block of
    /// `page_size` tokens of `num_bytes_per_token` logical bytes); a layout that reaches past a
    /// row is [`Error::RealKvShape`].
    pub fn with_token_layout(self, layout: TokenLayout) -> Result<Self, Error> {
        layout.check_row(self.page_size, self.num_bytes_per_token, self.row_bytes)?;
        Ok(RealKvSource {
            token: layout,
            ..self
        })
    }

    /// Where a token's bytes lie in its row.
    pub fn token_layout(&self) -> TokenLayout {
        self.token
    }

    /// The offset in [`bytes`](Self::bytes) of slot `s`'s first logical byte (the byte its
    /// PARTIAL fingerprint starts with), or `None` for a slot past the source's rows: where a
    /// fault-injection hook flips it.
    pub fn first_byte(&self, s: i64) -> Option<usize> {
        let s = usize::try_from(s).ok().filter(|&s| self.covers(s))?;
        let row = (s / self.page_size) * self.row_stride;
        Some(
            row + self
                .token
                .offset(self.num_bytes_per_token, s % self.page_size, 0, 0),
        )
    }

    /// An empty stand-in that is never read (the CUDA ABI's unused-source dummy).
    pub(crate) const fn unused() -> RealKvSource<'static> {
        RealKvSource {
            bytes: &[],
            num_rows: 0,
            row_bytes: 0,
            row_stride: 0,
            page_size: 1,
            num_bytes_per_token: 16,
            read_bytes: 16,
            token: TokenLayout::Strip,
        }
    }

    /// Rows in the view.
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }
    /// Bytes per row (dim 1).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }
    /// Bytes between row starts.
    pub fn row_stride_bytes(&self) -> usize {
        self.row_stride
    }
    /// Tokens per row.
    pub fn page_size(&self) -> usize {
        self.page_size
    }
    /// Bytes of one token's strip.
    pub fn num_bytes_per_token(&self) -> usize {
        self.num_bytes_per_token
    }
    /// Leading strip bytes hashed in ALL mode.
    pub fn read_bytes(&self) -> usize {
        self.read_bytes
    }
    /// The bytes of the view.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// The number of canary slots this source covers: `num_rows x page_size`.
    pub fn num_slots(&self) -> usize {
        self.num_rows.saturating_mul(self.page_size)
    }

    /// Whether slot `s` (non-negative) lies in a row of this source: `s / page_size < num_rows`,
    /// computed without a division (`num_slots` saturates, and `s` fits an `i64`).
    #[inline]
    pub(crate) fn covers(&self, s: usize) -> bool {
        s < self.num_slots()
    }

    /// Where slot `s`'s strip starts in `bytes`.
    #[inline]
    fn strip_start(&self, s: usize) -> usize {
        (s / self.page_size) * self.row_stride + (s % self.page_size) * self.num_bytes_per_token
    }

    /// The fold of the first `n` bytes of slot `s`'s strip (`n` is 16 or `read_bytes`);
    /// `covers(s)` holds.
    #[cfg(test)]
    pub(crate) fn strip_hash(&self, s: usize, n: usize) -> u64 {
        let at = self.strip_start(s);
        fold_words(&self.bytes[at..at + n])
    }

    /// `out[j]` = the fold of the first `n` bytes of slot `slots[j]`'s strip, for at most
    /// [`HASH_BLOCK`] slots, each covered; `n` is 16 or `read_bytes` (a multiple of 16).
    ///
    /// The strips are folded in lockstep (word `w` of every strip before word `w + 1` of any):
    /// the same values as [`fold_words`] per strip, but the loads of all the strips are in flight
    /// together and the independent chains keep the multiplier busy.
    #[inline]
    pub(crate) fn fold_strips(&self, slots: &[usize], n: usize, out: &mut [u64]) {
        debug_assert!(n.is_multiple_of(8) && slots.len() <= HASH_BLOCK);
        if self.token != TokenLayout::Strip {
            // Gathered pieces: a token's logical bytes, 16 at a time (module token_layout).
            for (h, &s) in out.iter_mut().zip(slots) {
                let row = (s / self.page_size) * self.row_stride;
                let at = s % self.page_size;
                *h = 0;
                for j in 0..n / 16 {
                    let piece = self
                        .token
                        .piece(self.bytes, row, self.num_bytes_per_token, at, j);
                    for word in piece.chunks_exact(8) {
                        let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                        *h = splitmix64(*h ^ word);
                    }
                }
            }
            return;
        }
        let mut strips: [&[u8]; HASH_BLOCK] = [&[]; HASH_BLOCK];
        for (strip, &s) in strips.iter_mut().zip(slots) {
            let at = self.strip_start(s);
            *strip = &self.bytes[at..at + n];
        }
        let (strips, out) = (&strips[..slots.len()], &mut out[..slots.len()]);
        out.fill(0);
        for w in (0..n).step_by(8) {
            for (h, strip) in out.iter_mut().zip(strips) {
                let mut word = [0u8; 8];
                word.copy_from_slice(&strip[w..w + 8]);
                *h = splitmix64(*h ^ u64::from_le_bytes(word));
            }
        }
    }
}

/// Checks a source's parameters and row layout against `len` bytes of memory (host or device);
/// returns `(page_size, num_bytes_per_token, read_bytes)`.
pub(crate) fn check_layout(
    len: usize,
    layout: RowLayout,
    params: RealKvParams,
) -> Result<(usize, usize, usize), Error> {
    let (page_size, num_bytes_per_token, read_bytes) = check_params(params)?;
    let RowLayout {
        num_rows,
        row_bytes,
        row_stride_bytes: stride,
    } = layout;
    if !stride.is_multiple_of(16) {
        return Err(Error::RealKvSource {
            what: "tensor row stride (bytes)",
            value: stride as i128,
            rule: "a multiple of 16",
        });
    }
    if stride > i32::MAX as usize {
        return Err(Error::RealKvSource {
            what: "tensor row stride (bytes)",
            value: stride as i128,
            rule: ABI_INT32,
        });
    }
    let needed = num_rows.checked_sub(1).map_or(Some(0), |last| {
        last.checked_mul(stride)?.checked_add(row_bytes)
    });
    if row_bytes > stride || needed.is_none_or(|n| n > len) {
        return Err(Error::RealKvShape {
            shape: vec![num_rows, row_bytes],
            detail: format!(
                "rows {stride} bytes apart do not fit in the {} bytes given",
                len
            ),
        });
    }
    if page_size
        .checked_mul(num_bytes_per_token)
        .is_none_or(|n| n > row_bytes)
    {
        return Err(Error::RealKvRowTooNarrow {
            row_bytes,
            page_size,
            num_bytes_per_token,
        });
    }
    Ok((page_size, num_bytes_per_token, read_bytes))
}

/// Checks the three parameters; returns them as `usize`.
fn check_params(p: RealKvParams) -> Result<(usize, usize, usize), Error> {
    let abi = |what, value: i64| {
        if value > i64::from(i32::MAX) {
            Err(Error::RealKvSource {
                what,
                value: value.into(),
                rule: ABI_INT32,
            })
        } else {
            Ok(value as usize)
        }
    };
    if p.page_size < 1 {
        return Err(Error::RealKvSource {
            what: "page_size",
            value: p.page_size.into(),
            rule: ">= 1",
        });
    }
    let page_size = abi("page_size", p.page_size)?;
    if p.num_bytes_per_token <= 0 || p.num_bytes_per_token % 16 != 0 {
        return Err(Error::RealKvSource {
            what: "num_bytes_per_token",
            value: p.num_bytes_per_token.into(),
            rule: "a positive multiple of 16",
        });
    }
    let nbpt = abi("num_bytes_per_token", p.num_bytes_per_token)?;
    if p.read_bytes <= 0 || p.read_bytes % 16 != 0 || p.read_bytes > p.num_bytes_per_token {
        return Err(Error::RealKvReadBytes {
            read_bytes: p.read_bytes,
            num_bytes_per_token: p.num_bytes_per_token,
        });
    }
    Ok((page_size, nbpt, p.read_bytes as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(page: i64, nbpt: i64, read: i64) -> RealKvParams {
        RealKvParams::new(page, nbpt, read)
    }

    #[test]
    fn golden_validation_messages_name_the_values() {
        let kv = vec![0u8; 4 * 64];
        let msg = |r: Result<RealKvSource<'_>, Error>| r.unwrap_err().to_string();
        assert_eq!(
            msg(RealKvSource::from_shape(&kv, &[4, 64], p(0, 32, 32))),
            "kv-canary: RealKvSource.page_size must be >= 1, got 0"
        );
        assert_eq!(
            msg(RealKvSource::from_shape(&kv, &[4, 64], p(-2, 32, 32))),
            "kv-canary: RealKvSource.page_size must be >= 1, got -2"
        );
        assert_eq!(
            msg(RealKvSource::from_shape(&kv, &[4, 64], p(1, 32, 24))),
            "kv-canary: RealKvSource.read_bytes must be a positive multiple of 16 in (0, num_bytes_per_token=32], got 24"
        );
        assert!(msg(RealKvSource::from_shape(&kv[..64], &[64], p(1, 32, 32))).contains("[64]"));
        let kv40 = vec![0u8; 4 * 40];
        assert_eq!(
            msg(RealKvSource::from_shape(&kv40, &[4, 40], p(1, 16, 16))),
            "kv-canary: RealKvSource.tensor row stride (bytes) must be a multiple of 16, got 40"
        );
    }

    #[test]
    fn sizes_convert_and_oversized_ones_are_refused_not_wrapped() {
        assert_eq!(RealKvParams::from_sizes(2, 32, 16), p(2, 32, 16));
        let huge = RealKvParams::from_sizes(usize::MAX, 32, 32);
        assert_eq!(huge.page_size, i64::MAX);
        let kv = vec![0u8; 4 * 64];
        let err = RealKvSource::strided(&kv, RowLayout::dense(4, 64), huge).unwrap_err();
        assert!(
            err.to_string().starts_with("kv-canary: ") && err.to_string().contains("page_size"),
            "{err}"
        );
        let ok = RealKvSource::strided(
            &kv,
            RowLayout::dense(4, 64),
            RealKvParams::from_sizes(2, 32, 32),
        )
        .unwrap();
        assert_eq!(
            (ok.num_rows(), ok.row_stride_bytes(), ok.page_size()),
            (4, 64, 2)
        );
        assert_eq!(RowLayout::new(4, 64, 128).row_stride_bytes, 128);
    }

    #[test]
    fn strides_past_i64_are_named_exactly() {
        let kv = vec![0u8; 64];
        let layout = |row_stride_bytes| RowLayout {
            num_rows: 1,
            row_bytes: 64,
            row_stride_bytes,
        };
        let msg = |stride| {
            RealKvSource::strided(&kv, layout(stride), p(1, 32, 32))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            msg(usize::MAX),
            format!(
                "kv-canary: RealKvSource.tensor row stride (bytes) must be a multiple of 16, got {}",
                usize::MAX
            )
        );
        assert_eq!(
            msg(usize::MAX - 15),
            format!(
                "kv-canary: RealKvSource.tensor row stride (bytes) must be at most i32::MAX (the CUDA ABI passes it as int32), got {}",
                usize::MAX - 15
            )
        );
    }

    #[test]
    fn other_rules() {
        let kv = vec![0u8; 4 * 64];
        let err = |r: Result<RealKvSource<'_>, Error>| r.unwrap_err();
        assert!(matches!(
            err(RealKvSource::new(&kv, 64, p(1, 24, 16))),
            Error::RealKvSource {
                what: "num_bytes_per_token",
                value: 24,
                ..
            }
        ));
        assert!(matches!(
            err(RealKvSource::new(&kv, 64, p(1, 32, 0))),
            Error::RealKvReadBytes { read_bytes: 0, .. }
        ));
        assert!(matches!(
            err(RealKvSource::new(&kv, 64, p(1, 32, 48))),
            Error::RealKvReadBytes {
                read_bytes: 48,
                num_bytes_per_token: 32
            }
        ));
        assert_eq!(
            err(RealKvSource::new(&kv, 64, p(4, 32, 32))).to_string(),
            "kv-canary: RealKvSource row is too narrow for its slot layout: a row holds 64 bytes but page_size=4 x num_bytes_per_token=32 needs 128"
        );
        assert!(
            RealKvSource::new(&kv, 48, p(1, 16, 16)).is_err(),
            "256 bytes are not rows of 48"
        );
        assert!(RealKvSource::new(&kv, 64, p(i64::from(i32::MAX) + 1, 16, 16)).is_err());
    }

    #[test]
    fn strided_views_skip_the_gap() {
        let mut kv = vec![0u8; 3 * 64];
        kv[64] = 1;
        let layout = RowLayout {
            num_rows: 3,
            row_bytes: 32,
            row_stride_bytes: 64,
        };
        let src = RealKvSource::strided(&kv, layout, p(1, 32, 16)).unwrap();
        assert_eq!(src.strip_hash(1, 16), fold_words(&kv[64..80]));
        assert_ne!(src.strip_hash(1, 16), src.strip_hash(0, 16));
        assert!(src.covers(2) && !src.covers(3));
        let short = RowLayout {
            num_rows: 4,
            ..layout
        };
        assert!(RealKvSource::strided(&kv, short, p(1, 32, 16)).is_err());
    }

    #[test]
    fn pages_map_slots_to_rows_and_strips() {
        let kv: Vec<u8> = (0..2 * 64).map(|i| i as u8).collect();
        let src = RealKvSource::new(&kv, 64, p(4, 16, 16)).unwrap();
        assert_eq!(src.num_slots(), 8);
        // slot 5: row 1, strip 1 -> bytes 64 + 16 .. 64 + 32
        assert_eq!(src.strip_hash(5, 16), fold_words(&kv[80..96]));
        assert!(src.covers(7) && !src.covers(8));
    }
}
