//! Replay: one function per op, dispatched by the case's `op` string, and the judgement of its
//! result against the case.
//!
//! To support another op, add `replay/<op>.rs` with a `replay(case, backend) -> Replayed` and one
//! arm in [`replay_case`]; error cases of the op also need rows in
//! [`expected_error`](super::expected_error).

mod allocate;
mod context;
// `Offload` lives in kv-canary-testkit; the runner includes its one source file until it moves
// out of the library (crates/conformance).
#[cfg(feature = "cuda")]
#[allow(dead_code)] // the runner uses part of it
#[path = "../../../crates/testkit/src/offload.rs"]
mod offload;
mod plan;
mod real_kv;
mod scatter;
mod verify;
mod write;

use super::case::Case;
use super::compare::{compare_outputs, Produced};
use super::expected_error::check_error;
use super::report::Outcome;
use super::Backend;
use crate::{Error, UncheckedCapacity};

/// The skip reason of a case whose op has no replay here.
pub const UNSUPPORTED_OP: &str = "op not supported by this runner yet";

/// What one op replay produced.
#[derive(Debug)]
pub enum Replayed {
    /// The op succeeded; every output tensor, by its path in the golden `outputs`.
    Outputs(Produced),
    /// Decoding the inputs into typed values, or the op itself, returned this error and left
    /// every buffer untouched.
    Error(Error),
    /// The op returned `error` after modifying `buffer`: always a failure (validate before
    /// mutate).
    MutatedThenFailed {
        /// The op's error.
        error: Error,
        /// The buffer it had modified.
        buffer: &'static str,
    },
}

impl From<Result<Produced, Error>> for Replayed {
    fn from(r: Result<Produced, Error>) -> Self {
        match r {
            Ok(p) => Replayed::Outputs(p),
            Err(e) => Replayed::Error(e),
        }
    }
}

/// Replays one case on `backend` and judges the result: outputs compared in full for ordinary
/// cases, error kind and named values for error cases. Ops without a replay are skipped.
pub fn replay_case(case: &Case, backend: Backend) -> Outcome {
    match replay(case, backend) {
        Some(replayed) => judge(case, replayed),
        None => Outcome::Skip(format!("{UNSUPPORTED_OP} ({})", case.op)),
    }
}

/// Replays one case on `backend` through the replay function of its op; `None` when this
/// runner has none for the op.
pub fn replay(case: &Case, backend: Backend) -> Option<Replayed> {
    Some(match case.op.as_str() {
        "plan" => plan::replay(case, backend),
        "write" => write::replay(case, backend),
        "verify" => verify::replay(case, backend),
        "scatter_req_token_ids" => scatter::replay(case, backend),
        "real_kv_source_new" => real_kv::replay(case),
        "verify_plan_allocate" => allocate::replay_verify_plan(case),
        "write_plan_allocate" => allocate::replay_write_plan(case),
        _ => return None,
    })
}

/// Judges a replay against its case: ordinary cases compare every output tensor
/// ([`compare_outputs`]); error cases check the error's kind and named values
/// ([`check_error`]); an op that failed after modifying a buffer always fails.
pub fn judge(case: &Case, replayed: Replayed) -> Outcome {
    let verdict = match (&case.outputs, replayed) {
        (_, Replayed::MutatedThenFailed { error, buffer }) => Err(format!(
            "the op modified {buffer} before returning an error: {error}"
        )),
        (Some(expected), Replayed::Outputs(got)) => compare_outputs(expected, &got),
        (Some(_), Replayed::Error(e)) => Err(format!("unexpected error: {e}")),
        (None, Replayed::Error(e)) => check_error(case, &e),
        (None, Replayed::Outputs(_)) => Err(format!(
            "expected an error ({}) but the op succeeded",
            case.error.as_ref().map_or("?", |e| e.message.as_str())
        )),
    };
    match verdict {
        Ok(()) => Outcome::Pass,
        Err(why) => Outcome::Fail(why),
    }
}

/// A run-time capacity from a golden integer: positive, else [`Error::ZeroCapacity`] naming it.
pub(crate) fn capacity(what: &'static str, value: i64) -> Result<UncheckedCapacity, Error> {
    match usize::try_from(value) {
        Ok(n) if n > 0 => UncheckedCapacity::new(what, n),
        _ => Err(Error::ZeroCapacity { what, value }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::json::Json;

    fn case(op: &str) -> Case {
        Case {
            name: "t/x".into(),
            op: op.into(),
            flow: None,
            step: None,
            tags: vec![],
            inputs: Json::Object(vec![]),
            outputs: Some(Json::Object(vec![])),
            error: None,
            offending_values: None,
        }
    }

    #[test]
    fn unknown_ops_are_skipped_never_passed() {
        assert_eq!(
            replay_case(&case("defragment"), Backend::Cpu),
            Outcome::Skip("op not supported by this runner yet (defragment)".into())
        );
    }

    #[test]
    fn an_error_after_mutation_always_fails() {
        let replayed = Replayed::MutatedThenFailed {
            error: Error::ZeroCapacity {
                what: "x",
                value: 0,
            },
            buffer: "verify_plan",
        };
        let Outcome::Fail(why) = judge(&case("plan"), replayed) else {
            panic!("must fail")
        };
        assert!(why.starts_with("the op modified verify_plan"), "{why}");
    }

    #[test]
    fn an_unexpected_error_fails_and_names_it() {
        let replayed = Replayed::Error(Error::ZeroCapacity {
            what: "x",
            value: 0,
        });
        assert_eq!(
            judge(&case("plan"), replayed),
            Outcome::Fail("unexpected error: kv-canary: x must be positive, got 0".into())
        );
    }

    #[test]
    fn malformed_case_inputs_fail() {
        assert!(matches!(
            replay_case(&case("plan"), Backend::Cpu),
            Outcome::Fail(why) if why.contains("missing field `verify_plan`")
        ));
    }
}
