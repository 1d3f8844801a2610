//! `scatter_req_token_ids` (spec §6): copy per-request token sequences into rows of the
//! expected-token pool.

use crate::input::ExpectedTokenTable;
use crate::Error;

/// What one scatter call copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterSummary {
    /// Requests that wrote at least one token.
    pub rows_written: usize,
    /// Tokens copied in all.
    pub tokens_written: u64,
}

/// Fills the expected-token pool (spec §6): for each request `r`, copies
/// `flat_in[offsets[r] .. offsets[r] + write_len)` into `pool_out[req_pool_indices[r]][0 ..
/// write_len)`, where `write_len = min(offsets[r + 1] - offsets[r], max_context_len)`; each token
/// is truncated to its low 32 bits (two's complement). Columns `>= write_len` and rows not named
/// are untouched. Padding rows (`req_pool_index = 0`) are not special: they write into row 0.
///
/// The pool's element type (`i32`) and every argument's rank are fixed by the types, so SGLang's
/// rank and dtype errors cannot occur.
///
/// # Malformed inputs: validated before the pool is touched
///
/// * `offsets.len() != req_pool_indices.len() + 1` is [`Error::LengthMismatch`] (SGLang:
///   "offsets length L != bs+1").
/// * Offsets must be non-decreasing and inside `[0, flat_in.len()]`; otherwise
///   [`Error::MalformedOffsets`] names the index and value (SGLang's reference would wrap a
///   negative start and its kernel would mask it).
/// * A request that writes at least one token must name a pool row; otherwise
///   [`Error::PoolRowOutOfRange`]. Rows of empty requests are never read.
pub fn scatter_req_token_ids(
    flat_in: &[i64],
    offsets: &[i64],
    req_pool_indices: &[i64],
    pool_out: &mut ExpectedTokenTable,
) -> Result<ScatterSummary, Error> {
    let bs = req_pool_indices.len();
    if offsets.len() != bs + 1 {
        return Err(Error::LengthMismatch {
            what: "scatter_req_token_ids offsets (bs + 1)",
            expected: bs + 1,
            found: offsets.len(),
        });
    }
    let num_tokens = flat_in.len() as i64;
    let mut min = 0i64;
    for (index, &value) in offsets.iter().enumerate() {
        if value < min || value > num_tokens {
            return Err(Error::MalformedOffsets {
                what: "scatter_req_token_ids offsets",
                index,
                value,
                min,
                max: num_tokens,
            });
        }
        min = value;
    }
    let width = pool_out.width();
    let write_len = |r: usize| ((offsets[r + 1] - offsets[r]) as usize).min(width);
    for (row, &req_pool_index) in req_pool_indices.iter().enumerate() {
        let in_pool = usize::try_from(req_pool_index).is_ok_and(|rp| rp < pool_out.rows());
        if write_len(row) > 0 && !in_pool {
            return Err(Error::PoolRowOutOfRange {
                what: "pool_out",
                row,
                req_pool_index,
                rows: pool_out.rows(),
            });
        }
    }

    let mut summary = ScatterSummary::default();
    for (r, &req_pool_index) in req_pool_indices.iter().enumerate() {
        let n = write_len(r);
        if n == 0 {
            continue;
        }
        let start = offsets[r] as usize;
        let dst = pool_out
            .row_mut(req_pool_index as usize)
            .expect("validated: the pool row exists");
        for (d, &s) in dst[..n].iter_mut().zip(&flat_in[start..start + n]) {
            *d = s as i32;
        }
        summary.rows_written += 1;
        summary.tokens_written += n as u64;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(rows: usize, width: usize, fill: i32) -> ExpectedTokenTable {
        ExpectedTokenTable::from_vec(rows, width, vec![fill; rows * width]).unwrap()
    }

    #[test]
    fn copies_each_request_into_its_row() {
        let mut p = pool(3, 4, -9);
        let s = scatter_req_token_ids(&[1, 2, 3, 4, 5], &[0, 2, 5], &[2, 1], &mut p).unwrap();
        assert_eq!(p.row(0).unwrap(), &[-9; 4]);
        assert_eq!(p.row(1).unwrap(), &[3, 4, 5, -9]);
        assert_eq!(p.row(2).unwrap(), &[1, 2, -9, -9]);
        assert_eq!(
            s,
            ScatterSummary {
                rows_written: 2,
                tokens_written: 5
            }
        );
    }

    #[test]
    fn truncates_at_the_pool_width_without_spilling() {
        let mut p = pool(3, 2, 0);
        scatter_req_token_ids(&[1, 2, 3, 4, 5, 6], &[0, 4, 6], &[1, 2], &mut p).unwrap();
        assert_eq!(p.row(1).unwrap(), &[1, 2]);
        assert_eq!(p.row(2).unwrap(), &[5, 6]);
    }

    #[test]
    fn empty_middle_request_and_padding_rows() {
        let mut p = pool(3, 3, 7);
        scatter_req_token_ids(&[1, 2, 3], &[0, 1, 1, 3], &[1, 99, 0], &mut p).unwrap();
        assert_eq!(p.row(1).unwrap(), &[1, 7, 7]);
        assert_eq!(
            p.row(0).unwrap(),
            &[2, 3, 7],
            "padding rows write into row 0"
        );
    }

    #[test]
    fn tokens_keep_their_low_32_bits() {
        let mut p = pool(2, 3, 0);
        let flat = [0x1_0000_0005, -1, 0x8000_0000];
        scatter_req_token_ids(&flat, &[0, 3], &[1], &mut p).unwrap();
        assert_eq!(p.row(1).unwrap(), &[5, -1, i32::MIN]);
    }

    #[test]
    fn empty_inputs_are_a_no_op() {
        let mut p = pool(2, 2, 3);
        scatter_req_token_ids(&[], &[0], &[], &mut p).unwrap();
        scatter_req_token_ids(&[], &[0, 0], &[1], &mut p).unwrap();
        assert!(p.as_slice().iter().all(|&x| x == 3));
    }

    #[test]
    fn malformed_inputs_are_errors_and_touch_nothing() {
        let mut p = pool(2, 4, 3);
        let before = p.clone();
        let err = scatter_req_token_ids(&[1, 2, 3], &[0, 3], &[1, 1], &mut p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: scatter_req_token_ids offsets (bs + 1) length must be 3, got 2"
        );
        for (offsets, index, value) in [([0, 2, 1], 2, 1), ([0, 2, 4], 2, 4), ([-1, 1, 2], 0, -1)] {
            let err = scatter_req_token_ids(&[1, 2, 3], &offsets, &[1, 1], &mut p).unwrap_err();
            assert!(
                matches!(err, Error::MalformedOffsets { index: i, value: v, .. } if i == index && v == value),
                "{err}"
            );
        }
        let err = scatter_req_token_ids(&[1, 2, 3], &[0, 1, 3], &[1, 2], &mut p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: batch row 1: req_pool_index 2 is outside pool_out's 2 rows"
        );
        assert!(scatter_req_token_ids(&[1], &[0, 1], &[-1], &mut p).is_err());
        assert_eq!(p, before);
        // an empty request may name any row: it is never read
        scatter_req_token_ids(&[1], &[0, 0, 1], &[-5, 1], &mut p).unwrap();
    }
}
