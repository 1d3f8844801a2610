//! `guard::Guard::judge` and `guard::SweepCadence` on random input: reports of random violation
//! rows (verify and write bits, slots in and out of the step, i64 extremes), the slot rows of a
//! random batch, a request list shorter or longer than the batch, every policy. Checked per
//! case: no panic; verdicts name only the requests given, each once, `Keep` unless per-request;
//! a second judgement of the same report judges nothing new; under `Fail` an error exactly when
//! there is something new, prefixed. For the cadence: at most `budget` entries a step, each run
//! chained as the walk gives it, one pass covering every idle slot once.

use crate::gen::{ensure, error_label, val};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::guard::{
    Action, CachedPrefixes, CachedRun, Guard, Policy, SweepCadence, Verdict as V,
};
use kv_canary::step::{Findings, SlotRows, Unverified};
use kv_canary::{Batch, BatchRow, FailReason, PlanInputs, ReqToToken, Violation};
use std::collections::HashSet;
use std::fmt;

/// A report of given rows.
struct Rows(Vec<Violation>, u64);

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rows", self.0.len())
    }
}

impl Findings for Rows {
    fn violations(&self) -> &[Violation] {
        &self.0
    }
    fn dropped(&self) -> u64 {
        self.1
    }
    fn unverified(&self) -> Unverified {
        Unverified::default()
    }
}

fn action(u: &mut Unstructured<'_>) -> Result<Action> {
    Ok(*u.choose(&[Action::Off, Action::Log, Action::PerRequest, Action::Fail])?)
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    if u.ratio(1, 3)? {
        return cadence(u);
    }
    let table = ReqToToken::from_vec(4, 6, (0..24).collect()).expect("table");
    let bs = u.int_in_range(0..=4)?;
    let batch: Batch = (0..bs)
        .map(|_| -> Result<BatchRow> {
            Ok(BatchRow {
                req_pool_index: u.int_in_range(0..=3)?,
                prefix_len: u.int_in_range(0..=6)?,
                extend_len: u.int_in_range(0..=2)?,
            })
        })
        .collect::<Result<_>>()?;
    let loc: Vec<i64> = (0..8).map(|_| val(u, -1, 30)).collect::<Result<_>>()?;
    let rows = match SlotRows::new(&PlanInputs::full(&batch, &table), &loc) {
        Ok(rows) => rows,
        Err(e) => return Ok(error_label("slot rows", &e)),
    };
    let n = u.int_in_range(0..=6)?;
    let mut report = Vec::new();
    for _ in 0..n {
        let mut fields = [0i64; 8];
        fields[0] = u.int_in_range(-1..=12)?;
        fields[1] = val(u, -1, 30)?;
        fields[2] = val(u, 0, 8)?;
        let bits = [
            FailReason::VERIFY_CHAIN_HASH_MISMATCH,
            FailReason::VERIFY_REAL_KV_HASH_MISMATCH,
            FailReason::WRITE_TOKEN_MISMATCH,
            FailReason::WRITE_POSITION_MISMATCH,
        ];
        fields[7] = u.choose(&bits)?.bits();
        report.push(Violation::from_row(fields));
    }
    let requests: Vec<Option<u32>> = (0..u.int_in_range(0..=5)?)
        .map(|i| -> Result<Option<u32>> { Ok(u.ratio(4, 5)?.then_some(i as u32)) })
        .collect::<Result<_>>()?;
    let policy = Policy {
        violations: action(u)?,
        unverified: action(u)?,
        watchdog: Action::Off,
    };
    Ok(judge_case(policy, &rows, Rows(report, 0), &requests))
}

/// The checks of one judgement (see the module docs).
fn judge_case(policy: Policy, rows: &SlotRows, report: Rows, requests: &[Option<u32>]) -> Verdict {
    let mut guard = Guard::new(policy);
    let first = guard.judge(&report, rows, requests);
    let new: HashSet<_> = report
        .0
        .iter()
        .map(|v| (v.kernel_kind, v.slot, v.position, v.reasons))
        .collect();
    match (&first, policy.violations) {
        (Err(e), Action::Fail) => {
            ensure(!new.is_empty(), || format!("failed with nothing new: {e}"))?;
            return error_label("guard", e);
        }
        (Err(e), _) => return Err(format!("an error under {policy:?}: {e}")),
        (Ok(_), Action::Fail) => {
            ensure(new.is_empty(), || "Fail with new violations passed".into())?
        }
        (Ok(_), _) => {}
    }
    let j = first.expect("checked");
    let named: HashSet<u32> = requests.iter().flatten().copied().collect();
    let mut seen = HashSet::new();
    for v in &j.verdicts {
        ensure(named.contains(&v.request), || {
            format!("a verdict on {} not given", v.request)
        })?;
        ensure(seen.insert(v.request), || {
            format!("request {} judged twice", v.request)
        })?;
        ensure(
            policy.violations == Action::PerRequest || v.verdict == V::Keep,
            || format!("{:?} under {policy:?}", v.verdict),
        )?;
    }
    ensure(
        policy.violations != Action::Off || (j.new_violations.is_empty() && j.verdicts.is_empty()),
        || "findings under Off".into(),
    )?;
    let again = guard
        .judge(&report, rows, requests)
        .map_err(|e| format!("again: {e}"))?;
    ensure(
        again.new_violations.is_empty() && again.verdicts.is_empty(),
        || format!("judged twice: {again:?}"),
    )?;
    Ok(format!(
        "guard {:?} {}",
        policy.violations,
        j.verdicts.len().min(2)
    ))
}

/// Idle runs of distinct slots.
struct Runs(Vec<(Vec<i64>, usize, Option<i64>)>);

impl CachedPrefixes for Runs {
    fn idle_runs(&self, visit: &mut dyn FnMut(CachedRun<'_>)) {
        for (slots, first_position, predecessor) in &self.0 {
            visit(CachedRun {
                slots,
                first_position: *first_position,
                predecessor: *predecessor,
            });
        }
    }
}

fn cadence(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let mut next = 1i64;
    let runs = Runs(
        (0..u.int_in_range(0..=5)?)
            .map(|_| -> Result<_> {
                let len = u.int_in_range(0..=7)?;
                let slots: Vec<i64> = (0..len).map(|k| next + k as i64).collect();
                next += len as i64;
                let first = u.int_in_range(0..=3)?;
                let predecessor = if first == 0 {
                    None
                } else {
                    Some(100 + first as i64)
                };
                Ok((slots, first, predecessor))
            })
            .collect::<Result<_>>()?,
    );
    let total = (next - 1) as usize;
    let budget = u.int_in_range(1..=9)?;
    Ok(cadence_case(&runs, total, budget))
}

/// The checks of one cadence pass (see the module docs).
fn cadence_case(runs: &Runs, total: usize, budget: usize) -> Verdict {
    let mut cadence = SweepCadence::new(budget);
    let mut covered = Vec::new();
    for _ in 0..total.div_ceil(budget).max(1) {
        let entries = cadence
            .next_entries(runs)
            .map_err(|e| format!("cadence: {e}"))?;
        ensure(entries.as_slice().len() <= budget, || {
            "over the budget".into()
        })?;
        covered.extend(
            entries
                .as_slice()
                .iter()
                .map(|e| (e.slot, e.expected_position, e.prev_slot)),
        );
    }
    covered.sort_unstable();
    let mut want = Vec::new();
    for (slots, first, predecessor) in &runs.0 {
        for (i, &s) in slots.iter().enumerate() {
            let prev = if i == 0 {
                predecessor.unwrap_or(-1)
            } else {
                slots[i - 1]
            };
            want.push((s, (first + i) as i64, prev));
        }
    }
    want.sort_unstable();
    ensure(covered == want, || {
        format!("one pass covered {covered:?}, not {want:?}")
    })?;
    ensure(total == 0 || cadence.passes() == 1, || {
        "not one pass".into()
    })?;
    Ok("cadence one pass".into())
}
