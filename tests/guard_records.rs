//! The guard's operator records (issue 33 item 4): one stable line per new violation and a
//! statistics line every `stats_every` steps; with `serde` the same as JSON lines, with
//! `tracing` as events (`tests/guard_tracing.rs`, a binary of its own), with `metrics` as
//! counters (`cargo test --features serde,tracing,metrics --test guard_records`; `.ci/run`
//! runs both).

#[path = "shared/stray_write.rs"]
mod stray_write;

use stray_write::{guard, stray_write};

#[test]
fn stable_lines_per_violation_and_stats() {
    let mut g = guard();
    let judgements = stray_write(&mut g);
    let lines: Vec<String> = judgements
        .iter()
        .flat_map(|j| j.records.iter().map(|r| r.to_string()))
        .collect();
    assert_eq!(
        lines[0],
        "kv-canary stats step=2 violations=0 dropped=0 unverified_steps=0"
    );
    let violation = lines
        .iter()
        .find(|l| l.contains("slot=2 "))
        .expect("a line for slot 2");
    assert!(
        violation.starts_with("kv-canary violation step=4 launch=HEAD_K_FULL slot=2 "),
        "{violation}"
    );
    assert!(violation.ends_with(r#"requests=["c", "a"]"#), "{violation}");
    assert!(lines
        .last()
        .unwrap()
        .starts_with("kv-canary stats step=4 violations="));
    assert_eq!(g.stats().step, 4);
    eprintln!("{}", lines.join("\n"));
}

#[cfg(feature = "serde")]
#[test]
fn records_are_json_lines() {
    let mut g = guard();
    let judgements = stray_write(&mut g);
    let json: Vec<serde_json::Value> = judgements
        .iter()
        .flat_map(|j| &j.records)
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let v = json
        .iter()
        .find(|v| v["kind"] == "violation" && v["slot"] == 2)
        .expect("slot 2");
    assert_eq!(v["launch"], "HEAD_K_FULL");
    assert_eq!(v["requests"], serde_json::json!(["c", "a"]));
    assert!(v["reasons"].as_array().is_some_and(|r| !r.is_empty()));
    assert_eq!(json[0]["kind"], "stats");
    assert_eq!(json[0]["step"], 2);
    let last = judgements.last().and_then(|j| j.records.last()).unwrap();
    let line = serde_json::to_string(last).unwrap();
    assert!(line.starts_with(r#"{"kind":"stats","step":4"#), "{line}");
    let stall = kv_canary::guard::Stall::AssertOff { steps: 3 };
    assert_eq!(
        serde_json::to_string(&stall).unwrap(),
        r#"{"AssertOff":{"steps":3}}"#
    );
}

#[cfg(feature = "metrics")]
#[test]
fn records_are_counted_through_metrics() {
    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// The violations counter's total, and the last value of every gauge.
    #[derive(Default)]
    struct Seen(AtomicU64, AtomicU64);
    impl CounterFn for Seen {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, Ordering::Relaxed);
        }
    }
    impl GaugeFn for Seen {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, value: f64) {
            self.1.store(value as u64 + 1, Ordering::Relaxed);
        }
    }
    struct Rec(Arc<Seen>);
    impl Recorder for Rec {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            assert_eq!(key.name(), "kv_canary_violations_total");
            Counter::from_arc(Arc::clone(&self.0))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            assert!(key.name().starts_with("kv_canary_"), "{key:?}");
            Gauge::from_arc(Arc::clone(&self.0))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
    let seen = Arc::new(Seen::default());
    let recorder = Rec(Arc::clone(&seen));
    let judgements = metrics::with_local_recorder(&recorder, || stray_write(&mut guard()));
    let violations = judgements
        .iter()
        .flat_map(|j| &j.records)
        .filter(|r| matches!(r, kv_canary::guard::Record::Violation { .. }))
        .count() as u64;
    assert!(violations > 0);
    assert_eq!(seen.0.load(Ordering::Relaxed), violations);
    assert!(
        seen.1.load(Ordering::Relaxed) > 0,
        "the stats gauges were set"
    );
}
