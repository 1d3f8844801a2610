//! The serving loop on the GPU (feature `cuda`): [`GpuBackend`] runs the engine's steps
//! ([`crate::engine::Engine`]: arrivals, the block allocator with prefix sharing and
//! copy-on-write, chunked prefill, decode, preemption, forks, bucketed batches and the six bug
//! flags, all unchanged from the CPU path) with the decoder at the width on candle's
//! CUDA backend and `mistralrs-paged-attn`'s kernels, and the canary on candle's stream
//! ([`crate::gpu_canary`]).
//!
//! The scheduler's limits are the CPU path's ([`crate::config`]: 16 rows, 48 blocks of 16
//! tokens, 64 tokens a step), so one step is small; the model is not (hidden 4096, 32 query
//! heads, 8 KV heads of 128, bf16). Each step uploads the host [`StepArrays`] into device arrays
//! allocated once (as an engine keeps its persistent batch), then per layer:
//! `reshape_and_cache` writes every token's K and V at the slot mapping (padding -1 skipped);
//! decode rows attend through `paged_attention` (the rows' block tables and context lengths,
//! gathered from the device arrays); a prefill chunk attends over its context gathered from the
//! paged cache through its block-table row (candle ops: `index_select` of its blocks, the
//! layouts permuted to token-major) and causally masked. The sampled tokens' logits come back to
//! the host for greedy sampling (the best and the second best, as on the CPU).

use crate::backend::{ModelBackend, Stepped};
use crate::batch::StepArrays;
use crate::block_allocator::BlockAllocator;
use crate::canary_common::Finding;
use crate::config::{BLOCK_SIZE, MAX_BLOCKS, MAX_CONTEXT, MAX_ROWS, MAX_TOKENS, NUM_BLOCKS};
use crate::gpu::{
    attend_causal, cuda_device, flip_k_byte, upload, GpuKv, GpuModel, HEADS, HEAD_DIM, KV_HEADS,
};
use crate::gpu_canary::GpuEngineCanary;
use crate::Result;
use candle_core::{DType, Device, Tensor};

type R<T> = candle_core::Result<T>;

/// The step's arrays on the device, at the engine's capacities (allocated once, uploaded in
/// place each step), in the engine's element types.
pub struct ServeArrays {
    /// `[MAX_ROWS, MAX_BLOCKS]` u32 block ids by batch row.
    pub block_tables: Tensor,
    /// `[MAX_ROWS, MAX_CONTEXT]` u32 token ids by batch row (the expected-token pool).
    pub token_table: Tensor,
    /// `[MAX_ROWS]` u32, whole context per row.
    pub context_lens: Tensor,
    /// `[MAX_ROWS]` u32, new tokens per row.
    pub query_lens: Tensor,
    /// `[1]` u32, the step's rows (the canary reads it as its `i32` bits: candle 0.10 has no
    /// `i32` copy or fill kernels, so an `I32` tensor cannot be written in place).
    pub bs: Tensor,
    /// `[MAX_TOKENS]` u32.
    pub input_ids: Tensor,
    /// `[MAX_TOKENS]` i64.
    pub positions: Tensor,
    /// `[MAX_TOKENS]` i64, -1 padding.
    pub slot_mapping: Tensor,
    /// `[MAX_TOKENS]` u32: each token's id as the request's transcript has it.
    pub expected_ids: Tensor,
    /// `[MAX_TOKENS]` i64.
    pub expected_positions: Tensor,
}

impl ServeArrays {
    /// Zeroed arrays on `dev`.
    pub fn new(dev: &Device) -> R<Self> {
        let u32s = |n| Tensor::zeros(n, DType::U32, dev);
        let i64s = |n| Tensor::zeros(n, DType::I64, dev);
        Ok(ServeArrays {
            block_tables: u32s(MAX_ROWS * MAX_BLOCKS)?,
            token_table: u32s(MAX_ROWS * MAX_CONTEXT)?,
            context_lens: u32s(MAX_ROWS)?,
            query_lens: u32s(MAX_ROWS)?,
            bs: Tensor::zeros(1, DType::U32, dev)?,
            input_ids: u32s(MAX_TOKENS)?,
            positions: i64s(MAX_TOKENS)?,
            slot_mapping: Tensor::full(-1i64, MAX_TOKENS, dev)?,
            expected_ids: u32s(MAX_TOKENS)?,
            expected_positions: i64s(MAX_TOKENS)?,
        })
    }

    /// Uploads the host arrays (whole: a few tens of kilobytes a step).
    pub fn upload(&self, a: &StepArrays) -> R<()> {
        upload(&self.block_tables, &a.block_tables)?;
        upload(&self.token_table, &a.token_table)?;
        upload(&self.context_lens, &a.context_lens)?;
        upload(&self.query_lens, &a.query_lens)?;
        upload(&self.bs, &[a.bs as u32])?;
        upload(&self.input_ids, &a.input_ids)?;
        upload(&self.positions, &a.positions)?;
        upload(&self.slot_mapping, &a.slot_mapping)?;
        upload(&self.expected_ids, &a.expected_ids)?;
        upload(&self.expected_positions, &a.expected_positions)
    }
}

/// The GPU serving loop's model and canary.
pub struct GpuBackend {
    model: GpuModel,
    kv: GpuKv,
    arrays: ServeArrays,
    canary: Option<GpuEngineCanary>,
}

impl GpuBackend {
    /// `layers` layers of random weights on CUDA device 0 (candle's stream a real one, so the
    /// canary can share it), caches of the engine's 48 blocks, the canary if `canary`.
    pub fn new(layers: usize, canary: bool) -> Result<Self> {
        let (dev, stream) = cuda_device()?;
        let kv = GpuKv::with_blocks(&dev, layers, NUM_BLOCKS)?;
        let arrays = ServeArrays::new(&dev)?;
        let canary = match canary {
            true => Some(GpuEngineCanary::new(stream, &arrays, &kv)?),
            false => None,
        };
        Ok(GpuBackend {
            model: GpuModel::new(&dev, layers)?,
            kv,
            arrays,
            canary,
        })
    }
}

/// The model's forward pass over the uploaded arrays `d` (host twins `a`): the logits of the
/// sampled tokens.
fn forward(model: &GpuModel, kv: &GpuKv, d: &ServeArrays, a: &StepArrays) -> R<Vec<Vec<f32>>> {
    let t = a.tokens;
    let (ids, pos) = (d.input_ids.narrow(0, 0, t)?, d.positions.narrow(0, 0, t)?);
    let slots = d.slot_mapping.narrow(0, 0, t)?;
    let x = model.hidden(kv, &ids, &pos, &slots, |l, q, _, _| {
        rows_attention(q, &kv.k[l], &kv.v[l], d, a)
    })?;
    if a.sample.is_empty() {
        return Ok(Vec::new());
    }
    let picked = Tensor::from_slice(&a.sample, a.sample.len(), model.device())?;
    let logits = model.logits(&x.index_select(&picked, 0)?)?;
    logits.to_dtype(DType::F32)?.to_vec2::<f32>()
}

/// Attention of the step's rows (`q`: `[tokens, heads, head_dim]`, rows' tokens in row order)
/// over layer `(kc, vc)`: decode rows (one new token) through `paged_attention`, prefill
/// chunks over their context gathered through the block table; padding tokens get zeros.
fn rows_attention(
    q: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
    d: &ServeArrays,
    a: &StepArrays,
) -> R<Tensor> {
    let dev = q.device();
    let zeros = |n: usize| Tensor::zeros((n, HEADS, HEAD_DIM), DType::BF16, dev);
    let (mut starts, mut t0) = (Vec::with_capacity(a.bs), 0usize);
    for r in 0..a.bs {
        starts.push(t0);
        t0 += a.query_lens[r] as usize;
    }
    let decode: Vec<usize> = (0..a.bs)
        .filter(|&r| a.query_lens[r] == 1 && a.context_lens[r] > 0)
        .collect();
    let decoded = match decode.is_empty() {
        true => None,
        false => {
            let tokens: Vec<u32> = decode.iter().map(|&r| starts[r] as u32).collect();
            let rows: Vec<u32> = decode.iter().map(|&r| r as u32).collect();
            let rows = Tensor::from_slice(&rows, rows.len(), dev)?;
            let tables = d.block_tables.reshape((MAX_ROWS, MAX_BLOCKS))?;
            Some(mistralrs_paged_attn::paged_attention(
                &q.index_select(&Tensor::from_slice(&tokens, tokens.len(), dev)?, 0)?,
                None,
                None,
                kc,
                vc,
                &tables.index_select(&rows, 0)?,
                &d.context_lens.index_select(&rows, 0)?,
                None,
                MAX_CONTEXT,
                1.0 / (HEAD_DIM as f32).sqrt(),
                1.0,
                None,
            )?)
        }
    };
    let mut pieces = Vec::with_capacity(a.bs + 1);
    for (r, &start) in starts.iter().enumerate() {
        let (context, query) = (a.context_lens[r] as usize, a.query_lens[r] as usize);
        if let (Some(i), Some(out)) = (decode.iter().position(|&x| x == r), &decoded) {
            pieces.push(out.narrow(0, i, 1)?);
        } else if context > 0 {
            let row = &a.block_tables[r * MAX_BLOCKS..][..context.div_ceil(BLOCK_SIZE)];
            let (k, v) = gather_context(kc, vc, row, context)?;
            pieces.push(attend_causal(
                &q.narrow(0, start, query)?,
                &k,
                &v,
                context - query,
            )?);
        } else if query > 0 {
            pieces.push(zeros(query)?);
        }
    }
    if t0 < a.tokens {
        pieces.push(zeros(a.tokens - t0)?);
    }
    Tensor::cat(&pieces, 0)
}

/// A row's first `context` tokens' K and V (`[context, kv_heads, head_dim]`) gathered from the
/// paged caches (K `[blocks, kv_heads, head_dim / x, block, x]`, V `[blocks, kv_heads, head_dim,
/// block]`) through its blocks.
fn gather_context(kc: &Tensor, vc: &Tensor, blocks: &[u32], context: usize) -> R<(Tensor, Tensor)> {
    let n = blocks.len();
    let ids = Tensor::from_slice(blocks, n, kc.device())?;
    let k = (kc.index_select(&ids, 0)?)
        .permute((0, 3, 1, 2, 4))?
        .contiguous()?
        .reshape((n * BLOCK_SIZE, KV_HEADS, HEAD_DIM))?
        .narrow(0, 0, context)?;
    let v = (vc.index_select(&ids, 0)?)
        .permute((0, 3, 1, 2))?
        .contiguous()?
        .reshape((n * BLOCK_SIZE, KV_HEADS, HEAD_DIM))?
        .narrow(0, 0, context)?;
    Ok((k, v))
}

impl ModelBackend for GpuBackend {
    fn step(&mut self, step: u64, a: &StepArrays) -> Result<Stepped> {
        self.arrays.upload(a)?;
        let (model, kv, arrays) = (&self.model, &self.kv, &self.arrays);
        let forward = || -> Result<_> { Ok(forward(model, kv, arrays, a)?) };
        let (logits, findings) = match &mut self.canary {
            Some(c) => c.step(step, a, forward)?,
            None => (forward()?, Vec::new()),
        };
        Ok(Stepped::from_logits(&logits, findings))
    }

    fn copy_block(&mut self, from: u32, to: u32) -> Result<()> {
        let (from, to) = (from as usize, to as usize);
        for cache in self.kv.k.iter().chain(&self.kv.v) {
            // A copy of the source block: `narrow` along dim 0 of a contiguous cache is already
            // contiguous (`contiguous()` would return the same storage, which `slice_set`
            // refuses: the serving loop's first GPU run stopped there).
            cache.slice_set(&cache.narrow(0, from, 1)?.copy()?, 0, to)?;
        }
        if let Some(c) = &mut self.canary {
            c.copy_block(from as u32, to as u32)?;
        }
        Ok(())
    }

    fn flip_k_byte(&mut self, slot: usize) -> Result<()> {
        flip_k_byte(&self.kv.k[0], slot)
    }

    fn sweep(&mut self, step: u64, alloc: &BlockAllocator) -> Result<Vec<Finding>> {
        match &mut self.canary {
            Some(c) => c.sweep(step, alloc),
            None => Ok(Vec::new()),
        }
    }

    fn finish(&mut self) -> Result<Vec<Finding>> {
        match &mut self.canary {
            Some(c) => c.finish(),
            None => Ok(Vec::new()),
        }
    }

    fn checked(&self) -> (u64, u64) {
        self.canary.as_ref().map_or((0, 0), |c| c.checked)
    }
}
