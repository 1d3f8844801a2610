//! Tests of the per-step API: a toy engine drives a [`Canary`] through whole steps (plan, head
//! verify, write, forward pass, tail verify) and checks the reports, the buffers and the counters.

use super::*;
use crate::canary::{CanarySlot, FailReason, Violation};
use crate::canary::{LaunchSettings, TokenCheckOff};
use crate::capacity::Cap;
use crate::cpu::{VerifySummary, WriteSummary};
use crate::hash::fold_words;
use crate::input::{Batch, ExpectedTokenTable, PlanInputs, ReqToToken, Swa};
use crate::plan::VerifyEntry;
use crate::real_kv::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources};

type Spec = Shape<Cap<64>, Cap<4>, Cap<16>>;
type Small = Canary<Cap<64>, Cap<4>, Cap<16>, Cap<64>, Cap<16>>;

/// Bytes of one slot's K or V strip.
const STRIP: usize = 16;

/// A toy engine: `req_to_token[r][p] = 8r + p`, and 16 bytes of K and of V per slot.
struct Engine {
    table: ReqToToken,
    k: Vec<u8>,
    v: Vec<u8>,
}

/// One token of a step: (slot, token id, position).
type Token = (i64, i64, i64);
/// A step of a [`Small`] canary after its head write.
type Written<'c> = Step<'c, super::Written<'c, WriteInputs<Cap<16>>>, Small>;

impl Engine {
    fn new() -> Self {
        Engine {
            table: ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap(),
            k: vec![0; 64 * STRIP],
            v: vec![0; 64 * STRIP],
        }
    }

    /// The "forward pass": KV bytes of every new token, a function of its token and position.
    fn forward(&mut self, tokens: &[Token]) {
        for &(slot, token, pos) in tokens {
            let at = slot as usize * STRIP;
            self.k[at..at + 8].copy_from_slice(&token.to_le_bytes());
            self.k[at + 8..at + 16].copy_from_slice(&pos.to_le_bytes());
            self.v[at..at + 8].copy_from_slice(&(!token).to_le_bytes());
            self.v[at + 8..at + 16].copy_from_slice(&(!pos).to_le_bytes());
        }
    }

    fn tail_kv(&self) -> TailKv<'_> {
        let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
        let source = |bytes| {
            let src = RealKvSource::new(bytes, STRIP, params).unwrap();
            RealKv::new(RealKvHashMode::All, RealKvSources::from_array([src]))
        };
        TailKv::new(source(&self.k), source(&self.v))
    }

    /// Runs one full step of `batch` writing `tokens`, on a canary with any ring size.
    fn step<R: Capacity>(
        &mut self,
        canary: &mut Canary<Cap<64>, Cap<4>, Cap<16>, Cap<64>, R>,
        batch: &Batch,
        tokens: &[Token],
    ) -> StepReport {
        let inputs = inputs(canary, tokens);
        let step = canary
            .plan(&PlanInputs::full(batch, &self.table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&inputs)
            .unwrap();
        self.forward(tokens);
        step.verify_tail(self.tail_kv()).unwrap()
    }
}

fn inputs<V, W, S, R, G>(
    canary: &Canary<V, W, Cap<16>, S, R, G>,
    tokens: &[Token],
) -> WriteInputs<Cap<16>>
where
    V: Capacity,
    W: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    let mut inputs = canary.write_inputs();
    let p = inputs.parts_mut();
    for (i, &(slot, token, pos)) in tokens.iter().enumerate() {
        (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (slot, token, pos);
    }
    inputs
}

fn canary() -> Small {
    Canary::full(Spec::new(), Cap, Cap)
}

/// Request in row 1 prefills tokens 100, 101, 102 (slots 8, 9, 10).
fn prefill(engine: &mut Engine, canary: &mut Small) -> StepReport {
    let batch = Batch::from_columns([1], [0], [3]);
    engine.step(canary, &batch, &[(8, 100, 0), (9, 101, 1), (10, 102, 2)])
}

/// The same request decodes token `100 + pos` at position `pos` (slot `8 + pos`).
fn decode(engine: &mut Engine, canary: &mut Small, pos: i64) -> StepReport {
    let batch = Batch::from_columns([1], [pos], [1]);
    engine.step(canary, &batch, &[(8 + pos, 100 + pos, pos)])
}

fn tags(rows: &[Violation]) -> Vec<LaunchTag> {
    rows.iter().map(|v| v.launch_tag().unwrap()).collect()
}

#[test]
fn clean_steps_report_nothing_and_count_every_launch() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    let first = prefill(&mut engine, &mut canary);
    assert!(first.is_clean(), "{first}");
    assert_eq!(
        (first.entries_checked(), first.entries_written()),
        (0, 4 * 3)
    );
    // Step 2: a second request (row 2) prefills 2 tokens while the first decodes.
    let batch = Batch::from_columns([1, 2], [3, 0], [1, 2]);
    let tokens = [(11, 103, 3), (16, 200, 0), (17, 201, 1)];
    let second = engine.step(&mut canary, &batch, &tokens);
    assert!(second.is_clean(), "{second}");
    assert_eq!(second.plan.requested_entries, 3);
    let (verify_plan, write_plan) = canary.plans();
    assert_eq!(&verify_plan.slot_indices()[..3], &[8, 9, 10]);
    assert_eq!(&write_plan.offsets()[..3], &[0, 1, 3]);
    assert_eq!(second.head_verify.k.checked, 3);
    assert_eq!(
        (second.entries_checked(), second.entries_written()),
        (4 * 3, 4 * 3)
    );
    let mut last = second;
    for pos in 4..8 {
        last = decode(&mut engine, &mut canary, pos);
        assert!(last.is_clean(), "step at {pos}: {last}");
        assert_eq!(last.tail_verify.v.checked, pos as usize);
    }
    let reported = [
        &last.head_counters.k,
        &last.head_counters.v,
        &last.tail_counters.k,
        &last.tail_counters.v,
    ];
    assert_eq!((canary.steps(), canary.total_violations()), (6, 0));
    for (tag, reported) in canary.tags().into_iter().zip(reported) {
        let counters = canary.counters(tag).unwrap();
        assert_eq!(counters, reported, "{tag}");
        // verify + write each step; slots: verified 0+3+4+5+6+7, written 3+3+1+1+1+1.
        assert_eq!(counters.kernel_run_counter(), 12, "{tag}");
        assert_eq!(counters.slot_run_counter(), 25 + 10, "{tag}");
    }
    // A pair's slots: K's and V's together.
    assert_eq!(last.head_counters.slots_run(), 2 * 35);
    assert_eq!(last.tail_counters.slots_run(), 2 * 35);
    // No sweep ran: the sweep launches' counters are still at 0.
    let sweep = canary.counters(LaunchTag::SweepKFull).unwrap();
    assert_eq!(
        (sweep.kernel_run_counter(), sweep.slot_run_counter()),
        (0, 0)
    );
    assert!(canary.counters(LaunchTag::HeadKSwa).is_none());
}

#[test]
fn tail_records_carry_the_fingerprint_and_head_records_do_not() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let record = |tag| canary.buffer(tag).unwrap().slot(9).unwrap();
    let head = record(LaunchTag::HeadKFull);
    assert_eq!((head.token, head.position, head.real_kv_hash), (101, 1, 0));
    assert_eq!(record(LaunchTag::HeadVFull), head);
    let k_strip = fold_words(&engine.k[9 * STRIP..10 * STRIP]);
    let v_strip = fold_words(&engine.v[9 * STRIP..10 * STRIP]);
    let tail_k = record(LaunchTag::TailKFull);
    assert_eq!(tail_k.real_kv_hash as u64, crate::hash::splitmix64(k_strip));
    let tail_v = record(LaunchTag::TailVFull);
    assert_eq!(tail_v.real_kv_hash as u64, crate::hash::splitmix64(v_strip));
    assert_eq!(
        (tail_k.prev_hash, tail_v.prev_hash),
        (head.prev_hash, head.prev_hash)
    );
}

#[test]
fn a_corrupted_head_record_is_reported_before_the_write() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let buf = canary.buffer_mut(LaunchTag::HeadKFull).unwrap();
    let slot = buf.slot(9).unwrap();
    buf.set_slot(
        9,
        CanarySlot {
            position: 7,
            ..slot
        },
    )
    .unwrap();

    let table = engine.table.clone();
    let batch = Batch::from_columns([1], [3], [1]);
    let inputs = inputs(&canary, &[(11, 103, 3)]);
    let step = canary.plan(&PlanInputs::full(&batch, &table)).unwrap();
    assert_eq!(step.violations().len(), 0);
    let step = step.verify_head().unwrap();
    // The engine can stop here, before its forward pass reads the cache.
    let found: Vec<Violation> = step.violations().collect();
    assert_eq!(tags(&found), [LaunchTag::HeadKFull; 2]);
    assert_eq!(
        (found[0].slot, found[0].reasons),
        (9, FailReason::VERIFY_POSITION_MISMATCH)
    );
    assert_eq!(
        (found[1].slot, found[1].reasons),
        (10, FailReason::VERIFY_CHAIN_HASH_MISMATCH)
    );
    let step = step.write(&inputs).unwrap();
    engine.forward(&[(11, 103, 3)]);
    let report = step.verify_tail(engine.tail_kv()).unwrap();
    assert_eq!(report.violations, found, "head V and both tails are clean");
    assert_eq!((report.recorded(), canary.total_violations()), (2, 2));
}

#[test]
fn the_head_stage_in_fewer_calls_is_the_stages_one_by_one() {
    // Canaries through the same steps, one calling the stages one by one, the others the head
    // verify and write in one call, the plan and the head verify in one, and all three in one;
    // a head record spoiled in each before the last step.
    type Way = for<'c> fn(
        &'c mut Small,
        &PlanInputs<'_, Full, crate::input::NoExpectedTokens>,
        &'c WriteInputs<Cap<16>>,
    ) -> Written<'c>;
    let ways: [(&str, Way); 4] = [
        ("by stages", |c, p, i| {
            c.plan(p).unwrap().verify_head().unwrap().write(i).unwrap()
        }),
        ("verify_head_and_write", |c, p, i| {
            c.plan(p).unwrap().verify_head_and_write(i).unwrap()
        }),
        ("plan_and_verify_head", |c, p, i| {
            let step = c.plan_and_verify_head(p).unwrap();
            assert_eq!(
                tags(&step.head_findings().unwrap().violations),
                [LaunchTag::HeadVFull]
            );
            step.write(i).unwrap()
        }),
        ("plan_verify_head_and_write", |c, p, i| {
            c.plan_verify_head_and_write(p, i).unwrap()
        }),
    ];
    let mut outcomes = Vec::new();
    for (name, way) in ways {
        let (mut engine, mut canary) = (Engine::new(), canary());
        prefill(&mut engine, &mut canary);
        let buf = canary.buffer_mut(LaunchTag::HeadVFull).unwrap();
        let slot = buf.slot(8).unwrap();
        buf.set_slot(8, CanarySlot { token: 5, ..slot }).unwrap();
        let batch = Batch::from_columns([1], [3], [1]);
        let tokens = [(11, 103, 3)];
        let table = engine.table.clone();
        let inputs = inputs(&canary, &tokens);
        let step = way(&mut canary, &PlanInputs::full(&batch, &table), &inputs);
        engine.forward(&tokens);
        let report = step.verify_tail(engine.tail_kv()).unwrap();
        let buffers =
            [LaunchTag::HeadKFull, LaunchTag::HeadVFull].map(|t| canary.buffer(t).cloned());
        outcomes.push((
            name,
            report,
            buffers,
            canary.steps(),
            canary.abandoned_steps(),
        ));
    }
    let (_, by_stages, buffers, steps, abandoned) = &outcomes[0];
    assert_eq!(tags(&by_stages.violations), [LaunchTag::HeadVFull]);
    for (name, report, other_buffers, other_steps, other_abandoned) in &outcomes[1..] {
        assert_eq!(report.violations, by_stages.violations, "{name}");
        assert_eq!(
            (report.entries_checked(), report.entries_written()),
            (by_stages.entries_checked(), by_stages.entries_written()),
            "{name}"
        );
        assert_eq!(other_buffers, buffers, "{name}");
        assert_eq!((other_steps, other_abandoned), (steps, abandoned), "{name}");
    }
}

#[test]
fn plan_and_verify_head_counts_the_step_it_interrupts_and_its_own_failure() {
    let (engine, mut canary) = (Engine::new(), canary());
    let batch = Batch::from_columns([1], [0], [2]);
    let step = canary
        .plan(&PlanInputs::full(&batch, &engine.table))
        .unwrap();
    drop(step);
    // A step in flight is abandoned when the next one starts in one call.
    let step = canary
        .plan_and_verify_head(&PlanInputs::full(&batch, &engine.table))
        .unwrap();
    drop(step);
    assert_eq!(canary.abandoned_steps(), 1);
    // A failing plan: the step in flight and the failed one are both abandoned, nothing runs.
    let bad = Batch::from_columns([9], [3], [1]); // pool row 9 does not exist
    let Err(err) = canary.plan_and_verify_head(&PlanInputs::full(&bad, &engine.table)) else {
        panic!("a batch over a missing pool row was planned");
    };
    assert!(err.to_string().starts_with("kv-canary:"), "{err}");
    assert_eq!(canary.abandoned_steps(), 3);
}

#[test]
fn kv_bytes_changed_after_their_write_are_reported_by_their_half_of_the_tail() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    engine.v[9 * STRIP + 3] ^= 0x40; // a stray write into the V bytes of slot 9
    let report = decode(&mut engine, &mut canary, 3);
    assert_eq!(tags(&report.violations), [LaunchTag::TailVFull]);
    let v = report.violations[0];
    assert_eq!((v.slot, v.position, v.stored_token), (9, 1, 101));
    assert_eq!(v.reasons, FailReason::VERIFY_REAL_KV_HASH_MISMATCH);
    assert!(report.head_verify.iter().all(|s| s.violations == 0));
}

#[test]
fn a_slot_reused_while_referenced_is_reported_by_every_buffer() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    // Use after free: request 2 is handed slot 9, which request 1 still holds.
    let batch = Batch::from_columns([2], [0], [1]);
    assert!(engine.step(&mut canary, &batch, &[(9, 555, 0)]).is_clean());
    let report = decode(&mut engine, &mut canary, 3);
    let at_slot_9: Vec<Violation> = report
        .violations
        .iter()
        .filter(|v| v.slot == 9)
        .copied()
        .collect();
    assert_eq!(tags(&at_slot_9), canary.tags());
    let v = report.violations[0];
    assert_eq!((v.position, v.stored_token), (0, 555));
    assert!(v.reasons.contains(FailReason::VERIFY_POSITION_MISMATCH));
}

#[test]
fn tokens_are_checked_exactly_when_the_plan_has_an_expected_pool() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let mut pool = ExpectedTokenTable::zeros(4, 8).unwrap();
    pool.row_mut(1).unwrap()[..3].copy_from_slice(&[100, 999, 102]);
    let valid_lens = [3];
    let batch = Batch::from_columns([1], [3], [1]);
    let table = engine.table.clone();
    let plan_inputs =
        PlanInputs::full(&batch, &table).with_expected(pool.with_valid_lens(&valid_lens));
    let inputs = inputs(&canary, &[(11, 103, 3)]);
    let step = canary
        .plan(&plan_inputs)
        .unwrap()
        .verify_head()
        .unwrap()
        .write(&inputs)
        .unwrap();
    engine.forward(&[(11, 103, 3)]);
    let report = step.verify_tail(engine.tail_kv()).unwrap();
    assert_eq!(tags(&report.violations), canary.tags());
    for v in &report.violations {
        assert_eq!((v.slot, v.stored_token, v.expected_token), (9, 101, 999));
        assert_eq!(v.reasons, FailReason::VERIFY_TOKEN_MISMATCH);
    }
    // Without the pool the same step is clean.
    assert!(decode(&mut engine, &mut canary, 4).is_clean());
}

#[test]
fn each_report_holds_its_own_step_and_counts_what_the_ring_dropped() {
    let mut engine = Engine::new();
    let mut canary: Canary<Cap<64>, Cap<4>, Cap<16>, Cap<64>, Cap<3>> =
        Canary::full(Spec::new(), Cap, Cap);
    let batch = Batch::from_columns([1], [0], [3]);
    let tokens = [(8, 100, 0), (9, 101, 1), (10, 102, 2)];
    assert!(engine.step(&mut canary, &batch, &tokens).is_clean());
    // Every record of slot 8 (head and tail, K and V) gets a wrong position: 4 verify launches
    // x 1 row, plus 4 chain rows on slot 9 (its predecessor changed).
    for tag in canary.tags() {
        let buf = canary.buffer_mut(tag).unwrap();
        let slot = buf.slot(8).unwrap();
        buf.set_slot(
            8,
            CanarySlot {
                position: 5,
                ..slot
            },
        )
        .unwrap();
    }
    let batch = Batch::from_columns([1], [3], [1]);
    for round in 1..=2 {
        let report = engine.step(&mut canary, &batch, &[(11, 103, 3)]);
        assert_eq!(
            (report.violations.len(), report.dropped),
            (3, 5),
            "round {round}"
        );
        assert_eq!(canary.total_violations(), 8 * round);
        // The stored rows are the first three recorded: HEAD_K slot 8 and 9, HEAD_V slot 8.
        let firsts: Vec<(LaunchTag, i64)> = report
            .violations
            .iter()
            .map(|v| (v.launch_tag().unwrap(), v.slot))
            .collect();
        assert_eq!(
            firsts,
            [
                (LaunchTag::HeadKFull, 8),
                (LaunchTag::HeadKFull, 9),
                (LaunchTag::HeadVFull, 8)
            ]
        );
    }
}

#[test]
fn a_failed_launch_modifies_nothing() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let head_before = canary.buffer(LaunchTag::HeadKFull).unwrap().clone();
    let batch = Batch::from_columns([1], [3], [1]);
    let table = engine.table.clone();
    // out_cache_loc past the pool: the head write refuses, after the head verify ran.
    let bad = inputs(&canary, &[(64, 103, 3)]);
    let step = canary
        .plan(&PlanInputs::full(&batch, &table))
        .unwrap()
        .verify_head()
        .unwrap();
    let err = step.write(&bad).err().unwrap();
    assert_eq!(
        err.to_string(),
        "kv-canary: out_cache_loc[0] = 64 is outside the canary buffer's 64 slots"
    );
    assert_eq!(canary.buffer(LaunchTag::HeadKFull).unwrap(), &head_before);
    let counters = canary.counters(LaunchTag::HeadKFull).unwrap();
    assert_eq!(
        counters.kernel_run_counter(),
        3,
        "prefill verify + write, this verify"
    );
    assert_eq!(canary.steps(), 1);

    // A real-KV source that does not cover the pool: refused before any tail launch.
    let good = inputs(&canary, &[(11, 103, 3)]);
    let tail_before = canary.buffer(LaunchTag::TailKFull).unwrap().clone();
    let step = canary
        .plan(&PlanInputs::full(&batch, &table))
        .unwrap()
        .verify_head()
        .unwrap()
        .write(&good)
        .unwrap();
    let short =
        RealKvSource::new(&engine.k[..32 * STRIP], STRIP, RealKvParams::new(1, 16, 16)).unwrap();
    let short = RealKv::new(RealKvHashMode::Partial, RealKvSources::from_array([short]));
    let err = step
        .verify_tail(TailKv::new(short, RealKv::NONE))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "kv-canary: real_kv_sources[0]: slot 63 lies in row 63, past the source's 32 rows"
    );
    assert_eq!(canary.buffer(LaunchTag::TailKFull).unwrap(), &tail_before);
    assert_eq!(
        canary
            .counters(LaunchTag::TailKFull)
            .unwrap()
            .kernel_run_counter(),
        2
    );
}

#[test]
fn an_swa_canary_verifies_the_window_in_swa_slots_with_swa_tags() {
    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
    let lut: Vec<i64> = (0..33).map(|x| x + 100).collect(); // full slot x -> SWA slot x + 100
    let mut canary = Canary::swa(Spec::new(), Cap::<160>, Cap::<16>);
    let run = |canary: &mut Canary<_, _, _, _, _, SwaGroup>, batch: &Batch, tokens: &[Token]| {
        let inputs = inputs(canary, tokens);
        let group = Swa::window(2).with_lut(&lut);
        let plan_inputs = PlanInputs::full(batch, &table).with_group(group);
        let step = canary
            .plan(&plan_inputs)
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&inputs)
            .unwrap();
        step.verify_tail(TailKv::NONE).unwrap()
    };
    // out_cache_loc is already in SWA slots (spec §4): full slots 8..13 -> 108..113.
    let prefill: Vec<Token> = (0..5).map(|p| (108 + p, 100 + p, p)).collect();
    assert!(run(&mut canary, &Batch::from_columns([1], [0], [5]), &prefill).is_clean());
    let report = run(
        &mut canary,
        &Batch::from_columns([1], [5], [1]),
        &[(113, 105, 5)],
    );
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        report.head_verify.k.checked, 2,
        "only the window: positions 3 and 4"
    );
    let buf = canary.buffer_mut(LaunchTag::HeadKSwa).unwrap();
    let slot = buf.slot(112).unwrap();
    buf.set_slot(112, CanarySlot { token: 7, ..slot }).unwrap();
    let report = run(
        &mut canary,
        &Batch::from_columns([1], [6], [1]),
        &[(114, 106, 6)],
    );
    assert_eq!(tags(&report.violations), [LaunchTag::HeadKSwa]);
    assert_eq!(
        (report.violations[0].slot, report.violations[0].reasons),
        (113, FailReason::VERIFY_CHAIN_HASH_MISMATCH)
    );
    assert!(canary.buffer(LaunchTag::HeadKFull).is_none());
}

#[test]
fn a_plan_over_the_verify_capacity_is_unverified_not_clean() {
    let mut engine = Engine::new();
    // A verify capacity of 2: a 3-token prefix needs 3 entries, so the plan disables verify.
    let mut canary: Canary<Cap<2>, Cap<4>, Cap<16>, Cap<64>, Cap<16>> =
        Canary::full(Shape::new(), Cap, Cap);
    let table = engine.table.clone();
    let mut step = |canary: &mut Canary<Cap<2>, Cap<4>, Cap<16>, Cap<64>, Cap<16>>,
                    batch: &Batch,
                    tokens: &[Token]| {
        let inputs = inputs(canary, tokens);
        let step = canary
            .plan(&PlanInputs::full(batch, &table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&inputs)
            .unwrap();
        engine.forward(tokens);
        step.verify_tail(engine.tail_kv()).unwrap()
    };
    let prefill = step(
        &mut canary,
        &Batch::from_columns([1], [0], [3]),
        &[(8, 100, 0), (9, 101, 1), (10, 102, 2)],
    );
    assert!(
        prefill.is_clean(),
        "no prefix, nothing to verify: {prefill}"
    );
    // Corrupt a record the next step should find: the overflowed plan checks nothing.
    for tag in canary.tags() {
        let buf = canary.buffer_mut(tag).unwrap();
        let slot = buf.slot(9).unwrap();
        buf.set_slot(9, CanarySlot { token: 7, ..slot }).unwrap();
    }
    let decode = step(
        &mut canary,
        &Batch::from_columns([1], [3], [1]),
        &[(11, 103, 3)],
    );
    assert_eq!(decode.entries_checked(), 0);
    assert!(!decode.is_clean(), "{decode}");
    let overflow = PlanOverflow {
        needed: Some(3),
        capacity: 2,
    };
    assert_eq!(
        decode.status(),
        StepStatus::Unverified {
            gaps: Unverified {
                plan_overflow: Some(overflow),
                abandoned_steps: 0
            },
            recorded: 0
        }
    );
    assert_eq!(
        decode.to_string(),
        "bs 1, 3 verify entries (DISABLED: over capacity), 1 token written; 0 slots checked, \
         4 stamped; UNVERIFIED: the plan needed 3 verify entries but the verify capacity is 2, \
         so no slot was checked; 0 violations (0 dropped)"
    );
}

#[test]
fn a_step_that_did_not_run_all_its_launches_makes_the_next_report_unverified() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    assert!(prefill(&mut engine, &mut canary).is_clean());
    let table = engine.table.clone();
    let batch = Batch::from_columns([1], [3], [1]);
    // Abandoned after its head verify: the write and the tail verify never ran.
    let step = canary.plan(&PlanInputs::full(&batch, &table)).unwrap();
    drop(step.verify_head().unwrap());
    assert_eq!(
        canary.abandoned_steps(),
        0,
        "counted when the next step starts"
    );
    // A plan that fails (pool row 9 does not exist) is abandoned too.
    let bad = Batch::from_columns([9], [3], [1]);
    assert!(canary.plan(&PlanInputs::full(&bad, &table)).is_err());
    assert_eq!(canary.abandoned_steps(), 2);
    let report = decode(&mut engine, &mut canary, 3);
    assert_eq!(report.abandoned_steps, 2);
    assert_eq!(report.recorded(), 0);
    assert!(!report.is_clean(), "{report}");
    assert!(report.to_string().ends_with(
        "UNVERIFIED: 2 earlier steps did not complete (an error ended them, or they were \
         dropped before their tail verify); 0 violations (0 dropped)"
    ));
    // The count was delivered once: the next complete step is clean again.
    assert_eq!(canary.abandoned_steps(), 0);
    assert!(decode(&mut engine, &mut canary, 4).is_clean());
}

#[test]
fn a_cancelled_step_says_what_it_stamped_and_is_counted_once() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    assert!(prefill(&mut engine, &mut canary).is_clean());
    let table = engine.table.clone();
    let batch = Batch::from_columns([1], [3], [1]);
    let planned = canary.plan(&PlanInputs::full(&batch, &table)).unwrap();
    assert_eq!(
        planned.cancel(),
        super::Cancelled {
            stage: "planned",
            head_stamped: false,
            abandoned_steps: 1
        }
    );
    assert_eq!(canary.abandoned_steps(), 1);
    // Cancelled after its write: on the CPU the head buffers hold the token, the tail's not.
    let tokens = [(11, 103, 3)];
    let write = inputs(&canary, &tokens);
    let written = canary
        .plan(&PlanInputs::full(&batch, &table))
        .unwrap()
        .verify_head()
        .unwrap()
        .write(&write)
        .unwrap();
    let cancelled = written.cancel();
    assert_eq!(
        cancelled,
        super::Cancelled {
            stage: "written",
            head_stamped: true,
            abandoned_steps: 2
        },
        "the cancelled step is counted once, not again by the plan after it"
    );
    assert_eq!(
        cancelled.to_string(),
        "step cancelled at stage written (head buffers stamped, tail buffers not stamped); 2 \
         step(s) abandoned since the last report"
    );
    let record = |tag| canary.buffer(tag).unwrap().slot(11).unwrap();
    assert_eq!(
        (
            record(LaunchTag::HeadKFull).token,
            record(LaunchTag::HeadVFull).token
        ),
        (103, 103)
    );
    assert_eq!(
        (
            record(LaunchTag::TailKFull).token,
            record(LaunchTag::TailVFull).token
        ),
        (0, 0)
    );
    // The next step reports both, once; the one after is clean (the token is stamped again by
    // the step that writes it for real).
    let report = decode(&mut engine, &mut canary, 3);
    assert_eq!(report.abandoned_steps, 2, "{report}");
    assert!(!report.is_clean());
    assert!(decode(&mut engine, &mut canary, 4).is_clean());
}

#[test]
fn a_canary_in_an_engine_struct_reshapes_in_place_and_keeps_its_state() {
    use crate::capacity::UncheckedCapacity;
    use crate::shape::{EngineKnobs, NamedShape};
    #[derive(Clone, Copy, Debug)]
    struct Config;
    struct EngineState {
        canary: NamedCanary<Config>,
    }
    let rows = UncheckedCapacity::new("ring rows", 16).unwrap();
    let knobs = EngineKnobs::speculative(1, 2, 24);
    let shape = NamedShape::<Config>::named(&knobs).unwrap();
    let mut engine = EngineState {
        canary: Canary::try_full(shape, knobs.slot_capacity().unwrap(), rows).unwrap(),
    };
    assert_eq!(engine.canary.slots().get(), 24);
    // Row r, position p: slot 8r + p (row 0 is the padding row, never read).
    let table = ReqToToken::from_vec(3, 8, (0..24).collect()).unwrap();
    let step = |canary: &mut Canary<_, _, _, _, _>, batch: &Batch, tokens: &[Token]| {
        let mut inputs = canary.try_write_inputs().unwrap();
        let p = inputs.parts_mut();
        for (i, &(slot, token, pos)) in tokens.iter().enumerate() {
            (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (slot, token, pos);
        }
        canary
            .plan(&PlanInputs::full(batch, &table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&inputs)
            .unwrap()
            .verify_tail(TailKv::NONE)
            .unwrap()
    };
    // One request prefills 3 tokens into slots 8, 9, 10 (the capacities of `max_bs` 1).
    let batch = Batch::from_columns([1], [0], [3]);
    let report = step(
        &mut engine.canary,
        &batch,
        &[(8, 7, 0), (9, 8, 1), (10, 9, 2)],
    );
    assert!(report.is_clean(), "{report}");
    // The configuration grows to `max_bs` 2; the struct's canary moves in place.
    let bigger = NamedShape::<Config>::named(&EngineKnobs::speculative(2, 2, 24)).unwrap();
    engine.canary.reshape(bigger).unwrap();
    assert_eq!(engine.canary.shape().write_req_capacity().get(), 2);
    assert_eq!(engine.canary.shape().write_entry_capacity().get(), 6);
    assert_eq!(engine.canary.steps(), 1, "the step count stays");
    // Two requests now: the first decodes behind its 3-token prefix, stamped before the
    // change and verified by all four buffers; a second prefills in row 2.
    let batch = Batch::from_columns([1, 2], [3, 0], [1, 2]);
    let tokens = [(11, 10, 3), (16, 20, 0), (17, 21, 1)];
    let report = step(&mut engine.canary, &batch, &tokens);
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.entries_checked(), 4 * 3, "{report}");
    assert_eq!(engine.canary.steps(), 2);
}

#[test]
fn a_reshaped_canary_keeps_verifying_the_requests_in_flight() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    assert!(prefill(&mut engine, &mut canary).is_clean());
    assert!(decode(&mut engine, &mut canary, 3).is_clean());
    let counters_before = canary.counters(LaunchTag::TailVFull).unwrap().clone();
    // The engine's config changes (say a new top-k): 2 requests of up to 3 tokens each.
    let mut canary = canary
        .try_reshape(Shape::<Cap<48>, Cap<2>, Cap<6>>::new())
        .map_err(|(_, err)| err)
        .unwrap();
    assert_eq!(canary.steps(), 2);
    assert_eq!(
        canary.counters(LaunchTag::TailVFull),
        Some(&counters_before)
    );
    let table = engine.table.clone();
    let mut step = |canary: &mut Canary<Cap<48>, Cap<2>, Cap<6>, Cap<64>, Cap<16>>,
                    batch: &Batch,
                    tokens: &[Token]| {
        let mut inputs = canary.write_inputs();
        let p = inputs.parts_mut();
        for (i, &(slot, token, pos)) in tokens.iter().enumerate() {
            (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (slot, token, pos);
        }
        let step = canary
            .plan(&PlanInputs::full(batch, &table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&inputs)
            .unwrap();
        engine.forward(tokens);
        step.verify_tail(engine.tail_kv()).unwrap()
    };
    // The request's 4-token prefix, stamped before the change, is still verified clean...
    let batch = Batch::from_columns([1], [4], [2]);
    let report = step(&mut canary, &batch, &[(12, 104, 4), (13, 105, 5)]);
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.entries_checked(), 4 * 4);
    // ... and a record corrupted after the change is still found, by every buffer.
    for tag in canary.tags() {
        let buf = canary.buffer_mut(tag).unwrap();
        let slot = buf.slot(10).unwrap();
        buf.set_slot(
            10,
            CanarySlot {
                position: 7,
                ..slot
            },
        )
        .unwrap();
    }
    let report = step(
        &mut canary,
        &Batch::from_columns([1], [6], [1]),
        &[(14, 106, 6)],
    );
    let slots: Vec<i64> = report.violations.iter().map(|v| v.slot).collect();
    assert!(
        !slots.is_empty() && slots.iter().all(|&s| s == 10 || s == 11),
        "{slots:?}"
    );
    let mut found = tags(&report.violations);
    found.dedup();
    assert_eq!(found, canary.tags(), "each of the four buffers reports it");
    assert_eq!(canary.steps(), 4);
}
#[test]
fn run_time_capacities_too_large_are_errors_not_aborts() {
    use crate::capacity::UncheckedCapacity;
    use crate::shape::UncheckedShape;
    let cap = |n| UncheckedCapacity::new("capacity", n).unwrap();
    let shape = UncheckedShape::from_capacities(cap(8), cap(4), cap(16));
    // 2^45 slots x 32 bytes = 2^50 bytes: refused on every machine (see memory.rs).
    let err = Canary::try_full(shape, cap(1 << 45), cap(16)).unwrap_err();
    assert_eq!(
        err,
        Error::AllocationFailed {
            what: "canary_buf",
            rows: 1 << 45,
            cols: 32,
            element_bytes: 1
        }
    );
    assert!(Canary::try_swa(shape, cap(64), cap(1 << 62)).is_err());
    let huge = UncheckedShape::from_capacities(cap(1 << 61), cap(4), cap(16));
    assert!(matches!(
        Canary::try_full(huge, cap(64), cap(16)),
        Err(Error::AllocationFailed {
            what: "verify_slot_indices",
            ..
        })
    ));
    let canary = Canary::try_full(shape, cap(64), cap(16)).unwrap();
    assert_eq!(canary.try_write_inputs().unwrap().input_ids().len(), 16);
}

/// The sweep entries of the request in row 1 after [`prefill`]: slots 8, 9, 10 at positions
/// 0, 1, 2, each chained to the slot before it.
fn row_1_entries() -> Vec<VerifyEntry> {
    [(8, -1), (9, 8), (10, 9)]
        .into_iter()
        .zip(0..)
        .map(|((slot, prev_slot), position)| VerifyEntry {
            slot,
            expected_token: 0,
            expected_position: position,
            prev_slot,
        })
        .collect()
}

#[test]
fn a_sweep_finds_idle_cached_bytes_that_no_step_attends_to() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary); // row 1 finishes: slots 8..=10 stay cached, idle
    let clean = canary.sweep(&row_1_entries(), engine.tail_kv()).unwrap();
    assert!(clean.is_clean(), "{clean}");
    assert_eq!((clean.entries, clean.entries_checked()), (3, 2 * 3));

    // A stray write into the idle K bytes of slot 9, a corrupted V tail record of slot 10.
    engine.k[9 * STRIP + 5] ^= 0x10;
    let buf = canary.buffer_mut(LaunchTag::TailVFull).unwrap();
    let slot = buf.slot(10).unwrap();
    buf.set_slot(
        10,
        CanarySlot {
            position: 7,
            ..slot
        },
    )
    .unwrap();
    // The steps of another request (row 2) attend to neither: they stay clean.
    let batch = Batch::from_columns([2], [0], [2]);
    let report = engine.step(&mut canary, &batch, &[(16, 200, 0), (17, 201, 1)]);
    assert!(report.is_clean(), "{report}");
    let batch = Batch::from_columns([2], [2], [1]);
    let report = engine.step(&mut canary, &batch, &[(18, 202, 2)]);
    assert!(report.is_clean(), "{report}");

    let sweep = canary.sweep(&row_1_entries(), engine.tail_kv()).unwrap();
    assert_eq!(
        tags(&sweep.violations),
        [LaunchTag::SweepKFull, LaunchTag::SweepVFull]
    );
    let (k, v) = (sweep.violations[0], sweep.violations[1]);
    assert_eq!(
        (k.slot, k.reasons),
        (9, FailReason::VERIFY_REAL_KV_HASH_MISMATCH)
    );
    assert_eq!(
        (v.slot, v.reasons),
        (10, FailReason::VERIFY_POSITION_MISMATCH)
    );
    assert!(matches!(
        sweep.status(),
        StepStatus::Violations { recorded: 2 }
    ));
    assert_eq!((canary.sweeps(), canary.total_violations()), (2, 2));
    let counters = canary.counters(LaunchTag::SweepVFull).unwrap();
    assert_eq!(
        (counters.kernel_run_counter(), counters.slot_run_counter()),
        (2, 6)
    );
    assert_eq!(&sweep.counters.v, counters);
    // The sweep shares the tail buffers and writes nothing.
    assert_eq!(
        canary.buffer(LaunchTag::SweepVFull).unwrap(),
        canary.buffer(LaunchTag::TailVFull).unwrap()
    );
}

#[test]
fn a_sweep_over_the_verify_capacity_is_unverified_with_the_numbers() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let canary_slot = canary
        .buffer(LaunchTag::TailKFull)
        .unwrap()
        .slot(9)
        .unwrap();
    engine.k[9 * STRIP] ^= 1;
    let mut entries = row_1_entries();
    let first = entries[0];
    entries.extend((0..62).map(|_| first)); // 65 entries, capacity 64
    let sweep = canary.sweep(&entries, engine.tail_kv()).unwrap();
    assert_eq!((sweep.entries_checked(), sweep.recorded()), (0, 0));
    let gaps = sweep.unverified();
    assert_eq!(
        gaps.plan_overflow,
        Some(PlanOverflow {
            needed: Some(65),
            capacity: 64
        })
    );
    assert!(!sweep.is_clean());
    assert!(sweep.to_string().contains("needed 65"), "{sweep}");
    assert_eq!(
        canary
            .buffer(LaunchTag::TailKFull)
            .unwrap()
            .slot(9)
            .unwrap(),
        canary_slot
    );
}

#[test]
fn a_sweep_cannot_use_sources_that_miss_slots() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let short = RealKvSource::new(&engine.k[..8 * STRIP], STRIP, params).unwrap();
    let short = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([short]));
    let kv = engine.tail_kv();
    let err = canary
        .sweep(&row_1_entries(), TailKv::new(short, kv.v))
        .unwrap_err();
    assert!(matches!(err, Error::RealKvSlotOutOfRange { .. }), "{err}");
    assert_eq!(canary.sweeps(), 0);
}

/// The batch that sweeps the cached tokens of request-table rows: `(row, cached tokens)`.
fn sweep_rows(rows: &[(i64, i64)]) -> Batch {
    let column = |f: fn(&(i64, i64)) -> i64| rows.iter().map(f).collect::<Vec<_>>();
    Batch::try_from_columns(column(|r| r.0), column(|r| r.1), vec![0; rows.len()]).unwrap()
}

/// What a sweep of table rows and a sweep of the same rows' walked entries must agree on (the
/// counters are cumulative: not compared).
fn same_sweep(by_rows: &SweepReport, by_entries: &SweepReport) {
    assert_eq!(by_rows.entries, by_entries.entries);
    assert_eq!(by_rows.verify, by_entries.verify);
    assert_eq!(by_rows.violations, by_entries.violations);
    assert_eq!(by_rows.dropped, by_entries.dropped);
    assert_eq!(by_rows.status(), by_entries.status());
}

#[test]
fn a_table_row_sweep_checks_the_entries_a_walk_of_the_rows_gives() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary); // row 1 finishes: slots 8..=10 stay cached, idle
    let table = engine.table.clone();
    let batch = sweep_rows(&[(1, 3)]);
    let rows = PlanInputs::full(&batch, &table);
    let clean = canary.sweep_table_rows(&rows, engine.tail_kv()).unwrap();
    assert!(clean.is_clean(), "{clean}");
    assert_eq!((clean.entries, clean.entries_checked()), (3, 2 * 3));
    let mut walked = SweepEntries::new();
    walked.push_table_row(&table, 1, 3).unwrap();
    assert_eq!(
        canary.plans().0.entries().collect::<Vec<_>>(),
        walked.as_slice()
    );

    // A stray write into the idle K bytes of slot 9, a corrupted V tail record of slot 10.
    engine.k[9 * STRIP + 5] ^= 0x10;
    let buf = canary.buffer_mut(LaunchTag::TailVFull).unwrap();
    let slot = buf.slot(10).unwrap();
    let moved = CanarySlot {
        position: 7,
        ..slot
    };
    buf.set_slot(10, moved).unwrap();
    let by_rows = canary.sweep_table_rows(&rows, engine.tail_kv()).unwrap();
    assert_eq!(
        tags(&by_rows.violations),
        [LaunchTag::SweepKFull, LaunchTag::SweepVFull]
    );
    assert_eq!(
        (by_rows.violations[0].slot, by_rows.violations[1].slot),
        (9, 10)
    );
    same_sweep(&by_rows, &canary.sweep(&walked, engine.tail_kv()).unwrap());
    assert_eq!((canary.sweeps(), canary.total_violations()), (3, 4));
    let counters = canary.counters(LaunchTag::SweepKFull).unwrap();
    assert_eq!(
        (counters.kernel_run_counter(), counters.slot_run_counter()),
        (3, 9)
    );
}

#[test]
fn table_row_sweeps_equal_sweeps_of_walked_entries_over_random_rows() {
    use rand::{RngExt as _, SeedableRng as _};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed_5eeb);
    let (mut engine, mut canary) = (Engine::new(), canary());
    // Rows 1 and 2 prefill 8 and 5 tokens; row 3 holds nothing stamped.
    let batch = Batch::from_columns([1, 2], [0, 0], [8, 5]);
    let tokens: Vec<Token> = (0..8)
        .map(|p| (8 + p, 100 + p, p))
        .chain((0..5).map(|p| (16 + p, 200 + p, p)))
        .collect();
    assert!(engine.step(&mut canary, &batch, &tokens).is_clean());
    let table = engine.table.clone();
    for round in 0..60 {
        if round % 3 == 0 {
            // A fault somewhere in the K or V bytes of the first 24 slots.
            let bytes = if rng.random_range(0..2) == 0 {
                &mut engine.k
            } else {
                &mut engine.v
            };
            bytes[rng.random_range(0..24 * STRIP)] ^= 1 << rng.random_range(0..8);
        }
        let rows: Vec<(i64, i64)> = (0..rng.random_range(1..=4))
            .map(|_| (rng.random_range(0..4), rng.random_range(0..=8)))
            .collect();
        let mut walked = SweepEntries::new();
        for &(row, len) in rows.iter().filter(|r| r.0 != 0) {
            walked
                .push_table_row(&table, row as usize, len as usize)
                .unwrap();
        }
        let batch = sweep_rows(&rows);
        let by_rows = canary
            .sweep_table_rows(&PlanInputs::full(&batch, &table), engine.tail_kv())
            .unwrap();
        let by_entries = canary.sweep(&walked, engine.tail_kv()).unwrap();
        same_sweep(&by_rows, &by_entries);
        assert_eq!(by_rows.entries, walked.len(), "round {round}: {rows:?}");
    }
    assert_eq!(canary.sweeps(), 120);
}

#[test]
fn a_table_row_sweep_over_the_verify_capacity_is_unverified_with_the_numbers() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    // Rows of 40 cached slots each (below the 64 canary slots): two are 80 entries, for 64.
    let wide = ReqToToken::from_vec(4, 40, (0..160).map(|i| i % 64).collect()).unwrap();
    let batch = sweep_rows(&[(1, 40), (2, 40)]);
    let sweep = canary
        .sweep_table_rows(&PlanInputs::full(&batch, &wide), engine.tail_kv())
        .unwrap();
    assert_eq!((sweep.entries_checked(), sweep.recorded()), (0, 0));
    assert_eq!(
        sweep.unverified().plan_overflow,
        Some(PlanOverflow {
            needed: Some(80),
            capacity: 64
        })
    );
    assert!(!sweep.is_clean());
    assert!(sweep.to_string().contains("needed 80"), "{sweep}");
}

#[test]
fn a_table_row_sweep_of_rows_the_table_lacks_is_the_plan_error_and_runs_nothing() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let table = engine.table.clone();
    let before = canary.counters(LaunchTag::SweepKFull).unwrap().clone();
    for (rows, wanted) in [
        (
            sweep_rows(&[(1, 3), (7, 2)]),
            "kv-canary: batch row 1: req_pool_index 7 is outside req_to_token's 4 rows",
        ),
        (
            sweep_rows(&[(1, 9)]),
            "kv-canary: batch row 0: prefix_len 9 exceeds req_to_token's row width 8",
        ),
    ] {
        let err = canary
            .sweep_table_rows(&PlanInputs::full(&rows, &table), engine.tail_kv())
            .unwrap_err();
        assert_eq!(err.to_string(), wanted);
    }
    assert_eq!(canary.sweeps(), 0);
    assert_eq!(canary.counters(LaunchTag::SweepKFull).unwrap(), &before);
}

#[test]
fn an_swa_table_row_sweep_checks_the_window_in_swa_slots() {
    let lut: Vec<i64> = (0..160).map(|x| if x == 0 { 0 } else { 160 - x }).collect();
    let mut canary = Canary::swa(Spec::new(), Cap::<160>, Cap::<16>);
    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
    let group = Swa::window(2).with_lut(&lut);
    // The SWA pool's slots: the LUT's images of slots 8..=11.
    let tokens: Vec<Token> = (0..4).map(|p| (152 - p, 100 + p, p)).collect();
    let inputs = inputs(&canary, &tokens);
    let batch = Batch::from_columns([1], [0], [4]);
    let step = canary
        .plan(&PlanInputs::full(&batch, &table).with_group(group))
        .unwrap()
        .verify_head()
        .unwrap()
        .write(&inputs)
        .unwrap();
    assert!(step.verify_tail(TailKv::NONE).unwrap().is_clean());

    let batch = sweep_rows(&[(1, 4)]);
    let rows = PlanInputs::full(&batch, &table).with_group(group);
    let sweep = canary.sweep_table_rows(&rows, TailKv::NONE).unwrap();
    assert!(sweep.is_clean(), "{sweep}");
    // The window's two slots, translated; the first chained to its real predecessor.
    let triples: Vec<_> = canary
        .plans()
        .0
        .entries()
        .map(|e| (e.slot, e.expected_position, e.prev_slot))
        .collect();
    assert_eq!(triples, [(150, 2, 151), (149, 3, 150)]);
    let mut walked = SweepEntries::new();
    walked.push_table_row(&table, 1, 4).unwrap();
    walked.through_lut(&lut).unwrap();
    assert_eq!(&walked[2..], canary.plans().0.entries().collect::<Vec<_>>());
}

#[test]
fn head_findings_are_the_head_part_of_the_final_report() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    for tag in [LaunchTag::HeadKFull, LaunchTag::HeadVFull] {
        let buf = canary.buffer_mut(tag).unwrap();
        let slot = buf.slot(9).unwrap();
        buf.set_slot(
            9,
            CanarySlot {
                position: 7,
                ..slot
            },
        )
        .unwrap();
    }
    engine.k[8 * STRIP] ^= 1; // found by TAIL_K only
    let table = engine.table.clone();
    let batch = Batch::from_columns([1], [3], [1]);
    let inputs = inputs(&canary, &[(11, 103, 3)]);
    let step = canary
        .plan(&PlanInputs::full(&batch, &table))
        .unwrap()
        .verify_head()
        .unwrap();
    let findings = step.head_findings().unwrap();
    assert_eq!(findings.recorded(), 4, "{findings:?}");
    assert!(findings.plan_overflow.is_none());
    assert!(matches!(
        findings.status(),
        StepStatus::Violations { recorded: 4 }
    ));
    let step = step.write(&inputs).unwrap();
    engine.forward(&[(11, 103, 3)]);
    let report = step.verify_tail(engine.tail_kv()).unwrap();
    let head = report.violations.iter().take_while(|v| {
        matches!(
            v.launch_tag(),
            Some(LaunchTag::HeadKFull | LaunchTag::HeadVFull)
        )
    });
    assert_eq!(head.copied().collect::<Vec<_>>(), findings.violations);
    // Counted once: the final report's rows, the head's among them.
    assert_eq!(report.recorded(), 4 + 1, "{report}");
    assert_eq!(canary.total_violations(), 5);
}

#[test]
fn head_findings_of_an_overflowed_plan_are_unverified() {
    let engine = Engine::new();
    let mut canary: Canary<Cap<2>, Cap<4>, Cap<16>, Cap<64>, Cap<16>> =
        Canary::full(Shape::new(), Cap, Cap);
    let batch = Batch::from_columns([1], [3], [1]);
    let step = canary
        .plan(&PlanInputs::full(&batch, &engine.table))
        .unwrap()
        .verify_head()
        .unwrap();
    let findings = step.head_findings().unwrap();
    assert_eq!(
        findings.plan_overflow,
        Some(PlanOverflow {
            needed: Some(3),
            capacity: 2
        })
    );
    assert!(!findings.is_clean());
    assert!(
        findings.to_string().contains("needed 3 verify entries"),
        "{findings}"
    );
}

/// A K-only canary of the toy engine's shape.
type KOnlySmall = Canary<Cap<64>, Cap<4>, Cap<16>, Cap<64>, Cap<16>, KOnly<Full>>;

#[test]
fn a_k_only_canary_equals_the_raw_ops_of_its_k_tags() {
    use crate::cpu;
    let mut engine = Engine::new();
    let mut canary: KOnlySmall = Canary::k_only(Spec::new(), Cap, Cap);
    assert_eq!(canary.tags(), [LaunchTag::HeadKFull, LaunchTag::TailKFull]);
    assert!(canary.buffer(LaunchTag::HeadVFull).is_none());
    assert!(canary.buffer(LaunchTag::SweepVFull).is_none());
    assert!(canary.counters(LaunchTag::TailVFull).is_none());

    // The same launches by hand: plan, HEAD_K verify + write, TAIL_K verify + write.
    let shape = Spec::new();
    let (mut vp, mut wp) = (VerifyPlan::new(), WritePlan::new());
    let (mut head, mut tail) = (
        CanaryBuffer::<Cap<64>>::new(),
        CanaryBuffer::<Cap<64>>::new(),
    );
    let mut ring = ViolationRing::<Cap<16>>::new();
    let (mut head_c, mut tail_c) = (HealthCounters::new(), HealthCounters::new());

    engine.k[8 * STRIP..12 * STRIP].fill(0xAA); // slot 9 changes after step 1
    let steps: [(Batch, Vec<Token>); 3] = [
        (
            Batch::from_columns([1], [0], [3]),
            vec![(8, 100, 0), (9, 101, 1), (10, 102, 2)],
        ),
        (Batch::from_columns([1], [3], [1]), vec![(11, 103, 3)]),
        (Batch::from_columns([1], [4], [1]), vec![(12, 104, 4)]),
    ];
    for (n, (batch, tokens)) in steps.iter().enumerate() {
        if n == 2 {
            engine.k[9 * STRIP + 2] ^= 4;
        }
        let table = engine.table.clone();
        let inputs = inputs(&canary, tokens);
        let step = canary
            .plan(&PlanInputs::full(batch, &table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&inputs)
            .unwrap();
        engine.forward(tokens);
        let k_sources = engine.tail_kv().k;
        let report = step.verify_tail(k_sources).unwrap();

        let plan = cpu::plan(&shape, &PlanInputs::full(batch, &table), &mut vp, &mut wp).unwrap();
        ring.clear();
        let head_s = LaunchSettings::new(LaunchTag::HeadKFull);
        let tail_s = LaunchSettings::new(LaunchTag::TailKFull).with_real_kv(k_sources);
        let off = TokenCheckOff;
        let hv = cpu::verify(&shape, &vp, off, &head_s, &head, &mut ring, &mut head_c).unwrap();
        let hw = cpu::write(
            &shape,
            &wp,
            &inputs,
            &head_s,
            &mut head,
            &mut ring,
            &mut head_c,
        )
        .unwrap();
        let tv = cpu::verify(&shape, &vp, off, &tail_s, &tail, &mut ring, &mut tail_c).unwrap();
        let tw = cpu::write(
            &shape,
            &wp,
            &inputs,
            &tail_s,
            &mut tail,
            &mut ring,
            &mut tail_c,
        )
        .unwrap();

        assert_eq!(report.plan, plan);
        assert_eq!((report.head_verify.k, report.head_write.k), (hv, hw));
        assert_eq!((report.tail_verify.k, report.tail_write.k), (tv, tw));
        assert_eq!(
            report.head_verify.v,
            VerifySummary::default(),
            "no V launch"
        );
        assert_eq!(report.tail_write.v, WriteSummary::default(), "no V launch");
        assert_eq!(
            (&report.head_counters.k, &report.tail_counters.k),
            (&head_c, &tail_c)
        );
        assert_eq!(report.tail_counters.v, HealthCounters::new());
        assert_eq!(report.violations, ring.violations().collect::<Vec<_>>());
        assert_eq!(canary.buffer(LaunchTag::HeadKFull).unwrap(), &head);
        assert_eq!(canary.buffer(LaunchTag::TailKFull).unwrap(), &tail);
    }
    assert_eq!(
        canary.total_violations(),
        1,
        "TAIL_K finds slot 9 in step 3"
    );

    // A K-only sweep: SWEEP_K_FULL over the tail K buffer, as a raw verify of that tag.
    let entries = row_1_entries();
    let k_sources = engine.tail_kv().k;
    let sweep = canary.sweep(&entries, k_sources).unwrap();
    vp.set_entries(&entries).unwrap();
    ring.clear();
    let mut sweep_c = HealthCounters::new();
    let s = LaunchSettings::new(LaunchTag::SweepKFull).with_real_kv(k_sources);
    let sv = cpu::verify(
        &shape,
        &vp,
        TokenCheckOff,
        &s,
        &tail,
        &mut ring,
        &mut sweep_c,
    )
    .unwrap();
    assert_eq!(
        (sweep.verify.k, sweep.verify.v),
        (sv, VerifySummary::default())
    );
    assert_eq!(sweep.violations, ring.violations().collect::<Vec<_>>());
    assert_eq!(tags(&sweep.violations), [LaunchTag::SweepKFull]);
    assert_eq!(sweep.counters.k, sweep_c);
}

#[test]
fn a_k_only_swa_canary_launches_the_swa_k_tags_only() {
    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).unwrap();
    let lut: Vec<i64> = (0..33).map(|x| x + 100).collect(); // full slot x -> SWA slot x + 100
    let mut canary: Canary<_, _, _, _, _, KOnly<SwaGroup>> =
        Canary::k_only(Spec::new(), Cap::<160>, Cap::<16>);
    assert_eq!(canary.tags(), [LaunchTag::HeadKSwa, LaunchTag::TailKSwa]);
    let run =
        |canary: &mut Canary<_, _, _, _, _, KOnly<SwaGroup>>, batch: &Batch, tokens: &[Token]| {
            let inputs = inputs(canary, tokens);
            let group = Swa::window(2).with_lut(&lut);
            let plan_inputs = PlanInputs::full(batch, &table).with_group(group);
            let step = canary
                .plan(&plan_inputs)
                .unwrap()
                .verify_head()
                .unwrap()
                .write(&inputs)
                .unwrap();
            step.verify_tail(RealKv::NONE).unwrap()
        };
    let prefill: Vec<Token> = (0..5).map(|p| (108 + p, 100 + p, p)).collect();
    let report = run(&mut canary, &Batch::from_columns([1], [0], [5]), &prefill);
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.entries_written(), 2 * 5, "head K and tail K only");
    let report = run(
        &mut canary,
        &Batch::from_columns([1], [5], [1]),
        &[(113, 105, 5)],
    );
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.entries_checked(), 2 * 2, "the window, K only");
    let buf = canary.buffer_mut(LaunchTag::TailKSwa).unwrap();
    let slot = buf.slot(110).unwrap();
    buf.set_slot(
        110,
        CanarySlot {
            position: 9,
            ..slot
        },
    )
    .unwrap();
    // Outside the next step's window: only a sweep over the cached slots finds it.
    let report = run(
        &mut canary,
        &Batch::from_columns([1], [6], [1]),
        &[(114, 106, 6)],
    );
    assert!(report.is_clean(), "{report}");
    let entries: Vec<VerifyEntry> = (0..7)
        .map(|p| VerifyEntry {
            slot: 108 + p,
            expected_token: 0,
            expected_position: p,
            prev_slot: if p == 0 { -1 } else { 107 + p },
        })
        .collect();
    let sweep = canary.sweep(&entries, RealKv::NONE).unwrap();
    assert_eq!(tags(&sweep.violations), [LaunchTag::SweepKSwa; 2]);
    let found: Vec<_> = sweep
        .violations
        .iter()
        .map(|v| (v.slot, v.reasons))
        .collect();
    assert_eq!(
        found,
        [
            (110, FailReason::VERIFY_POSITION_MISMATCH),
            (111, FailReason::VERIFY_CHAIN_HASH_MISMATCH)
        ],
        "the record, then its successor's chain link"
    );
    assert_eq!(sweep.entries_checked(), 7);
    // The same entries from the table row, translated through the LUT by the builder.
    let mut built = SweepEntries::new();
    built.push_table_row(&table, 1, 7).unwrap();
    built.through_lut(&lut).unwrap();
    let slot_chain = |e: &[VerifyEntry]| -> Vec<_> {
        e.iter()
            .map(|e| (e.slot, e.expected_position, e.prev_slot))
            .collect()
    };
    assert_eq!(slot_chain(&built), slot_chain(&entries));
    let rebuilt = canary.sweep(&built, RealKv::NONE).unwrap();
    assert_eq!(
        (rebuilt.entries_checked(), rebuilt.violations),
        (7, sweep.violations)
    );
    assert!(canary.buffer(LaunchTag::HeadVSwa).is_none());
    assert!(canary.counters(LaunchTag::SweepVSwa).is_none());
}

#[test]
fn a_sweep_entry_outside_the_canary_is_an_error_naming_it() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let mut entries = row_1_entries();
    entries[1].slot = 999; // the canary has 64 slots
    let err = canary.sweep(&entries, engine.tail_kv()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("kv-canary:") && message.contains("999"),
        "{message}"
    );
    assert_eq!((canary.sweeps(), canary.total_violations()), (0, 0));
}

#[test]
fn a_sweep_built_from_finished_rows_is_clean_until_one_cached_slot_changes() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    for pos in 3..5 {
        assert!(decode(&mut engine, &mut canary, pos).is_clean());
    }
    let batch = Batch::from_columns([2], [0], [2]);
    let report = engine.step(&mut canary, &batch, &[(16, 200, 0), (17, 201, 1)]);
    assert!(report.is_clean(), "{report}");
    // Both requests finish: row 1 caches 5 tokens (slots 8..=12), row 2 caches 2 (16, 17).
    let mut entries = SweepEntries::with_capacity(64).unwrap();
    let walk = |entries: &mut SweepEntries, table: &ReqToToken| {
        entries.clear();
        entries.push_table_row(table, 1, 5).unwrap();
        entries.push_table_row(table, 2, 2).unwrap();
    };
    walk(&mut entries, &engine.table);
    let clean = canary.sweep(&entries, engine.tail_kv()).unwrap();
    assert!(clean.is_clean(), "{clean}");
    assert_eq!((clean.entries, clean.entries_checked()), (7, 2 * 7));

    // A stray write into the idle K bytes of slot 16 (the first of its chain): that slot alone.
    engine.k[16 * STRIP + 3] ^= 0x40;
    walk(&mut entries, &engine.table);
    let sweep = canary.sweep(&entries, engine.tail_kv()).unwrap();
    let found: Vec<_> = sweep
        .violations
        .iter()
        .map(|v| (v.launch_tag().unwrap(), v.slot, v.reasons))
        .collect();
    assert_eq!(
        found,
        [(
            LaunchTag::SweepKFull,
            16,
            FailReason::VERIFY_REAL_KV_HASH_MISMATCH
        )]
    );
    engine.k[16 * STRIP + 3] ^= 0x40;

    // A corrupted V tail record of slot 12 (the last of its chain, so no successor's link
    // breaks): that slot alone.
    let buf = canary.buffer_mut(LaunchTag::TailVFull).unwrap();
    let slot = buf.slot(12).unwrap();
    buf.set_slot(
        12,
        CanarySlot {
            position: 9,
            ..slot
        },
    )
    .unwrap();
    walk(&mut entries, &engine.table);
    let sweep = canary.sweep(&entries, engine.tail_kv()).unwrap();
    let found: Vec<_> = sweep
        .violations
        .iter()
        .map(|v| (v.launch_tag().unwrap(), v.slot, v.reasons))
        .collect();
    assert_eq!(
        found,
        [(
            LaunchTag::SweepVFull,
            12,
            FailReason::VERIFY_POSITION_MISMATCH
        )]
    );
    assert_eq!((canary.sweeps(), canary.total_violations()), (3, 2));
}

#[test]
fn a_slot_the_lut_maps_to_minus_one_makes_the_sweep_an_error_naming_it() {
    let (mut engine, mut canary) = (Engine::new(), canary());
    prefill(&mut engine, &mut canary);
    let mut entries = SweepEntries::new();
    entries.push_table_row(&engine.table, 1, 3).unwrap();
    let mut lut: Vec<i64> = (0..33).collect();
    lut[9] = -1; // slot 9 is not resident in the SWA pool
    entries.through_lut(&lut).unwrap();
    assert_eq!(
        (entries[1].slot, entries[2].prev_slot),
        (-1, -1),
        "kept as translated"
    );
    let err = canary.sweep(&entries, engine.tail_kv()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SlotOutOfRange {
                index: 1,
                slot: -1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(canary.sweeps(), 0);
}
