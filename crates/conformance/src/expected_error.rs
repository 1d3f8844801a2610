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
//! [`TEMPLATES`] lists every message template of spec §7 with the ops that raise it and where
//! it maps: to `Error` variants (the library's, or the runner's `MissingInput`,
//! `WrongElementType`, `Malformed` for what the typed API cannot express), or to "not
//! representable: a type error" with the ui case or test that proves it (such a case fails as
//! not replayable, never passes). `plan`'s capacity mismatch with a capacity of 0 or less maps
//! to `ZeroCapacity` naming that value. A message of no template fails as "no Error mapping",
//! naming it. The test `every_section_7_template_maps` runs every template through the mapper.

use crate::case::Case;
use crate::Error;
use serde_json::{Map, Value};

/// What an error case requires of our error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedError {
    /// Acceptable `Error` variant names (any one); empty when the template is not representable.
    pub variants: &'static [&'static str],
    /// Texts our message must contain (numbers as whole numbers).
    pub values: Vec<Needle>,
    /// For a template the typed API cannot express at run time: why, and the ui case (or the
    /// test) that proves it.
    pub not_representable: Option<&'static str>,
}

/// One thing our message must name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needle {
    /// A number, matched as a whole number.
    Number(i64),
    /// A name, matched as a substring.
    Name(String),
}

/// How a §7 template maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// To these `Error` variants (any one), naming every offending value.
    Variants(&'static [&'static str]),
    /// Not representable at run time: a type error, and the proof.
    TypeError(&'static str),
}

/// One message template of spec §7: the ops that raise it, text that identifies it, and where
/// it maps.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    /// The golden ops that raise it.
    pub ops: &'static [&'static str],
    /// Text every message of the template contains (after the `kv-canary:` / binding prefix).
    pub marker: &'static str,
    /// Where it maps.
    pub mapping: Mapping,
}

use Mapping::{TypeError, Variants};

/// Ops whose wrappers raise the generic tensor checks.
const TENSOR_OPS: &[&str] = &["plan", "write", "verify", "scatter_req_token_ids"];

/// Every message template of spec §7: the op-specific ones in the spec's order, then the
/// generic tensor checks every wrapper makes (so that `scratch length must be >= ...` is the
/// entries binding's, not a generic length's). The first whose op and marker match
/// a golden error is its mapping ([`template_of`]); `plan`'s capacity mismatch with a capacity
/// of 0 or less is `ZeroCapacity` ([`expected_error`]: a shape's capacity is positive, so it
/// is rejected before any comparison).
pub const TEMPLATES: &[Template] = &[
    Template {
        ops: &["plan"],
        marker: "needs full_to_swa_index_mapping when swa_window_size > 0",
        mapping: TypeError("`Swa::window(w)` is no `Group` until `.with_lut(&lut)`: ui fail/swa_without_lut.rs"),
    },
    Template {
        ops: &["plan"],
        marker: "supports at most bs=",
        // The CPU plans any bs (spec §9.2); the CUDA kernels scan at most 4096 rows.
        mapping: Variants(&["BatchTooLarge"]),
    },
    Template {
        ops: &["plan"],
        marker: "verify_slot_indices.shape[0]",
        mapping: Variants(&["CapacityMismatch"]),
    },
    Template {
        ops: &["plan"],
        marker: "requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set",
        mapping: Variants(&["MissingInput"]),
    },
    Template {
        ops: &["plan"],
        marker: "is outside full_to_swa_index_mapping length",
        mapping: Variants(&["LutIndexOutOfRange"]),
    },
    Template {
        ops: &["plan"],
        marker: "offsets kernel bs must be in",
        mapping: Variants(&["BatchTooLarge", "OutOfRange"]),
    },
    Template {
        ops: &["plan"],
        marker: "write_offsets_len must be positive",
        mapping: Variants(&["ZeroCapacity"]),
    },
    Template {
        ops: &["plan"],
        marker: "write_req_capacity must be non-negative",
        mapping: Variants(&["ZeroCapacity"]),
    },
    Template {
        ops: &["plan"],
        marker: "verify_capacity must be non-negative",
        mapping: Variants(&["ZeroCapacity"]),
    },
    Template {
        ops: &["plan"],
        marker: "req_to_token_stride0 must be positive",
        mapping: Variants(&["TableShape"]),
    },
    Template {
        ops: &["plan"],
        marker: "lut_len",
        mapping: Variants(&["LutIndexOutOfRange"]),
    },
    Template {
        ops: &["plan"],
        marker: "write_offsets_len must equal write_req_capacity + 1",
        mapping: Variants(&["LengthMismatch"]),
    },
    Template {
        ops: &["plan"],
        marker: "exceeds write_req_capacity",
        mapping: Variants(&["BatchExceedsWriteCapacity"]),
    },
    Template {
        ops: &["plan"],
        marker: "does not match the compiled specialization",
        mapping: TypeError("the LUT and pool variants are the `Group` and `ExpectedTokens` type parameters: README, SGLang's plan checks"),
    },
    Template {
        ops: &["plan"],
        marker: "valid_lens must be set with pool",
        mapping: Variants(&["MissingInput"]),
    },
    Template {
        ops: &["plan"],
        marker: "scratch length must be",
        mapping: TypeError("the plan ops have no scratch buffer argument: README, SGLang's plan checks"),
    },
    Template {
        ops: &["plan"],
        marker: "(offsets/entries contract broken)",
        mapping: TypeError("one pass computes T and writes all entries with enable = 1 or none: cpu::plan::tests::worked_example_overflow_leaves_entries_untouched"),
    },
    Template {
        ops: &["verify_plan_allocate"],
        marker: "verify_capacity must be positive",
        mapping: Variants(&["ZeroCapacity"]),
    },
    Template {
        ops: &["write_plan_allocate"],
        marker: "write_req_capacity must be positive",
        mapping: Variants(&["ZeroCapacity"]),
    },
    Template {
        ops: &["write", "verify"],
        marker: "RealKvSource entries supported by the CUDA ABI",
        mapping: Variants(&["TooManyRealKvSources"]),
    },
    Template {
        ops: &["write", "verify"],
        marker: "(viewed as uint8) must be 2-D",
        mapping: Variants(&["RealKvShape"]),
    },
    Template {
        ops: &["write"],
        marker: "expected input tensors are required when enable_write_input_assert=True",
        mapping: Variants(&["MissingInput"]),
    },
    Template {
        ops: &["write"],
        marker: "expected input tensors must be None when enable_write_input_assert=False",
        mapping: Variants(&["Malformed"]),
    },
    Template {
        ops: &["write"],
        marker: "presence must match enable_write_input_assert",
        mapping: Variants(&["MissingInput", "Malformed"]),
    },
    Template {
        ops: &["write"],
        marker: "write_offsets.size(0) must equal write_req_capacity + 1",
        mapping: Variants(&["LengthMismatch"]),
    },
    Template {
        ops: &["write", "verify"],
        marker: "slot_stride_bytes must hold at least 32 bytes per slot",
        mapping: Variants(&["InvalidSlotStride"]),
    },
    Template {
        ops: &["write", "verify"],
        marker: "num_sources must be in [0, 4]",
        mapping: Variants(&["TooManyRealKvSources"]),
    },
    Template {
        ops: &["write", "verify"],
        marker: "slot stride must hold at least 4 int64 fields",
        mapping: Variants(&["InvalidSlotStride"]),
    },
    Template {
        ops: &["real_kv_source_new"],
        marker: "page_size must be >= 1",
        mapping: Variants(&["RealKvSource"]),
    },
    Template {
        ops: &["real_kv_source_new"],
        marker: "num_bytes_per_token must be a positive multiple of 16",
        mapping: Variants(&["RealKvSource"]),
    },
    Template {
        ops: &["real_kv_source_new"],
        marker: "read_bytes must be a positive multiple of 16",
        mapping: Variants(&["RealKvReadBytes"]),
    },
    Template {
        ops: &["real_kv_source_new"],
        marker: "must be at least 2-D",
        mapping: Variants(&["RealKvShape"]),
    },
    Template {
        ops: &["real_kv_source_new"],
        marker: "row stride",
        mapping: Variants(&["RealKvSource"]),
    },
    Template {
        ops: &["real_kv_source_new", "verify", "write"],
        marker: "row is too narrow for its slot layout",
        mapping: Variants(&["RealKvRowTooNarrow"]),
    },
    Template {
        ops: &["scatter_req_token_ids"],
        marker: "must be 1-D",
        mapping: Variants(&["Malformed"]),
    },
    Template {
        ops: &["scatter_req_token_ids"],
        marker: "must be 2-D",
        mapping: Variants(&["Malformed"]),
    },
    Template {
        ops: &["scatter_req_token_ids"],
        marker: "must be int64",
        mapping: Variants(&["WrongElementType"]),
    },
    Template {
        ops: &["scatter_req_token_ids"],
        marker: "must be int32",
        mapping: Variants(&["WrongElementType"]),
    },
    Template {
        ops: &["scatter_req_token_ids"],
        marker: "offsets length",
        mapping: Variants(&["LengthMismatch"]),
    },
    Template {
        ops: TENSOR_OPS,
        marker: "must be contiguous",
        mapping: TypeError("buffers are owned dense arrays or views of dense slices; no type has strides: README, SGLang's plan checks"),
    },
    Template {
        ops: TENSOR_OPS,
        marker: "must have dtype",
        mapping: Variants(&["WrongElementType"]),
    },
    Template {
        ops: &["plan", "write", "verify"],
        marker: "must be 1-D",
        mapping: Variants(&["Malformed", "TableShape", "RealKvShape"]),
    },
    Template {
        ops: &["plan", "write", "verify"],
        marker: "must be 2-D",
        mapping: Variants(&["Malformed", "TableShape", "RealKvShape"]),
    },
    Template {
        ops: TENSOR_OPS,
        marker: "length must be >=",
        mapping: Variants(&["LengthMismatch", "ColumnTooShort", "WriteInputsLength"]),
    },
    Template {
        ops: TENSOR_OPS,
        marker: "length must be",
        mapping: Variants(&["LengthMismatch", "WriteInputsLength"]),
    },
    Template {
        ops: TENSOR_OPS,
        marker: "must be on",
        mapping: TypeError("every buffer carries its memory type: ui cuda-fail/host_buffer_to_cuda_launch.rs"),
    },
];

/// The §7 template a golden error of `op` with `message` belongs to, if any.
pub fn template_of(op: &str, message: &str) -> Option<&'static Template> {
    TEMPLATES
        .iter()
        .find(|t| t.ops.contains(&op) && message.contains(t.marker))
}

/// Maps an error case to the [`ExpectedError`] of its §7 template; `Err` names a golden error
/// of no template (it fails loudly, never passes).
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
    let message = golden.message.as_str();
    let template = template_of(&case.op, message).ok_or_else(|| {
        format!(
            "no Error mapping for {} `{}` raised by {}",
            golden.kind, golden.message, golden.raised_by
        )
    })?;
    let capacity = offending.get("verify_capacity").and_then(Value::as_i64);
    Ok(match template.mapping {
        // A capacity of 0 or less is rejected when the shape is built, before any comparison
        // with the buffer: the zero (or negative) value alone is named.
        Variants(_)
            if template.marker.contains("verify_slot_indices")
                && matches!(capacity, Some(c) if c <= 0) =>
        {
            let value = capacity.unwrap_or(0);
            ExpectedError {
                variants: &["ZeroCapacity"],
                values: vec![Needle::Number(value)],
                not_representable: None,
            }
        }
        Variants(variants) => ExpectedError {
            variants,
            values: needles(offending),
            not_representable: None,
        },
        TypeError(proof) => ExpectedError {
            variants: &[],
            values: Vec::new(),
            not_representable: Some(proof),
        },
    })
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
    if let Some(proof) = expected.not_representable {
        return Err(format!(
            "not representable: a type error ({proof}); the case cannot be replayed: {error}"
        ));
    }
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

    /// Every template of spec §7, with made-up numbers, for every op that raises it.
    #[test]
    fn every_section_7_template_maps() {
        let cases: &[(&str, &str, &str)] = &[
            ("plan", "kv-canary: launch_canary_plan_kernels needs full_to_swa_index_mapping when swa_window_size > 0", "type"),
            ("plan", "kv-canary: launch_canary_plan_kernels supports at most bs=4096 reqs per launch, got bs=4097 (raise the block-size constant if needed)", "BatchTooLarge"),
            ("plan", "kv-canary: launch_canary_plan_kernels verify_capacity=40 does not match verify_plan_out.verify_slot_indices.shape[0]=32", "CapacityMismatch"),
            ("plan", "kv-canary: launch_canary_plan_kernels_torch_reference verify_capacity=7 does not match verify_plan_out.verify_slot_indices.shape[0]=8", "CapacityMismatch"),
            ("plan", "kv-canary: launch_canary_plan_kernels_torch_reference requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set", "MissingInput"),
            ("plan", "kv-canary: SWA slot 33 is outside full_to_swa_index_mapping length 33", "LutIndexOutOfRange"),
            ("plan", "kv-canary: req_to_token must be contiguous", "type"),
            ("write", "kv-canary: out_cache_loc must be contiguous", "type"),
            ("verify", "kv-canary: verify_slot_indices must be contiguous", "type"),
            ("plan", "kv-canary: req_pool_indices must have dtype torch.int64, got torch.int32", "WrongElementType"),
            ("plan", "kv-canary: req_pool_indices must be 1-D, got shape (2, 3)", "Malformed"),
            ("plan", "kv-canary: req_to_token must be 2-D, got shape (4,)", "TableShape"),
            ("plan", "kv-canary: prefix_lens length must be 3, got 2", "LengthMismatch"),
            ("plan", "kv-canary: verify_offsets length must be >= 4, got 3", "LengthMismatch"),
            ("plan", "kv-canary: req_to_token must be on req_pool_indices's device cuda:0, got cpu", "type"),
            ("plan", "kv-canary: offsets kernel bs must be in [0, 4096], got 5000", "BatchTooLarge"),
            ("plan", "kv-canary: offsets kernel bs must be in [0, 4096], got -1", "OutOfRange"),
            ("plan", "kv-canary: write_offsets_len must be positive, got 0", "ZeroCapacity"),
            ("plan", "kv-canary: write_req_capacity must be non-negative, got -1", "ZeroCapacity"),
            ("plan", "kv-canary: verify_capacity must be non-negative, got -1", "ZeroCapacity"),
            ("plan", "kv-canary: req_to_token_stride0 must be positive, got 0", "TableShape"),
            ("plan", "kv-canary: lut_len must be positive when a LUT is present, got 0", "LutIndexOutOfRange"),
            ("plan", "kv-canary: write_offsets_len must equal write_req_capacity + 1, got 5 and 5", "LengthMismatch"),
            ("plan", "kv-canary: bs=9 exceeds write_req_capacity=8", "BatchExceedsWriteCapacity"),
            ("plan", "kv-canary: LUT presence does not match the compiled specialization", "type"),
            ("plan", "kv-canary: valid_lens must be set with pool", "MissingInput"),
            ("plan", "kv-canary: scratch length must be >= bs + 1", "type"),
            ("plan", "kv-canary plan_entries: total_verify=9 exceeds verify_capacity=8 with verify_enable=1 (offsets/entries contract broken)", "type"),
            ("verify_plan_allocate", "kv-canary: VerifyPlan verify_capacity must be positive, got 0", "ZeroCapacity"),
            ("write_plan_allocate", "kv-canary: WritePlan write_req_capacity must be positive, got -3", "ZeroCapacity"),
            ("write", "kv-canary: at most 4 RealKvSource entries supported by the CUDA ABI, got 5", "TooManyRealKvSources"),
            ("verify", "kv-canary: at most 4 RealKvSource entries supported by the CUDA ABI, got 6", "TooManyRealKvSources"),
            ("verify", "kv-canary: real_kv_sources[0].tensor (viewed as uint8) must be 2-D, got 3-D", "RealKvShape"),
            ("write", "kv-canary: real_kv_sources[1].tensor (viewed as uint8) must be 2-D, got 1-D", "RealKvShape"),
            ("write", "kv-canary: expected input tensors are required when enable_write_input_assert=True", "MissingInput"),
            ("write", "kv-canary: expected input tensors must be None when enable_write_input_assert=False", "Malformed"),
            ("write", "canary_write: expected_input_tokens presence must match enable_write_input_assert", "MissingInput"),
            ("write", "canary_write: expected_input_positions presence must match enable_write_input_assert", "Malformed"),
            ("write", "canary_write: write_offsets.size(0) must equal write_req_capacity + 1 (5), got 4", "LengthMismatch"),
            ("write", "canary_write: slot_stride_bytes must hold at least 32 bytes per slot, got 24", "InvalidSlotStride"),
            ("verify", "canary_verify: slot_stride_bytes must hold at least 32 bytes per slot, got 16", "InvalidSlotStride"),
            ("write", "canary_write: num_sources must be in [0, 4], got 5", "TooManyRealKvSources"),
            ("verify", "canary_verify: num_sources must be in [0, 4], got -1", "TooManyRealKvSources"),
            ("write", "kv-canary: canary_buf slot stride must hold at least 4 int64 fields, got 3", "InvalidSlotStride"),
            ("verify", "kv-canary: canary_buf slot stride must hold at least 4 int64 fields, got 2", "InvalidSlotStride"),
            ("real_kv_source_new", "kv-canary: RealKvSource.page_size must be >= 1, got 0", "RealKvSource"),
            ("real_kv_source_new", "kv-canary: RealKvSource.num_bytes_per_token must be a positive multiple of 16, got 24", "RealKvSource"),
            ("real_kv_source_new", "kv-canary: RealKvSource.read_bytes must be a positive multiple of 16 in (0, num_bytes_per_token=64], got 80", "RealKvReadBytes"),
            ("real_kv_source_new", "kv-canary: RealKvSource.tensor must be at least 2-D, got shape (64,)", "RealKvShape"),
            ("real_kv_source_new", "kv-canary: RealKvSource.tensor row stride (older: dim-1 byte width) must be a multiple of 16 bytes, got 72 bytes (36 x 2)", "RealKvSource"),
            ("verify", "kv-canary: RealKvSource row is too narrow for its slot layout: dim-1 is 64 bytes but page_size=2 x num_bytes_per_token=64 needs 128", "RealKvRowTooNarrow"),
            ("scatter_req_token_ids", "kv-canary: scatter_req_token_ids flat_in must be 1-D, got shape (2, 2)", "Malformed"),
            ("scatter_req_token_ids", "kv-canary: scatter_req_token_ids pool_out must be 2-D, got shape (8,)", "Malformed"),
            ("scatter_req_token_ids", "kv-canary: scatter_req_token_ids flat_in must be int64, got torch.int32", "WrongElementType"),
            ("scatter_req_token_ids", "kv-canary: scatter_req_token_ids pool_out must be int32, got torch.int64", "WrongElementType"),
            ("scatter_req_token_ids", "kv-canary: scatter_req_token_ids offsets length 3 != bs+1 (4)", "LengthMismatch"),
        ];
        for &(op, message, expect) in cases {
            let template = template_of(op, message)
                .unwrap_or_else(|| panic!("{op}: no template for `{message}`"));
            match template.mapping {
                Mapping::TypeError(proof) => {
                    assert_eq!(expect, "type", "{op} `{message}` is a type error ({proof})");
                    assert!(
                        proof.contains("ui ")
                            || proof.contains("README")
                            || proof.contains("tests::")
                    );
                }
                Mapping::Variants(variants) => assert!(
                    variants.contains(&expect),
                    "{op} `{message}` maps to {variants:?}, not {expect}"
                ),
            }
        }
        // Every template is exercised above.
        for t in TEMPLATES {
            assert!(
                cases
                    .iter()
                    .any(|&(op, m, _)| t.ops.contains(&op) && m.contains(t.marker)),
                "template `{}` has no case",
                t.marker
            );
        }
        // The capacity mismatch with 0 and with -1: ZeroCapacity naming the value.
        for capacity in [0, -1] {
            let c = case(
                "plan",
                &format!("kv-canary: f verify_capacity={capacity} does not match verify_plan_out.verify_slot_indices.shape[0]=8"),
                &format!(r#"{{"verify_capacity": {capacity}, "verify_slot_indices_len": 8}}"#),
            );
            let e = expected_error(&c).unwrap();
            assert_eq!(
                (e.variants, e.values),
                (&["ZeroCapacity"][..], vec![Needle::Number(capacity)])
            );
        }
        // A type-error template is not replayable: it fails, naming the proof.
        let c = case(
            "plan",
            "kv-canary: launch_canary_plan_kernels needs full_to_swa_index_mapping when swa_window_size > 0",
            r#"{"swa_window_size": 4}"#,
        );
        let e = Error::from(kv_canary::Error::ZeroCapacity {
            what: "x",
            value: 1,
        });
        assert!(check_error(&c, &e)
            .unwrap_err()
            .starts_with("not representable: a type error (`Swa::window"));
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
