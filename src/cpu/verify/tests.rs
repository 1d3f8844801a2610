//! The worked example of spec §5 and the verify scenarios of §8.

use super::*;
use crate::canary::{CanarySlot, LaunchTag};
use crate::canary::{TokenCheckOff, TokenCheckOn};
use crate::capacity::Cap;
use crate::cpu::plan;
use crate::cpu::testing::*;
use crate::input::{Batch, ExpectedTokenTable, PlanInputs, ReqToToken};
use crate::plan::VerifyEntry;
use crate::real_kv::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources};

fn rows(st: &State) -> Vec<[i64; 8]> {
    st.ring.raw_rows().collect()
}

fn bits(st: &State) -> Vec<i64> {
    st.ring.violations().map(|v| v.reasons.bits()).collect()
}

/// Spec §5: the buffer after §4's first step (slots 16, 17, 18 = tokens 7, 8, 9), the plan of
/// §3.6 (expected tokens 200, 201, -1 from the pool), tag HEAD_K_FULL.
#[test]
fn worked_example_5() {
    let mut st = State::new();
    stamp_chain(&mut st, &[7, 8, 9], &[16, 17, 18]);
    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
    let pool = ExpectedTokenTable::from_vec(4, 8, (0..32).map(|i| 100 * (i / 8) + i % 8).collect())
        .unwrap();
    let batch = Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]);
    let valid = [2, 0, 8];
    let inputs = PlanInputs::full(&batch, &table).with_expected(pool.with_valid_lens(&valid));
    let (mut vplan, mut wplan) = (Spec::new().verify_plan(), Spec::new().write_plan());
    plan(&Spec::new(), &inputs, &mut vplan, &mut wplan).unwrap();

    let mut off = st.clone();
    let before = st.clone();
    let s = st.verify(&vplan, TokenCheckOn, &LAUNCH).unwrap();
    assert_eq!(
        rows(&st),
        [
            [
                0,
                16,
                0,
                7,
                200,
                -2414019407054260458,
                -2414019407054260458,
                32
            ],
            [
                0,
                17,
                1,
                8,
                201,
                -2611770615455499323,
                -2611770615455499323,
                32
            ],
        ]
    );
    assert_eq!(st.ring.write_index(), 2);
    assert_eq!(
        st.counters.slot_run_counter(),
        before.counters.slot_run_counter() + 3
    );
    assert_eq!(
        st.counters.kernel_run_counter(),
        before.counters.kernel_run_counter() + 1
    );
    assert_eq!(st.buf, before.buf);
    assert_eq!(
        s,
        VerifySummary {
            enabled: true,
            entries: 3,
            checked: 3,
            violations: 2
        }
    );
    assert_eq!(
        st.ring.violations().nth(1).unwrap().to_string(),
        "slot 17, position 1: stored token 8, expected 201 (VERIFY_TOKEN_MISMATCH), launch HEAD_K_FULL"
    );

    off.verify(&vplan, TokenCheckOff, &LAUNCH).unwrap();
    assert_eq!(off.ring.write_index(), 0);
}

/// A clean five-step chain, and fifty random chain heads, verify without a row.
#[test]
fn clean_chains_record_nothing() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10, 11, 12, 13, 14], &[5, 9, 2, 7, 30]);
    let p = verify_plan(&chain_entries(&[5, 9, 2, 7, 30], 0, -1));
    st.verify(&p, TokenCheckOn, &LAUNCH).unwrap();
    assert_eq!(st.ring.write_index(), 0);

    let mut x = 0x1234_5678_9ABC_DEF0u64;
    for _ in 0..50 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let slot = 1 + (x >> 58) as usize; // 1..=63
        let rec = CanarySlot {
            token: (x >> 7) as i64,
            position: 0,
            prev_hash: HEAD,
            real_kv_hash: 0,
        };
        st.buf.set_slot(slot, rec).unwrap();
        let p = verify_plan(&chain_entries(&[slot as i64], 0, -1));
        st.verify(&p, TokenCheckOff, &LAUNCH).unwrap();
    }
    assert_eq!(st.ring.write_index(), 0);
}

#[test]
fn a_wrong_head_hash_sets_only_the_chain_bit() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10], &[5]);
    let mut rec = st.buf.slot(5).unwrap();
    rec.prev_hash ^= 1;
    st.buf.set_slot(5, rec).unwrap();
    st.verify(
        &verify_plan(&chain_entries(&[5], 0, -1)),
        TokenCheckOff,
        &LAUNCH,
    )
    .unwrap();
    assert_eq!(rows(&st), [[0, 5, 0, 10, -1, HEAD ^ 1, HEAD, 1]]);
}

/// A corrupted token at slot k breaks the chain of slot k + 1 only; with the token check on,
/// slot k also gets the TOKEN bit.
#[test]
fn token_corruption_shows_on_the_successor() {
    let setup = || {
        let mut st = State::new();
        stamp_chain(&mut st, &[10, 11, 12, 13], &[1, 2, 3, 4]);
        let mut rec = st.buf.slot(2).unwrap();
        rec.token = 99;
        st.buf.set_slot(2, rec).unwrap();
        st
    };
    let mut entries = chain_entries(&[1, 2, 3, 4], 0, -1);
    for (e, t) in entries.iter_mut().zip([10, 11, 12, 13]) {
        e.expected_token = t;
    }
    let p = verify_plan(&entries);
    let mut off = setup();
    off.verify(&p, TokenCheckOff, &LAUNCH).unwrap();
    assert_eq!(
        off.ring.violations().map(|v| v.slot).collect::<Vec<_>>(),
        [3]
    );
    assert_eq!(bits(&off), [1]);
    let mut on = setup();
    on.verify(&p, TokenCheckOn, &LAUNCH).unwrap();
    assert_eq!(
        on.ring
            .violations()
            .map(|v| (v.slot, v.reasons.bits()))
            .collect::<Vec<_>>(),
        [(2, 32), (3, 1)]
    );
    let token_row = on.ring.violations().next().unwrap();
    assert_eq!((token_row.stored_token, token_row.expected_token), (99, 11));
}

#[test]
fn position_and_prev_hash_corruptions_set_their_own_bit() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10, 11, 12], &[1, 2, 3]);
    let mut rec = st.buf.slot(1).unwrap();
    rec.prev_hash = 12345;
    st.buf.set_slot(1, rec).unwrap();
    let mut entries = chain_entries(&[1, 2, 3], 0, -1);
    entries[2].expected_position = 7; // the plan contradicts the stored position 2
    st.verify(
        &verify_plan(&entries),
        TokenCheckOff,
        &LaunchSettings::new(LaunchTag::SweepVSwa),
    )
    .unwrap();
    // slot 1: its own prev hash is wrong (CHAIN); slot 2 chains from slot 1's *stored* fields,
    // whose hash changed with the prev hash, so it reports CHAIN too; slot 3: POSITION only.
    assert_eq!(bits(&st), [1, 1, 2]);
    let pos_row = rows(&st)[2];
    let stored = st.buf.slot(3).unwrap();
    assert_eq!(
        pos_row,
        [11, 3, 2, 12, -1, stored.prev_hash, stored.prev_hash, 2],
        "exact layout of a POSITION row"
    );
}

/// prev = 0: the chain check is skipped whatever the stored hash; position is still checked.
/// prev < 0 (any): a chain head.
#[test]
fn prev_zero_skips_the_chain_and_negative_prev_is_a_head() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10, 11], &[1, 2]);
    let mut rec = st.buf.slot(2).unwrap();
    rec.prev_hash = 777;
    st.buf.set_slot(2, rec).unwrap();
    let entries = [
        VerifyEntry {
            slot: 2,
            expected_token: -1,
            expected_position: 1,
            prev_slot: 0,
        },
        VerifyEntry {
            slot: 2,
            expected_token: -1,
            expected_position: 5,
            prev_slot: 0,
        },
        VerifyEntry {
            slot: 1,
            expected_token: -1,
            expected_position: 0,
            prev_slot: -5,
        },
        VerifyEntry {
            slot: 2,
            expected_token: -1,
            expected_position: 1,
            prev_slot: -1,
        },
    ];
    st.verify(&verify_plan(&entries), TokenCheckOff, &LAUNCH)
        .unwrap();
    assert_eq!(
        rows(&st),
        [
            [0, 2, 1, 11, -1, 777, 777, 2],
            [0, 2, 1, 11, -1, 777, HEAD, 1]
        ]
    );
}

#[test]
fn token_and_position_mismatch_share_one_row() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10], &[1]);
    let e = VerifyEntry {
        slot: 1,
        expected_token: 11,
        expected_position: 3,
        prev_slot: -1,
    };
    st.verify(&verify_plan(&[e]), TokenCheckOn, &LAUNCH)
        .unwrap();
    assert_eq!(bits(&st), [34]);
    let e = VerifyEntry {
        expected_token: -1,
        ..e
    };
    st.verify(&verify_plan(&[e]), TokenCheckOn, &LAUNCH)
        .unwrap();
    assert_eq!(bits(&st), [34, 2], "-1 skips the token check");
}

/// Slot-0 entries are skipped (no row, even with nonsense prev slots) but counted.
#[test]
fn slot_zero_entries_are_skipped_but_counted() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10], &[1]);
    let zero = VerifyEntry {
        slot: 0,
        expected_token: 5,
        expected_position: 9,
        prev_slot: 999,
    };
    let mut entries = chain_entries(&[1], 0, -1);
    entries.insert(0, zero);
    entries.push(zero);
    let s = st
        .verify(&verify_plan(&entries), TokenCheckOn, &LAUNCH)
        .unwrap();
    assert_eq!((s.entries, s.checked, s.violations), (3, 1, 0));
    assert_eq!(st.counters.slot_run_counter(), 1 + 3);
}

/// enable = 0, a negative count, or an empty plan: only the kernel counter moves.
#[test]
fn disabled_and_empty_plans_only_move_the_kernel_counter() {
    let mut st = State::new();
    stamp_chain(&mut st, &[10], &[1]);
    let bad = VerifyEntry {
        slot: 1,
        expected_token: 5,
        expected_position: 9,
        prev_slot: -1,
    };
    let mut disabled = verify_plan(&[bad]);
    *disabled.parts_mut().enable = 0;
    let mut negative = verify_plan(&[bad]);
    *negative.parts_mut().num_valid = -3;
    for p in [disabled, negative, verify_plan(&[])] {
        let before = st.clone();
        let s = st.verify(&p, TokenCheckOn, &LAUNCH).unwrap();
        assert_eq!((s.entries, s.violations), (0, 0));
        assert_eq!(st.ring, before.ring);
        assert_only_the_kernel_counter_moved(&before.counters, &st.counters);
    }
}

#[test]
fn a_count_above_the_capacity_is_clamped() {
    let mut st = State::new();
    let mut p = verify_plan(&[]);
    let parts = p.parts_mut();
    parts.slot_indices.fill(0);
    *parts.num_valid = 50;
    let s = st.verify(&p, TokenCheckOn, &LAUNCH).unwrap();
    assert_eq!(s.entries, 16);
    assert_eq!(st.counters.slot_run_counter(), 16);
}

/// Ten violations into a ring of four: the first four rows are stored, the index says ten.
#[test]
fn ring_overflow_keeps_counting() {
    let mut st = State::new();
    let mut ring = ViolationRing::<Cap<4>>::new();
    stamp_chain(
        &mut st,
        &(0..10).collect::<Vec<_>>(),
        &(1..11).collect::<Vec<_>>(),
    );
    let entries: Vec<VerifyEntry> = (0..10)
        .map(|i| VerifyEntry {
            slot: 1 + i,
            expected_token: -1,
            expected_position: 100,
            prev_slot: i,
        })
        .collect();
    let launch = LaunchSettings::new(LaunchTag::HeadVSwa);
    let s = verify(
        &Spec::new(),
        &verify_plan(&entries),
        TokenCheckOff,
        &launch,
        &st.buf,
        &mut ring,
        &mut st.counters,
    )
    .unwrap();
    assert_eq!(s.violations, 10);
    assert_eq!(ring.write_index(), 10);
    let v: Vec<_> = ring.violations().collect();
    assert_eq!(v.iter().map(|v| v.slot).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(v
        .iter()
        .all(|v| v.launch_tag() == Some(LaunchTag::HeadVSwa)));
    // a second launch into the full ring only moves the index
    let before = ring.rows_flat().to_vec();
    verify(
        &Spec::new(),
        &verify_plan(&entries[..3]),
        TokenCheckOff,
        &launch,
        &st.buf,
        &mut ring,
        &mut st.counters,
    )
    .unwrap();
    assert_eq!(ring.write_index(), 13);
    assert_eq!(ring.rows_flat(), &before[..]);
}

#[test]
fn counters_grow_linearly_over_launches() {
    let mut st = State::new();
    stamp_chain(&mut st, &[1, 2, 3], &[1, 2, 3]);
    let p = verify_plan(&chain_entries(&[1, 2, 3], 0, -1));
    let start = st.counters.clone();
    for _ in 0..100 {
        st.verify(&p, TokenCheckOn, &LAUNCH).unwrap();
    }
    assert_eq!(
        st.counters.kernel_run_counter(),
        start.kernel_run_counter() + 100
    );
    assert_eq!(
        st.counters.slot_run_counter(),
        start.slot_run_counter() + 300
    );
    assert_eq!(st.ring.write_index(), 0);
}

/// Writes one anchored request at `slots` (tokens 100.., positions from 0), folding `real_kv`.
fn stamp_with(st: &mut State, real_kv: RealKv<'_>, slots: &[i64]) {
    let tokens: Vec<i64> = (100..).take(slots.len()).collect();
    stamp(st, &tokens, slots, &LAUNCH.with_real_kv(real_kv));
}

/// ALL mode over a page-4 source whose rows have a 16-byte hole, crossing a page boundary:
/// flipping a hashed byte reports REAL_KV on that slot only; bytes past `read_bytes` and hole
/// bytes are ignored.
#[test]
fn real_kv_flips_inside_the_hashed_range_only() {
    let row_bytes = 4 * 32 + 16; // page 4 x 32 bytes per token, 16-byte hole
    let mut kv: Vec<u8> = (0..16 * row_bytes).map(|i| (i * 31) as u8).collect();
    let params = RealKvParams::new(4, 32, 16);
    let slots = [2i64, 3, 4, 5]; // rows 0 and 1
    let mut st = State::new();
    stamp_with(
        &mut st,
        one_source(RealKvHashMode::All, &kv, row_bytes, params),
        &slots,
    );
    let p = verify_plan(&chain_entries(&slots, 0, -1));
    let check = |st: &mut State, kv: &[u8]| {
        let launch = LAUNCH.with_real_kv(one_source(RealKvHashMode::All, kv, row_bytes, params));
        let from = st.ring.stored_len();
        st.verify(&p, TokenCheckOff, &launch).unwrap();
        st.ring
            .violations()
            .skip(from)
            .map(|v| (v.slot, v.reasons.bits()))
            .collect::<Vec<_>>()
    };
    assert_eq!(check(&mut st, &kv), []);
    kv[row_bytes + 3] ^= 0x80; // slot 4: row 1, strip 0, byte 3 (hashed)
    kv[3 * 32 + 20] ^= 0x80; // slot 3: byte 20 >= read_bytes 16 (ignored)
    kv[row_bytes - 1] ^= 0x80; // hole of row 0 (ignored)
    assert_eq!(check(&mut st, &kv), [(4, 4)]);
}

/// PARTIAL reads only the first 16 bytes of each strip, over 16-slot pages.
#[test]
fn partial_mode_sees_only_the_first_16_bytes() {
    let row_bytes = 16 * 64;
    let mut kv: Vec<u8> = (0..4 * row_bytes).map(|i| (i * 13) as u8).collect();
    let params = RealKvParams::new(16, 64, 64);
    let slots = [15i64, 16, 17];
    let mut st = State::new();
    stamp_with(
        &mut st,
        one_source(RealKvHashMode::Partial, &kv, row_bytes, params),
        &slots,
    );
    let p = verify_plan(&chain_entries(&slots, 0, -1));
    kv[row_bytes + 64 + 40] ^= 1; // slot 17, byte 40: not read in PARTIAL
    kv[row_bytes + 15] ^= 1; // slot 16 (row 1, strip 0), byte 15: read
    let launch = LAUNCH.with_real_kv(one_source(RealKvHashMode::Partial, &kv, row_bytes, params));
    st.verify(&p, TokenCheckOff, &launch).unwrap();
    assert_eq!(
        rows(&st).iter().map(|r| (r[1], r[7])).collect::<Vec<_>>(),
        [(16, 4)]
    );
}

/// NONE mode never reads its sources: a clean buffer stays clean; a non-zero stored hash is
/// flagged against the expected 0.
#[test]
fn none_mode_expects_zero() {
    let kv = vec![0u8; 16];
    // the source covers only slot 0: reading slot 1 would be an error, so NONE cannot read it
    let none = LAUNCH.with_real_kv(one_source(
        RealKvHashMode::None,
        &kv,
        16,
        RealKvParams::new(1, 16, 16),
    ));
    let mut st = State::new();
    stamp_chain(&mut st, &[1, 2], &[1, 2]);
    let p = verify_plan(&chain_entries(&[1, 2], 0, -1));
    st.verify(&p, TokenCheckOff, &none).unwrap();
    assert_eq!(st.ring.write_index(), 0);
    let mut rec = st.buf.slot(2).unwrap();
    rec.real_kv_hash = 5;
    st.buf.set_slot(2, rec).unwrap();
    st.verify(&p, TokenCheckOff, &none).unwrap();
    assert_eq!(bits(&st), [4]);
}

/// One to four sources (ALL), written then verified clean; then one byte of the last source flips.
#[test]
fn one_to_four_sources() {
    let bufs: Vec<Vec<u8>> = (0..4)
        .map(|k| (0..64 * 48).map(|i| (i * (k + 3)) as u8).collect())
        .collect();
    for n in 1..=4 {
        let mut kv = bufs.clone();
        let slots = [3i64, 8, 9];
        fn make(kv: &[Vec<u8>], n: usize) -> RealKvSources<'_> {
            let v: Vec<_> = kv[..n]
                .iter()
                .map(|b| RealKvSource::new(b, 48, RealKvParams::new(1, 48, 32)).unwrap())
                .collect();
            RealKvSources::try_from_slice(&v).unwrap()
        }
        let mut st = State::new();
        stamp_with(
            &mut st,
            RealKv::new(RealKvHashMode::All, make(&kv, n)),
            &slots,
        );
        kv[n - 1][8 * 48 + 31] ^= 0xFF;
        let launch = LAUNCH.with_real_kv(RealKv::new(RealKvHashMode::All, make(&kv, n)));
        st.verify(
            &verify_plan(&chain_entries(&slots, 0, -1)),
            TokenCheckOff,
            &launch,
        )
        .unwrap();
        assert_eq!(
            rows(&st).iter().map(|r| (r[1], r[7])).collect::<Vec<_>>(),
            [(8, 4)],
            "{n} sources"
        );
    }
}

/// Bad slots are errors naming the array, index and value; nothing moves.
#[test]
fn malformed_plans_mutate_nothing() {
    let mut st = State::new();
    stamp_chain(&mut st, &[1, 2], &[1, 2]);
    let e = |slot, prev| VerifyEntry {
        slot,
        expected_token: -1,
        expected_position: 0,
        prev_slot: prev,
    };
    let cases = [
        (
            vec![e(1, -1), e(64, 1)],
            Error::SlotOutOfRange {
                what: "verify_slot_indices",
                index: 1,
                slot: 64,
                num_slots: 64,
            },
        ),
        (
            vec![e(-1, -1)],
            Error::SlotOutOfRange {
                what: "verify_slot_indices",
                index: 0,
                slot: -1,
                num_slots: 64,
            },
        ),
        (
            vec![e(2, 70)],
            Error::SlotOutOfRange {
                what: "verify_prev_slot_indices",
                index: 0,
                slot: 70,
                num_slots: 64,
            },
        ),
    ];
    for (entries, want) in cases {
        let before = st.clone();
        assert_eq!(
            st.verify(&verify_plan(&entries), TokenCheckOn, &LAUNCH)
                .unwrap_err(),
            want
        );
        assert_eq!(st, before);
    }
    // entries past verify_num_valid are never read, so garbage there is fine
    let mut p = verify_plan(&[e(1, -1)]);
    p.parts_mut().slot_indices[5] = -7;
    st.verify(&p, TokenCheckOn, &LAUNCH).unwrap();

    let kv = vec![0u8; 2 * 16];
    let launch = LAUNCH.with_real_kv(one_source(
        RealKvHashMode::All,
        &kv,
        16,
        RealKvParams::new(1, 16, 16),
    ));
    let before = st.clone();
    let err = st
        .verify(&verify_plan(&[e(2, 1)]), TokenCheckOn, &launch)
        .unwrap_err();
    assert_eq!(
        err,
        Error::RealKvSlotOutOfRange {
            source: 0,
            slot: 2,
            row: 2,
            num_rows: 2
        }
    );
    assert_eq!(st, before);
}
