//! The guard-records tests' scenario (`tests/guard_records.rs`, `tests/guard_tracing.rs`): a
//! stray write judged step by step, and the guard that judges it.

use kv_canary::guard::{Action, Guard, Judgement, Policy};
use kv_canary::step::{Canary, SlotRows, TailKv};
use kv_canary::{Batch, BatchRow, Cap, PlanInputs, ReqToToken, Shape, WriteInputsView};

type C = Canary<Cap<32>, Cap<2>, Cap<8>, Cap<16>, Cap<16>>;

/// Request "a" prefills slots 1, 2, 3; "c" prefills 5, 6, then decodes into "a"'s slot 2; "a"
/// decodes and its verify reports slot 2. Returns every step's judgement.
pub fn stray_write(guard: &mut Guard<&'static str>) -> Vec<Judgement<&'static str>> {
    let table = ReqToToken::from_vec(3, 4, vec![0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let mut canary: C = Canary::full(Shape::new(), Cap::<16>, Cap::<16>);
    let steps: [(i64, i64, i64, &str, &[i64]); 4] = [
        (1, 0, 3, "a", &[1, 2, 3]),
        (2, 0, 2, "c", &[5, 6]),
        (2, 2, 1, "c", &[2]),
        (1, 3, 1, "a", &[4]),
    ];
    steps
        .iter()
        .map(|&(rp, cached, new, who, slots)| {
            let batch: Batch = [BatchRow {
                req_pool_index: rp,
                prefix_len: cached,
                extend_len: new,
            }]
            .into_iter()
            .collect();
            let mut loc = slots.to_vec();
            loc.resize(8, -1);
            let ids = vec![9i64; 8];
            let positions: Vec<i64> = (cached..cached + 8).collect();
            let inputs = PlanInputs::full(&batch, &table);
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
            guard.judge(&report, &rows, &[Some(who)]).unwrap()
        })
        .collect()
}

/// A guard that logs violations and writes a stats record every 2 steps.
pub fn guard() -> Guard<&'static str> {
    Guard::new(Policy {
        violations: Action::Log,
        ..Policy::default()
    })
    .with_stats_every(2)
}
