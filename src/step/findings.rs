//! What every report of the canary says, whatever produced it: [`Findings`].
//!
//! A step's report ([`StepReport`](super::StepReport), and on a CUDA stream
//! `cuda::DeviceStepReport`), a sweep's ([`SweepReport`](super::SweepReport),
//! `cuda::DeviceSweepReport`) and a step's head findings ([`HeadFindings`](super::HeadFindings))
//! each carry their violation rows, the rows the ring had no room for, and what went unchecked.
//! An engine's handling of them (log the line, stop the requests whose slots were hit, count what
//! went unchecked) is one generic function over [`Findings`], on either backend.

use super::status::{StepStatus, Unverified};
use crate::canary::Violation;
use core::fmt;

/// The findings of a canary report: its decoded violation rows, the rows that did not fit in
/// the ring, and what went unchecked; from them its [`status`](Self::status). The `Display`
/// form is the report's one line.
///
/// The report types also have these methods inherently, so `report.is_clean()` needs no import;
/// the trait is for code that takes any of them:
///
/// ```
/// use kv_canary::step::{Canary, Findings, SweepEntries, TailKv};
/// use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape};
///
/// /// The engine's one handler of every report: the slots to quarantine, or an error when
/// /// something went unchecked.
/// fn hit_slots(report: &impl Findings) -> Result<Vec<i64>, String> {
///     if !report.unverified().any() {
///         Ok(report.violations().iter().map(|row| row.slot).collect())
///     } else {
///         Err(format!("unchecked: {report}"))
///     }
/// }
///
/// let mut canary = Canary::full(Shape::<Cap<32>, Cap<4>, Cap<16>>::new(), Cap::<64>, Cap::<16>);
/// let table = ReqToToken::from_vec(4, 8, (0..32).collect())?;
/// let mut inputs = canary.write_inputs();
/// let p = inputs.parts_mut();
/// p.input_ids[..3].copy_from_slice(&[7, 8, 9]);
/// p.positions[..3].copy_from_slice(&[0, 1, 2]);
/// p.out_cache_loc[..3].copy_from_slice(&[8, 9, 10]);
/// let batch = Batch::from_columns([1], [0], [3]);
/// let step = canary.plan(&PlanInputs::full(&batch, &table))?.verify_head()?;
/// assert_eq!(hit_slots(&step.head_findings()?), Ok(vec![]));
/// let report = step.write(&inputs)?.verify_tail(TailKv::NONE)?;
/// assert_eq!(hit_slots(&report), Ok(vec![]));
///
/// // A sweep of the request's cached slots that expects slot 10 at a wrong position (7, not 2).
/// let mut entries = SweepEntries::new();
/// entries.push_table_row(&table, 1, 2)?; // slots 8, 9 at positions 0, 1
/// entries.push_node(Some(9), 7, &[10])?;
/// let sweep = canary.sweep(&entries, TailKv::NONE)?;
/// assert_eq!(hit_slots(&sweep), Ok(vec![10, 10])); // the K and the V launch
/// # Ok::<(), kv_canary::Error>(())
/// ```
pub trait Findings: fmt::Display {
    /// The violation rows recorded and stored in the ring, decoded (a device records them in no
    /// fixed order across requests: compare as sets).
    fn violations(&self) -> &[Violation];

    /// Rows recorded that did not fit in the ring (counted, not stored).
    fn dropped(&self) -> u64;

    /// What went unchecked: a plan over its verify capacity (with both numbers), steps
    /// abandoned before this one. [`Unverified::any`] is false when every check ran.
    fn unverified(&self) -> Unverified;

    /// Violations recorded, stored or dropped.
    fn recorded(&self) -> u64 {
        self.violations().len() as u64 + self.dropped()
    }

    /// Clean, violations, or unverified (with the numbers). A check that did not run is never
    /// clean.
    fn status(&self) -> StepStatus {
        StepStatus::of(self.unverified(), self.recorded())
    }

    /// Whether every check ran over every planned slot and recorded nothing.
    fn is_clean(&self) -> bool {
        self.status() == StepStatus::Clean
    }
}

/// Implements [`Findings`] for a report type with `violations` and `dropped` fields, its
/// `unverified` given as a function of the report, and gives the type the trait's methods
/// inherently (so callers need no import).
macro_rules! findings {
    ($report:ty, unverified: $unverified:expr) => {
        impl $crate::step::Findings for $report {
            fn violations(&self) -> &[$crate::Violation] {
                &self.violations
            }
            fn dropped(&self) -> u64 {
                self.dropped
            }
            fn unverified(&self) -> $crate::step::Unverified {
                let unverified: fn(&$report) -> $crate::step::Unverified = $unverified;
                unverified(self)
            }
        }

        impl $report {
            /// Violations recorded, stored or dropped ([`Findings::recorded`](crate::step::Findings::recorded)).
            pub fn recorded(&self) -> u64 {
                $crate::step::Findings::recorded(self)
            }

            /// What went unchecked, with the numbers
            /// ([`Findings::unverified`](crate::step::Findings::unverified)).
            pub fn unverified(&self) -> $crate::step::Unverified {
                $crate::step::Findings::unverified(self)
            }

            /// Clean, violations, or unverified, with the numbers
            /// ([`Findings::status`](crate::step::Findings::status)).
            pub fn status(&self) -> $crate::step::StepStatus {
                $crate::step::Findings::status(self)
            }

            /// Whether every check ran over every planned slot and recorded nothing
            /// ([`Findings::is_clean`](crate::step::Findings::is_clean)).
            pub fn is_clean(&self) -> bool {
                $crate::step::Findings::is_clean(self)
            }
        }
    };
}
pub(crate) use findings;
