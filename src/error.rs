//! The crate's one error type.
//!
//! Every check that depends only on configuration is a type error; every check that depends on
//! data returns one of these. Each message starts with `kv-canary:` and names the offending
//! values. An op that returns an error has not modified any of its outputs.

use core::fmt;

/// Everything that can go wrong at run time. Messages start with `kv-canary:` and name values.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A capacity of zero (SGLang: "capacity must be positive").
    ZeroCapacity {
        /// Which capacity.
        what: &'static str,
        /// The rejected value.
        value: i64,
    },
    /// Two run-time ([`UncheckedCapacity`](crate::UncheckedCapacity)) capacities disagree.
    CapacityMismatch {
        /// Which capacity.
        what: &'static str,
        /// The shape's (launch's) capacity.
        expected: usize,
        /// The buffer's capacity.
        found: usize,
    },
    /// An array has the wrong length.
    LengthMismatch {
        /// Which array.
        what: &'static str,
        /// The required length.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// A per-token write input does not hold the shape's write entry capacity of entries:
    /// exactly ([`WriteInputs`](crate::WriteInputs)) or at least
    /// ([`WriteInputsView`](crate::WriteInputsView), which reads the first ones).
    WriteInputsLength {
        /// Which input (`input_ids`, `positions`, `out_cache_loc`, `expected_input_tokens`,
        /// `expected_input_positions`).
        what: &'static str,
        /// The write entry capacity.
        capacity: usize,
        /// The length given.
        found: usize,
    },
    /// A 2-D table's data does not fill `rows x cols`.
    TableShape {
        /// Which table.
        what: &'static str,
        /// Rows requested.
        rows: usize,
        /// Columns requested.
        cols: usize,
        /// Elements given.
        len: usize,
    },
    /// More batch rows than the write plan's request capacity.
    BatchExceedsWriteCapacity {
        /// Batch size.
        bs: usize,
        /// The write plan's request capacity.
        write_req_capacity: usize,
    },
    /// More batch rows than one launch of a backend supports.
    BatchTooLarge {
        /// Batch size.
        bs: usize,
        /// The backend's limit.
        max: usize,
    },
    /// An active row names a `req_to_token` row that does not exist.
    ReqPoolIndexOutOfRange {
        /// Batch row.
        row: usize,
        /// Its `req_pool_indices` value.
        req_pool_index: i64,
        /// Rows in the table.
        rows: usize,
    },
    /// An element of an engine's host array (a view over `u64` or `usize`) is past `i64::MAX`,
    /// the largest value the ops compute with.
    ElementOutOfRange {
        /// Which array.
        what: &'static str,
        /// The element's index (row-major for tables).
        index: usize,
        /// Its value.
        value: i128,
        /// The array's element type (`u64`, `usize`).
        element: &'static str,
    },
    /// An active row would read `req_to_token` past its width.
    PrefixBeyondRow {
        /// Batch row.
        row: usize,
        /// Its `prefix_lens` value.
        prefix_len: i64,
        /// Width (`max_seq_len`) of the table.
        width: usize,
    },
    /// A block-table entry the plan reads is negative, or its slots do not fit in `i64`
    /// (`block x block_size + block_size - 1 > i64::MAX`); tables of block size 1 pass
    /// negative slots through, as SGLang's `req_to_token`.
    BlockOutOfRange {
        /// Batch row.
        row: usize,
        /// The token position whose block was read.
        position: i64,
        /// The block-table entry.
        block: i128,
        /// The table's block size.
        block_size: usize,
    },
    /// A batch column is shorter than the batch it describes.
    ColumnTooShort {
        /// Which column.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The elements the batch reads (`bs`, or `bs + 1` cumulative offsets).
        needed: usize,
    },
    /// Cumulative query offsets (`query_starts`, vLLM's `cu_seqlens_q`) decrease at a row.
    QueryStartsDecrease {
        /// Batch row.
        row: usize,
        /// `query_starts[row]`.
        start: i64,
        /// `query_starts[row + 1]`, smaller.
        end: i64,
    },
    /// Two ends of a KV transfer digested different layouts, positions or token counts: the
    /// transfer is refused, not reported as corruption.
    TransferLayoutMismatch {
        /// What the sending end digested.
        sent: String,
        /// What the receiving end digested.
        arrived: String,
    },
    /// The engine's policy fails on a finding ([`Action::Fail`](crate::guard::Action::Fail)).
    GuardFailed {
        /// The finding.
        finding: String,
    },
    /// A full-pool slot is not covered by the SWA lookup table.
    LutIndexOutOfRange {
        /// The untranslated slot.
        slot: i64,
        /// Length of `full_to_swa_index_mapping`.
        lut_len: usize,
    },
    /// The expected-token pool is too small for a read the plan must make.
    ExpectedTokenReadOutOfRange {
        /// Batch row.
        row: usize,
        /// Its `req_pool_indices` value.
        req_pool_index: i64,
        /// The column that would be read.
        column: i64,
        /// Rows of the pool.
        rows: usize,
        /// Columns of the pool.
        cols: usize,
    },
    /// The sum of the active `extend_seq_lens` does not fit in `i64`.
    WriteTokenCountOverflow {
        /// Batch row at which the sum overflowed.
        row: usize,
        /// `(sum of the rows before it, its extend_seq_len)`: the two lengths whose sum
        /// overflowed, where the backend knows them (the CPU ops do; the CUDA kernels report
        /// the row only).
        lengths: Option<(i64, i64)>,
    },
    /// A value that must be one of a few named constants is not.
    InvalidEnumValue {
        /// Which value.
        what: &'static str,
        /// The rejected value.
        value: i64,
    },
    /// A host buffer cannot be allocated: its size overflows, exceeds `isize::MAX` bytes, or
    /// the allocator refused it. Names the requested size as `rows x cols` elements (`cols` is
    /// 1 for a 1-D array) of `element_bytes` bytes each.
    AllocationFailed {
        /// Which buffer.
        what: &'static str,
        /// Elements requested (rows of a 2-D table).
        rows: u128,
        /// Columns of a 2-D table; 1 for a 1-D array.
        cols: u128,
        /// Bytes per element.
        element_bytes: usize,
    },
    /// A capacity derived from two run-time factors overflows `usize`.
    CapacityOverflow {
        /// Which capacity.
        what: &'static str,
        /// Its formula over the factors, for example `"max_bs x tokens_per_req"`.
        formula: &'static str,
        /// The first factor.
        a: usize,
        /// The second factor.
        b: usize,
    },
    /// A capacity too large for an array derived from it (`write_offsets` holds
    /// `write_req_capacity + 1` entries).
    CapacityTooLarge {
        /// Which capacity.
        what: &'static str,
        /// The capacity given.
        capacity: usize,
        /// Why it is too large, in words.
        reason: &'static str,
    },
    /// More sweep entries than a verify plan holds.
    SweepTooLong {
        /// Entries given.
        entries: usize,
        /// The plan's verify capacity.
        verify_capacity: usize,
    },
    /// A sweep asked for more cached tokens of a request-table row than the row holds
    /// ([`SweepEntries::push_row`](crate::step::SweepEntries::push_row)).
    CachedBeyondRow {
        /// The `req_to_token` row, when the sweep read it from a table.
        row: Option<usize>,
        /// The cached tokens asked for.
        cached: usize,
        /// Cells in the row.
        width: usize,
    },
    /// A sweep named a `req_to_token` row the table does not have
    /// ([`SweepEntries::push_table_row`](crate::step::SweepEntries::push_table_row)).
    SweepRowOutOfRange {
        /// The row asked for.
        row: usize,
        /// Rows in the table.
        rows: usize,
    },
    /// A canary slot stride that is below 32 bytes or not a multiple of 8.
    InvalidSlotStride {
        /// The stride given, in bytes.
        bytes: usize,
    },
    /// A canary slot index (host access by slot number) outside the canary buffer.
    CanarySlotOutOfRange {
        /// The slot given.
        slot: usize,
        /// Slots in the canary buffer.
        num_slots: usize,
    },
    /// A value outside its allowed range.
    OutOfRange {
        /// Which value.
        what: &'static str,
        /// The rejected value.
        value: i64,
        /// The allowed range, in words (for example `"[0, 4]"`).
        allowed: &'static str,
    },
    /// A slot index outside the canary buffer.
    SlotOutOfRange {
        /// Which array the slot came from.
        what: &'static str,
        /// Index within that array.
        index: usize,
        /// The slot.
        slot: i64,
        /// Slots in the canary buffer.
        num_slots: usize,
    },
    /// A real-KV source parameter breaks the rules of spec §2.10.
    RealKvSource {
        /// Which parameter.
        what: &'static str,
        /// The rejected value (`i128` holds every `i64` parameter and every `usize` stride).
        value: i128,
        /// The rule, in words.
        rule: &'static str,
    },
    /// `read_bytes` is not a positive multiple of 16 in `(0, num_bytes_per_token]`.
    RealKvReadBytes {
        /// The rejected `read_bytes`.
        read_bytes: i64,
        /// The source's `num_bytes_per_token`.
        num_bytes_per_token: i64,
    },
    /// A real-KV source tensor whose shape cannot be viewed as `[rows, row_bytes]` bytes.
    RealKvShape {
        /// The shape given.
        shape: Vec<usize>,
        /// What is wrong with it.
        detail: String,
    },
    /// A real-KV source row narrower than `page_size x num_bytes_per_token`.
    RealKvRowTooNarrow {
        /// Bytes per row.
        row_bytes: usize,
        /// The source's page size.
        page_size: usize,
        /// The source's bytes per token.
        num_bytes_per_token: usize,
    },
    /// A canary slot whose real-KV row lies past a source's rows.
    RealKvSlotOutOfRange {
        /// Index of the source in fold order.
        source: usize,
        /// The slot.
        slot: i64,
        /// The row it maps to (`slot / page_size`).
        row: usize,
        /// Rows in the source.
        num_rows: usize,
    },
    /// An offsets array (write plan or scatter) that decreases or leaves its flat array.
    MalformedOffsets {
        /// Which array.
        what: &'static str,
        /// Index within it.
        index: usize,
        /// The value there.
        value: i64,
        /// The smallest allowed value (the previous offset, or 0).
        min: i64,
        /// The largest allowed value (the flat array's length).
        max: i64,
    },
    /// A batch row of `scatter_req_token_ids` names a pool row that does not exist.
    PoolRowOutOfRange {
        /// Which pool.
        what: &'static str,
        /// Batch row.
        row: usize,
        /// Its `req_pool_indices` value.
        req_pool_index: i64,
        /// Rows in the pool.
        rows: usize,
    },
    /// More real-KV sources than the CUDA ABI carries.
    TooManyRealKvSources {
        /// Sources given.
        count: usize,
        /// The limit (4).
        max: usize,
    },
    /// Malformed data that no other variant describes: a table cell outside the table, a CUDA
    /// table row outside its rows, an unknown device status code.
    Malformed {
        /// What is wrong, with the offending values.
        detail: String,
    },
    /// The engine's own work failed inside a step the crate drives: the forward pass a
    /// `cuda::StepGraph`'s step closure queues between `write` and `verify_tail` (a capture
    /// its framework refused, a kernel launch that failed). `detail` is the engine's error.
    EngineWork {
        /// The engine's error, as it describes it.
        detail: String,
    },
    /// A replay of a captured step would overwrite the report of an earlier replay that was
    /// not taken yet (feature `cuda`): take that report first.
    ReportUnread {
        /// The replay whose report is unread.
        unread: u64,
        /// The replay that was refused.
        replay: u64,
    },
    /// The report of one replay of a captured step could not be taken (feature `cuda`,
    /// `cuda::StepGraph::try_take` and `wait`): `error` is what that replay's kernels recorded
    /// or what the driver said. The replay counts as taken.
    /// [`source`](std::error::Error::source) is `error`; [`Error::root`] unwraps it.
    InReplay {
        /// The replay's number (0 for the first replay after a capture).
        replay: u64,
        /// What went wrong in it.
        error: Box<Error>,
    },
    /// No CUDA device to run on (`cuInit` reports none); GPU tests report themselves skipped.
    NoCudaDevice {
        /// What the driver said.
        detail: String,
    },
    /// A CUDA driver call failed (feature `cuda`). [`source`](std::error::Error::source) is
    /// the [`CudaErrorCode`](crate::cuda::CudaErrorCode).
    #[cfg(feature = "cuda")]
    Cuda {
        /// The driver call (`cuMemAlloc`).
        call: &'static str,
        /// The driver's result code.
        code: crate::cuda::CudaErrorCode,
    },
    /// A view of engine-owned device memory that cannot be right (feature `cuda`): a null or
    /// misaligned address, a range past the address space or past the end of its allocation.
    #[cfg(feature = "cuda")]
    DeviceView {
        /// Which array (`req_to_token`, a real-KV source).
        what: &'static str,
        /// The view's device address.
        addr: u64,
        /// Its elements.
        len: usize,
        /// Bytes per element.
        element_bytes: usize,
        /// What is wrong with it.
        rule: String,
    },
}

impl Error {
    /// The error itself, unwrapped from the context variants ([`Error::InReplay`]) around it:
    /// what to match on whichever call returned it.
    pub fn root(&self) -> &Error {
        match self {
            Error::InReplay { error, .. } => error.root(),
            e => e,
        }
    }

    /// The message without its `kv-canary: ` prefix (what a context variant appends).
    fn fmt_body(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Error::*;
        match self {
            ZeroCapacity { what, value } => write!(f, "{what} must be positive, got {value}"),
            CapacityMismatch {
                what,
                expected,
                found,
            } => write!(
                f,
                "{what}={expected} does not match the buffer's capacity {found} (make the \
                 buffer from the shape in use; one made before a reshape keeps the old capacity)"
            ),
            LengthMismatch {
                what,
                expected,
                found,
            } => write!(f, "{what} length must be {expected}, got {found}"),
            WriteInputsLength {
                what,
                capacity,
                found,
            } => write!(
                f,
                "{what} length is {found}, but write inputs hold the write entry capacity, \
                 {capacity} (owned inputs exactly, views at least): pad this step's tokens to it \
                 (entries past the plan's tokens are never read)"
            ),
            ElementOutOfRange {
                what,
                index,
                value,
                element,
            } => write!(
                f,
                "{what}[{index}] = {value} ({element}) is past i64::MAX, the largest value the ops read"
            ),
            TableShape {
                what,
                rows,
                cols,
                len,
            } => match rows.checked_mul(*cols) {
                Some(n) => write!(
                    f,
                    "{what} must hold rows x cols = {rows} x {cols} = {n} elements, got {len}"
                ),
                None => write!(
                    f,
                    "{what} must hold rows x cols = {rows} x {cols} elements, more than usize::MAX, got {len}"
                ),
            },
            BatchExceedsWriteCapacity {
                bs,
                write_req_capacity,
            } => write!(f, "bs={bs} exceeds write_req_capacity={write_req_capacity}"),
            BatchTooLarge { bs, max } => {
                write!(f, "supports at most bs={max} reqs per launch, got bs={bs}")
            }
            ReqPoolIndexOutOfRange {
                row,
                req_pool_index,
                rows,
            } => write!(
                f,
                "batch row {row}: req_pool_index {req_pool_index} is outside req_to_token's {rows} rows"
            ),
            PrefixBeyondRow {
                row,
                prefix_len,
                width,
            } => write!(
                f,
                "batch row {row}: prefix_len {prefix_len} exceeds req_to_token's row width {width}"
            ),
            BlockOutOfRange {
                row,
                position,
                block,
                block_size,
            } => write!(
                f,
                "batch row {row}: the block table's entry for position {position} is block {block}, \
                 which is negative or whose slots (block x {block_size} + offset) are past i64::MAX"
            ),
            ColumnTooShort { what, len, needed } => write!(
                f,
                "{what} holds {len} elements, the batch reads {needed}"
            ),
            QueryStartsDecrease { row, start, end } => write!(
                f,
                "batch row {row}: query_starts decrease from {start} to {end}"
            ),
            TransferLayoutMismatch { sent, arrived } => write!(
                f,
                "the KV transfer's two ends digested different layouts: sent {sent}, arrived \
                 {arrived}; refused (not compared as corruption)"
            ),
            GuardFailed { finding } => write!(f, "the engine's policy fails on {finding}"),
            LutIndexOutOfRange { slot, lut_len } => write!(
                f,
                "SWA slot {slot} is outside full_to_swa_index_mapping length {lut_len}"
            ),
            ExpectedTokenReadOutOfRange {
                row,
                req_pool_index,
                column,
                rows,
                cols,
            } => write!(
                f,
                "batch row {row}: expected-token read at [{req_pool_index}][{column}] is outside the pool's {rows} x {cols}"
            ),
            WriteTokenCountOverflow { row, lengths } => {
                write!(f, "the sum of extend_seq_lens overflows i64 at batch row {row}")?;
                match lengths {
                    Some((sum, len)) => write!(
                        f,
                        ": the rows before it sum to {sum}, its extend_seq_len is {len}"
                    ),
                    None => Ok(()),
                }
            }
            AllocationFailed {
                what,
                rows,
                cols,
                element_bytes,
            } => {
                write!(f, "cannot allocate {what}: {rows}")?;
                if *cols != 1 {
                    write!(f, " x {cols}")?;
                }
                write!(f, " elements of {element_bytes} bytes")?;
                match rows
                    .checked_mul(*cols)
                    .and_then(|n| n.checked_mul(*element_bytes as u128))
                {
                    Some(bytes) => write!(f, " = {bytes} bytes"),
                    None => f.write_str(", more than u128::MAX bytes"),
                }
            }
            CapacityOverflow {
                what,
                formula,
                a,
                b,
            } => write!(
                f,
                "{what} = {formula} = {a} x {b} overflows usize (at most {})",
                usize::MAX
            ),
            CapacityTooLarge {
                what,
                capacity,
                reason,
            } => write!(f, "{what}={capacity} is too large: {reason}"),
            SweepTooLong {
                entries,
                verify_capacity,
            } => write!(
                f,
                "a sweep of {entries} entries exceeds the verify plan: at most verify_capacity={verify_capacity} entries (and at most i32::MAX = {}, verify_num_valid's type)",
                i32::MAX
            ),
            CachedBeyondRow { row, cached, width } => {
                match row {
                    Some(row) => write!(f, "req_to_token row {row}")?,
                    None => f.write_str("a request-table row")?,
                }
                write!(
                    f,
                    " has {width} cells, fewer than the {cached} cached tokens the sweep reads"
                )
            }
            SweepRowOutOfRange { row, rows } => write!(
                f,
                "the sweep reads req_to_token row {row}, outside the table's {rows} rows"
            ),
            InvalidSlotStride { bytes } => write!(
                f,
                "canary slot_stride_bytes must be in [32, ..) and a multiple of 8, got {bytes}"
            ),
            CanarySlotOutOfRange { slot, num_slots } => write!(
                f,
                "canary slot {slot} is outside the canary buffer's {num_slots} slots"
            ),
            InvalidEnumValue { what, value } => write!(f, "{what} has no meaning for value {value}"),
            OutOfRange {
                what,
                value,
                allowed,
            } => write!(f, "{what} must be in {allowed}, got {value}"),
            SlotOutOfRange {
                what,
                index,
                slot,
                num_slots,
            } => write!(
                f,
                "{what}[{index}] = {slot} is outside the canary buffer's {num_slots} slots"
            ),
            RealKvSource { what, value, rule } => {
                write!(f, "RealKvSource.{what} must be {rule}, got {value}")
            }
            RealKvReadBytes {
                read_bytes,
                num_bytes_per_token,
            } => write!(
                f,
                "RealKvSource.read_bytes must be a positive multiple of 16 in (0, num_bytes_per_token={num_bytes_per_token}], got {read_bytes}"
            ),
            RealKvShape { shape, detail } => {
                write!(f, "RealKvSource.tensor has shape {shape:?}: {detail}")
            }
            RealKvRowTooNarrow {
                row_bytes,
                page_size,
                num_bytes_per_token,
            } => write!(
                f,
                "RealKvSource row is too narrow for its slot layout: a row holds {row_bytes} bytes but page_size={page_size} x num_bytes_per_token={num_bytes_per_token} needs {}",
                (*page_size as u128) * (*num_bytes_per_token as u128)
            ),
            RealKvSlotOutOfRange {
                source,
                slot,
                row,
                num_rows,
            } => write!(
                f,
                "real_kv_sources[{source}]: slot {slot} lies in row {row}, past the source's {num_rows} rows"
            ),
            MalformedOffsets {
                what,
                index,
                value,
                min,
                max,
            } => write!(
                f,
                "{what}[{index}] = {value} is outside [{min}, {max}]: offsets must be non-decreasing and within the flat arrays"
            ),
            PoolRowOutOfRange {
                what,
                row,
                req_pool_index,
                rows,
            } => write!(
                f,
                "batch row {row}: req_pool_index {req_pool_index} is outside {what}'s {rows} rows"
            ),
            TooManyRealKvSources { count, max } => write!(
                f,
                "at most {max} RealKvSource entries supported by the CUDA ABI, got {count}"
            ),
            Malformed { detail } => f.write_str(detail),
            EngineWork { detail } => write!(f, "the engine's work inside the step failed: {detail}"),
            ReportUnread { unread, replay } => write!(
                f,
                "replay {replay} of the captured step would overwrite the unread report of \
                 replay {unread}: take that report first (nothing was replayed)"
            ),
            InReplay { replay, error } => {
                write!(f, "replay {replay} of the captured step: ")?;
                error.fmt_body(f)
            }
            NoCudaDevice { detail } => write!(f, "no CUDA device: {detail}"),
            #[cfg(feature = "cuda")]
            Cuda { call, code } => write!(f, "CUDA {call} failed: {code}"),
            #[cfg(feature = "cuda")]
            DeviceView {
                what,
                addr,
                len,
                element_bytes,
                rule,
            } => write!(
                f,
                "the device view of {what} at {addr:#x} ({len} elements of {element_bytes} bytes) {rule}"
            ),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("kv-canary: ")?;
        self.fmt_body(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InReplay { error, .. } => Some(error.as_ref()),
            #[cfg(feature = "cuda")]
            Error::Cuda { code, .. } => Some(code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflowed_products_name_their_factors() {
        let e = Error::TableShape {
            what: "req_to_token",
            rows: usize::MAX,
            cols: 2,
            len: 0,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "kv-canary: req_to_token must hold rows x cols = {} x 2 elements, more than usize::MAX, got 0",
                usize::MAX
            )
        );
        let e = Error::RealKvRowTooNarrow {
            row_bytes: 64,
            page_size: usize::MAX,
            num_bytes_per_token: 16,
        };
        assert!(
            e.to_string()
                .ends_with(&format!("needs {}", usize::MAX as u128 * 16)),
            "{e}"
        );
        let e = Error::AllocationFailed {
            what: "req_to_token",
            rows: 1 << 40,
            cols: 1,
            element_bytes: 4,
        };
        assert_eq!(
            e.to_string(),
            "kv-canary: cannot allocate req_to_token: 1099511627776 elements of 4 bytes = 4398046511104 bytes"
        );
        let e = Error::AllocationFailed {
            what: "t",
            rows: u64::MAX.into(),
            cols: u64::MAX.into(),
            element_bytes: 4,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "kv-canary: cannot allocate t: {0} x {0} elements of 4 bytes, more than u128::MAX bytes",
                u64::MAX
            )
        );
    }

    #[test]
    fn every_message_starts_with_the_crate_name() {
        let samples = [
            Error::ZeroCapacity {
                what: "verify_capacity",
                value: 0,
            },
            Error::BatchExceedsWriteCapacity {
                bs: 9,
                write_req_capacity: 8,
            },
            Error::LutIndexOutOfRange {
                slot: 18,
                lut_len: 18,
            },
            Error::Malformed {
                detail: "unknown device status code 9".into(),
            },
            Error::EngineWork {
                detail: "operation not permitted when stream is capturing".into(),
            },
        ];
        for e in samples {
            assert!(e.to_string().starts_with("kv-canary: "), "{e}");
        }
        assert_eq!(
            Error::LutIndexOutOfRange {
                slot: 18,
                lut_len: 18
            }
            .to_string(),
            "kv-canary: SWA slot 18 is outside full_to_swa_index_mapping length 18"
        );
    }

    #[test]
    fn a_replays_error_names_the_replay_once_prefixed_and_unwraps() {
        use std::error::Error as _;
        let inner = Error::SlotOutOfRange {
            what: "out_cache_loc",
            index: 0,
            slot: 71,
            num_slots: 64,
        };
        let e = Error::InReplay {
            replay: 12,
            error: Box::new(inner.clone()),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "kv-canary: replay 12 of the captured step: {}",
                inner.to_string().trim_start_matches("kv-canary: ")
            )
        );
        assert_eq!(e.to_string().matches("kv-canary:").count(), 1, "{e}");
        assert_eq!(e.root(), &inner);
        assert_eq!(inner.root(), &inner);
        let source = e.source().map(ToString::to_string);
        assert_eq!(source, Some(inner.to_string()));
        // Nested context unwraps to the innermost error.
        let twice = Error::InReplay {
            replay: 13,
            error: Box::new(e),
        };
        assert_eq!(twice.root(), &inner);
    }
}
