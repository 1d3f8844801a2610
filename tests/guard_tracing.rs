//! The guard's records as `tracing` events (issue 33 item 4; `cargo test --features tracing
//! --test guard_tracing`; `.ci/run` runs it). Its own test binary: `tracing`'s callsite interest
//! is process-wide, and other tests emitting the same events on other threads while this one's
//! thread-local subscriber counts them made it miss events (CI, session 25).

#[path = "shared/stray_write.rs"]
#[allow(dead_code)]
mod stray_write;

#[cfg(feature = "tracing")]
use stray_write::{guard, stray_write};

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
