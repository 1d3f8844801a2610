//! The constants the kernels share with Rust, defined once, here.
//!
//! `build.rs` includes this file and writes every item of the lists below into
//! `$OUT_DIR/kv_canary_shared.h` (C++ `constexpr`s and enums inside `namespace kvc`), which
//! `kernels/common.cuh` includes; nothing is mirrored by hand. The Rust side uses the same items
//! (status codes in `abi::status`, thread counts in `abi::kernels`) and asserts the crate's other
//! definitions of the same values (`crate::consts`, `FailReason`) equal to these.
//!
//! This file is plain Rust without paths into the crate, so that the build script can include it.

/// A constant of the generated header: C++ type, name, value (as written in C++).
#[allow(dead_code)] // the lists are read by build.rs
pub type HeaderConst = (&'static str, &'static str, u64);

/// Declares `i64` codes and the list `$list` of `(name, value)` pairs for the header.
macro_rules! codes {
    ($(#[$list_doc:meta])* $list:ident { $($(#[$doc:meta])* $name:ident = $value:expr,)* }) => {
        $($(#[$doc])* pub const $name: i64 = $value;)*
        $(#[$list_doc])*
        #[allow(dead_code)] // read by build.rs
        pub const $list: &[(&str, i64)] = &[$((stringify!($name), $name)),*];
    };
}

/// splitmix64(CANARY_CHAIN_ANCHOR): the prev hash of every chain head.
pub const CHAIN_HEAD: u64 = 0xDE7F_AE23_A9A1_B716;
/// Fields of a violation row.
pub const VIOLATION_FIELDS: usize = 8;
/// Real-KV sources a launch folds at most.
pub const MAX_REAL_KV_SOURCES: usize = 4;
/// Words of the sticky status buffer (`i64[8]`: a code, then up to five fields).
pub const STATUS_WORDS: usize = 8;
/// Rows one plan block scans in shared memory (`PLAN_MAX_ROWS`).
pub const PLAN_MAX_ROWS: usize = 4096;
/// Threads of a verify block.
pub const VERIFY_THREADS: u32 = 512;
/// Threads of a plan-and-head-verify block (`kv_canary_plan_verify_head*`: one entry a thread
/// a round).
pub const PLAN_VERIFY_THREADS: u32 = 256;
/// Blocks of a plan-and-head-verify kernel a multiprocessor holds (its `__launch_bounds__`
/// minimum, kernels/plan.cu): four fit its 62 registers without a spill, and measured faster
/// than three (68 registers) on every decode row but one (docs/benchmarks.md, session 10).
pub const PLAN_VERIFY_BLOCKS_PER_SM: u32 = 4;
/// Entries a thread of a plan-and-head-verify kernel plans and checks a round (two measured
/// slower: docs/benchmarks.md, session 10).
pub const PLAN_VERIFY_UNROLL: u32 = 1;
/// Threads of a staged ALL verify block.
pub const STAGED_THREADS: u32 = 256;
/// Entries one warp of a staged ALL verify takes per batch (`STAGE_ENTRIES` in
/// kernels/verify.cu).
pub const VERIFY_STAGE_ENTRIES: u32 = 8;
/// Threads of a scatter block.
pub const SCATTER_THREADS: u32 = 256;
/// Threads of a report readback block (one block a piece).
pub const READBACK_THREADS: u32 = 128;
/// Pieces one report readback launch copies (`ReadbackArgs`).
pub const READBACK_PIECES: usize = 16;

/// Threads of a write block: the chain warp, eight worker warps and two idle ones (asserted
/// against `WRITE_THREADS` in kernels/write.cu).
pub const WRITE_THREADS: u32 = 352;
/// Bytes of one staged-verify stage (asserted against `sizeof(Stage)` in kernels/verify.cu).
pub const VERIFY_STAGE_BYTES: u32 = 4608;
/// Dynamic shared memory of a streamed ALL verify block: 8 warps x 2 chunks x 32 entries x 128
/// bytes (asserted against `StreamChunk` in kernels/verify.cu).
pub const VERIFY_STREAMED_SHARED_BYTES: u32 = 8 * 2 * 32 * 128;

/// Scalar constants of the header, in order.
#[allow(dead_code)] // read by build.rs
pub const SCALARS: &[HeaderConst] = &[
    ("u64", "CHAIN_HEAD", CHAIN_HEAD),
    ("int", "VIOLATION_FIELDS", VIOLATION_FIELDS as u64),
    ("int", "MAX_REAL_KV_SOURCES", MAX_REAL_KV_SOURCES as u64),
    ("int", "STATUS_WORDS", STATUS_WORDS as u64),
    ("int", "PLAN_MAX_ROWS", PLAN_MAX_ROWS as u64),
    ("int", "VERIFY_THREADS", VERIFY_THREADS as u64),
    ("int", "PLAN_VERIFY_THREADS", PLAN_VERIFY_THREADS as u64),
    (
        "int",
        "PLAN_VERIFY_BLOCKS_PER_SM",
        PLAN_VERIFY_BLOCKS_PER_SM as u64,
    ),
    ("int", "PLAN_VERIFY_UNROLL", PLAN_VERIFY_UNROLL as u64),
    ("int", "STAGED_THREADS", STAGED_THREADS as u64),
    ("int", "VERIFY_STAGE_ENTRIES", VERIFY_STAGE_ENTRIES as u64),
    ("int", "SCATTER_THREADS", SCATTER_THREADS as u64),
    ("int", "READBACK_THREADS", READBACK_THREADS as u64),
    ("int", "READBACK_PIECES", READBACK_PIECES as u64),
];

/// Values the kernels compute themselves and check against Rust's: emitted as
/// `constexpr int RUST_<name>` for a `static_assert` next to the C++ definition.
#[allow(dead_code)] // read by build.rs
pub const ASSERTED: &[HeaderConst] = &[
    ("int", "RUST_WRITE_THREADS", WRITE_THREADS as u64),
    ("int", "RUST_VERIFY_STAGE_BYTES", VERIFY_STAGE_BYTES as u64),
    (
        "int",
        "RUST_VERIFY_STREAMED_SHARED_BYTES",
        VERIFY_STREAMED_SHARED_BYTES as u64,
    ),
];

codes! {
    /// `FailReason` bits (spec §2.9), header `constexpr i64`s.
    FAIL_REASONS {
        /// The chain hash does not match the predecessor's.
        VERIFY_CHAIN_HASH_MISMATCH = 1,
        /// The position does not match.
        VERIFY_POSITION_MISMATCH = 2,
        /// The real-KV fingerprint does not match.
        VERIFY_REAL_KV_HASH_MISMATCH = 4,
        /// Write input assert: token differs.
        WRITE_TOKEN_MISMATCH = 8,
        /// Write input assert: position differs.
        WRITE_POSITION_MISMATCH = 16,
        /// Verify token check: token differs.
        VERIFY_TOKEN_MISMATCH = 32,
    }
}

codes! {
    /// `RealKvHashMode` values the kernels test (spec §2.11; anything else is ALL).
    REAL_KV_MODES {
        /// No fingerprint.
        REAL_KV_NONE = 0,
        /// The first 16 bytes of each source.
        REAL_KV_PARTIAL = 1,
    }
}

codes! {
    /// Codes of the status word (`enum StatusCode : i64` in the header); the fields `a..e`
    /// follow the code in words 1..=5.
    STATUS_CODES {
        /// Clear.
        ST_OK = 0,
        /// a = bs, b = write_req_capacity.
        ST_BATCH_EXCEEDS_CAPACITY = 1,
        /// a = bs, b = PLAN_MAX_ROWS.
        ST_BATCH_TOO_LARGE = 2,
        /// a = row, b = req_pool_index, c = table rows.
        ST_REQ_POOL_INDEX = 3,
        /// a = row, b = prefix_len, c = table width.
        ST_PREFIX_BEYOND_ROW = 4,
        /// a = row, b = req_pool_index, c = column, d = rows, e = cols.
        ST_EXPECTED_READ = 5,
        /// a = row.
        ST_WRITE_TOKEN_OVERFLOW = 6,
        /// a = slot, b = lut_len.
        ST_LUT_INDEX = 7,
        /// a = which array (`SLOT_ARRAYS`), b = index, c = slot, d = num_slots.
        ST_SLOT_OUT_OF_RANGE = 8,
        /// a = offset index, b = value, c = smallest allowed, d = largest.
        ST_WRITE_RANGE = 9,
        /// a = source, b = slot, c = row, d = num_rows.
        ST_REAL_KV_ROW = 10,
        /// a = bs, b = valid_lens length.
        ST_VALID_LENS_LENGTH = 11,
        /// a = bs.
        ST_NEGATIVE_BS = 12,
        /// a = offset index, b = value, c = smallest allowed, d = largest.
        ST_SCATTER_RANGE = 13,
        /// a = row, b = req_pool_index, c = pool rows.
        ST_POOL_ROW = 14,
        /// a = row, b = position, c = the block-table entry, d = block size.
        ST_BLOCK_RANGE = 15,
        /// a = row, b = query_starts[row], c = query_starts[row + 1].
        ST_QUERY_STARTS = 16,
    }
}

codes! {
    /// `which` of `ST_SLOT_OUT_OF_RANGE` (`enum SlotArray : i64` in the header).
    SLOT_ARRAYS {
        /// `verify_slot_indices`.
        SA_VERIFY_SLOT = 0,
        /// `verify_prev_slot_indices`.
        SA_VERIFY_PREV = 1,
        /// `out_cache_loc`.
        SA_OUT_CACHE_LOC = 2,
        /// `write_seed_slot_indices`.
        SA_WRITE_SEED = 3,
    }
}
