//! Replay of `write` cases (golden README §5.3) through the typed API.
//!
//! The write inputs' capacity is `N`, the length of `input_ids` (so offsets past `N` are caught
//! by the op); the write plan's capacity is its seed array's length. What the types cannot
//! express becomes a typed error before the op runs:
//!
//! * the input assert on without both expected tensors: [`Error::MissingInput`] (SGLang:
//!   "expected input tensors are required when enable_write_input_assert=True");
//! * the input assert off with expected tensors: [`Error::Malformed`] (SGLang: "must be None");
//! * more than four real-KV sources: [`TooManyRealKvSources`](kv_canary::Error::TooManyRealKvSources).

use super::context::{self, State};
use super::{capacity, Replayed};
use crate::case::{Case, Fields};
use crate::Error;
use kv_canary::backend::Writes;
use kv_canary::{UncheckedCapacity, UncheckedShape, WriteInputAssert, WriteInputs, WritePlan};
use kv_canary_testkit::HostBackend;

/// Replays one `write` case on `backend`.
pub(super) fn replay<B: HostBackend>(case: &Case, backend: &B) -> Replayed {
    context::replay_launch::<B, _>(
        case,
        decode_plan_and_inputs,
        |(plan, ids), launch, st| match ids {
            Inputs::Off(i) => launch_write(backend, plan, i, launch, st),
            Inputs::On(i) => launch_write(backend, plan, i, launch, st),
        },
    )
}

/// The per-token inputs, with the input assert off or on.
enum Inputs {
    Off(WriteInputs<UncheckedCapacity>),
    On(WriteInputs<UncheckedCapacity, kv_canary::InputAssertOn>),
}

fn decode_plan_and_inputs(
    inputs: &Fields<'_>,
) -> Result<(WritePlan<UncheckedCapacity>, Inputs), Error> {
    let i64s = |f: &Fields<'_>, key: &'static str| f.required_tensor(key)?.into_i64(key);
    let wp = inputs.object("write_plan")?;
    let seeds = i64s(&wp, "write_seed_slot_indices")?;
    let plan = WritePlan::from_parts(
        capacity("write_req_capacity", seeds.len() as i64)?,
        i64s(&wp, "write_offsets")?,
        seeds,
        wp.required_tensor("write_num_valid_reqs")?
            .into_i32_scalar("write_num_valid_reqs")?,
    )?;

    let ids = i64s(inputs, "input_ids")?;
    let entries = capacity("write_entry_capacity (input_ids length)", ids.len() as i64)?;
    let positions = i64s(inputs, "positions")?;
    let slots = i64s(inputs, "out_cache_loc")?;
    let optional = |key: &'static str| inputs.tensor(key)?.map(|t| t.into_i64(key)).transpose();
    let expected = (
        optional("expected_input_tokens")?,
        optional("expected_input_positions")?,
    );
    let assert_on = inputs.bool("enable_write_input_assert")?;
    let decoded =
        match (assert_on, expected) {
            (false, (None, None)) => {
                Inputs::Off(WriteInputs::from_parts(entries, ids, positions, slots)?)
            }
            (false, _) => return Err(Error::Malformed {
                detail:
                    "expected input tensors must be absent when enable_write_input_assert is false"
                        .into(),
            }),
            (true, (Some(tokens), Some(expected_positions))) => {
                Inputs::On(WriteInputs::from_parts_with_expected(
                    entries,
                    ids,
                    positions,
                    slots,
                    tokens,
                    expected_positions,
                )?)
            }
            (true, _) => {
                return Err(Error::MissingInput {
                    what: "expected_input_tokens and expected_input_positions",
                    required_by: "enable_write_input_assert",
                })
            }
        };
    Ok((plan, decoded))
}

/// One write launch on `backend`.
fn launch_write<B: HostBackend + Writes<A>, A: WriteInputAssert>(
    backend: &B,
    plan: &WritePlan<UncheckedCapacity>,
    inputs: &WriteInputs<UncheckedCapacity, A>,
    settings: &B::Settings<'_>,
    st: &mut State,
) -> Result<(), Error> {
    // The write op never reads the verify capacity; any positive value will do.
    let shape = UncheckedShape::from_capacities(
        UncheckedCapacity::new("verify_capacity", 1)?,
        plan.capacity(),
        inputs.capacity(),
    );
    Writes::<A>::write(
        backend,
        &shape,
        plan,
        inputs,
        settings,
        &mut st.buf,
        &mut st.ring,
        &mut st.counters,
    )?;
    Ok(())
}
