//! `Canary::sweep` on the CPU: a FULL canary after a few random steps (tail buffers and KV bytes
//! tampered with between them) sweeps random entries (chains of cached slots, random ones, slots
//! out of range, more entries than the verify capacity). The sweep must equal raw `cpu::verify`
//! launches of `SWEEP_K_FULL` and `SWEEP_V_FULL` over the same entries and the tail buffers (the
//! launches the CPU sweep is documented to make); an overflowing sweep is unverified with both
//! numbers; an error changes no buffer, counter or count.

use crate::gen::{cap, ensure, error_label, val};
use crate::toy::{self, ROWS, WIDTH};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::step::{Canary, KvPair, PlanOverflow, TailKv};
use kv_canary::{
    cpu, Error, HealthCounters, LaunchSettings, LaunchTag, PlanInputs, ReqToToken, Shape,
    TokenCheckOff, UncheckedCapacity, VerifyEntry, VerifyPlan, ViolationRing,
};

type Cap = UncheckedCapacity;

/// Sweep entries: a chain of a table row's cached slots (sometimes one entry tampered with) or
/// random values; `n` of them.
fn entries(
    u: &mut Unstructured<'_>,
    table: &ReqToToken,
    n: usize,
    slots: usize,
) -> Result<Vec<VerifyEntry>> {
    if u.ratio(1, 2)? {
        let r = u.int_in_range(0..=ROWS - 1)?;
        let mut out: Vec<VerifyEntry> = (0..n)
            .map(|p| {
                let slot = |p: usize| table.get(r, p % WIDTH).map_or(-1, i64::from);
                VerifyEntry {
                    slot: slot(p),
                    expected_token: 0,
                    expected_position: p as i64,
                    prev_slot: if p == 0 { -1 } else { slot(p - 1) },
                }
            })
            .collect();
        if !out.is_empty() && u.ratio(1, 4)? {
            let i = u.int_in_range(0..=out.len() - 1)?;
            out[i].slot = if u.ratio(1, 8)? {
                val(u, -1, slots as i64)?
            } else {
                u.int_in_range(1..=slots as i64 - 1)?
            };
        }
        Ok(out)
    } else {
        (0..n)
            .map(|_| {
                // Out of range one time in 64 per entry (an error of the whole sweep).
                let mut slot = || -> Result<i64> {
                    Ok(if u.ratio(1, 64)? {
                        val(u, 0, slots as i64)?
                    } else {
                        u.int_in_range(0..=slots as i64 - 1)?
                    })
                };
                let (slot, prev_slot) = (slot()?, slot()?);
                Ok(VerifyEntry {
                    slot,
                    expected_token: val(u, -1, 9)?,
                    expected_position: val(u, 0, 8)?,
                    prev_slot: if prev_slot == 0 { -1 } else { prev_slot },
                })
            })
            .collect()
    }
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let v = u.int_in_range(1..=16)?;
    let w = u.int_in_range(1..=4)?;
    let e = u.int_in_range(1..=12)?;
    let shape = Shape::from_capacities(
        cap("verify_capacity", v),
        cap("write_req_capacity", w),
        cap("write_entry_capacity", e),
    );
    let slots = u.int_in_range(2..=40)?;
    let ring_rows = u.int_in_range(1..=4)?;
    let table = toy::table(slots);
    let mut canary =
        Canary::try_full(shape, cap("slots", slots), cap("ring", ring_rows)).expect("small");
    let mode = toy::mode(u)?;
    let mut kv = [toy::kv_bytes(u, slots)?, toy::kv_bytes(u, slots)?];
    let mut lens = [0i64; ROWS];
    let mut step_errors = 0u64;

    // A few random steps: the canary state the sweeps see.
    for _ in 0..u.int_in_range(0..=4)? {
        let s = toy::step(u, &table, w, e, slots, &mut lens)?;
        let batch =
            kv_canary::Batch::try_from_columns(s.rows, s.prefixes, s.extends).expect("one length");
        let mut inputs = canary.try_write_inputs().expect("small");
        {
            let p = inputs.parts_mut();
            p.out_cache_loc.fill(-1);
            for (i, &(slot, id, pos)) in s.tokens.iter().enumerate() {
                (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (slot, id, pos);
            }
        }
        let tail = TailKv::new(toy::source(&kv[0], mode), toy::source(&kv[1], mode));
        let result = canary
            .plan(&PlanInputs::full(&batch, &table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&inputs))
            .and_then(|s| s.verify_tail(tail));
        if let Err(err) = result {
            if let Err(message) = error_label("sweep: step", &err) {
                return Ok(Err(message));
            }
            step_errors += 1;
        }
        if u.ratio(1, 4)? {
            let half = u.int_in_range(0..=1)?;
            toy::flip(u, &mut kv[half])?;
        }
        if u.ratio(1, 4)? {
            let tag = *u.choose(&[LaunchTag::TailKFull, LaunchTag::TailVFull])?;
            let buf = canary.buffer_mut(tag).expect("a FULL canary's tail buffer");
            toy::flip(u, buf.as_bytes_mut())?;
        }
    }

    let mut labels = Vec::new();
    for _ in 0..u.int_in_range(1..=3)? {
        let n = if u.ratio(1, 6)? {
            u.int_in_range(v + 1..=v + 3)?
        } else {
            u.int_in_range(0..=v)?
        };
        let entries = entries(u, &table, n, slots)?;
        let tail_k = canary.buffer(LaunchTag::TailKFull).expect("tail K").clone();
        let tail_v = canary.buffer(LaunchTag::TailVFull).expect("tail V").clone();
        let counters_before = KvPair {
            k: canary
                .counters(LaunchTag::SweepKFull)
                .expect("sweep K")
                .clone(),
            v: canary
                .counters(LaunchTag::SweepVFull)
                .expect("sweep V")
                .clone(),
        };
        let (sweeps, total) = (canary.sweeps(), canary.total_violations());

        // The raw launches: the entries loaded as the CPU sweep loads them, a fresh ring.
        let mut plan = VerifyPlan::try_with_capacity(cap("verify_capacity", v)).expect("small");
        if n <= v {
            plan.set_entries(&entries).expect("n <= capacity");
        } else {
            let p = plan.parts_mut();
            (*p.num_valid, *p.enable) = (0, 0);
        }
        let mut ring: ViolationRing<Cap> =
            ViolationRing::try_with_capacity(cap("ring", ring_rows)).expect("small");
        let mut counters: KvPair<HealthCounters> = counters_before.clone();
        let short_kv = kv.iter().any(|half| half.len() < slots * toy::STRIP);
        let sk = LaunchSettings::new(LaunchTag::SweepKFull).with_real_kv(toy::source(&kv[0], mode));
        let sv = LaunchSettings::new(LaunchTag::SweepVFull).with_real_kv(toy::source(&kv[1], mode));
        let raw = cpu::verify(
            &shape,
            &plan,
            TokenCheckOff,
            &sk,
            &tail_k,
            &mut ring,
            &mut counters.k,
        )
        .and_then(|k| {
            cpu::verify(
                &shape,
                &plan,
                TokenCheckOff,
                &sv,
                &tail_v,
                &mut ring,
                &mut counters.v,
            )
            .map(|v| KvPair { k, v })
        });

        let tail = TailKv::new(toy::source(&kv[0], mode), toy::source(&kv[1], mode));
        let result = canary.sweep(&entries, tail);
        let unchanged = |canary: &Canary<Cap, Cap, Cap, Cap, Cap>| {
            canary.buffer(LaunchTag::TailKFull) == Some(&tail_k)
                && canary.buffer(LaunchTag::TailVFull) == Some(&tail_v)
        };
        let checks = match (&result, &raw) {
            (Err(err), _) if short_kv => {
                ensure(matches!(err, Error::RealKvSlotOutOfRange { .. }), || {
                    format!("sweep: short KV sources gave {err:?}")
                })
            }
            (Err(err), Err(raw_err)) => ensure(err == raw_err, || {
                format!("sweep: error {err:?}, the raw launches' {raw_err:?}")
            }),
            (Ok(report), Ok(raw_verify)) => {
                let overflow = (n > v).then_some(PlanOverflow {
                    needed: Some(n as u64),
                    capacity: v,
                });
                ensure(!short_kv, || "sweep: short KV sources accepted".to_owned())
                    .and_then(|_| {
                        ensure(
                            report.verify == *raw_verify
                                && report.counters == counters
                                && report.violations == ring.violations().collect::<Vec<_>>()
                                && report.dropped == ring.count().expect("raw ring").dropped,
                            || format!("sweep: {report:?}, the raw launches {raw_verify:?}, {counters:?}, {ring:?}"),
                        )
                    })
                    .and_then(|_| {
                        ensure(
                            (report.entries, report.verify_capacity) == (n, v)
                                && report.unverified().plan_overflow == overflow
                                && (overflow.is_none()
                                    || (report.entries_checked(), report.recorded(), report.is_clean())
                                        == (0, 0, false)),
                            || format!("sweep of {n} entries, capacity {v}: {report:?} ({report})"),
                        )
                    })
                    .and_then(|_| {
                        ensure(
                            canary.counters(LaunchTag::SweepKFull) == Some(&counters.k)
                                && canary.counters(LaunchTag::SweepVFull) == Some(&counters.v)
                                && canary.ring() == &ring
                                && canary.sweeps() == sweeps + 1
                                && canary.total_violations() == total + report.recorded()
                                && unchanged(&canary),
                            || "sweep: the canary after the sweep differs from the raw launches".to_owned(),
                        )
                    })
                    .map(|_| labels.push(if overflow.is_some() {
                        "overflow"
                    } else if report.recorded() > 0 {
                        "violations"
                    } else {
                        "clean"
                    }))
            }
            (result, raw) => Err(format!("sweep: {result:?}, the raw launches {raw:?}")),
        };
        if let Err(message) = checks {
            return Ok(Err(message));
        }
        if let Err(err) = result {
            let unchanged_all = unchanged(&canary)
                && canary.counters(LaunchTag::SweepKFull) == Some(&counters_before.k)
                && canary.counters(LaunchTag::SweepVFull) == Some(&counters_before.v)
                && (canary.sweeps(), canary.total_violations()) == (sweeps, total);
            if !unchanged_all {
                return Ok(Err(format!("sweep: error {err} changed the canary")));
            }
            return Ok(error_label("sweep", &err));
        }
    }
    labels.sort_unstable();
    labels.dedup();
    Ok(Ok(format!(
        "sweep ok {} step errors={}",
        labels.join("+"),
        step_errors.min(1)
    )))
}
