//! [`Violation`]: one decoded violation row (spec §2.6).

use super::{FailReason, LaunchTag};
use crate::consts::VIOLATION_FIELDS;
use core::fmt;

/// One violation row, decoded. Field meanings follow spec §2.6; which ones apply depends on the
/// row's kind (verify, write input assert, write chain-position assert), told apart by
/// [`reasons`](Violation::reasons).
///
/// Decoding never fails: a tag or bits this crate does not know are kept as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    /// Field 0, `kernel_kind`: the launch tag as stored (see [`Violation::launch_tag`]).
    pub kernel_kind: i64,
    /// Field 1: the checked (verify) or written (write) slot.
    pub slot: i64,
    /// Field 2: the stored position (verify) or the written position (write).
    pub position: i64,
    /// Field 3: the stored token (verify) or the written token (write).
    pub stored_token: i64,
    /// Field 4: the expected token (-1 when absent or unchecked; the written token itself in a
    /// chain-position row).
    pub expected_token: i64,
    /// Field 5: the stored prev hash (verify) or the running hash stored into the slot (write).
    pub stored_chain_hash: i64,
    /// Field 6: the expected chain hash (verify; equal to field 5 when the chain check was
    /// skipped) or the expected position (write).
    pub expected_aux: i64,
    /// Field 7: why.
    pub reasons: FailReason,
}

const WRITE_BITS: FailReason = FailReason::from_bits_retain(
    FailReason::WRITE_TOKEN_MISMATCH.bits() | FailReason::WRITE_POSITION_MISMATCH.bits(),
);

/// The rows of a ring's words (`VIOLATION_FIELDS` `i64` each, as a ring or its readback holds
/// them), raw, in order; a trailing partial row is ignored.
pub(crate) fn raw_rows(
    words: &[i64],
) -> impl ExactSizeIterator<Item = [i64; VIOLATION_FIELDS]> + '_ {
    words.chunks_exact(VIOLATION_FIELDS).map(|row| {
        let mut out = [0; VIOLATION_FIELDS];
        out.copy_from_slice(row);
        out
    })
}

/// The first `stored` rows of a ring's words, decoded, in order (the device reports' readback).
#[cfg(feature = "cuda")]
pub(crate) fn decode_rows(words: &[i64], stored: usize) -> Vec<Violation> {
    raw_rows(&words[..stored * VIOLATION_FIELDS])
        .map(Violation::from_row)
        .collect()
}

impl Violation {
    /// Decodes a raw row.
    pub const fn from_row(row: [i64; VIOLATION_FIELDS]) -> Violation {
        Violation {
            kernel_kind: row[0],
            slot: row[1],
            position: row[2],
            stored_token: row[3],
            expected_token: row[4],
            stored_chain_hash: row[5],
            expected_aux: row[6],
            reasons: FailReason::from_bits_retain(row[7]),
        }
    }

    /// The raw row, fields in spec order.
    pub const fn to_row(&self) -> [i64; VIOLATION_FIELDS] {
        [
            self.kernel_kind,
            self.slot,
            self.position,
            self.stored_token,
            self.expected_token,
            self.stored_chain_hash,
            self.expected_aux,
            self.reasons.bits(),
        ]
    }

    /// The launch tag, if field 0 holds one of the twelve.
    pub fn launch_tag(&self) -> Option<LaunchTag> {
        LaunchTag::from_value(self.kernel_kind)
    }

    /// Whether the write op recorded this row (its bits are write bits).
    pub const fn is_write(&self) -> bool {
        self.reasons.intersects(WRITE_BITS)
    }
}

impl From<[i64; VIOLATION_FIELDS]> for Violation {
    fn from(row: [i64; VIOLATION_FIELDS]) -> Self {
        Violation::from_row(row)
    }
}

/// A sentence: `slot 17, position 1: stored token 8, expected 201 (VERIFY_TOKEN_MISMATCH),
/// launch HEAD_K_FULL`. One clause per reason, joined by `; `.
impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {}, position {}: ", self.slot, self.position)?;
        let r = self.reasons;
        let mut clauses: Vec<String> = Vec::new();
        if r.contains(FailReason::VERIFY_TOKEN_MISMATCH) {
            clauses.push(format!(
                "stored token {}, expected {}",
                self.stored_token, self.expected_token
            ));
        }
        if r.contains(FailReason::VERIFY_POSITION_MISMATCH) {
            clauses.push(format!(
                "stored position {} is not the planned one",
                self.position
            ));
        }
        if r.contains(FailReason::VERIFY_CHAIN_HASH_MISMATCH) {
            clauses.push(format!(
                "stored prev hash {:#018x}, expected {:#018x}",
                self.stored_chain_hash as u64, self.expected_aux as u64
            ));
        }
        if r.contains(FailReason::VERIFY_REAL_KV_HASH_MISMATCH) {
            clauses.push("real KV bytes no longer match their fingerprint".to_owned());
        }
        if r.contains(FailReason::WRITE_TOKEN_MISMATCH) {
            clauses.push(format!(
                "wrote token {}, expected {}",
                self.stored_token, self.expected_token
            ));
        }
        if r.contains(FailReason::WRITE_POSITION_MISMATCH) {
            clauses.push(format!(
                "wrote position {}, expected {}",
                self.position, self.expected_aux
            ));
        }
        if clauses.is_empty() {
            clauses.push(format!("stored token {}", self.stored_token));
        }
        write!(f, "{} ({})", clauses.join("; "), r)?;
        match self.launch_tag() {
            Some(tag) => write!(f, ", launch {tag}"),
            None => write!(f, ", launch tag {} (unknown)", self.kernel_kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::CHAIN_HEAD;

    #[test]
    fn a_token_mismatch_reads_like_a_sentence() {
        let v = Violation::from_row([
            0,
            17,
            1,
            8,
            201,
            -2611770615455499323,
            -2611770615455499323,
            32,
        ]);
        assert_eq!(
            v.to_string(),
            "slot 17, position 1: stored token 8, expected 201 (VERIFY_TOKEN_MISMATCH), launch HEAD_K_FULL"
        );
        assert!(!v.is_write());
    }

    #[test]
    fn rows_round_trip_and_unknown_tags_are_kept() {
        let row = [42, 3, 4, 5, 6, 7, 8, 1 | 64];
        let v = Violation::from(row);
        assert_eq!(v.to_row(), row);
        assert_eq!(v.launch_tag(), None);
        assert!(v.to_string().ends_with("launch tag 42 (unknown)"), "{v}");
    }

    #[test]
    fn write_and_chain_rows_name_the_expected_values() {
        let v = Violation::from_row([1, 21, 13, 201, 201, 5, 12, 16]);
        assert!(v.is_write());
        assert_eq!(
            v.to_string(),
            "slot 21, position 13: wrote position 13, expected 12 (WRITE_POSITION_MISMATCH), launch HEAD_V_FULL"
        );
        let v = Violation::from_row([11, 4, 0, 9, 8, CHAIN_HEAD, 0, 8 | 16]);
        assert!(
            v.to_string()
                .contains("wrote token 9, expected 8; wrote position 0, expected 0"),
            "{v}"
        );
    }
}
