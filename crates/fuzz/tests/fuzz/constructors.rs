//! Every constructor that takes run-time data, with small sizes and sizes no machine can
//! allocate: an error or a value whose accessors agree with the arguments, never a panic or an
//! abort.

use crate::gen::{ensure, error_label, size, val, vals};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::step::Canary;
use kv_canary::{
    Batch, CanaryBuffer, Capacity, EngineKnobs, ExpectedTokenTable, RealKv, RealKvHashMode,
    RealKvParams, RealKvSource, RealKvSources, ReqToToken, RowLayout, Shape, SlotStride,
    UncheckedCapacity, VerifyCapacityRule, VerifyEntry, VerifyPlan, ViolationRing, WriteInputs,
    WritePlan,
};

/// A capacity of [`size`] (an error for 0, which is part of the case).
fn capacity(
    u: &mut Unstructured<'_>,
    what: &'static str,
) -> Result<std::result::Result<UncheckedCapacity, Verdict>> {
    let n = size(u)?;
    Ok(match UncheckedCapacity::new(what, n) {
        Ok(c) => {
            if c.get() != n {
                return Ok(Err(Err(format!(
                    "UncheckedCapacity::new({n}) holds {}",
                    c.get()
                ))));
            }
            Ok(c)
        }
        Err(e) => Err(if n == 0 {
            error_label("UncheckedCapacity::new", &e)
        } else {
            Err(format!("UncheckedCapacity::new({n}): {e}"))
        }),
    })
}

/// A vector of `len` values when `len` is small; any length is allowed otherwise but vectors
/// are only ever built small.
fn small_vec(u: &mut Unstructured<'_>, n: usize) -> Result<Vec<i64>> {
    let len = if n <= 8 && u.ratio(3, 4)? {
        n
    } else {
        u.int_in_range(0..=9)?
    };
    vals(u, len, -1, 9)
}

/// Returns the case's failure from `run` when `$check` (a `Result<_, String>`) fails.
macro_rules! or_fail {
    ($check:expr) => {
        if let Err(message) = $check {
            return Ok(Err(message));
        }
    };
}

macro_rules! capacity_or_return {
    ($u:expr, $what:expr) => {
        match capacity($u, $what)? {
            Ok(c) => c,
            Err(verdict) => return Ok(verdict),
        }
    };
}

/// `Ok(label)` for an `Ok` that `expect_ok` says is right or an `Err` with a good message that
/// it says is wrong; a failure otherwise.
fn judge<T>(
    what: &str,
    result: std::result::Result<T, kv_canary::Error>,
    expect_ok: bool,
    check: impl FnOnce(&T) -> std::result::Result<(), String>,
) -> Verdict {
    match result {
        Ok(value) => {
            ensure(expect_ok, || {
                format!("{what}: accepted arguments it must reject")
            })?;
            check(&value)?;
            Ok(format!("{what} ok"))
        }
        Err(e) => {
            ensure(!expect_ok, || {
                format!("{what}: rejected good arguments: {e}")
            })?;
            error_label(what, &e)
        }
    }
}

pub fn run(u: &mut Unstructured<'_>) -> Result<Verdict> {
    Ok(match u.int_in_range(0..=17)? {
        0 => {
            let (a, b, c) = (
                u.int_in_range(0..=4)?,
                u.int_in_range(0..=4)?,
                u.int_in_range(0..=4)?,
            );
            let r =
                Batch::try_from_columns(vals(u, a, -1, 4)?, vals(u, b, -1, 4)?, vals(u, c, -1, 4)?);
            judge("Batch::try_from_columns", r, a == b && b == c, |batch| {
                ensure(batch.len() == a, || "batch length".into())
            })
        }
        1 => {
            let n = size(u)?;
            judge(
                "Batch::try_with_capacity",
                Batch::try_with_capacity(n),
                n <= 8,
                |b| ensure(b.is_empty(), || "not empty".into()),
            )
        }
        2 => {
            let (rows, width) = (size(u)?, size(u)?);
            let fits = width > 0 && rows.checked_mul(width).is_some_and(|n| n <= 64);
            let check = |t: &ReqToToken| {
                ensure(
                    t.rows() == rows && t.width() == width && t.as_slice().len() == rows * width,
                    || format!("zeros({rows}, {width}) is {}x{}", t.rows(), t.width()),
                )
            };
            if u.ratio(1, 2)? {
                judge(
                    "ReqToToken::zeros",
                    ReqToToken::zeros(rows, width),
                    fits,
                    check,
                )
            } else {
                judge(
                    "ExpectedTokenTable::zeros",
                    ExpectedTokenTable::zeros(rows, width),
                    fits,
                    |t| ensure(t.rows() == rows && t.width() == width, || "shape".into()),
                )
            }
        }
        3 => {
            let (rows, width) = (size(u)?, size(u)?);
            let len = if rows.saturating_mul(width) <= 64 && u.ratio(3, 4)? {
                rows * width
            } else {
                u.int_in_range(0..=20)?
            };
            let data: Vec<i32> = (0..len).map(|i| i as i32).collect();
            let ok = width > 0 && rows.checked_mul(width) == Some(len);
            judge(
                "ReqToToken::from_vec",
                ReqToToken::from_vec(rows, width, data),
                ok,
                |t| {
                    // Every cell reads back; get and set outside the table are None and errors.
                    for r in 0..rows {
                        for c in 0..width {
                            ensure(t.get(r, c) == Some((r * width + c) as i32), || {
                                format!("cell {r},{c}")
                            })?;
                        }
                    }
                    let mut t = t.clone();
                    for (r, c) in [
                        (rows, 0),
                        (0, width),
                        (usize::MAX, usize::MAX),
                        (rows, usize::MAX),
                    ] {
                        ensure(
                            t.get(r, c).is_none() && t.row(r.max(rows)).is_none(),
                            || format!("get({r}, {c}) outside"),
                        )?;
                        match t.set(r, c, 1) {
                            Ok(()) => {
                                return Err(format!("set({r}, {c}) outside a {rows}x{width} table"))
                            }
                            Err(e) => {
                                error_label("ReqTable::set", &e)?;
                            }
                        }
                    }
                    Ok(())
                },
            )
        }
        4 => {
            let c = capacity_or_return!(u, "verify_capacity");
            let n = c.get();
            let parts: Vec<Vec<i64>> = (0..4).map(|_| small_vec(u, n)).collect::<Result<_>>()?;
            let ok = parts.iter().all(|p| p.len() == n);
            let [a, b, d, e] = <[Vec<i64>; 4]>::try_from(parts).expect("four");
            let (nv, en) = (val(u, 0, 9)? as i32, val(u, 0, 1)? as i32);
            judge(
                "VerifyPlan::from_parts",
                VerifyPlan::from_parts(c, a, b, d, e, nv, en),
                ok,
                |p| {
                    ensure(
                        p.num_valid() == nv && p.enable() == en && p.slot_indices().len() == n,
                        || "parts".into(),
                    )
                },
            )
        }
        5 => {
            let c = capacity_or_return!(u, "verify_capacity");
            let fits = c.get() <= 8;
            let r = VerifyPlan::try_with_capacity(c);
            let entries: Vec<VerifyEntry> = (0..u.int_in_range(0..=10)?)
                .map(|i| VerifyEntry {
                    slot: i,
                    expected_token: -1,
                    expected_position: i,
                    prev_slot: i - 1,
                })
                .collect();
            judge("VerifyPlan::try_with_capacity", r, fits, |p| {
                let mut p = p.clone();
                let before = p.clone();
                match p.set_entries(&entries) {
                    Ok(()) => ensure(
                        entries.len() <= c.get() && p.num_valid() as usize == entries.len(),
                        || "set_entries".into(),
                    ),
                    Err(e) => {
                        ensure(entries.len() > c.get() && p == before, || {
                            format!("set_entries: {e}")
                        })?;
                        error_label("VerifyPlan::set_entries", &e).map(|_| ())
                    }
                }
            })
        }
        6 => {
            let c = capacity_or_return!(u, "write_req_capacity");
            let n = c.get();
            let offsets = small_vec(u, n.saturating_add(1))?;
            let seeds = small_vec(u, n)?;
            let ok = n.checked_add(1) == Some(offsets.len()) && seeds.len() == n;
            let nv = val(u, 0, 9)? as i32;
            judge(
                "WritePlan::from_parts",
                WritePlan::from_parts(c, offsets, seeds, nv),
                ok,
                |p| {
                    ensure(
                        p.num_valid_reqs() == nv && p.offsets().len() == n + 1,
                        || "parts".into(),
                    )
                },
            )
        }
        7 => {
            let c = capacity_or_return!(u, "write_req_capacity");
            let fits = c.get() <= 8;
            judge(
                "WritePlan::try_with_capacity",
                WritePlan::try_with_capacity(c),
                fits,
                |p| ensure(p.offsets().len() == c.get() + 1, || "offsets".into()),
            )
        }
        8 => {
            let c = capacity_or_return!(u, "write_entry_capacity");
            let n = c.get();
            let parts: Vec<Vec<i64>> = (0..5).map(|_| small_vec(u, n)).collect::<Result<_>>()?;
            let [a, b, d, e, f] = <[Vec<i64>; 5]>::try_from(parts).expect("five");
            if u.ratio(1, 2)? {
                let ok = [&a, &b, &d].iter().all(|p| p.len() == n);
                judge(
                    "WriteInputs::from_parts",
                    WriteInputs::from_parts(c, a, b, d),
                    ok,
                    |i| ensure(i.input_ids().len() == n, || "parts".into()),
                )
            } else {
                let ok = [&a, &b, &d, &e, &f].iter().all(|p| p.len() == n);
                judge(
                    "WriteInputs::from_parts_with_expected",
                    WriteInputs::from_parts_with_expected(c, a, b, d, e, f),
                    ok,
                    |i| ensure(i.expected_tokens().len() == n, || "parts".into()),
                )
            }
        }
        9 => {
            let c = capacity_or_return!(u, "write_entry_capacity");
            let fits = c.get() <= 8;
            let r = WriteInputs::try_with_capacity(c).and_then(|i| i.try_with_input_assert());
            judge("WriteInputs::try_with_capacity", r, fits, |i| {
                ensure(i.out_cache_loc().iter().all(|&x| x == -1), || {
                    "out_cache_loc not -1".into()
                })
            })
        }
        10 => {
            let c = capacity_or_return!(u, "slots");
            let stride = *u.choose(&[
                0usize,
                8,
                24,
                31,
                32,
                33,
                40,
                64,
                1 << 40,
                usize::MAX,
                usize::MAX - 7,
            ])?;
            let len = if c.get().saturating_mul(stride) <= 512 && u.ratio(3, 4)? {
                c.get() * stride
            } else {
                u.int_in_range(0..=100)?
            };
            let ok = stride >= 32 && stride % 8 == 0 && c.get().checked_mul(stride) == Some(len);
            judge(
                "CanaryBuffer::from_bytes",
                CanaryBuffer::from_bytes(c, stride, vec![0; len]),
                ok,
                |b| {
                    ensure(
                        b.num_slots() == c.get() && b.stride().get() == stride,
                        || "shape".into(),
                    )?;
                    // Reading and writing slots at and past the end.
                    let mut b = b.clone();
                    for s in [0, c.get() - 1, c.get(), usize::MAX] {
                        let inside = s < c.get();
                        ensure(b.slot(s).is_some() == inside, || format!("slot({s})"))?;
                        match b.set_slot(s, Default::default()) {
                            Ok(()) => ensure(inside, || format!("set_slot({s}) past the end"))?,
                            Err(e) => {
                                ensure(!inside, || format!("set_slot({s}): {e}"))?;
                                error_label("CanaryBuffer::set_slot", &e)?;
                            }
                        }
                    }
                    Ok(())
                },
            )
        }
        11 => {
            let c = capacity_or_return!(u, "slots");
            let stride = SlotStride::new(*u.choose(&[32usize, 40, 1 << 40])?);
            let stride = match stride {
                Ok(s) => s,
                Err(e) => return Ok(Err(format!("SlotStride::new rejected a good stride: {e}"))),
            };
            let fits = c.get().saturating_mul(stride.get()) <= 8 * 40;
            let r = if u.ratio(1, 2)? {
                CanaryBuffer::try_with_stride(c, stride)
            } else {
                CanaryBuffer::try_with_capacity(c)
            };
            let fits = fits || (r.is_ok() && c.get() <= 8);
            judge("CanaryBuffer::try_with_stride", r, fits, |b| {
                ensure(b.num_slots() == c.get(), || "slots".into())
            })
        }
        12 => {
            let bytes = size(u)?;
            let ok = bytes >= 32 && bytes % 8 == 0;
            let r = SlotStride::new(bytes);
            if let Err(e) = &r {
                let message = e.to_string();
                if !message.contains(&bytes.to_string()) {
                    return Ok(Err(format!(
                        "SlotStride::new({bytes}): {message:?} does not name it"
                    )));
                }
            }
            judge("SlotStride::new", r, ok, |s| {
                ensure(s.get() == bytes, || "stride".into())
            })
        }
        13 => {
            let c = capacity_or_return!(u, "ring_rows");
            let n = c.get();
            let len = if n <= 8 && u.ratio(3, 4)? {
                n * 8
            } else {
                u.int_in_range(0..=70)?
            };
            let wi = val(u, -1, 10)? as i32;
            let ok = n.checked_mul(8) == Some(len);
            let r = ViolationRing::from_parts(c, vec![7; len], wi);
            judge("ViolationRing::from_parts", r, ok, |ring| {
                let stored = usize::try_from(wi).unwrap_or(0).min(n);
                let dropped = u64::try_from(wi).unwrap_or(0).saturating_sub(n as u64);
                ensure(
                    ring.write_index() == wi
                        && ring.stored_len() == stored
                        && ring.dropped() == dropped
                        && ring.raw_rows().len() == stored,
                    || {
                        format!(
                            "ring of {n} at {wi}: stored {} dropped {}",
                            ring.stored_len(),
                            ring.dropped()
                        )
                    },
                )
            })
        }
        14 => {
            let c = capacity_or_return!(u, "ring_rows");
            let fits = c.get() <= 8;
            judge(
                "ViolationRing::try_with_capacity",
                ViolationRing::try_with_capacity(c),
                fits,
                |r| ensure(r.write_index() == 0, || "index".into()),
            )
        }
        15 => real_kv_source(u)?,
        16 => {
            let knobs = EngineKnobs {
                max_bs: size(u)?,
                tokens_per_req: size(u)?,
                max_extend_tokens: size(u)?,
                pool_slots: size(u)?,
                verify: match u.int_in_range(0..=3)? {
                    0 => VerifyCapacityRule::PoolSlots,
                    1 => VerifyCapacityRule::MaxSeqLen {
                        max_seq_len: size(u)?,
                    },
                    2 => VerifyCapacityRule::TokensPerForward,
                    _ => VerifyCapacityRule::Exact(size(u)?),
                },
            };
            let derived = (
                knobs.verify_capacity(),
                knobs.write_req_capacity(),
                knobs.write_entry_capacity(),
            );
            for e in [&derived.0, &derived.1, &derived.2]
                .into_iter()
                .filter_map(|r| r.as_ref().err())
            {
                or_fail!(error_label("EngineKnobs", e));
            }
            let shape = match Shape::unchecked(&knobs) {
                Ok(shape) => shape,
                Err(e) => return Ok(error_label("Shape::unchecked", &e)),
            };
            let (v, w, e) = (derived.0.unwrap(), derived.1.unwrap(), derived.2.unwrap());
            let small = |n: usize| n <= 200;
            let r = shape
                .try_verify_plan()
                .map(|_| ())
                .and_then(|_| shape.try_write_plan().map(|_| ()))
                .and_then(|_| shape.try_write_inputs().map(|_| ()));
            let branded = Shape::branded(&knobs, |s| {
                s.try_verify_plan().map(|p| p.slot_indices().len())
            });
            match &branded {
                Ok(Ok(n)) => or_fail!(ensure(*n == v, || format!(
                    "branded verify plan of {n}, knobs say {v}"
                ))),
                Ok(Err(e)) | Err(e) => {
                    or_fail!(error_label("Shape::branded", e));
                }
            }
            if u.ratio(1, 2)? {
                let slots = capacity_or_return!(u, "slots");
                let ring = capacity_or_return!(u, "ring_rows");
                // The canary allocates plans and buffers; write inputs (`e`) are the caller's.
                let _ = e;
                let fits = small(v) && small(w) && small(slots.get()) && small(ring.get());
                let what = format!(
                    "Canary::try_full ({v}, {w}, {e}, {}, {})",
                    slots.get(),
                    ring.get()
                );
                match judge(
                    "Canary::try_full",
                    Canary::try_full(shape, slots, ring),
                    fits,
                    |_| Ok(()),
                ) {
                    Err(message) => Err(format!("{what}: {message}")),
                    ok => ok,
                }
            } else {
                judge("Shape::try_*", r, small(v) && small(w) && small(e), |_| {
                    Ok(())
                })
            }
        }
        _ => {
            let n = u.int_in_range(0..=6)?;
            let kv = vec![0u8; 64];
            let srcs: Vec<RealKvSource<'_>> = (0..n)
                .map(|_| {
                    RealKvSource::new(&kv, 32, RealKvParams::new(2, 16, 16)).expect("a good source")
                })
                .collect();
            judge(
                "RealKvSources::try_from_slice",
                RealKvSources::try_from_slice(&srcs),
                n <= 4,
                |s| ensure(s.len() == n, || "len".into()),
            )
        }
    })
}

/// `RealKvSource::new`, `from_shape` and `strided` with random parameters; an accepted source
/// hashes every one of its slots without a panic.
fn real_kv_source(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let len = *u.choose(&[0usize, 16, 64, 96, 256, 1000, 1024])?;
    let bytes = vec![3u8; len];
    let params = RealKvParams::new(val(u, 1, 4)?, val(u, 0, 64)?, val(u, 0, 64)?);
    let r = match u.int_in_range(0..=2)? {
        0 => RealKvSource::new(&bytes, size(u)?.max(u.int_in_range(0..=128)?), params),
        1 => {
            let shape: Vec<usize> = (0..u.int_in_range(0..=3)?)
                .map(|_| size(u).map(|s| s.saturating_mul(16)))
                .collect::<Result<_>>()?;
            RealKvSource::from_shape(&bytes, &shape, params)
        }
        _ => {
            let layout = RowLayout {
                num_rows: size(u)?,
                row_bytes: *u.choose(&[0usize, 16, 32, 48, 64, 1 << 40, usize::MAX])?,
                row_stride_bytes: *u.choose(&[0usize, 16, 32, 48, 64, 80, 1 << 40, usize::MAX])?,
            };
            RealKvSource::strided(&bytes, layout, params)
        }
    };
    Ok(match r {
        Err(e) => error_label("RealKvSource", &e),
        Ok(src) => {
            let end = src.num_rows().checked_sub(1).map(|last| {
                last.checked_mul(src.row_stride_bytes())
                    .and_then(|start| start.checked_add(src.row_bytes()))
            });
            if end.is_some_and(|end| end.is_none_or(|end| end > len))
                || src.page_size().saturating_mul(src.num_bytes_per_token()) > src.row_bytes()
                || src.read_bytes() > src.num_bytes_per_token()
            {
                return Ok(Err(format!(
                    "RealKvSource accepted a layout past its {len} bytes: {src:?}"
                )));
            }
            let kv = RealKv::new(RealKvHashMode::All, RealKvSources::from_array([src]));
            for s in 0..src.num_slots().min(64) {
                let _ = kv.hash(s);
            }
            Ok("RealKvSource ok".to_owned())
        }
    })
}
