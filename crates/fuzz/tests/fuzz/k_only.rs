//! K-only canaries (`Canary::try_k_only`, `KOnly<Full>`): random steps, stopped at random
//! stages, with KV bytes and canary buffers tampered with between them, must equal the raw ops
//! of the K tags (plan; `HEAD_K_FULL` verify and write; `TAIL_K_FULL` verify and write), stage
//! by stage: the same summaries, the same errors, the same buffers, counters and ring. No V
//! buffer, counter or launch exists. A final sweep equals a raw `SWEEP_K_FULL` verify over the
//! tail K buffer.

use crate::gen::{cap, ensure, error_label, val};
use crate::toy::{self, ROWS};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::cpu::{VerifySummary, WriteSummary};
use kv_canary::step::{Canary, KOnly};
use kv_canary::{
    cpu, Batch, CanaryBuffer, Full, HealthCounters, LaunchSettings, LaunchTag, PlanInputs, Shape,
    TokenCheckOff, UncheckedCapacity, VerifyEntry, VerifyPlan, ViolationRing, WritePlan,
};

type Cap = UncheckedCapacity;
type KOnlyCanary = Canary<Cap, Cap, Cap, Cap, Cap, KOnly<Full>>;

/// The raw state the K-only canary must equal.
struct Raw {
    head: CanaryBuffer<Cap>,
    tail: CanaryBuffer<Cap>,
    ring: ViolationRing<Cap>,
    head_c: HealthCounters,
    tail_c: HealthCounters,
}

fn same(canary: &KOnlyCanary, raw: &Raw) -> std::result::Result<(), String> {
    ensure(
        canary.buffer(LaunchTag::HeadKFull) == Some(&raw.head)
            && canary.buffer(LaunchTag::TailKFull) == Some(&raw.tail)
            && canary.counters(LaunchTag::HeadKFull) == Some(&raw.head_c)
            && canary.counters(LaunchTag::TailKFull) == Some(&raw.tail_c)
            && canary.ring() == &raw.ring,
        || "k_only: the canary's buffers, counters or ring differ from the raw ops'".to_owned(),
    )
    .and_then(|_| {
        ensure(
            canary.tags() == [LaunchTag::HeadKFull, LaunchTag::TailKFull]
                && canary.buffer(LaunchTag::HeadVFull).is_none()
                && canary.buffer(LaunchTag::TailVFull).is_none()
                && canary.counters(LaunchTag::SweepVFull).is_none(),
            || format!("k_only: tags {:?}", canary.tags()),
        )
    })
}

/// Both results succeed, or fail with the same error (checked: the kv-canary: prefix).
fn agree<A, B: std::fmt::Debug>(
    stage: &str,
    canary: &std::result::Result<A, kv_canary::Error>,
    raw: &std::result::Result<B, kv_canary::Error>,
) -> std::result::Result<Option<String>, String> {
    match (canary, raw) {
        (Ok(_), Ok(_)) => Ok(None),
        (Err(a), Err(b)) if a == b => error_label(stage, a).map(Some),
        _ => Err(format!(
            "k_only {stage}: canary error {:?}, raw ops {raw:?}",
            canary.as_ref().err()
        )),
    }
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let v = u.int_in_range(1..=24)?;
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
    let mut canary: KOnlyCanary =
        Canary::try_k_only(shape, cap("slots", slots), cap("ring", ring_rows)).expect("small");
    let mut vp = VerifyPlan::try_with_capacity(cap("verify_capacity", v)).expect("small");
    let mut wp = WritePlan::try_with_capacity(cap("write_req_capacity", w)).expect("small");
    let buffer = || CanaryBuffer::try_with_capacity(cap("slots", slots)).expect("small");
    let mut raw = Raw {
        head: buffer(),
        tail: buffer(),
        ring: ViolationRing::try_with_capacity(cap("ring", ring_rows)).expect("small"),
        head_c: HealthCounters::new(),
        tail_c: HealthCounters::new(),
    };
    let mode = toy::mode(u)?;
    let mut kv = toy::kv_bytes(u, slots)?;
    let mut lens = [0i64; ROWS];
    let (mut reports, mut first_error) = (0u64, None);
    let head_s = LaunchSettings::new(LaunchTag::HeadKFull);
    let off = TokenCheckOff;

    for _ in 0..u.int_in_range(0..=6)? {
        let s = toy::step(u, &table, w, e, slots, &mut lens)?;
        let batch = Batch::try_from_columns(s.rows, s.prefixes, s.extends).expect("one length");
        let mut inputs = canary.try_write_inputs().expect("small");
        {
            let p = inputs.parts_mut();
            p.out_cache_loc.fill(-1);
            for (i, &(slot, id, pos)) in s.tokens.iter().enumerate() {
                (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (slot, id, pos);
            }
        }
        let stages = u.int_in_range(0..=15)?.min(4);
        let plan_inputs = PlanInputs::full(&batch, &table);

        // Stage by stage: the canary's, then the raw ops'; stop at the first error.
        let outcome = (|| -> std::result::Result<Option<String>, String> {
            let raw_plan = cpu::plan(&shape, &plan_inputs, &mut vp, &mut wp);
            let planned = canary.plan(&plan_inputs);
            if let Some(kind) = agree("plan", &planned, &raw_plan)? {
                return Ok(Some(kind));
            }
            raw.ring.clear();
            let (planned, raw_plan) = (planned.expect("agreed"), raw_plan.expect("agreed"));
            if stages == 0 {
                return Ok(None);
            }
            let raw_hv = cpu::verify(
                &shape,
                &vp,
                off,
                &head_s,
                &raw.head,
                &mut raw.ring,
                &mut raw.head_c,
            );
            let head = planned.verify_head();
            if let Some(kind) = agree("head verify", &head, &raw_hv)? {
                return Ok(Some(kind));
            }
            if stages == 1 {
                return Ok(None);
            }
            let raw_hw = cpu::write(
                &shape,
                &wp,
                &inputs,
                &head_s,
                &mut raw.head,
                &mut raw.ring,
                &mut raw.head_c,
            );
            let written = head.expect("agreed").write(&inputs);
            if let Some(kind) = agree("head write", &written, &raw_hw)? {
                return Ok(Some(kind));
            }
            if stages == 2 {
                return Ok(None);
            }
            let source = toy::source(&kv, mode);
            let report = written.expect("agreed").verify_tail(source);
            if kv.len() < slots * toy::STRIP {
                // Checked before any tail launch: nothing runs.
                return match report {
                    Err(err @ kv_canary::Error::RealKvSlotOutOfRange { .. }) => {
                        error_label("tail verify", &err).map(Some)
                    }
                    other => Err(format!("k_only: short KV sources gave {other:?}")),
                };
            }
            let tail_s = LaunchSettings::new(LaunchTag::TailKFull).with_real_kv(source);
            let raw_tail = cpu::verify(
                &shape,
                &vp,
                off,
                &tail_s,
                &raw.tail,
                &mut raw.ring,
                &mut raw.tail_c,
            )
            .and_then(|tv| {
                cpu::write(
                    &shape,
                    &wp,
                    &inputs,
                    &tail_s,
                    &mut raw.tail,
                    &mut raw.ring,
                    &mut raw.tail_c,
                )
                .map(|tw| (tv, tw))
            });
            if let Some(kind) = agree("tail", &report, &raw_tail)? {
                return Ok(Some(kind));
            }
            let (report, (tv, tw)) = (report.expect("agreed"), raw_tail.expect("agreed"));
            reports += 1;
            ensure(
                report.plan == raw_plan
                    && (report.head_verify.k, report.head_write.k)
                        == (raw_hv.expect("agreed"), raw_hw.expect("agreed"))
                    && (report.tail_verify.k, report.tail_write.k) == (tv, tw)
                    && (report.head_verify.v, report.tail_verify.v)
                        == (VerifySummary::default(), VerifySummary::default())
                    && (report.head_write.v, report.tail_write.v)
                        == (WriteSummary::default(), WriteSummary::default())
                    && (&report.head_counters.k, &report.tail_counters.k)
                        == (&raw.head_c, &raw.tail_c)
                    && (&report.head_counters.v, &report.tail_counters.v)
                        == (&HealthCounters::new(), &HealthCounters::new())
                    && report.violations == raw.ring.violations().collect::<Vec<_>>(),
                || format!("k_only: report {report:?}, raw ring {:?}", raw.ring),
            )?;
            Ok(None)
        })();
        match outcome {
            Err(message) => return Ok(Err(message)),
            Ok(Some(kind)) => {
                first_error.get_or_insert(kind);
            }
            Ok(None) => {}
        }
        if let Err(message) = same(&canary, &raw) {
            return Ok(Err(message));
        }
        if u.ratio(1, 4)? {
            toy::flip(u, &mut kv)?;
        }
        if u.ratio(1, 6)? {
            let head = u.ratio(1, 2)?;
            let (tag, raw_buf) = if head {
                (LaunchTag::HeadKFull, &mut raw.head)
            } else {
                (LaunchTag::TailKFull, &mut raw.tail)
            };
            let bytes = canary.buffer_mut(tag).expect("a K buffer").as_bytes_mut();
            let i = u.int_in_range(0..=bytes.len() - 1)?;
            let bit = 1 << u.int_in_range(0..=7)?;
            bytes[i] ^= bit;
            raw_buf.as_bytes_mut()[i] ^= bit;
        }
    }
    // A K-only sweep: `SWEEP_K_FULL` over the tail K buffer, as a raw verify of that tag.
    let n = u.int_in_range(0..=v + 1)?;
    let entries = (0..n)
        .map(|p| {
            let slot = |p: usize| table.get(p % ROWS, p % 8).map_or(-1, i64::from);
            Ok(VerifyEntry {
                slot: if u.ratio(1, 32)? {
                    val(u, 0, slots as i64)?
                } else {
                    slot(p)
                },
                expected_token: 0,
                expected_position: (p % 8) as i64,
                prev_slot: if p % 8 == 0 { -1 } else { slot(p - 1) },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut sweep_c = canary
        .counters(LaunchTag::SweepKFull)
        .expect("a K-only canary's sweep K counters")
        .clone();
    let mut plan = VerifyPlan::try_with_capacity(cap("verify_capacity", v)).expect("small");
    if n <= v {
        plan.set_entries(&entries).expect("n <= capacity");
    } else {
        let p = plan.parts_mut();
        (*p.num_valid, *p.enable) = (0, 0);
    }
    raw.ring.clear();
    let source = toy::source(&kv, mode);
    let sweep = canary.sweep(&entries, source);
    let sweep_label = if kv.len() < slots * toy::STRIP {
        match sweep {
            Err(err @ kv_canary::Error::RealKvSlotOutOfRange { .. }) => error_label("sweep", &err),
            other => Err(format!(
                "k_only: a sweep over short KV sources gave {other:?}"
            )),
        }
    } else {
        let s = LaunchSettings::new(LaunchTag::SweepKFull).with_real_kv(source);
        let raw_sweep = cpu::verify(
            &shape,
            &plan,
            off,
            &s,
            &raw.tail,
            &mut raw.ring,
            &mut sweep_c,
        );
        match (sweep, raw_sweep) {
            (Ok(report), Ok(k)) => ensure(
                (report.verify.k, report.verify.v) == (k, VerifySummary::default())
                    && report.counters.k == sweep_c
                    && report.counters.v == HealthCounters::new()
                    && report.violations == raw.ring.violations().collect::<Vec<_>>()
                    && canary.ring() == &raw.ring
                    && canary.buffer(LaunchTag::TailKFull) == Some(&raw.tail),
                || {
                    format!(
                        "k_only: sweep {report:?}, raw verify {k:?}, ring {:?}",
                        raw.ring
                    )
                },
            )
            .map(|_| format!("sweep ok overflow={}", n > v)),
            (Err(a), Err(b)) if a == b => error_label("sweep", &a),
            (a, b) => Err(format!("k_only: sweep {a:?}, raw verify {b:?}")),
        }
    };
    Ok(sweep_label.map(|sweep| {
        format!(
            "k_only reports={} first error: {}, {sweep}",
            reports.min(2),
            first_error.as_deref().unwrap_or("none")
        )
    }))
}
