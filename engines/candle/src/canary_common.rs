//! The canary helpers both paths share ([`crate::canary`] on the CPU, `gpu_canary` on the
//! GPU): what a report said in the engine's terms ([`Finding`]), the slots of a block, the
//! prefix cache's idle blocks as the sweep cadence walks them, and the step arrays as kv-canary
//! names them. Part of the canary integration: its lines and names count in both paths'.

use crate::batch::StepArrays;
use crate::block_allocator::BlockAllocator;
use crate::config::{BLOCK_SIZE, MAX_BLOCKS, MAX_CONTEXT, MAX_ROWS};
use kv_canary::guard::{CachedBlocks, Judgement};
use kv_canary::PagedStepSlices;

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

/// A judged report in the engine's terms: one finding per new violation row, and one for
/// unverified steps.
pub(crate) fn findings(step: u64, j: &Judgement<u64>) -> Vec<Finding> {
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
            requests: (j.verdicts.iter().filter(|x| x.slot == v.slot))
                .map(|x| (x.request, format!("{:?} ({:?})", x.verdict, x.role)))
                .collect(),
            evict: j.lost_slots.contains(&v.slot),
        })
        .chain(unverified)
        .collect()
}

/// The slots of block `b`.
pub(crate) fn block_slots(b: u32) -> Vec<i64> {
    (0..BLOCK_SIZE as i64)
        .map(|i| i64::from(b) * BLOCK_SIZE as i64 + i)
        .collect()
}

/// The prefix cache's idle blocks, as the sweep cadence walks them.
pub(crate) fn idle_blocks(alloc: &BlockAllocator) -> crate::Result<CachedBlocks> {
    let blocks = (alloc.idle_cached()).map(|(b, c)| (b, c.parent.map(|(p, _)| p), c.index));
    Ok(CachedBlocks::new(BLOCK_SIZE, blocks)?)
}

/// The step arrays as kv-canary names them (the views its host side reads).
pub(crate) fn paged(a: &StepArrays) -> PagedStepSlices<'_> {
    PagedStepSlices {
        block_tables: &a.block_tables,
        blocks_per_row: MAX_BLOCKS,
        block_size: BLOCK_SIZE,
        context_lens: &a.context_lens,
        query_lens: &a.query_lens,
        bs: a.bs,
        input_ids: &a.input_ids,
        positions: &a.positions,
        slot_mapping: &a.slot_mapping,
    }
}
