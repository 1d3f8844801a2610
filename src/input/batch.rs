//! [`Batch`]: the per-request columns of one forward step, owned; [`BatchView`]: the same columns
//! borrowed from an engine's own slices, of any [`IndexElement`] type.

use super::element::{read_i64, IndexElement};
use crate::Error;

/// One batch row: which `req_to_token` row it uses, how many tokens are already in the KV cache,
/// and how many this step writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BatchRow {
    /// `req_pool_indices[r]`; 0 marks a padding row (spec §2.12).
    pub req_pool_index: i64,
    /// `prefix_lens[r]`: tokens already in the KV cache (negative behaves as 0).
    pub prefix_len: i64,
    /// `extend_seq_lens[r]`: tokens written this step (negative behaves as 0).
    pub extend_len: i64,
}

impl BatchRow {
    /// A padding row (`req_pool_index = 0`), as CUDA-graph batches carry.
    pub const PADDING: BatchRow = BatchRow {
        req_pool_index: 0,
        prefix_len: 0,
        extend_len: 0,
    };

    /// Whether the row is a real request (`req_pool_index != 0`).
    pub fn is_active(&self) -> bool {
        self.req_pool_index != 0
    }
}

/// The per-request columns `req_pool_indices`, `prefix_lens`, `extend_seq_lens` (spec §3.1).
///
/// The three columns are stored separately (the layout a device copy needs) but can only be
/// built together, so they cannot differ in length: from rows, from three arrays of one const
/// length, or from three vectors whose lengths are checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    req_pool_indices: Vec<i64>,
    prefix_lens: Vec<i64>,
    extend_seq_lens: Vec<i64>,
}

impl Batch {
    /// An empty batch (`bs = 0`).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `bs` rows; room that cannot be allocated is
    /// [`Error::AllocationFailed`] naming `bs`.
    pub fn try_with_capacity(bs: usize) -> Result<Self, Error> {
        let column = |what| {
            let mut v = Vec::new();
            v.try_reserve_exact(bs)
                .map_err(|_| Error::AllocationFailed {
                    what,
                    rows: bs as u128,
                    cols: 1,
                    element_bytes: core::mem::size_of::<i64>(),
                })
                .map(|()| v)
        };
        Ok(Batch {
            req_pool_indices: column("req_pool_indices")?,
            prefix_lens: column("prefix_lens")?,
            extend_seq_lens: column("extend_seq_lens")?,
        })
    }

    /// Three columns of one length `B`, checked by the compiler.
    ///
    /// ```
    /// let batch = kv_canary::Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    /// assert_eq!(batch.len(), 3);
    /// ```
    pub fn from_columns<const B: usize>(
        req_pool_indices: [i64; B],
        prefix_lens: [i64; B],
        extend_seq_lens: [i64; B],
    ) -> Self {
        Batch {
            req_pool_indices: req_pool_indices.to_vec(),
            prefix_lens: prefix_lens.to_vec(),
            extend_seq_lens: extend_seq_lens.to_vec(),
        }
    }

    /// Three columns whose lengths are only known at run time; they must agree.
    pub fn try_from_columns(
        req_pool_indices: Vec<i64>,
        prefix_lens: Vec<i64>,
        extend_seq_lens: Vec<i64>,
    ) -> Result<Self, Error> {
        let bs = req_pool_indices.len();
        for (what, len) in [
            ("prefix_lens", prefix_lens.len()),
            ("extend_seq_lens", extend_seq_lens.len()),
        ] {
            if len != bs {
                return Err(Error::LengthMismatch {
                    what,
                    expected: bs,
                    found: len,
                });
            }
        }
        Ok(Batch {
            req_pool_indices,
            prefix_lens,
            extend_seq_lens,
        })
    }

    /// Appends one row.
    pub fn push(&mut self, row: BatchRow) {
        self.req_pool_indices.push(row.req_pool_index);
        self.prefix_lens.push(row.prefix_len);
        self.extend_seq_lens.push(row.extend_len);
    }

    /// Removes every row, keeping the allocation (engines refill one batch per step).
    pub fn clear(&mut self) {
        self.req_pool_indices.clear();
        self.prefix_lens.clear();
        self.extend_seq_lens.clear();
    }

    /// The batch size `bs` (padding rows included).
    pub fn len(&self) -> usize {
        self.req_pool_indices.len()
    }

    /// Whether `bs == 0`.
    pub fn is_empty(&self) -> bool {
        self.req_pool_indices.is_empty()
    }

    /// Row `r`.
    pub fn row(&self, r: usize) -> Option<BatchRow> {
        Some(BatchRow {
            req_pool_index: *self.req_pool_indices.get(r)?,
            prefix_len: self.prefix_lens[r],
            extend_len: self.extend_seq_lens[r],
        })
    }

    /// Every row, in order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = BatchRow> + '_ {
        (0..self.len()).map(move |r| BatchRow {
            req_pool_index: self.req_pool_indices[r],
            prefix_len: self.prefix_lens[r],
            extend_len: self.extend_seq_lens[r],
        })
    }

    /// The `req_pool_indices` column.
    pub fn req_pool_indices(&self) -> &[i64] {
        &self.req_pool_indices
    }
    /// The `prefix_lens` column.
    pub fn prefix_lens(&self) -> &[i64] {
        &self.prefix_lens
    }
    /// The `extend_seq_lens` column.
    pub fn extend_seq_lens(&self) -> &[i64] {
        &self.extend_seq_lens
    }

    /// The three columns as a view (what the ops read).
    pub fn view(&self) -> BatchView<'_, i64> {
        BatchView {
            req_pool_indices: &self.req_pool_indices,
            prefix_lens: &self.prefix_lens,
            extend_seq_lens: &self.extend_seq_lens,
        }
    }
}

/// The per-request columns `req_pool_indices`, `prefix_lens`, `extend_seq_lens` borrowed from an
/// engine's own slices of element type `T` (SGLang keeps them as `int64`; a Rust engine often as
/// `usize` or `u32`), no copy. The plan op reads a view exactly as the owned [`Batch`] it
/// describes, converting each element it reads (a `u64` or `usize` past `i64::MAX` is
/// [`Error::ElementOutOfRange`]).
///
/// ```
/// use kv_canary::BatchView;
/// let (rows, prefixes, extends): (Vec<usize>, Vec<usize>, Vec<usize>) =
///     (vec![2, 0], vec![3, 0], vec![1, 0]); // the engine's own columns
/// let batch = BatchView::new(&rows, &prefixes, &extends)?;
/// assert_eq!(batch.len(), 2);
/// # Ok::<(), kv_canary::Error>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct BatchView<'a, T: IndexElement = i64> {
    req_pool_indices: &'a [T],
    prefix_lens: &'a [T],
    extend_seq_lens: &'a [T],
}

impl<T: IndexElement> Clone for BatchView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: IndexElement> Copy for BatchView<'_, T> {}

impl<'a, T: IndexElement> BatchView<'a, T> {
    /// Three columns whose lengths are only known at run time; they must agree (the check of
    /// [`Batch::try_from_columns`]).
    pub fn new(
        req_pool_indices: &'a [T],
        prefix_lens: &'a [T],
        extend_seq_lens: &'a [T],
    ) -> Result<Self, Error> {
        let bs = req_pool_indices.len();
        for (what, len) in [
            ("prefix_lens", prefix_lens.len()),
            ("extend_seq_lens", extend_seq_lens.len()),
        ] {
            if len != bs {
                return Err(Error::LengthMismatch {
                    what,
                    expected: bs,
                    found: len,
                });
            }
        }
        Ok(BatchView {
            req_pool_indices,
            prefix_lens,
            extend_seq_lens,
        })
    }

    /// Three columns of one length `B`, checked by the compiler.
    pub fn from_arrays<const B: usize>(
        req_pool_indices: &'a [T; B],
        prefix_lens: &'a [T; B],
        extend_seq_lens: &'a [T; B],
    ) -> Self {
        BatchView {
            req_pool_indices,
            prefix_lens,
            extend_seq_lens,
        }
    }

    /// The batch size `bs` (padding rows included).
    pub fn len(&self) -> usize {
        self.req_pool_indices.len()
    }

    /// Whether `bs == 0`.
    pub fn is_empty(&self) -> bool {
        self.req_pool_indices.is_empty()
    }

    /// The `req_pool_indices` column.
    pub fn req_pool_indices(&self) -> &'a [T] {
        self.req_pool_indices
    }
    /// The `prefix_lens` column.
    pub fn prefix_lens(&self) -> &'a [T] {
        self.prefix_lens
    }
    /// The `extend_seq_lens` column.
    pub fn extend_seq_lens(&self) -> &'a [T] {
        self.extend_seq_lens
    }

    /// Row `r` as the ops read it (`None` past the end); an element past `i64::MAX` is
    /// [`Error::ElementOutOfRange`] naming its column, row and value.
    pub fn try_row(&self, r: usize) -> Option<Result<BatchRow, Error>> {
        let req_pool_index = *self.req_pool_indices.get(r)?;
        Some((|| {
            Ok(BatchRow {
                req_pool_index: read_i64("req_pool_indices", r, req_pool_index)?,
                prefix_len: read_i64("prefix_lens", r, self.prefix_lens[r])?,
                extend_len: read_i64("extend_seq_lens", r, self.extend_seq_lens[r])?,
            })
        })())
    }
}

impl<'a> BatchView<'a, i64> {
    /// Row `r`.
    pub fn row(&self, r: usize) -> Option<BatchRow> {
        Some(BatchRow {
            req_pool_index: *self.req_pool_indices.get(r)?,
            prefix_len: self.prefix_lens[r],
            extend_len: self.extend_seq_lens[r],
        })
    }

    /// Every row, in order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = BatchRow> + 'a {
        let v = *self;
        (0..v.len()).map(move |r| BatchRow {
            req_pool_index: v.req_pool_indices[r],
            prefix_len: v.prefix_lens[r],
            extend_len: v.extend_seq_lens[r],
        })
    }
}

impl<'a> From<&'a Batch> for BatchView<'a, i64> {
    fn from(batch: &'a Batch) -> Self {
        batch.view()
    }
}

impl FromIterator<BatchRow> for Batch {
    fn from_iter<I: IntoIterator<Item = BatchRow>>(iter: I) -> Self {
        let mut batch = Batch::new();
        iter.into_iter().for_each(|row| batch.push(row));
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_of_different_lengths_are_rejected_by_name() {
        let err = Batch::try_from_columns(vec![1, 2], vec![0, 0], vec![1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: extend_seq_lens length must be 2, got 1"
        );
    }

    #[test]
    fn room_for_absurd_batches_is_an_error() {
        assert_eq!(
            Batch::try_with_capacity(usize::MAX).unwrap_err(),
            Error::AllocationFailed {
                what: "req_pool_indices",
                rows: usize::MAX as u128,
                cols: 1,
                element_bytes: 8
            }
        );
        assert!(Batch::try_with_capacity(1 << 50).is_err());
        assert!(Batch::try_with_capacity(4).unwrap().is_empty());
    }

    #[test]
    fn views_check_lengths_and_name_values_past_i64() {
        let err = BatchView::new(&[1u32, 2], &[0, 0], &[1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: extend_seq_lens length must be 2, got 1"
        );
        let v = BatchView::from_arrays(&[3usize, usize::MAX], &[1, 2], &[4, 5]);
        assert_eq!(
            v.try_row(0),
            Some(Ok(BatchRow {
                req_pool_index: 3,
                prefix_len: 1,
                extend_len: 4
            }))
        );
        assert_eq!(
            v.try_row(1).unwrap().unwrap_err().to_string(),
            format!(
                "kv-canary: req_pool_indices[1] = {} (usize) is past i64::MAX, the largest value the ops read",
                usize::MAX
            )
        );
        assert_eq!(v.try_row(2), None);
        let owned = Batch::from_columns([1, 0], [2, 0], [3, 0]);
        assert_eq!(
            owned.view().rows().collect::<Vec<_>>(),
            owned.rows().collect::<Vec<_>>()
        );
    }

    #[test]
    fn rows_round_trip() {
        let rows = [
            BatchRow {
                req_pool_index: 2,
                prefix_len: 3,
                extend_len: 2,
            },
            BatchRow::PADDING,
        ];
        let batch: Batch = rows.iter().copied().collect();
        assert_eq!(batch.rows().collect::<Vec<_>>(), rows);
        assert!(!batch.row(1).unwrap().is_active());
        assert_eq!(batch.row(2), None);
    }
}
