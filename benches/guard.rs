//! What the guard costs a step on the CPU backend (issue 33): a decode step of 64 requests with
//! 512 cached tokens each (32 Ki verify entries a launch) through the step API, alone
//! (`step`, clean chains), with the guard judging its report (`step_guarded`: `SlotRows::new` and
//! `Guard::judge`, per-request verdicts), and a sweep on a cadence of 256 entries a step over an
//! idle cache of 64 Ki slots (`sweep_256`), and the judgement of a report with 64 new
//! violations (`judge_64_violations`: the records' cost, with or without the `serde`, `tracing`
//! and `metrics` features). Without a `Guard` or a `SweepCadence` an engine runs
//! none of it: the canary's step is the same code either way.
//!
//! Run with `cargo bench --bench guard`; see docs/benchmarks.md.

mod common;

use common::Timing;
use criterion::{criterion_group, criterion_main, Criterion};
use kv_canary::guard::{Action, CachedPrefixes, CachedRun, Guard, Policy, SweepCadence, Watchdog};
use kv_canary::step::{Canary, SlotRows, TailKv};
use kv_canary::{Batch, Cap, PlanInputs, ReqToToken, Shape, WriteInputs};
use std::hint::black_box;
use std::time::Duration;

const BS: usize = 64;
const PREFIX: usize = 512;
const SLOTS: usize = 1 << 17;
type C = Canary<Cap<{ BS * PREFIX }>, Cap<BS>, Cap<BS>, Cap<SLOTS>, Cap<64>>;

const STEP: Timing = Timing {
    samples: 30,
    warm_up: Duration::from_secs(1),
    measure: Duration::from_secs(3),
    flat: false,
};

/// Idle cached runs: `runs` chains of `len` slots from `first`.
struct Idle {
    runs: usize,
    len: usize,
    first: i64,
    slots: Vec<i64>,
}

impl CachedPrefixes for Idle {
    fn idle_runs(&self, visit: &mut dyn FnMut(CachedRun<'_>)) {
        for r in 0..self.runs {
            visit(CachedRun {
                slots: &self.slots[r * self.len..(r + 1) * self.len],
                first_position: 0,
                predecessor: None,
            });
        }
        let _ = self.first;
    }
}

fn benches(c: &mut Criterion) {
    // Requests in pool rows 1..=BS, their prefixes in slots row * (PREFIX + 8) + position.
    let width = PREFIX + 8;
    let cells: Vec<i32> = (0..(BS + 1) * width).map(|i| i as i32).collect();
    let table = ReqToToken::from_vec(BS + 1, width, cells).expect("table");
    let mut canary: C = Canary::full(Shape::new(), Cap, Cap);
    // Every request decodes its prefix first, a token a step, so the measured step's chains
    // are clean (the engine's steady state).
    let decode = |prefix: usize| {
        let batch = Batch::try_from_columns(
            (1..=BS as i64).collect(),
            vec![prefix as i64; BS],
            vec![1; BS],
        )
        .expect("batch");
        let mut inputs: WriteInputs<Cap<BS>> = WriteInputs::new();
        let p = inputs.parts_mut();
        for r in 0..BS {
            let slot = ((r + 1) * width + prefix) as i64;
            (p.out_cache_loc[r], p.input_ids[r], p.positions[r]) = (slot, 7, prefix as i64);
        }
        (batch, inputs)
    };
    for prefix in 0..PREFIX {
        let (batch, inputs) = decode(prefix);
        let report = canary
            .plan(&PlanInputs::full(&batch, &table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&inputs))
            .and_then(|s| s.verify_tail(TailKv::NONE))
            .expect("prefill");
        assert!(report.is_clean(), "{report}");
    }
    let (batch, inputs) = decode(PREFIX);
    let plan_inputs = PlanInputs::full(&batch, &table);
    let requests: Vec<Option<u64>> = (0..BS as u64).map(Some).collect();

    let mut group = c.benchmark_group("guard_decode_bs64_prefix512");
    STEP.apply(&mut group);
    group.bench_function("step", |b| {
        b.iter(|| {
            let report = canary
                .plan(black_box(&plan_inputs))
                .and_then(|s| s.verify_head())
                .and_then(|s| s.write(&inputs))
                .and_then(|s| s.verify_tail(TailKv::NONE))
                .expect("step");
            black_box(report);
        })
    });
    let mut guard = Guard::new(Policy {
        violations: Action::PerRequest,
        unverified: Action::Log,
        ..Policy::default()
    });
    group.bench_function("step_guarded", |b| {
        b.iter(|| {
            let report = canary
                .plan(black_box(&plan_inputs))
                .and_then(|s| s.verify_head())
                .and_then(|s| s.write(&inputs))
                .and_then(|s| s.verify_tail(TailKv::NONE))
                .expect("step");
            let rows = SlotRows::new(&plan_inputs, inputs.out_cache_loc()).expect("rows");
            black_box(guard.judge(&report, &rows, &requests).expect("judged"));
        })
    });
    // The watchdog at its worst: a check every step (SGLang's default checks every 100 steps
    // after 100, so a step pays this a hundredth of the time; off, an engine has no watchdog).
    let mut watchdog = Watchdog::new(1, 0);
    watchdog.mark_initialised(&mut canary);
    group.bench_function("watchdog_check", |b| {
        b.iter(|| black_box(watchdog.after_step(black_box(&canary))))
    });
    let idle = Idle {
        runs: 256,
        len: 256,
        first: 1,
        slots: (1..=(256 * 256) as i64).collect(),
    };
    let mut cadence = SweepCadence::new(256);
    group.bench_function("sweep_256", |b| {
        b.iter(|| {
            let entries = cadence.next_entries(&idle).expect("entries").as_slice();
            black_box(canary.sweep(entries, TailKv::NONE).expect("sweep"));
        })
    });
    // A step whose report has 64 new verify violations (one a request, at its first cached
    // slot): the guard builds the slot-to-row map, judges each, and makes a record each
    // (traced and counted when the `tracing` / `metrics` features are on: run the bench with
    // and without `--features serde,tracing,metrics` to see what they add).
    let mut rows_report = Rows(Vec::new());
    for r in 0..BS {
        let mut fields = [0i64; 8];
        (fields[0], fields[1], fields[7]) = (
            kv_canary::LaunchTag::TailKFull as i64,
            ((r + 1) * width) as i64,
            kv_canary::FailReason::VERIFY_REAL_KV_HASH_MISMATCH.bits(),
        );
        rows_report.0.push(kv_canary::Violation::from_row(fields));
    }
    let template = guard.clone();
    group.bench_function("judge_64_violations", |b| {
        b.iter_batched(
            || template.clone(),
            |mut g| {
                let rows = SlotRows::new(&plan_inputs, inputs.out_cache_loc()).expect("rows");
                black_box(g.judge(&rows_report, &rows, &requests).expect("judged"))
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// A report of given violation rows (what a step with violations hands the guard).
struct Rows(Vec<kv_canary::Violation>);

impl std::fmt::Display for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} violation rows", self.0.len())
    }
}

impl kv_canary::step::Findings for Rows {
    fn violations(&self) -> &[kv_canary::Violation] {
        &self.0
    }
    fn dropped(&self) -> u64 {
        0
    }
    fn unverified(&self) -> kv_canary::step::Unverified {
        kv_canary::step::Unverified::default()
    }
}

criterion_group!(guard, benches);
criterion_main!(guard);
