//! The GPU path (feature `cuda`, issue 34 items 1, 2 and 4): the Llama-style decoder at the
//! issue's width on candle's CUDA backend, bf16, with `mistralrs-paged-attn`'s
//! `reshape_and_cache` (each new token's K and V at the slot mapping, vLLM's layouts) and
//! `paged_attention` (decode rows through the block tables and context lengths); a prefill row
//! with no cached prefix attends densely (causal, in query chunks) over its own new K and V.
//!
//! The canary runs on candle's own stream (`Stream::from_cudarc`), over the engine's own device
//! arrays (u32 block tables and lengths, a u32 `bs` read as an i32, i64 ids, positions and slot mapping) and
//! layer 0's K and V caches read in place in vLLM's layouts: every view is made once over
//! `kv_canary_candle::TensorMemory`, a `DevicePtr` of a candle tensor's memory that keeps the
//! tensor alive and holds no storage lock (so the engine's in-place uploads still run), and the
//! canary copies nothing (`kv_canary::cuda::transfers_issued()` is printed per step).
//!
//! [`bench`] times decode steps (bs 1, 64, 256, ~2k-token prefixes) and a prefill of 8192
//! tokens with CUDA events, without the canary and with it in PARTIAL and ALL modes.

use candle_core::cuda_backend::cudarc::driver::CudaStream;
use candle_core::{bail, DType, Device, Tensor, D};
use kv_canary::cuda::{transfers_issued, Gpu, PagedStepViews, PendingDeviceReport, Stream};
use kv_canary::step::{Canary, Findings};
use kv_canary::{Cap, Full, PagedShape, PagedStepArrays, RealKvHashMode, Shape};
use kv_canary_candle::TensorMemory;
use std::sync::Arc;

/// Hidden width.
pub const HIDDEN: usize = 4096;
/// Query heads.
pub const HEADS: usize = 32;
/// KV heads.
pub const KV_HEADS: usize = 8;
/// Width of a head.
pub const HEAD_DIM: usize = 128;
/// SwiGLU width (Llama 3 8B's).
pub const INTERMEDIATE: usize = 14336;
/// Vocabulary.
pub const VOCAB: usize = 32000;
/// Tokens a block.
pub const BLOCK_SIZE: usize = 16;
/// Elements of vLLM's K-layout chunk (16 bytes of bf16).
pub const X: usize = 8;
/// Rows of the persistent batch (the largest batch size benchmarked).
pub const ROWS: usize = 256;
/// Tokens a step at most (the prefill).
pub const TOKENS: usize = 8192;
/// Block-table width (a prefill of `TOKENS` tokens).
pub const MAX_BLOCKS: usize = TOKENS / BLOCK_SIZE;
/// Blocks a decode row holds at most (a ~2k prefix and the timed steps).
pub const ROW_BLOCKS: usize = 136;
/// Rounds of alternating guarded and model-only steps a benchmark row times (the decode rows
/// and the graph experiment's rows).
pub(crate) const ROUNDS: usize = 5;
/// Longest decode context.
pub const MAX_DECODE_CONTEXT: usize = ROW_BLOCKS * BLOCK_SIZE;
/// Blocks of the pool (block 0 the null block).
pub const NUM_BLOCKS: usize = 1 + ROWS * ROW_BLOCKS;
/// Slots of the pool.
pub const SLOTS: usize = NUM_BLOCKS * BLOCK_SIZE;
/// Verify entries a step may need (every decode row's whole context).
pub const VERIFY: usize = ROWS * MAX_DECODE_CONTEXT;
/// Bytes of one token's K (or V) in one layer.
pub const TOKEN_BYTES: usize = KV_HEADS * HEAD_DIM * 2;
/// RoPE table length.
const MAX_POS: usize = TOKENS;

/// The canary of the GPU engine: its capacities are the engine's.
pub type GpuCanary = Canary<Cap<VERIFY>, Cap<ROWS>, Cap<TOKENS>, Cap<SLOTS>, Cap<64>, Full, Stream>;

type R<T> = candle_core::Result<T>;

#[derive(Clone)]
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

/// The decoder: random bf16 weights on the GPU (cloning shares them).
#[derive(Clone)]
pub struct GpuModel {
    dev: Device,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
    cos: Tensor,
    sin: Tensor,
}

fn random(dev: &Device, rows: usize, cols: usize, scale: f32) -> R<Tensor> {
    Tensor::randn(0f32, scale, (rows, cols), dev)?.to_dtype(DType::BF16)
}

fn rms_norm(x: &Tensor, weight: &Tensor) -> R<Tensor> {
    let xf = x.to_dtype(DType::F32)?;
    let ms = xf.sqr()?.mean_keepdim(D::Minus1)?;
    xf.broadcast_div(&(ms + 1e-5)?.sqrt()?)?
        .to_dtype(DType::BF16)?
        .broadcast_mul(weight)
}

fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> R<Tensor> {
    let half = HEAD_DIM / 2;
    let (x1, x2) = (x.narrow(2, 0, half)?, x.narrow(2, half, half)?);
    let (c, s) = (cos.unsqueeze(1)?, sin.unsqueeze(1)?);
    let a = (x1.broadcast_mul(&c)? - x2.broadcast_mul(&s)?)?;
    let b = (x1.broadcast_mul(&s)? + x2.broadcast_mul(&c)?)?;
    Tensor::cat(&[a, b], 2)
}

/// How a step's rows attend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attend {
    /// Every row decodes one token: `paged_attention` over the block tables.
    Decode,
    /// One row, its whole context new: dense causal attention over its own K and V.
    Prefill,
}

impl GpuModel {
    /// `layers` layers of random weights on `dev`.
    pub fn new(dev: &Device, layers: usize) -> R<Self> {
        let ones = |n| Tensor::ones(n, DType::BF16, dev);
        let s_in = 1.0 / (HIDDEN as f32).sqrt();
        let s_mid = 1.0 / (INTERMEDIATE as f32).sqrt();
        let mut ls = Vec::new();
        for _ in 0..layers {
            ls.push(Layer {
                attn_norm: ones(HIDDEN)?,
                wq: random(dev, HIDDEN, HEADS * HEAD_DIM, s_in)?,
                wk: random(dev, HIDDEN, KV_HEADS * HEAD_DIM, s_in)?,
                wv: random(dev, HIDDEN, KV_HEADS * HEAD_DIM, s_in)?,
                wo: random(dev, HEADS * HEAD_DIM, HIDDEN, s_in)?,
                mlp_norm: ones(HIDDEN)?,
                gate: random(dev, HIDDEN, INTERMEDIATE, s_in)?,
                up: random(dev, HIDDEN, INTERMEDIATE, s_in)?,
                down: random(dev, INTERMEDIATE, HIDDEN, s_mid)?,
            });
        }
        let half = HEAD_DIM / 2;
        let mut angles = Vec::with_capacity(MAX_POS * half);
        for p in 0..MAX_POS {
            for i in 0..half {
                let freq = 500_000f32.powf(-2.0 * i as f32 / HEAD_DIM as f32);
                angles.push(p as f32 * freq);
            }
        }
        let angles = Tensor::from_vec(angles, (MAX_POS, half), dev)?;
        Ok(GpuModel {
            dev: dev.clone(),
            embed: random(dev, VOCAB, HIDDEN, 1.0)?,
            layers: ls,
            norm: ones(HIDDEN)?,
            lm_head: random(dev, HIDDEN, VOCAB, s_in)?,
            cos: angles.cos()?.to_dtype(DType::BF16)?,
            sin: angles.sin()?.to_dtype(DType::BF16)?,
        })
    }

    /// Layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// One step over the engine's device arrays (`bs` rows, `tokens` tokens): writes every
    /// token's K and V at the slot mapping, attends, and returns the greedy token of each
    /// row's last token (on the device).
    pub fn forward(
        &self,
        kv: &GpuKv,
        a: &DeviceArrays,
        bs: usize,
        tokens: usize,
        attend: Attend,
        max_context: usize,
    ) -> R<Tensor> {
        let ids = a.input_ids.narrow(0, 0, tokens)?;
        let pos = a.positions.narrow(0, 0, tokens)?;
        let slots = a.slot_mapping.narrow(0, 0, tokens)?;
        let scale = 1.0 / (HEAD_DIM as f32).sqrt();
        let x = self.hidden(kv, &ids, &pos, &slots, |l, q, k, v| match attend {
            Attend::Decode => mistralrs_paged_attn::paged_attention(
                q,
                None,
                None,
                &kv.k[l],
                &kv.v[l],
                &a.block_tables.narrow(0, 0, bs)?,
                &a.context_lens.narrow(0, 0, bs)?,
                None,
                max_context,
                scale,
                1.0,
                None,
            ),
            Attend::Prefill => attend_causal(q, k, v, 0),
        })?;
        let last = match attend {
            Attend::Decode => x,
            Attend::Prefill => x.narrow(0, tokens - 1, 1)?,
        };
        self.logits(&last)?.argmax_keepdim(D::Minus1)
    }

    /// The decoder's layers over `tokens` tokens (`ids`, `pos`, `slots` on the device): each
    /// layer writes the tokens' K and V at `slots` (`reshape_and_cache`) and attends with
    /// `attend(layer, q, k, v)` (`[tokens, heads, head_dim]` queries, the tokens' own K and V;
    /// returns `[tokens, heads, head_dim]`). The final hidden states, `[tokens, hidden]`.
    pub fn hidden(
        &self,
        kv: &GpuKv,
        ids: &Tensor,
        pos: &Tensor,
        slots: &Tensor,
        attend: impl Fn(usize, &Tensor, &Tensor, &Tensor) -> R<Tensor>,
    ) -> R<Tensor> {
        let tokens = ids.dim(0)?;
        let (cos, sin) = (
            self.cos.index_select(pos, 0)?,
            self.sin.index_select(pos, 0)?,
        );
        let mut x = self.embed.index_select(ids, 0)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm)?;
            let q = h.matmul(&layer.wq)?.reshape((tokens, HEADS, HEAD_DIM))?;
            let k = h.matmul(&layer.wk)?.reshape((tokens, KV_HEADS, HEAD_DIM))?;
            let v = h.matmul(&layer.wv)?.reshape((tokens, KV_HEADS, HEAD_DIM))?;
            let q = rope(&q, &cos, &sin)?.contiguous()?;
            let k = rope(&k, &cos, &sin)?.contiguous()?;
            let v = v.contiguous()?;
            mistralrs_paged_attn::reshape_and_cache(&k, &v, None, None, &kv.k[l], &kv.v[l], slots)?;
            let attn = attend(l, &q, &k, &v)?.reshape((tokens, HEADS * HEAD_DIM))?;
            x = (x + attn.matmul(&layer.wo)?)?;
            let h = rms_norm(&x, &layer.mlp_norm)?;
            let mlp = (h.matmul(&layer.gate)?.silu()? * h.matmul(&layer.up)?)?;
            x = (x + mlp.matmul(&layer.down)?)?;
        }
        Ok(x)
    }

    /// The logits (`[n, vocab]`) of hidden states `x` (`[n, hidden]`).
    pub fn logits(&self, x: &Tensor) -> R<Tensor> {
        rms_norm(x, &self.norm)?.matmul(&self.lm_head)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

/// Dense causal attention of one row's `t` query tokens (`[t, heads, head_dim]`, at positions
/// `offset ..`) over its context's `offset + t` keys and values (`[offset + t, kv_heads,
/// head_dim]`), in query chunks. Returns `[t, heads, head_dim]`.
pub fn attend_causal(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize) -> R<Tensor> {
    const CHUNK: usize = 1024;
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let (t, context) = (q.dim(0)?, k.dim(0)?);
    let group = HEADS / KV_HEADS;
    let expand = |x: &Tensor| -> R<Tensor> {
        x.transpose(0, 1)?
            .unsqueeze(1)?
            .broadcast_as((KV_HEADS, group, context, HEAD_DIM))?
            .reshape((HEADS, context, HEAD_DIM))
    };
    let (q, k, v) = (q.transpose(0, 1)?.contiguous()?, expand(k)?, expand(v)?);
    let dev = q.device();
    let mut outs = Vec::new();
    let mut c0 = 0;
    while c0 < t {
        let n = CHUNK.min(t - c0);
        let keys = offset + c0 + n;
        let qc = q.narrow(1, c0, n)?;
        let kc = k.narrow(1, 0, keys)?;
        let vc = v.narrow(1, 0, keys)?;
        let scores = qc
            .matmul(&kc.transpose(1, 2)?.contiguous()?)?
            .to_dtype(DType::F32)?;
        let scores = (scores * f64::from(scale))?;
        let first = (offset + c0) as u32;
        let rows = Tensor::arange(first, first + n as u32, dev)?.reshape((n, 1))?;
        let cols = Tensor::arange(0u32, keys as u32, dev)?.reshape((1, keys))?;
        let masked = cols.broadcast_gt(&rows)?.broadcast_as((HEADS, n, keys))?;
        let neg = Tensor::full(f32::NEG_INFINITY, (HEADS, n, keys), dev)?;
        let scores = masked.where_cond(&neg, &scores)?;
        let max = scores.max_keepdim(D::Minus1)?;
        let e = scores.broadcast_sub(&max)?.exp()?;
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        outs.push(p.to_dtype(DType::BF16)?.matmul(&vc.contiguous()?)?);
        c0 += n;
    }
    Tensor::cat(&outs, 1)?.transpose(0, 1)?.contiguous()
}

/// Every layer's K and V caches in vLLM's layouts, bf16 (cloning shares them).
#[derive(Clone)]
pub struct GpuKv {
    /// `[blocks, kv_heads, head_dim / 8, 16, 8]` per layer.
    pub k: Vec<Tensor>,
    /// `[blocks, kv_heads, head_dim, 16]` per layer.
    pub v: Vec<Tensor>,
}

impl GpuKv {
    /// Zeroed caches of `NUM_BLOCKS` blocks for `layers` layers.
    pub fn new(dev: &Device, layers: usize) -> R<Self> {
        Self::with_blocks(dev, layers, NUM_BLOCKS)
    }

    /// Zeroed caches of `blocks` blocks for `layers` layers.
    pub fn with_blocks(dev: &Device, layers: usize, blocks: usize) -> R<Self> {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for _ in 0..layers {
            let ks = (blocks, KV_HEADS, HEAD_DIM / X, BLOCK_SIZE, X);
            k.push(Tensor::zeros(ks, DType::BF16, dev)?);
            let vs = (blocks, KV_HEADS, HEAD_DIM, BLOCK_SIZE);
            v.push(Tensor::zeros(vs, DType::BF16, dev)?);
        }
        Ok(GpuKv { k, v })
    }
}

/// The engine's step arrays on the device, allocated once at their capacities and uploaded in
/// place each step (as an engine with CUDA graphs keeps them; cloning shares them).
#[derive(Clone)]
pub struct DeviceArrays {
    /// `[ROWS, MAX_BLOCKS]` u32.
    pub block_tables: Tensor,
    /// `[ROWS]` u32, whole context per row.
    pub context_lens: Tensor,
    /// `[ROWS]` u32, new tokens per row.
    pub query_lens: Tensor,
    /// `[1]` u32, the step's rows (the canary reads it as its `i32` bits: candle 0.10 has no
    /// `i32` copy or fill kernels, so an `I32` tensor cannot be written in place).
    pub bs: Tensor,
    /// `[TOKENS]` i64.
    pub input_ids: Tensor,
    /// `[TOKENS]` i64.
    pub positions: Tensor,
    /// `[TOKENS]` i64, -1 padding.
    pub slot_mapping: Tensor,
}

/// The host side of one step's arrays (what the scheduler built).
#[derive(Clone, Debug, Default)]
pub struct HostStep {
    /// Rows.
    pub bs: usize,
    /// Tokens.
    pub tokens: usize,
    /// `[bs, MAX_BLOCKS]` block ids (only the rows written).
    pub block_tables: Vec<u32>,
    /// Whole context per row.
    pub context_lens: Vec<u32>,
    /// New tokens per row.
    pub query_lens: Vec<u32>,
    /// Token ids.
    pub input_ids: Vec<i64>,
    /// Positions.
    pub positions: Vec<i64>,
    /// Slots.
    pub slot_mapping: Vec<i64>,
}

/// Copies `host` into the start of `dst` (in place, on the device's stream).
pub fn upload<T: candle_core::WithDType>(dst: &Tensor, host: &[T]) -> R<()> {
    if host.is_empty() {
        return Ok(());
    }
    let src = Tensor::from_slice(host, host.len(), dst.device())?;
    dst.flatten_all()?.slice_set(&src, 0, 0)
}

impl DeviceArrays {
    /// Zeroed arrays on `dev`.
    pub fn new(dev: &Device) -> R<Self> {
        Ok(DeviceArrays {
            block_tables: Tensor::zeros((ROWS, MAX_BLOCKS), DType::U32, dev)?,
            context_lens: Tensor::zeros(ROWS, DType::U32, dev)?,
            query_lens: Tensor::zeros(ROWS, DType::U32, dev)?,
            bs: Tensor::zeros(1, DType::U32, dev)?,
            input_ids: Tensor::zeros(TOKENS, DType::I64, dev)?,
            positions: Tensor::zeros(TOKENS, DType::I64, dev)?,
            slot_mapping: Tensor::full(-1i64, TOKENS, dev)?,
        })
    }

    /// Uploads `h` (the block tables only if `tables`).
    pub fn upload(&self, h: &HostStep, tables: bool) -> R<()> {
        if tables {
            upload(&self.block_tables, &h.block_tables)?;
        }
        upload(&self.context_lens, &h.context_lens)?;
        upload(&self.query_lens, &h.query_lens)?;
        upload(&self.bs, &[h.bs as u32])?;
        upload(&self.input_ids, &h.input_ids)?;
        upload(&self.positions, &h.positions)?;
        upload(&self.slot_mapping, &h.slot_mapping)
    }
}

/// What a benchmark row measured.
#[derive(Clone, Debug, Default)]
pub struct Timing {
    /// Each timed step's time (ms).
    pub times: Vec<f64>,
    /// Canary reports with violations.
    pub reports_with_violations: u64,
    /// Library copies (host to device, device to host) and the steps they were counted over.
    pub copies: (u64, u64, u64),
}

impl Timing {
    /// Median step time (ms).
    pub fn median_ms(&self) -> f64 {
        median(self.times.clone())
    }

    /// Library copies per step (host to device, device to host).
    pub fn copies_per_step(&self) -> (f64, f64) {
        let n = self.copies.2.max(1) as f64;
        (self.copies.0 as f64 / n, self.copies.1 as f64 / n)
    }

    /// `other`'s steps added to these.
    fn add(&mut self, other: Timing) {
        self.times.extend(other.times);
        self.reports_with_violations += other.reports_with_violations;
        self.copies.0 += other.copies.0;
        self.copies.1 += other.copies.1;
        self.copies.2 += other.copies.2;
    }
}

type AnyResult<T> = crate::Result<T>;

/// The benchmark's engine: model, caches, arrays, candle's device and the canary's GPU handle.
pub struct Bench {
    /// The model.
    pub model: GpuModel,
    /// The caches.
    pub kv: GpuKv,
    /// The arrays.
    pub arrays: DeviceArrays,
    /// kv-canary's handle of the same device (primary context).
    pub gpu: Gpu,
    /// candle's stream.
    pub stream: Arc<CudaStream>,
}

/// A CUDA event pair on candle's stream, timing what is queued between them.
pub(crate) struct Timer {
    pub(crate) start: candle_core::cuda_backend::cudarc::driver::CudaEvent,
    pub(crate) end: candle_core::cuda_backend::cudarc::driver::CudaEvent,
}

impl Timer {
    pub(crate) fn new(stream: &Arc<CudaStream>) -> AnyResult<Self> {
        use candle_core::cuda_backend::cudarc::driver::sys::CUevent_flags;
        let ctx = stream.context();
        Ok(Timer {
            start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            end: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        })
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// CUDA device 0 with a stream of its own (`new_cuda_with_stream`, so the canary can wrap it)
/// and that stream, cudarc's per-buffer event tracking off (as for mistral.rs's graph capture).
/// Call it before making any tensor: tracking is decided when a buffer is allocated.
///
/// Event tracking makes every use of a buffer wait on events recorded by its earlier uses, so
/// that several streams may share it; inside a stream capture such a wait on an event recorded
/// before the capture breaks it (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, session 25's H100 run).
/// This engine queues everything on the one stream, so stream order alone orders every use.
pub fn cuda_device() -> R<(Device, Arc<CudaStream>)> {
    let dev = Device::new_cuda_with_stream(0)?;
    let Device::Cuda(cd) = &dev else {
        bail!("not a CUDA device")
    };
    // SAFETY: with tracking off the caller must order each buffer's uses and frees across
    // streams. This engine has one stream: every candle op, every `mistralrs-paged-attn`
    // kernel and every canary launch (the canary wraps this stream, `Stream::from_cudarc`) is
    // queued on it, in program order; no other stream of this context touches a tensor. No
    // tensor exists yet (the device was just made), so none keeps tracking.
    #[allow(unsafe_code)]
    unsafe {
        cd.disable_event_tracking()
    };
    let stream = cd.cuda_stream();
    Ok((dev, stream))
}

impl Bench {
    /// A benchmark engine of `layers` layers on CUDA device 0 (candle's stream is a real one,
    /// `new_cuda_with_stream`, so the canary can wrap it).
    pub fn new(layers: usize) -> AnyResult<Self> {
        let (dev, stream) = cuda_device()?;
        let gpu = Gpu::new()?;
        Ok(Bench {
            model: GpuModel::new(&dev, layers)?,
            kv: GpuKv::new(&dev, layers)?,
            arrays: DeviceArrays::new(&dev)?,
            gpu,
            stream,
        })
    }

    /// The canary on candle's stream.
    pub fn canary(&self) -> AnyResult<GpuCanary> {
        let stream = Stream::from_cudarc(&self.gpu, Arc::clone(&self.stream))?;
        let shape = Shape::<Cap<VERIFY>, Cap<ROWS>, Cap<TOKENS>>::new();
        Ok(Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>)?)
    }

    /// The block of row `r`'s `i`-th block in a decode batch.
    fn block(r: usize, i: usize) -> u32 {
        (1 + r * ROW_BLOCKS + i) as u32
    }

    /// The host arrays of a decode step of `bs` rows whose contexts are `context` long (the
    /// new token at position `context - 1`).
    pub fn decode_step(bs: usize, context: usize, token: i64) -> HostStep {
        let p = context - 1;
        let slot = |r: usize| {
            i64::from(Self::block(r, p / BLOCK_SIZE)) * BLOCK_SIZE as i64 + (p % BLOCK_SIZE) as i64
        };
        HostStep {
            bs,
            tokens: bs,
            block_tables: Vec::new(),
            context_lens: vec![context as u32; bs],
            query_lens: vec![1; bs],
            input_ids: (0..bs).map(|r| (token + r as i64) % VOCAB as i64).collect(),
            positions: vec![p as i64; bs],
            slot_mapping: (0..bs).map(slot).collect(),
        }
    }

    /// Every row's block table (row r holds blocks `1 + r * ROW_BLOCKS ..`).
    pub fn decode_tables() -> Vec<u32> {
        let mut t = vec![0u32; ROWS * MAX_BLOCKS];
        for r in 0..ROWS {
            for i in 0..ROW_BLOCKS {
                t[r * MAX_BLOCKS + i] = Self::block(r, i);
            }
        }
        t
    }
}

/// The canary's views of the benchmark's arrays (u32 block tables and lengths, the `bs` tensor,
/// i64 ids, positions and slot mapping) and layer 0's caches in vLLM's layouts: made once, kept
/// for every step (`PagedStepViews`, as the serving loop's `gpu_canary`).
pub type BenchViews = PagedStepViews<Cap<ROWS>, Cap<TOKENS>>;

impl Bench {
    /// The canary's views of the arrays and of layer 0's caches.
    pub fn views(&self) -> AnyResult<BenchViews> {
        let a = &self.arrays;
        let arrays = PagedStepArrays {
            block_tables: TensorMemory::<u32>::shared(&a.block_tables)?,
            blocks_per_row: MAX_BLOCKS,
            block_size: BLOCK_SIZE,
            context_lens: TensorMemory::<u32>::shared(&a.context_lens)?,
            query_lens: TensorMemory::<u32>::shared(&a.query_lens)?,
            bs: Some(TensorMemory::<i32>::shared(&a.bs)?),
            input_ids: TensorMemory::<i64>::shared(&a.input_ids)?,
            positions: TensorMemory::<i64>::shared(&a.positions)?,
            slot_mapping: TensorMemory::<i64>::shared(&a.slot_mapping)?,
        };
        let shape = PagedShape::new(KV_HEADS, HEAD_DIM, 2, BLOCK_SIZE);
        Ok(
            PagedStepViews::from_cudarc(&self.gpu, Cap, Cap, arrays)?.with_kv_cache(
                TensorMemory::<u8>::shared(&self.kv.k[0])?,
                TensorMemory::<u8>::shared(&self.kv.v[0])?,
                NUM_BLOCKS,
                shape,
            )?,
        )
    }
}

/// Plan, head verify and write of the step in the uploaded arrays; `forward` (the model's K/V
/// writes); the tail verify under `mode`: the pending report.
fn guarded_step(
    canary: &mut GpuCanary,
    views: &BenchViews,
    mode: RealKvHashMode,
    forward: impl FnOnce() -> AnyResult<()>,
) -> AnyResult<PendingDeviceReport> {
    let written = canary
        .plan(&views.plan_inputs())?
        .verify_head()?
        .write(views.write_inputs())?;
    forward()?;
    Ok(written.verify_tail(views.fingerprints(mode))?)
}

/// A benchmark row: the model's step alone and guarded by the canary, same arrays, same
/// caches.
#[derive(Clone, Debug)]
pub struct Row {
    /// Rows.
    pub bs: usize,
    /// Tokens a step.
    pub tokens: usize,
    /// The canary's real-KV mode.
    pub mode: RealKvHashMode,
    /// The model alone.
    pub model: Timing,
    /// The model and the canary.
    pub guarded: Timing,
}

impl Row {
    /// One line.
    pub fn line(&self) -> String {
        let (m, g) = (self.model.median_ms(), self.guarded.median_ms());
        let copies = self.guarded.copies_per_step();
        let kind = if self.tokens == self.bs {
            "decode"
        } else {
            "prefill"
        };
        format!(
            "{kind} bs {:>3} tokens {:>5} mode {:<7}: model {:>8.3} ms, model+canary {:>8.3} ms, \
             canary {:>7.3} ms ({:>5.2} %), canary copies/step {:.1} up {:.1} down, reports with violations {}",
            self.bs,
            self.tokens,
            format!("{:?}", self.mode).to_uppercase(),
            m,
            g,
            g - m,
            100.0 * (g - m) / m,
            copies.0,
            copies.1,
            self.guarded.reports_with_violations
        )
    }
}

/// A bug the GPU benchmark can make in its decode loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuBug {
    /// Row 0's token written (by `reshape_and_cache`) into row 1's first cached slot.
    SlotOffByOne,
    /// A byte of layer 0's K of row 2's token at position 100 flipped after its write.
    LiveKvFlip,
}

impl Bench {
    /// Fills the first `bs` rows' `prefix` tokens through the canary (chunks of
    /// `TOKENS / prefix` rows, random K/V written by `reshape_and_cache` into layer 0): the
    /// canary's records of every prefix slot.
    pub(crate) fn fill(
        &self,
        canary: &mut GpuCanary,
        views: &BenchViews,
        mode: RealKvHashMode,
        bs: usize,
        prefix: usize,
    ) -> AnyResult<u64> {
        let per = (TOKENS / prefix).max(1);
        let dev = self.model.device();
        let kr = Tensor::randn(0f32, 1.0, (per * prefix, KV_HEADS, HEAD_DIM), dev)?
            .to_dtype(DType::BF16)?;
        let vr = Tensor::randn(0f32, 1.0, (per * prefix, KV_HEADS, HEAD_DIM), dev)?
            .to_dtype(DType::BF16)?;
        let tables = Self::decode_tables();
        let mut dirty = 0;
        let mut r0 = 0;
        while r0 < bs {
            let n = per.min(bs - r0);
            let t = n * prefix;
            let mut h = HostStep {
                bs: n,
                tokens: t,
                block_tables: tables[r0 * MAX_BLOCKS..(r0 + n) * MAX_BLOCKS].to_vec(),
                context_lens: vec![prefix as u32; n],
                query_lens: vec![prefix as u32; n],
                ..HostStep::default()
            };
            for r in r0..r0 + n {
                for p in 0..prefix {
                    h.input_ids.push(((r * 7919 + p * 31) % VOCAB) as i64);
                    h.positions.push(p as i64);
                    let b = i64::from(Self::block(r, p / BLOCK_SIZE));
                    h.slot_mapping
                        .push(b * BLOCK_SIZE as i64 + (p % BLOCK_SIZE) as i64);
                }
            }
            self.arrays.upload(&h, true)?;
            let slots = self.arrays.slot_mapping.narrow(0, 0, t)?;
            let (k, v) = (kr.narrow(0, 0, t)?, vr.narrow(0, 0, t)?);
            let pending = guarded_step(canary, views, mode, || {
                Ok(mistralrs_paged_attn::reshape_and_cache(
                    &k,
                    &v,
                    None,
                    None,
                    &self.kv.k[0],
                    &self.kv.v[0],
                    &slots,
                )?)
            })?;
            dirty += u64::from(!pending.wait()?.is_clean());
            r0 += n;
        }
        upload(&self.arrays.block_tables, &tables)?;
        Ok(dirty)
    }

    /// `steps` timed steps (after 3 untimed) of `h(step)`, guarded or not; reports taken one
    /// step late. `bug`: made at timed step 5; the first report with violations is printed.
    #[allow(clippy::too_many_arguments)]
    fn timed(
        &self,
        canary: Option<(&mut GpuCanary, &BenchViews, RealKvHashMode)>,
        steps: usize,
        attend: Attend,
        max_context: usize,
        h: impl Fn(usize) -> HostStep,
        bug: Option<GpuBug>,
    ) -> AnyResult<Timing> {
        let timer = Timer::new(&self.stream)?;
        let (mut times, mut dirty) = (Vec::new(), 0u64);
        let mut late: Option<(usize, kv_canary::cuda::PendingDeviceReport)> = None;
        let mut canary = canary;
        let before = transfers_issued();
        let mut reported = false;
        for s in 0..steps + 3 {
            let mut host = h(s);
            if bug == Some(GpuBug::SlotOffByOne) && s == 8 {
                let target = i64::from(Self::block(1, 0)) * BLOCK_SIZE as i64;
                println!(
                    "  bug slot-off-by-one made at step {s}: row 0's token (slot {}) written to slot {target} (row 1's position 0)",
                    host.slot_mapping[0]
                );
                host.slot_mapping[0] = target;
            }
            self.arrays.upload(&host, false)?;
            timer.start.record(&self.stream)?;
            let pending = match canary.as_mut() {
                Some((c, views, mode)) => Some(guarded_step(c, views, *mode, || {
                    self.model.forward(
                        &self.kv,
                        &self.arrays,
                        host.bs,
                        host.tokens,
                        attend,
                        max_context,
                    )?;
                    Ok(())
                })?),
                None => {
                    self.model.forward(
                        &self.kv,
                        &self.arrays,
                        host.bs,
                        host.tokens,
                        attend,
                        max_context,
                    )?;
                    None
                }
            };
            timer.end.record(&self.stream)?;
            if bug == Some(GpuBug::LiveKvFlip) && s == 8 {
                flip_k_byte(
                    &self.kv.k[0],
                    Self::block(2, 100 / BLOCK_SIZE) as usize * BLOCK_SIZE + 100 % BLOCK_SIZE,
                )?;
                println!("  bug live-kv-flip made after step {s}: a K byte of row 2's position 100 (layer 0) flipped");
            }
            if let Some((at, p)) = late.take() {
                let report = p.wait()?;
                if !report.is_clean() {
                    dirty += 1;
                    if bug.is_some() && !reported {
                        reported = true;
                        let v = report.violations();
                        let first = v.first();
                        println!(
                            "  reported (taken at step {s}) for step {at}: {} violation(s), first {} at slot {}",
                            v.len(),
                            first.and_then(|f| f.launch_tag()).map_or("?".into(), |t| t.to_string()),
                            first.map_or(-1, |f| f.slot)
                        );
                    }
                }
            }
            late = pending.map(|p| (s, p));
            timer.end.synchronize()?;
            if s >= 3 {
                times.push(f64::from(timer.start.elapsed_ms(&timer.end)?));
            }
        }
        if let Some((_, p)) = late.take() {
            dirty += u64::from(!p.wait()?.is_clean());
        }
        let after = transfers_issued();
        Ok(Timing {
            times,
            reports_with_violations: dirty,
            copies: (
                after.host_to_device - before.host_to_device,
                after.device_to_host - before.device_to_host,
                (steps + 3) as u64,
            ),
        })
    }

    /// Decode rows at `bs` (contexts from `prefix`): for each mode, a fresh canary fills the
    /// prefixes, then `steps` guarded steps and `steps` unguarded ones are timed, alternating
    /// in `ROUNDS` rounds (one round with a bug, or fewer than `2 * ROUNDS` steps).
    pub fn decode_rows(
        &self,
        bs: usize,
        prefix: usize,
        steps: usize,
        modes: &[RealKvHashMode],
        bug: Option<GpuBug>,
    ) -> AnyResult<Vec<Row>> {
        let mut rows = Vec::new();
        for &mode in modes {
            let mut canary = self.canary()?;
            let views = self.views()?;
            let dirty = self.fill(&mut canary, &views, mode, bs, prefix)?;
            if dirty > 0 {
                println!("  (prefix fill: {dirty} report(s) with violations)");
            }
            let max = MAX_DECODE_CONTEXT;
            // Guarded and model-only steps alternate in rounds, so a drift of the machine (the
            // host's launch rate at bs 1 moves by several % between runs) falls on both alike.
            // Guarded rounds write the positions after the prefix in order (the canary's
            // chains run on); each model-only round then runs the same steps (the same context
            // lengths: attention's work grows with them) with its K and V written into the
            // null block 0, which no row holds and the canary never checks.
            let rounds = match bug {
                None if steps >= 2 * ROUNDS => ROUNDS,
                _ => 1,
            };
            let chunk = steps.div_ceil(rounds);
            let span = chunk + 3;
            if prefix + rounds * span > max {
                return Err(format!(
                    "{steps} steps in {rounds} rounds over a {prefix}-token prefix need contexts \
                     of {} tokens; the rows hold {max}",
                    prefix + rounds * span
                )
                .into());
            }
            let (mut guarded, mut model) = (Timing::default(), Timing::default());
            for r in 0..rounds {
                let g = prefix + r * span;
                guarded.add(self.timed(
                    Some((&mut canary, &views, mode)),
                    chunk,
                    Attend::Decode,
                    max,
                    |s| Self::decode_step(bs, g + 1 + s, s as i64),
                    bug,
                )?);
                let into_null_block = |s: usize| {
                    let mut h = Self::decode_step(bs, g + 1 + s, s as i64);
                    for (i, slot) in h.slot_mapping.iter_mut().enumerate() {
                        *slot = (i % BLOCK_SIZE) as i64;
                    }
                    h
                };
                model.add(self.timed(None, chunk, Attend::Decode, max, into_null_block, None)?);
            }
            rows.push(Row {
                bs,
                tokens: bs,
                mode,
                model,
                guarded,
            });
        }
        Ok(rows)
    }

    /// A prefill of `tokens` tokens (one row, no cached prefix), guarded and not.
    pub fn prefill_rows(
        &self,
        tokens: usize,
        steps: usize,
        modes: &[RealKvHashMode],
    ) -> AnyResult<Vec<Row>> {
        let mut table = vec![0u32; MAX_BLOCKS];
        for (i, b) in table
            .iter_mut()
            .enumerate()
            .take(tokens.div_ceil(BLOCK_SIZE))
        {
            *b = (1 + i) as u32;
        }
        let h = HostStep {
            bs: 1,
            tokens,
            block_tables: table,
            context_lens: vec![tokens as u32],
            query_lens: vec![tokens as u32],
            input_ids: (0..tokens).map(|p| ((p * 31) % VOCAB) as i64).collect(),
            positions: (0..tokens as i64).collect(),
            slot_mapping: (0..tokens as i64).map(|p| BLOCK_SIZE as i64 + p).collect(),
        };
        self.arrays.upload(&h, true)?;
        let mut rows = Vec::new();
        for &mode in modes {
            let mut canary = self.canary()?;
            let views = self.views()?;
            let guarded = self.timed(
                Some((&mut canary, &views, mode)),
                steps,
                Attend::Prefill,
                tokens,
                |_| h.clone(),
                None,
            )?;
            let model = self.timed(None, steps, Attend::Prefill, tokens, |_| h.clone(), None)?;
            rows.push(Row {
                bs: 1,
                tokens,
                mode,
                model,
                guarded,
            });
        }
        Ok(rows)
    }
}

/// XORs the low byte of element 0 (head 0, dim 0) of `slot`'s K in `k` (vLLM's K layout).
pub fn flip_k_byte(k: &Tensor, slot: usize) -> AnyResult<()> {
    let (b, at) = (slot / BLOCK_SIZE, slot % BLOCK_SIZE);
    let index = b * KV_HEADS * HEAD_DIM * BLOCK_SIZE + at * X;
    let flat = k.flatten_all()?;
    let e = flat.narrow(0, index, 1)?.to_vec1::<half::bf16>()?[0];
    let flipped = half::bf16::from_bits(e.to_bits() ^ 0x00FF);
    let src = Tensor::from_slice(&[flipped], 1, k.device())?;
    flat.slice_set(&src, 0, index)?;
    Ok(())
}

/// The layers that fit `free` bytes of device memory (weights and caches of a layer, the
/// embedding and LM head, 10 GiB of activations and workspace), at most 32.
pub fn layers_that_fit(free: usize) -> usize {
    let weights = 2
        * (2 * HIDDEN * HEADS * HEAD_DIM
            + 2 * HIDDEN * KV_HEADS * HEAD_DIM
            + 3 * HIDDEN * INTERMEDIATE);
    let kv = 2 * SLOTS * TOKEN_BYTES;
    let fixed = 2 * 2 * VOCAB * HIDDEN + (10 << 30);
    (free.saturating_sub(fixed) / (weights + kv)).clamp(1, 32)
}
