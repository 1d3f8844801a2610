//! Where each bug hides in the engine, and how the simulation tells when it has corrupted the
//! cache (the injection step the canary's detection is measured from).

use super::super::Bug;
use super::Engine;

/// Where the injected bug stands.
#[derive(Clone, Debug, Default)]
pub struct BugState {
    /// The bug to inject, if any.
    pub bug: Option<Bug>,
    /// The first step at which it may strike.
    pub armed_at: u64,
    /// When the buggy code path ran, and what it did.
    pub fired: Option<(u64, String)>,
    /// When the cache was first corrupted by it (the injection step), and how.
    pub injected: Option<(u64, String)>,
}

impl Engine {
    /// Whether `bug` is the injected bug, has not struck yet, and may strike at `step`.
    pub(super) fn armed(&self, bug: Bug, step: u64) -> bool {
        self.bug.bug == Some(bug) && self.bug.fired.is_none() && step >= self.bug.armed_at
    }

    /// Records that the cache was corrupted at `step` (first time only). Without a bug this is
    /// a defect of the simulation, kept as an anomaly.
    pub(super) fn corrupted(&mut self, step: u64, what: String) {
        if self.bug.bug.is_none() {
            self.anomalies.push(format!("step {step}: {what}"));
        } else if self.bug.injected.is_none() {
            self.bug.injected = Some((step, what));
        }
    }

    /// kv-scribble: a store meant for this step's KV lands in the middle of a scheduled
    /// request's prefix, after that slot's KV was written and fingerprinted.
    pub(super) fn scribble(&mut self, step: u64) {
        let Some(s) = self.scheduled.iter().find(|s| s.prefix >= 2).copied() else {
            return;
        };
        let r = &self.running[s.req];
        let pos = s.prefix / 2;
        let slot = r.slots[pos];
        self.kv.scribble_v(slot);
        let what = format!(
            "8 V bytes of slot {slot} (request #{}, position {pos}) overwritten after their write",
            r.id
        );
        self.bug.fired = Some((step, what.clone()));
        self.corrupted(step, what);
    }

    /// Another request that still shares a slot of request `i` and runs for 3 more steps.
    pub(super) fn sharer_of(&self, i: usize) -> Option<usize> {
        let mine = &self.running[i].slots;
        let shared: Vec<i64> = mine
            .iter()
            .copied()
            .filter(|&s| self.slots.refs(s) > 1)
            .collect();
        (0..self.running.len()).filter(|&j| j != i).find(|&j| {
            let r = &self.running[j];
            let lasts = r.in_prefill() || r.generated() + 3 < r.output_len;
            lasts && r.slots.iter().any(|s| shared.contains(s))
        })
    }

    /// use-after-free: the finished request's slots are freed without looking at their
    /// reference counts, although another request shares its prompt prefix.
    pub(super) fn free_ignoring_refcounts(&mut self, step: u64, i: usize) {
        let sharer = self.running[self.sharer_of(i).expect("checked by the caller")].id;
        let r = &self.running[i];
        self.rows.release(r.row);
        let mut dangling = 0;
        for &s in r.slots.iter().rev() {
            dangling += usize::from(self.slots.release_ignoring_refcount(s));
        }
        let what = format!(
            "request #{} finished; its {dangling} prompt-prefix slots were freed although \
             request #{sharer} still uses them",
            r.id
        );
        self.bug.fired = Some((step, what));
    }

    /// stale-row: the finished request's row and slots go back to the pools, but it stays in the
    /// running list and keeps being scheduled.
    pub(super) fn keep_scheduling_after_finish(&mut self, step: u64, i: usize) {
        let r = &mut self.running[i];
        r.stale = true;
        self.rows.release(r.row);
        r.slots
            .iter()
            .rev()
            .for_each(|&s| self.slots.release(s, true));
        let what = format!(
            "request #{} finished; its row {} and {} slots were freed, but it is still scheduled",
            r.id,
            r.row,
            r.slots.len()
        );
        self.bug.fired = Some((step, what));
    }
}
