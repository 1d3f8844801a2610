//! The mini engine of `examples/mini_engine.rs`, under test: thousands of clean steps report no
//! violation, and each injected bug is reported within two steps of the step it first corrupts
//! the cache (never before).

// The example prints parts of the outcome this test does not read.
#[allow(dead_code)]
#[path = "../examples/mini_engine/sim/mod.rs"]
mod sim;

use kv_canary::{FailReason, LaunchTag};
use sim::{Bug, Config, Outcome, MAX_BS};

/// Clean steps per run (both the FULL and the SWA canary run every step).
const CLEAN_STEPS: u64 = 2000;

fn run(cfg: Config) -> Outcome {
    let outcome = sim::run(&cfg).expect("every launch of the mini engine is well-formed");
    assert!(
        outcome.anomalies.is_empty(),
        "{cfg:?}: {:?}",
        outcome.anomalies
    );
    outcome
}

#[test]
fn thousands_of_clean_steps_report_no_violation() {
    for seed in [7, 11] {
        let cfg = Config {
            steps: CLEAN_STEPS,
            seed,
            bug: None,
            swa_window: Some(16),
            ..Config::default()
        };
        let out = run(cfg);
        assert_eq!(
            out.steps, CLEAN_STEPS,
            "seed {seed}: {:?}",
            out.first_violations
        );
        assert_eq!((out.detected_at, out.violations), (None, 0), "seed {seed}");
        // The run exercised what the canary guards: full batches, finished and admitted
        // requests (recycled rows and slots), shared prompt prefixes.
        assert_eq!(out.max_running, MAX_BS, "seed {seed}");
        assert!(out.stats.served > 300, "seed {seed}: {:?}", out.stats);
        assert!(
            out.stats.shared_tokens > 1000,
            "seed {seed}: {:?}",
            out.stats
        );
        assert!(
            out.entries_checked > 1_000_000,
            "seed {seed}: {}",
            out.entries_checked
        );
    }
}

/// Runs `bug` from three seeds and injection steps; returns the outcomes after checking that
/// the first violation comes at or after the corruption, and at most 2 steps after it.
fn detected(bug: Bug) -> Vec<Outcome> {
    [(1, 150), (2, 400), (3, 650)]
        .into_iter()
        .map(|(seed, inject_at)| {
            let cfg = Config {
                steps: CLEAN_STEPS,
                seed,
                bug: Some(bug),
                inject_at,
                swa_window: Some(16),
            };
            let out = run(cfg);
            let (injected, what) = out.bug.injected.clone().unwrap_or_else(|| {
                panic!(
                    "{cfg:?}: the bug never corrupted the cache ({:?})",
                    out.bug.fired
                )
            });
            assert!(injected >= inject_at, "{cfg:?}: {what}");
            let found = out
                .detected_at
                .unwrap_or_else(|| panic!("{cfg:?}: not detected: {what}"));
            assert!(
                (injected..=injected + 2).contains(&found),
                "{cfg:?}: corrupted at step {injected}, first reported at step {found}"
            );
            assert!(!out.detection.is_empty() && !out.first_violations.is_empty());
            out
        })
        .collect()
}

fn tags(out: &Outcome) -> Vec<LaunchTag> {
    out.detection
        .iter()
        .filter_map(|v| v.launch_tag())
        .collect()
}

#[test]
fn use_after_free_is_reported_within_two_steps() {
    for out in detected(Bug::UseAfterFree) {
        // The slot's new owner rewrote it: its old chain position or its KV bytes are gone.
        let bits = FailReason::VERIFY_POSITION_MISMATCH | FailReason::VERIFY_REAL_KV_HASH_MISMATCH;
        assert!(
            out.detection.iter().any(|v| v.reasons.intersects(bits)),
            "{:?}",
            out.detection
        );
        // The guard names the requests that read the freed slots: their prefix is lost.
        assert!(
            out.verdicts.iter().any(|v| v.contains("Recompute (Victim")),
            "{:?}",
            out.verdicts
        );
    }
}

#[test]
fn off_by_one_in_req_to_token_is_reported_before_the_forward_pass() {
    for out in detected(Bug::OffByOne) {
        // A bookkeeping bug: the head launches see it, before the forward pass reads the cache.
        assert!(
            tags(&out).contains(&LaunchTag::HeadKFull),
            "{:?}",
            out.detection
        );
    }
}

#[test]
fn stale_row_is_reported_within_two_steps() {
    detected(Bug::StaleRow);
}

#[test]
fn kv_scribble_is_reported_by_the_v_tail_only() {
    for out in detected(Bug::KvScribble) {
        for v in &out.detection {
            assert_eq!(v.reasons, FailReason::VERIFY_REAL_KV_HASH_MISMATCH, "{v}");
            assert!(
                matches!(
                    v.launch_tag(),
                    Some(LaunchTag::TailVFull | LaunchTag::TailVSwa)
                ),
                "{v}"
            );
        }
    }
}
