//! Replay: one function per op, dispatched by the case's `op` string, and the judgement of its
//! result against the case.
//!
//! Every replay is written once, generic over [`HostBackend`] (the library's backend seam with
//! host buffers), and runs on `kv_canary::backend::Cpu` or `kv_canary_testkit::Offload`; the
//! [`Backend`] choice becomes one of them in one place, [`replay`].
//!
//! To support another op, add `replay/<op>.rs` with a `replay(case, backend: &B) -> Replayed`
//! and one arm in [`replay_on`]; error cases of the op also need rows in
//! [`expected_error`](super::expected_error).

mod allocate;
mod context;
mod plan;
mod real_kv;
mod scatter;
mod verify;
mod write;

use crate::case::Case;
use crate::compare::{compare_outputs, Produced};
use crate::divergence::divergence;
use crate::expected_error::check_error;
use crate::report::Outcome;
use crate::Backend;
use crate::Error;
use kv_canary::UncheckedCapacity;
use kv_canary_testkit::HostBackend;

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
/// runner has none for the op. The one place where the [`Backend`] choice becomes a backend
/// value: `Cpu`, or this thread's default `Offload` (the error of a GPU that cannot be set up
/// is the replay's, for every op that runs on the backend).
pub fn replay(case: &Case, backend: Backend) -> Option<Replayed> {
    match backend {
        Backend::Cpu => replay_on(case, &kv_canary::backend::Cpu),
        #[cfg(feature = "cuda")]
        Backend::Cuda => match case.op.as_str() {
            "plan" | "write" | "verify" | "scatter_req_token_ids" => {
                kv_canary_testkit::Offload::with_default(|offload| Ok(replay_on(case, offload)))
                    .unwrap_or_else(|e| Some(Replayed::Error(e.into())))
            }
            // Ops that run no launch need no GPU.
            _ => replay_on(case, &kv_canary::backend::Cpu),
        },
    }
}

/// Replays one case on the backend value `backend` through the replay function of its op;
/// `None` when this runner has none for the op.
pub fn replay_on<B: HostBackend>(case: &Case, backend: &B) -> Option<Replayed> {
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
    if let (Some(_), Replayed::Error(e)) = (&case.outputs, &replayed) {
        if let Some(d) = divergence(case, e) {
            return Outcome::Divergence(d.what);
        }
    }
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

/// A run-time capacity from a golden integer: positive, else the library's
/// [`ZeroCapacity`](kv_canary::Error::ZeroCapacity) naming it.
pub(crate) fn capacity(
    what: &'static str,
    value: i64,
) -> Result<UncheckedCapacity, kv_canary::Error> {
    match usize::try_from(value) {
        Ok(n) if n > 0 => UncheckedCapacity::new(what, n),
        _ => Err(kv_canary::Error::ZeroCapacity { what, value }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    fn case(op: &str) -> Case {
        Case {
            name: "t/x".into(),
            op: op.into(),
            flow: None,
            step: None,
            tags: vec![],
            inputs: Value::Object(Map::new()),
            outputs: Some(Value::Object(Map::new())),
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
            error: Error::from(kv_canary::Error::ZeroCapacity {
                what: "x",
                value: 0,
            }),
            buffer: "verify_plan",
        };
        let Outcome::Fail(why) = judge(&case("plan"), replayed) else {
            panic!("must fail")
        };
        assert!(why.starts_with("the op modified verify_plan"), "{why}");
    }

    #[test]
    fn an_unexpected_error_fails_and_names_it() {
        let replayed = Replayed::Error(Error::from(kv_canary::Error::ZeroCapacity {
            what: "x",
            value: 0,
        }));
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
