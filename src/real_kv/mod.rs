//! Real-KV fingerprints (spec §2.10, §2.11): which KV bytes back a canary slot, and how they are
//! folded into the slot's `real_kv_hash`.
//!
//! A launch hashes its [`RealKvSources`] (0 to 4, in fold order) under one [`RealKvHashMode`];
//! together they form a [`RealKv`]. Head launches use [`RealKv::NONE`]; tail launches fold.

mod digest;
mod source;
mod sources;
mod token_layout;

pub use digest::{LayoutSignature, TransferDigest, TRANSFER_DIGEST_VERSION};
#[cfg(feature = "cuda")]
pub(crate) use source::check_layout;
pub use source::{RealKvParams, RealKvSource, RowLayout};
pub use sources::{AtMostFourSources, RealKvSources, SourceCount};
pub use token_layout::{PagedShape, Pieces, TokenLayout};

use crate::hash::splitmix64;
use crate::Error;

/// The most slots [`RealKv::hash_block`] hashes in one call (the ops' block of entries).
pub(crate) const HASH_BLOCK: usize = 32;

/// How much of each source's per-slot strip is hashed (spec §2.11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum RealKvHashMode {
    /// 0: nothing is read; the hash is 0.
    #[default]
    None = 0,
    /// 1: exactly the first 16 bytes of each strip, whatever `read_bytes` says.
    Partial = 1,
    /// 2: the first `read_bytes` bytes of each strip.
    All = 2,
}

impl RealKvHashMode {
    /// The mode's value as the kernels take it.
    pub const fn value(self) -> i64 {
        self as i32 as i64
    }
}

impl TryFrom<i64> for RealKvHashMode {
    type Error = Error;
    /// 0, 1 or 2. SGLang's kernels treat any other value like ALL; here it is
    /// [`Error::InvalidEnumValue`].
    fn try_from(v: i64) -> Result<Self, Error> {
        match v {
            0 => Ok(RealKvHashMode::None),
            1 => Ok(RealKvHashMode::Partial),
            2 => Ok(RealKvHashMode::All),
            _ => Err(Error::InvalidEnumValue {
                what: "real_kv_hash_mode",
                value: v,
            }),
        }
    }
}

/// The real-KV part of a launch: a mode and the sources it applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RealKv<'a> {
    mode: RealKvHashMode,
    sources: RealKvSources<'a>,
}

impl<'a> RealKv<'a> {
    /// No fingerprint: every slot's expected `real_kv_hash` is 0 and no source is read.
    pub const NONE: RealKv<'static> = RealKv {
        mode: RealKvHashMode::None,
        sources: RealKvSources::EMPTY,
    };

    /// `sources` hashed under `mode`. With [`RealKvHashMode::None`] the sources are kept but
    /// never read (the hash is 0), as in SGLang.
    pub fn new(mode: RealKvHashMode, sources: RealKvSources<'a>) -> Self {
        RealKv { mode, sources }
    }

    /// One dense pool hashed under `mode`: `bytes` holds every slot's strip of `bytes_per_token`
    /// bytes, slot after slot (a page size of 1; in ALL mode the whole strip is hashed). The
    /// common layout of one K or V pool: [`RealKvSource::new`] with
    /// `RealKvParams::new(1, bytes_per_token, bytes_per_token)`, the only source. Errors as that
    /// constructor's: `bytes_per_token` a positive multiple of 16, `bytes` a whole number of
    /// strips, each value within the CUDA ABI's `int32`.
    pub fn dense(
        mode: RealKvHashMode,
        bytes: &'a [u8],
        bytes_per_token: usize,
    ) -> Result<Self, Error> {
        let n = i64::try_from(bytes_per_token).unwrap_or(i64::MAX);
        let source = RealKvSource::new(bytes, bytes_per_token, RealKvParams::new(1, n, n))?;
        Ok(RealKv::new(mode, RealKvSources::from_array([source])))
    }

    /// The mode.
    pub fn mode(&self) -> RealKvHashMode {
        self.mode
    }

    /// The sources.
    pub fn sources(&self) -> &RealKvSources<'a> {
        &self.sources
    }

    /// Whether any bytes are read: a mode other than NONE and at least one source.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.mode != RealKvHashMode::None && !self.sources.is_empty()
    }

    /// Checks that every source covers slot `s` (when active); otherwise
    /// [`Error::RealKvSlotOutOfRange`] naming the source and the row.
    #[inline]
    pub(crate) fn check_slot(&self, s: usize) -> Result<(), Error> {
        if !self.is_active() {
            return Ok(());
        }
        for (i, src) in self.sources.as_slice().iter().enumerate() {
            if !src.covers(s) {
                return Err(Error::RealKvSlotOutOfRange {
                    source: i,
                    slot: s as i64,
                    row: s / src.page_size(),
                    num_rows: src.num_rows(),
                });
            }
        }
        Ok(())
    }

    /// `real_kv_hash(s)` of spec §2.11 as stored (`i64`); `check_slot(s)` has passed.
    #[inline]
    pub fn hash(&self, s: usize) -> i64 {
        let mut out = [0];
        self.hash_block(&[s], &mut out);
        out[0]
    }

    /// `out[j] = hash(slots[j])` for at most [`HASH_BLOCK`] slots (`out` at least as long),
    /// `check_slot` having passed for each. All the slots' strips are folded in lockstep, so the
    /// ops hash a block of slots at memory-level parallelism rather than one slot at a time.
    #[inline]
    pub(crate) fn hash_block(&self, slots: &[usize], out: &mut [i64]) {
        let out = &mut out[..slots.len()];
        if !self.is_active() {
            out.fill(0);
            return;
        }
        let partial = self.mode == RealKvHashMode::Partial;
        let (mut acc, mut strip) = ([0u64; HASH_BLOCK], [0u64; HASH_BLOCK]);
        let acc = &mut acc[..slots.len()];
        for src in self.sources.as_slice() {
            let n = if partial { 16 } else { src.read_bytes() };
            src.fold_strips(slots, n, &mut strip);
            for (a, &h) in acc.iter_mut().zip(&strip) {
                *a = splitmix64(*a ^ h);
            }
        }
        for (o, &a) in out.iter_mut().zip(acc.iter()) {
            *o = a as i64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIP: [u8; 16] = [
        0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x81, 0x82, 0x84, 0x88, 0x90, 0xA0, 0xC0,
        0xFF,
    ];

    #[test]
    fn fold_vector_for_partial_and_all() {
        let src = RealKvSource::new(&STRIP, 16, RealKvParams::new(1, 16, 16)).unwrap();
        let sources = RealKvSources::from_array([src]);
        for mode in [RealKvHashMode::Partial, RealKvHashMode::All] {
            let rk = RealKv::new(mode, sources);
            rk.check_slot(0).unwrap();
            assert_eq!(rk.hash(0) as u64, 0x6041_5808_49E6_407D, "{mode:?}");
        }
        assert_eq!(RealKv::new(RealKvHashMode::None, sources).hash(0), 0);
    }

    #[test]
    fn a_dense_pool_is_one_source_of_one_token_a_row() {
        let bytes = [STRIP, STRIP, STRIP].concat();
        let dense = RealKv::dense(RealKvHashMode::All, &bytes, 16).unwrap();
        let src = RealKvSource::new(&bytes, 16, RealKvParams::new(1, 16, 16)).unwrap();
        let by_hand = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([src]));
        assert_eq!(dense, by_hand);
        assert_eq!(dense.hash(2), by_hand.hash(2));
        // The source's rules, with its errors: strips of a multiple of 16 bytes, whole strips.
        for (len, per_token) in [(48, 0), (48, 24), (40, 16)] {
            let err = RealKv::dense(RealKvHashMode::All, &bytes[..len], per_token).unwrap_err();
            assert!(err.to_string().starts_with("kv-canary: "), "{err}");
        }
    }

    /// Spec §2.11 written out for one slot: row `s / page`, strip `s % page`, fold, combine.
    fn spec_hash(mode: RealKvHashMode, sources: &[(&[u8], usize, RealKvParams)], s: usize) -> u64 {
        let mut acc = 0u64;
        for &(bytes, stride, p) in sources {
            let (page, nbpt) = (p.page_size as usize, p.num_bytes_per_token as usize);
            let n = match mode {
                RealKvHashMode::Partial => 16,
                _ => p.read_bytes as usize,
            };
            let at = (s / page) * stride + (s % page) * nbpt;
            acc = splitmix64(acc ^ crate::hash::fold_words(&bytes[at..at + n]));
        }
        acc
    }

    #[test]
    fn blocks_hash_every_slot_as_the_spec_does() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let bytes: Vec<u8> = (0..64 * 1024).map(|_| next(256) as u8).collect();
        // (page_size, num_bytes_per_token, read_bytes, row stride): paged, strided, mixed reads.
        let configs = [
            (1, 64, 64, 64),
            (4, 32, 16, 160),
            (2, 48, 32, 112),
            (8, 16, 16, 128),
        ];
        let sources: Vec<(&[u8], usize, RealKvParams)> = configs
            .iter()
            .enumerate()
            .map(|(k, &(page, nbpt, read, stride))| {
                let view = &bytes[k * 1000..k * 1000 + 256 * stride];
                (view, stride, RealKvParams::new(page, nbpt, read))
            })
            .collect();
        let built: Vec<RealKvSource<'_>> = sources
            .iter()
            .map(|&(view, stride, p)| {
                let layout = RowLayout {
                    num_rows: 256,
                    row_bytes: stride,
                    row_stride_bytes: stride,
                };
                RealKvSource::strided(view, layout, p).unwrap()
            })
            .collect();
        for mode in [RealKvHashMode::Partial, RealKvHashMode::All] {
            for count in 1..=4 {
                let rk = RealKv::new(
                    mode,
                    RealKvSources::try_from_slice(&built[..count]).unwrap(),
                );
                for len in [1, 2, 7, HASH_BLOCK] {
                    let slots: Vec<usize> = (0..len).map(|_| next(256)).collect();
                    let mut out = [0i64; HASH_BLOCK];
                    rk.hash_block(&slots, &mut out);
                    for (j, &s) in slots.iter().enumerate() {
                        rk.check_slot(s).unwrap();
                        let want = spec_hash(mode, &sources[..count], s);
                        assert_eq!(out[j] as u64, want, "{mode:?} {count} sources, slot {s}");
                        assert_eq!(rk.hash(s), out[j]);
                    }
                }
            }
        }
        let mut out = [7i64; 3];
        RealKv::new(RealKvHashMode::None, RealKvSources::from_array([built[0]]))
            .hash_block(&[1, 2], &mut out);
        assert_eq!(out, [0, 0, 7]);
    }

    #[test]
    fn partial_reads_only_the_first_16_bytes() {
        let mut kv = [0u8; 64];
        let params = RealKvParams::new(1, 64, 64);
        let before = {
            let src = RealKvSource::new(&kv, 64, params).unwrap();
            let all = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([src]));
            let part = RealKv::new(RealKvHashMode::Partial, RealKvSources::from_array([src]));
            (all.hash(0), part.hash(0))
        };
        kv[20] = 1;
        let src = RealKvSource::new(&kv, 64, params).unwrap();
        let all = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([src]));
        let part = RealKv::new(RealKvHashMode::Partial, RealKvSources::from_array([src]));
        assert_ne!(all.hash(0), before.0);
        assert_eq!(part.hash(0), before.1);
    }

    #[test]
    fn source_order_matters() {
        let a_bytes = [1u8; 16];
        let b_bytes = [2u8; 16];
        let p = RealKvParams::new(1, 16, 16);
        let a = RealKvSource::new(&a_bytes, 16, p).unwrap();
        let b = RealKvSource::new(&b_bytes, 16, p).unwrap();
        let ab = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([a, b]));
        let ba = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([b, a]));
        assert_ne!(ab.hash(0), ba.hash(0));
    }

    #[test]
    fn slots_past_a_source_are_errors_only_when_read() {
        let kv = [0u8; 32];
        let src = RealKvSource::new(&kv, 16, RealKvParams::new(1, 16, 16)).unwrap();
        let sources = RealKvSources::from_array([src]);
        let err = RealKv::new(RealKvHashMode::All, sources)
            .check_slot(2)
            .unwrap_err();
        assert_eq!(
            err,
            Error::RealKvSlotOutOfRange {
                source: 0,
                slot: 2,
                row: 2,
                num_rows: 2
            }
        );
        assert!(RealKv::new(RealKvHashMode::None, sources)
            .check_slot(2)
            .is_ok());
    }

    #[test]
    fn modes_round_trip() {
        for m in [
            RealKvHashMode::None,
            RealKvHashMode::Partial,
            RealKvHashMode::All,
        ] {
            assert_eq!(RealKvHashMode::try_from(m.value()).unwrap(), m);
        }
        assert!(RealKvHashMode::try_from(3).is_err());
    }
}
