//! The hash functions of spec §2.2, shared by every backend and every test.

use crate::consts::{CANARY_CHAIN_ANCHOR, CHAIN_HEAD_HASH};

static_assertions::const_assert_eq!(CHAIN_HEAD_HASH, splitmix64(CANARY_CHAIN_ANCHOR));

/// The SplitMix64 finaliser (spec §2.2), wrapping arithmetic.
#[inline(always)]
pub const fn splitmix64(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// `splitmix64_mix3(a, b, c)`: one chain step. Signed inputs are reinterpreted bit for bit.
#[inline(always)]
pub const fn mix3(a: u64, b: u64, c: u64) -> u64 {
    splitmix64(splitmix64(splitmix64(a) ^ b) ^ c)
}

/// The chain hash a slot holding `(token, position, prev_hash)` passes to its successor
/// (`compute_slot_hash` for `s >= 0`).
#[inline(always)]
pub const fn chain_step(prev_hash: i64, token: i64, position: i64) -> i64 {
    mix3(prev_hash as u64, token as u64, position as u64) as i64
}

/// The prev hash every chain head stores: `splitmix64(CANARY_CHAIN_ANCHOR)` as `i64`.
pub const CHAIN_HEAD: i64 = CHAIN_HEAD_HASH as i64;

/// Fold of one real-KV strip (spec §2.11): 8-byte little-endian words, `h = splitmix64(h ^ w)`.
/// `bytes.len()` is a multiple of 16 wherever the crate calls it; a trailing partial word is
/// zero-padded as in the reference.
#[inline]
pub fn fold_words(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut h = 0u64;
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = splitmix64(h ^ u64::from_le_bytes(w));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        h = splitmix64(h ^ u64::from_le_bytes(w));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_frozen_vectors() {
        for (input, out) in [
            (0x9E37_79B9_7F4A_7C15u64, 0xE220_A839_7B1D_CDAFu64),
            (0x0000_0000_0000_0001, 0x5692_161D_100B_05E5),
            (0xDEAD_BEEF_CAFE_BABE, 0x7AD6_664F_09FF_E52C),
            (0xFFFF_FFFF_FFFF_FFFF, 0xB4D0_55FC_F2CB_BD7B),
            (0x8000_0000_0000_0000, 0x25C2_6EA5_79CE_A98A),
            (0xC0FF_EE12_3456_7890, 0xDE7F_AE23_A9A1_B716),
        ] {
            assert_eq!(splitmix64(input), out, "splitmix64({input:#x})");
        }
        assert_eq!(CHAIN_HEAD, -2414019407054260458);
    }

    #[test]
    fn mix3_frozen_vectors() {
        assert_eq!(mix3(0xDE7F_AE23_A9A1_B716, 10, 0), 0xCD6D_3FC6_4AB6_8B75);
        assert_eq!(mix3(0xCD6D_3FC6_4AB6_8B75, 11, 1), 0x2C33_B2A1_3374_9990);
        assert_eq!(
            mix3(0xDE7F_AE23_A9A1_B716, u64::MAX, 0),
            0xE5A9_A054_04A7_20CF
        );
        assert_eq!(chain_step(CHAIN_HEAD, -1, 0) as u64, 0xE5A9_A054_04A7_20CF);
    }

    #[test]
    fn real_kv_fold_vector() {
        let strip = [
            0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x81, 0x82, 0x84, 0x88, 0x90, 0xA0,
            0xC0, 0xFF,
        ];
        let per_source = fold_words(&strip);
        assert_eq!(per_source, 0xF036_E30B_6961_C78D);
        assert_eq!(splitmix64(per_source), 0x6041_5808_49E6_407D);
    }

    #[test]
    fn a_partial_last_word_is_zero_padded() {
        let bytes: Vec<u8> = (1..=21).collect();
        let mut padded = bytes.clone();
        padded.resize(24, 0);
        let mut h = 0u64;
        for w in padded.chunks(8) {
            h = splitmix64(h ^ u64::from_le_bytes(w.try_into().unwrap()));
        }
        assert_eq!(fold_words(&bytes), h);
        assert_ne!(fold_words(&bytes), fold_words(&bytes[..16]));
        assert_eq!(fold_words(&[]), 0);
    }

    #[test]
    fn no_collisions_in_a_thousand_inputs() {
        let mut seen = std::collections::HashSet::new();
        let mut x = 0x1234_5678u64;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert!(seen.insert(splitmix64(x)));
        }
    }
}
