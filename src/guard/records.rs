//! [`Record`]: the lines operators and tools read (issue 33 item 4). One stable line per new
//! violation and one statistics line every `stats_every` judged steps (SGLang prints its stats
//! every 100 steps); with the `serde` feature the same records serialize (one JSON object a
//! line with serde_json), with `tracing` the guard emits them as events, with `metrics` it counts
//! them through the `metrics` facade. Each feature is off by default and costs nothing then.
//!
//! The line formats are stable (tools may parse them):
//!
//! ```text
//! kv-canary violation step=<n> launch=<TAG> slot=<s> position=<p> reasons=<R1|R2> stored_token=<t> expected_token=<e> requests=<ids>
//! kv-canary stats step=<n> violations=<v> dropped=<d> unverified_steps=<u>
//! ```

use crate::canary::{LaunchTag, Violation};
use core::fmt;

/// Running statistics of a guard's judged steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stats {
    /// Steps judged.
    pub step: u64,
    /// Violations judged (each once).
    pub violations: u64,
    /// Violation rows the rings dropped.
    pub dropped: u64,
    /// Steps whose checks did not all run.
    pub unverified_steps: u64,
}

/// One operator record: a new violation, or the statistics so far.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case"))]
pub enum Record<Id> {
    /// A violation judged for the first time.
    Violation {
        /// The judged step it came with (1-based).
        step: u64,
        /// The launch that recorded it (SGLang's tag name), `UNKNOWN` for a malformed row.
        launch: &'static str,
        /// The slot.
        slot: i64,
        /// The stored (verify) or written (write) position.
        position: i64,
        /// The failure reasons' names.
        reasons: Vec<&'static str>,
        /// The stored or written token.
        stored_token: i64,
        /// The expected token (-1: none).
        expected_token: i64,
        /// The requests it concerns (victims and culprit), as the guard judged them.
        requests: Vec<Id>,
    },
    /// The statistics so far.
    Stats(Stats),
}

impl<Id> Record<Id> {
    /// The record of `violation`, judged with step `step`, concerning `requests`.
    pub(crate) fn violation(step: u64, violation: &Violation, requests: Vec<Id>) -> Self {
        Record::Violation {
            step,
            launch: violation.launch_tag().map_or("UNKNOWN", LaunchTag::name),
            slot: violation.slot,
            position: violation.position,
            reasons: violation
                .reasons
                .iter_names()
                .map(|(name, _)| name)
                .collect(),
            stored_token: violation.stored_token,
            expected_token: violation.expected_token,
            requests,
        }
    }
}

impl<Id: fmt::Debug> fmt::Display for Record<Id> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Violation {
                step,
                launch,
                slot,
                position,
                reasons,
                stored_token,
                expected_token,
                requests,
            } => write!(
                f,
                "kv-canary violation step={step} launch={launch} slot={slot} position={position} \
                 reasons={} stored_token={stored_token} expected_token={expected_token} \
                 requests={requests:?}",
                reasons.join("|")
            ),
            Record::Stats(s) => write!(
                f,
                "kv-canary stats step={} violations={} dropped={} unverified_steps={}",
                s.step, s.violations, s.dropped, s.unverified_steps
            ),
        }
    }
}

/// Emits `record` as a `tracing` event (feature `tracing`): violations at WARN, statistics at
/// INFO, target `kv_canary`.
#[cfg(feature = "tracing")]
pub(crate) fn trace<Id: fmt::Debug>(record: &Record<Id>) {
    match record {
        Record::Violation { slot, launch, .. } => {
            tracing::warn!(target: "kv_canary", slot, launch, "{record}");
        }
        Record::Stats(s) => {
            tracing::info!(target: "kv_canary", step = s.step, violations = s.violations, "{record}");
        }
    }
}

/// Counts `record` through the `metrics` facade (feature `metrics`):
/// `kv_canary_violations_total{launch}` and, per statistics record, the gauges
/// `kv_canary_unverified_steps` and `kv_canary_dropped_rows`.
#[cfg(feature = "metrics")]
pub(crate) fn count<Id>(record: &Record<Id>) {
    match record {
        Record::Violation { launch, .. } => {
            metrics::counter!("kv_canary_violations_total", "launch" => *launch).increment(1);
        }
        Record::Stats(s) => {
            metrics::gauge!("kv_canary_unverified_steps").set(s.unverified_steps as f64);
            metrics::gauge!("kv_canary_dropped_rows").set(s.dropped as f64);
        }
    }
}
