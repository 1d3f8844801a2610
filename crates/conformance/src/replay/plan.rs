//! Replay of `plan` cases (golden README §5.2) through the typed API.
//!
//! The dump is decoded into the same values an engine would build: an [`UncheckedShape`] whose
//! verify capacity is the call's `verify_capacity` argument, plan buffers whose capacities are
//! their array lengths (so a mismatched argument is [`CapacityMismatch`](kv_canary::Error::CapacityMismatch) from the op),
//! [`Batch`], [`ReqToToken`], the group, the expected-token pool and the offset. Whatever the
//! types cannot express becomes a typed error here, before the op runs:
//!
//! * an expected-token pool without valid lengths: [`Error::MissingInput`];
//! * `swa_window_size > 0` without a LUT: [`Error::MissingInput`]; a negative window:
//!   [`OutOfRange`](kv_canary::Error::OutOfRange) (a window of 0 *with* a LUT is `Swa` with window 0, which translates);
//! * a tensor of the wrong element type: [`Error::WrongElementType`];
//! * an offset other than 0 or 1: [`InvalidEnumValue`](kv_canary::Error::InvalidEnumValue).
//!
//! Valid lengths without a pool are ignored, as by the reference (no expected tokens).

use super::{capacity, Replayed};
use crate::case::{Case, Fields};
use crate::compare::Produced;
use crate::tensor::Tensor;
use crate::Error;
use kv_canary::backend::PlanWith;
use kv_canary::{
    Batch, ExpectedTokenTable, PlanInputs, PositionOffset, ReqToToken, RuntimePlanInputs, Swa,
    UncheckedCapacity, UncheckedShape, VerifyPlan, WritePlan,
};
use kv_canary_testkit::HostBackend;

type Verify = VerifyPlan<UncheckedCapacity>;
type Write = WritePlan<UncheckedCapacity>;

/// Everything a plan call takes, decoded.
struct Decoded {
    shape: UncheckedShape,
    verify: Verify,
    write: Write,
    batch: Batch,
    table: ReqToToken,
    window: u64,
    lut: Option<Vec<i64>>,
    pool: Option<(ExpectedTokenTable, Vec<i64>)>,
    offset: PositionOffset,
}

/// Replays one `plan` case on `backend`.
pub(super) fn replay<B: HostBackend>(case: &Case, backend: &B) -> Replayed {
    let mut d = match decode(&case.inputs()) {
        Ok(d) => d,
        Err(e) => return Replayed::Error(e),
    };
    let (verify_before, write_before) = (d.verify.clone(), d.write.clone());
    let launched = dispatch(&mut d, backend);
    match launched {
        Ok(()) => Replayed::Outputs(outputs(&d.verify, &d.write)),
        Err(error) if d.verify != verify_before => Replayed::MutatedThenFailed {
            error,
            buffer: "verify_plan",
        },
        Err(error) if d.write != write_before => Replayed::MutatedThenFailed {
            error,
            buffer: "write_plan",
        },
        Err(error) => Replayed::Error(error),
    }
}

fn decode(inputs: &Fields<'_>) -> Result<Decoded, Error> {
    let vp = inputs.object("verify_plan")?;
    let wp = inputs.object("write_plan")?;
    let i64s = |f: &Fields<'_>, key: &'static str| f.required_tensor(key)?.into_i64(key);
    let scalar = |f: &Fields<'_>, key: &'static str| f.required_tensor(key)?.into_i32_scalar(key);

    let slot_indices = i64s(&vp, "verify_slot_indices")?;
    let verify_capacity = capacity("verify_capacity", inputs.int("verify_capacity")?)?;
    let verify_buffer = capacity("verify_slot_indices length", slot_indices.len() as i64)?;
    let verify = VerifyPlan::from_parts(
        verify_buffer,
        slot_indices,
        i64s(&vp, "verify_expected_tokens")?,
        i64s(&vp, "verify_expected_positions")?,
        i64s(&vp, "verify_prev_slot_indices")?,
        scalar(&vp, "verify_num_valid")?,
        scalar(&vp, "enable")?,
    )?;

    let seeds = i64s(&wp, "write_seed_slot_indices")?;
    let write_capacity = capacity("write_req_capacity", seeds.len() as i64)?;
    let write = WritePlan::from_parts(
        write_capacity,
        i64s(&wp, "write_offsets")?,
        seeds,
        scalar(&wp, "write_num_valid_reqs")?,
    )?;
    // The plan op never reads the write-entry capacity; any positive value will do.
    let entries = UncheckedCapacity::new("write_entry_capacity", 1)?;
    let shape = UncheckedShape::from_capacities(verify_capacity, write_capacity, entries);

    let batch = Batch::try_from_columns(
        i64s(inputs, "req_pool_indices")?,
        i64s(inputs, "prefix_lens")?,
        i64s(inputs, "extend_seq_lens")?,
    )?;
    let (rows, cols, cells) = inputs
        .required_tensor("req_to_token")?
        .into_i32_table("req_to_token")?;
    let table = ReqToToken::from_vec(rows, cols, cells)?;

    let window_value = inputs.int("swa_window_size")?;
    let window = u64::try_from(window_value).map_err(|_| kv_canary::Error::OutOfRange {
        what: "swa_window_size",
        value: window_value,
        allowed: "[0, i64::MAX]",
    })?;
    let lut = inputs
        .tensor("full_to_swa_index_mapping")?
        .map(|t| t.into_i64("full_to_swa_index_mapping"))
        .transpose()?;
    if window > 0 && lut.is_none() {
        return Err(Error::MissingInput {
            what: "full_to_swa_index_mapping",
            required_by: "swa_window_size > 0",
        });
    }

    let pool_table = inputs.tensor("req_to_verify_expected_tokens")?;
    let valid_lens = inputs
        .tensor("req_to_verify_expected_tokens_valid_lens")?
        .map(|t| t.into_i64("req_to_verify_expected_tokens_valid_lens"))
        .transpose()?;
    let pool = match (pool_table, valid_lens) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(Error::MissingInput {
                what: "req_to_verify_expected_tokens_valid_lens",
                required_by: "req_to_verify_expected_tokens",
            })
        }
        (Some(t), Some(valid)) => {
            let (rows, cols, cells) = t.into_i32_table("req_to_verify_expected_tokens")?;
            Some((ExpectedTokenTable::from_vec(rows, cols, cells)?, valid))
        }
    };
    let offset = PositionOffset::try_from(inputs.int("kv_token_id_vs_position_offset")?)?;

    Ok(Decoded {
        shape,
        verify,
        write,
        batch,
        table,
        window,
        lut,
        pool,
        offset,
    })
}

/// Launches the plan on `backend`, the group and expected-token source chosen by what the
/// dump holds ([`RuntimePlanInputs`]: the library's one bridge to the typed inputs).
fn dispatch<B: HostBackend>(d: &mut Decoded, backend: &B) -> Result<(), Error> {
    let inputs = RuntimePlanInputs::new(
        PlanInputs::full(&d.batch, &d.table).with_offset(d.offset),
        d.lut
            .as_deref()
            .map(|lut| Swa::window(d.window).with_lut(lut)),
        d.pool.as_ref().map(|(t, v)| t.with_valid_lens(v)),
    );
    PlanWith::plan(backend, &d.shape, &inputs, &mut d.verify, &mut d.write)?;
    Ok(())
}

fn outputs(verify: &Verify, write: &Write) -> Produced {
    let arrays = [
        ("verify_plan.verify_slot_indices", verify.slot_indices()),
        (
            "verify_plan.verify_expected_tokens",
            verify.expected_tokens(),
        ),
        (
            "verify_plan.verify_expected_positions",
            verify.expected_positions(),
        ),
        (
            "verify_plan.verify_prev_slot_indices",
            verify.prev_slot_indices(),
        ),
        ("write_plan.write_offsets", write.offsets()),
        (
            "write_plan.write_seed_slot_indices",
            write.seed_slot_indices(),
        ),
    ];
    let scalars = [
        ("verify_plan.verify_num_valid", verify.num_valid()),
        ("verify_plan.enable", verify.enable()),
        ("write_plan.write_num_valid_reqs", write.num_valid_reqs()),
    ];
    arrays
        .into_iter()
        .map(|(path, a)| (path.to_string(), Tensor::i64(a.to_vec())))
        .chain(
            scalars
                .into_iter()
                .map(|(path, s)| (path.to_string(), Tensor::i32(vec![s]))),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::GoldenFile;
    use crate::replay::replay_case;
    use crate::report::Outcome;
    use crate::Backend;

    /// The §3.6 worked example without the pool, as a one-case golden file; `{EXTRA}` adds or
    /// overrides inputs.
    const CASE: &str = r#"{"format":"kv-canary-golden","format_version":1,"file":"t","marker":-7,"count":1,"cases":[
{"name":"t/plan","op":"plan","flow":null,"step":null,"tags":[],"inputs":{
 "req_pool_indices":{"dtype":"i64","shape":[3],"data":[2,0,1]},
 "prefix_lens":{"dtype":"i64","shape":[3],"data":[3,99,0]},
 "extend_seq_lens":{"dtype":"i64","shape":[3],"data":[2,99,4]},
 "req_to_token":{"dtype":"RTT","shape":[4,8],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31]},
 "swa_window_size":WINDOW,"full_to_swa_index_mapping":null,"verify_capacity":4,
 "req_to_verify_expected_tokens":null,"req_to_verify_expected_tokens_valid_lens":VALID,
 "kv_token_id_vs_position_offset":OFFSET,
 "verify_plan":{"verify_slot_indices":{"dtype":"i64","shape":[4],"data":[-7,-7,-7,-7]},
  "verify_expected_tokens":{"dtype":"i64","shape":[4],"data":[-7,-7,-7,-7]},
  "verify_expected_positions":{"dtype":"i64","shape":[4],"data":[-7,-7,-7,-7]},
  "verify_prev_slot_indices":{"dtype":"i64","shape":[4],"data":[-7,-7,-7,-7]},
  "verify_num_valid":{"dtype":"i32","shape":[1],"data":[-7]},"enable":{"dtype":"i32","shape":[1],"data":[-7]}},
 "write_plan":{"write_offsets":{"dtype":"i64","shape":[5],"data":[-7,-7,-7,-7,-7]},
  "write_seed_slot_indices":{"dtype":"i64","shape":[4],"data":[-7,-7,-7,-7]},
  "write_num_valid_reqs":{"dtype":"i32","shape":[1],"data":[-7]}}},
"outputs":{
 "verify_plan":{"verify_slot_indices":{"dtype":"i64","shape":[4],"data":[16,17,18,-7]},
  "verify_expected_tokens":{"dtype":"i64","shape":[4],"data":[-1,-1,-1,-7]},
  "verify_expected_positions":{"dtype":"i64","shape":[4],"data":[0,1,2,-7]},
  "verify_prev_slot_indices":{"dtype":"i64","shape":[4],"data":[-1,16,17,-7]},
  "verify_num_valid":{"dtype":"i32","shape":[1],"data":[3]},"enable":{"dtype":"i32","shape":[1],"data":[1]}},
 "write_plan":{"write_offsets":{"dtype":"i64","shape":[5],"data":[0,2,2,6,0]},
  "write_seed_slot_indices":{"dtype":"i64","shape":[4],"data":[18,-1,-1,-7]},
  "write_num_valid_reqs":{"dtype":"i32","shape":[1],"data":[3]}}}}
]}"#;

    fn case(rtt: &str, window: &str, valid: &str, offset: &str) -> Case {
        let text = CASE
            .replace("RTT", rtt)
            .replace("WINDOW", window)
            .replace("VALID", valid)
            .replace("OFFSET", offset);
        GoldenFile::parse("t.json", &text).unwrap().cases.remove(0)
    }

    fn error_of(c: &Case) -> Error {
        match replay(c, &kv_canary::backend::Cpu) {
            Replayed::Error(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn the_worked_example_replays() {
        assert_eq!(
            replay_case(&case("i32", "0", "null", "0"), Backend::Cpu),
            Outcome::Pass
        );
    }

    #[test]
    fn valid_lens_without_a_pool_are_ignored() {
        let c = case(
            "i32",
            "0",
            r#"{"dtype":"i64","shape":[3],"data":[9,9,9]}"#,
            "0",
        );
        assert_eq!(replay_case(&c, Backend::Cpu), Outcome::Pass);
    }

    #[test]
    fn inputs_the_types_cannot_express_are_typed_errors() {
        assert_eq!(
            error_of(&case("i32", "2", "null", "0")),
            Error::MissingInput {
                what: "full_to_swa_index_mapping",
                required_by: "swa_window_size > 0",
            }
        );
        assert_eq!(
            error_of(&case("i64", "0", "null", "0")),
            Error::WrongElementType {
                what: "req_to_token",
                expected: "i32",
                found: "i64".into(),
            }
        );
        assert_eq!(
            error_of(&case("i32", "0", "null", "2")),
            Error::Canary(kv_canary::Error::InvalidEnumValue {
                what: "kv_token_id_vs_position_offset",
                value: 2,
            })
        );
        assert!(matches!(
            error_of(&case("i32", "-1", "null", "0")),
            Error::Canary(kv_canary::Error::OutOfRange {
                what: "swa_window_size",
                value: -1,
                ..
            })
        ));
    }
}
