//! Verdicts and policies (issue 33 item 1) over CPU canaries, token tables and block tables: a
//! stray write into another request's cached slot makes that request a victim (recompute) and
//! the writer the culprit (abort); each violation is judged once; a run of unverified steps is
//! reported once; log, off and fail behave as SGLang's log, none and raise.

use kv_canary::guard::{Action, Guard, Policy, Role, Verdict};
use kv_canary::step::{Canary, SlotRows, TailKv};
use kv_canary::{
    Batch, BatchView, Cap, Error, PlanInputs, ReqToToken, ReqToTokenView, Shape, WriteInputsView,
};

type Spec = Shape<Cap<32>, Cap<2>, Cap<8>>;

/// Request "a" holds pool row 1 (slots 1, 2, 3, 4), "c" pool row 2 (slots 5, 6, 7, 8).
fn table() -> ReqToToken {
    ReqToToken::from_vec(3, 4, vec![0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap()
}

/// One step of a CPU canary: `rows` are (pool row, cached, new) with their request ids; the
/// new tokens go to `slots` (the engine's slot mapping, -1 padding). Returns the guard's
/// judgement.
fn step(
    canary: &mut Canary<Cap<32>, Cap<2>, Cap<8>, Cap<16>, Cap<16>>,
    guard: &mut Guard<&'static str>,
    rows: &[(i64, i64, i64, &'static str)],
    slots: &[i64],
) -> Result<kv_canary::guard::Judgement<&'static str>, Error> {
    let table = table();
    let batch: Batch = rows
        .iter()
        .map(|&(rp, cached, new, _)| kv_canary::BatchRow {
            req_pool_index: rp,
            prefix_len: cached,
            extend_len: new,
        })
        .collect();
    let mut loc = vec![-1i64; 8];
    let mut ids = vec![0i64; 8];
    let mut positions = vec![0i64; 8];
    let mut t = 0;
    for &(_, cached, new, _) in rows {
        for p in cached..cached + new {
            loc[t] = slots[t];
            ids[t] = 100 + p;
            positions[t] = p;
            t += 1;
        }
    }
    let inputs = PlanInputs::full(&batch, &table);
    let write = WriteInputsView::new(Cap::<8>, &ids, &positions, &loc).unwrap();
    let report = canary
        .plan(&inputs)?
        .verify_head()?
        .write(&write)?
        .verify_tail(TailKv::NONE)?;
    let slot_rows = SlotRows::new(&inputs, &loc)?;
    let requests: Vec<Option<&'static str>> = rows.iter().map(|r| Some(r.3)).collect();
    guard.judge(&report, &slot_rows, &requests)
}

fn canary() -> Canary<Cap<32>, Cap<2>, Cap<8>, Cap<16>, Cap<16>> {
    Canary::full(Spec::new(), Cap::<16>, Cap::<16>)
}

/// Steps 1-2 prefill "a" (slots 1, 2, 3) and "c" (slots 5, 6); step 3 decodes "c" with its
/// slot mapping off into "a"'s slot 2; step 4 decodes "a", whose verify reports slot 2.
fn stray_write(policy: Policy) -> Vec<Result<kv_canary::guard::Judgement<&'static str>, Error>> {
    let (mut canary, mut guard) = (canary(), Guard::new(policy));
    vec![
        step(&mut canary, &mut guard, &[(1, 0, 3, "a")], &[1, 2, 3]),
        step(&mut canary, &mut guard, &[(2, 0, 2, "c")], &[5, 6]),
        step(&mut canary, &mut guard, &[(2, 2, 1, "c")], &[2]),
        step(&mut canary, &mut guard, &[(1, 3, 1, "a")], &[4]),
        step(&mut canary, &mut guard, &[(1, 4, 0, "a")], &[]),
    ]
}

#[test]
fn a_stray_write_makes_a_victim_and_a_culprit_each_judged_once() {
    let policy = Policy {
        violations: Action::PerRequest,
        ..Policy::default()
    };
    let judgements: Vec<_> = stray_write(policy)
        .into_iter()
        .map(|j| j.unwrap())
        .collect();
    for j in &judgements[..3] {
        assert!(
            j.new_violations.is_empty() && j.verdicts.is_empty(),
            "{j:?}"
        );
    }
    let j = &judgements[3];
    assert!(!j.new_violations.is_empty());
    assert_eq!(j.verdict_of(&"a"), Some(Verdict::Recompute));
    assert_eq!(j.verdict_of(&"c"), Some(Verdict::Abort));
    let culprit = j.verdicts.iter().find(|v| v.request == "c").unwrap();
    assert_eq!((culprit.role, culprit.slot), (Role::Culprit, 2));
    // The next step reports the same corrupted records again: judged already.
    assert!(
        judgements[4].new_violations.is_empty() && judgements[4].verdicts.is_empty(),
        "each violation is judged once: {:?}",
        judgements[4]
    );
    eprintln!(
        "stray write: {} new violation(s) at step 4; verdicts {:?}",
        j.new_violations.len(),
        j.verdicts
            .iter()
            .map(|v| (v.request, v.verdict, v.role))
            .collect::<Vec<_>>()
    );
}

#[test]
fn log_off_and_fail_policies() {
    let log = stray_write(Policy {
        violations: Action::Log,
        ..Policy::default()
    });
    let j = log[3].as_ref().unwrap();
    assert!(!j.new_violations.is_empty());
    assert!(j.verdicts.iter().all(|v| v.verdict == Verdict::Keep));
    let off = stray_write(Policy::default());
    assert!(off
        .iter()
        .all(|j| j.as_ref().is_ok_and(|j| j.new_violations.is_empty())));
    let fail = stray_write(Policy {
        violations: Action::Fail,
        ..Policy::default()
    });
    let err = fail[3].as_ref().unwrap_err();
    assert!(matches!(err, Error::GuardFailed { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("kv-canary: the engine's policy fails on"),
        "{err}"
    );
    // The same violations do not fail the engine twice.
    assert!(fail[4].is_ok());
}

#[test]
fn a_run_of_unverified_steps_is_reported_once() {
    // A verify capacity of 2: a decode over 3 cached tokens overflows it.
    type Small = Shape<Cap<2>, Cap<2>, Cap<8>>;
    let mut canary = Canary::full(Small::new(), Cap::<16>, Cap::<16>);
    let mut guard: Guard<&str> = Guard::new(Policy {
        unverified: Action::Log,
        ..Policy::default()
    });
    let table = table();
    let mut judged = Vec::new();
    for (cached, new) in [(0, 3), (3, 0), (3, 0), (1, 0), (3, 0)] {
        let batch = Batch::from_columns([1], [cached], [new]);
        let inputs = PlanInputs::full(&batch, &table);
        let mut write = canary.write_inputs();
        let p = write.parts_mut();
        for t in 0..new as usize {
            (p.out_cache_loc[t], p.input_ids[t], p.positions[t]) = (1 + t as i64, 7, t as i64);
        }
        let report = canary
            .plan(&inputs)
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&write)
            .unwrap()
            .verify_tail(TailKv::NONE)
            .unwrap();
        let rows = SlotRows::new(&inputs, write.out_cache_loc()).unwrap();
        let j = guard.judge(&report, &rows, &[Some("a")]).unwrap();
        judged.push(j.unverified.map(|u| u.plan_overflow.unwrap().needed));
    }
    // Prefill (0 cached) verified; two overflows (one report); a verified step; an overflow.
    assert_eq!(judged, [None, Some(Some(3)), None, None, Some(Some(3))]);
}

/// The same stray write in mistral.rs's shape: u32 block tables per batch row (blocks of 4),
/// vLLM's columns, an i64 slot mapping.
#[test]
fn culprits_over_block_tables() {
    let mut canary = canary();
    let mut guard = Guard::new(Policy {
        violations: Action::PerRequest,
        ..Policy::default()
    });
    // "a" holds block 1 (slots 4..8), "c" block 2 (slots 8..12).
    let run = |canary: &mut Canary<Cap<32>, Cap<2>, Cap<8>, Cap<16>, Cap<16>>,
               guard: &mut Guard<&'static str>,
               blocks: &[u32],
               context: &[u32],
               query: &[u32],
               slots: &[i64],
               who: &[&'static str]| {
        let bs = who.len();
        let table = ReqToTokenView::block_table(bs, 1, 4, blocks).unwrap();
        let batch = BatchView::from_query_lens(bs, context, query).unwrap();
        let inputs = PlanInputs::from_views(batch, table);
        let mut loc = slots.to_vec();
        loc.resize(8, -1);
        let ids = vec![5u32; 8];
        let mut positions = vec![0i64; 8];
        let mut t = 0;
        for r in 0..bs {
            for p in context[r] - query[r]..context[r] {
                positions[t] = i64::from(p);
                t += 1;
            }
        }
        let write = WriteInputsView::new(Cap::<8>, &ids, &positions, &loc).unwrap();
        let report = canary
            .plan(&inputs)
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&write)
            .unwrap()
            .verify_tail(TailKv::NONE)
            .unwrap();
        let rows = SlotRows::new(&inputs, &loc).unwrap();
        let requests: Vec<_> = who.iter().map(|&w| Some(w)).collect();
        guard.judge(&report, &rows, &requests).unwrap()
    };
    run(
        &mut canary,
        &mut guard,
        &[1, 2],
        &[3, 2],
        &[3, 2],
        &[4, 5, 6, 8, 9],
        &["a", "c"],
    );
    // "c" decodes position 2 into slot 5 ("a"'s), not 10.
    run(&mut canary, &mut guard, &[2], &[3], &[1], &[5], &["c"]);
    let j = run(&mut canary, &mut guard, &[1], &[4], &[1], &[7], &["a"]);
    assert_eq!(j.verdict_of(&"a"), Some(Verdict::Recompute));
    assert_eq!(j.verdict_of(&"c"), Some(Verdict::Abort));
}

/// The watchdog (issue 33 item 2): every `interval` steps after `warmup`, a canary never marked
/// initialised, one whose assert went off, and an engine that skips the canary are stalls,
/// reported under every policy and failing the engine under `Action::Fail`.
#[test]
fn the_watchdog_reports_a_canary_that_stopped_checking() {
    use kv_canary::guard::{Stall, Watchdog};
    use kv_canary::ChainPositionAssert;
    let table = table();
    let run = |canary: &mut Canary<Cap<32>, Cap<2>, Cap<8>, Cap<16>, Cap<16>>, n: i64| {
        let batch = Batch::from_columns([1], [n.min(4)], [0]);
        let nothing = canary.write_inputs();
        canary
            .plan(&PlanInputs::full(&batch, &table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&nothing)
            .unwrap()
            .verify_tail(TailKv::NONE)
            .unwrap();
    };
    // Warm-up with the assert off, then initialised: every check is quiet.
    let mut c = canary().with_chain_position_assert(ChainPositionAssert::OFF);
    let mut dog = Watchdog::new(5, 10);
    let mut stalls = Vec::new();
    for n in 0..40 {
        if n == 8 {
            dog.mark_initialised(&mut c);
        }
        run(&mut c, n);
        stalls.extend(dog.after_step(&c));
    }
    assert_eq!(stalls, [], "a healthy canary");
    assert!(c.chain_position_assert().is_on());
    // Never initialised: reported at the first check after warm-up.
    let mut c = canary().with_chain_position_assert(ChainPositionAssert::OFF);
    let mut dog = Watchdog::new(5, 10);
    let first = (0..10)
        .find_map(|n| {
            run(&mut c, n);
            dog.after_step(&c)
        })
        .expect("reported");
    assert_eq!(first, Stall::NeverInitialised { steps: 10 });
    // Steps the engine ran without the canary.
    let mut c = canary();
    let mut dog = Watchdog::new(5, 5);
    dog.mark_initialised(&mut c);
    let mut found = None;
    for n in 0..20 {
        if n < 12 {
            run(&mut c, n);
        }
        found = found.or(dog.after_step(&c));
    }
    assert_eq!(
        found,
        Some(Stall::StepsDropped {
            engine: 5,
            canary: 2
        })
    );
    // The assert switched off after initialisation.
    let mut c = canary();
    let mut dog = Watchdog::new(5, 5);
    dog.mark_initialised(&mut c);
    let mut found = None;
    for n in 0..10 {
        if n == 6 {
            c.set_chain_position_assert(ChainPositionAssert::OFF);
        }
        run(&mut c, n);
        found = found.or(dog.after_step(&c));
    }
    assert_eq!(found, Some(Stall::AssertOff { steps: 10 }));
    // Reported under every policy; failing under Fail.
    let stall = Some(Stall::AssertOff { steps: 10 });
    let quiet: Guard<&str> = Guard::new(Policy::default());
    assert_eq!(quiet.watch(stall), Ok(stall));
    let strict: Guard<&str> = Guard::new(Policy {
        watchdog: Action::Fail,
        ..Policy::default()
    });
    let err = strict.watch(stall).unwrap_err();
    assert!(
        err.to_string().contains("chain-position assert is off"),
        "{err}"
    );
}

/// A radix-tree-like prefix cache: idle nodes of slots under parents.
struct Radix {
    /// (slots, first position, parent's last slot).
    nodes: Vec<(Vec<i64>, usize, Option<i64>)>,
}

impl kv_canary::guard::CachedPrefixes for Radix {
    fn idle_runs(&self, visit: &mut dyn FnMut(kv_canary::guard::CachedRun<'_>)) {
        for (slots, first_position, predecessor) in &self.nodes {
            visit(kv_canary::guard::CachedRun {
                slots,
                first_position: *first_position,
                predecessor: *predecessor,
            });
        }
    }
}

/// Sweeps on a cadence (issue 33 item 3): at most `budget` entries a step, every idle cached slot
/// covered once within `ceil(N / budget)` steps with the chains the walk gives, and a corrupted
/// idle slot reported within one pass.
#[test]
fn a_sweep_cadence_covers_every_idle_slot_within_its_bound() {
    use kv_canary::guard::SweepCadence;
    use kv_canary::{CanarySlot, LaunchTag};
    // Two requests' idle cached prefixes: "a" slots 1..=4 (positions 0..4), "c" slots 5..=7.
    let mut canary = canary();
    let mut judge: Guard<&str> = Guard::new(Policy::default());
    step(
        &mut canary,
        &mut judge,
        &[(1, 0, 4, "a"), (2, 0, 3, "c")],
        &[1, 2, 3, 4, 5, 6, 7],
    )
    .unwrap();
    let radix = Radix {
        nodes: vec![(vec![1, 2, 3, 4], 0, None), (vec![5, 6, 7], 0, None)],
    };
    let n: usize = 7;
    for budget in [1, 2, 3, 5, 7, 20] {
        let mut cadence = SweepCadence::new(budget);
        let mut covered = Vec::new();
        let bound = n.div_ceil(budget);
        for s in 0..bound {
            let entries = cadence.next_entries(&radix).unwrap();
            assert!(entries.as_slice().len() <= budget, "budget {budget}");
            covered.extend(
                entries
                    .as_slice()
                    .iter()
                    .map(|e| (e.slot, e.expected_position, e.prev_slot)),
            );
            let report = canary.sweep(entries.as_slice(), TailKv::NONE).unwrap();
            assert!(report.is_clean(), "budget {budget}, step {s}: {report}");
        }
        covered.sort();
        assert_eq!(
            covered,
            [
                (1, 0, -1),
                (2, 1, 1),
                (3, 2, 2),
                (4, 3, 3),
                (5, 0, -1),
                (6, 1, 5),
                (7, 2, 6)
            ],
            "budget {budget}: one pass in {bound} steps covers every idle slot once, chained"
        );
        assert_eq!(cadence.passes(), 1);
    }
    // Slot 6's tail K record corrupted: a cadence of 2 finds it within one pass (4 steps).
    let tail = canary.buffer_mut(LaunchTag::TailKFull).unwrap();
    tail.set_slot(
        6,
        CanarySlot {
            token: 5,
            ..tail.slot(6).unwrap()
        },
    )
    .unwrap();
    let mut cadence = SweepCadence::new(2);
    let found: Vec<usize> = (0..4)
        .filter(|_| {
            let entries = cadence.next_entries(&radix).unwrap().as_slice().to_vec();
            !canary.sweep(&entries, TailKv::NONE).unwrap().is_clean()
        })
        .collect();
    assert!(!found.is_empty() && found.len() <= 2, "{found:?}");
}

/// A sweep's finding: no request holds an idle cached slot, so `judge_sweep` gives no verdict
/// (not even to the slot's last writer, whose records still name it) and lists the slot as
/// lost; a step's verify violations list their slots as lost too, once each.
#[test]
fn a_swept_slot_is_lost_not_judged_on_a_request() {
    use kv_canary::{CanarySlot, LaunchTag, VerifyEntry};
    let policy = Policy {
        violations: Action::PerRequest,
        ..Policy::default()
    };
    let judgements: Vec<_> = stray_write(policy)
        .into_iter()
        .map(|j| j.unwrap())
        .collect();
    assert!(judgements[..3].iter().all(|j| j.lost_slots.is_empty()));
    // Slot 2 was overwritten; slot 3's chain continues from slot 2's record, so it fails too.
    assert_eq!(judgements[3].lost_slots, [2, 3], "{:?}", judgements[3]);

    let mut canary = canary();
    let mut guard: Guard<&str> = Guard::new(policy);
    step(&mut canary, &mut guard, &[(1, 0, 3, "a")], &[1, 2, 3]).unwrap();
    // "a" finished; its slots 1..=3 stay cached. Slot 3's tail V record is corrupted.
    let tail = canary.buffer_mut(LaunchTag::TailVFull).unwrap();
    let record = tail.slot(3).unwrap();
    tail.set_slot(
        3,
        CanarySlot {
            position: 9,
            ..record
        },
    )
    .unwrap();
    let entries: Vec<VerifyEntry> = (1..=3)
        .map(|s| VerifyEntry {
            slot: s,
            expected_token: -1,
            expected_position: s - 1,
            prev_slot: if s == 1 { -1 } else { s - 1 },
        })
        .collect();
    let report = canary.sweep(&entries, TailKv::NONE).unwrap();
    let j = guard.judge_sweep(&report).unwrap();
    assert!(!j.new_violations.is_empty(), "{report}");
    assert!(j.verdicts.is_empty(), "{:?}", j.verdicts);
    assert_eq!(j.lost_slots, [3]);
    assert!(
        j.records.iter().any(|r| format!("{r}").contains('a')),
        "the record names the last writer: {:?}",
        j.records
    );
    // Judged once: the next sweep of the same slots finds it again and judges nothing new.
    let again = guard
        .judge_sweep(&canary.sweep(&entries, TailKv::NONE).unwrap())
        .unwrap();
    assert!(again.new_violations.is_empty() && again.lost_slots.is_empty());
}

/// A report of one verify row at slot 2 (as a tail verify's real-KV fingerprint reports a slot
/// whose bytes another request's forward pass overwrote in the same step).
struct OneRow(kv_canary::Violation);

impl std::fmt::Display for OneRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl kv_canary::step::Findings for OneRow {
    fn violations(&self) -> &[kv_canary::Violation] {
        std::slice::from_ref(&self.0)
    }
    fn dropped(&self) -> u64 {
        0
    }
    fn unverified(&self) -> kv_canary::step::Unverified {
        kv_canary::step::Unverified::default()
    }
}

/// A misdirected write caught in the same step (the tail verify's real-KV fingerprint sees the
/// bytes the forward pass put there): the step's writer of the slot is the culprit, the request
/// that reads it the victim.
#[test]
fn a_culprit_of_the_same_step() {
    let mut guard = Guard::new(Policy {
        violations: Action::PerRequest,
        ..Policy::default()
    });
    // "a" (pool row 1) reads slots 1, 2, 3 and writes 4; "c" (pool row 2) reads 5, 6 and
    // writes slot 2, "a"'s.
    let table = table();
    let batch = Batch::from_columns([1, 2], [3, 2], [1, 1]);
    let rows = SlotRows::new(&PlanInputs::full(&batch, &table), &[4, 2]).unwrap();
    let mut fields = [0i64; 8];
    (fields[0], fields[1], fields[7]) = (
        kv_canary::LaunchTag::TailKFull as i64,
        2,
        kv_canary::FailReason::VERIFY_REAL_KV_HASH_MISMATCH.bits(),
    );
    let report = OneRow(kv_canary::Violation::from_row(fields));
    let j = guard
        .judge(&report, &rows, &[Some("a"), Some("c")])
        .unwrap();
    assert_eq!(j.verdict_of(&"a"), Some(Verdict::Recompute), "{j:?}");
    assert_eq!(j.verdict_of(&"c"), Some(Verdict::Abort), "{j:?}");
}

/// A block-granular prefix cache (`CachedBlocks`) walks as the runs of its blocks' slots: the
/// cadence's entries over it equal those over the same runs written out by hand (each block's
/// slots, its first position, the last slot of the block before it), for every budget and
/// block size; bad blocks are named.
#[test]
fn cached_blocks_sweep_as_their_slot_runs() {
    use kv_canary::guard::{CachedBlocks, SweepCadence};
    for block_size in [1usize, 2, 4, 16] {
        // Sequence A: blocks 5, 2, 9 (indices 0..3); sequence B's second block 7 (block 3
        // before it, not idle); an i32 block table's ids.
        let blocks: [(i32, Option<i32>, usize); 4] = [
            (5, None, 0),
            (2, Some(5), 1),
            (9, Some(2), 2),
            (7, Some(3), 1),
        ];
        let bs = block_size as i64;
        let by_hand = Radix {
            nodes: blocks
                .iter()
                .map(|&(b, before, index)| {
                    let first = i64::from(b) * bs;
                    let slots: Vec<i64> = (0..bs).map(|i| first + i).collect();
                    (
                        slots,
                        index * block_size,
                        before.map(|p| i64::from(p) * bs + bs - 1),
                    )
                })
                .collect(),
        };
        let cached = CachedBlocks::new(block_size, blocks).unwrap();
        for budget in [1, 3, 4 * block_size, 100] {
            let (mut ours, mut theirs) = (SweepCadence::new(budget), SweepCadence::new(budget));
            for step in 0..(4 * block_size).div_ceil(budget) + 1 {
                let a = ours.next_entries(&cached).unwrap().as_slice().to_vec();
                let b = theirs.next_entries(&by_hand).unwrap().as_slice().to_vec();
                assert_eq!(
                    a, b,
                    "block size {block_size}, budget {budget}, step {step}"
                );
            }
        }
    }
    let zero = CachedBlocks::new(0, [(1u32, None, 0)])
        .unwrap_err()
        .to_string();
    assert!(
        zero.starts_with("kv-canary:") && zero.contains("block size"),
        "{zero}"
    );
    let negative = CachedBlocks::new(16, [(-3i32, None, 0)])
        .unwrap_err()
        .to_string();
    assert!(negative.contains("-3"), "{negative}");
    let past = CachedBlocks::new(16, [(i64::MAX / 8, None, 0)])
        .unwrap_err()
        .to_string();
    assert!(past.contains(&(i64::MAX / 8).to_string()), "{past}");
    let before = CachedBlocks::new(16, [(1i64, Some(-1), 1)])
        .unwrap_err()
        .to_string();
    assert!(before.contains("-1"), "{before}");
    let index = CachedBlocks::new(16, [(1u32, None, usize::MAX / 4)]).unwrap_err();
    assert!(index.to_string().contains("index"), "{index}");
}

/// A corrupted record read later by another request (a fork sharing the prefix): the violation
/// was judged when its first victim read it, so it is no new violation and makes no second
/// record, but the new reader is a victim too and gets its verdict, once; the first victim and
/// the culprit are not judged again.
#[test]
fn a_later_reader_of_a_judged_corruption_is_a_victim_too() {
    let policy = Policy {
        violations: Action::PerRequest,
        ..Policy::default()
    };
    let (mut canary, mut guard) = (canary(), Guard::new(policy));
    step(&mut canary, &mut guard, &[(1, 0, 3, "a")], &[1, 2, 3]).unwrap();
    step(&mut canary, &mut guard, &[(2, 0, 2, "c")], &[5, 6]).unwrap();
    step(&mut canary, &mut guard, &[(2, 2, 1, "c")], &[2]).unwrap();
    let first = step(&mut canary, &mut guard, &[(1, 3, 0, "a")], &[]).unwrap();
    assert_eq!(first.verdict_of(&"a"), Some(Verdict::Recompute));
    assert_eq!(first.verdict_of(&"c"), Some(Verdict::Abort));
    // "b" forked from "a" (the same pool row: the same cached slots) reads slot 2 next step.
    let later = step(&mut canary, &mut guard, &[(1, 3, 0, "b")], &[]).unwrap();
    assert!(later.new_violations.is_empty(), "{later:?}");
    assert!(later
        .records
        .iter()
        .all(|r| !matches!(r, kv_canary::guard::Record::Violation { .. })));
    assert_eq!(
        later.verdict_of(&"b"),
        Some(Verdict::Recompute),
        "{later:?}"
    );
    let b = later.verdicts.iter().find(|v| v.request == "b").unwrap();
    assert_eq!((b.role, b.slot), (Role::Victim, 2));
    assert_eq!(later.verdicts.len(), 1, "only the new reader: {later:?}");
    // Both read it again: nobody is judged twice.
    let again = step(
        &mut canary,
        &mut guard,
        &[(1, 3, 0, "a"), (1, 3, 0, "b")],
        &[],
    )
    .unwrap();
    assert!(again.verdicts.is_empty(), "{again:?}");
}
