//! Replay of `verify` cases (golden README §5.4) through the typed API: the verify plan's
//! capacity is its array length, and `check_verify_expected_token` picks the compile-time
//! variant ([`TokenCheckOn`] or [`TokenCheckOff`]).

use super::context::{self, State};
use super::{capacity, Replayed};
use crate::case::{Case, Fields};
use crate::Error;
use kv_canary::TokenCheck;
use kv_canary::{TokenCheckOff, TokenCheckOn, UncheckedCapacity, UncheckedShape, VerifyPlan};
use kv_canary_testkit::HostBackend;

/// Replays one `verify` case on `backend`.
pub(super) fn replay<B: HostBackend>(case: &Case, backend: &B) -> Replayed {
    let decode_op = |inputs: &Fields<'_>| {
        let plan = decode_plan(inputs)?;
        Ok((plan, inputs.bool("check_verify_expected_token")?))
    };
    context::replay_launch::<B, _>(case, decode_op, |(plan, check), launch, st| {
        if *check {
            launch_verify(backend, plan, TokenCheckOn, launch, st)
        } else {
            launch_verify(backend, plan, TokenCheckOff, launch, st)
        }
    })
}

fn decode_plan(inputs: &Fields<'_>) -> Result<VerifyPlan<UncheckedCapacity>, Error> {
    let vp = inputs.object("verify_plan")?;
    let i64s = |key: &'static str| vp.required_tensor(key)?.into_i64(key);
    let scalar = |key: &'static str| vp.required_tensor(key)?.into_i32_scalar(key);
    let slots = i64s("verify_slot_indices")?;
    let plan = VerifyPlan::from_parts(
        capacity("verify_capacity", slots.len() as i64)?,
        slots,
        i64s("verify_expected_tokens")?,
        i64s("verify_expected_positions")?,
        i64s("verify_prev_slot_indices")?,
        scalar("verify_num_valid")?,
        scalar("enable")?,
    )?;
    Ok(plan)
}

/// One verify launch on `backend`.
fn launch_verify<B: HostBackend, K: TokenCheck>(
    backend: &B,
    plan: &VerifyPlan<UncheckedCapacity>,
    check: K,
    settings: &B::Settings<'_>,
    st: &mut State,
) -> Result<(), Error> {
    // The verify op never reads the write capacities; any positive value will do.
    let one = UncheckedCapacity::new("write capacity", 1)?;
    let shape = UncheckedShape::from_capacities(plan.capacity(), one, one);
    backend.verify(
        &shape,
        plan,
        check,
        settings,
        &st.buf,
        &mut st.ring,
        &mut st.counters,
    )?;
    Ok(())
}
