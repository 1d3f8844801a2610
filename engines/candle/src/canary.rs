//! The canary, as an engine author adds it: kv-canary's CPU backend over the engine's own step
//! arrays (block tables, lengths, token ids, positions, slot mapping, token table) and layer 0's
//! K and V caches in vLLM's layouts, all read in place; a guard judging every report; idle
//! prefix-cache blocks swept on a per-step budget. Everything the engine adds for the canary is
//! in this module.

use crate::batch::StepArrays;
use crate::block_allocator::BlockAllocator;
use crate::config::{
    BLOCK_SIZE, HEAD_DIM, KV_HEADS, MAX_BLOCKS, MAX_CONTEXT, MAX_ROWS, MAX_TOKENS, NUM_BLOCKS,
    NUM_SLOTS,
};
use crate::kv_cache::PagedKvCache;
use crate::Result;
use kv_canary::guard::{Action, CachedPrefixes, CachedRun, Guard, Judgement, Policy, SweepCadence};
use kv_canary::step::{Canary, SlotRows, TailKv};
use kv_canary::{
    BatchView, Cap, ExpectedTokenTableView, PagedShape, PlanInputs, RealKvHashMode, ReqToTokenView,
    Shape, WriteInputsView,
};

/// Verify entries a step may need: every row's whole context.
pub(crate) const VERIFY: usize = MAX_ROWS * MAX_CONTEXT;

/// What a report said, in the engine's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The engine step (or the sweep after it) that reported it.
    pub step: u64,
    /// The launch that recorded it (`HEAD_K_FULL`, `TAIL_K_FULL`, `SWEEP_K_FULL`, ...).
    pub launch: String,
    /// The slot.
    pub slot: i64,
    /// The requests it concerns: (id, verdict, role), as the guard judged them.
    pub requests: Vec<(u64, String)>,
    /// The slot's cached KV failed a verify: the prefix cache drops it (every sweep finding).
    pub evict: bool,
}

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

pub(crate) fn findings(step: u64, j: &Judgement<u64>) -> Vec<Finding> {
    let verdicts: Vec<(i64, u64, String)> = (j.verdicts.iter())
        .map(|v| (v.slot, v.request, format!("{:?} ({:?})", v.verdict, v.role)))
        .collect();
    let unverified = j.unverified.map(|u| Finding {
        step,
        launch: format!("UNVERIFIED ({u})"),
        slot: -1,
        requests: Vec::new(),
        evict: false,
    });
    (j.new_violations.iter())
        .map(|v| Finding {
            step,
            launch: v.launch_tag().map_or("?".into(), |t| t.to_string()),
            slot: v.slot,
            requests: (verdicts.iter().filter(|x| x.0 == v.slot))
                .map(|x| (x.1, x.2.clone()))
                .collect(),
            evict: j.lost_slots.contains(&v.slot),
        })
        .chain(unverified)
        .collect()
}

/// The slots of block `b`.
pub(crate) fn block_slots(b: u32) -> Vec<i64> {
    let n = BLOCK_SIZE as i64;
    (0..n).map(|i| i64::from(b) * n + i).collect()
}

/// The prefix cache's idle blocks, as the sweep cadence walks them.
pub(crate) struct IdleBlocks<'a>(pub(crate) &'a BlockAllocator);

impl CachedPrefixes for IdleBlocks<'_> {
    fn idle_runs(&self, visit: &mut dyn FnMut(CachedRun<'_>)) {
        for (block, c) in self.0.idle_cached() {
            let slots = block_slots(block);
            let predecessor = c.parent.map(|(p, _)| block_slots(p)[BLOCK_SIZE - 1]);
            let first_position = c.index * BLOCK_SIZE;
            visit(CachedRun {
                slots: &slots,
                first_position,
                predecessor,
            });
        }
    }
}

impl EngineCanary {
    /// A canary over the whole pool, violations judged per request, `sweep_budget` idle
    /// cached slots swept a step.
    pub fn new(sweep_budget: usize) -> Self {
        let shape = Shape::<Cap<VERIFY>, Cap<MAX_ROWS>, Cap<MAX_TOKENS>>::new();
        let policy = Policy {
            violations: Action::PerRequest,
            unverified: Action::Log,
            ..Policy::default()
        };
        EngineCanary {
            canary: Canary::full(shape, Cap, Cap),
            guard: Guard::new(policy),
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
        let table = ReqToTokenView::block_table(MAX_ROWS, MAX_BLOCKS, BLOCK_SIZE, &a.block_tables)?;
        let batch = BatchView::from_query_lens(a.bs, &a.context_lens, &a.query_lens)?;
        let tokens = ExpectedTokenTableView::new(MAX_ROWS, MAX_CONTEXT, &a.token_table)?;
        let inputs = PlanInputs::from_views(batch, table)
            .with_expected(tokens.with_valid_lens(&a.context_lens));
        let write = WriteInputsView::new(
            Cap::<MAX_TOKENS>,
            &a.input_ids,
            &a.positions,
            &a.slot_mapping,
        )?
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
        let entries = self.cadence.next_entries(&IdleBlocks(alloc))?;
        let canary = &mut self.canary;
        let report = kv.with_bytes(0, |k, v| -> Result<_> {
            Ok(canary.sweep(entries.as_slice(), tail_kv(k, v)?)?)
        })??;
        self.checked.1 += report.entries_checked();
        let judgement = self.guard.judge_sweep(&report)?;
        Ok(findings(step, &judgement))
    }
}
