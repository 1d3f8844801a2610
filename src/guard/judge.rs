//! [`Guard`]: judges each report's findings under the engine's [`Policy`].

use super::policy::{Action, Policy, Verdict};
use super::records::{Record, Stats};
use super::watchdog::Stall;
use crate::canary::{FailReason, Violation};
use crate::error::Error;
use crate::step::{Findings, SlotRows, Unverified};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// How a request is concerned by a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Role {
    /// Its verify entries read the failed slot: its cached prefix is corrupted.
    Victim,
    /// Its write landed in the slot (a verify row's last writer, or a write row's writer).
    Culprit,
}

/// One request's verdict, with the violation that decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestVerdict<Id> {
    /// The engine's request.
    pub request: Id,
    /// What happens to it.
    pub verdict: Verdict,
    /// How the deciding violation concerns it.
    pub role: Role,
    /// The deciding violation's slot.
    pub slot: i64,
    /// The deciding violation's reasons.
    pub reasons: FailReason,
}

/// What one report comes to under the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement<Id> {
    /// The violation rows not judged before (each violation once), when violations are not
    /// off; the engine logs these.
    pub new_violations: Vec<Violation>,
    /// One verdict per request concerned (the strongest when several violations concern it),
    /// under [`Action::PerRequest`]; [`Verdict::Keep`] for every one under [`Action::Log`]. A
    /// request that reads a corrupted record judged before (a fork or a later request sharing
    /// the cached prefix) is a victim then, once, though the violation is not new.
    pub verdicts: Vec<RequestVerdict<Id>>,
    /// What went unchecked, on the first report of a run of unverified ones (when unverified
    /// steps are not off); `None` while the run lasts and when every check ran.
    pub unverified: Option<Unverified>,
    /// The operator records of this step: one a new violation, and the statistics every
    /// `stats_every` judged steps ([`Guard::with_stats_every`]).
    pub records: Vec<Record<Id>>,
    /// The slots whose cached KV failed a verify (the new verify violations' slots, each once,
    /// in order): whatever the verdicts, an engine drops them from its prefix cache (a cache
    /// miss: their tokens are recomputed). A sweep's findings arrive here, since no request
    /// holds a swept slot ([`Guard::judge_sweep`]).
    pub lost_slots: Vec<i64>,
}

impl<Id: PartialEq> Judgement<Id> {
    /// The verdict on `request`, if any violation concerned it.
    pub fn verdict_of(&self, request: &Id) -> Option<Verdict> {
        self.verdicts
            .iter()
            .find(|v| v.request == *request)
            .map(|v| v.verdict)
    }
}

/// The fields that identify a violation across reports: the same corrupted record reported by
/// several steps is one violation.
type ViolationKey = [i64; 8];

fn key(v: &Violation) -> ViolationKey {
    [
        v.kernel_kind,
        v.slot,
        v.position,
        v.stored_token,
        v.expected_token,
        v.stored_chain_hash,
        v.expected_aux,
        v.reasons.bits(),
    ]
}

/// Judges reports under a [`Policy`]: remembers which request last wrote each slot (to name a
/// verify violation's culprit), which violations it judged (to judge each once) and whether the
/// last report was unverified (to report a run of them once). `Id` is the engine's request id.
#[derive(Clone, Debug)]
pub struct Guard<Id> {
    policy: Policy,
    last_writer: HashMap<i64, Id>,
    /// Each violation judged, with the requests judged for it (its culprit and victims).
    judged: HashMap<ViolationKey, HashSet<Id>>,
    unverified_run: bool,
    stats: Stats,
    stats_every: u64,
}

impl<Id: Clone + Eq + Hash + core::fmt::Debug> Guard<Id> {
    /// A guard under `policy`, with no history.
    pub fn new(policy: Policy) -> Self {
        Guard {
            policy,
            last_writer: HashMap::new(),
            judged: HashMap::new(),
            unverified_run: false,
            stats: Stats::default(),
            stats_every: 100,
        }
    }

    /// The same guard with a statistics record every `steps` judged steps (100 by default, as
    /// SGLang; at least 1).
    pub fn with_stats_every(self, steps: u64) -> Self {
        Guard {
            stats_every: steps.max(1),
            ..self
        }
    }

    /// The statistics so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Judges a sweep's report ([`Canary::sweep`](crate::step::Canary::sweep), idle cached
    /// slots no request holds): the same history, records and policy as [`judge`](Self::judge),
    /// but no verdicts (a swept slot's last writer may be long finished; its records still name
    /// it). What failed is in [`Judgement::lost_slots`]: the engine evicts those cache entries.
    pub fn judge_sweep(&mut self, report: &impl Findings) -> Result<Judgement<Id>, Error> {
        let mut judgement = self.judge(report, &SlotRows::default(), &[])?;
        judgement.verdicts.clear();
        Ok(judgement)
    }

    /// Judges `report` of the step whose batch rows are `rows` (from the inputs the step was
    /// planned from: [`SlotRows::new`]) and whose batch row `r` served `requests[r]` (`None`
    /// for a padding row), then records the slots the step wrote as its requests' (the culprits
    /// of later verify violations at those slots). A report taken one step late is judged
    /// with that step's `rows` and `requests`.
    ///
    /// Under [`Action::Fail`] a new violation, or the first report of a run of unverified ones,
    /// is an error ([`Error::GuardFailed`]) naming it; the guard's history is updated first, so
    /// the same finding does not fail twice.
    pub fn judge(
        &mut self,
        report: &impl Findings,
        rows: &SlotRows,
        requests: &[Option<Id>],
    ) -> Result<Judgement<Id>, Error> {
        let request = |r: usize| requests.get(r).cloned().flatten();
        let mut judgement = Judgement {
            new_violations: Vec::new(),
            verdicts: Vec::new(),
            unverified: None,
            records: Vec::new(),
            lost_slots: Vec::new(),
        };
        self.stats.step += 1;
        // Verify violations judged before that this report shows again: their readers not
        // judged for them yet (a later reader of a corrupted record) are victims now.
        let mut seen_before: Vec<Violation> = Vec::new();
        if self.policy.violations != Action::Off {
            for v in report.violations() {
                if let Entry::Vacant(e) = self.judged.entry(key(v)) {
                    e.insert(HashSet::new());
                    judgement.new_violations.push(*v);
                } else if !v.is_write() {
                    seen_before.push(*v);
                }
            }
        }
        // Verdicts, strongest per request, in the order requests are first concerned.
        let mut order: Vec<Id> = Vec::new();
        let mut strongest: HashMap<Id, RequestVerdict<Id>> = HashMap::new();
        let mut concern = |id: Id, verdict: Verdict, role: Role, v: &Violation| {
            let candidate = RequestVerdict {
                request: id.clone(),
                verdict,
                role,
                slot: v.slot,
                reasons: v.reasons,
            };
            match strongest.get(&id) {
                Some(have) if have.verdict >= verdict => {}
                Some(_) => {
                    strongest.insert(id, candidate);
                }
                None => {
                    order.push(id.clone());
                    strongest.insert(id, candidate);
                }
            }
        };
        let (victim, culprit) = match self.policy.violations {
            Action::PerRequest => (Verdict::Recompute, Verdict::Abort),
            _ => (Verdict::Keep, Verdict::Keep),
        };
        for v in &judgement.new_violations {
            if !v.is_write() && !judgement.lost_slots.contains(&v.slot) {
                judgement.lost_slots.push(v.slot);
            }
            let mut concerned = Vec::new();
            if v.is_write() {
                for &r in rows.written_by(v.slot) {
                    if let Some(id) = request(r) {
                        concern(id.clone(), culprit, Role::Culprit, v);
                        concerned.push(id);
                    }
                }
            } else {
                let victims: Vec<Id> = rows
                    .verified_by(v.slot)
                    .iter()
                    .filter_map(|&r| request(r))
                    .collect();
                // The culprit: a request of this step that wrote the slot (a misdirected write
                // the tail verify caught in the same step), else the slot's last writer.
                let this_step: Vec<Id> = rows
                    .written_by(v.slot)
                    .iter()
                    .filter_map(|&r| request(r))
                    .filter(|id| !victims.contains(id))
                    .collect();
                let writers = if this_step.is_empty() {
                    self.last_writer
                        .get(&v.slot)
                        .filter(|w| !victims.contains(w))
                        .cloned()
                        .into_iter()
                        .collect()
                } else {
                    this_step
                };
                for writer in writers {
                    concern(writer.clone(), culprit, Role::Culprit, v);
                    concerned.push(writer);
                }
                for id in victims {
                    concern(id.clone(), victim, Role::Victim, v);
                    concerned.push(id);
                }
            }
            if let Some(judged) = self.judged.get_mut(&key(v)) {
                judged.extend(concerned.iter().cloned());
            }
            judgement
                .records
                .push(Record::violation(self.stats.step, v, concerned));
        }
        for v in &seen_before {
            let Some(judged) = self.judged.get_mut(&key(v)) else {
                continue;
            };
            for id in rows.verified_by(v.slot).iter().filter_map(|&r| request(r)) {
                if judged.insert(id.clone()) {
                    concern(id, victim, Role::Victim, v);
                }
            }
        }
        judgement.verdicts = order
            .into_iter()
            .filter_map(|id| strongest.remove(&id))
            .collect();
        // This step's writes: their requests are the slots' last writers from now on.
        for (slot, writers) in rows.writes() {
            if let Some(id) = writers.last().and_then(|&r| request(r)) {
                self.last_writer.insert(slot, id);
            }
        }
        let unverified = report.unverified();
        self.stats.violations += judgement.new_violations.len() as u64;
        self.stats.dropped += report.dropped();
        self.stats.unverified_steps += u64::from(unverified.any());
        if self.stats.step.is_multiple_of(self.stats_every) {
            judgement.records.push(Record::Stats(self.stats));
        }
        for _record in &judgement.records {
            #[cfg(feature = "tracing")]
            super::records::trace(_record);
            #[cfg(feature = "metrics")]
            super::records::count(_record);
        }
        if unverified.any() {
            if !self.unverified_run && self.policy.unverified != Action::Off {
                judgement.unverified = Some(unverified);
            }
            self.unverified_run = true;
        } else {
            self.unverified_run = false;
        }
        if self.policy.violations == Action::Fail && !judgement.new_violations.is_empty() {
            let first = judgement.new_violations[0];
            return Err(Error::GuardFailed {
                finding: format!(
                    "{} new violation(s), the first {first}",
                    judgement.new_violations.len()
                ),
            });
        }
        if self.policy.unverified == Action::Fail {
            if let Some(u) = judgement.unverified {
                return Err(Error::GuardFailed {
                    finding: format!("a step went unverified: {u}"),
                });
            }
        }
        Ok(judgement)
    }

    /// The engine's answer to a [`Watchdog`](super::Watchdog) check: the stall, reported under
    /// every policy, or [`Error::GuardFailed`] naming it under [`Action::Fail`].
    pub fn watch(&self, stall: Option<Stall>) -> Result<Option<Stall>, Error> {
        match stall {
            Some(stall) if self.policy.watchdog == Action::Fail => Err(Error::GuardFailed {
                finding: format!("the canary's health: {stall}"),
            }),
            other => Ok(other),
        }
    }
}
