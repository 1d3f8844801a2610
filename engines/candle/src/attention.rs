//! Paged attention: each query token of batch row `r` attends to its row's context through the
//! block table (`block_tables[r][pos / B] * B + pos % B`) and `context_lens[r]` (the whole
//! context, the step's new tokens included), causally. vLLM's `paged_attention` semantics; on the
//! CPU a host loop over the cache tensors' storage (the GPU path calls `mistralrs-paged-attn`).

use crate::config::{BLOCK_SIZE, HEADS, HEAD_DIM, KV_HEADS};
use crate::kv_cache::{element_index, Half, PagedKvCache};
use candle_core::{Device, Tensor};

/// The step's attention inputs, as the engine holds them (bucketed: columns may be longer
/// than `bs`).
#[derive(Clone, Copy, Debug)]
pub struct AttentionInputs<'a> {
    /// Batch rows (the bucket).
    pub bs: usize,
    /// `[rows, max_blocks]` u32 block ids, by batch row.
    pub block_tables: &'a [u32],
    /// Block-table width.
    pub max_blocks: usize,
    /// Whole context per row, new tokens included (0: a padding row).
    pub context_lens: &'a [u32],
    /// New tokens per row (a padding row's are padding tokens).
    pub query_lens: &'a [u32],
}

/// Attention of `q` (`[tokens, heads, head_dim]`, rows' tokens in row order) over layer
/// `layer`'s cache; padding tokens get zeros. Returns `[tokens, heads * head_dim]`.
pub fn paged_attention(
    q: &Tensor,
    cache: &PagedKvCache,
    layer: usize,
    inputs: &AttentionInputs<'_>,
) -> candle_core::Result<Tensor> {
    let tokens = q.dim(0)?;
    let q = q.flatten_all()?.to_vec1::<f32>()?;
    let mut out = vec![0f32; tokens * HEADS * HEAD_DIM];
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let group = HEADS / KV_HEADS;
    cache.with_data(layer, |k, v| {
        let mut t0 = 0;
        let mut scores = Vec::new();
        for r in 0..inputs.bs {
            let (context, query) = (
                inputs.context_lens[r] as usize,
                inputs.query_lens[r] as usize,
            );
            let row = &inputs.block_tables[r * inputs.max_blocks..][..inputs.max_blocks];
            if context > 0 {
                for j in 0..query {
                    let t = t0 + j;
                    let pos = context - query + j;
                    for h in 0..HEADS {
                        let g = h / group;
                        let qh = &q[(t * HEADS + h) * HEAD_DIM..][..HEAD_DIM];
                        scores.clear();
                        for p in 0..=pos {
                            let slot = row[p / BLOCK_SIZE] as usize * BLOCK_SIZE + p % BLOCK_SIZE;
                            let dot: f32 = (0..HEAD_DIM)
                                .map(|d| qh[d] * k[element_index(Half::K, slot, g, d)])
                                .sum();
                            scores.push(dot * scale);
                        }
                        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        let mut total = 0.0;
                        for s in scores.iter_mut() {
                            *s = (*s - max).exp();
                            total += *s;
                        }
                        let o = &mut out[(t * HEADS + h) * HEAD_DIM..][..HEAD_DIM];
                        for (p, &w) in scores.iter().enumerate() {
                            let slot = row[p / BLOCK_SIZE] as usize * BLOCK_SIZE + p % BLOCK_SIZE;
                            for (d, od) in o.iter_mut().enumerate() {
                                *od += w / total * v[element_index(Half::V, slot, g, d)];
                            }
                        }
                    }
                }
            }
            t0 += query;
        }
    })?;
    Tensor::from_vec(out, (tokens, HEADS * HEAD_DIM), &Device::Cpu)
}
