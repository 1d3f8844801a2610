//! The engine's sizes: the model (a small Llama for the CPU), the paged cache and the
//! scheduler's limits. One place, so the canary's capacities derive from the same constants.

/// Hidden width.
pub const HIDDEN: usize = 256;
/// Query heads.
pub const HEADS: usize = 8;
/// Key/value heads (grouped-query attention: `HEADS / KV_HEADS` query heads share one).
pub const KV_HEADS: usize = 2;
/// Width of one head.
pub const HEAD_DIM: usize = 32;
/// Decoder layers.
pub const LAYERS: usize = 2;
/// Vocabulary size.
pub const VOCAB: usize = 512;
/// Width of the SwiGLU MLP.
pub const INTERMEDIATE: usize = 512;
/// RoPE base.
pub const ROPE_THETA: f32 = 10_000.0;
/// RMSNorm epsilon.
pub const RMS_EPS: f64 = 1e-5;

/// Tokens per KV block (vLLM's `block_size`).
pub const BLOCK_SIZE: usize = 16;
/// Blocks in the pool, block 0 the reserved null block (mistral.rs): slot 0 is never a token's.
pub const NUM_BLOCKS: usize = 48;
/// Slots in the pool.
pub const NUM_SLOTS: usize = NUM_BLOCKS * BLOCK_SIZE;
/// Elements of one 16-byte chunk of vLLM's K layout (`x = 16 / element size`, f32).
pub const X: usize = 16 / core::mem::size_of::<f32>();
/// Bytes of one token's K (or V) in one layer.
pub const TOKEN_BYTES: usize = KV_HEADS * HEAD_DIM * core::mem::size_of::<f32>();

/// Block-table width: a sequence's blocks at most.
pub const MAX_BLOCKS: usize = 12;
/// Longest sequence (prompt and output).
pub const MAX_CONTEXT: usize = MAX_BLOCKS * BLOCK_SIZE;
/// Rows of the persistent batch (the largest bucket).
pub const MAX_ROWS: usize = 16;
/// Batch buckets (CUDA-graph sizes in the GPU path): a step's rows are padded to the next.
pub const ROW_BUCKETS: [usize; 5] = [1, 2, 4, 8, 16];
/// New tokens a step schedules at most (chunked prefill fills the rest of the budget).
pub const TOKEN_BUDGET: usize = 48;
/// Token buckets: a step's token arrays are padded (slot -1) to the next.
pub const TOKEN_BUCKETS: [usize; 4] = [8, 16, 32, 64];
/// The token arrays' length (the largest bucket): the budget plus one padding token per row.
pub const MAX_TOKENS: usize = 64;
/// Idle cached slots the canary sweeps a step.
pub const SWEEP_BUDGET: usize = 64;
/// Requests running at once at most.
pub const MAX_RUNNING: usize = 12;

const _: () = assert!(TOKEN_BUDGET + MAX_ROWS <= MAX_TOKENS);
const _: () = assert!(HEADS.is_multiple_of(KV_HEADS) && HEAD_DIM.is_multiple_of(X));

/// The smallest bucket of `buckets` that holds `n`.
pub fn bucket(buckets: &[usize], n: usize) -> usize {
    *buckets
        .iter()
        .find(|&&b| b >= n)
        .expect("n within the largest bucket")
}
