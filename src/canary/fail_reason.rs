//! [`FailReason`]: the bit flags of field 7 of a violation row (spec §2.9).

use core::fmt;

bitflags::bitflags! {
    /// A set of failure reasons, stored as SGLang's bit pattern (field 7, `fail_reason_bits`).
    ///
    /// Bits unknown to this crate are kept (see [`FailReason::from_bits_retain`]) so that a row
    /// read back from a device or a dump round-trips unchanged. The bit values are mirrored by
    /// `kernels/common.cuh`; they are SGLang's and never change.
    #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct FailReason: i64 {
        /// `1 << 0`: the stored prev hash is not the hash of the predecessor slot.
        const VERIFY_CHAIN_HASH_MISMATCH = 1;
        /// `1 << 1`: the stored position is not the plan's expected position.
        const VERIFY_POSITION_MISMATCH = 1 << 1;
        /// `1 << 2`: the real KV bytes of the slot no longer hash to the stored fingerprint.
        const VERIFY_REAL_KV_HASH_MISMATCH = 1 << 2;
        /// `1 << 3`: the written token differs from the expected input token (write input
        /// assert).
        const WRITE_TOKEN_MISMATCH = 1 << 3;
        /// `1 << 4`: the written position differs from the expected one (input or chain assert).
        const WRITE_POSITION_MISMATCH = 1 << 4;
        /// `1 << 5`: the stored token differs from the expected-token pool's.
        const VERIFY_TOKEN_MISMATCH = 1 << 5;
    }
}

impl FailReason {
    /// No reason (an empty set).
    pub const NONE: FailReason = FailReason::empty();

    /// Every named bit (`0b11_1111`).
    pub const ALL: FailReason = FailReason::all();

    /// `self` with `other`'s bits set when `on` holds (branch-free, for the ops' hot loops).
    #[inline(always)]
    pub const fn with_if(self, other: FailReason, on: bool) -> FailReason {
        FailReason::from_bits_retain(self.bits() | (other.bits() * on as i64))
    }
}

/// `VERIFY_TOKEN_MISMATCH | VERIFY_POSITION_MISMATCH` in bit order; unknown bits as a hex
/// remainder (bitflags' text format); `NONE` for the empty set.
impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        bitflags::parser::to_writer(self, f)
    }
}

/// `FailReason(VERIFY_POSITION_MISMATCH)`, `FailReason(NONE)`: the [`Display`](fmt::Display)
/// form (bitflags' own `Debug` would print the empty set as `0x0`).
impl fmt::Debug for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailReason({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_values_are_exact() {
        let named: Vec<(&str, i64)> = FailReason::all()
            .iter_names()
            .map(|(name, f)| (name, f.bits()))
            .collect();
        assert_eq!(
            named,
            [
                ("VERIFY_CHAIN_HASH_MISMATCH", 1),
                ("VERIFY_POSITION_MISMATCH", 2),
                ("VERIFY_REAL_KV_HASH_MISMATCH", 4),
                ("WRITE_TOKEN_MISMATCH", 8),
                ("WRITE_POSITION_MISMATCH", 16),
                ("VERIFY_TOKEN_MISMATCH", 32),
            ]
        );
        assert_eq!(FailReason::ALL.bits(), 0b11_1111);
        assert_eq!(format!("{:?}", FailReason::NONE), "FailReason(NONE)");
        assert_eq!(
            format!("{:?}", FailReason::VERIFY_TOKEN_MISMATCH),
            "FailReason(VERIFY_TOKEN_MISMATCH)"
        );
    }

    #[test]
    fn display_names_every_bit() {
        let r = FailReason::VERIFY_TOKEN_MISMATCH | FailReason::VERIFY_POSITION_MISMATCH;
        assert_eq!(r.bits(), 34);
        assert_eq!(
            r.to_string(),
            "VERIFY_POSITION_MISMATCH | VERIFY_TOKEN_MISMATCH"
        );
        assert_eq!(FailReason::NONE.to_string(), "NONE");
        assert_eq!(
            FailReason::from_bits_retain(0x41).to_string(),
            "VERIFY_CHAIN_HASH_MISMATCH | 0x40"
        );
    }

    #[test]
    fn from_bits_rejects_unknown_bits() {
        assert_eq!(FailReason::from_bits(35).map(|f| f.bits()), Some(35));
        assert_eq!(FailReason::from_bits(64), None);
        assert!(FailReason::from_bits(34)
            .unwrap()
            .contains(FailReason::VERIFY_POSITION_MISMATCH));
        assert!(!FailReason::VERIFY_CHAIN_HASH_MISMATCH
            .intersects(FailReason::VERIFY_REAL_KV_HASH_MISMATCH));
        assert_eq!(
            FailReason::NONE
                .with_if(FailReason::WRITE_TOKEN_MISMATCH, true)
                .with_if(FailReason::WRITE_POSITION_MISMATCH, false),
            FailReason::WRITE_TOKEN_MISMATCH
        );
    }
}
