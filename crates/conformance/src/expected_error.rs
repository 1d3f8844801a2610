//! Error cases: which error variant each golden error maps to, and the values it must name.
//!
//! Golden error messages are the reference's wording (function names, dtype spellings), so they
//! are compared by **kind**: each golden error is mapped to the variant(s) a conforming Rust
//! call returns ([`Error::variant_name`]: a [`kv_canary::Error`] variant, or for what the typed
//! API cannot express — `MissingInput`, `WrongElementType`, `Malformed` — one of this runner's
//! [`Error`]), and our message must contain every offending value the golden case lists
//! (`offending_values`, golden README §5.7). Numbers must appear as whole numbers (`8` does not
//! match inside `18`); string markers such as `"present"` / `"absent"` stand for an input, so
//! the input's *name* must appear instead.
//!
//! # The mapping
//!
//! | op | golden error (`raised_by`, message) | `Error` variant | values our message names |
//! |---|---|---|---|
//! | `plan` | `verify_capacity=X does not match verify_plan_out.verify_slot_indices.shape[0]=Y` | `CapacityMismatch` | `X`, `Y` |
//! | `plan` | the same with `X = 0` | `ZeroCapacity` | `0` only (a shape's capacity cannot be 0, so the zero is rejected when the shape is built, before any comparison with the buffer) |
//! | `plan` | `requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set` | `MissingInput` | both input names |
//! | `plan` | `SWA slot X is outside full_to_swa_index_mapping length L` | `LutIndexOutOfRange` | `X`, `L` |
//! | `verify_plan_allocate` | `VerifyPlan.allocate`: `verify_capacity must be positive, got 0` | `ZeroCapacity` | `0` |
//! | `write_plan_allocate` | `WritePlan.allocate`: `write_req_capacity must be positive, got 0` | `ZeroCapacity` | `0` |
//! | `write` | `expected input tensors are required when enable_write_input_assert=True` | `MissingInput` | the flag's and both tensors' names (a compile error in the typed API: `InputAssertOn` inputs always carry them) |
//! | `write` / `verify` | `at most 4 RealKvSource entries supported by the CUDA ABI, got N` | `TooManyRealKvSources` | `N`, `4` |
//! | `real_kv_source_new` | `page_size must be >= 1, got N` | `RealKvSource` | `N` |
//! | `real_kv_source_new` | `read_bytes must be a positive multiple of 16 in (0, num_bytes_per_token=B], got R` | `RealKvReadBytes` | `R`, `B` |
//! | `real_kv_source_new` | `tensor must be at least 2-D, got shape S` | `RealKvShape` | the dimensions of `S` |
//! | `real_kv_source_new` | `tensor row stride must be a multiple of 16 bytes, got N bytes` | `RealKvSource` | `N` |
//! | `scatter_req_token_ids` | `flat_in must be 1-D, got shape S` | `Malformed` (the dumped tensor's rank) | the dimensions of `S` |
//! | `scatter_req_token_ids` | `pool_out must be int32, got torch.int64` (`TypeError`) | `WrongElementType` | `i64` |
//! | `scatter_req_token_ids` | `offsets length L != bs+1 (B)` | `LengthMismatch` | `L`, `bs` |
//!
//! Ops gain rows here when their replay is added; an error case with no row fails (never passes).

use crate::case::Case;
use crate::Error;
use serde_json::{Map, Value};

/// What an error case requires of our error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedError {
    /// Acceptable `Error` variant names (any one).
    pub variants: &'static [&'static str],
    /// Texts our message must contain (numbers as whole numbers).
    pub values: Vec<Needle>,
}

/// One thing our message must name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needle {
    /// A number, matched as a whole number.
    Number(i64),
    /// A name, matched as a substring.
    Name(String),
}

/// Maps an error case to the [`ExpectedError`] of the table above; `Err` names a golden error
/// this runner has no mapping for.
pub fn expected_error(case: &Case) -> Result<ExpectedError, String> {
    let golden = case
        .error
        .as_ref()
        .ok_or_else(|| "not an error case".to_string())?;
    let offending = case
        .offending_values
        .as_ref()
        .and_then(Value::as_object)
        .ok_or_else(|| "error case without offending_values".to_string())?;
    let value = |key: &str| offending.get(key);
    let all = || needles(offending);
    let message = golden.message.as_str();
    let (variants, values): (&'static [&'static str], Vec<Needle>) = match case.op.as_str() {
        "plan" if message.contains("does not match") => {
            if value("verify_capacity").and_then(Value::as_i64) == Some(0) {
                (&["ZeroCapacity"], vec![Needle::Number(0)])
            } else {
                (&["CapacityMismatch"], all())
            }
        }
        "plan" if message.contains("requires req_to_verify_expected_tokens_valid_lens") => {
            (&["MissingInput"], all())
        }
        "plan" if message.contains("is outside full_to_swa_index_mapping length") => {
            (&["LutIndexOutOfRange"], all())
        }
        "verify_plan_allocate" | "write_plan_allocate" => (&["ZeroCapacity"], all()),
        "write" if message.contains("expected input tensors are required") => {
            (&["MissingInput"], all())
        }
        "write" | "verify" if message.contains("at most 4 RealKvSource entries") => {
            (&["TooManyRealKvSources"], all())
        }
        "real_kv_source_new" if message.contains("read_bytes must be") => {
            (&["RealKvReadBytes"], all())
        }
        "real_kv_source_new" if message.contains("must be at least 2-D") => {
            (&["RealKvShape"], all())
        }
        "real_kv_source_new"
            if message.contains("page_size must be")
                || message.contains("num_bytes_per_token must be")
                || message.contains("row stride must be") =>
        {
            (&["RealKvSource"], all())
        }
        "scatter_req_token_ids" if golden.kind == "TypeError" => (&["WrongElementType"], all()),
        "scatter_req_token_ids"
            if message.contains("must be 1-D") || message.contains("must be 2-D") =>
        {
            (&["Malformed"], all())
        }
        "scatter_req_token_ids" if message.contains("offsets length") => {
            (&["LengthMismatch"], all())
        }
        _ => {
            return Err(format!(
                "no Error mapping for {} `{}` raised by {}",
                golden.kind, golden.message, golden.raised_by
            ))
        }
    };
    Ok(ExpectedError { variants, values })
}

/// Every offending value as a needle: integers (also inside arrays) as numbers, the presence
/// markers `"present"` / `"absent"` and non-strings (flags) as the key's name, and any other
/// string (a dtype such as `"i64"`) as itself.
fn needles(offending: &Map<String, Value>) -> Vec<Needle> {
    let mut out = Vec::new();
    for (key, value) in offending {
        match value {
            Value::Number(n) if n.is_i64() => out.extend(n.as_i64().map(Needle::Number)),
            Value::Array(items) if items.iter().all(|i| i.as_i64().is_some()) => {
                out.extend(items.iter().filter_map(Value::as_i64).map(Needle::Number));
            }
            Value::String(s) if s != "present" && s != "absent" => {
                out.push(Needle::Name(s.clone()))
            }
            _ => out.push(Needle::Name(key.clone())),
        }
    }
    out
}

/// Checks our error against an error case: `Ok` when the variant is one of the expected ones
/// and the message names every offending value.
pub fn check_error(case: &Case, error: &Error) -> Result<(), String> {
    let expected = expected_error(case)?;
    let variant = error.variant_name();
    if !expected.variants.contains(&variant.as_str()) {
        return Err(format!(
            "error expected {} got {variant}: {error}",
            expected.variants.join(" or ")
        ));
    }
    let message = error.to_string();
    for needle in &expected.values {
        let found = match needle {
            Needle::Number(n) => contains_number(&message, *n),
            Needle::Name(name) => message.contains(name.as_str()),
        };
        if !found {
            let shown = match needle {
                Needle::Number(n) => n.to_string(),
                Needle::Name(s) => s.clone(),
            };
            return Err(format!(
                "error message does not name the offending value {shown}: {message}"
            ));
        }
    }
    Ok(())
}

/// Whether `n` occurs in `text` as a whole number (not inside a longer number, and a
/// non-negative `n` not preceded by `-`).
fn contains_number(text: &str, n: i64) -> bool {
    let needle = n.to_string();
    let bytes = text.as_bytes();
    text.match_indices(&needle).any(|(at, _)| {
        let end = at + needle.len();
        let before_ok = at == 0 || {
            let b = bytes[at - 1];
            !b.is_ascii_digit() && (n < 0 || b != b'-')
        };
        let after_ok = end == bytes.len() || !bytes[end].is_ascii_digit();
        before_ok && after_ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::GoldenError;

    fn case(op: &str, message: &str, offending: &str) -> Case {
        Case {
            name: "errors/x".into(),
            op: op.into(),
            flow: None,
            step: None,
            tags: vec![],
            inputs: Value::Object(Map::new()),
            outputs: None,
            error: Some(GoldenError {
                kind: "ValueError".into(),
                message: message.into(),
                raised_by: "ref".into(),
            }),
            offending_values: Some(serde_json::from_str(offending).unwrap()),
        }
    }

    #[test]
    fn whole_numbers_only() {
        assert!(contains_number("slot 18 is outside length 18", 18));
        assert!(!contains_number("slot 18 is outside", 8));
        assert!(!contains_number("slot 18 is outside", 1));
        assert!(!contains_number("got -2", 2));
        assert!(contains_number("got -2", -2));
        assert!(contains_number("8", 8));
    }

    #[test]
    fn capacity_mismatch_must_name_both_numbers() {
        let c = case(
            "plan",
            "kv-canary: f verify_capacity=5 does not match verify_slot_indices.shape[0]=4",
            r#"{"verify_capacity": 5, "verify_slot_indices_len": 4}"#,
        );
        let good = Error::from(kv_canary::Error::CapacityMismatch {
            what: "verify_capacity",
            expected: 5,
            found: 4,
        });
        assert_eq!(check_error(&c, &good), Ok(()));
        let wrong_value = Error::from(kv_canary::Error::CapacityMismatch {
            what: "verify_capacity",
            expected: 5,
            found: 3,
        });
        assert!(check_error(&c, &wrong_value)
            .unwrap_err()
            .contains("offending value 4"));
        let wrong_kind = Error::from(kv_canary::Error::ZeroCapacity {
            what: "verify_capacity",
            value: 0,
        });
        assert!(check_error(&c, &wrong_kind)
            .unwrap_err()
            .starts_with("error expected CapacityMismatch got ZeroCapacity"));
    }

    #[test]
    fn zero_argument_maps_to_zero_capacity() {
        let c = case(
            "plan",
            "kv-canary: f verify_capacity=0 does not match verify_slot_indices.shape[0]=8",
            r#"{"verify_capacity": 0, "verify_slot_indices_len": 8}"#,
        );
        let e = Error::from(kv_canary::Error::ZeroCapacity {
            what: "verify_capacity",
            value: 0,
        });
        assert_eq!(check_error(&c, &e), Ok(()));
    }

    #[test]
    fn presence_markers_need_the_input_names() {
        let c = case(
            "plan",
            "kv-canary: f requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set",
            r#"{"req_to_verify_expected_tokens": "present", "req_to_verify_expected_tokens_valid_lens": "absent"}"#,
        );
        let good = Error::MissingInput {
            what: "req_to_verify_expected_tokens_valid_lens",
            required_by: "req_to_verify_expected_tokens",
        };
        assert_eq!(check_error(&c, &good), Ok(()));
        let vague = Error::MissingInput {
            what: "valid_lens",
            required_by: "pool",
        };
        assert!(check_error(&c, &vague).is_err());
    }

    #[test]
    fn unmapped_errors_fail() {
        let c = case("defragment", "kv-canary: something", r#"{"x": 1}"#);
        let e = Error::from(kv_canary::Error::ZeroCapacity {
            what: "x",
            value: 1,
        });
        assert!(check_error(&c, &e)
            .unwrap_err()
            .starts_with("no Error mapping"));
    }

    #[test]
    fn variant_names_come_from_debug() {
        let e = Error::from(kv_canary::Error::LutIndexOutOfRange {
            slot: 1,
            lut_len: 1,
        });
        assert_eq!(e.variant_name(), "LutIndexOutOfRange");
    }
}
