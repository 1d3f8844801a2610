//! What a step returns: [`StepReport`], with one summary per launch ([`KvPair`]) and the decoded
//! violations of the step.

use crate::canary::{HealthCounters, Violation};
use crate::cpu::{PlanSummary, VerifySummary, WriteSummary};
use crate::real_kv::RealKv;
use core::fmt;

/// One value per half of a KV pool: `k` for the K half, `v` for the V half.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvPair<T> {
    /// The K half's.
    pub k: T,
    /// The V half's.
    pub v: T,
}

impl<T> KvPair<T> {
    /// Both halves, K first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        [&self.k, &self.v].into_iter()
    }

    /// Applies `f` to both halves.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> KvPair<U> {
        KvPair {
            k: f(self.k),
            v: f(self.v),
        }
    }
}

/// The real-KV fingerprints of the tail launches: the K half folds the K bytes of each slot, the
/// V half the V bytes (spec §2.10, §2.11). Head launches never fold (spec §1).
///
/// Every active source must cover every slot of the canary, so that no tail launch can fail
/// half-way through a step.
pub type TailKv<'a> = KvPair<RealKv<'a>>;

impl<'a> KvPair<RealKv<'a>> {
    /// No fingerprint on either half (every expected `real_kv_hash` is 0).
    pub const NONE: TailKv<'static> = KvPair {
        k: RealKv::NONE,
        v: RealKv::NONE,
    };

    /// The K half folds `k`, the V half `v`.
    pub fn new(k: RealKv<'a>, v: RealKv<'a>) -> Self {
        KvPair { k, v }
    }
}

/// Everything one step did: the plan, one summary per launch, the health counters, and the
/// violations it recorded.
///
/// `violations` holds the rows recorded during this step only, decoded, in recording order: head
/// verify (K, V), head write (K, V), tail verify (K, V), tail write (K, V). Each row's
/// [`launch_tag`](Violation::launch_tag) says which launch found it and its
/// [`reasons`](Violation::reasons) what. Rows past the ring's capacity are lost; `dropped` counts
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    /// What the plan op produced.
    pub plan: PlanSummary,
    /// The verify capacity the plan was made for (the canary's shape).
    pub verify_capacity: usize,
    /// The head verify launches (no real-KV fold).
    pub head_verify: KvPair<VerifySummary>,
    /// The head write launches (no real-KV fold).
    pub head_write: KvPair<WriteSummary>,
    /// The tail verify launches (real-KV fold).
    pub tail_verify: KvPair<VerifySummary>,
    /// The tail write launches (real-KV fold).
    pub tail_write: KvPair<WriteSummary>,
    /// The health counters of the head launches after this step (cumulative, spec §2.7).
    pub head_counters: KvPair<HealthCounters>,
    /// The health counters of the tail launches after this step (cumulative).
    pub tail_counters: KvPair<HealthCounters>,
    /// This step's violation rows, decoded, in recording order.
    pub violations: Vec<Violation>,
    /// This step's rows that did not fit in the ring.
    pub dropped: u64,
    /// Steps started on the canary since the previous report that never reached their tail
    /// verify (dropped, or ended by an error): their checks did not all run.
    pub abandoned_steps: u64,
}

/// A step whose plan asked for more verify entries than the verify capacity holds: the plan
/// wrote `enable = 0` and no verify launch of the step checked any slot (spec §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanOverflow {
    /// Verify entries the batch needed (`T`), where the backend knows it (the CPU does; the
    /// CUDA plan kernel records only that `T` exceeded the capacity).
    pub needed: Option<u64>,
    /// The shape's verify capacity.
    pub capacity: usize,
}

/// Why a step's report cannot say "clean": what went unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Unverified {
    /// The step's plan overflowed its verify capacity, so no prefix slot was checked.
    pub plan_overflow: Option<PlanOverflow>,
    /// Steps before this one (since the previous report) that did not run all their launches.
    pub abandoned_steps: u64,
}

impl Unverified {
    /// Whether anything went unchecked.
    pub fn any(&self) -> bool {
        self.plan_overflow.is_some() || self.abandoned_steps > 0
    }
}

/// One line: `the plan needed 1200 verify entries but the verify capacity is 32, so no slot was
/// checked; 1 earlier step did not run all its launches`.
impl fmt::Display for Unverified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(o) = self.plan_overflow {
            match o.needed {
                Some(needed) => write!(
                    f,
                    "the plan needed {needed} verify entries but the verify capacity is {}, so no slot was checked",
                    o.capacity
                )?,
                None => write!(
                    f,
                    "the plan needed more verify entries than the verify capacity of {}, so no slot was checked",
                    o.capacity
                )?,
            }
            sep = "; ";
        }
        match self.abandoned_steps {
            0 => Ok(()),
            1 => write!(f, "{sep}1 earlier step did not run all its launches"),
            n => write!(f, "{sep}{n} earlier steps did not run all their launches"),
        }
    }
}

/// What a step's report amounts to. A check that did not run never reports "clean".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepStatus {
    /// Every launch ran, every planned slot was checked, and nothing was recorded.
    Clean,
    /// Every launch ran over every planned slot; `recorded` violations (stored or dropped).
    Violations {
        /// Violations recorded, stored or dropped.
        recorded: u64,
    },
    /// Something the step (or an earlier, abandoned one) should have checked was not; the
    /// `recorded` violations are those of the checks that did run.
    Unverified {
        /// What went unchecked.
        gaps: Unverified,
        /// Violations recorded by the checks that ran.
        recorded: u64,
    },
}

impl StepStatus {
    /// The status of a step with these gaps and `recorded` violations: unverified when anything
    /// went unchecked, whatever was recorded.
    pub fn of(gaps: Unverified, recorded: u64) -> Self {
        if gaps.any() {
            StepStatus::Unverified { gaps, recorded }
        } else if recorded > 0 {
            StepStatus::Violations { recorded }
        } else {
            StepStatus::Clean
        }
    }
}

impl StepReport {
    /// Whether every check of the step ran over every planned slot and recorded no violation.
    /// False for a step whose plan overflowed its verify capacity (nothing was checked) and for
    /// the first report after an abandoned step: see [`status`](Self::status).
    pub fn is_clean(&self) -> bool {
        self.status() == StepStatus::Clean
    }

    /// What went unchecked, if anything: a plan over the verify capacity, abandoned steps.
    pub fn unverified(&self) -> Unverified {
        Unverified {
            plan_overflow: (!self.plan.enabled).then_some(PlanOverflow {
                needed: Some(self.plan.requested_entries),
                capacity: self.verify_capacity,
            }),
            abandoned_steps: self.abandoned_steps,
        }
    }

    /// Clean, violations, or unverified (with the numbers).
    pub fn status(&self) -> StepStatus {
        StepStatus::of(self.unverified(), self.recorded())
    }

    /// Violations recorded, stored or dropped.
    pub fn recorded(&self) -> u64 {
        self.violations.len() as u64 + self.dropped
    }

    /// Canary slots checked, over the four verify launches (slot-0 entries excluded).
    pub fn entries_checked(&self) -> u64 {
        let verifies = self.head_verify.iter().chain(self.tail_verify.iter());
        verifies.map(|s| s.checked as u64).sum()
    }

    /// Canary slots stamped, over the four write launches.
    pub fn entries_written(&self) -> u64 {
        let writes = self.head_write.iter().chain(self.tail_write.iter());
        writes.map(|s| s.written).sum()
    }
}

/// One line: `bs 3, 12 verify entries (enabled), 5 tokens written; 48 slots checked, 20 stamped;
/// clean` — or `2 violations (0 dropped)`, or `UNVERIFIED: ...` naming what was not checked.
impl fmt::Display for StepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bs {}, {} verify entries ({}), {} tokens written; {} slots checked, {} stamped; ",
            self.plan.bs,
            self.plan.requested_entries,
            if self.plan.enabled {
                "enabled"
            } else {
                "DISABLED: over capacity"
            },
            self.plan.write_tokens,
            self.entries_checked(),
            self.entries_written(),
        )?;
        match self.status() {
            StepStatus::Clean => f.write_str("clean"),
            StepStatus::Violations { recorded } => {
                write!(f, "{recorded} violations ({} dropped)", self.dropped)
            }
            StepStatus::Unverified { gaps, recorded } => write!(
                f,
                "UNVERIFIED: {gaps}; {recorded} violations ({} dropped)",
                self.dropped
            ),
        }
    }
}
