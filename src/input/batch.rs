//! [`Batch`]: the per-request columns of one forward step, owned; [`BatchView`]: the same columns
//! borrowed from an engine's own slices, of any [`IndexElement`] type.

use super::element::{read_i64, IndexElement};
use crate::Error;
use core::marker::PhantomData;

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
    pub fn view(&self) -> BatchView<'_> {
        BatchView {
            slices: (
                &self.req_pool_indices,
                &self.prefix_lens,
                &self.extend_seq_lens,
            ),
            bs: self.len(),
        }
    }
}

mod sealed {
    use crate::input::IndexElement;
    use crate::Error;

    /// What the plan reads of one batch row, whatever the batch's columns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RowRead {
        /// The table row the row reads, `None` for a padding row.
        pub table_row: Option<i64>,
        /// Tokens already in the KV cache (negative behaves as 0).
        pub prefix_len: i64,
        /// Tokens written this step (negative behaves as 0).
        pub extend_len: i64,
    }

    /// The reading half of [`BatchColumns`](super::BatchColumns), out of the public API.
    pub trait ReadRows {
        /// The first column's element type.
        type A: IndexElement;
        /// The second column's element type.
        type B: IndexElement;
        /// The third column's element type (`i64` and empty where there are two columns).
        type C: IndexElement;
        /// Row `r < bs` of `slices`; an element past `i64::MAX`, or cumulative offsets that
        /// decrease, is an error naming the column, row and value.
        fn read(slices: &Columns<'_, Self>, r: usize) -> Result<RowRead, Error>;
        /// Checks that `slices` hold the rows of a batch of `bs` rows.
        fn check_lengths(slices: &Columns<'_, Self>, bs: usize) -> Result<(), Error>;
    }

    /// The engine's column slices of a batch's columns `C` (up to three).
    pub type Columns<'a, C> = (
        &'a [<C as ReadRows>::A],
        &'a [<C as ReadRows>::B],
        &'a [<C as ReadRows>::C],
    );
}
pub(crate) use sealed::RowRead;
use sealed::{Columns, ReadRows};

/// How a batch describes its rows: which table row each reads, what is cached and what this
/// step writes. Sealed; one of
///
/// * [`PoolRows`]: SGLang's `req_pool_indices` (0 marks a padding row), `prefix_lens` and
///   `extend_seq_lens`; the table is indexed by the request's pool row;
/// * [`QueryLens`]: vLLM's `context_lens` (the whole context, this step's tokens included) and
///   the step's query lengths; the table (a block table) is indexed by batch row;
/// * [`QueryStarts`]: `context_lens` and the cumulative query offsets (`cu_seqlens_q`,
///   `bs + 1` of them), indexed by batch row.
///
/// Each column has its own element type ([`IndexElement`]). For the vLLM columns a row caches
/// `prefix = context_len - query_len` tokens and writes `query_len`; a padding row of a bucketed
/// batch (context 0) plans nothing, and its tokens (slot mapping -1) are skipped by the write.
pub trait BatchColumns: ReadRows + 'static {
    /// Whether the table is indexed by the request's pool row (SGLang), not the batch row.
    const POOL_ROWS: bool;
}

/// The never-built marker of a columns type's element types.
type Marker<T> = PhantomData<fn() -> T>;

/// SGLang's batch columns: `req_pool_indices` of `R`, `prefix_lens` of `P`, `extend_seq_lens`
/// of `E`. The table is indexed by the request's pool row; `req_pool_index` 0 marks a padding
/// row (spec §2.12). A marker type, never built.
#[derive(Debug)]
pub struct PoolRows<R = i64, P = R, E = P>(Marker<(R, P, E)>);

/// vLLM's batch columns: `context_lens` of `C` (the whole context, this step's new tokens
/// included: mistral.rs and candle-vllm keep `u32`) and the step's per-row query lengths of
/// `Q`. The table is indexed by batch row. A marker type, never built.
#[derive(Debug)]
pub struct QueryLens<C = u32, Q = C>(Marker<(C, Q)>);

/// vLLM's batch columns with cumulative query offsets: `context_lens` of `C` and
/// `query_starts` of `Q`, `bs + 1` offsets whose differences are the rows' query lengths
/// (`cu_seqlens_q`). The table is indexed by batch row. A marker type, never built.
#[derive(Debug)]
pub struct QueryStarts<C = u32, Q = C>(Marker<(C, Q)>);

impl<R: IndexElement, P: IndexElement, E: IndexElement> ReadRows for PoolRows<R, P, E> {
    type A = R;
    type B = P;
    type C = E;
    #[inline]
    fn read(&(rp, prefix, extend): &Columns<'_, Self>, r: usize) -> Result<RowRead, Error> {
        let req_pool_index = read_i64("req_pool_indices", r, rp[r])?;
        if req_pool_index == 0 {
            // A padding row: its lengths are never read (spec §3.2).
            return Ok(RowRead {
                table_row: None,
                prefix_len: 0,
                extend_len: 0,
            });
        }
        Ok(RowRead {
            table_row: Some(req_pool_index),
            prefix_len: read_i64("prefix_lens", r, prefix[r])?,
            extend_len: read_i64("extend_seq_lens", r, extend[r])?,
        })
    }
    fn check_lengths(&(rp, prefix, extend): &Columns<'_, Self>, bs: usize) -> Result<(), Error> {
        at_least("req_pool_indices", rp.len(), bs)?;
        at_least("prefix_lens", prefix.len(), bs)?;
        at_least("extend_seq_lens", extend.len(), bs)
    }
}
impl<R: IndexElement, P: IndexElement, E: IndexElement> BatchColumns for PoolRows<R, P, E> {
    const POOL_ROWS: bool = true;
}

/// A vLLM row: `prefix = context - query` (saturating: a negative prefix plans nothing).
#[inline]
fn vllm_row(r: usize, context: i64, query: i64) -> RowRead {
    RowRead {
        table_row: Some(r as i64),
        prefix_len: context.saturating_sub(query),
        extend_len: query,
    }
}

impl<C: IndexElement, Q: IndexElement> ReadRows for QueryLens<C, Q> {
    type A = C;
    type B = Q;
    type C = i64;
    #[inline]
    fn read(&(context, query, _): &Columns<'_, Self>, r: usize) -> Result<RowRead, Error> {
        let c = read_i64("context_lens", r, context[r])?;
        Ok(vllm_row(r, c, read_i64("query_lens", r, query[r])?))
    }
    fn check_lengths(&(context, query, _): &Columns<'_, Self>, bs: usize) -> Result<(), Error> {
        at_least("context_lens", context.len(), bs)?;
        at_least("query_lens", query.len(), bs)
    }
}
impl<C: IndexElement, Q: IndexElement> BatchColumns for QueryLens<C, Q> {
    const POOL_ROWS: bool = false;
}

impl<C: IndexElement, Q: IndexElement> ReadRows for QueryStarts<C, Q> {
    type A = C;
    type B = Q;
    type C = i64;
    #[inline]
    fn read(&(context, starts, _): &Columns<'_, Self>, r: usize) -> Result<RowRead, Error> {
        let c = read_i64("context_lens", r, context[r])?;
        let start = read_i64("query_starts", r, starts[r])?;
        let end = read_i64("query_starts", r + 1, starts[r + 1])?;
        if end < start {
            return Err(Error::QueryStartsDecrease { row: r, start, end });
        }
        Ok(vllm_row(r, c, end.saturating_sub(start)))
    }
    fn check_lengths(&(context, starts, _): &Columns<'_, Self>, bs: usize) -> Result<(), Error> {
        at_least("context_lens", context.len(), bs)?;
        at_least("query_starts", starts.len(), bs.saturating_add(1))
    }
}
impl<C: IndexElement, Q: IndexElement> BatchColumns for QueryStarts<C, Q> {
    const POOL_ROWS: bool = false;
}

/// `Ok` when the column `what` of `len` elements holds the `needed` a batch reads.
fn at_least(what: &'static str, len: usize, needed: usize) -> Result<(), Error> {
    if len < needed {
        return Err(Error::ColumnTooShort { what, len, needed });
    }
    Ok(())
}

/// A batch's columns borrowed from an engine's own slices, no copy: SGLang's
/// ([`PoolRows`], the default: `req_pool_indices`, `prefix_lens`, `extend_seq_lens`) or
/// vLLM's ([`QueryLens`], [`QueryStarts`]: `context_lens` and the step's query lengths), each
/// column of its own element type. The plan op reads a view exactly as the owned [`Batch`] of
/// the same rows, converting each element it reads (a `u64` or `usize` past `i64::MAX` is
/// [`Error::ElementOutOfRange`]).
///
/// The vLLM columns take the batch size apart from the slices, which may be longer (engines
/// bucket their batches for CUDA graphs); only the first `bs` rows are read.
///
/// ```
/// use kv_canary::BatchView;
/// let (rows, prefixes, extends): (Vec<usize>, Vec<usize>, Vec<usize>) =
///     (vec![2, 0], vec![3, 0], vec![1, 0]); // the engine's own columns
/// let batch = BatchView::new(&rows, &prefixes, &extends)?;
/// assert_eq!(batch.len(), 2);
/// // mistral.rs's columns: u32 context lengths and u32 query lengths, bucketed to 4 rows.
/// let (context_lens, query_lens) = ([17u32, 5, 0, 0], [1u32, 5, 0, 0]);
/// let batch = BatchView::from_query_lens(2, &context_lens, &query_lens)?;
/// assert_eq!(batch.len(), 2);
/// # Ok::<(), kv_canary::Error>(())
/// ```
pub struct BatchView<'a, C: BatchColumns = PoolRows> {
    slices: Columns<'a, C>,
    bs: usize,
}

impl<C: BatchColumns> Clone for BatchView<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C: BatchColumns> Copy for BatchView<'_, C> {}

impl<C: BatchColumns> core::fmt::Debug for BatchView<'_, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BatchView")
            .field("bs", &self.bs)
            .field("columns", &self.slices)
            .finish()
    }
}

impl<'a, C: BatchColumns> BatchView<'a, C> {
    /// The batch size `bs` (padding rows included).
    pub fn len(&self) -> usize {
        self.bs
    }

    /// Whether `bs == 0`.
    pub fn is_empty(&self) -> bool {
        self.bs == 0
    }

    /// What the plan reads of row `r < bs`.
    #[inline]
    pub(crate) fn read_row(&self, r: usize) -> Result<RowRead, Error> {
        C::read(&self.slices, r)
    }

    /// A view of `bs` rows of `slices`, checked to hold them.
    fn checked(bs: usize, slices: Columns<'a, C>) -> Result<Self, Error> {
        C::check_lengths(&slices, bs)?;
        Ok(BatchView { slices, bs })
    }
}

impl<'a, R: IndexElement, P: IndexElement, E: IndexElement> BatchView<'a, PoolRows<R, P, E>> {
    /// Three columns whose lengths are only known at run time; they must agree (the check of
    /// [`Batch::try_from_columns`]).
    pub fn new(
        req_pool_indices: &'a [R],
        prefix_lens: &'a [P],
        extend_seq_lens: &'a [E],
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
            slices: (req_pool_indices, prefix_lens, extend_seq_lens),
            bs,
        })
    }

    /// The first `bs` rows of three columns that may be longer (a bucketed batch); a column
    /// shorter than `bs` is [`Error::ColumnTooShort`].
    pub fn with_len(
        bs: usize,
        req_pool_indices: &'a [R],
        prefix_lens: &'a [P],
        extend_seq_lens: &'a [E],
    ) -> Result<Self, Error> {
        Self::checked(bs, (req_pool_indices, prefix_lens, extend_seq_lens))
    }

    /// Three columns of one length `B`, checked by the compiler.
    pub fn from_arrays<const B: usize>(
        req_pool_indices: &'a [R; B],
        prefix_lens: &'a [P; B],
        extend_seq_lens: &'a [E; B],
    ) -> Self {
        BatchView {
            slices: (req_pool_indices, prefix_lens, extend_seq_lens),
            bs: B,
        }
    }

    /// The `req_pool_indices` column (its first `bs` elements).
    pub fn req_pool_indices(&self) -> &'a [R] {
        &self.slices.0[..self.bs]
    }
    /// The `prefix_lens` column (its first `bs` elements).
    pub fn prefix_lens(&self) -> &'a [P] {
        &self.slices.1[..self.bs]
    }
    /// The `extend_seq_lens` column (its first `bs` elements).
    pub fn extend_seq_lens(&self) -> &'a [E] {
        &self.slices.2[..self.bs]
    }

    /// Row `r` as the ops read it (`None` past the end); an element past `i64::MAX` is
    /// [`Error::ElementOutOfRange`] naming its column, row and value.
    pub fn try_row(&self, r: usize) -> Option<Result<BatchRow, Error>> {
        if r >= self.bs {
            return None;
        }
        let (rp, prefix, extend) = self.slices;
        Some((|| {
            Ok(BatchRow {
                req_pool_index: read_i64("req_pool_indices", r, rp[r])?,
                prefix_len: read_i64("prefix_lens", r, prefix[r])?,
                extend_len: read_i64("extend_seq_lens", r, extend[r])?,
            })
        })())
    }
}

impl<'a, C: IndexElement, Q: IndexElement> BatchView<'a, QueryLens<C, Q>> {
    /// vLLM's columns of a batch of `bs` rows: `context_lens` (the whole context, this step's
    /// tokens included) and `query_lens` (this step's tokens), each at least `bs` long (longer
    /// for a bucketed batch; a shorter one is [`Error::ColumnTooShort`]).
    pub fn from_query_lens(
        bs: usize,
        context_lens: &'a [C],
        query_lens: &'a [Q],
    ) -> Result<Self, Error> {
        Self::checked(bs, (context_lens, query_lens, &[]))
    }
}

impl<'a, C: IndexElement, Q: IndexElement> BatchView<'a, QueryStarts<C, Q>> {
    /// vLLM's columns of a batch of `bs` rows with cumulative query offsets: `context_lens`
    /// (at least `bs`) and `query_starts` (`cu_seqlens_q`, at least `bs + 1`; row `r` writes
    /// `query_starts[r + 1] - query_starts[r]` tokens, and offsets that decrease are
    /// [`Error::QueryStartsDecrease`] when the plan reads them).
    pub fn from_query_starts(
        bs: usize,
        context_lens: &'a [C],
        query_starts: &'a [Q],
    ) -> Result<Self, Error> {
        Self::checked(bs, (context_lens, query_starts, &[]))
    }
}

impl<'a> BatchView<'a> {
    /// Row `r`.
    pub fn row(&self, r: usize) -> Option<BatchRow> {
        let (rp, prefix, extend) = self.slices;
        (r < self.bs).then(|| BatchRow {
            req_pool_index: rp[r],
            prefix_len: prefix[r],
            extend_len: extend[r],
        })
    }

    /// Every row, in order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = BatchRow> + 'a {
        let (rp, prefix, extend) = self.slices;
        (0..self.bs).map(move |r| BatchRow {
            req_pool_index: rp[r],
            prefix_len: prefix[r],
            extend_len: extend[r],
        })
    }
}

impl<'a> From<&'a Batch> for BatchView<'a> {
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
