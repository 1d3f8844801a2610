//! The step API: random sequences of steps (plan, head verify, write, tail verify) on a FULL or
//! SWA canary, with random batches, steps abandoned at every stage, canary buffers tampered with
//! between steps, and bad inputs that make a stage fail.

use crate::gen::{cap, ensure, error_label, val, val32, vals};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::step::{Canary, KvPair, TailKv};
use kv_canary::{
    Batch, ExpectedTokenTable, LaunchTag, PlanInputs, RealKv, RealKvHashMode, RealKvParams,
    RealKvSource, RealKvSources, ReqToToken, Shape, Swa,
};

/// What the harness expects of the next report, kept beside the canary.
#[derive(Default)]
struct Model {
    /// Steps started since the last report that did not produce one.
    unfinished: u64,
    /// `total_violations` after the last report.
    total: u64,
    /// Reports seen, for the label.
    reports: u64,
    /// Stage errors seen, for the label.
    errors: u64,
    /// The first stage error's kind, for the label.
    first_error: Option<String>,
}

/// How far a step goes before it is dropped (4: to its report).
#[derive(Clone, Copy)]
enum Until {
    Planned,
    HeadVerified,
    Written,
    Report,
}

/// Runs one step on `$canary` with plan inputs `$inputs`, write inputs `$write`, stopping at
/// `$until`; checks the report (or the error) against `$model`. Evaluates to a `Verdict` of
/// failure, or `()`.
macro_rules! step {
    ($canary:expr, $inputs:expr, $write:expr, $tail:expr, $until:expr, $model:expr) => {{
        let model: &mut Model = $model;
        let result = (|| -> std::result::Result<Option<_>, kv_canary::Error> {
            let planned = $canary.plan($inputs)?;
            if matches!($until, Until::Planned) {
                return Ok(None);
            }
            let head = planned.verify_head()?;
            if matches!($until, Until::HeadVerified) {
                return Ok(None);
            }
            let written = head.write($write)?;
            if matches!($until, Until::Written) {
                return Ok(None);
            }
            written.verify_tail($tail).map(Some)
        })();
        match result {
            Err(e) => {
                model.unfinished += 1;
                model.errors += 1;
                error_label("step", &e).map(|kind| {
                    model.first_error.get_or_insert(kind);
                })
            }
            Ok(None) => {
                model.unfinished += 1;
                Ok(())
            }
            Ok(Some(report)) => {
                model.reports += 1;
                let ring = $canary.ring();
                let checks = ensure(report.abandoned_steps == model.unfinished, || {
                    format!(
                        "step: report says {} abandoned steps, {} were",
                        report.abandoned_steps, model.unfinished
                    )
                })
                .and_then(|_| {
                    ensure(
                        report.violations.len() == ring.stored_len()
                            && report.dropped == ring.dropped()
                            && report.recorded() == ring.write_index() as u64,
                        || {
                            format!(
                                "step: report {} rows + {} dropped, ring index {} ({} stored)",
                                report.violations.len(),
                                report.dropped,
                                ring.write_index(),
                                ring.stored_len()
                            )
                        },
                    )
                })
                .and_then(|_| {
                    ensure(
                        $canary.total_violations() == model.total + report.recorded(),
                        || {
                            format!(
                                "step: total_violations {} after {} + {}",
                                $canary.total_violations(),
                                model.total,
                                report.recorded()
                            )
                        },
                    )
                })
                .and_then(|_| {
                    let verifies: Vec<_> = report
                        .head_verify
                        .iter()
                        .chain(report.tail_verify.iter())
                        .collect();
                    let entries = if report.plan.enabled {
                        report.plan.verify_num_valid
                    } else {
                        0
                    };
                    ensure(
                        verifies
                            .iter()
                            .all(|s| s.entries == entries && s.enabled == report.plan.enabled),
                        || {
                            format!(
                                "step: verify launches {:?} for plan {:?}",
                                verifies, report.plan
                            )
                        },
                    )
                })
                .and_then(|_| {
                    let clean = report.is_clean();
                    ensure(
                        clean
                            == (report.plan.enabled
                                && model.unfinished == 0
                                && report.recorded() == 0),
                        || format!("step: is_clean {clean} for {report:?}"),
                    )
                });
                model.unfinished = 0;
                model.total = $canary.total_violations();
                checks
            }
        }
    }};
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let v = u.int_in_range(1..=32)?;
    let w = u.int_in_range(1..=4)?;
    let e = u.int_in_range(1..=12)?;
    let shape = Shape::from_capacities(
        cap("verify_capacity", v),
        cap("write_req_capacity", w),
        cap("write_entry_capacity", e),
    );
    let slots = u.int_in_range(2..=40)?;
    let ring_rows = u.int_in_range(1..=4)?;
    // A table whose rows map positions to distinct slots (mostly): row r, position p -> slot
    // 1 + (8r + p) mod (slots - 1); some cells tampered with.
    let (rows, width) = (4usize, 8usize);
    let mut data: Vec<i32> = (0..rows * width)
        .map(|i| 1 + (i % (slots - 1)) as i32)
        .collect();
    for _ in 0..u.int_in_range(0..=2)? {
        let i = u.int_in_range(0..=data.len() - 1)?;
        data[i] = val32(u, 0, slots as i64)?;
    }
    let table = ReqToToken::from_vec(rows, width, data).expect("cells");
    let pool = ExpectedTokenTable::zeros(rows, width).expect("small");
    let swa = u.ratio(1, 3)?;
    let window = u.int_in_range(0..=6)?;
    let lut: Vec<i64> = (0..=slots as i64)
        .map(|s| if s == slots as i64 { -1 } else { s })
        .collect();
    let with_pool = u.ratio(1, 4)?;
    let mut model = Model::default();
    let steps = u.int_in_range(0..=8)?;
    // Real KV bytes for the tail launches: one row of 16 bytes per slot (sometimes too few
    // rows, an error of the tail verify), changed between steps.
    let real_kv = u.ratio(1, 3)?;
    let kv_rows = if u.ratio(1, 8)? { slots / 2 } else { slots + 1 };
    let mut kv = [vec![0u8; kv_rows * 16], vec![0u8; kv_rows * 16]];
    u.fill_buffer(&mut kv[0])?;
    u.fill_buffer(&mut kv[1])?;
    let mode = if u.ratio(1, 2)? {
        RealKvHashMode::All
    } else {
        RealKvHashMode::Partial
    };

    macro_rules! run_steps {
        ($canary:expr, |$b:ident, $l:ident| $make:expr) => {{
            let mut canary = $canary;
            let mut inputs = canary.try_write_inputs().expect("small");
            // Per pool row: the tokens written so far (the next position).
            let mut lens = [0i64; 4];
            for _ in 0..steps {
                let bs = u.int_in_range(0..=w + 1)?;
                let mut rpi = Vec::new();
                let mut prefix = Vec::new();
                let mut extend = Vec::new();
                for _ in 0..bs {
                    let rp = if u.ratio(1, 16)? {
                        val(u, 0, 4)?
                    } else {
                        u.int_in_range(0..=3)?
                    };
                    rpi.push(rp);
                    let known = usize::try_from(rp)
                        .ok()
                        .and_then(|r| lens.get(r).copied())
                        .unwrap_or(0);
                    prefix.push(if u.ratio(1, 16)? {
                        val(u, 0, 8)?
                    } else {
                        known
                    });
                    extend.push(if u.ratio(1, 16)? {
                        val(u, 0, 3)?
                    } else {
                        u.int_in_range(0..=2)?
                    });
                }
                let batch = Batch::try_from_columns(rpi, prefix, extend).expect("one length");
                // Write inputs following the table, some entries off it.
                {
                    let p = inputs.parts_mut();
                    p.out_cache_loc.fill(-1);
                    let mut at = 0;
                    for row in batch.rows().filter(|r| r.is_active()) {
                        for i in 0..row.extend_len.max(0) {
                            if at >= p.out_cache_loc.len() {
                                break;
                            }
                            let pos = row.prefix_len.saturating_add(i);
                            let slot = usize::try_from(row.req_pool_index)
                                .ok()
                                .and_then(|r| {
                                    usize::try_from(pos).ok().and_then(|c| table.get(r, c))
                                })
                                .map_or(-1, i64::from);
                            p.input_ids[at] = u.int_in_range(0..=9)?;
                            p.positions[at] = pos;
                            p.out_cache_loc[at] = if u.ratio(1, 16)? {
                                val(u, -1, slots as i64)?
                            } else {
                                slot
                            };
                            at += 1;
                        }
                    }
                }
                let until = match u.int_in_range(0..=15)? {
                    0 => Until::Planned,
                    1 => Until::HeadVerified,
                    2 => Until::Written,
                    _ => Until::Report,
                };
                let valid_lens = vals(u, batch.len(), 0, 8)?;
                let ($b, $l) = (&batch, &valid_lens[..]);
                let _ = $l;
                let plan_inputs = $make;
                let finished_before = model.reports;
                let source = |bytes| {
                    let src = RealKvSource::new(bytes, 16, RealKvParams::new(1, 16, 16));
                    RealKv::new(
                        mode,
                        RealKvSources::from_array([src.expect("rows of 16 bytes")]),
                    )
                };
                let tail = if real_kv {
                    KvPair::new(source(&kv[0]), source(&kv[1]))
                } else {
                    TailKv::NONE
                };
                if let Err(message) = step!(canary, &plan_inputs, &inputs, tail, until, &mut model)
                {
                    return Ok(Err(message));
                }
                if model.reports > finished_before {
                    for row in batch.rows() {
                        if let Some(len) = usize::try_from(row.req_pool_index)
                            .ok()
                            .and_then(|r| lens.get_mut(r))
                        {
                            *len = row
                                .prefix_len
                                .max(0)
                                .saturating_add(row.extend_len.max(0))
                                .min(8);
                        }
                    }
                }
                // A KV byte changes between steps.
                if real_kv && u.ratio(1, 6)? {
                    let half = &mut kv[u.int_in_range(0..=1)?];
                    let i = u.int_in_range(0..=half.len() - 1)?;
                    half[i] ^= 1;
                }
                // Tamper with a canary buffer between steps.
                if u.ratio(1, 6)? {
                    let tags = canary.tags();
                    let tag: LaunchTag = *u.choose(&tags)?;
                    if let Some(buf) = canary.buffer_mut(tag) {
                        let bytes = buf.as_bytes_mut();
                        let i = u.int_in_range(0..=bytes.len() - 1)?;
                        bytes[i] ^= 1 << u.int_in_range(0..=7)?;
                    }
                }
            }
        }};
    }

    match (swa, with_pool) {
        (false, false) => run_steps!(
            Canary::try_full(shape, cap("slots", slots), cap("ring", ring_rows)).expect("small"),
            |batch, lens| PlanInputs::full(batch, &table)
        ),
        (false, true) => run_steps!(
            Canary::try_full(shape, cap("slots", slots), cap("ring", ring_rows)).expect("small"),
            |batch, lens| {
                PlanInputs::full(batch, &table).with_expected(pool.with_valid_lens(lens))
            }
        ),
        (true, _) => run_steps!(
            Canary::try_swa(shape, cap("slots", slots + 1), cap("ring", ring_rows)).expect("small"),
            |batch, lens| {
                PlanInputs::full(batch, &table).with_group(Swa::window(window).with_lut(&lut))
            }
        ),
    }
    Ok(Ok(format!(
        "step swa={swa} pool={} real_kv={real_kv} reports={} first error: {}",
        with_pool && !swa,
        model.reports.min(2),
        model.first_error.as_deref().unwrap_or("none")
    )))
}
