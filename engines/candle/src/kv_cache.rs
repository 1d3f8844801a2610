//! The paged KV cache, one K and one V tensor per layer in vLLM's layouts (mistral.rs's
//! `cache_engine.rs`), and the in-place ops on it: `reshape_and_cache` (each new token's K and V
//! at its slot-mapping slot), a block copy (copy-on-write) and a byte flip (the bug flags').
//!
//! K: `[blocks, kv_heads, head_dim / x, block_size, x]`, V: `[blocks, kv_heads, head_dim,
//! block_size]`, `x = 16 / element size`. On the CPU the ops are candle `InplaceOp`s over the
//! tensors' own storage; the GPU path swaps them for `mistralrs-paged-attn`'s kernels.

use crate::config::{BLOCK_SIZE, HEAD_DIM, KV_HEADS, LAYERS, NUM_BLOCKS, X};
use candle_core::{
    bail, CpuStorage, DType, Device, InplaceOp1, InplaceOp2, Layout, Storage, Tensor,
};

/// Which half of a layer's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// Keys, vLLM's K layout.
    K,
    /// Values, vLLM's V layout.
    V,
}

/// Element index of (head `h`, dim `d`) of the token at `slot` in `half`'s layout.
pub fn element_index(half: Half, slot: usize, h: usize, d: usize) -> usize {
    let (b, at) = (slot / BLOCK_SIZE, slot % BLOCK_SIZE);
    match half {
        Half::K => (((b * KV_HEADS + h) * (HEAD_DIM / X) + d / X) * BLOCK_SIZE + at) * X + d % X,
        Half::V => ((b * KV_HEADS + h) * HEAD_DIM + d) * BLOCK_SIZE + at,
    }
}

/// Elements of one block (either layout).
pub const BLOCK_ELEMENTS: usize = KV_HEADS * HEAD_DIM * BLOCK_SIZE;

/// The per-layer K and V caches.
pub struct PagedKvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
}

fn f32_mut<'a>(storage: &'a mut CpuStorage, layout: &Layout) -> candle_core::Result<&'a mut [f32]> {
    match (
        storage,
        layout.is_contiguous() && layout.start_offset() == 0,
    ) {
        (CpuStorage::F32(data), true) => Ok(data),
        _ => bail!("the KV cache is a contiguous f32 tensor"),
    }
}

/// `reshape_and_cache` for one half: token `t` of `src` (`[tokens, kv_heads, head_dim]`) goes
/// to slot `slot_mapping[t]`; negative slots (padding) are skipped.
struct ReshapeAndCache<'a> {
    half: Half,
    slot_mapping: &'a [i64],
}

impl InplaceOp2 for ReshapeAndCache<'_> {
    fn name(&self) -> &'static str {
        "reshape_and_cache"
    }

    fn cpu_fwd(
        &self,
        cache: &mut CpuStorage,
        cache_layout: &Layout,
        src: &CpuStorage,
        src_layout: &Layout,
    ) -> candle_core::Result<()> {
        let cache = f32_mut(cache, cache_layout)?;
        let src = match src {
            CpuStorage::F32(s) if src_layout.is_contiguous() => &s[src_layout.start_offset()..],
            _ => bail!("reshape_and_cache: contiguous f32 keys and values"),
        };
        for (t, &slot) in self.slot_mapping.iter().enumerate() {
            let Ok(slot) = usize::try_from(slot) else {
                continue;
            };
            if slot >= NUM_BLOCKS * BLOCK_SIZE {
                bail!("reshape_and_cache: slot {slot} outside the cache");
            }
            for h in 0..KV_HEADS {
                for d in 0..HEAD_DIM {
                    cache[element_index(self.half, slot, h, d)] =
                        src[(t * KV_HEADS + h) * HEAD_DIM + d];
                }
            }
        }
        Ok(())
    }
}

/// Copies block `from` onto block `to` (vLLM's `copy_blocks`, one pair).
struct CopyBlock {
    from: usize,
    to: usize,
}

impl InplaceOp1 for CopyBlock {
    fn name(&self) -> &'static str {
        "copy_blocks"
    }

    fn cpu_fwd(&self, cache: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let cache = f32_mut(cache, layout)?;
        let n = BLOCK_ELEMENTS;
        cache.copy_within(self.from * n..(self.from + 1) * n, self.to * n);
        Ok(())
    }
}

/// XORs byte `byte` of element `element` with 0xFF.
struct FlipByte {
    element: usize,
    byte: usize,
}

impl InplaceOp1 for FlipByte {
    fn name(&self) -> &'static str {
        "flip_byte"
    }

    fn cpu_fwd(&self, cache: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let cache = f32_mut(cache, layout)?;
        let e = &mut cache[self.element];
        *e = f32::from_bits(e.to_bits() ^ (0xFF << (8 * self.byte)));
        Ok(())
    }
}

impl PagedKvCache {
    /// Zeroed caches for every layer.
    pub fn new(device: &Device) -> candle_core::Result<Self> {
        let k_shape = (NUM_BLOCKS, KV_HEADS, HEAD_DIM / X, BLOCK_SIZE, X);
        let v_shape = (NUM_BLOCKS, KV_HEADS, HEAD_DIM, BLOCK_SIZE);
        let mut cache = PagedKvCache {
            k: Vec::new(),
            v: Vec::new(),
        };
        for _ in 0..LAYERS {
            cache.k.push(Tensor::zeros(k_shape, DType::F32, device)?);
            cache.v.push(Tensor::zeros(v_shape, DType::F32, device)?);
        }
        Ok(cache)
    }

    /// Layer `layer`'s cache of `half`.
    pub fn tensor(&self, layer: usize, half: Half) -> &Tensor {
        match half {
            Half::K => &self.k[layer],
            Half::V => &self.v[layer],
        }
    }

    /// Writes `k` and `v` (`[tokens, kv_heads, head_dim]`) of layer `layer` at `slot_mapping`.
    pub fn reshape_and_cache(
        &self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
        slot_mapping: &[i64],
    ) -> candle_core::Result<()> {
        for (half, src) in [(Half::K, k), (Half::V, v)] {
            let op = ReshapeAndCache { half, slot_mapping };
            self.tensor(layer, half)
                .inplace_op2(&src.contiguous()?, &op)?;
        }
        Ok(())
    }

    /// Copies block `from` onto block `to` in every layer's K and V (copy-on-write).
    pub fn copy_block(&self, from: u32, to: u32) -> candle_core::Result<()> {
        let op = CopyBlock {
            from: from as usize,
            to: to as usize,
        };
        for layer in 0..LAYERS {
            for half in [Half::K, Half::V] {
                self.tensor(layer, half).inplace_op1(&op)?;
            }
        }
        Ok(())
    }

    /// Flips byte 0 of `slot`'s first element (head 0, dim 0) in layer `layer`'s `half`.
    pub fn flip_byte(&self, layer: usize, half: Half, slot: usize) -> candle_core::Result<()> {
        let op = FlipByte {
            element: element_index(half, slot, 0, 0),
            byte: 0,
        };
        self.tensor(layer, half).inplace_op1(&op)
    }

    /// Calls `f` with layer `layer`'s K and V caches as bytes, in place (the tensors' storage,
    /// read-locked while `f` runs).
    pub fn with_bytes<R>(
        &self,
        layer: usize,
        f: impl FnOnce(&[u8], &[u8]) -> R,
    ) -> candle_core::Result<R> {
        let (k, _) = self.k[layer].storage_and_layout();
        let (v, _) = self.v[layer].storage_and_layout();
        Ok(f(cpu_bytes(&k)?, cpu_bytes(&v)?))
    }

    /// Calls `f` with layer `layer`'s K and V caches as f32 slices (paged attention's reads).
    pub fn with_data<R>(
        &self,
        layer: usize,
        f: impl FnOnce(&[f32], &[f32]) -> R,
    ) -> candle_core::Result<R> {
        let (k, _) = self.k[layer].storage_and_layout();
        let (v, _) = self.v[layer].storage_and_layout();
        Ok(f(cpu_f32(&k)?, cpu_f32(&v)?))
    }
}

fn cpu_f32(storage: &Storage) -> candle_core::Result<&[f32]> {
    match storage {
        Storage::Cpu(c) => c.as_slice::<f32>(),
        _ => bail!("the CPU path reads CPU storage"),
    }
}

fn cpu_bytes(storage: &Storage) -> candle_core::Result<&[u8]> {
    Ok(bytemuck::cast_slice(cpu_f32(storage)?))
}
