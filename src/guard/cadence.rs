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
