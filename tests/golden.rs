//! The golden vectors of `tests/golden/` (SGLang's reference outputs) replayed through the
//! conformance runner — the same code as `cargo run --example conformance -- tests/golden`.

use kv_canary::conformance::json::Json;
use kv_canary::conformance::{
    load_dir, replay_case, run_files, Backend, Case, GoldenFile, Outcome, Report, RunOptions,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Ops the runner cannot replay yet: their cases must be skipped, and nothing else may be.
/// Shrink this list when adding a replay.
const NOT_YET_SUPPORTED: &[&str] = &[];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn load() -> Vec<GoldenFile> {
    load_dir(golden_dir()).expect("tests/golden loads")
}

/// The runner's report over every golden file, computed once for all the tests that read it.
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| run_files(&load(), &RunOptions::default()))
}

/// How many cases of `ops` the golden file `file` holds, each asserted to pass.
fn passing(file: &str, ops: &[&str]) -> usize {
    let cases: Vec<_> = report()
        .results
        .iter()
        .filter(|r| r.file == file && ops.contains(&r.op.as_str()))
        .collect();
    for r in &cases {
        assert_eq!(r.outcome, Outcome::Pass, "{r}");
    }
    cases.len()
}

#[test]
fn every_golden_case_passes_or_is_skipped() {
    let report = report();
    let failures: Vec<String> = report
        .results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail(_)))
        .map(ToString::to_string)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{}", report.summary());
}

#[test]
fn every_plan_case_actually_runs() {
    assert_eq!(passing("plan", &["plan"]), 39);
    assert_eq!(passing("pipeline", &["plan"]), 17);
    assert_eq!(passing("errors", &["plan"]), 5);
    assert_eq!(
        passing("errors", &["verify_plan_allocate", "write_plan_allocate"]),
        2
    );
}

#[test]
fn every_write_verify_and_scatter_case_actually_runs() {
    assert_eq!(passing("write", &["write"]), 11);
    assert_eq!(passing("verify", &["verify"]), 17);
    assert_eq!(passing("pipeline", &["write"]), 11);
    assert_eq!(passing("pipeline", &["verify"]), 12);
    assert_eq!(passing("pipeline", &["scatter_req_token_ids"]), 2);
    assert_eq!(passing("errors", &["write"]), 2);
    assert_eq!(passing("errors", &["real_kv_source_new"]), 5);
    assert_eq!(passing("errors", &["scatter_req_token_ids"]), 3);
}

/// A stride-64 write must leave the tail bytes of every slot alone: a golden tail byte changed
/// to something else is reported with its row and column.
#[test]
fn a_changed_canary_tail_byte_is_reported() {
    let files = load();
    let mut case = find(&files, "write/anchor_chain_5_stride64");
    let Some(Json::Object(outputs)) = case.outputs.as_mut() else {
        panic!("outputs")
    };
    let (_, buf) = outputs.iter_mut().find(|(k, _)| k == "canary_buf").unwrap();
    let Json::Object(members) = buf else {
        panic!("canary_buf")
    };
    let (_, hex) = members.iter_mut().find(|(k, _)| k == "hex").unwrap();
    let Json::Str(h) = hex else { panic!("hex") };
    // slot 3, byte 40: a tail byte (pre-filled with 0xa5)
    let at = 2 * (3 * 64 + 40);
    assert_eq!(&h[at..at + 2], "a5");
    h.replace_range(at..at + 2, "00");
    assert_eq!(
        replay_case(&case, Backend::Cpu),
        Outcome::Fail("canary_buf[3][40] expected 0x00 got 0xa5".into())
    );
}

/// A violation row recorded in another order than the reference's fails on the CPU backend,
/// which records rows sequentially like the reference.
#[test]
fn violation_rows_are_compared_in_order_on_the_cpu() {
    let files = load();
    let mut case = find(&files, "verify/token_flip_check_on");
    let rows = data_mut(case.outputs.as_mut().unwrap(), &["violation_ring"]);
    let (first, second): (Vec<Json>, Vec<Json>) = (rows[..8].to_vec(), rows[8..16].to_vec());
    assert_ne!(first, second);
    rows[..8].clone_from_slice(&second);
    rows[8..16].clone_from_slice(&first);
    assert!(matches!(
        replay_case(&case, Backend::Cpu),
        Outcome::Fail(why) if why.starts_with("violation_ring[0]")
    ));
}

#[test]
fn exactly_the_unsupported_ops_are_skipped() {
    let report = report();
    for r in &report.results {
        let unsupported = NOT_YET_SUPPORTED.contains(&r.op.as_str());
        let skipped = matches!(r.outcome, Outcome::Skip(_));
        assert_eq!(
            skipped, unsupported,
            "{r}: update NOT_YET_SUPPORTED when adding a replay"
        );
    }
    let skipped_ops: BTreeSet<&str> = report
        .results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Skip(_)))
        .map(|r| r.op.as_str())
        .collect();
    let listed: BTreeSet<&str> = NOT_YET_SUPPORTED.iter().copied().collect();
    assert_eq!(skipped_ops, listed);
}

fn find(files: &[GoldenFile], name: &str) -> Case {
    files
        .iter()
        .flat_map(|f| &f.cases)
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no golden case {name}"))
        .clone()
}

/// The `data` array of the tensor at `path` inside `json`.
fn data_mut<'a>(json: &'a mut Json, path: &[&str]) -> &'a mut Vec<Json> {
    let mut at = json;
    for key in path.iter().copied().chain(["data"]) {
        let Json::Object(members) = at else {
            panic!("{key}: not an object")
        };
        at = &mut members.iter_mut().find(|(k, _)| k == key).expect(key).1;
    }
    match at {
        Json::Array(items) => items,
        _ => panic!("not an array"),
    }
}

#[test]
fn a_changed_untouched_tail_is_reported_with_its_index() {
    let files = load();
    let mut case = find(&files, "plan/spec_3_6_worked_example");
    let slots = data_mut(
        case.outputs.as_mut().unwrap(),
        &["verify_plan", "verify_slot_indices"],
    );
    assert_eq!(slots[7], Json::Int(-7));
    slots[7] = Json::Int(-8);
    assert_eq!(
        replay_case(&case, Backend::Cpu),
        Outcome::Fail("verify_plan.verify_slot_indices[7] expected -8 got -7".into())
    );
}

#[test]
fn a_changed_initial_buffer_is_caught_in_the_outputs() {
    let files = load();
    let mut case = find(&files, "plan/spec_3_6_worked_example");
    // Seeds at index >= bs are left untouched, so a different initial value shows up there.
    data_mut(&mut case.inputs, &["write_plan", "write_seed_slot_indices"])[3] = Json::Int(5);
    assert_eq!(
        replay_case(&case, Backend::Cpu),
        Outcome::Fail("write_plan.write_seed_slot_indices[3] expected -7 got 5".into())
    );
}

#[test]
fn error_cases_check_kind_and_values() {
    let files = load();
    let mut case = find(&files, "errors/plan_swa_slot_outside_lut");
    let Some(Json::Object(values)) = case.offending_values.as_mut() else {
        panic!("offending_values")
    };
    values[0].1 = Json::Int(19);
    let Outcome::Fail(why) = replay_case(&case, Backend::Cpu) else {
        panic!("a wrong offending value must fail")
    };
    assert!(why.contains("offending value 19"), "{why}");

    // A case that succeeds cannot satisfy an expected error.
    let mut ok = find(&files, "plan/spec_3_6_worked_example");
    ok.error = case.error.clone();
    ok.offending_values = case.offending_values.clone();
    ok.outputs = None;
    let Outcome::Fail(why) = replay_case(&ok, Backend::Cpu) else {
        panic!("success where an error is expected must fail")
    };
    assert!(why.starts_with("expected an error"), "{why}");
}

/// `tests/golden/` must stay a byte-identical copy of the shared golden folder when it exists.
#[test]
fn golden_copy_is_in_sync_with_shared() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/golden");
    if !shared.is_dir() {
        println!("sync check skipped: {} does not exist", shared.display());
        return;
    }
    let listing = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let (theirs, ours) = (listing(&shared), listing(&golden_dir()));
    assert_eq!(theirs, ours, "file sets differ: shared vs tests/golden");
    for name in &theirs {
        let a = std::fs::read(shared.join(name)).unwrap();
        let b = std::fs::read(golden_dir().join(name)).unwrap();
        assert!(
            a == b,
            "{name} differs between shared/golden and tests/golden"
        );
    }
}
