//! [`TransferDigest`]: a relocation-invariant digest of a request's KV, for the boundaries where
//! an engine moves KV (offload to host memory and back, a prefill-to-decode transfer).
//!
//! The digest is keyed by the request's token positions, not by slots: the same KV bytes in other
//! blocks digest alike, so the two ends of a move compare digests whatever slots each used. It
//! carries a [`LayoutSignature`] (the token layout, the bytes a token, the bytes read, and the
//! digest's version): digests of different signatures are refused
//! ([`Error::TransferLayoutMismatch`]), never reported as corruption.

use super::source::RealKvSource;
use super::token_layout::TokenLayout;
use super::{RealKv, RealKvHashMode, RealKvSources};
use crate::hash::{mix3, splitmix64};
use crate::Error;

/// The digest's format version: digests of another version are refused.
pub const TRANSFER_DIGEST_VERSION: u32 = 1;

/// What a digest was computed over: the digests of two ends compare only when these agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayoutSignature {
    /// [`TRANSFER_DIGEST_VERSION`] of the end that made it.
    pub version: u32,
    /// Where a token's bytes lie in a block.
    pub layout: TokenLayout,
    /// A token's logical bytes.
    pub token_bytes: usize,
    /// The leading logical bytes of each token folded (ALL mode).
    pub read_bytes: usize,
}

/// A request's KV digest: its tokens' fingerprints (ALL mode over the source's `read_bytes`),
/// chained in position order with their positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransferDigest {
    /// What it was computed over.
    pub signature: LayoutSignature,
    /// The first token's position.
    pub first_position: i64,
    /// Tokens digested.
    pub tokens: usize,
    /// The digest.
    pub value: u64,
}

impl TransferDigest {
    /// The digest of the tokens at positions `first_position ..` whose KV lies in `slots` of
    /// `source` (`slots[i]` holds position `first_position + i`). A slot the source does not
    /// cover is [`Error::RealKvSlotOutOfRange`].
    ///
    /// ```
    /// use kv_canary::{PagedShape, RealKvSource, TokenLayout, TransferDigest};
    /// let shape = PagedShape::new(1, 16, 2, 4);
    /// let mut cache = vec![0u8; 4 * shape.block_bytes()];
    /// cache[..shape.block_bytes()].iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    /// let layout = TokenLayout::vllm_k(shape)?;
    /// let src = RealKvSource::paged(&cache, 4, layout, shape, shape.token_bytes())?;
    /// // Block 0's tokens, then the same bytes moved to block 2.
    /// let before = TransferDigest::of(&src, 0, &[0, 1, 2, 3])?;
    /// let (a, b) = cache.split_at_mut(2 * shape.block_bytes());
    /// b[..shape.block_bytes()].copy_from_slice(&a[..shape.block_bytes()]);
    /// let src = RealKvSource::paged(&cache, 4, layout, shape, shape.token_bytes())?;
    /// assert_eq!(before.verify(&TransferDigest::of(&src, 0, &[8, 9, 10, 11])?), Ok(true));
    /// # Ok::<(), kv_canary::Error>(())
    /// ```
    pub fn of(
        source: &RealKvSource<'_>,
        first_position: i64,
        slots: &[i64],
    ) -> Result<Self, Error> {
        let kv = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([*source]));
        let mut value = splitmix64(u64::from(TRANSFER_DIGEST_VERSION));
        for (i, &slot) in slots.iter().enumerate() {
            let s = usize::try_from(slot)
                .ok()
                .filter(|&s| source.covers(s))
                .ok_or(Error::RealKvSlotOutOfRange {
                    source: 0,
                    slot,
                    row: usize::try_from(slot).map_or(0, |s| s / source.page_size()),
                    num_rows: source.num_rows(),
                })?;
            let position = first_position.wrapping_add(i as i64) as u64;
            value = mix3(value, position, kv.hash(s) as u64);
        }
        Ok(TransferDigest {
            signature: LayoutSignature {
                version: TRANSFER_DIGEST_VERSION,
                layout: source.token_layout(),
                token_bytes: source.num_bytes_per_token(),
                read_bytes: source.read_bytes(),
            },
            first_position,
            tokens: slots.len(),
            value,
        })
    }

    /// Whether the KV `arrived` (the digest at the receiving end) is the KV this digest was made
    /// of: `Ok(false)` is corruption on the way. Digests of another [`LayoutSignature`], first
    /// position or token count are [`Error::TransferLayoutMismatch`]: a transfer between
    /// differing layouts is refused, never reported as corruption.
    pub fn verify(&self, arrived: &TransferDigest) -> Result<bool, Error> {
        let shape = |d: &TransferDigest| {
            format!(
                "{:?}, first position {}, {} tokens",
                d.signature, d.first_position, d.tokens
            )
        };
        if (self.signature, self.first_position, self.tokens)
            != (arrived.signature, arrived.first_position, arrived.tokens)
        {
            return Err(Error::TransferLayoutMismatch {
                sent: shape(self),
                arrived: shape(arrived),
            });
        }
        Ok(self.value == arrived.value)
    }
}
