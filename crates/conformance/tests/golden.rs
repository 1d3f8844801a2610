//! The golden vectors of the workspace's `tests/golden/` (SGLang's reference outputs) replayed
//! through the conformance runner — the same code as
//! `cargo run -p kv-canary-conformance -- tests/golden`.

use kv_canary_conformance::{
    load_dir, replay_case, run_files, Backend, Case, GoldenFile, Outcome, Report, RunOptions,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Ops the runner cannot replay yet: their cases must be skipped, and nothing else may be.
/// Shrink this list when adding a replay.
const NOT_YET_SUPPORTED: &[&str] = &[];

/// The workspace root, where the golden vectors live (the published library excludes them).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden_dir() -> PathBuf {
    workspace_root().join("tests/golden")
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
    let outputs = case.outputs.as_mut().expect("outputs");
    let Some(Value::String(h)) = outputs.pointer_mut("/canary_buf/hex") else {
        panic!("canary_buf.hex")
    };
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
    let (first, second): (Vec<Value>, Vec<Value>) = (rows[..8].to_vec(), rows[8..16].to_vec());
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
fn data_mut<'a>(json: &'a mut Value, path: &[&str]) -> &'a mut Vec<Value> {
    let pointer: String = path
        .iter()
        .chain(&["data"])
        .map(|k| format!("/{k}"))
        .collect();
    match json.pointer_mut(&pointer) {
        Some(Value::Array(items)) => items,
        _ => panic!("{pointer}: not an array"),
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
    assert_eq!(slots[7], Value::from(-7));
    slots[7] = Value::from(-8);
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
    data_mut(&mut case.inputs, &["write_plan", "write_seed_slot_indices"])[3] = Value::from(5);
    assert_eq!(
        replay_case(&case, Backend::Cpu),
        Outcome::Fail("write_plan.write_seed_slot_indices[3] expected -7 got 5".into())
    );
}

#[test]
fn error_cases_check_kind_and_values() {
    let files = load();
    let mut case = find(&files, "errors/plan_swa_slot_outside_lut");
    let Some(Value::Object(values)) = case.offending_values.as_mut() else {
        panic!("offending_values")
    };
    *values.values_mut().next().expect("an offending value") = Value::from(19);
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
    let shared = workspace_root().join("../shared/golden");
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

/// Every integer of every golden file survives parsing exactly: the decimal integers of the
/// file's text (outside strings), in file order, are the integers serde_json decoded, all in
/// `i64` (the files hold hashes near the `i64` extremes; a detour through `f64` would round
/// them). Needs `preserve_order`, so that objects are walked in file order.
#[test]
fn every_golden_integer_round_trips_exactly() {
    let mut checked = 0;
    let mut extremes = (0i64, 0i64);
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let mut decoded = Vec::new();
        integers(&value, &mut decoded);
        let written = integer_tokens(&text);
        assert_eq!(decoded.len(), written.len(), "{}", path.display());
        for (i, (got, want)) in decoded.iter().zip(&written).enumerate() {
            let got =
                got.unwrap_or_else(|| panic!("{}: integer {i} is not an i64", path.display()));
            assert_eq!(got.to_string(), *want, "{}: integer {i}", path.display());
            extremes = (extremes.0.min(got), extremes.1.max(got));
        }
        checked += written.len();
    }
    assert!(checked > 100_000, "only {checked} integers checked");
    // Values past 2^53 occur, so the check covers integers an f64 cannot hold.
    assert!(
        extremes.0 < -(1 << 53) && extremes.1 > 1 << 53,
        "{extremes:?}"
    );
}

/// Every number in `value`, depth first in document order: `Some` when it is an `i64`.
fn integers(value: &Value, out: &mut Vec<Option<i64>>) {
    match value {
        Value::Number(n) => out.push(n.as_i64()),
        Value::Array(items) => items.iter().for_each(|v| integers(v, out)),
        Value::Object(members) => members.values().for_each(|v| integers(v, out)),
        _ => {}
    }
}

/// The number tokens of JSON `text` outside strings, as written.
fn integer_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => {
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\\' => drop(chars.next()),
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '-' | '0'..='9' => {
                let mut end = at + c.len_utf8();
                while let Some(&(i, c)) = chars.peek() {
                    if !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-')) {
                        break;
                    }
                    end = i + c.len_utf8();
                    chars.next();
                }
                out.push(text[at..end].to_string());
            }
            _ => {}
        }
    }
    out
}

/// The four documented divergences (README): a golden case the reference completed on inputs
/// of a listed kind passes as a divergence when the crate returns the listed error, and only
/// then: the same error on other inputs, or another error, fails.
#[test]
fn documented_divergences_and_nothing_else_are_accepted() {
    let files = load();
    let divergent = |case: &Case| match replay_case(case, Backend::Cpu) {
        Outcome::Divergence(what) => what,
        other => panic!("{}: {other:?}", case.name),
    };
    // 1. Offsets that decrease inside the active requests, not into a zero tail.
    let mut case = find(
        &files,
        "write/skip_negative_slots_empty_request_padding_tail",
    );
    data_mut(&mut case.inputs, &["write_plan", "write_offsets"])[2] = Value::from(2);
    assert!(divergent(&case).starts_with("write_offsets decrease"));
    // 2. More requests than the batch over the zeroed tail: offsets [0, 5, 0].
    let mut case = find(&files, "write/realkv_none_mode_with_sources");
    data_mut(&mut case.inputs, &["write_plan", "write_offsets"])[2] = Value::from(0);
    assert!(divergent(&case).starts_with("write_num_valid_reqs larger"));
    // 3. Zero-length inputs.
    let mut case = find(&files, "write/empty_plan_noop");
    for key in ["input_ids", "positions", "out_cache_loc"] {
        data_mut(&mut case.inputs, &[key]).clear();
        *case.inputs.pointer_mut(&format!("/{key}/shape")).unwrap() = Value::from(vec![0]);
    }
    assert!(divergent(&case).starts_with("a write of zero-length inputs"));
    // 4. Scatter offsets that decrease.
    let mut case = find(&files, "flow04_expected_tokens_wrong_input/step02_scatter");
    data_mut(&mut case.inputs, &["offsets"])[1] = Value::from(9);
    assert!(divergent(&case).starts_with("scatter offsets that decrease"));

    // Not a listed kind: a write whose offsets run past its inputs (not decreasing) still
    // fails, though its error is the same variant as divergences 1 and 2.
    let mut case = find(&files, "write/slot0_is_written");
    data_mut(&mut case.inputs, &["write_plan", "write_offsets"])[1] = Value::from(30);
    let Outcome::Fail(why) = replay_case(&case, Backend::Cpu) else {
        panic!("offsets past the inputs are no documented divergence")
    };
    assert!(why.starts_with("unexpected error"), "{why}");
}
