//! Nothing lost (issue 11, item 5, CPU side): verify leaves the canary buffer byte-identical,
//! the ring's write index counts every violation past its capacity, and the outcomes of two
//! tokens written to one slot in one launch and of a seed slot rewritten by another request of
//! the same launch are the sequential ones of spec §4 (documented on `cpu::write`).

use kv_canary::hash::{chain_step, CHAIN_HEAD};
use kv_canary::step::{Canary, TailKv};
use kv_canary::{
    cpu, Batch, CanaryBuffer, CanarySlot, Cap, ChainPositionAssert, Error, FailReason,
    HealthCounters, LaunchSettings, LaunchTag, PlanInputs, RealKv, RealKvHashMode, RealKvParams,
    RealKvSource, RealKvSources, ReqToToken, Shape, TokenCheckOff, TokenCheckOn, VerifyEntry,
    VerifyPlan, ViolationRing, WriteInputs, WritePlan, WRAPPED_WRITE_INDEX,
};

type Spec = Shape<Cap<8>, Cap<4>, Cap<8>>;
type Buf = CanaryBuffer<Cap<16>>;
const LAUNCH: LaunchSettings<'static> = LaunchSettings::new(LaunchTag::HeadKFull);

/// FNV-1a over the buffer's bytes.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A write plan of `seeds.len()` requests with `offsets`.
fn write_plan(offsets: &[i64], seeds: &[i64]) -> WritePlan<Cap<4>> {
    let mut o = offsets.to_vec();
    o.resize(5, *offsets.last().unwrap());
    let mut s = seeds.to_vec();
    s.resize(4, -1);
    WritePlan::from_parts(Cap::<4>, o, s, seeds.len() as i32).unwrap()
}

/// Write inputs whose first entries are `(token, position, slot)`; the rest skip.
fn write_inputs(entries: &[(i64, i64, i64)]) -> WriteInputs<Cap<8>> {
    let mut inputs = Spec::new().write_inputs();
    let p = inputs.parts_mut();
    for (i, &(t, pos, slot)) in entries.iter().enumerate() {
        (p.input_ids[i], p.positions[i], p.out_cache_loc[i]) = (t, pos, slot);
    }
    inputs
}

fn write(
    buf: &mut Buf,
    plan: &WritePlan<Cap<4>>,
    inputs: &WriteInputs<Cap<8>>,
    ring: &mut ViolationRing<Cap<4>>,
) -> cpu::WriteSummary {
    let mut counters = HealthCounters::new();
    cpu::write(
        &Spec::new(),
        plan,
        inputs,
        &LAUNCH,
        buf,
        ring,
        &mut counters,
    )
    .unwrap()
}

/// One request stamped at `slots` (tokens 10, 11, ..., positions from 0).
fn stamped(slots: &[i64]) -> Buf {
    let mut buf = Buf::new();
    let entries: Vec<_> = (0..slots.len())
        .map(|i| (10 + i as i64, i as i64, slots[i]))
        .collect();
    let plan = write_plan(&[0, slots.len() as i64], &[-1]);
    write(
        &mut buf,
        &plan,
        &write_inputs(&entries),
        &mut ViolationRing::new(),
    );
    buf
}

fn chain(slots: &[i64]) -> Vec<VerifyEntry> {
    let mut prev = -1;
    slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| {
            let e = VerifyEntry {
                slot,
                expected_token: 10 + i as i64,
                expected_position: i as i64,
                prev_slot: prev,
            };
            prev = slot;
            e
        })
        .collect()
}

fn verify_plan(entries: &[VerifyEntry]) -> VerifyPlan<Cap<8>> {
    let mut plan = Spec::new().verify_plan();
    plan.set_entries(entries).unwrap();
    plan
}

#[test]
fn verify_leaves_the_canary_buffer_byte_identical() {
    let slots = [1, 2, 3, 4, 5, 6];
    let mut buf = stamped(&slots);
    // Tamper: a wrong token, a wrong position, a broken chain, a stray real-KV hash.
    for (s, field) in [(2usize, 0usize), (3, 1), (4, 2), (5, 3)] {
        buf.as_bytes_mut()[s * 32 + field * 8] ^= 0x40;
    }
    let kv = vec![7u8; 16 * 32];
    let src = RealKvSource::new(&kv, 32, RealKvParams::new(1, 32, 32)).unwrap();
    let real_kv = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([src]));
    let folding = LAUNCH.with_real_kv(real_kv);
    let mut entries = chain(&slots);
    let good = verify_plan(&entries);
    let mut disabled = good.clone();
    *disabled.parts_mut().enable = 0;
    let mut overcounted = good.clone();
    *overcounted.parts_mut().num_valid = i32::MAX;
    entries[2].slot = 16; // past the buffer: an error
    let bad = verify_plan(&entries);

    let before = buf.clone();
    let sum = checksum(buf.as_bytes());
    let shape = Spec::new();
    let mut ring = ViolationRing::<Cap<4>>::new();
    let mut counters = HealthCounters::new();
    let mut recorded = 0;
    for plan in [&good, &disabled, &overcounted] {
        for launch in [&LAUNCH, &folding] {
            let off = cpu::verify(
                &shape,
                plan,
                TokenCheckOff,
                launch,
                &buf,
                &mut ring,
                &mut counters,
            );
            let on = cpu::verify(
                &shape,
                plan,
                TokenCheckOn,
                launch,
                &buf,
                &mut ring,
                &mut counters,
            );
            recorded += off.unwrap().violations + on.unwrap().violations;
        }
    }
    for launch in [&LAUNCH, &folding] {
        let e = cpu::verify(
            &shape,
            &bad,
            TokenCheckOn,
            launch,
            &buf,
            &mut ring,
            &mut counters,
        );
        assert!(e.unwrap_err().to_string().contains("verify_slot_indices"));
    }
    assert!(recorded > 0, "the tampered slots were reported");
    assert_eq!(ring.write_index() as u64, recorded);
    assert_eq!(checksum(buf.as_bytes()), sum);
    assert!(buf == before, "verify changed the canary buffer");
}

#[test]
fn the_ring_index_counts_every_violation_past_the_capacity() {
    let slots = [1, 2, 3, 4, 5, 6, 7];
    let mut buf = stamped(&slots);
    for s in 1..=7usize {
        buf.as_bytes_mut()[s * 32 + 8] ^= 1; // every position wrong
    }
    let plan = verify_plan(&chain(&slots));
    let shape = Spec::new();
    let mut ring = ViolationRing::<Cap<2>>::new();
    let mut counters = HealthCounters::new();
    let s = cpu::verify(
        &shape,
        &plan,
        TokenCheckOff,
        &LAUNCH,
        &buf,
        &mut ring,
        &mut counters,
    );
    assert_eq!(s.unwrap().violations, 7);
    assert_eq!(
        (ring.write_index(), ring.stored_len(), ring.dropped()),
        (7, 2, 5)
    );
    // The stored rows are the first two, in entry order.
    let stored: Vec<i64> = ring.violations().map(|v| v.slot).collect();
    assert_eq!(stored, [1, 2]);
    // A second launch keeps counting; nothing it finds is stored.
    cpu::verify(
        &shape,
        &plan,
        TokenCheckOff,
        &LAUNCH,
        &buf,
        &mut ring,
        &mut counters,
    )
    .unwrap();
    assert_eq!(
        (ring.write_index(), ring.stored_len(), ring.dropped()),
        (14, 2, 12)
    );

    // The write op's rows count the same way: 7 input-assert failures into a full ring.
    let entries: Vec<_> = (0..7).map(|i| (1, i, i + 1)).collect();
    let inputs = write_inputs(&entries);
    let inputs = WriteInputs::from_parts_with_expected(
        Cap::<8>,
        inputs.input_ids().to_vec(),
        inputs.positions().to_vec(),
        inputs.out_cache_loc().to_vec(),
        vec![2; 8], // every token differs
        inputs.positions().to_vec(),
    )
    .unwrap();
    let mut buf = Buf::new();
    let s = cpu::write(
        &shape,
        &write_plan(&[0, 7], &[-1]),
        &inputs,
        &LAUNCH,
        &mut buf,
        &mut ring,
        &mut counters,
    );
    assert_eq!(s.unwrap().violations, 7);
    assert_eq!((ring.write_index(), ring.dropped()), (21, 19));

    // At the i32 limit the index wraps, as the device's atomicAdd on int32 does (documented on
    // `ViolationRing::write_index`): the step API empties the ring every step, and
    // `Canary::total_violations` counts in u64.
    let mut ring = ViolationRing::from_parts(Cap::<2>, vec![0; 16], i32::MAX - 1).unwrap();
    cpu::verify(
        &shape,
        &plan,
        TokenCheckOff,
        &LAUNCH,
        &stamped_with_bad_positions(),
        &mut ring,
        &mut counters,
    )
    .unwrap();
    assert_eq!(ring.write_index(), (i32::MAX - 1).wrapping_add(7));
    // The wrapped index is reported as lost, naming it: never clean, never a small count.
    let err = ring.count().unwrap_err();
    assert!(
        matches!(err, Error::OutOfRange { what, value, .. }
            if what == WRAPPED_WRITE_INDEX && value == i64::from((i32::MAX - 1).wrapping_add(7))),
        "{err}"
    );
    assert!(err.to_string().contains("-2147483643"), "{err}");
}

fn stamped_with_bad_positions() -> Buf {
    let mut buf = stamped(&[1, 2, 3, 4, 5, 6, 7]);
    for s in 1..=7usize {
        buf.as_bytes_mut()[s * 32 + 8] ^= 1;
    }
    buf
}

#[test]
fn a_step_reports_every_violation_past_the_ring_capacity() {
    // 2-row ring; a 6-token prefix whose positions were all overwritten in every buffer.
    let mut canary = Canary::full(
        Shape::<Cap<32>, Cap<4>, Cap<16>>::new(),
        Cap::<64>,
        Cap::<2>,
    );
    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
    let mut inputs = canary.write_inputs();
    let p = inputs.parts_mut();
    for i in 0..6 {
        (p.input_ids[i], p.positions[i], p.out_cache_loc[i]) = (i as i64, i as i64, 8 + i as i64);
    }
    let batch = Batch::from_columns([1], [0], [6]);
    let step = canary.plan(&PlanInputs::full(&batch, &table)).unwrap();
    step.verify_head()
        .unwrap()
        .write(&inputs)
        .unwrap()
        .verify_tail(TailKv::NONE)
        .unwrap();
    for tag in canary.tags() {
        let buf = canary.buffer_mut(tag).unwrap();
        for s in 8..14 {
            buf.as_bytes_mut()[s * 32 + 8] ^= 1;
        }
    }
    let batch = Batch::from_columns([1], [6], [0]);
    let step = canary.plan(&PlanInputs::full(&batch, &table)).unwrap();
    let report = step
        .verify_head()
        .unwrap()
        .write(&inputs)
        .unwrap()
        .verify_tail(TailKv::NONE)
        .unwrap();
    // Four verify launches x 6 entries, each a position mismatch.
    assert_eq!(report.recorded(), 24);
    assert_eq!((report.violations.len(), report.dropped), (2, 22));
    assert_eq!(canary.total_violations(), 24);
    assert_eq!(canary.ring().write_index(), 24);
}

#[test]
fn two_tokens_written_to_one_slot_in_one_launch_leave_the_later_one() {
    // One request: token 7 at position 0 and token 8 at position 1, both into slot 5.
    let mut buf = Buf::new();
    let plan = write_plan(&[0, 2], &[-1]);
    let mut ring = ViolationRing::new();
    let s = write(
        &mut buf,
        &plan,
        &write_inputs(&[(7, 0, 5), (8, 1, 5)]),
        &mut ring,
    );
    assert_eq!(s.written, 2);
    // The later entry wins; its prev_hash chains through the earlier one, which was stamped
    // and then overwritten.
    let first = chain_step(CHAIN_HEAD, 7, 0);
    assert_eq!(
        buf.slot(5).unwrap(),
        CanarySlot {
            token: 8,
            position: 1,
            prev_hash: first,
            real_kv_hash: 0
        }
    );
    // Verify of the request's two entries: the first entry finds the second's record.
    let entries = [
        VerifyEntry {
            slot: 5,
            expected_token: 7,
            expected_position: 0,
            prev_slot: -1,
        },
        VerifyEntry {
            slot: 5,
            expected_token: 8,
            expected_position: 1,
            prev_slot: 5,
        },
    ];
    let mut counters = HealthCounters::new();
    cpu::verify(
        &Spec::new(),
        &verify_plan(&entries),
        TokenCheckOn,
        &LAUNCH,
        &buf,
        &mut ring,
        &mut counters,
    )
    .unwrap();
    let rows: Vec<_> = ring
        .violations()
        .map(|v| (v.slot, v.position, v.reasons))
        .collect();
    assert_eq!(
        rows,
        [
            (
                5,
                1,
                FailReason::VERIFY_CHAIN_HASH_MISMATCH
                    | FailReason::VERIFY_POSITION_MISMATCH
                    | FailReason::VERIFY_TOKEN_MISMATCH
            ),
            (5, 1, FailReason::VERIFY_CHAIN_HASH_MISMATCH),
        ]
    );

    // Two requests of one launch into one slot: the later request (row order) wins.
    let mut buf = Buf::new();
    let plan = write_plan(&[0, 1, 2], &[-1, -1]);
    write(
        &mut buf,
        &plan,
        &write_inputs(&[(1, 0, 5), (2, 0, 5)]),
        &mut ViolationRing::new(),
    );
    assert_eq!(buf.slot(5).unwrap().token, 2);
}

#[test]
fn a_seed_slot_rewritten_in_the_same_launch_is_seen_in_row_order() {
    let old = CanarySlot {
        token: 99,
        position: 0,
        prev_hash: CHAIN_HEAD,
        real_kv_hash: 0,
    };
    let fresh = |buf: &mut Buf| buf.set_slot(3, old).unwrap();

    // Writer first: request 0 rewrites slot 3, request 1 (seeded by slot 3) then extends the
    // new record.
    let mut buf = Buf::new();
    fresh(&mut buf);
    let plan = write_plan(&[0, 1, 2], &[-1, 3]);
    let mut ring = ViolationRing::new();
    write(
        &mut buf,
        &plan,
        &write_inputs(&[(10, 0, 3), (11, 1, 4)]),
        &mut ring,
    );
    assert_eq!(buf.slot(3).unwrap().token, 10);
    assert_eq!(
        buf.slot(4).unwrap().prev_hash,
        chain_step(CHAIN_HEAD, 10, 0)
    );
    assert_eq!(
        ring.write_index(),
        0,
        "position 1 continues the rewritten seed's position 0"
    );

    // Reader first: request 0 (seeded by slot 3) extends the old record, request 1 then
    // rewrites slot 3.
    let mut buf = Buf::new();
    fresh(&mut buf);
    let plan = write_plan(&[0, 1, 2], &[3, -1]);
    write(
        &mut buf,
        &plan,
        &write_inputs(&[(11, 1, 4), (10, 0, 3)]),
        &mut ring,
    );
    assert_eq!(buf.slot(4).unwrap().prev_hash, old.chain_hash());
    assert_eq!(buf.slot(3).unwrap().token, 10);

    // With the chain-position assert, the seed's position is read in the same order: the
    // rewritten seed at position 5 makes request 1's position 1 a violation.
    let mut buf = Buf::new();
    fresh(&mut buf);
    let plan = write_plan(&[0, 1, 2], &[-1, 3]);
    let mut ring = ViolationRing::<Cap<4>>::new();
    let launch = LAUNCH.with_chain_position_assert(ChainPositionAssert::ON);
    let mut counters = HealthCounters::new();
    let inputs = write_inputs(&[(10, 5, 3), (11, 1, 4)]);
    cpu::write(
        &Spec::new(),
        &plan,
        &inputs,
        &launch,
        &mut buf,
        &mut ring,
        &mut counters,
    )
    .unwrap();
    let rows: Vec<_> = ring
        .violations()
        .map(|v| (v.slot, v.position, v.expected_aux))
        .collect();
    assert_eq!(rows, [(4, 1, 6)]);
}
