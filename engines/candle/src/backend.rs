//! What runs a step's model and canary for the serving loop ([`crate::engine`]): the loop
//! schedules, keeps the arrays and makes the bugs; a backend writes the step's K and V, attends,
//! samples and guards the step with the canary. [`CpuBackend`] is candle's CPU backend with the
//! canary on kv-canary's CPU backend; the GPU path's is `gpu_serve::GpuBackend` (feature
//! `cuda`).

use crate::attention::AttentionInputs;
use crate::batch::StepArrays;
use crate::block_allocator::BlockAllocator;
use crate::canary::EngineCanary;
use crate::canary_common::Finding;
use crate::config::{MAX_BLOCKS, SWEEP_BUDGET};
use crate::kv_cache::{Half, PagedKvCache};
use crate::model::{greedy, ForwardInputs, Model};
use crate::Result;
use candle_core::Device;

/// What a step gave: for each sampled token (`StepArrays::sample`, in order) the best and the
/// second-best greedy token, and the canary's findings reported during the step.
#[derive(Clone, Debug, Default)]
pub struct Stepped {
    /// (best, second best) per sampled token.
    pub sampled: Vec<(u32, u32)>,
    /// The canary's findings (a backend taking reports one step late: the step before's).
    pub findings: Vec<Finding>,
}

impl Stepped {
    /// The best and the second-best greedy token of each sampled token's logits (rows of the
    /// vocabulary's width), with the canary's findings.
    pub fn from_logits(logits: &[Vec<f32>], findings: Vec<Finding>) -> Self {
        let sampled = (logits.iter())
            .map(|l| (greedy(l, 0), greedy(l, 1)))
            .collect();
        Stepped { sampled, findings }
    }
}

/// A step's model and canary, for [`crate::engine::Engine`].
pub trait ModelBackend {
    /// Runs engine step `step` over `a` (guarded by the canary when it is on): every token's K
    /// and V written at the slot mapping, attention through the block tables, and for each
    /// sampled token its greedy tokens, and the canary's findings.
    fn step(&mut self, step: u64, a: &StepArrays) -> Result<Stepped>;
    /// Copy-on-write: block `from`'s K and V (every layer) and its canary records onto `to`.
    fn copy_block(&mut self, from: u32, to: u32) -> Result<()>;
    /// Flips a byte of layer 0's K of `slot` (head 0, dim 0): the KV-flip bugs.
    fn flip_k_byte(&mut self, slot: usize) -> Result<()>;
    /// Between steps: the canary's sweep of idle prefix-cache blocks (nothing without a
    /// canary).
    fn sweep(&mut self, step: u64, alloc: &BlockAllocator) -> Result<Vec<Finding>>;
    /// Reports still pending at the end of a run.
    fn finish(&mut self) -> Result<Vec<Finding>> {
        Ok(Vec::new())
    }
    /// Verify entries the canary checked: by steps, by sweeps.
    fn checked(&self) -> (u64, u64);
}

/// The CPU path: the model on candle's CPU backend (f32), the paged caches read in place, the
/// canary on kv-canary's CPU backend ([`EngineCanary`]).
pub struct CpuBackend {
    model: Model,
    kv: PagedKvCache,
    canary: Option<EngineCanary>,
}

impl CpuBackend {
    /// Random weights from `seed`, zeroed caches, the canary if `canary`.
    pub fn new(seed: u64, canary: bool) -> Result<Self> {
        Ok(CpuBackend {
            model: Model::new(seed)?,
            kv: PagedKvCache::new(&Device::Cpu)?,
            canary: canary.then(|| EngineCanary::new(SWEEP_BUDGET)),
        })
    }
}

impl ModelBackend for CpuBackend {
    fn step(&mut self, step: u64, a: &StepArrays) -> Result<Stepped> {
        let inputs = ForwardInputs {
            input_ids: &a.input_ids[..a.tokens],
            positions: &a.positions[..a.tokens],
            slot_mapping: &a.slot_mapping[..a.tokens],
            attention: AttentionInputs {
                bs: a.bs,
                block_tables: &a.block_tables,
                max_blocks: MAX_BLOCKS,
                context_lens: &a.context_lens,
                query_lens: &a.query_lens,
            },
        };
        let (model, kv) = (&self.model, &self.kv);
        let forward = || -> Result<_> { Ok(model.forward(&inputs, kv, &a.sample)?) };
        let (logits, findings) = match &mut self.canary {
            Some(c) => c.step(step, a, kv, forward)?,
            None => (forward()?, Vec::new()),
        };
        Ok(Stepped::from_logits(&logits, findings))
    }

    fn copy_block(&mut self, from: u32, to: u32) -> Result<()> {
        self.kv.copy_block(from, to)?;
        if let Some(c) = &mut self.canary {
            c.copy_block(from, to)?;
        }
        Ok(())
    }

    fn flip_k_byte(&mut self, slot: usize) -> Result<()> {
        Ok(self.kv.flip_byte(0, Half::K, slot)?)
    }

    fn sweep(&mut self, step: u64, alloc: &BlockAllocator) -> Result<Vec<Finding>> {
        match &mut self.canary {
            Some(c) => c.sweep(step, alloc, &self.kv),
            None => Ok(Vec::new()),
        }
    }

    fn checked(&self) -> (u64, u64) {
        self.canary.as_ref().map_or((0, 0), |c| c.checked)
    }
}
