//! The canary, as an engine author adds it: kv-canary's CPU backend over the engine's own step
//! arrays (block tables, lengths, token ids, positions, slot mapping, token table) and layer 0's
//! K and V caches in vLLM's layouts, all read in place; a guard judging every report; idle
//! prefix-cache blocks swept on a per-step budget. Everything the engine adds for the canary is
//! in this module.

use crate::batch::StepArrays;
use crate::block_allocator::BlockAllocator;
use crate::canary_common::{block_slots, findings, idle_blocks, paged, Finding, VERIFY};
use crate::config::{
    BLOCK_SIZE, HEAD_DIM, KV_HEADS, MAX_CONTEXT, MAX_ROWS, MAX_TOKENS, NUM_BLOCKS, NUM_SLOTS,
};
use crate::kv_cache::PagedKvCache;
use crate::Result;
use kv_canary::guard::{Guard, Policy, SweepCadence};
use kv_canary::step::{Canary, SlotRows, TailKv};
use kv_canary::{Cap, ExpectedTokenTableView, PagedShape, RealKvHashMode, Shape};

/// The engine's canary: the CPU canary, its guard and the sweep cadence.
pub struct EngineCanary {
    canary: Canary<Cap<VERIFY>, Cap<MAX_ROWS>, Cap<MAX_TOKENS>, Cap<NUM_SLOTS>, Cap<64>>,
    guard: Guard<u64>,
    cadence: SweepCadence,
    /// Verify entries checked by steps and by sweeps (K and V each), for the run's summary.
    pub checked: (u64, u64),
}

/// Layer 0's K and V caches as paged real-KV sources (vLLM's layouts, all of a token's bytes
/// folded).
fn tail_kv<'a>(k: &'a [u8], v: &'a [u8]) -> Result<TailKv<'a>> {
    let shape = PagedShape::new(KV_HEADS, HEAD_DIM, 4, BLOCK_SIZE);
    Ok(TailKv::vllm_paged(
        RealKvHashMode::All,
        k,
        v,
        NUM_BLOCKS,
        shape,
    )?)
}

impl EngineCanary {
    /// A canary over the whole pool, violations judged per request, `sweep_budget` idle
    /// cached slots swept a step.
    pub fn new(sweep_budget: usize) -> Self {
        EngineCanary {
            canary: Canary::full(Shape::new(), Cap, Cap),
            guard: Guard::new(Policy::per_request()),
            cadence: SweepCadence::new(sweep_budget),
            checked: (0, 0),
        }
    }

    /// Runs step `step` around `forward` (which writes the step's K and V into `kv`): plan,
    /// head verify and write before it, tail verify (layer 0's KV bytes folded) after it.
    pub fn step<R>(
        &mut self,
        step: u64,
        a: &StepArrays,
        kv: &PagedKvCache,
        forward: impl FnOnce() -> Result<R>,
    ) -> Result<(R, Vec<Finding>)> {
        let arrays = paged(a);
        let tokens = ExpectedTokenTableView::new(MAX_ROWS, MAX_CONTEXT, &a.token_table)?;
        let inputs = (arrays.plan_inputs()?).with_expected(tokens.with_valid_lens(&a.context_lens));
        let write = (arrays.write_inputs(Cap::<MAX_TOKENS>)?)
            .with_expected(&a.expected_ids, &a.expected_positions)?;
        let written = self.canary.plan(&inputs)?.verify_head()?.write(&write)?;
        let out = forward()?;
        let report = kv.with_bytes(0, |k, v| -> Result<_> {
            Ok(written.verify_tail(tail_kv(k, v)?)?)
        })??;
        self.checked.0 += report.entries_checked();
        let rows = SlotRows::new(&inputs, &a.slot_mapping)?;
        let judgement = self.guard.judge(&report, &rows, &a.requests[..a.bs])?;
        Ok((out, findings(step, &judgement)))
    }

    /// Copy-on-write moved block `from`'s KV to block `to`: its records move with it.
    pub fn copy_block(&mut self, from: u32, to: u32) -> Result<()> {
        Ok(self
            .canary
            .copy_records(&block_slots(from), &block_slots(to))?)
    }

    /// Between steps: sweeps the next idle cached slots of the prefix cache.
    pub fn sweep(
        &mut self,
        step: u64,
        alloc: &BlockAllocator,
        kv: &PagedKvCache,
    ) -> Result<Vec<Finding>> {
        let entries = self.cadence.next_entries(&idle_blocks(alloc)?)?;
        let canary = &mut self.canary;
        let report = kv.with_bytes(0, |k, v| -> Result<_> {
            Ok(canary.sweep(entries.as_slice(), tail_kv(k, v)?)?)
        })??;
        self.checked.1 += report.entries_checked();
        let judgement = self.guard.judge_sweep(&report)?;
        Ok(findings(step, &judgement))
    }
}
