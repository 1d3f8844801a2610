//! The kernels' argument structs, field for field as in `kernels/*.cu`.
//!
//! Every field is 8 bytes wide (typed device addresses [`DevPtr`], numbers as `i64`), so
//! `#[repr(C)]` and the C++ structs agree without padding rules. The layouts are the one source:
//! `build.rs` includes this file and writes `sizeof`/`offsetof` static asserts of every field into
//! `$OUT_DIR/kv_canary_shared.h`, which each `.cu` file checks its struct against.
//!
//! Plain Rust without paths into the crate (the build script includes it).

use super::ptr::DevPtr;

/// The layout of one argument struct: its C++ name, size and field offsets.
#[allow(dead_code)] // read by build.rs
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// The struct's name (the same in Rust and C++).
    pub name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// `(field, offsetof)` in declaration order.
    pub fields: &'static [(&'static str, usize)],
}

/// Declares an argument struct and its [`Layout`].
macro_rules! kernel_args {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $name {
            /// The layout the kernels are checked against.
            #[allow(dead_code)] // read by build.rs
            pub const LAYOUT: Layout = Layout {
                name: stringify!($name),
                size: core::mem::size_of::<$name>(),
                fields: &[$((stringify!($field), core::mem::offset_of!($name, $field))),*],
            };
        }
    };
}

kernel_args! {
    /// `kvc::RealKv` (kernels/common.cuh).
    #[derive(Default)]
    RealKv {
        /// Source base addresses.
        base: [DevPtr<u8>; 4],
        /// Bytes between rows.
        row_stride: [i64; 4],
        /// Rows of each source.
        num_rows: [i64; 4],
        /// Tokens per row.
        page_size: [i64; 4],
        /// Bytes per token.
        bytes_per_token: [i64; 4],
        /// Bytes folded per token.
        read_bytes: [i64; 4],
        /// Sources in use (0..=4).
        num_sources: i64,
        /// `RealKvHashMode`.
        mode: i64,
        /// Bytes from one token's origin to the next's (`bytes_per_token` for a strip).
        token_stride: [i64; 4],
        /// 0 for a strip; else the bytes of a gathered piece's elements (16, 8, 4 or 2).
        gather_bytes: [i64; 4],
        /// Gathered: consecutive pieces of a group (a head).
        pieces_per_group: [i64; 4],
        /// Gathered: bytes between the pieces of a group.
        piece_stride: [i64; 4],
        /// Gathered: bytes between groups.
        group_stride: [i64; 4],
        /// Gathered: bytes between a piece's elements.
        gather_stride: [i64; 4],
    }
}

kernel_args! {
    /// `kvc::PlanArgs` (kernels/plan.cu).
    PlanArgs {
        /// Batch column.
        req_pool_indices: DevPtr<i64>,
        /// Batch column.
        prefix_lens: DevPtr<i64>,
        /// Batch column.
        extend_lens: DevPtr<i64>,
        /// The batch size.
        bs: DevPtr<i32>,
        /// `req_to_token`.
        table: DevPtr<i32>,
        /// Its rows.
        table_rows: i64,
        /// Its width.
        table_width: i64,
        /// The SWA LUT (null: none).
        lut: DevPtr<i64>,
        /// Its length.
        lut_len: i64,
        /// The expected-token pool (null: none).
        pool: DevPtr<i32>,
        /// Its rows.
        pool_rows: i64,
        /// Its width.
        pool_width: i64,
        /// Valid lengths.
        valid_lens: DevPtr<i64>,
        /// Their count.
        valid_lens_len: DevPtr<i32>,
        /// SWA window (0: none).
        window: i64,
        /// Position offset.
        offset: i64,
        /// Verify plan outputs.
        v_slots: DevPtr<i64>,
        /// Verify plan outputs.
        v_tokens: DevPtr<i64>,
        /// Verify plan outputs.
        v_positions: DevPtr<i64>,
        /// Verify plan outputs.
        v_prevs: DevPtr<i64>,
        /// Verify plan outputs.
        v_num_valid: DevPtr<i32>,
        /// Verify plan outputs.
        v_enable: DevPtr<i32>,
        /// Verify plan outputs: the entries asked for (`T`).
        v_requested: DevPtr<i64>,
        /// Verify capacity.
        verify_capacity: i64,
        /// Write plan outputs.
        w_offsets: DevPtr<i64>,
        /// Write plan outputs.
        w_seeds: DevPtr<i64>,
        /// Write plan outputs.
        w_num_valid_reqs: DevPtr<i32>,
        /// Write-request capacity.
        write_capacity: i64,
        /// The stream's status word.
        status: DevPtr<i64>,
        /// The stream's launch scratch.
        scratch: DevPtr<i64>,
        /// Rows in shared memory.
        smem_rows: i64,
        /// Blocks that copy entries.
        entry_blocks: i64,
        /// Tokens a table cell places: 1 for a token table, the block size of a block table.
        block: i64,
        /// Tokens a table row places (`table_width x block`, < 2^31).
        table_tokens: i64,
        /// 1: the table's cells are `u32` (zero-extended), 0: `i32`.
        table_unsigned: i64,
        /// The batch columns: 0 SGLang's (`req_pool_indices`, `prefix_lens`, `extend_lens`),
        /// 1 vLLM's `context_lens` and query lengths, 2 `context_lens` and cumulative query
        /// offsets (the first two column fields hold them; the table is indexed by batch row).
        layout: i64,
        /// The columns' element types, a byte each (column k at bits 8k): 0 `i64`, 1 `i32`,
        /// 2 `u32`; byte 3 the valid lengths', byte 4 the expected-token pool's cells (1 `i32`,
        /// 2 `u32`, 0 no pool).
        kinds: i64,
    }
}

kernel_args! {
    /// `kvc::VerifyArgs` (kernels/verify.cu).
    VerifyArgs {
        /// Plan arrays.
        slots: DevPtr<i64>,
        /// Plan arrays.
        tokens: DevPtr<i64>,
        /// Plan arrays.
        positions: DevPtr<i64>,
        /// Plan arrays.
        prevs: DevPtr<i64>,
        /// Plan scalars.
        num_valid: DevPtr<i32>,
        /// Plan scalars.
        enable: DevPtr<i32>,
        /// Plan capacity.
        capacity: i64,
        /// Canary bytes.
        buf: DevPtr<u8>,
        /// Canary slots.
        num_slots: i64,
        /// Slot stride in bytes.
        stride: i64,
        /// Violation rows.
        ring: DevPtr<i64>,
        /// Ring rows.
        ring_capacity: i64,
        /// Ring write index.
        write_index: DevPtr<i32>,
        /// Health counter.
        slot_counter: DevPtr<i64>,
        /// Health counter.
        kernel_counter: DevPtr<i64>,
        /// Launch tag.
        tag: i64,
        /// The stream's status word.
        status: DevPtr<i64>,
        /// Real-KV sources.
        kv: RealKv,
        /// 1: the plan is complete before the launch can start (this crate's head-stage
        /// launches lie between them on the stream), so the PARTIAL kernel loads its first
        /// plan columns before its wait.
        early_columns: i64,
    }
}

kernel_args! {
    /// `kvc::WriteArgs` (kernels/write.cu).
    WriteArgs {
        /// Write plan.
        offsets: DevPtr<i64>,
        /// Write plan.
        seeds: DevPtr<i64>,
        /// Write plan.
        num_valid_reqs: DevPtr<i32>,
        /// Write-request capacity.
        req_capacity: i64,
        /// Per-token inputs.
        input_ids: DevPtr<i64>,
        /// Per-token inputs.
        positions: DevPtr<i64>,
        /// Per-token inputs.
        out_cache_loc: DevPtr<i64>,
        /// Write-entry capacity.
        entry_capacity: i64,
        /// Expected tokens (null: assert off).
        exp_tokens: DevPtr<i64>,
        /// Expected positions (null: assert off).
        exp_positions: DevPtr<i64>,
        /// Chain-position assert flag (null: fixed).
        chain_assert: DevPtr<i32>,
        /// The fixed chain-position assert.
        chain_assert_fixed: i64,
        /// Canary bytes.
        buf: DevPtr<u8>,
        /// Canary slots.
        num_slots: i64,
        /// Slot stride in bytes.
        stride: i64,
        /// Violation rows.
        ring: DevPtr<i64>,
        /// Ring rows.
        ring_capacity: i64,
        /// Ring write index.
        write_index: DevPtr<i32>,
        /// Health counter.
        slot_counter: DevPtr<i64>,
        /// Health counter.
        kernel_counter: DevPtr<i64>,
        /// Launch tag.
        tag: i64,
        /// The stream's status word.
        status: DevPtr<i64>,
        /// Real-KV sources.
        kv: RealKv,
        /// 1: run the reading half of decode-sized requests (loads, folds, the chain) before
        /// waiting for the grid ahead (its launch overlapped; see `write_body` in
        /// kernels/write.cu), because the grid ahead is one of this crate's verify or write
        /// launches of the same stage, which write nothing that half reads
        /// (`DeviceSettings::following_verify`); 0: wait first.
        early_fold: i64,
        /// The element kinds of `input_ids`, `positions`, `out_cache_loc`, `exp_tokens` and
        /// `exp_positions`, a byte each (0 `i64`, 1 `i32`, 2 `u32`).
        kinds: i64,
    }
}

kernel_args! {
    /// `kvc::VerifyPairArgs` (kernels/verify.cu): the K and the V half of a K+V pair launch
    /// (grid y = 2; blocks of y 0 run `k`, of y 1 run `v`).
    VerifyPairArgs {
        /// The K half's launch.
        k: VerifyArgs,
        /// The V half's launch.
        v: VerifyArgs,
    }
}

kernel_args! {
    /// `kvc::WritePairArgs` (kernels/write.cu): the K and the V half of a K+V pair launch.
    WritePairArgs {
        /// The K half's launch.
        k: WriteArgs,
        /// The V half's launch.
        v: WriteArgs,
    }
}

kernel_args! {
    /// `kvc::PlanVerifyHeadArgs` (kernels/plan.cu): the plan and the K half's head verify in
    /// one launch.
    PlanVerifyHeadArgs {
        /// The plan.
        plan: PlanArgs,
        /// The K half's head verify.
        k: VerifyArgs,
    }
}

kernel_args! {
    /// `kvc::PlanVerifyHeadPairArgs` (kernels/plan.cu): the plan and the head verify of both
    /// halves in one launch.
    PlanVerifyHeadPairArgs {
        /// The plan.
        plan: PlanArgs,
        /// The K half's head verify.
        k: VerifyArgs,
        /// The V half's head verify.
        v: VerifyArgs,
    }
}

kernel_args! {
    /// `kvc::WriteEndsArgs` (kernels/write.cu): a step's tail writes and its head
    /// writes in one launch (grid y = 4).
    WriteEndsArgs {
        /// The K half's tail write.
        tail_k: WriteArgs,
        /// The V half's tail write.
        tail_v: WriteArgs,
        /// The K half's head write (no real-KV source).
        head_k: WriteArgs,
        /// The V half's head write (no real-KV source).
        head_v: WriteArgs,
    }
}

kernel_args! {
    /// `kvc::ScatterArgs` (kernels/scatter.cu).
    ScatterArgs {
        /// Flat token ids.
        flat_in: DevPtr<i64>,
        /// Their count.
        num_tokens: i64,
        /// Per-request offsets.
        offsets: DevPtr<i64>,
        /// Pool rows.
        req_pool_indices: DevPtr<i64>,
        /// The pool.
        pool: DevPtr<i32>,
        /// Its rows.
        pool_rows: i64,
        /// Its width.
        pool_width: i64,
        /// The stream's status word.
        status: DevPtr<i64>,
    }
}

kernel_args! {
    /// `kvc::ReadbackArgs` (kernels/readback.cu): up to 16 pieces copied into a report's
    /// device-mapped pinned staging.
    #[derive(Default)]
    ReadbackArgs {
        /// Device address of each piece.
        src: [DevPtr<u8>; 16],
        /// Device-mapped address of each piece's place in the staging.
        dst: [DevPtr<u8>; 16],
        /// Bytes of each piece (a multiple of 4).
        bytes: [i64; 16],
        /// Per piece, null or a device `i32` count: only `clamp(count, 0, bytes / unit)` units
        /// of the piece are copied (the ring rows a step recorded, not the whole ring).
        limit: [DevPtr<i32>; 16],
        /// Bytes of one counted unit (a multiple of 4; used with `limit`).
        unit: [i64; 16],
        /// Per piece, 1: the source words are zeroed once copied (the stream's status word, which
        /// a step's or a sweep's report consumes); 0: left as they are.
        consume: [i64; 16],
        /// Pieces in use.
        pieces: i64,
    }
}

kernel_args! {
    /// `kvc::RingClearArgs` (kernels/readback.cu): a violation ring emptied in one launch.
    RingClearArgs {
        /// The ring's rows.
        rows: DevPtr<i64>,
        /// Their `i64` words (capacity x 8).
        words: i64,
        /// The ring's write index.
        write_index: DevPtr<i32>,
    }
}

/// Every argument struct, for the generated layout asserts.
#[allow(dead_code)] // read by build.rs
pub const LAYOUTS: [Layout; 12] = [
    RealKv::LAYOUT,
    PlanArgs::LAYOUT,
    VerifyArgs::LAYOUT,
    VerifyPairArgs::LAYOUT,
    WriteArgs::LAYOUT,
    WritePairArgs::LAYOUT,
    WriteEndsArgs::LAYOUT,
    PlanVerifyHeadArgs::LAYOUT,
    PlanVerifyHeadPairArgs::LAYOUT,
    ScatterArgs::LAYOUT,
    ReadbackArgs::LAYOUT,
    RingClearArgs::LAYOUT,
];
