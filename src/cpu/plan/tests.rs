//! The worked example of spec §3.6 and its variants, plus the data-dependent errors.

use super::*;
use crate::capacity::{Cap, UncheckedCapacity};
use crate::input::{Batch, ExpectedTokenTable, NoExpectedTokens, PositionOffset, ReqToToken, Swa};

type Spec = Shape<Cap<8>, Cap<4>, Cap<16>>;

fn table() -> ReqToToken {
    ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap()
}

fn pool() -> ExpectedTokenTable {
    ExpectedTokenTable::from_vec(4, 8, (0..32).map(|i| 100 * (i / 8) + i % 8).collect()).unwrap()
}

fn batch() -> Batch {
    Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4])
}

fn marked<const V: usize, const W: usize>() -> (VerifyPlan<Cap<V>>, WritePlan<Cap<W>>) {
    let mut v = VerifyPlan::new();
    let mut w = WritePlan::new();
    let p = v.parts_mut();
    for a in [
        p.slot_indices,
        p.expected_tokens,
        p.expected_positions,
        p.prev_slot_indices,
    ] {
        a.fill(-7);
    }
    *p.num_valid = -7;
    *p.enable = -7;
    *p.requested = -7;
    let p = w.parts_mut();
    p.offsets.fill(-7);
    p.seed_slot_indices.fill(-7);
    *p.num_valid_reqs = -7;
    (v, w)
}

#[test]
fn worked_example_3_6() {
    let (t, pool, b) = (table(), pool(), batch());
    let valid = [2, 0, 8];
    let inputs = PlanInputs::full(&b, &t).with_expected(pool.with_valid_lens(&valid));
    let (mut v, mut w) = marked::<8, 4>();
    let s = plan(&Spec::new(), &inputs, &mut v, &mut w).unwrap();
    assert_eq!(v.slot_indices(), &[16, 17, 18, -7, -7, -7, -7, -7]);
    assert_eq!(v.expected_tokens(), &[200, 201, -1, -7, -7, -7, -7, -7]);
    assert_eq!(v.expected_positions(), &[0, 1, 2, -7, -7, -7, -7, -7]);
    assert_eq!(v.prev_slot_indices(), &[-1, 16, 17, -7, -7, -7, -7, -7]);
    assert_eq!((v.num_valid(), v.enable()), (3, 1));
    assert_eq!(v.requested_entries(), Some(3));
    assert_eq!(w.offsets(), &[0, 2, 2, 6, 0]);
    assert_eq!(w.seed_slot_indices(), &[18, -1, -1, -7]);
    assert_eq!(w.num_valid_reqs(), 3);
    assert_eq!(
        s,
        PlanSummary {
            bs: 3,
            requested_entries: 3,
            verify_num_valid: 3,
            enabled: true,
            write_tokens: 6
        }
    );
}

#[test]
fn worked_example_offset_plus_one() {
    let (t, pool, b) = (table(), pool(), batch());
    let valid = [2, 0, 8];
    let inputs = PlanInputs::full(&b, &t)
        .with_expected(pool.with_valid_lens(&valid))
        .with_offset(PositionOffset::EagleDraft);
    let (mut v, mut w) = marked::<8, 4>();
    plan(&Spec::new(), &inputs, &mut v, &mut w).unwrap();
    assert_eq!(&v.expected_tokens()[..3], &[201, -1, -1]);
}

#[test]
fn worked_example_swa_window_2() {
    let (t, b) = (table(), batch());
    let lut: Vec<i64> = (0..33).map(|x| x + 100).collect();
    let pool = pool();
    let valid = [2, 0, 8];
    let inputs = PlanInputs::full(&b, &t)
        .with_group(Swa::window(2).with_lut(&lut))
        .with_expected(pool.with_valid_lens(&valid));
    let (mut v, mut w) = marked::<8, 4>();
    plan(&Spec::new(), &inputs, &mut v, &mut w).unwrap();
    assert_eq!(&v.slot_indices()[..2], &[117, 118]);
    assert_eq!(&v.expected_tokens()[..2], &[201, -1]);
    assert_eq!(&v.expected_positions()[..2], &[1, 2]);
    assert_eq!(&v.prev_slot_indices()[..2], &[116, 117]);
    assert_eq!(v.num_valid(), 2);
    assert_eq!(&w.seed_slot_indices()[..3], &[118, -1, -1]);
    assert_eq!(w.offsets(), &[0, 2, 2, 6, 0]);
}

#[test]
fn worked_example_overflow_leaves_entries_untouched() {
    let (t, b) = (table(), batch());
    let inputs = PlanInputs::full(&b, &t);
    let (mut v, mut w) = marked::<2, 4>();
    let s = plan(
        &Shape::<Cap<2>, Cap<4>, Cap<1>>::new(),
        &inputs,
        &mut v,
        &mut w,
    )
    .unwrap();
    assert!(!s.enabled);
    assert_eq!(v.slot_indices(), &[-7, -7]);
    assert_eq!((v.num_valid(), v.enable()), (2, 0));
    // The plan keeps what it needed beside the clamp: 3 entries against a capacity of 2.
    assert_eq!((v.requested_entries(), s.requested_entries), (Some(3), 3));
    assert_eq!(w.offsets(), &[0, 2, 2, 6, 0]);
}

#[test]
fn empty_batch() {
    let t = table();
    let b = Batch::new();
    let (mut v, mut w) = marked::<8, 4>();
    plan(&Spec::new(), &PlanInputs::full(&b, &t), &mut v, &mut w).unwrap();
    assert_eq!((v.num_valid(), v.enable()), (0, 1));
    assert_eq!(v.requested_entries(), Some(0));
    assert_eq!(w.offsets(), &[0, 0, 0, 0, 0]);
    assert_eq!(w.num_valid_reqs(), 0);
    assert_eq!(v.slot_indices(), &[-7; 8]);
}

#[test]
fn errors_leave_every_output_untouched() {
    let t = table();
    let lut: Vec<i64> = (0..18).collect();
    let cases: Vec<(Batch, Option<&[i64]>, Error)> = vec![
        (
            Batch::from_columns([9], [1], [1]),
            None,
            Error::ReqPoolIndexOutOfRange {
                row: 0,
                req_pool_index: 9,
                rows: 4,
            },
        ),
        (
            Batch::from_columns([-1], [1], [1]),
            None,
            Error::ReqPoolIndexOutOfRange {
                row: 0,
                req_pool_index: -1,
                rows: 4,
            },
        ),
        (
            Batch::from_columns([1], [9], [1]),
            None,
            Error::PrefixBeyondRow {
                row: 0,
                prefix_len: 9,
                width: 8,
            },
        ),
        (
            Batch::from_columns([1, 1, 1, 1, 1], [0; 5], [1; 5]),
            None,
            Error::BatchExceedsWriteCapacity {
                bs: 5,
                write_req_capacity: 4,
            },
        ),
        (
            Batch::from_columns([2], [3], [1]),
            Some(&lut),
            Error::LutIndexOutOfRange {
                slot: 18,
                lut_len: 18,
            },
        ),
    ];
    for (b, lut, want) in cases {
        let (mut v, mut w) = marked::<8, 4>();
        let (v0, w0) = (v.clone(), w.clone());
        let inputs = PlanInputs::full(&b, &t);
        let got = match lut {
            None => plan(&Spec::new(), &inputs, &mut v, &mut w),
            Some(lut) => plan(
                &Spec::new(),
                &inputs.with_group(Swa::window(0).with_lut(lut)),
                &mut v,
                &mut w,
            ),
        };
        assert_eq!(got.unwrap_err(), want);
        assert_eq!((v, w), (v0, w0), "outputs modified on {want}");
    }
}

#[test]
fn padding_rows_are_never_read() {
    let t = table();
    let b = Batch::from_columns([0, 0], [99999, -5], [99999, 3]);
    let (mut v, mut w) = marked::<8, 4>();
    plan(&Spec::new(), &PlanInputs::full(&b, &t), &mut v, &mut w).unwrap();
    assert_eq!(w.offsets(), &[0, 0, 0, 0, 0]);
    assert_eq!(&w.seed_slot_indices()[..2], &[-1, -1]);
    assert_eq!(v.num_valid(), 0);
}

#[test]
fn pool_reads_are_bounds_checked() {
    let (t, b) = (table(), batch());
    let small = ExpectedTokenTable::zeros(4, 2).unwrap();
    let valid = [3, 0, 0];
    let inputs = PlanInputs::full(&b, &t).with_expected(small.with_valid_lens(&valid));
    let (mut v, mut w) = marked::<8, 4>();
    let err = plan(&Spec::new(), &inputs, &mut v, &mut w).unwrap_err();
    assert!(matches!(
        err,
        Error::ExpectedTokenReadOutOfRange { column: 2, .. }
    ));
    let short = [3, 0];
    let inputs = PlanInputs::full(&b, &t).with_expected(small.with_valid_lens(&short));
    assert!(matches!(
        plan(&Spec::new(), &inputs, &mut v, &mut w).unwrap_err(),
        Error::LengthMismatch {
            expected: 3,
            found: 2,
            ..
        }
    ));
}

#[test]
fn unchecked_capacities_are_compared_at_the_call() {
    let (t, b) = (table(), batch());
    let cap = |n| UncheckedCapacity::new("c", n).unwrap();
    let shape = Shape::from_capacities(cap(8), cap(4), cap(6));
    let mut v = VerifyPlan::with_capacity(cap(7));
    let mut w = WritePlan::with_capacity(cap(4));
    let err = plan(&shape, &PlanInputs::full(&b, &t), &mut v, &mut w).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kv-canary: verify_capacity=8 does not match the buffer's capacity 7 (make the buffer \
         from the shape in use; one made before a reshape keeps the old capacity)"
    );
    let mut v = VerifyPlan::with_capacity(cap(8));
    plan(&shape, &PlanInputs::full(&b, &t), &mut v, &mut w).unwrap();
    let _ = NoExpectedTokens;
}

#[test]
fn an_overflowing_token_count_names_both_lengths() {
    let (mut v, mut w) = marked::<8, 4>();
    let before = (v.clone(), w.clone());
    let b = Batch::from_columns([1, 2, 3], [0, 0, 0], [5, i64::MAX - 10, 20]);
    let err = plan(
        &Spec::new(),
        &PlanInputs::full(&b, &table()),
        &mut v,
        &mut w,
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::WriteTokenCountOverflow {
            row: 2,
            lengths: Some((i64::MAX - 5, 20)),
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "kv-canary: the sum of extend_seq_lens overflows i64 at batch row 2: the rows before it sum to {}, its extend_seq_len is 20",
            i64::MAX - 5
        )
    );
    assert_eq!((v, w), before);
}

#[test]
fn row_slots_are_the_plans_verify_slots_row_by_row() {
    let (t, b) = (table(), batch());
    let lut: Vec<i64> = (0..33).map(|x| x + 100).collect();
    let full = PlanInputs::full(&b, &t);
    let swa = full.with_group(Swa::window(2).with_lut(&lut));
    let check = |rows: Vec<(Vec<i64>, usize)>, v: &VerifyPlan<Cap<8>>, w: &WritePlan<Cap<4>>| {
        let slots: Vec<i64> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
        assert_eq!(slots, &v.slot_indices()[..v.num_valid() as usize]);
        let mut at = 0;
        for (r, (_, written)) in rows.iter().enumerate() {
            assert_eq!(w.offsets()[r], at, "row {r}'s first token");
            at += *written as i64;
        }
        assert_eq!(w.offsets()[rows.len()], at);
    };
    let (mut v, mut w) = marked::<8, 4>();
    plan(&Spec::new(), &full, &mut v, &mut w).unwrap();
    check(super::row_slots(&full).unwrap(), &v, &w);
    let (mut v, mut w) = marked::<8, 4>();
    plan(&Spec::new(), &swa, &mut v, &mut w).unwrap();
    check(super::row_slots(&swa).unwrap(), &v, &w);
}
