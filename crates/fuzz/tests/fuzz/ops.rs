//! The four ops: `cpu::plan`, `cpu::write`, `cpu::verify`, `cpu::scatter_req_token_ids`.

use crate::gen::{cap, cap_near, count32, ensure, error_label, len_near, val, val32, vals};
use crate::Verdict;
use arbitrary::{Result, Unstructured};
use kv_canary::hash::{chain_step, CHAIN_HEAD};
use kv_canary::{
    cpu, Batch, CanaryBuffer, CanarySlot, Capacity, ChainPositionAssert, ExpectedTokenTable,
    ExpectedTokens, FailReason, Group, HealthCounters, LaunchSettings, LaunchTag, PlanInputs,
    PositionOffset, RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources, ReqToToken,
    Shape, Swa, TokenCheck, TokenCheckOff, TokenCheckOn, UncheckedCapacity, UncheckedShape,
    VerifyEntry, VerifyPlan, ViolationRing, WriteInputAssert, WriteInputs, WritePlan,
};

type Cap = UncheckedCapacity;

fn shape(v: usize, w: usize, e: usize) -> UncheckedShape {
    Shape::from_capacities(
        cap("verify_capacity", v),
        cap("write_req_capacity", w),
        cap("write_entry_capacity", e),
    )
}

// ---------------------------------------------------------------------------------------------
// plan

/// `cpu::plan` on a random batch, table, group (FULL or SWA with a random LUT), expected-token
/// pool and position offset, into plans pre-filled with garbage.
pub fn plan(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let v = u.int_in_range(1..=24)?;
    let w = u.int_in_range(1..=6)?;
    let shape = shape(v, w, 8);
    let vb = cap_near(u, "verify", v)?;
    let wb = cap_near(u, "write", w)?;
    let verify = VerifyPlan::from_parts(
        cap("verify_capacity", vb),
        vals(u, vb, -1, 40)?,
        vals(u, vb, -1, 40)?,
        vals(u, vb, -1, 40)?,
        vals(u, vb, -1, 40)?,
        count32(u, 0, vb as i32)?,
        count32(u, 0, 1)?,
    )
    .expect("lengths match");
    let write = WritePlan::from_parts(
        cap("write_req_capacity", wb),
        vals(u, wb + 1, 0, 10)?,
        vals(u, wb, -1, 40)?,
        count32(u, 0, wb as i32)?,
    )
    .expect("lengths match");
    let rows = u.int_in_range(1..=5)?;
    let width = u.int_in_range(1..=10)?;
    let data = (0..rows * width)
        .map(|_| val32(u, 0, 40))
        .collect::<Result<Vec<i32>>>()?;
    let table = ReqToToken::from_vec(rows, width, data).expect("rows x width cells");
    let bs = u.int_in_range(0..=w + 1)?;
    let batch = Batch::try_from_columns(
        vals(u, bs, 0, rows as i64)?,
        vals(u, bs, 0, width as i64)?,
        vals(u, bs, 0, 3)?,
    )
    .expect("columns of one length");
    let offset = if u.ratio(1, 4)? {
        PositionOffset::EagleDraft
    } else {
        PositionOffset::Target
    };
    let inputs = PlanInputs::full(&batch, &table).with_offset(offset);
    let pool_rows = u.int_in_range(1..=5)?;
    let pool_width = u.int_in_range(1..=10)?;
    let pool_data = (0..pool_rows * pool_width)
        .map(|_| val32(u, -1, 100))
        .collect::<Result<Vec<i32>>>()?;
    let pool = ExpectedTokenTable::from_vec(pool_rows, pool_width, pool_data).expect("cells");
    let valid_len = len_near(u, bs)?;
    let valid_lens = vals(u, valid_len, 0, width as i64 + 1)?;
    let window = if u.ratio(1, 8)? {
        *u.choose(&[u64::MAX, 1 << 40, i64::MAX as u64 + 1])?
    } else {
        u.int_in_range(0..=12)?
    };
    let lut_len = u.int_in_range(0..=44)?;
    let lut = vals(u, lut_len, -1, 40)?;
    let swa = Swa::window(window).with_lut(&lut);
    let with_pool = u.ratio(1, 3)?;
    let group_is_swa = u.ratio(1, 3)?;
    Ok(match (group_is_swa, with_pool) {
        (false, false) => check_plan(&shape, &inputs, verify, write, &table),
        (false, true) => check_plan(
            &shape,
            &inputs.with_expected(pool.with_valid_lens(&valid_lens)),
            verify,
            write,
            &table,
        ),
        (true, false) => check_plan(&shape, &inputs.with_group(swa), verify, write, &table),
        (true, true) => check_plan(
            &shape,
            &inputs
                .with_group(swa)
                .with_expected(pool.with_valid_lens(&valid_lens)),
            verify,
            write,
            &table,
        ),
    })
}

fn check_plan<G: Group, X: ExpectedTokens>(
    shape: &UncheckedShape,
    inputs: &PlanInputs<'_, G, X>,
    mut verify: VerifyPlan<Cap>,
    mut write: WritePlan<Cap>,
    table: &ReqToToken,
) -> Verdict {
    let (verify_before, write_before) = (verify.clone(), write.clone());
    let s = match cpu::plan(shape, inputs, &mut verify, &mut write) {
        Err(e) => {
            ensure(verify == verify_before, || {
                format!("plan: {e} but the verify plan changed")
            })?;
            ensure(write == write_before, || {
                format!("plan: {e} but the write plan changed")
            })?;
            return error_label("plan", &e);
        }
        Ok(s) => s,
    };
    let capacity = verify.capacity().get();
    let batch = inputs.batch;
    let bs = batch.len();
    let window = inputs.group.window();
    // The documented relations of the summary and the outputs.
    ensure(s.bs == bs, || {
        format!("plan: summary bs {} for a batch of {bs}", s.bs)
    })?;
    ensure(
        s.enabled == (s.requested_entries <= capacity as u64),
        || {
            format!(
                "plan: enabled {} with {} requested of {capacity}",
                s.enabled, s.requested_entries
            )
        },
    )?;
    ensure(
        s.verify_num_valid as u64 == s.requested_entries.min(capacity as u64),
        || {
            format!(
                "plan: verify_num_valid {} != min({}, {capacity})",
                s.verify_num_valid, s.requested_entries
            )
        },
    )?;
    ensure(s.verify_num_valid <= capacity, || {
        "plan: num_valid above the capacity".into()
    })?;
    ensure(
        verify.num_valid() as usize == s.verify_num_valid
            && verify.enable() == i32::from(s.enabled),
        || {
            format!(
                "plan: the plan holds num_valid {} enable {}, the summary {s:?}",
                verify.num_valid(),
                verify.enable()
            )
        },
    )?;
    ensure(write.num_valid_reqs() == bs as i32, || {
        format!(
            "plan: write_num_valid_reqs {} for bs {bs}",
            write.num_valid_reqs()
        )
    })?;
    let offsets = &write.offsets()[..=bs];
    ensure(
        offsets[0] == 0 && offsets.windows(2).all(|p| p[0] <= p[1]),
        || format!("plan: write offsets {offsets:?} do not start at 0 and grow"),
    )?;
    ensure(offsets[bs] as u64 == s.write_tokens, || {
        format!(
            "plan: offsets[bs] {} but write_tokens {}",
            offsets[bs], s.write_tokens
        )
    })?;
    // An independent count of the entries and tokens (spec §3.2).
    let mut requested = 0u64;
    let mut tokens = 0i64;
    let mut expected_slots = Vec::new();
    for row in batch.rows().filter(|r| r.is_active()) {
        tokens += row.extend_len.max(0);
        if row.prefix_len > 0 {
            let prefix = row.prefix_len as u64;
            let n = if window > 0 {
                prefix.min(window)
            } else {
                prefix
            };
            requested += n;
            let cells = table
                .row(row.req_pool_index as usize)
                .expect("validated row");
            let start = (prefix - n) as usize;
            expected_slots.extend(cells[start..prefix as usize].iter().map(|&x| i64::from(x)));
        }
    }
    ensure(requested == s.requested_entries, || {
        format!(
            "plan: requested_entries {} but the batch asks for {requested}",
            s.requested_entries
        )
    })?;
    ensure(tokens as u64 == s.write_tokens, || {
        format!(
            "plan: write_tokens {} but the batch writes {tokens}",
            s.write_tokens
        )
    })?;
    if s.enabled && inputs.group.lut().is_none() {
        let got = &verify.slot_indices()[..s.verify_num_valid];
        ensure(got == expected_slots.as_slice(), || {
            format!("plan: verify slots {got:?}, the table's prefixes {expected_slots:?}")
        })?;
    }
    Ok(format!(
        "plan ok enabled={} swa={} pool={}",
        s.enabled,
        inputs.group.lut().is_some(),
        inputs.expected.pool().is_some()
    ))
}

// ---------------------------------------------------------------------------------------------
// the launch state write and verify share

/// Everything a write or verify launch mutates, cloned before the call.
#[derive(Clone, PartialEq)]
struct LaunchState {
    canary: CanaryBuffer<Cap>,
    ring: ViolationRing<Cap>,
    counters: HealthCounters,
}

fn launch_state(u: &mut Unstructured<'_>) -> Result<LaunchState> {
    let slots = u.int_in_range(1..=40)?;
    let stride = *u.choose(&[32usize, 32, 32, 40, 64])?;
    let bytes = if u.ratio(1, 2)? {
        vec![0u8; slots * stride]
    } else {
        let mut b = vec![0u8; slots * stride];
        u.fill_buffer(&mut b)?;
        b
    };
    let canary = CanaryBuffer::from_bytes(cap("slots", slots), stride, bytes).expect("bytes");
    let ring_rows = u.int_in_range(1..=4)?;
    let write_index = match u.int_in_range(0..=7)? {
        0 => i32::MAX - u.int_in_range(0..=3)?,
        1 => -u.int_in_range(1..=3)?,
        2 => u.int_in_range(0..=6)?,
        _ => 0,
    };
    let ring = ViolationRing::from_parts(
        cap("ring", ring_rows),
        vals(u, ring_rows * 8, -1, 9)?,
        write_index,
    )
    .expect("rows");
    let counters = HealthCounters::from_parts(val(u, 0, 9)?, val(u, 0, 9)?);
    Ok(LaunchState {
        canary,
        ring,
        counters,
    })
}

/// A launch tag, a chain-position flag and (sometimes) 1-2 real-KV sources over `kv`.
fn launch<'a>(
    u: &mut Unstructured<'_>,
    kv: &'a [Vec<u8>],
    labels: &mut Vec<Verdict>,
) -> Result<LaunchSettings<'a>> {
    let tag = LaunchTag::from_value(u.int_in_range(0..=15)?).unwrap_or(LaunchTag::HeadKFull);
    let flag = ChainPositionAssert::from_flag(*u.choose(&[0, 1, 1, -1, i32::MAX])?);
    let mut sources = Vec::new();
    for bytes in kv {
        let params = if u.ratio(1, 8)? {
            RealKvParams::new(val(u, 0, 4)?, val(u, 0, 48)?, val(u, 0, 48)?)
        } else {
            let nbpt = *u.choose(&[16i64, 32])?;
            RealKvParams::new(u.int_in_range(1..=3)?, nbpt, *u.choose(&[16i64, nbpt])?)
        };
        let row_bytes = if u.ratio(1, 8)? {
            u.int_in_range(0..=200)?
        } else {
            params
                .page_size
                .clamp(1, 4)
                .saturating_mul(params.num_bytes_per_token.clamp(16, 64)) as usize
        };
        match RealKvSource::new(bytes, row_bytes, params) {
            Ok(src) => sources.push(src),
            Err(e) => labels.push(error_label("real_kv_source", &e)),
        }
    }
    let mode = match u.int_in_range(0..=2)? {
        0 => RealKvHashMode::None,
        1 => RealKvHashMode::Partial,
        _ => RealKvHashMode::All,
    };
    let sources = RealKvSources::try_from_slice(&sources).expect("at most two");
    Ok(LaunchSettings::new(tag)
        .with_chain_position_assert(flag)
        .with_real_kv(RealKv::new(mode, sources)))
}

/// 0-2 KV byte buffers for [`launch`].
fn kv_bytes(u: &mut Unstructured<'_>) -> Result<Vec<Vec<u8>>> {
    let n = *u.choose(&[0usize, 0, 1, 2])?;
    (0..n)
        .map(|_| {
            let len = *u.choose(&[0usize, 96, 256, 640, 1024, 1000])?;
            let mut b = vec![0u8; len];
            u.fill_buffer(&mut b)?;
            Ok(b)
        })
        .collect()
}

/// Checks the parts of a launch that do not depend on the op: the kernel counter moved by one,
/// the slot counter by `slots`, the ring's write index by `recorded` (past the capacity too,
/// wrapping like the device's `i32` atomicAdd), and the rows outside the new index range kept.
fn check_launch_accounting(
    op: &str,
    before: &LaunchState,
    after: &LaunchState,
    slots: u64,
    recorded: u64,
) -> std::result::Result<(), String> {
    let (b, a) = (&before.counters, &after.counters);
    ensure(
        a.kernel_run_counter() == b.kernel_run_counter().wrapping_add(1),
        || {
            format!(
                "{op}: kernel_run_counter {} -> {}",
                b.kernel_run_counter(),
                a.kernel_run_counter()
            )
        },
    )?;
    ensure(
        a.slot_run_counter() == b.slot_run_counter().wrapping_add(slots as i64),
        || {
            format!(
                "{op}: slot_run_counter {} -> {} for {slots} slots",
                b.slot_run_counter(),
                a.slot_run_counter()
            )
        },
    )?;
    let (wi0, wi1) = (before.ring.write_index(), after.ring.write_index());
    ensure(wi1 == wi0.wrapping_add(recorded as i32), || {
        format!("{op}: write index {wi0} -> {wi1} for {recorded} rows")
    })?;
    // Rows are stored at [wi0, wi0 + recorded) only (those inside the ring).
    let cap = before.ring.capacity().get();
    for row in 0..cap {
        let written = (0..recorded).any(|k| i64::from(wi0) + k as i64 == row as i64);
        let (r0, r1) = (
            &before.ring.rows_flat()[row * 8..row * 8 + 8],
            &after.ring.rows_flat()[row * 8..row * 8 + 8],
        );
        ensure(written || r0 == r1, || {
            format!("{op}: ring row {row} changed outside [{wi0}, +{recorded})")
        })?;
    }
    ensure(
        after.ring.stored_len() as u64 + after.ring.dropped() >= u64::try_from(wi1).unwrap_or(0),
        || {
            format!(
                "{op}: stored {} + dropped {} < write index {wi1}",
                after.ring.stored_len(),
                after.ring.dropped()
            )
        },
    )?;
    Ok(())
}

/// The ring after `before` records `rows` (stored at indices inside the ring, counted always).
fn ring_after(before: &ViolationRing<Cap>, rows: &[[i64; 8]]) -> (Vec<i64>, i32) {
    let mut flat = before.rows_flat().to_vec();
    let mut index = before.write_index();
    for row in rows {
        if let Ok(at) = usize::try_from(index) {
            if at < before.capacity().get() {
                flat[at * 8..at * 8 + 8].copy_from_slice(row);
            }
        }
        index = index.wrapping_add(1);
    }
    (flat, index)
}

/// Compares the ring with the model's rows.
fn check_ring(
    op: &str,
    before: &LaunchState,
    after: &LaunchState,
    rows: &[[i64; 8]],
) -> std::result::Result<(), String> {
    let (flat, index) = ring_after(&before.ring, rows);
    ensure(
        after.ring.rows_flat() == flat.as_slice() && after.ring.write_index() == index,
        || {
            format!(
                "{op}: the ring differs from the sequential model's {} rows",
                rows.len()
            )
        },
    )
}

// ---------------------------------------------------------------------------------------------
// write

/// `cpu::write` with a random plan (offsets good or garbage), inputs (assert on or off), canary
/// buffer, ring (near `i32::MAX` too), counters (near `i64::MAX` too) and real-KV sources.
pub fn write(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let w = u.int_in_range(1..=5)?;
    let e = u.int_in_range(1..=20)?;
    let shape = shape(1, w, e);
    let wb = cap_near(u, "write", w)?;
    let eb = cap_near(u, "entries", e)?;
    let state = launch_state(u)?;
    let slots = state.canary.num_slots() as i64;
    let offsets = if u.ratio(1, 4)? {
        vals(u, wb + 1, 0, eb as i64)?
    } else {
        let mut at = 0i64;
        let mut offsets = vec![0];
        for _ in 0..wb {
            at = (at + u.int_in_range(0..=4)?).min(eb as i64);
            offsets.push(at);
        }
        offsets
    };
    let plan = WritePlan::from_parts(
        cap("write_req_capacity", wb),
        offsets,
        vals(u, wb, -1, slots)?,
        count32(u, 0, wb as i32)?,
    )
    .expect("lengths match");
    let ids = vals(u, eb, 0, 100)?;
    let positions = vals(u, eb, 0, 20)?;
    let locs = vals(u, eb, -1, slots)?;
    let kv = kv_bytes(u)?;
    let mut labels = Vec::new();
    let launch = launch(u, &kv, &mut labels)?;
    if let Some(bad) = labels.into_iter().find(|l| l.is_err()) {
        return Ok(bad);
    }
    let inputs_cap = cap("write_entry_capacity", eb);
    Ok(if u.ratio(1, 3)? {
        let inputs = WriteInputs::from_parts_with_expected(
            inputs_cap,
            ids,
            positions,
            locs,
            vals(u, eb, 0, 100)?,
            vals(u, eb, 0, 20)?,
        )
        .expect("lengths match");
        let expected = (
            inputs.expected_tokens().to_vec(),
            inputs.expected_positions().to_vec(),
        );
        check_write(&shape, &plan, &inputs, Some(&expected), &launch, state)
    } else {
        let inputs = WriteInputs::from_parts(inputs_cap, ids, positions, locs).expect("lengths");
        check_write(&shape, &plan, &inputs, None, &launch, state)
    })
}

fn check_write<A: WriteInputAssert>(
    shape: &UncheckedShape,
    plan: &WritePlan<Cap>,
    inputs: &WriteInputs<Cap, A>,
    expected: Option<&(Vec<i64>, Vec<i64>)>,
    launch: &LaunchSettings<'_>,
    before: LaunchState,
) -> Verdict {
    let mut after = before.clone();
    let result = cpu::write(
        shape,
        plan,
        inputs,
        launch,
        &mut after.canary,
        &mut after.ring,
        &mut after.counters,
    );
    let s = match result {
        Err(e) => {
            ensure(after == before, || {
                format!("write: {e} but an output changed")
            })?;
            return error_label("write", &e);
        }
        Ok(s) => s,
    };
    check_launch_accounting("write", &before, &after, s.written, s.violations)?;
    // Which entries the op stamps (spec §4): requests [0, clamp(num_valid_reqs, 0, W)), their
    // entries with a slot >= 0.
    let active = plan.num_valid_reqs().clamp(0, plan.capacity().get() as i32) as usize;
    let offsets = plan.offsets();
    let mut stamped = std::collections::BTreeSet::new();
    let mut written = 0u64;
    let mut requests = 0;
    for r in 0..active {
        let range = offsets[r] as usize..offsets[r + 1] as usize;
        requests += usize::from(!range.is_empty());
        for i in range {
            let slot = inputs.out_cache_loc()[i];
            if slot >= 0 {
                written += 1;
                stamped.insert(slot as usize);
            }
        }
    }
    ensure(s.written == written && s.requests == requests, || {
        format!("write: summary {s:?}, the plan stamps {written} entries of {requests} requests")
    })?;
    let stride = before.canary.stride().get();
    for slot in 0..before.canary.num_slots() {
        let range = slot * stride..(slot + 1) * stride;
        let (b, a) = (
            &before.canary.as_bytes()[range.clone()],
            &after.canary.as_bytes()[range],
        );
        let kept = if stamped.contains(&slot) {
            b[32..] == a[32..]
        } else {
            b == a
        };
        ensure(kept, || {
            format!("write: slot {slot} changed where no op writes (stamped {stamped:?})")
        })?;
    }
    // A sequential model of spec §4: the records and the ring rows.
    let mut model = before.canary.clone();
    let mut rows = Vec::new();
    let tag = launch.tag.value();
    for r in 0..active {
        let range = offsets[r] as usize..offsets[r + 1] as usize;
        if range.is_empty() {
            continue;
        }
        let seed = plan.seed_slot_indices()[r];
        let seed_record = usize::try_from(seed)
            .ok()
            .map(|s| model.slot(s).expect("validated"));
        let mut running = seed_record.map_or(CHAIN_HEAD, |rec| rec.chain_hash());
        let chain_assert = seed_record.is_some() && launch.chain_position_assert.is_on();
        let mut prev_pos = seed_record.map_or(0, |rec| rec.position);
        for i in range {
            let slot = inputs.out_cache_loc()[i];
            if slot < 0 {
                continue;
            }
            let (token, pos) = (inputs.input_ids()[i], inputs.positions()[i]);
            if let Some((tokens, positions)) = expected {
                let (et, ep) = (tokens[i], positions[i]);
                let bits = FailReason::NONE
                    .with_if(FailReason::WRITE_TOKEN_MISMATCH, token != et)
                    .with_if(FailReason::WRITE_POSITION_MISMATCH, pos != ep);
                if !bits.is_empty() {
                    rows.push([tag, slot, pos, token, et, running, ep, bits.bits()]);
                }
            }
            if chain_assert {
                let want = prev_pos.wrapping_add(1);
                if pos != want {
                    let bits = FailReason::WRITE_POSITION_MISMATCH.bits();
                    rows.push([tag, slot, pos, token, token, running, want, bits]);
                }
                prev_pos = pos;
            }
            let record = CanarySlot {
                token,
                position: pos,
                prev_hash: running,
                real_kv_hash: launch.real_kv.hash(slot as usize),
            };
            model.set_slot(slot as usize, record).expect("validated");
            running = chain_step(running, token, pos);
        }
    }
    ensure(model == after.canary, || {
        "write: the canary differs from the sequential model".to_owned()
    })?;
    ensure(rows.len() as u64 == s.violations, || {
        format!(
            "write: {} violations, the model records {}",
            s.violations,
            rows.len()
        )
    })?;
    check_ring("write", &before, &after, &rows)?;
    Ok(format!(
        "write ok assert={} violations={} real_kv={}",
        A::ENABLED,
        s.violations > 0,
        launch.real_kv.is_active()
    ))
}

// ---------------------------------------------------------------------------------------------
// verify

/// `cpu::verify` with a random plan over a random canary buffer, or over one stamped with the
/// plan's own chain by `cpu::write` and then tampered with, with the token check on or off.
pub fn verify(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let v = u.int_in_range(1..=20)?;
    let shape = self::shape(v, 1, v);
    let vb = cap_near(u, "verify", v)?;
    let mut state = launch_state(u)?;
    let slots = state.canary.num_slots() as i64;
    let n = u.int_in_range(0..=vb)?;
    let entries: Vec<VerifyEntry> = if u.ratio(1, 2)? {
        // One chain: consecutive positions, each entry's predecessor the previous slot.
        let mut prev = -1;
        (0..n)
            .map(|i| {
                let slot = val(u, 0, slots - 1)?;
                let e = VerifyEntry {
                    slot,
                    expected_token: val(u, -1, 3)?,
                    expected_position: i as i64,
                    prev_slot: prev,
                };
                prev = slot;
                Ok(e)
            })
            .collect::<Result<_>>()?
    } else {
        (0..n)
            .map(|_| {
                Ok(VerifyEntry {
                    slot: val(u, -1, slots)?,
                    expected_token: val(u, -1, 3)?,
                    expected_position: val(u, -1, 20)?,
                    prev_slot: val(u, -1, slots)?,
                })
            })
            .collect::<Result<_>>()?
    };
    let mut plan = VerifyPlan::try_with_capacity(cap("verify_capacity", vb)).expect("small");
    plan.set_entries(&entries).expect("n <= capacity");
    if u.ratio(1, 4)? {
        plan.parts_mut();
        let p = plan.parts_mut();
        *p.num_valid = count32(u, 0, vb as i32)?;
        *p.enable = *u.choose(&[0, 1, 1, 2, -1])?;
    }
    if u.ratio(1, 2)? {
        // Stamp the chain with the write op, tokens 0..4, then tamper a few bytes.
        let stamp = WriteInputs::from_parts(
            cap("e", n.max(1)),
            (0..n.max(1)).map(|i| i as i64 % 4).collect(),
            (0..n.max(1) as i64).collect(),
            (0..n.max(1))
                .map(|i| entries.get(i).map_or(-1, |e| e.slot))
                .map(|s| if (0..slots).contains(&s) { s } else { -1 })
                .collect(),
        )
        .expect("lengths");
        let stamp_plan =
            WritePlan::from_parts(cap("w", 1), vec![0, n as i64], vec![-1], 1).expect("lengths");
        let _ = cpu::write(
            &self::shape(1, 1, n.max(1)),
            &stamp_plan,
            &stamp,
            &LaunchSettings::new(LaunchTag::HeadKFull),
            &mut state.canary,
            &mut state.ring,
            &mut state.counters,
        );
        for _ in 0..u.int_in_range(0..=3)? {
            let bytes = state.canary.as_bytes_mut();
            let i = u.int_in_range(0..=bytes.len() - 1)?;
            bytes[i] ^= u.int_in_range(1..=255)?;
        }
    }
    let kv = kv_bytes(u)?;
    let mut labels = Vec::new();
    let launch = launch(u, &kv, &mut labels)?;
    if let Some(bad) = labels.into_iter().find(|l| l.is_err()) {
        return Ok(bad);
    }
    Ok(if u.ratio(1, 2)? {
        check_verify(&shape, &plan, TokenCheckOn, &launch, state)
    } else {
        check_verify(&shape, &plan, TokenCheckOff, &launch, state)
    })
}

/// A checksum of a buffer's bytes (FNV-1a), so that "byte-identical" is also a number.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn check_verify<K: TokenCheck>(
    shape: &UncheckedShape,
    plan: &VerifyPlan<Cap>,
    check: K,
    launch: &LaunchSettings<'_>,
    before: LaunchState,
) -> Verdict {
    let sum = checksum(before.canary.as_bytes());
    let mut after = before.clone();
    let result = cpu::verify(
        shape,
        plan,
        check,
        launch,
        &after.canary,
        &mut after.ring,
        &mut after.counters,
    );
    ensure(
        checksum(after.canary.as_bytes()) == sum && after.canary == before.canary,
        || "verify: the canary buffer changed".to_owned(),
    )?;
    let s = match result {
        Err(e) => {
            ensure(after == before, || {
                format!("verify: {e} but an output changed")
            })?;
            return error_label("verify", &e);
        }
        Ok(s) => s,
    };
    let capacity = plan.capacity().get();
    let active = if plan.enable() != 0 {
        plan.num_valid().clamp(0, capacity as i32) as usize
    } else {
        0
    };
    ensure(
        s.enabled == (plan.enable() != 0) && s.entries == active,
        || {
            format!(
                "verify: summary {s:?} for num_valid {} enable {}",
                plan.num_valid(),
                plan.enable()
            )
        },
    )?;
    let checked = plan.slot_indices()[..active]
        .iter()
        .filter(|&&x| x != 0)
        .count();
    ensure(
        s.checked == checked && s.violations <= checked as u64,
        || format!("verify: summary {s:?}, {checked} non-padding entries"),
    )?;
    check_launch_accounting("verify", &before, &after, active as u64, s.violations)?;
    // A model of spec §5: one row per failing entry, in entry order.
    let canary = &before.canary;
    let mut rows = Vec::new();
    let tag = launch.tag.value();
    for i in 0..active {
        let slot = plan.slot_indices()[i];
        if slot == 0 {
            continue;
        }
        let stored = canary.slot(slot as usize).expect("validated");
        let prev = plan.prev_slot_indices()[i];
        let expected_chain = match prev {
            p if p < 0 => CHAIN_HEAD,
            0 => stored.prev_hash,
            p => canary.slot(p as usize).expect("validated").chain_hash(),
        };
        let et = if K::ENABLED {
            plan.expected_tokens()[i]
        } else {
            -1
        };
        let bits = FailReason::NONE
            .with_if(
                FailReason::VERIFY_CHAIN_HASH_MISMATCH,
                stored.prev_hash != expected_chain,
            )
            .with_if(
                FailReason::VERIFY_TOKEN_MISMATCH,
                et != -1 && stored.token != et,
            )
            .with_if(
                FailReason::VERIFY_POSITION_MISMATCH,
                stored.position != plan.expected_positions()[i],
            )
            .with_if(
                FailReason::VERIFY_REAL_KV_HASH_MISMATCH,
                stored.real_kv_hash != launch.real_kv.hash(slot as usize),
            );
        if !bits.is_empty() {
            rows.push([
                tag,
                slot,
                stored.position,
                stored.token,
                et,
                stored.prev_hash,
                expected_chain,
                bits.bits(),
            ]);
        }
    }
    ensure(rows.len() as u64 == s.violations, || {
        format!(
            "verify: {} violations, the model records {}",
            s.violations,
            rows.len()
        )
    })?;
    check_ring("verify", &before, &after, &rows)?;
    Ok(format!(
        "verify ok enabled={} token_check={} violations={} real_kv={}",
        s.enabled,
        K::ENABLED,
        s.violations > 0,
        launch.real_kv.is_active()
    ))
}

// ---------------------------------------------------------------------------------------------
// scatter

/// `cpu::scatter_req_token_ids` against a sequential model of spec §6.
pub fn scatter(u: &mut Unstructured<'_>) -> Result<Verdict> {
    let flat_len = u.int_in_range(0..=16)?;
    let flat = vals(u, flat_len, -5, 5)?;
    let bs = u.int_in_range(0..=5)?;
    let offsets = if u.ratio(1, 3)? {
        let n = len_near(u, bs + 1)?;
        vals(u, n, 0, flat_len as i64)?
    } else {
        let mut at = 0i64;
        let mut offsets = vec![0];
        for _ in 0..bs {
            at = (at + u.int_in_range(0..=4)?).min(flat_len as i64);
            offsets.push(at);
        }
        offsets
    };
    let rows = u.int_in_range(1..=4)?;
    let width = u.int_in_range(1..=6)?;
    let rpi = vals(u, bs, 0, rows as i64 - 1)?;
    let data = (0..rows * width)
        .map(|_| val32(u, -1, 9))
        .collect::<Result<Vec<i32>>>()?;
    let before = ExpectedTokenTable::from_vec(rows, width, data).expect("cells");
    let mut pool = before.clone();
    let s = match cpu::scatter_req_token_ids(&flat, &offsets, &rpi, &mut pool) {
        Err(e) => {
            return Ok(if pool != before {
                Err(format!("scatter: {e} but the pool changed"))
            } else {
                error_label("scatter", &e)
            })
        }
        Ok(s) => s,
    };
    let mut model = before.clone();
    let (mut rows_written, mut tokens) = (0, 0u64);
    for (r, &rp) in rpi.iter().enumerate() {
        let n = ((offsets[r + 1] - offsets[r]) as usize).min(width);
        if n == 0 {
            continue;
        }
        rows_written += 1;
        tokens += n as u64;
        let row = model.row_mut(rp as usize).expect("validated row");
        for (c, cell) in row[..n].iter_mut().enumerate() {
            *cell = flat[offsets[r] as usize + c] as i32;
        }
    }
    Ok(if pool != model {
        Err("scatter: the pool differs from the sequential model".to_owned())
    } else if (s.rows_written, s.tokens_written) != (rows_written, tokens) {
        Err(format!(
            "scatter: summary {s:?}, the model wrote {rows_written} rows, {tokens} tokens"
        ))
    } else {
        Ok(format!("scatter ok tokens={}", tokens > 0))
    })
}
