//! The guard's operator records (issue 33 item 4): one stable line per new violation and a
//! statistics line every `stats_every` steps; with `serde` the same as JSON lines, with
//! `tracing` as events, with `metrics` as counters (`cargo test --features
//! serde,tracing,metrics --test guard_records`; `.ci/run` runs it).

use kv_canary::guard::{Action, Guard, Judgement, Policy};
use kv_canary::step::{Canary, SlotRows, TailKv};
use kv_canary::{Batch, BatchRow, Cap, PlanInputs, ReqToToken, Shape, WriteInputsView};

type C = Canary<Cap<32>, Cap<2>, Cap<8>, Cap<16>, Cap<16>>;

/// Request "a" prefills slots 1, 2, 3; "c" prefills 5, 6, then decodes into "a"'s slot 2; "a"
/// decodes and its verify reports slot 2. Returns every step's judgement.
fn stray_write(guard: &mut Guard<&'static str>) -> Vec<Judgement<&'static str>> {
    let table = ReqToToken::from_vec(3, 4, vec![0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let mut canary: C = Canary::full(Shape::new(), Cap::<16>, Cap::<16>);
    let steps: [(i64, i64, i64, &str, &[i64]); 4] = [
        (1, 0, 3, "a", &[1, 2, 3]),
        (2, 0, 2, "c", &[5, 6]),
        (2, 2, 1, "c", &[2]),
        (1, 3, 1, "a", &[4]),
    ];
    steps
        .iter()
        .map(|&(rp, cached, new, who, slots)| {
            let batch: Batch = [BatchRow {
                req_pool_index: rp,
                prefix_len: cached,
                extend_len: new,
            }]
            .into_iter()
            .collect();
            let mut loc = slots.to_vec();
            loc.resize(8, -1);
            let ids = vec![9i64; 8];
            let positions: Vec<i64> = (cached..cached + 8).collect();
            let inputs = PlanInputs::full(&batch, &table);
            let write = WriteInputsView::new(Cap::<8>, &ids, &positions, &loc).unwrap();
            let report = canary
                .plan(&inputs)
                .unwrap()
                .verify_head()
                .unwrap()
                .write(&write)
                .unwrap()
                .verify_tail(TailKv::NONE)
                .unwrap();
            let rows = SlotRows::new(&inputs, &loc).unwrap();
            guard.judge(&report, &rows, &[Some(who)]).unwrap()
        })
        .collect()
}

fn guard() -> Guard<&'static str> {
    Guard::new(Policy {
        violations: Action::Log,
        ..Policy::default()
    })
    .with_stats_every(2)
}

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

#[cfg(feature = "tracing")]
#[test]
fn records_are_tracing_events() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tracing_core::{span, Event, Level, Metadata, Subscriber};

    /// Counts the guard's events by level.
    struct Count(Arc<[AtomicUsize; 2]>);
    impl Subscriber for Count {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            if event.metadata().target() == "kv_canary" {
                let k = usize::from(*event.metadata().level() == Level::INFO);
                self.0[k].fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }
    let counts = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let dispatch = tracing_core::Dispatch::new(Count(Arc::clone(&counts)));
    let judgements =
        tracing_core::dispatcher::with_default(&dispatch, || stray_write(&mut guard()));
    let violations: usize = judgements
        .iter()
        .flat_map(|j| &j.records)
        .filter(|r| matches!(r, kv_canary::guard::Record::Violation { .. }))
        .count();
    assert_eq!(
        counts[0].load(Ordering::Relaxed),
        violations,
        "a WARN a violation"
    );
    assert_eq!(
        counts[1].load(Ordering::Relaxed),
        2,
        "an INFO a stats record"
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
