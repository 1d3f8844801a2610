//! The conformance runner's file loader and replay: golden files made of one recorded case,
//! mutated at the JSON level (numbers replaced by extremes, nodes by other types, keys removed,
//! arrays grown or cut) and at the byte level, through `GoldenFile::parse` and, when it parses,
//! `replay` on the CPU backend and `judge`.

use crate::gen::ensure;
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary_conformance::{judge, replay, Backend, GoldenFile, Outcome, Replayed};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::OnceLock;

/// Every recorded case of `tests/golden/*.json`, each as the header and case of its file.
fn cases() -> &'static [(Value, Value)] {
    static CASES: OnceLock<Vec<(Value, Value)>> = OnceLock::new();
    CASES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        let mut out = Vec::new();
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap();
            let mut file: Value = serde_json::from_str(&text).unwrap();
            let cases = file["cases"].take();
            for case in cases.as_array().into_iter().flatten() {
                out.push((file.clone(), case.clone()));
            }
        }
        out
    })
}

/// Numbers for fields that size an allocation: small, or too large for any machine (never one
/// that would really allocate gigabytes).
const SIZES: [i64; 12] = [0, 1, 2, 3, 4, 5, 8, 16, -1, 1 << 40, 1 << 62, i64::MAX];
/// Numbers for every other field.
const VALUES: [i64; 16] = [
    0,
    1,
    -1,
    2,
    7,
    31,
    32,
    i32::MAX as i64,
    i32::MAX as i64 + 1,
    i32::MIN as i64,
    i32::MIN as i64 - 1,
    1 << 40,
    i64::MAX,
    i64::MIN,
    -2,
    16,
];

/// Applies one mutation to the `target`-th node (pre-order) of `v`; `sizes` is whether an
/// enclosing key names a capacity. Returns the nodes left to skip.
fn mutate(
    v: &mut Value,
    target: &mut usize,
    sizes: bool,
    u: &mut Unstructured<'_>,
) -> Result<bool> {
    if *target == 0 {
        match u.int_in_range(0..=9)? {
            0..=4 if v.is_number() || v.is_array() && !sizes => {
                let n = if sizes {
                    *u.choose(&SIZES)?
                } else {
                    *u.choose(&VALUES)?
                };
                if let Value::Array(items) = v {
                    // Grow or cut an array.
                    if u.ratio(1, 2)? {
                        items.pop();
                    } else {
                        items.push(json!(n));
                    }
                } else {
                    *v = match u.int_in_range(0..=7)? {
                        0 => json!(u64::MAX),
                        1 => json!(0.5),
                        _ => json!(n),
                    };
                }
            }
            5 => *v = Value::Null,
            6 => *v = json!("x"),
            7 => *v = json!([]),
            8 => *v = json!({}),
            _ => {
                if let Value::Object(map) = v {
                    if !map.is_empty() {
                        let i = u.int_in_range(0..=map.len() - 1)?;
                        let key = map.keys().nth(i).cloned().expect("in range");
                        map.shift_remove(&key);
                    }
                } else {
                    *v = json!(true);
                }
            }
        }
        return Ok(true);
    }
    *target -= 1;
    match v {
        Value::Array(items) => {
            for item in items {
                if mutate(item, target, sizes, u)? {
                    return Ok(true);
                }
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let sizes = sizes || key.contains("capacity");
                if mutate(item, target, sizes, u)? {
                    return Ok(true);
                }
            }
        }
        _ => {}
    }
    Ok(false)
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let cases = cases();
    let (header, case) = &cases[u.choose_index(cases.len())?];
    let mut case = case.clone();
    for _ in 0..u.int_in_range(0..=4)? {
        let mut target = u.int_in_range(0..=count(&case) - 1)?;
        mutate(&mut case, &mut target, false, u)?;
    }
    let mut file = header.clone();
    file["count"] = json!(1);
    file["cases"] = json!([case]);
    if u.ratio(1, 16)? {
        file[*u.choose(&["format", "format_version", "count", "marker"])?] = json!(2);
    }
    let mut text = serde_json::to_string(&file).expect("serializes");
    if u.ratio(1, 8)? {
        // Byte-level damage: a cut, an inserted byte, a flipped byte.
        let mut bytes = text.into_bytes();
        for _ in 0..u.int_in_range(1..=3)? {
            let i = u.int_in_range(0..=bytes.len() - 1)?;
            match u.int_in_range(0..=2)? {
                0 => bytes.truncate(i),
                1 => bytes.insert(i, *u.choose(b"{}[],:\"-0123456789.eE \\")?),
                _ => bytes[i] ^= 1 << u.int_in_range(0..=7)?,
            }
            if bytes.is_empty() {
                break;
            }
        }
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let parsed = match GoldenFile::parse("fuzz", &text) {
        Err(e) => {
            let message = e.to_string();
            return Ok(if message.starts_with("kv-canary:") {
                Ok("parse error".to_owned())
            } else {
                Err(format!("parse: message without the prefix: {message:?}"))
            });
        }
        Ok(parsed) => parsed,
    };
    let mut label = String::new();
    for case in &parsed.cases {
        let Some(replayed) = replay(case, Backend::Cpu) else {
            label = format!("{} unsupported", case.op);
            continue;
        };
        let kind = match &replayed {
            Replayed::MutatedThenFailed { error, buffer } => {
                return Ok(Err(format!(
                    "replay {}: {buffer} modified before the error {error}",
                    case.name
                )));
            }
            Replayed::Error(e) => {
                let message = e.to_string();
                if let Err(m) = ensure(message.starts_with("kv-canary:"), || {
                    format!(
                        "replay {}: message without the prefix: {message:?}",
                        case.name
                    )
                }) {
                    return Ok(Err(m));
                }
                let debug = format!("{e:?}");
                let kind: String = debug
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                format!("error {kind}")
            }
            Replayed::Outputs(_) => "outputs".to_owned(),
        };
        let verdict = match judge(case, replayed) {
            Outcome::Pass => "pass",
            Outcome::Divergence(_) => "divergence",
            Outcome::Fail(_) => "differs",
            Outcome::Skip(_) => "skip",
        };
        label = format!("{} {kind} {verdict}", case.op);
    }
    Ok(Ok(label))
}
