//! Nothing lost on the GPU (issue 11, item 5; the CPU side is `tests/nothing_lost.rs`):
//! verify leaves the device canary buffer byte-identical, the device ring's write index counts
//! every violation past its capacity, and the device outcomes of one slot written twice by one
//! request and of a seed slot written by another request of the same launch.

use crate::canary::{
    all_rows, on_gpu, random_verify_case, run_verify, run_write, same_state, KvSetup, State,
    VerifyCase, WriteCase,
};
use crate::{ensure, fail};
use kv_canary::backend::Cpu;
use kv_canary::cuda::{self, DeviceRealKv, DeviceRealKvSource, DeviceSettings, Gpu, Stream};
use kv_canary::{
    CanaryBuffer, CanarySlot, ChainPositionAssert, HealthCounters, LaunchTag, RowLayout,
    TokenCheckOff, TokenCheckOn, UncheckedCapacity, UncheckedShape, VerifyEntry, VerifyPlan,
    ViolationRing, WritePlan,
};

fn cap(what: &'static str, n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new(what, n.max(1)).unwrap()
}

/// FNV-1a over the bytes.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Verify through the device API (device canary, ring, counters; real-KV sources on the
/// device): the canary buffer's checksum before and after equal, the write index and counters
/// equal the CPU's, rings of 1-4 rows so that most cases overflow.
pub fn verify_checksum_and_ring_count(gpu: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(400);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let (mut folds, mut overflows, mut past, mut errors) = (0, 0, 0i64, 0);
    for seed in 0..cases {
        let mut rng = crate::rng::Rng::new(0x0105_7000 + seed);
        let mut c = random_verify_case(&mut rng, seed % 10 == 0);
        c.check = seed % 2 == 0;
        let ring_rows = rng.range(1, 4) as usize;
        c.state.ring = ViolationRing::from_parts(
            cap("ring", ring_rows),
            vec![0; ring_rows * 8],
            rng.pick(&[0, 0, 1, i32::MAX - 2]),
        )
        .map_err(fail("ring"))?;
        if seed % 7 == 0 && c.plan.active_len() > 0 {
            // A malformed entry: the launch records an error and must still not write.
            let n = c.state.buf.num_slots() as i64;
            c.plan.parts_mut().slot_indices[0] = n + 5;
        }
        let label = format!("verify checksum case seed {seed}");
        let mut cs = c.state.clone();
        let cpu = run_verify(&c, &Cpu, &mut cs);

        let before = checksum(c.state.buf.as_bytes());
        let dbuf = c.state.buf.to_device(gpu).map_err(fail("canary"))?;
        let dring = c.state.ring.to_device(gpu).map_err(fail("ring"))?;
        let dcounters = c.state.counters.to_device(gpu).map_err(fail("counters"))?;
        let dplan = c.plan.to_device(gpu).map_err(fail("plan"))?;
        let host_sources = c.kv.host_sources();
        let dbytes =
            c.kv.bytes
                .iter()
                .map(|(b, _, _)| cust::memory::DeviceBuffer::from_slice(b))
                .collect::<Result<Vec<_>, _>>()
                .map_err(fail("real-KV upload"))?;
        let dsources = host_sources
            .iter()
            .zip(&dbytes)
            .zip(&c.kv.bytes)
            .map(|((src, bytes), (_, _, params))| {
                let layout = RowLayout {
                    num_rows: src.num_rows(),
                    row_bytes: src.row_bytes(),
                    row_stride_bytes: src.row_stride_bytes(),
                };
                DeviceRealKvSource::new(bytes, layout, *params)?
                    .with_token_layout(src.token_layout())
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(fail("device source"))?;
        let rk = DeviceRealKv::try_from_slice(c.kv.mode, &dsources).map_err(fail("real kv"))?;
        folds += usize::from(!dsources.is_empty() && c.kv.mode != kv_canary::RealKvHashMode::None);
        let settings = DeviceSettings::new(c.tag)
            .with_real_kv(rk)
            .with_chain_position_assert(ChainPositionAssert::ON);
        let shape = UncheckedShape::from_capacities(c.plan.capacity(), cap("w", 1), cap("e", 1));
        stream.clear_status().map_err(fail("clear"))?;
        if c.check {
            cuda::verify(
                &stream,
                &shape,
                &dplan,
                TokenCheckOn,
                &settings,
                &dbuf,
                &dring,
                &dcounters,
            )
        } else {
            cuda::verify(
                &stream,
                &shape,
                &dplan,
                TokenCheckOff,
                &settings,
                &dbuf,
                &dring,
                &dcounters,
            )
        }
        .map_err(fail("verify launch"))?;
        let status = stream.status();
        let after = checksum(dbuf.to_host().map_err(fail("download"))?.as_bytes());
        ensure!(
            before == after,
            "{label}: verify changed the device canary buffer (checksum {before:#x} -> {after:#x}, status {status:?})"
        );
        ensure!(
            cpu.is_ok() == status.is_ok(),
            "{label}: CPU {cpu:?}, GPU status {status:?}"
        );
        if cpu.is_err() {
            errors += 1;
            continue;
        }
        let ring = dring.to_host().map_err(fail("ring"))?;
        let counters = dcounters.to_host().map_err(fail("counters"))?;
        ensure!(
            ring.write_index() == cs.ring.write_index(),
            "{label}: device write index {} CPU {}",
            ring.write_index(),
            cs.ring.write_index()
        );
        ensure!(counters == cs.counters, "{label}: counters differ");
        let new = i64::from(
            cs.ring
                .write_index()
                .wrapping_sub(c.state.ring.write_index()),
        );
        if new > ring_rows as i64 {
            overflows += 1;
            past += new - ring_rows as i64;
        }
    }
    println!(
        "    {cases} device verifies left the canary checksum unchanged ({folds} with a real-KV fold, \
         {errors} with a malformed entry); {overflows} overflowed the ring, {past} violations past \
         the capacity all counted in the device write index"
    );
    ensure!(cases < 100 || overflows > 10, "too few overflows");
    Ok(())
}

/// A write case of requests `reqs` (each: seed, entries `(token, position, slot)`) over a
/// zeroed buffer of `num_slots` slots, chain assert on, no expected inputs.
/// A request: its seed and its entries `(token, position, slot)`.
type Request = (i64, Vec<(i64, i64, i64)>);

fn case(num_slots: usize, reqs: &[Request]) -> WriteCase {
    let mut offsets = vec![0i64];
    let (mut ids, mut positions, mut slots, mut seeds) = (vec![], vec![], vec![], vec![]);
    for (seed, entries) in reqs {
        seeds.push(*seed);
        for &(t, p, s) in entries {
            ids.push(t);
            positions.push(p);
            slots.push(s);
        }
        offsets.push(ids.len() as i64);
    }
    let plan =
        WritePlan::from_parts(cap("w", reqs.len()), offsets, seeds, reqs.len() as i32).unwrap();
    let buf =
        CanaryBuffer::from_bytes(cap("slots", num_slots), 32, vec![0; num_slots * 32]).unwrap();
    WriteCase {
        plan,
        ids,
        positions,
        slots,
        expected: None,
        kv: KvSetup::none(),
        tag: LaunchTag::HeadKFull,
        chain: ChainPositionAssert::ON,
        state: State {
            buf,
            ring: ViolationRing::from_parts(cap("ring", 64), vec![0; 64 * 8], 0).unwrap(),
            counters: HealthCounters::new(),
        },
    }
}

/// Which entry each 16-byte half of the twice-written slot came from: `(token, position)`
/// first, `(prev_hash, real_kv_hash)` second; `true` = the later entry.
type Halves = (bool, bool);

/// The name of a [`Halves`] combination, as the test prints it.
fn halves_name((first, second): Halves) -> &'static str {
    match (first, second) {
        (true, true) => "later whole",
        (false, false) => "earlier whole",
        (true, false) => "torn: later (token, position) + earlier (prev_hash, real_kv_hash)",
        (false, true) => "torn: earlier (token, position) + later (prev_hash, real_kv_hash)",
    }
}

/// The record of `dup` made of the halves `h` of the later and the earlier entry's records.
fn record_of(h: Halves, later: CanarySlot, earlier: CanarySlot) -> CanarySlot {
    let (a, b) = (
        if h.0 { later } else { earlier },
        if h.1 { later } else { earlier },
    );
    CanarySlot {
        token: a.token,
        position: a.position,
        prev_hash: b.prev_hash,
        real_kv_hash: b.real_kv_hash,
    }
}

/// The verify of the request's whole chain as written (`(token, position, slot)` entries,
/// chain head first, token check on) over `state`'s buffer, into a fresh 64-row ring.
fn verify_request(entries: &[(i64, i64, i64)], state: &State) -> VerifyCase {
    let chain: Vec<VerifyEntry> = entries
        .iter()
        .enumerate()
        .map(|(k, &(token, position, slot))| VerifyEntry {
            slot,
            expected_token: token,
            expected_position: position,
            prev_slot: if k == 0 { -1 } else { entries[k - 1].2 },
        })
        .collect();
    let mut plan = VerifyPlan::try_with_capacity(cap("v", chain.len())).unwrap();
    plan.set_entries(&chain).unwrap();
    VerifyCase {
        plan,
        check: true,
        kv: KvSetup::none(),
        tag: LaunchTag::HeadKFull,
        state: State {
            buf: state.buf.clone(),
            ring: ViolationRing::from_parts(cap("ring", 64), vec![0; 64 * 8], 0).unwrap(),
            counters: HealthCounters::new(),
        },
    }
}

/// One request writing slot `dup` at entries `i < j` (an engine bug: two tokens in one slot in
/// one step). The defined outcome (docs/reliability.md, "One slot written twice"): on the CPU
/// the later entry wins; on the GPU, where the two entries are stored in the same round (one
/// warp for a request of at most 32 entries, one 256-entry tile otherwise), each 16-byte half
/// of the slot, `(token, position)` and `(prev_hash, real_kv_hash)`, comes from one of the two
/// entries in any combination (two 16-byte stores per record, racing); in different rounds the
/// later entry wins whole. Every other slot, the ring and the counters equal the CPU's. What
/// matters holds in every combination: the next verify of the request's chain flags the slot
/// (the entry whose position it does not hold, at least), on the device as on the CPU over the
/// same bytes (and, for the later-whole outcome, exactly as the CPU flags its own write). The
/// combinations seen are counted and printed.
pub fn one_slot_twice_in_one_request(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(400);
    let mut seen: std::collections::BTreeMap<Halves, usize> = Default::default();
    let (mut far_later, mut flagged_rows) = (0, 0);
    for seed in 0..cases {
        let mut rng = crate::rng::Rng::new(0x0D0B_1E00 + seed);
        let n = if seed % 2 == 0 {
            rng.range(2, 32)
        } else {
            rng.range(300, 900)
        } as usize;
        let num_slots = n + 8;
        let mut perm: Vec<i64> = (1..num_slots as i64).collect();
        for k in (1..perm.len()).rev() {
            perm.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let i = rng.below(n as u64 - 1) as usize;
        let j = rng.range(i as i64 + 1, n as i64 - 1) as usize;
        let mut entries: Vec<(i64, i64, i64)> = (0..n)
            .map(|k| (rng.range(0, 50_000), k as i64, perm[k]))
            .collect();
        entries[j].2 = entries[i].2;
        let dup = entries[i].2 as usize;
        let spare = perm[n];
        let c = case(num_slots, &[(-1, entries.clone())]);
        let label = format!("duplicate slot case seed {seed} (n {n}, entries {i} and {j})");
        let (mut cs, mut gs) = (c.state.clone(), c.state.clone());
        run_write(&c, &Cpu, &mut cs).map_err(fail("CPU write"))?;
        on_gpu(&c, &mut gs, run_write).map_err(|e| format!("{label}: GPU {e}"))?;
        // The earlier entry's record: the CPU run with the later entry moved to a spare slot.
        let mut moved = entries.clone();
        moved[j].2 = spare;
        let mut alt = c.state.clone();
        run_write(&case(num_slots, &[(-1, moved)]), &Cpu, &mut alt).map_err(fail("CPU alt"))?;
        let earlier = alt.buf.slot(dup).unwrap();
        let later = cs.buf.slot(dup).unwrap();
        let got = gs.buf.slot(dup).unwrap();
        let same_round = if n <= 32 { true } else { i / 256 == j / 256 };
        let half = |ours: (i64, i64), of_later: (i64, i64), of_earlier: (i64, i64)| {
            if ours == of_later {
                Some(true)
            } else if ours == of_earlier {
                Some(false)
            } else {
                None
            }
        };
        let halves = half(
            (got.token, got.position),
            (later.token, later.position),
            (earlier.token, earlier.position),
        )
        .zip(half(
            (got.prev_hash, got.real_kv_hash),
            (later.prev_hash, later.real_kv_hash),
            (earlier.prev_hash, earlier.real_kv_hash),
        ));
        let halves = match halves {
            Some(h) if same_round || h == (true, true) => h,
            _ => {
                return Err(format!(
                    "{label}: slot {dup} holds {got:?}, not two halves of the entries' records; \
                     CPU (later entry) {later:?}, earlier entry {earlier:?}, same store round \
                     {same_round}"
                ))
            }
        };
        *seen.entry(halves).or_default() += 1;
        far_later += usize::from(!same_round);
        let mut want = cs.clone();
        want.buf
            .set_slot(dup, record_of(halves, later, earlier))
            .unwrap();
        same_state(
            &format!("{label}, {}", halves_name(halves)),
            &want,
            &gs,
            0,
            &[],
        )?;
        // The next verify of the request's chain, on the device over what it wrote, against
        // the CPU's over the outcome's bytes (its own write's, for the later-whole outcome).
        let on_device = verify_request(&entries, &gs);
        let on_cpu = verify_request(&entries, &want);
        let (mut vg, mut vc) = (on_device.state.clone(), on_cpu.state.clone());
        on_gpu(&on_device, &mut vg, run_verify).map_err(|e| format!("{label}: GPU verify {e}"))?;
        run_verify(&on_cpu, &Cpu, &mut vc).map_err(fail("CPU verify"))?;
        let all = all_rows(&on_cpu.state, |s| run_verify(&on_cpu, &Cpu, s));
        let vlabel = format!("{label}, {}: the next verify", halves_name(halves));
        same_state(&vlabel, &vc, &vg, 0, &all)?;
        let at_dup = vg.ring.raw_rows().filter(|r| r[1] == dup as i64).count();
        ensure!(
            at_dup > 0 && vg.ring.dropped() == 0,
            "{vlabel} flagged nothing at slot {dup} ({} rows, {} dropped)",
            vg.ring.stored_len(),
            vg.ring.dropped()
        );
        flagged_rows += at_dup;
    }
    println!(
        "    {cases} requests writing one slot twice; the halves of the slot \
         ((token, position), (prev_hash, real_kv_hash)) came from:"
    );
    for (halves, count) in &seen {
        println!("      {:<72} {count}", halves_name(*halves));
    }
    println!(
        "    ({far_later} in different store rounds: later whole, where it must); the next verify \
         flagged the slot in all {cases} ({flagged_rows} rows at the slot), equal to the CPU's \
         verify of the same bytes"
    );
    Ok(())
}

/// Request A writes slot `s`; request B of the same launch seeds from `s`. The GPU result must
/// be one of the two sequential outcomes (B after A: chains from A's record; B before A: from
/// the old record), counted for both request orders.
pub fn seed_written_in_same_launch(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(400);
    let (mut new_seed, mut old_seed) = (0, 0);
    for seed in 0..cases {
        let mut rng = crate::rng::Rng::new(0x5EED_A000 + seed);
        let (na, nb) = (rng.range(1, 600) as usize, rng.range(1, 40) as usize);
        let num_slots = na + nb + 8;
        let mut perm: Vec<i64> = (1..num_slots as i64).collect();
        for k in (1..perm.len()).rev() {
            perm.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let s = perm[rng.below(na as u64) as usize];
        let a: Vec<(i64, i64, i64)> = (0..na)
            .map(|k| (rng.range(0, 9999), 10 + k as i64, perm[k]))
            .collect();
        let b_start = rng.pick(&[1, 11, 10 + na as i64]);
        let b: Vec<(i64, i64, i64)> = (0..nb)
            .map(|k| (rng.range(0, 9999), b_start + k as i64, perm[na + k]))
            .collect();
        let mut base = case(num_slots, &[(-1, a.clone()), (s, b.clone())]);
        // The old record of s: a real one, position 0.
        base.state
            .buf
            .set_slot(
                s as usize,
                kv_canary::CanarySlot {
                    token: 7,
                    position: 0,
                    prev_hash: kv_canary::hash::CHAIN_HEAD,
                    real_kv_hash: 0,
                },
            )
            .unwrap();
        let a_first = seed % 2 == 0;
        let order = |first_a: bool| {
            let mut c = if first_a {
                case(num_slots, &[(-1, a.clone()), (s, b.clone())])
            } else {
                case(num_slots, &[(s, b.clone()), (-1, a.clone())])
            };
            c.state = base.state.clone();
            c
        };
        let launched = order(a_first);
        let label =
            format!("seed race case seed {seed} (A {na} entries, B {nb}, A first {a_first})");
        let mut gs = launched.state.clone();
        on_gpu(&launched, &mut gs, run_write).map_err(|e| format!("{label}: GPU {e}"))?;
        let mut after_a = launched.state.clone();
        run_write(&order(true), &Cpu, &mut after_a).map_err(fail("CPU A then B"))?;
        let mut before_a = launched.state.clone();
        run_write(&order(false), &Cpu, &mut before_a).map_err(fail("CPU B then A"))?;
        let rows = |st: &State| st.ring.raw_rows().collect::<Vec<_>>();
        if same_state(&label, &after_a, &gs, 0, &rows(&after_a)).is_ok() {
            new_seed += 1;
        } else {
            same_state(
                &format!("{label}: neither sequential outcome; against B-before-A"),
                &before_a,
                &gs,
                0,
                &rows(&before_a),
            )?;
            old_seed += 1;
        }
    }
    println!(
        "    {cases} launches with a seed slot written by another request: B chained from A's \
         new record {new_seed} times, from the old record {old_seed} times (never anything else)"
    );
    Ok(())
}
