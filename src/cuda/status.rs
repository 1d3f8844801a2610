//! The sticky status word the kernels record malformed device data in (`kernels/common.cuh`).
//!
//! `i64[8]`: a code, then up to five fields. The first error since the host cleared the word
//! wins; [`decode`] turns it into the [`Error`] the CPU op returns for the same data.

use crate::consts::PLAN_BS_BLOCK_SIZE;
use crate::Error;

/// Words of the status buffer.
pub(crate) const STATUS_WORDS: usize = 8;

// Codes, as in kernels/common.cuh.
const BATCH_EXCEEDS_CAPACITY: i64 = 1;
const BATCH_TOO_LARGE: i64 = 2;
const REQ_POOL_INDEX: i64 = 3;
const PREFIX_BEYOND_ROW: i64 = 4;
const EXPECTED_READ: i64 = 5;
const WRITE_TOKEN_OVERFLOW: i64 = 6;
const LUT_INDEX: i64 = 7;
const SLOT_OUT_OF_RANGE: i64 = 8;
const WRITE_RANGE: i64 = 9;
const REAL_KV_ROW: i64 = 10;
const VALID_LENS_LENGTH: i64 = 11;
const NEGATIVE_BS: i64 = 12;
const SCATTER_RANGE: i64 = 13;
const POOL_ROW: i64 = 14;

const SLOT_ARRAYS: [&str; 4] = [
    "verify_slot_indices",
    "verify_prev_slot_indices",
    "out_cache_loc",
    "write_seed_slot_indices",
];

fn as_usize(v: i64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// The error a status word records, or `Ok` for a clear word.
pub(crate) fn decode(w: &[i64; STATUS_WORDS]) -> Result<(), Error> {
    let [code, a, b, c, d, e, ..] = *w;
    Err(match code {
        0 => return Ok(()),
        BATCH_EXCEEDS_CAPACITY => Error::BatchExceedsWriteCapacity {
            bs: as_usize(a),
            write_req_capacity: as_usize(b),
        },
        BATCH_TOO_LARGE => Error::BatchTooLarge {
            bs: as_usize(a),
            max: PLAN_BS_BLOCK_SIZE,
        },
        REQ_POOL_INDEX => Error::ReqPoolIndexOutOfRange {
            row: as_usize(a),
            req_pool_index: b,
            rows: as_usize(c),
        },
        PREFIX_BEYOND_ROW => Error::PrefixBeyondRow {
            row: as_usize(a),
            prefix_len: b,
            width: as_usize(c),
        },
        EXPECTED_READ => Error::ExpectedTokenReadOutOfRange {
            row: as_usize(a),
            req_pool_index: b,
            column: c,
            rows: as_usize(d),
            cols: as_usize(e),
        },
        WRITE_TOKEN_OVERFLOW => Error::WriteTokenCountOverflow {
            row: as_usize(a),
            lengths: None,
        },
        LUT_INDEX => Error::LutIndexOutOfRange {
            slot: a,
            lut_len: as_usize(b),
        },
        SLOT_OUT_OF_RANGE => Error::SlotOutOfRange {
            what: SLOT_ARRAYS.get(as_usize(a)).copied().unwrap_or("slot"),
            index: as_usize(b),
            slot: c,
            num_slots: as_usize(d),
        },
        WRITE_RANGE => Error::MalformedOffsets {
            what: "write_offsets",
            index: as_usize(a),
            value: b,
            min: c,
            max: d,
        },
        REAL_KV_ROW => Error::RealKvSlotOutOfRange {
            source: as_usize(a),
            slot: b,
            row: as_usize(c),
            num_rows: as_usize(d),
        },
        VALID_LENS_LENGTH => Error::LengthMismatch {
            what: "req_to_verify_expected_tokens_valid_lens",
            expected: as_usize(a),
            found: as_usize(b),
        },
        NEGATIVE_BS => Error::OutOfRange {
            what: "bs",
            value: a,
            allowed: "[0, write_req_capacity]",
        },
        SCATTER_RANGE => Error::MalformedOffsets {
            what: "scatter_req_token_ids offsets",
            index: as_usize(a),
            value: b,
            min: c,
            max: d,
        },
        POOL_ROW => Error::PoolRowOutOfRange {
            what: "pool_out",
            row: as_usize(a),
            req_pool_index: b,
            rows: as_usize(c),
        },
        other => Error::Malformed {
            detail: format!("unknown device status code {other} (fields {a}, {b}, {c}, {d}, {e})"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_word_is_ok_and_codes_name_values() {
        assert_eq!(decode(&[0; STATUS_WORDS]), Ok(()));
        let err = decode(&[SLOT_OUT_OF_RANGE, 2, 7, 99, 64, 0, 0, 0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: out_cache_loc[7] = 99 is outside the canary buffer's 64 slots"
        );
        let err = decode(&[LUT_INDEX, 18, 18, 0, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: SWA slot 18 is outside full_to_swa_index_mapping length 18"
        );
        let err = decode(&[BATCH_TOO_LARGE, 5000, 4096, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(err.to_string().contains("5000"), "{err}");
    }
}
