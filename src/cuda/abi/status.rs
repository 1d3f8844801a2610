//! The sticky status word the kernels record malformed device data in (`kernels/common.cuh`; codes in [`super::shared`]).
//!
//! `i64[8]`: a code, then up to five fields. The first error since the host cleared the word
//! wins; [`decode`] turns it into the [`Error`] the CPU op returns for the same data.

use super::shared::{
    PLAN_MAX_ROWS, SA_OUT_CACHE_LOC, SA_VERIFY_PREV, SA_VERIFY_SLOT, SA_WRITE_SEED,
    ST_BATCH_EXCEEDS_CAPACITY, ST_BATCH_TOO_LARGE, ST_BLOCK_RANGE, ST_EXPECTED_READ, ST_LUT_INDEX,
    ST_NEGATIVE_BS, ST_OK, ST_POOL_ROW, ST_PREFIX_BEYOND_ROW, ST_QUERY_STARTS, ST_REAL_KV_ROW,
    ST_REQ_POOL_INDEX, ST_SCATTER_RANGE, ST_SLOT_OUT_OF_RANGE, ST_VALID_LENS_LENGTH,
    ST_WRITE_RANGE, ST_WRITE_TOKEN_OVERFLOW,
};
use crate::Error;

pub(crate) use super::shared::STATUS_WORDS;

/// The array a `ST_SLOT_OUT_OF_RANGE` names, by its `which` field.
fn slot_array(which: i64) -> &'static str {
    match which {
        SA_VERIFY_SLOT => "verify_slot_indices",
        SA_VERIFY_PREV => "verify_prev_slot_indices",
        SA_OUT_CACHE_LOC => "out_cache_loc",
        SA_WRITE_SEED => "write_seed_slot_indices",
        _ => "slot",
    }
}
fn as_usize(v: i64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// The error a status word records, or `Ok` for a clear word.
pub(crate) fn decode(w: &[i64; STATUS_WORDS]) -> Result<(), Error> {
    let [code, a, b, c, d, e, ..] = *w;
    Err(match code {
        ST_OK => return Ok(()),
        ST_BATCH_EXCEEDS_CAPACITY => Error::BatchExceedsWriteCapacity {
            bs: as_usize(a),
            write_req_capacity: as_usize(b),
        },
        ST_BATCH_TOO_LARGE => Error::BatchTooLarge {
            bs: as_usize(a),
            max: PLAN_MAX_ROWS,
        },
        ST_REQ_POOL_INDEX => Error::ReqPoolIndexOutOfRange {
            row: as_usize(a),
            req_pool_index: b,
            rows: as_usize(c),
        },
        ST_PREFIX_BEYOND_ROW => Error::PrefixBeyondRow {
            row: as_usize(a),
            prefix_len: b,
            width: as_usize(c),
        },
        ST_EXPECTED_READ => Error::ExpectedTokenReadOutOfRange {
            row: as_usize(a),
            req_pool_index: b,
            column: c,
            rows: as_usize(d),
            cols: as_usize(e),
        },
        ST_WRITE_TOKEN_OVERFLOW => Error::WriteTokenCountOverflow {
            row: as_usize(a),
            lengths: None,
        },
        ST_LUT_INDEX => Error::LutIndexOutOfRange {
            slot: a,
            lut_len: as_usize(b),
        },
        ST_SLOT_OUT_OF_RANGE => Error::SlotOutOfRange {
            what: slot_array(a),
            index: as_usize(b),
            slot: c,
            num_slots: as_usize(d),
        },
        ST_WRITE_RANGE => Error::MalformedOffsets {
            what: "write_offsets",
            index: as_usize(a),
            value: b,
            min: c,
            max: d,
        },
        ST_REAL_KV_ROW => Error::RealKvSlotOutOfRange {
            source: as_usize(a),
            slot: b,
            row: as_usize(c),
            num_rows: as_usize(d),
        },
        ST_VALID_LENS_LENGTH => Error::LengthMismatch {
            what: "req_to_verify_expected_tokens_valid_lens",
            expected: as_usize(a),
            found: as_usize(b),
        },
        ST_NEGATIVE_BS => Error::OutOfRange {
            what: "bs",
            value: a,
            allowed: "[0, write_req_capacity]",
        },
        ST_SCATTER_RANGE => Error::MalformedOffsets {
            what: "scatter_req_token_ids offsets",
            index: as_usize(a),
            value: b,
            min: c,
            max: d,
        },
        ST_POOL_ROW => Error::PoolRowOutOfRange {
            what: "pool_out",
            row: as_usize(a),
            req_pool_index: b,
            rows: as_usize(c),
        },
        ST_BLOCK_RANGE => Error::BlockOutOfRange {
            row: as_usize(a),
            position: b,
            block: i128::from(c),
            block_size: as_usize(d),
        },
        ST_QUERY_STARTS => Error::QueryStartsDecrease {
            row: as_usize(a),
            start: b,
            end: c,
        },
        other => Error::Malformed {
            detail: format!("unknown device status code {other} (fields {a}, {b}, {c}, {d}, {e})"),
        },
    })
}

/// [`decode`] of the status word stored at `words[at..at + STATUS_WORDS]` (in a report's
/// staging); a staging too short to hold it is an error naming the offset.
pub(crate) fn decode_at(words: &[i64], at: usize) -> Result<(), Error> {
    let word: &[i64; STATUS_WORDS] = at
        .checked_add(STATUS_WORDS)
        .and_then(|end| words.get(at..end))
        .and_then(|w| w.try_into().ok())
        .ok_or(Error::OutOfRange {
            what: "status word offset in a report staging",
            value: i64::try_from(at).unwrap_or(i64::MAX),
            allowed: "an offset with the status word's 8 i64 inside the staging",
        })?;
    decode(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_table_and_query_start_codes_decode_to_the_cpu_errors() {
        let mut w = [0i64; STATUS_WORDS];
        w[..5].copy_from_slice(&[ST_BLOCK_RANGE, 3, 17, -1, 16]);
        assert_eq!(
            decode(&w),
            Err(Error::BlockOutOfRange {
                row: 3,
                position: 17,
                block: -1,
                block_size: 16
            })
        );
        w[..4].copy_from_slice(&[ST_QUERY_STARTS, 1, 5, 2]);
        assert_eq!(
            decode(&w),
            Err(Error::QueryStartsDecrease {
                row: 1,
                start: 5,
                end: 2
            })
        );
    }

    #[test]
    fn a_word_inside_a_staging_decodes_and_one_past_it_is_an_error() {
        let mut words = vec![0i64; 3 + STATUS_WORDS];
        assert_eq!(decode_at(&words, 3), Ok(()));
        words[3..3 + STATUS_WORDS].copy_from_slice(&[ST_SLOT_OUT_OF_RANGE, 2, 7, 99, 64, 0, 0, 0]);
        assert_eq!(
            decode_at(&words, 3).unwrap_err().to_string(),
            "kv-canary: out_cache_loc[7] = 99 is outside the canary buffer's 64 slots"
        );
        let err = decode_at(&words, 4).unwrap_err().to_string();
        assert!(err.starts_with("kv-canary:") && err.contains('4'), "{err}");
        assert!(decode_at(&words, usize::MAX).is_err());
    }

    #[test]
    fn clear_word_is_ok_and_codes_name_values() {
        assert_eq!(decode(&[0; STATUS_WORDS]), Ok(()));
        let err = decode(&[ST_SLOT_OUT_OF_RANGE, 2, 7, 99, 64, 0, 0, 0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: out_cache_loc[7] = 99 is outside the canary buffer's 64 slots"
        );
        let err = decode(&[ST_LUT_INDEX, 18, 18, 0, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: SWA slot 18 is outside full_to_swa_index_mapping length 18"
        );
        let err = decode(&[ST_BATCH_TOO_LARGE, 5000, 4096, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(err.to_string().contains("5000"), "{err}");
    }
}
