//! Host views (`BatchView`, `ReqToTokenView`, `WriteInputsView` of `i32`, `i64`, `u32`, `u64`,
//! `usize`): random steps through views of the engine's own arrays must equal the same steps
//! through the owned inputs (`Batch`, `ReqToToken`, `WriteInputs`) on a twin canary: the same
//! reports, errors, buffers, counters and ring. A `u64` or `usize` batch value past `i64::MAX`
//! is `Error::ElementOutOfRange` naming it, and the canary is unchanged.

use crate::gen::{cap, ensure, error_label};
use crate::toy::{self, ROWS, WIDTH};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::step::{Canary, TailKv};
use kv_canary::{
    cpu, Batch, BatchView, Error, IndexElement, LaunchSettings, LaunchTag, PlanInputs,
    ReqToTokenView, Shape, UncheckedCapacity, WriteInputsView,
};

type Cap = UncheckedCapacity;
type FullCanary = Canary<Cap, Cap, Cap, Cap, Cap>;

/// What the two canaries must agree on.
fn same(a: &FullCanary, b: &FullCanary) -> std::result::Result<(), String> {
    let tags = a.tags();
    ensure(
        tags.iter()
            .all(|&t| a.buffer(t) == b.buffer(t) && a.counters(t) == b.counters(t))
            && a.ring() == b.ring()
            && a.plans() == b.plans()
            && (a.steps(), a.abandoned_steps(), a.total_violations())
                == (b.steps(), b.abandoned_steps(), b.total_violations()),
        || "views: the canary fed views differs from the one fed owned inputs".to_owned(),
    )
}

/// A snapshot of everything a failed stage must leave alone.
fn snapshot(c: &FullCanary) -> impl PartialEq + use<> {
    let tags = c.tags();
    (
        tags.iter()
            .map(|&t| (c.buffer(t).cloned(), c.counters(t).cloned()))
            .collect::<Vec<_>>(),
        c.ring().clone(),
        c.plans().0.clone(),
        c.plans().1.clone(),
        (c.steps(), c.total_violations()),
    )
}

/// `value` as a `T`, or `T`'s 0 where it does not fit (negative values of unsigned views).
fn to<T: IndexElement + TryFrom<i64>>(value: i64) -> T {
    T::try_from(value)
        .or_else(|_| T::try_from(0))
        .unwrap_or_else(|_| unreachable!("0 fits every element type"))
}

fn wide<T: IndexElement>(values: &[T]) -> Vec<i64> {
    values
        .iter()
        .map(|v| {
            v.to_i64()
                .expect("only the injected values are past i64::MAX")
        })
        .collect()
}

fn steps<T: IndexElement + TryFrom<i64> + TryFrom<u64>>(
    u: &mut Unstructured<'_>,
) -> Result<Verdict> {
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
    let cells: Vec<T> = table.as_slice().iter().map(|&c| to(i64::from(c))).collect();
    let table_view = ReqToTokenView::new(ROWS, WIDTH, &cells).expect("rows x width cells");
    let new = || -> FullCanary {
        Canary::try_full(shape, cap("slots", slots), cap("ring", ring_rows)).expect("small")
    };
    let (mut owned, mut viewed) = (new(), new());
    let mode = toy::mode(u)?;
    let kv = [toy::kv_bytes(u, slots)?, toy::kv_bytes(u, slots)?];
    let mut lens = [0i64; ROWS];
    let (mut reports, mut first_error) = (0u64, None::<String>);
    let n = u.int_in_range(1..=6)?;
    for step in 0..n {
        let s = toy::step(u, &table, w, e, slots, &mut lens)?;
        let mut cols: [Vec<T>; 3] =
            [&s.rows, &s.prefixes, &s.extends].map(|c| c.iter().map(|&x| to(x)).collect());
        let mut arrays: [Vec<T>; 3] = [vec![to(0); e], vec![to(0); e], vec![to(-1); e]];
        for (i, &(slot, id, pos)) in s.tokens.iter().enumerate() {
            (arrays[0][i], arrays[1][i], arrays[2][i]) = (to(id), to(pos), to(slot));
        }
        // The last step of a `u64` or `usize` run: a batch value past i64::MAX, sometimes.
        let inject = step + 1 == n && !T::FITS_I64 && !s.rows.is_empty() && u.ratio(1, 3)?;
        if inject {
            let huge = (i64::MAX as u64) + 1 + u.int_in_range(0..=u64::MAX / 2)?;
            let huge: T = T::try_from(huge).unwrap_or_else(|_| unreachable!("a u64 or usize"));
            let c = u.int_in_range(0..=2)?;
            let r = u.int_in_range(0..=cols[c].len() - 1)?;
            cols[c][r] = huge;
            let batch = BatchView::new(&cols[0], &cols[1], &cols[2]).expect("one length");
            let before = snapshot(&viewed);
            let err = match viewed.plan(&PlanInputs::from_views(batch, table_view)) {
                // A padding row (req_pool_index 0): its lengths are never read (spec §3.2),
                // so the step plans as the owned twin with a 0 there does.
                Ok(_) if c != 0 && cols[0][r].to_i64() == Some(0) => {
                    cols[c][r] = to(0);
                    let batch =
                        Batch::try_from_columns(wide(&cols[0]), wide(&cols[1]), wide(&cols[2]))
                            .expect("one length");
                    let planned = owned.plan(&PlanInputs::full(&batch, &table)).is_ok();
                    return Ok(ensure(planned, || {
                        format!("views: the owned twin of a padding row's {huge:?} did not plan")
                    })
                    .and_then(|_| same(&owned, &viewed))
                    .map(|_| format!("views {} past i64::MAX in a padding row", T::NAME)));
                }
                Ok(_) => {
                    return Ok(Err(format!(
                        "views: {huge:?} at column {c} row {r} planned"
                    )))
                }
                Err(err) => err,
            };
            let changed = snapshot(&viewed) != before;
            return Ok(match err {
                Error::ElementOutOfRange { value, .. }
                    if value == huge.wide() && err.to_string().contains(&value.to_string()) =>
                {
                    if changed {
                        Err(format!("views: {err} changed the canary"))
                    } else {
                        error_label("views", &err)
                    }
                }
                // An earlier row's own error comes first.
                Error::ElementOutOfRange { .. } => Err(format!("views: {err} for {huge:?}")),
                _ if changed => Err(format!("views: {err} changed the canary")),
                _ => error_label("views: earlier", &err),
            });
        }
        let batch = Batch::try_from_columns(wide(&cols[0]), wide(&cols[1]), wide(&cols[2]))
            .expect("one length");
        let batch_view = BatchView::new(&cols[0], &cols[1], &cols[2]).expect("one length");
        let mut inputs = owned.try_write_inputs().expect("small");
        {
            let p = inputs.parts_mut();
            p.input_ids.copy_from_slice(&wide(&arrays[0]));
            p.positions.copy_from_slice(&wide(&arrays[1]));
            p.out_cache_loc.copy_from_slice(&wide(&arrays[2]));
        }
        let view = WriteInputsView::new(
            cap("write_entry_capacity", e),
            &arrays[0],
            &arrays[1],
            &arrays[2],
        )
        .expect("e entries each");
        let stages = u.int_in_range(0..=15)?.min(3);
        let tail = || TailKv::new(toy::source(&kv[0], mode), toy::source(&kv[1], mode));
        let a = owned.plan(&PlanInputs::full(&batch, &table)).and_then(|s| {
            let s = if stages >= 1 {
                s.verify_head()?
            } else {
                return Ok(None);
            };
            let s = if stages >= 2 {
                s.write(&inputs)?
            } else {
                return Ok(None);
            };
            if stages >= 3 {
                s.verify_tail(tail()).map(Some)
            } else {
                Ok(None)
            }
        });
        let b = viewed
            .plan(&PlanInputs::from_views(batch_view, table_view))
            .and_then(|s| {
                let s = if stages >= 1 {
                    s.verify_head()?
                } else {
                    return Ok(None);
                };
                let s = if stages >= 2 {
                    s.write(&view)?
                } else {
                    return Ok(None);
                };
                if stages >= 3 {
                    s.verify_tail(tail()).map(Some)
                } else {
                    Ok(None)
                }
            });
        if a != b {
            return Ok(Err(format!(
                "views ({}): owned inputs {a:?}, views {b:?}",
                T::NAME
            )));
        }
        // The last step of a `u64` or `usize` run that wrote tokens: the same write once more,
        // as the raw op, through a view with one array past i64::MAX.
        if let Ok(Some(report)) = &a {
            if step + 1 == n && !T::FITS_I64 && report.plan.write_tokens > 0 && u.ratio(1, 2)? {
                let huge = (i64::MAX as u64) + 1 + u.int_in_range(0..=u64::MAX / 2)?;
                let huge: T = T::try_from(huge).unwrap_or_else(|_| unreachable!("a u64 or usize"));
                arrays[u.int_in_range(0..=2)?].fill(huge);
                let view = WriteInputsView::new(
                    cap("write_entry_capacity", e),
                    &arrays[0],
                    &arrays[1],
                    &arrays[2],
                )
                .expect("e entries each");
                let tag = LaunchTag::HeadKFull;
                let mut buffer = viewed.buffer(tag).expect("FULL").clone();
                let mut ring = viewed.ring().clone();
                let mut counters = viewed.counters(tag).expect("FULL").clone();
                let before = (buffer.clone(), ring.clone(), counters.clone());
                let result = cpu::write(
                    &shape,
                    viewed.plans().1,
                    &view,
                    &LaunchSettings::new(tag),
                    &mut buffer,
                    &mut ring,
                    &mut counters,
                );
                let unchanged = (buffer, ring, counters) == before;
                return Ok(match result {
                    Err(err @ Error::ElementOutOfRange { value, .. })
                        if value == huge.wide() && unchanged =>
                    {
                        error_label("views: write", &err)
                    }
                    Err(err) if unchanged && !matches!(err, Error::ElementOutOfRange { .. }) => {
                        error_label("views: write, earlier", &err)
                    }
                    other => Err(format!(
                        "views: a write of {huge:?} gave {other:?} (outputs unchanged: {unchanged})"
                    )),
                });
            }
        }
        match a {
            Ok(Some(_)) => reports += 1,
            Ok(None) => {}
            Err(err) => match error_label("views", &err) {
                Ok(kind) => {
                    first_error.get_or_insert(kind);
                }
                Err(message) => return Ok(Err(message)),
            },
        }
        if let Err(message) = same(&owned, &viewed) {
            return Ok(Err(message));
        }
        // The same bit of the same buffer flips in both.
        if u.ratio(1, 6)? {
            let tag = *u.choose(&[LaunchTag::HeadKFull, LaunchTag::TailVFull])?;
            let len = owned.buffer(tag).expect("FULL").as_bytes().len();
            let i = u.int_in_range(0..=len - 1)?;
            let bit = 1 << u.int_in_range(0..=7)?;
            owned.buffer_mut(tag).expect("FULL").as_bytes_mut()[i] ^= bit;
            viewed.buffer_mut(tag).expect("FULL").as_bytes_mut()[i] ^= bit;
        }
    }
    Ok(Ok(format!(
        "views {} reports={} first error: {}",
        T::NAME,
        reports.min(2),
        first_error.as_deref().unwrap_or("none")
    )))
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    match u.int_in_range(0..=4)? {
        0 => steps::<i32>(u),
        1 => steps::<i64>(u),
        2 => steps::<u32>(u),
        3 => steps::<u64>(u),
        _ => steps::<usize>(u),
    }
}
