//! What a report says of a step as a whole: [`StepStatus`] (clean, violations, or unverified
//! with the [`Unverified`] gaps, such as a [`PlanOverflow`]), and the one-line forms every report
//! ends with. Below both [`Findings`](super::Findings) (which derives a status from a report)
//! and the reports themselves, so neither imports the other.

use core::fmt;

/// A step whose plan asked for more verify entries than the verify capacity holds: the plan
/// wrote `enable = 0` and no verify launch of the step checked any slot (spec §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanOverflow {
    /// Verify entries the batch needed (`T`): known to both backends' plans (the CUDA plan
    /// kernel writes it into the verify plan beside `enable`); `None` only for a plan given by
    /// parts ([`VerifyPlan::from_parts`](crate::VerifyPlan::from_parts) with `enable = 0`).
    pub needed: Option<u64>,
    /// The shape's verify capacity.
    pub capacity: usize,
}

/// Why a step's report cannot say "clean": what went unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Unverified {
    /// The step's plan overflowed its verify capacity, so no prefix slot was checked.
    pub plan_overflow: Option<PlanOverflow>,
    /// Steps before this one (since the previous report) that did not complete: dropped before
    /// their tail verify, or ended by an error (a plan refused by its checks included, which
    /// queued nothing: the step it began was not checked either).
    pub abandoned_steps: u64,
}

impl Unverified {
    /// Whether anything went unchecked.
    pub fn any(&self) -> bool {
        self.plan_overflow.is_some() || self.abandoned_steps > 0
    }
}

/// One line: `the plan needed 1200 verify entries but the verify capacity is 32, so no slot was
/// checked; 1 earlier step did not complete (...)`.
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
            1 => write!(
                f,
                "{sep}1 earlier step did not complete (an error ended it, or it was dropped before its tail verify)"
            ),
            n => write!(
                f,
                "{sep}{n} earlier steps did not complete (an error ended them, or they were dropped before their tail verify)"
            ),
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

/// `clean`, `1 violation`, `2 violations` or `UNVERIFIED: <gaps>; 0 violations`.
impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let violations = |n| Counted(n, "violation", "violations");
        match *self {
            StepStatus::Clean => f.write_str("clean"),
            StepStatus::Violations { recorded } => write!(f, "{}", violations(recorded)),
            StepStatus::Unverified { gaps, recorded } => {
                write!(f, "UNVERIFIED: {gaps}; {}", violations(recorded))
            }
        }
    }
}

/// A count and its noun, singular for 1 (`1 violation`, `2 violations`): the reports' one-line
/// forms.
pub(crate) struct Counted(pub u64, pub &'static str, pub &'static str);

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Counted(n, one, many) = *self;
        write!(f, "{n} {}", if n == 1 { one } else { many })
    }
}

impl StepStatus {
    /// Writes the status as the reports' one-line forms end: `clean`, `1 violation (0
    /// dropped)`, `2 violations (1 dropped)` or `UNVERIFIED: <gaps>; 0 violations (0 dropped)`,
    /// `dropped` being the rows the ring had no room for.
    pub(crate) fn write_line(self, f: &mut fmt::Formatter<'_>, dropped: u64) -> fmt::Result {
        let violations = |n| Counted(n, "violation", "violations");
        match self {
            StepStatus::Clean => f.write_str("clean"),
            StepStatus::Violations { recorded } => {
                write!(f, "{} ({dropped} dropped)", violations(recorded))
            }
            StepStatus::Unverified { gaps, recorded } => write!(
                f,
                "UNVERIFIED: {gaps}; {} ({dropped} dropped)",
                violations(recorded)
            ),
        }
    }
}
