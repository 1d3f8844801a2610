//! Nothing lost on the GPU (issue 11, item 5; the CPU side is `tests/nothing_lost.rs`):
//! verify leaves the device canary buffer byte-identical, the device ring's write index counts
//! every violation past its capacity, and the device outcomes of one slot written twice by one
//! request and of a seed slot written by another request of the same launch.

use crate::canary::{
    on_gpu, random_verify_case, run_verify, run_write, same_state, KvSetup, State, WriteCase,
};
use crate::{ensure, fail};
use kv_canary::backend::Cpu;
use kv_canary::cuda::{self, DeviceRealKv, DeviceRealKvSource, DeviceSettings, Gpu, Stream};
use kv_canary::{
    CanaryBuffer, ChainPositionAssert, HealthCounters, LaunchTag, RealKvSource, RowLayout,
    TokenCheckOff, TokenCheckOn, UncheckedCapacity, UncheckedShape, ViolationRing, WritePlan,
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
        let host_sources: Vec<RealKvSource<'_>> =
            c.kv.bytes
                .iter()
                .map(|(b, row, p)| RealKvSource::new(b, *row, *p).unwrap())
                .collect();
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
                DeviceRealKvSource::new(bytes, layout, *params)
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

/// One request writing slot `dup` at entries `i < j`: on the CPU the later entry wins. The GPU
/// is compared with the CPU; where the two entries are stored in the same round (one warp for a
/// request of at most 32 entries, one 256-entry tile otherwise) the stores race, so the slot
/// may hold either entry's whole record: the test counts both and fails on anything else
/// (a torn record, another slot or counter different from the CPU).
pub fn one_slot_twice_in_one_request(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(400);
    let (mut later, mut earlier, mut far_later) = (0, 0, 0);
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
        let mut moved = entries;
        moved[j].2 = spare;
        let mut alt = c.state.clone();
        run_write(&case(num_slots, &[(-1, moved)]), &Cpu, &mut alt).map_err(fail("CPU alt"))?;
        let earlier_record = alt.buf.slot(dup).unwrap();
        let got = gs.buf.slot(dup).unwrap();
        let same_round = if n <= 32 { true } else { i / 256 == j / 256 };
        let want = if got == cs.buf.slot(dup).unwrap() {
            later += 1;
            far_later += usize::from(!same_round);
            cs.clone()
        } else if got == earlier_record && same_round {
            earlier += 1;
            let mut e = cs.clone();
            e.buf.set_slot(dup, earlier_record).unwrap();
            e
        } else {
            return Err(format!(
                "{label}: slot {dup} holds {got:?}; CPU (later entry) {:?}, earlier entry {earlier_record:?}, same store round {same_round}",
                cs.buf.slot(dup).unwrap()
            ));
        };
        same_state(&label, &want, &gs, 0, &[])?;
    }
    println!(
        "    {cases} requests writing one slot twice: the later entry won {later} times \
         ({far_later} in different tiles, where it must), the earlier {earlier} times \
         (same store round: a race between the storing threads)"
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
