//! The worked example of spec §4 and the write scenarios of §8.

use super::*;
use crate::canary::TokenCheckOff;
use crate::canary::{ChainPositionAssert, LaunchTag, Violation};
use crate::capacity::{Cap, UncheckedCapacity};
use crate::cpu::plan;
use crate::cpu::testing::*;
use crate::input::{Batch, InputAssertOn, PlanInputs, ReqToToken, WriteInputs};
use crate::real_kv::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources};

fn slot(state: &State, s: usize) -> (i64, i64, i64, i64) {
    let r = state.buf.slot(s).unwrap();
    (r.token, r.position, r.prev_hash, r.real_kv_hash)
}

/// Spec §4: the previous step wrote rp 2 (tokens 7, 8, 9 into slots 16, 17, 18); this step's
/// plan is the one of §3.6 (planned here by the plan op).
#[test]
fn worked_example_4() {
    let mut st = State::new();
    stamp_chain(&mut st, &[7, 8, 9], &[16, 17, 18]);
    assert_eq!(slot(&st, 16), (7, 0, -2414019407054260458, 0));
    assert_eq!(slot(&st, 17), (8, 1, -2611770615455499323, 0));
    assert_eq!(slot(&st, 18), (9, 2, 5688218366525971631, 0));

    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let (mut vplan, mut wplan) = (Spec::new().verify_plan(), Spec::new().write_plan());
    plan(
        &Spec::new(),
        &PlanInputs::full(&batch, &table),
        &mut vplan,
        &mut wplan,
    )
    .unwrap();
    assert_eq!(wplan.offsets(), &[0, 2, 2, 6, 0]);
    assert_eq!(&wplan.seed_slot_indices()[..3], &[18, -1, -1]);

    let inputs = write_inputs(
        &[20, 21, 30, 31, 32, 33],
        &[3, 4, 0, 1, 2, 3],
        &[19, 20, 8, 9, -1, 11],
    );
    let before = st.clone();
    let s = st.write(&wplan, &inputs, &LAUNCH).unwrap();
    assert_eq!(slot(&st, 19), (20, 3, -2578355540885286685, 0));
    assert_eq!(slot(&st, 20), (21, 4, 7875720530841144087, 0));
    assert_eq!(slot(&st, 8), (30, 0, -2414019407054260458, 0));
    assert_eq!(slot(&st, 9), (31, 1, 5506278075015447539, 0));
    assert_eq!(slot(&st, 11), (33, 3, -4424320137392915213, 0));
    for untouched in (0..64).filter(|s| ![8, 9, 11, 19, 20].contains(s)) {
        assert_eq!(
            st.buf.slot(untouched),
            before.buf.slot(untouched),
            "slot {untouched}"
        );
    }
    assert_eq!(st.counters.slot_run_counter(), 3 + 5);
    assert_eq!(st.counters.kernel_run_counter(), 2);
    assert_eq!(st.ring, before.ring);
    assert_eq!(
        s,
        WriteSummary {
            requests: 2,
            written: 5,
            violations: 0
        }
    );
}

/// A five-token resume from a seed at position 10: every prev hash is the `mix3` fold from the
/// seed's chain hash, and a verify with prev = seed is clean.
#[test]
fn seeded_resume_chains_from_the_seed() {
    let mut st = State::new();
    stamp_chain(
        &mut st,
        &(0..11).map(|t| 100 + t).collect::<Vec<_>>(),
        &(40..51).collect::<Vec<_>>(),
    );
    let seed = st.buf.slot(50).unwrap();
    assert_eq!(seed.position, 10);
    let tokens: Vec<(i64, i64)> = (0..5).map(|i| (200 + i, 11 + i)).collect();
    let inputs = write_inputs(
        &tokens.iter().map(|t| t.0).collect::<Vec<_>>(),
        &tokens.iter().map(|t| t.1).collect::<Vec<_>>(),
        &[20, 21, 22, 23, 24],
    );
    st.write(&write_plan(&[0, 5], &[50]), &inputs, &LAUNCH)
        .unwrap();
    let want = expected_prev_hashes(seed.chain_hash(), &tokens);
    let got: Vec<i64> = (20..25)
        .map(|s| st.buf.slot(s).unwrap().prev_hash)
        .collect();
    assert_eq!(got, want);
    assert_eq!(st.ring.write_index(), 0, "chain-position assert satisfied");

    let vplan = verify_plan(&chain_entries(&[20, 21, 22, 23, 24], 11, 50));
    let v = st.verify(&vplan, TokenCheckOff, &LAUNCH).unwrap();
    assert_eq!(v.violations, 0);
}

/// Positions 11 -> 13 -> 13 after a seed at 10: two WRITE_POSITION rows with flag 1, none with
/// flag 0, and the data is stored either way.
#[test]
fn chain_position_assert_follows_the_run_time_flag() {
    let setup = || {
        let mut st = State::new();
        stamp_chain(
            &mut st,
            &(0..11).collect::<Vec<_>>(),
            &(40..51).collect::<Vec<_>>(),
        );
        st
    };
    let inputs = write_inputs(&[200, 201, 202], &[11, 13, 13], &[20, 21, 22]);
    let plan = write_plan(&[0, 3], &[50]);
    let tag = LaunchSettings::new(LaunchTag::HeadVFull);

    let mut on = setup();
    on.write(&plan, &inputs, &tag).unwrap();
    let running: Vec<i64> = (20..23)
        .map(|s| on.buf.slot(s).unwrap().prev_hash)
        .collect();
    let rows: Vec<_> = on.ring.raw_rows().collect();
    assert_eq!(
        rows,
        [
            [1, 21, 13, 201, 201, running[1], 12, 16],
            [1, 22, 13, 202, 202, running[2], 14, 16],
        ]
    );

    let mut off = setup();
    let quiet = tag.with_chain_position_assert(ChainPositionAssert::from_flag(0));
    off.write(&plan, &inputs, &quiet).unwrap();
    assert_eq!(off.ring.write_index(), 0);
    assert_eq!(off.buf, on.buf, "the flag only decides about rows");
}

/// Anchored requests (seed -1) never run the chain-position assert, whatever their positions.
#[test]
fn chain_heads_skip_the_position_assert() {
    let mut st = State::new();
    let inputs = write_inputs(&[1, 2], &[5, 9], &[3, 4]);
    st.write(&write_plan(&[0, 2], &[-1]), &inputs, &LAUNCH)
        .unwrap();
    assert_eq!(st.ring.write_index(), 0);
}

fn asserted(
    ids: &[i64],
    pos: &[i64],
    slots: &[i64],
    etok: &[i64],
    epos: &[i64],
) -> WriteInputs<Cap<16>, InputAssertOn> {
    let mut inputs = write_inputs(ids, pos, slots).with_input_assert();
    let e = inputs.expected_mut();
    e.tokens[..etok.len()].copy_from_slice(etok);
    e.positions[..epos.len()].copy_from_slice(epos);
    inputs
}

#[test]
fn input_assert_reports_and_stores_the_actual_values() {
    let plan = write_plan(&[0, 3], &[-1]);
    // all match: no rows
    let mut st = State::new();
    let ok = asserted(&[5, 6, 7], &[0, 1, 2], &[1, 2, 3], &[5, 6, 7], &[0, 1, 2]);
    st.write(&plan, &ok, &LAUNCH).unwrap();
    assert_eq!(st.ring.write_index(), 0);

    // token mismatch at the head, position mismatch in the middle, both at the last entry
    let mut st = State::new();
    let bad = asserted(&[5, 6, 7], &[0, 1, 2], &[1, 2, 3], &[9, 6, 8], &[0, 4, 5]);
    st.write(&plan, &bad, &LAUNCH).unwrap();
    let h = expected_prev_hashes(HEAD, &[(5, 0), (6, 1), (7, 2)]);
    let rows: Vec<_> = st.ring.raw_rows().collect();
    assert_eq!(
        rows,
        [
            [0, 1, 0, 5, 9, h[0], 0, 8],
            [0, 2, 1, 6, 6, h[1], 4, 16],
            [0, 3, 2, 7, 8, h[2], 5, 24],
        ]
    );
    assert_eq!(slot(&st, 1), (5, 0, h[0], 0));
    assert_eq!(slot(&st, 3), (7, 2, h[2], 0));

    // the chain was built from the actual values: a downstream verify is clean
    let index = st.ring.write_index();
    let vplan = verify_plan(&chain_entries(&[1, 2, 3], 0, -1));
    st.verify(&vplan, TokenCheckOff, &LAUNCH).unwrap();
    assert_eq!(st.ring.write_index(), index);
}

/// One entry failing both asserts records the input-assert row first.
#[test]
fn input_assert_row_precedes_the_chain_position_row() {
    let mut st = State::new();
    stamp_chain(&mut st, &[1, 2], &[30, 31]);
    let inputs = asserted(&[9], &[7], &[32], &[8], &[2]);
    st.write(&write_plan(&[0, 1], &[31]), &inputs, &LAUNCH)
        .unwrap();
    let reasons: Vec<i64> = st.ring.violations().map(|v| v.reasons.bits()).collect();
    assert_eq!(reasons, [8 | 16, 16]);
    let chain_row = st.ring.violations().nth(1).unwrap();
    assert_eq!((chain_row.expected_token, chain_row.expected_aux), (9, 2));
}

/// Entries with a negative slot write nothing, record nothing, count nothing and do not advance
/// the chain; an empty request's seed is never read; entries past the plan are never read.
#[test]
fn negative_slots_empty_requests_and_padding_tails() {
    let mut st = State::new();
    stamp_chain(&mut st, &[1, 2, 3, 4, 5, 6], &[0, 1, 2, 3, 4, 5]);
    let before = st.clone();
    let inputs = write_inputs(
        &[1, 2, 3, 4, 10, 11, 12, 99, 99],
        &[0, 1, 2, 3, 1, 2, 3, 99, 99],
        &[-1, 30, -1, 31, 32, 33, 34, 60, 61],
    );
    // request 1 is empty and names a seed past the buffer: never read, so no error
    let plan = write_plan(&[0, 4, 4, 7], &[-1, 1000, 5]);
    let s = st.write(&plan, &inputs, &LAUNCH).unwrap();
    assert_eq!(s.written, 5);
    assert_eq!(
        st.counters.slot_run_counter(),
        before.counters.slot_run_counter() + 5
    );
    let h0 = expected_prev_hashes(HEAD, &[(2, 1), (4, 3)]);
    assert_eq!(slot(&st, 30), (2, 1, h0[0], 0));
    assert_eq!(slot(&st, 31), (4, 3, h0[1], 0));
    let seed = before.buf.slot(5).unwrap().chain_hash();
    let h2 = expected_prev_hashes(seed, &[(10, 1), (11, 2), (12, 3)]);
    assert_eq!(slot(&st, 32).2, h2[0]);
    assert_eq!(slot(&st, 34).2, h2[2]);
    for untouched in [60, 61] {
        assert_eq!(st.buf.slot(untouched), before.buf.slot(untouched));
    }
    // a later, smaller batch leaves the earlier slots alone
    let snapshot = st.clone();
    st.write(
        &write_plan(&[0, 1], &[-1]),
        &write_inputs(&[7], &[0], &[50]),
        &LAUNCH,
    )
    .unwrap();
    for s in (0..64).filter(|&s| s != 50) {
        assert_eq!(st.buf.slot(s), snapshot.buf.slot(s));
    }
}

#[test]
fn slot_zero_is_written_like_any_slot() {
    let mut st = State::new();
    st.write(
        &write_plan(&[0, 3], &[-1]),
        &write_inputs(&[5, 6, 7], &[0, 1, 2], &[2, 0, 3]),
        &LAUNCH,
    )
    .unwrap();
    let h = expected_prev_hashes(HEAD, &[(5, 0), (6, 1), (7, 2)]);
    assert_eq!(slot(&st, 0), (6, 1, h[1], 0));
    assert_eq!(st.counters.slot_run_counter(), 3);
}

#[test]
fn empty_plans_only_move_the_kernel_counter() {
    let mut st = State::new();
    st.ring.record([0, 5, 1, 2, 3, 4, 5, 2]);
    for plan in [write_plan(&[0, 0, 0], &[-1, -1]), write_plan(&[0], &[]), {
        let mut p = write_plan(&[0, 2], &[-1]);
        *p.parts_mut().num_valid_reqs = -3;
        p
    }] {
        let before = st.clone();
        let s = st
            .write(&plan, &write_inputs(&[1, 2], &[0, 1], &[1, 2]), &LAUNCH)
            .unwrap();
        assert_eq!(s, WriteSummary::default());
        assert_eq!(st.buf, before.buf);
        assert_eq!(st.ring, before.ring);
        assert_only_the_kernel_counter_moved(&before.counters, &st.counters);
    }
}

/// `write_num_valid_reqs` above the capacity is clamped to it.
#[test]
fn request_count_is_clamped_to_the_capacity() {
    let mut st = State::new();
    let mut plan = write_plan(&[0, 1, 2, 3, 4], &[-1, -1, -1, -1]);
    *plan.parts_mut().num_valid_reqs = 99;
    let s = st
        .write(
            &plan,
            &write_inputs(&[1, 2, 3, 4], &[0; 4], &[1, 2, 3, 4]),
            &LAUNCH,
        )
        .unwrap();
    assert_eq!(s.requests, 4);
}

/// Extreme token and position values are hashed as their u64 bit patterns and verify clean.
#[test]
fn boundary_values_round_trip_through_verify() {
    let values = [
        0,
        1,
        0xFFFF_FFFF,
        -1,
        0x8000_0000,
        0x7FFF_FFFF,
        i64::MIN,
        i64::MAX,
    ];
    let positions: Vec<i64> = values.iter().rev().copied().collect();
    let slots: Vec<i64> = (1..=8).collect();
    let mut st = State::new();
    st.write(
        &write_plan(&[0, 8], &[-1]),
        &write_inputs(&values, &positions, &slots),
        &LAUNCH,
    )
    .unwrap();
    let pairs: Vec<(i64, i64)> = values
        .iter()
        .copied()
        .zip(positions.iter().copied())
        .collect();
    let want = expected_prev_hashes(HEAD, &pairs);
    for (i, s) in slots.iter().enumerate() {
        assert_eq!(
            slot(&st, *s as usize),
            (values[i], positions[i], want[i], 0)
        );
    }
    let entries: Vec<_> = slots
        .iter()
        .enumerate()
        .map(|(i, &s)| crate::plan::VerifyEntry {
            slot: s,
            expected_token: -1,
            expected_position: positions[i],
            prev_slot: if i == 0 { -1 } else { s - 1 },
        })
        .collect();
    let v = st
        .verify(&verify_plan(&entries), TokenCheckOff, &LAUNCH)
        .unwrap();
    assert_eq!(v.violations, 0);
}

fn kv(rows: usize, row_bytes: usize) -> Vec<u8> {
    (0..rows * row_bytes)
        .map(|i| (i * 7 + i / 256) as u8)
        .collect()
}

#[test]
fn none_mode_with_sources_stores_zero() {
    let bytes = kv(64, 32);
    let launch = LAUNCH.with_real_kv(one_source(
        RealKvHashMode::None,
        &bytes,
        32,
        RealKvParams::new(1, 32, 32),
    ));
    let mut st = State::new();
    st.write(
        &write_plan(&[0, 2], &[-1]),
        &write_inputs(&[1, 2], &[0, 1], &[3, 4]),
        &launch,
    )
    .unwrap();
    assert_eq!(slot(&st, 3).3, 0);
    assert_eq!(slot(&st, 4).3, 0);
}

#[test]
fn partial_and_all_hash_the_documented_bytes() {
    let mut bytes = kv(64, 64);
    let slots = [3i64, 4, 5];
    let fp = |bytes: &[u8], mode| {
        let launch = LAUNCH.with_real_kv(one_source(mode, bytes, 64, RealKvParams::new(1, 64, 32)));
        let mut st = State::new();
        st.write(
            &write_plan(&[0, 3], &[-1]),
            &write_inputs(&[1, 2, 3], &[0, 1, 2], &slots),
            &launch,
        )
        .unwrap();
        slots.map(|s| slot(&st, s as usize).3)
    };
    let (partial, all) = (
        fp(&bytes, RealKvHashMode::Partial),
        fp(&bytes, RealKvHashMode::All),
    );
    // each slot's strip folded independently, straight from the bytes
    for (i, s) in slots.iter().enumerate() {
        let strip = &bytes[*s as usize * 64..];
        assert_eq!(
            partial[i] as u64,
            crate::hash::splitmix64(crate::hash::fold_words(&strip[..16]))
        );
        assert_eq!(
            all[i] as u64,
            crate::hash::splitmix64(crate::hash::fold_words(&strip[..32]))
        );
    }
    bytes[4 * 64 + 20] ^= 1; // inside read_bytes, past the first 16
    assert_eq!(fp(&bytes, RealKvHashMode::Partial), partial);
    assert_ne!(fp(&bytes, RealKvHashMode::All)[1], all[1]);
    bytes[4 * 64 + 40] ^= 1; // past read_bytes: ignored by both
    bytes[4 * 64 + 20] ^= 1;
    assert_eq!(fp(&bytes, RealKvHashMode::All), all);
}

/// Two sources, page 16: consecutive slots of one page get independent hashes, and the chain
/// (which excludes the real-KV hash) still verifies.
#[test]
fn all_mode_two_sources_pages_of_16() {
    let a = kv(4, 16 * 128);
    let b: Vec<u8> = kv(8, 64 * 16).into_iter().map(|x| x ^ 0x5A).collect();
    let sa = RealKvSource::new(&a, 16 * 128, RealKvParams::new(16, 128, 128)).unwrap();
    let sb = RealKvSource::new(&b, 64 * 16, RealKvParams::new(16, 64, 32)).unwrap();
    let real_kv = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([sa, sb]));
    let launch = LAUNCH.with_real_kv(real_kv);
    let mut st = State::new();
    let slots = [14i64, 15, 16, 17];
    st.write(
        &write_plan(&[0, 4], &[-1]),
        &write_inputs(&[1, 2, 3, 4], &[0, 1, 2, 3], &slots),
        &launch,
    )
    .unwrap();
    let hashes: Vec<i64> = slots.iter().map(|&s| slot(&st, s as usize).3).collect();
    for (i, &s) in slots.iter().enumerate() {
        assert_eq!(hashes[i], real_kv.hash(s as usize));
        assert_ne!(hashes[i], 0);
    }
    assert!(hashes.windows(2).all(|w| w[0] != w[1]));
    let v = st
        .verify(
            &verify_plan(&chain_entries(&slots, 0, -1)),
            TokenCheckOff,
            &launch,
        )
        .unwrap();
    assert_eq!(v.violations, 0);
}

/// Bad indices are errors naming the value, and nothing — not even the kernel counter — moves.
#[test]
fn malformed_plans_and_inputs_mutate_nothing() {
    let mut st = State::new();
    stamp_chain(&mut st, &[1, 2], &[1, 2]);
    let ok_inputs = write_inputs(&[1, 2, 3], &[0, 1, 2], &[5, 6, 7]);
    let cases: Vec<(WritePlan<Cap<4>>, WriteInputs<Cap<16>>, Error)> = vec![
        (
            write_plan(&[0, 3, 2], &[-1, -1]),
            ok_inputs.clone(),
            Error::MalformedOffsets {
                what: "write_offsets",
                index: 2,
                value: 2,
                min: 3,
                max: 16,
            },
        ),
        (
            write_plan(&[0, 17], &[-1]),
            ok_inputs.clone(),
            Error::MalformedOffsets {
                what: "write_offsets",
                index: 1,
                value: 17,
                min: 0,
                max: 16,
            },
        ),
        (
            write_plan(&[-1, 2], &[-1]),
            ok_inputs.clone(),
            Error::MalformedOffsets {
                what: "write_offsets",
                index: 0,
                value: -1,
                min: 0,
                max: 16,
            },
        ),
        (
            write_plan(&[0, 3], &[64]),
            ok_inputs.clone(),
            Error::SlotOutOfRange {
                what: "write_seed_slot_indices",
                index: 0,
                slot: 64,
                num_slots: 64,
            },
        ),
        (
            write_plan(&[0, 3], &[-1]),
            write_inputs(&[1, 2, 3], &[0, 1, 2], &[5, 64, 7]),
            Error::SlotOutOfRange {
                what: "out_cache_loc",
                index: 1,
                slot: 64,
                num_slots: 64,
            },
        ),
    ];
    for (plan, inputs, want) in cases {
        let before = st.clone();
        assert_eq!(st.write(&plan, &inputs, &LAUNCH).unwrap_err(), want);
        assert_eq!(st, before, "{want}");
    }

    let bytes = kv(6, 16);
    let launch = LAUNCH.with_real_kv(one_source(
        RealKvHashMode::Partial,
        &bytes,
        16,
        RealKvParams::new(1, 16, 16),
    ));
    let before = st.clone();
    let err = st
        .write(&write_plan(&[0, 3], &[-1]), &ok_inputs, &launch)
        .unwrap_err();
    assert_eq!(
        err,
        Error::RealKvSlotOutOfRange {
            source: 0,
            slot: 6,
            row: 6,
            num_rows: 6
        }
    );
    assert_eq!(st, before);
}

/// Run-time capacities are compared at the call.
#[test]
fn unchecked_capacities_are_compared() {
    let cap = |n| UncheckedCapacity::new("c", n).unwrap();
    let shape = crate::shape::UncheckedShape::from_capacities(cap(4), cap(2), cap(3));
    let plan = WritePlan::from_parts(cap(2), vec![0, 1, 1], vec![-1, -1], 1).unwrap();
    let inputs = WriteInputs::from_parts(cap(4), vec![1; 4], vec![0; 4], vec![1; 4]).unwrap();
    let mut st = State::new();
    let err = write(
        &shape,
        &plan,
        &inputs,
        &LAUNCH,
        &mut st.buf,
        &mut st.ring,
        &mut st.counters,
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::CapacityMismatch {
            what: "write_entry_capacity",
            expected: 3,
            found: 4
        }
    );
    assert_eq!(st, State::new());
}

#[test]
fn violations_display_as_sentences() {
    let mut st = State::new();
    let inputs = asserted(&[5], &[0], &[1], &[6], &[0]);
    st.write(
        &write_plan(&[0, 1], &[-1]),
        &inputs,
        &LaunchSettings::new(LaunchTag::TailKSwa),
    )
    .unwrap();
    let v: Violation = st.ring.violations().next().unwrap();
    assert_eq!(
        v.to_string(),
        "slot 1, position 0: wrote token 5, expected 6 (WRITE_TOKEN_MISMATCH), launch TAIL_K_SWA"
    );
}
