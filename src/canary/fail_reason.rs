//! [`FailReason`]: the bit flags of field 7 of a violation row (spec §2.9).

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};

/// A set of failure reasons, stored as SGLang's bit pattern (field 7, `fail_reason_bits`).
///
/// Bits unknown to this crate are kept (see [`FailReason::from_bits_retain`]) so that a row read
/// back from a device or a dump round-trips unchanged.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FailReason(i64);

impl FailReason {
    /// No reason (an empty set).
    pub const NONE: FailReason = FailReason(0);
    /// `1 << 0`: the stored prev hash is not the hash of the predecessor slot.
    pub const VERIFY_CHAIN_HASH_MISMATCH: FailReason = FailReason(1);
    /// `1 << 1`: the stored position is not the plan's expected position.
    pub const VERIFY_POSITION_MISMATCH: FailReason = FailReason(1 << 1);
    /// `1 << 2`: the real KV bytes of the slot no longer hash to the stored fingerprint.
    pub const VERIFY_REAL_KV_HASH_MISMATCH: FailReason = FailReason(1 << 2);
    /// `1 << 3`: the written token differs from the expected input token (write input assert).
    pub const WRITE_TOKEN_MISMATCH: FailReason = FailReason(1 << 3);
    /// `1 << 4`: the written position differs from the expected one (input or chain assert).
    pub const WRITE_POSITION_MISMATCH: FailReason = FailReason(1 << 4);
    /// `1 << 5`: the stored token differs from the expected-token pool's.
    pub const VERIFY_TOKEN_MISMATCH: FailReason = FailReason(1 << 5);

    /// Every named flag with its SGLang name, in bit order.
    pub const NAMED: [(FailReason, &'static str); 6] = [
        (
            Self::VERIFY_CHAIN_HASH_MISMATCH,
            "VERIFY_CHAIN_HASH_MISMATCH",
        ),
        (Self::VERIFY_POSITION_MISMATCH, "VERIFY_POSITION_MISMATCH"),
        (
            Self::VERIFY_REAL_KV_HASH_MISMATCH,
            "VERIFY_REAL_KV_HASH_MISMATCH",
        ),
        (Self::WRITE_TOKEN_MISMATCH, "WRITE_TOKEN_MISMATCH"),
        (Self::WRITE_POSITION_MISMATCH, "WRITE_POSITION_MISMATCH"),
        (Self::VERIFY_TOKEN_MISMATCH, "VERIFY_TOKEN_MISMATCH"),
    ];

    /// Every named bit (`0b11_1111`).
    pub const ALL: FailReason = FailReason(0b11_1111);

    /// The raw bits, as stored in a violation row.
    pub const fn bits(self) -> i64 {
        self.0
    }

    /// The set of `bits`, if every bit is a named flag.
    pub const fn from_bits(bits: i64) -> Option<FailReason> {
        if bits & !Self::ALL.0 == 0 {
            Some(FailReason(bits))
        } else {
            None
        }
    }

    /// The set of `bits`, unknown bits kept as they are.
    pub const fn from_bits_retain(bits: i64) -> FailReason {
        FailReason(bits)
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: FailReason) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: FailReason) -> bool {
        self.0 & other.0 != 0
    }

    /// `self` with `other`'s bits set when `on` holds.
    #[inline(always)]
    pub const fn with_if(self, other: FailReason, on: bool) -> FailReason {
        FailReason(self.0 | (other.0 * on as i64))
    }

    /// The named flags set in `self`, in bit order, with their names.
    pub fn iter_names(self) -> impl Iterator<Item = (FailReason, &'static str)> {
        Self::NAMED
            .into_iter()
            .filter(move |(f, _)| self.contains(*f))
    }
}

impl BitOr for FailReason {
    type Output = FailReason;
    fn bitor(self, rhs: FailReason) -> FailReason {
        FailReason(self.0 | rhs.0)
    }
}

impl BitOrAssign for FailReason {
    fn bitor_assign(&mut self, rhs: FailReason) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for FailReason {
    type Output = FailReason;
    fn bitand(self, rhs: FailReason) -> FailReason {
        FailReason(self.0 & rhs.0)
    }
}

/// `VERIFY_TOKEN_MISMATCH | VERIFY_POSITION_MISMATCH`; unknown bits as a hex remainder;
/// `NONE` for the empty set.
impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        let mut sep = "";
        for (_, name) in self.iter_names() {
            write!(f, "{sep}{name}")?;
            sep = " | ";
        }
        let unknown = self.0 & !Self::ALL.0;
        if unknown != 0 {
            write!(f, "{sep}{unknown:#x}")?;
        }
        Ok(())
    }
}

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
        let values: Vec<i64> = FailReason::NAMED.iter().map(|(f, _)| f.bits()).collect();
        assert_eq!(values, [1, 2, 4, 8, 16, 32]);
        assert_eq!(
            FailReason::NAMED
                .iter()
                .fold(FailReason::NONE, |a, (f, _)| a | *f),
            FailReason::ALL
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
        assert_eq!(FailReason::from_bits(35).map(FailReason::bits), Some(35));
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
