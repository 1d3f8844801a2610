//! Real-KV fingerprints of a block of op entries, hashed together.

use crate::input::IndexElement;
use crate::real_kv::{RealKv, HASH_BLOCK};

/// Entries per block of the write and verify ops: the ops gather a block's memory (records,
/// real-KV strips) before they use any of it, so many cache misses are in flight at once.
pub(super) const BLOCK: usize = HASH_BLOCK;

/// Writes `out[j]` = the real-KV fingerprint of slot `slots[j]` for every entry with `hashed(slots[j])`,
/// 0 for the others and for every entry when the launch has no active fingerprint. `slots` holds
/// at most [`BLOCK`] entries and every hashed slot has passed `RealKv::check_slot`.
#[inline]
pub(super) fn fingerprints<T: IndexElement>(
    real_kv: &RealKv<'_>,
    slots: &[T],
    hashed: impl Fn(i64) -> bool,
    out: &mut [i64; BLOCK],
) {
    if !real_kv.is_active() {
        out.fill(0);
        return;
    }
    let mut packed = [0usize; BLOCK];
    let mut n = 0;
    for &slot in slots {
        let slot = slot.as_i64();
        if hashed(slot) {
            packed[n] = slot as usize;
            n += 1;
        }
    }
    let mut hashes = [0i64; BLOCK];
    real_kv.hash_block(&packed[..n], &mut hashes);
    let mut k = 0;
    for (o, &slot) in out.iter_mut().zip(slots) {
        if hashed(slot.as_i64()) {
            *o = hashes[k];
            k += 1;
        }
    }
}
