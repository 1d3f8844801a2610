//! The kernels' argument structs, field for field as in `kernels/*.cu`.
//!
//! Every field is 8 bytes wide (device addresses as `u64`, numbers as `i64`), so `#[repr(C)]`
//! and the C++ structs agree without padding rules; both sides assert the total size.

/// `kvc::RealKv` (kernels/common.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RealKvArgs {
    pub(crate) base: [u64; 4],
    pub(crate) row_stride: [i64; 4],
    pub(crate) num_rows: [i64; 4],
    pub(crate) page_size: [i64; 4],
    pub(crate) bytes_per_token: [i64; 4],
    pub(crate) read_bytes: [i64; 4],
    pub(crate) num_sources: i64,
    pub(crate) mode: i64,
}

/// `kvc::PlanArgs` (kernels/plan.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanArgs {
    pub(crate) req_pool_indices: u64,
    pub(crate) prefix_lens: u64,
    pub(crate) extend_lens: u64,
    pub(crate) bs: u64,
    pub(crate) table: u64,
    pub(crate) table_rows: i64,
    pub(crate) table_width: i64,
    pub(crate) lut: u64,
    pub(crate) lut_len: i64,
    pub(crate) pool: u64,
    pub(crate) pool_rows: i64,
    pub(crate) pool_width: i64,
    pub(crate) valid_lens: u64,
    pub(crate) valid_lens_len: u64,
    pub(crate) window: i64,
    pub(crate) offset: i64,
    pub(crate) v_slots: u64,
    pub(crate) v_tokens: u64,
    pub(crate) v_positions: u64,
    pub(crate) v_prevs: u64,
    pub(crate) v_num_valid: u64,
    pub(crate) v_enable: u64,
    pub(crate) verify_capacity: i64,
    pub(crate) w_offsets: u64,
    pub(crate) w_seeds: u64,
    pub(crate) w_num_valid_reqs: u64,
    pub(crate) write_capacity: i64,
    pub(crate) status: u64,
    pub(crate) scratch: u64,
    pub(crate) smem_rows: i64,
    pub(crate) entry_blocks: i64,
}

/// `kvc::VerifyArgs` (kernels/verify.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct VerifyArgs {
    pub(crate) slots: u64,
    pub(crate) tokens: u64,
    pub(crate) positions: u64,
    pub(crate) prevs: u64,
    pub(crate) num_valid: u64,
    pub(crate) enable: u64,
    pub(crate) capacity: i64,
    pub(crate) buf: u64,
    pub(crate) num_slots: i64,
    pub(crate) stride: i64,
    pub(crate) ring: u64,
    pub(crate) ring_capacity: i64,
    pub(crate) write_index: u64,
    pub(crate) slot_counter: u64,
    pub(crate) kernel_counter: u64,
    pub(crate) tag: i64,
    pub(crate) status: u64,
    pub(crate) kv: RealKvArgs,
}

/// `kvc::WriteArgs` (kernels/write.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteArgs {
    pub(crate) offsets: u64,
    pub(crate) seeds: u64,
    pub(crate) num_valid_reqs: u64,
    pub(crate) req_capacity: i64,
    pub(crate) input_ids: u64,
    pub(crate) positions: u64,
    pub(crate) out_cache_loc: u64,
    pub(crate) entry_capacity: i64,
    pub(crate) exp_tokens: u64,
    pub(crate) exp_positions: u64,
    pub(crate) chain_assert: u64,
    pub(crate) chain_assert_fixed: i64,
    pub(crate) buf: u64,
    pub(crate) num_slots: i64,
    pub(crate) stride: i64,
    pub(crate) ring: u64,
    pub(crate) ring_capacity: i64,
    pub(crate) write_index: u64,
    pub(crate) slot_counter: u64,
    pub(crate) kernel_counter: u64,
    pub(crate) tag: i64,
    pub(crate) status: u64,
    pub(crate) kv: RealKvArgs,
}

/// `kvc::ScatterArgs` (kernels/scatter.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScatterArgs {
    pub(crate) flat_in: u64,
    pub(crate) num_tokens: i64,
    pub(crate) offsets: u64,
    pub(crate) req_pool_indices: u64,
    pub(crate) pool: u64,
    pub(crate) pool_rows: i64,
    pub(crate) pool_width: i64,
    pub(crate) status: u64,
}

static_assertions::const_assert_eq!(core::mem::size_of::<ScatterArgs>(), 8 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<RealKvArgs>(), 26 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<PlanArgs>(), 31 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<VerifyArgs>(), 17 * 8 + 26 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<WriteArgs>(), 22 * 8 + 26 * 8);
