//! The engine of `examples/engine_views.rs`: its steps through views of its own `u32` arrays
//! give exactly the reports of the same steps through owned copies, and a stray `req_to_token`
//! store is reported by the head verify of the same step.

#[path = "../examples/engine_views/sim.rs"]
mod sim;

use kv_canary::LaunchTag;

#[test]
fn views_of_the_engine_arrays_report_exactly_what_owned_copies_do() {
    let (views, view_reports) = sim::run(300, None, true).expect("well-formed steps");
    let (owned, owned_reports) = sim::run(300, None, false).expect("well-formed steps");
    assert_eq!((views.steps, views.detected_at), (300, None));
    assert_eq!(view_reports, owned_reports);
    assert_eq!(views.entries_checked, owned.entries_checked);
    assert!(views.entries_checked > 10_000, "{views:?}");
}

#[test]
fn a_stray_req_to_token_store_is_reported_through_views() {
    let (views, view_reports) = sim::run(300, Some(120), true).expect("well-formed steps");
    let (owned, owned_reports) = sim::run(300, Some(120), false).expect("well-formed steps");
    assert_eq!(views.detected_at, Some(120));
    assert_eq!(owned.detected_at, Some(120));
    assert_eq!(view_reports, owned_reports);
    let last = view_reports.last().unwrap();
    assert!(
        last.violations
            .iter()
            .any(|v| v.launch_tag() == Some(LaunchTag::HeadKFull)),
        "{:?}",
        last.violations
    );
}
