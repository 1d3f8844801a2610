//! Helpers shared by the write and verify unit tests.

use super::{VerifySummary, WriteSummary};
use crate::canary::{
    CanaryBuffer, HealthCounters, LaunchSettings, LaunchTag, TokenCheck, ViolationRing,
};
use crate::capacity::Cap;
use crate::hash::{chain_step, CHAIN_HEAD};
use crate::input::{WriteInputAssert, WriteInputs};
use crate::plan::{VerifyEntry, VerifyPlan, WritePlan};
use crate::real_kv::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources};
use crate::shape::Shape;
use crate::Error;

/// Verify 16 entries, 4 requests, 16 written tokens.
pub type Spec = Shape<Cap<16>, Cap<4>, Cap<16>>;
/// A 64-slot buffer of 32-byte slots.
pub type Buf = CanaryBuffer<Cap<64>>;
/// An 8-row ring.
pub type Ring = ViolationRing<Cap<8>>;

/// Everything a launch mutates, so tests can compare before/after in one go.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub buf: Buf,
    pub ring: Ring,
    pub counters: HealthCounters,
}

impl State {
    pub fn new() -> Self {
        State {
            buf: Buf::new(),
            ring: Ring::new(),
            counters: HealthCounters::new(),
        }
    }

    /// Runs the write op of [`Spec`] on this state.
    pub fn write<A: WriteInputAssert>(
        &mut self,
        plan: &WritePlan<Cap<4>>,
        inputs: &WriteInputs<Cap<16>, A>,
        launch: &LaunchSettings<'_>,
    ) -> Result<WriteSummary, Error> {
        super::write(
            &Spec::new(),
            plan,
            inputs,
            launch,
            &mut self.buf,
            &mut self.ring,
            &mut self.counters,
        )
    }

    /// Runs the verify op of [`Spec`] on this state.
    pub fn verify<K: TokenCheck>(
        &mut self,
        plan: &VerifyPlan<Cap<16>>,
        check: K,
        launch: &LaunchSettings<'_>,
    ) -> Result<VerifySummary, Error> {
        super::verify(
            &Spec::new(),
            plan,
            check,
            launch,
            &self.buf,
            &mut self.ring,
            &mut self.counters,
        )
    }
}

/// A write plan of `offsets.len() - 1` requests (the rest of the capacity zero).
pub fn write_plan(offsets: &[i64], seeds: &[i64]) -> WritePlan<Cap<4>> {
    let mut plan = WritePlan::new();
    let p = plan.parts_mut();
    p.offsets[..offsets.len()].copy_from_slice(offsets);
    p.seed_slot_indices[..seeds.len()].copy_from_slice(seeds);
    *p.num_valid_reqs = seeds.len() as i32;
    plan
}

/// Write inputs whose first entries are `ids`, `positions`, `slots` (the rest skip).
pub fn write_inputs(ids: &[i64], positions: &[i64], slots: &[i64]) -> WriteInputs<Cap<16>> {
    let mut inputs = Spec::new().write_inputs();
    let p = inputs.parts_mut();
    p.input_ids[..ids.len()].copy_from_slice(ids);
    p.positions[..positions.len()].copy_from_slice(positions);
    p.out_cache_loc[..slots.len()].copy_from_slice(slots);
    inputs
}

/// A verify plan whose active entries are `entries`.
pub fn verify_plan(entries: &[VerifyEntry]) -> VerifyPlan<Cap<16>> {
    let mut plan = Spec::new().verify_plan();
    plan.set_entries(entries).unwrap();
    plan
}

/// The verify entries of one request written at `slots` with positions `first..`, chain head
/// first, token check skipped.
pub fn chain_entries(slots: &[i64], first: i64, prev: i64) -> Vec<VerifyEntry> {
    let mut prev = prev;
    slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| {
            let e = VerifyEntry {
                slot,
                expected_token: -1,
                expected_position: first + i as i64,
                prev_slot: prev,
            };
            prev = slot;
            e
        })
        .collect()
}

/// The prev hashes a chain of `(token, position)` pairs stores, computed from `mix3` directly.
pub fn expected_prev_hashes(start: i64, tokens: &[(i64, i64)]) -> Vec<i64> {
    let mut h = start;
    tokens
        .iter()
        .map(|&(t, p)| {
            let prev = h;
            h = chain_step(h, t, p);
            prev
        })
        .collect()
}

pub const HEAD: i64 = CHAIN_HEAD;
pub const LAUNCH: LaunchSettings<'static> = LaunchSettings::new(LaunchTag::HeadKFull);

/// Writes one anchored request of `tokens` at `slots` (positions from 0) with [`LAUNCH`].
pub fn stamp_chain(state: &mut State, tokens: &[i64], slots: &[i64]) {
    stamp(state, tokens, slots, &LAUNCH);
}

/// Writes one anchored request of `tokens` at `slots` (positions from 0) with `launch`.
pub fn stamp(state: &mut State, tokens: &[i64], slots: &[i64], launch: &LaunchSettings<'_>) {
    let n = tokens.len() as i64;
    let positions: Vec<i64> = (0..n).collect();
    let inputs = write_inputs(tokens, &positions, slots);
    state
        .write(&write_plan(&[0, n], &[-1]), &inputs, launch)
        .unwrap();
}

/// A fingerprint in `mode` over one source: `bytes` in rows of `row_bytes`.
pub fn one_source(
    mode: RealKvHashMode,
    bytes: &[u8],
    row_bytes: usize,
    params: RealKvParams,
) -> RealKv<'_> {
    let src = RealKvSource::new(bytes, row_bytes, params).unwrap();
    RealKv::new(mode, RealKvSources::from_array([src]))
}

/// Asserts that a launch moved the kernel counter by one and the slot counter not at all.
pub fn assert_only_the_kernel_counter_moved(before: &HealthCounters, after: &HealthCounters) {
    assert_eq!(after.slot_run_counter(), before.slot_run_counter());
    assert_eq!(after.kernel_run_counter(), before.kernel_run_counter() + 1);
}
