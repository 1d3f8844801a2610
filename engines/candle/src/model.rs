//! A Llama-style decoder with random weights (seeded, deterministic): token embedding, `LAYERS`
//! blocks of RMSNorm, grouped-query attention with RoPE over the paged cache, RMSNorm and a
//! SwiGLU MLP, a final RMSNorm and the LM head. Written with candle ops; attention reads the
//! paged cache ([`paged_attention`]).

use crate::attention::{paged_attention, AttentionInputs};
use crate::config::{
    HEADS, HEAD_DIM, HIDDEN, INTERMEDIATE, KV_HEADS, LAYERS, MAX_CONTEXT, RMS_EPS, ROPE_THETA,
    VOCAB,
};
use crate::kv_cache::PagedKvCache;
use crate::rng::Rng;
use candle_core::{DType, Device, Result, Tensor, D};

struct Layer {
    attn_norm: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    mlp_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

/// The model's weights and RoPE tables.
pub struct Model {
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
    cos: Tensor,
    sin: Tensor,
}

/// One step's model inputs: the flat token arrays (bucketed, padding included) and the
/// attention inputs.
#[derive(Clone, Copy, Debug)]
pub struct ForwardInputs<'a> {
    /// Token ids (u32).
    pub input_ids: &'a [u32],
    /// Positions (i64).
    pub positions: &'a [i64],
    /// Where each token's K and V go (-1: padding).
    pub slot_mapping: &'a [i64],
    /// Block tables and lengths.
    pub attention: AttentionInputs<'a>,
}

fn random(rng: &mut Rng, rows: usize, cols: usize, scale: f32) -> Result<Tensor> {
    let data: Vec<f32> = (0..rows * cols).map(|_| rng.symmetric(scale)).collect();
    Tensor::from_vec(data, (rows, cols), &Device::Cpu)
}

fn rms_norm(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + RMS_EPS)?.sqrt()?)?
        .broadcast_mul(weight)
}

/// Rotary embedding of `x` (`[tokens, heads, head_dim]`), rotate-half convention.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = HEAD_DIM / 2;
    let (x1, x2) = (x.narrow(2, 0, half)?, x.narrow(2, half, half)?);
    let (c, s) = (cos.unsqueeze(1)?, sin.unsqueeze(1)?);
    let a = (x1.broadcast_mul(&c)? - x2.broadcast_mul(&s)?)?;
    let b = (x1.broadcast_mul(&s)? + x2.broadcast_mul(&c)?)?;
    Tensor::cat(&[a, b], 2)
}

impl Model {
    /// Random weights from `seed`.
    pub fn new(seed: u64) -> Result<Self> {
        let mut rng = Rng::new(seed);
        let ones = |n| Tensor::ones(n, DType::F32, &Device::Cpu);
        let s_in = 1.0 / (HIDDEN as f32).sqrt();
        let s_mid = 1.0 / (INTERMEDIATE as f32).sqrt();
        let mut layers = Vec::new();
        for _ in 0..LAYERS {
            layers.push(Layer {
                attn_norm: ones(HIDDEN)?,
                wq: random(&mut rng, HIDDEN, HEADS * HEAD_DIM, s_in)?,
                wk: random(&mut rng, HIDDEN, KV_HEADS * HEAD_DIM, s_in)?,
                wv: random(&mut rng, HIDDEN, KV_HEADS * HEAD_DIM, s_in)?,
                wo: random(&mut rng, HEADS * HEAD_DIM, HIDDEN, s_in)?,
                mlp_norm: ones(HIDDEN)?,
                gate: random(&mut rng, HIDDEN, INTERMEDIATE, s_in)?,
                up: random(&mut rng, HIDDEN, INTERMEDIATE, s_in)?,
                down: random(&mut rng, INTERMEDIATE, HIDDEN, s_mid)?,
            });
        }
        let half = HEAD_DIM / 2;
        let mut angles = Vec::with_capacity(MAX_CONTEXT * half);
        for p in 0..MAX_CONTEXT {
            for i in 0..half {
                let freq = ROPE_THETA.powf(-2.0 * i as f32 / HEAD_DIM as f32);
                angles.push(p as f32 * freq);
            }
        }
        let angles = Tensor::from_vec(angles, (MAX_CONTEXT, half), &Device::Cpu)?;
        Ok(Model {
            embed: random(&mut rng, VOCAB, HIDDEN, 1.0)?,
            layers,
            norm: ones(HIDDEN)?,
            lm_head: random(&mut rng, HIDDEN, VOCAB, s_in)?,
            cos: angles.cos()?,
            sin: angles.sin()?,
        })
    }

    /// One forward step: writes every real token's K and V into `cache` at the slot mapping,
    /// attends through the block tables, and returns the logits (`[n, vocab]`) of the tokens
    /// at `sample` (flat token indices).
    pub fn forward(
        &self,
        inputs: &ForwardInputs<'_>,
        cache: &PagedKvCache,
        sample: &[u32],
    ) -> Result<Vec<Vec<f32>>> {
        let dev = Device::Cpu;
        let t = inputs.input_ids.len();
        let ids = Tensor::from_slice(inputs.input_ids, t, &dev)?;
        let pos: Vec<u32> = inputs.positions.iter().map(|&p| p.max(0) as u32).collect();
        let pos = Tensor::from_vec(pos, t, &dev)?;
        let (cos, sin) = (
            self.cos.index_select(&pos, 0)?,
            self.sin.index_select(&pos, 0)?,
        );
        let mut x = self.embed.index_select(&ids, 0)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm)?;
            let q = h.matmul(&layer.wq)?.reshape((t, HEADS, HEAD_DIM))?;
            let k = h.matmul(&layer.wk)?.reshape((t, KV_HEADS, HEAD_DIM))?;
            let v = h.matmul(&layer.wv)?.reshape((t, KV_HEADS, HEAD_DIM))?;
            let (q, k) = (rope(&q, &cos, &sin)?, rope(&k, &cos, &sin)?);
            cache.reshape_and_cache(l, &k, &v, inputs.slot_mapping)?;
            let attn = paged_attention(&q, cache, l, &inputs.attention)?;
            x = (x + attn.matmul(&layer.wo)?)?;
            let h = rms_norm(&x, &layer.mlp_norm)?;
            let mlp = (h.matmul(&layer.gate)?.silu()? * h.matmul(&layer.up)?)?;
            x = (x + mlp.matmul(&layer.down)?)?;
        }
        if sample.is_empty() {
            return Ok(Vec::new());
        }
        let picked = Tensor::from_slice(sample, sample.len(), &dev)?;
        let x = rms_norm(&x.index_select(&picked, 0)?, &self.norm)?;
        x.matmul(&self.lm_head)?.to_vec2::<f32>()
    }
}

/// Greedy sampling: the highest logit's token, or (`rank` 1) the second highest (a fork's
/// first token, so that the branches differ).
pub fn greedy(logits: &[f32], rank: usize) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order[rank] as u32
}
