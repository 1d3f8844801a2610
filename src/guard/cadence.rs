//! [`SweepCadence`]: sweeps of the engine's idle cached prefixes on a per-step budget (issue 33
//! item 3). Cached KV that no running request reads is checked by no step; a sweep checks it, and
//! the cadence spreads the sweeps over steps: each step it takes the next `budget` idle cached
//! slots of the engine's prefix cache ([`CachedPrefixes`]), continuing where the last step
//! stopped, so a step costs at most `budget` sweep entries, and a pass of `ceil(N / budget)`
//! steps checks every idle cached slot of a cache that holds `N` of them once (from any step,
//! every slot is checked within `ceil(N / budget) + 1` steps while the cache stays the same).
//!
//! The engine's prefix cache walks its idle runs however it stores them (a radix tree's
//! unreferenced nodes, a block table's cached blocks, an SWA group's resident slots only): a run
//! is consecutive positions of one chain, its slots and the slot of the position before its
//! first (the chain's predecessor, or none at position 0).

use crate::error::Error;
use crate::step::SweepEntries;

/// A run of cached positions of one chain: `slots[i]` holds position `first_position + i`,
/// chained to `slots[i - 1]`, the first to `predecessor` (`None`: a chain head at position 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedRun<'a> {
    /// The run's slots, in position order.
    pub slots: &'a [i64],
    /// The first slot's position.
    pub first_position: usize,
    /// The slot of the position before the first (`None` at position 0).
    pub predecessor: Option<i64>,
}

/// The engine's prefix cache, as the cadence walks it: its idle (unreferenced) cached runs, in
/// an order that stays the same while the cache does.
pub trait CachedPrefixes {
    /// Calls `visit` on every idle cached run.
    fn idle_runs(&self, visit: &mut dyn FnMut(CachedRun<'_>));
}

/// A block-granular prefix cache's idle blocks (vLLM's and mistral.rs's caches), as the
/// cadence walks them: block `b` holds slots `b * block_size ..` in position order, and each
/// idle block comes with the block before it in its sequence (`None` for a sequence's first
/// block) and its index in the sequence (its first position is `index * block_size`).
///
/// ```
/// use kv_canary::guard::{CachedBlocks, SweepCadence};
/// // Blocks of 16 tokens: block 7 holds a cached sequence's positions 0..16, block 3 the
/// // next 16 (the block before it is 7). (block, block before, index in the sequence):
/// let idle = CachedBlocks::new(16, [(7u32, None, 0), (3, Some(7), 1)])?;
/// let mut cadence = SweepCadence::new(20);
/// let entries = cadence.next_entries(&idle)?; // the 20 slots 112..128, 48..52
/// assert_eq!(entries.as_slice().len(), 20);
/// # Ok::<(), kv_canary::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedBlocks {
    block_size: i64,
    /// (first slot, the slot before it, first position) of each idle block.
    blocks: Vec<(i64, Option<i64>, usize)>,
}

impl CachedBlocks {
    /// The idle blocks `blocks`, each `(block, block before, index in its sequence)`, of a
    /// cache of `block_size`-token blocks (block ids in the engine's block-table type: `u32`,
    /// `i32` or `i64`). [`Error::OutOfRange`] names a zero block size, a negative block and
    /// a block whose slots or positions do not fit in `i64`.
    pub fn new<B: Into<i64>>(
        block_size: usize,
        blocks: impl IntoIterator<Item = (B, Option<B>, usize)>,
    ) -> Result<Self, Error> {
        let size = i64::try_from(block_size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or(Error::OutOfRange {
                what: "cached block size",
                value: i64::try_from(block_size).unwrap_or(i64::MAX),
                allowed: "[1, i64::MAX]",
            })?;
        // The first slot of `block`, when all of its slots fit in `i64`.
        let first_slot = |block: i64| {
            block
                .checked_mul(size)
                .filter(|first| block >= 0 && first.checked_add(size - 1).is_some())
                .ok_or(Error::OutOfRange {
                    what: "cached block",
                    value: block,
                    allowed: "[0, i64::MAX / block size)",
                })
        };
        let blocks = blocks
            .into_iter()
            .map(|(block, before, index)| {
                let first = first_slot(block.into())?;
                let before = before.map(|b| first_slot(b.into())).transpose()?;
                let position = index
                    .checked_mul(block_size)
                    .filter(|p| {
                        p.checked_add(block_size)
                            .is_some_and(|e| i64::try_from(e).is_ok())
                    })
                    .ok_or(Error::OutOfRange {
                        what: "cached block's index in its sequence",
                        value: i64::try_from(index).unwrap_or(i64::MAX),
                        allowed: "positions below i64::MAX",
                    })?;
                Ok((first, before.map(|b| b + size - 1), position))
            })
            .collect::<Result<_, Error>>()?;
        Ok(CachedBlocks {
            block_size: size,
            blocks,
        })
    }
}

impl CachedPrefixes for CachedBlocks {
    fn idle_runs(&self, visit: &mut dyn FnMut(CachedRun<'_>)) {
        let mut slots = Vec::new();
        for &(first, predecessor, first_position) in &self.blocks {
            slots.clear();
            slots.extend(first..first + self.block_size);
            visit(CachedRun {
                slots: &slots,
                first_position,
                predecessor,
            });
        }
    }
}

/// Spreads sweeps of a prefix cache's idle slots over steps, `budget` slots a step.
#[derive(Clone, Debug)]
pub struct SweepCadence {
    budget: usize,
    /// Idle slots of the current pass already swept.
    cursor: usize,
    entries: SweepEntries,
    passes: u64,
}

impl SweepCadence {
    /// A cadence of `budget` (at least 1) sweep entries a step.
    pub fn new(budget: usize) -> Self {
        SweepCadence {
            budget: budget.max(1),
            cursor: 0,
            entries: SweepEntries::new(),
            passes: 0,
        }
    }

    /// The per-step budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Passes over the whole cache completed so far.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// This step's sweep entries: the next at most `budget` idle cached slots of `cache` after
    /// those of the earlier steps of this pass (a run cut by the budget continues the next
    /// step, chained to its last swept slot). Empty for a cache without idle slots. Sweep them
    /// with [`Canary::sweep`](crate::step::Canary::sweep). A slot or position past `i64::MAX`
    /// is the [`SweepEntries`] error naming it.
    pub fn next_entries(&mut self, cache: &impl CachedPrefixes) -> Result<&SweepEntries, Error> {
        self.entries.clear();
        let (budget, start) = (self.budget, self.cursor);
        let mut seen = 0usize;
        let mut result = Ok(());
        cache.idle_runs(&mut |run: CachedRun<'_>| {
            let (from, to) = (seen, seen + run.slots.len());
            seen = to;
            let (lo, hi) = (from.max(start), to.min(start + budget));
            if lo >= hi || result.is_err() {
                return;
            }
            let (a, b) = (lo - from, hi - from);
            let predecessor = if a == 0 {
                run.predecessor
            } else {
                Some(run.slots[a - 1])
            };
            result = self
                .entries
                .push_node(predecessor, run.first_position + a, &run.slots[a..b]);
        });
        result?;
        self.cursor += self.entries.as_slice().len();
        if self.cursor >= seen {
            self.passes += u64::from(seen > 0);
            // The pass is complete: the next step starts over (a cache that changed between
            // steps is walked anew from its start).
            self.cursor = 0;
        }
        Ok(&self.entries)
    }
}
