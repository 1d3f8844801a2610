//! Differential tests of the blocked write and verify ops against entry-at-a-time models written
//! from spec §4, §5 and §2.11: random plans of up to several blocks, with slot-0, negative-slot,
//! unreachable-predecessor and corrupted entries, seeds written earlier in the same call, and
//! real-KV fingerprints over paged sources.

use super::{verify, write};
use crate::canary::{CanaryBuffer, HealthCounters, LaunchSettings, LaunchTag, ViolationRing};
use crate::canary::{ChainPositionAssert, TokenCheckOff, TokenCheckOn};
use crate::capacity::{Capacity, UncheckedCapacity};
use crate::hash::{fold_words, mix3, splitmix64};
use crate::input::WriteInputs;
use crate::plan::{VerifyPlan, WritePlan};
use crate::real_kv::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources};
use crate::shape::UncheckedShape;
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

const SLOTS: usize = 160;
const ANCHOR: i64 = 0xDE7F_AE23_A9A1_B716_u64 as i64;

/// `rand_chacha`'s ChaCha8 with the draws these cases use.
struct Rng(ChaCha8Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n)
    }
    fn slot(&mut self) -> i64 {
        self.below(SLOTS) as i64
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn cap(n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new("test capacity", n.max(1)).unwrap()
}

/// Records as `(token, position, prev_hash, real_kv_hash)` from raw little-endian bytes.
fn record(buf: &[u8], s: usize) -> [i64; 4] {
    core::array::from_fn(|f| {
        let at = s * 32 + 8 * f;
        i64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
    })
}

fn chain_of(buf: &[u8], s: i64) -> i64 {
    if s < 0 {
        return ANCHOR;
    }
    let [token, position, prev, _] = record(buf, s as usize);
    mix3(prev as u64, token as u64, position as u64) as i64
}

/// Spec §2.11, straight from the source parameters.
fn fingerprint(real_kv: &RealKv<'_>, s: usize) -> i64 {
    if !real_kv.is_active() {
        return 0;
    }
    let mut acc = 0u64;
    for src in real_kv.sources().as_slice() {
        let n = match real_kv.mode() {
            RealKvHashMode::Partial => 16,
            _ => src.read_bytes(),
        };
        let (page, nbpt) = (src.page_size(), src.num_bytes_per_token());
        let at = (s / page) * src.row_stride_bytes() + (s % page) * nbpt;
        acc = splitmix64(acc ^ fold_words(&src.bytes()[at..at + n]));
    }
    acc as i64
}

/// Four paged sources covering every slot (page 4, 32 bytes a token, rows with a hole).
fn kv_memory(rng: &mut Rng) -> Vec<u8> {
    (0..4 * (SLOTS / 4) * 160)
        .map(|_| rng.below(256) as u8)
        .collect()
}

fn real_kv<'a>(rng: &mut Rng, kv: &'a [u8]) -> RealKv<'a> {
    let rows = SLOTS / 4;
    let sources: Vec<RealKvSource<'a>> = (0..4)
        .map(|k| {
            let read = if k % 2 == 0 { 32 } else { 16 };
            let bytes = &kv[k * rows * 160..(k + 1) * rows * 160];
            RealKvSource::new(bytes, 160, RealKvParams::new(4, 32, read)).unwrap()
        })
        .collect();
    let count = rng.below(5);
    let mode = [
        RealKvHashMode::None,
        RealKvHashMode::Partial,
        RealKvHashMode::All,
    ][rng.below(3)];
    RealKv::new(
        mode,
        RealKvSources::try_from_slice(&sources[..count]).unwrap(),
    )
}

/// Rows recorded by a model: appended in order, counted past the capacity.
struct ModelRing {
    rows: Vec<[i64; 8]>,
}

fn compare_ring(ring: &ViolationRing<UncheckedCapacity>, model: &ModelRing, case: usize) {
    assert_eq!(ring.write_index() as usize, model.rows.len(), "case {case}");
    let stored: Vec<[i64; 8]> = ring.raw_rows().collect();
    let cap = ring.capacity().get().min(model.rows.len());
    assert_eq!(stored, model.rows[..cap], "case {case}");
}

/// A canary of random records, some chains stamped by a model write so that most checks pass.
fn canary(rng: &mut Rng) -> CanaryBuffer<UncheckedCapacity> {
    let mut bytes: Vec<u8> = (0..SLOTS * 32).map(|_| rng.below(256) as u8).collect();
    let mut running = ANCHOR;
    for (p, s) in (1..SLOTS).step_by(3).enumerate() {
        let rec = [rng.below(4) as i64, p as i64, running, 0];
        for (f, v) in rec.iter().enumerate() {
            bytes[s * 32 + 8 * f..s * 32 + 8 * f + 8].copy_from_slice(&v.to_le_bytes());
        }
        running = mix3(running as u64, rec[0] as u64, rec[1] as u64) as i64;
    }
    CanaryBuffer::from_bytes(cap(SLOTS), 32, bytes).unwrap()
}

#[test]
fn blocked_verify_matches_the_entry_model() {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let kv = kv_memory(&mut rng);
    for case in 0..300 {
        let buf = canary(&mut rng);
        let n = 1 + rng.below(150);
        let chained: Vec<i64> = (1..SLOTS as i64).step_by(3).collect();
        let mut plan = VerifyPlan::with_capacity(cap(n));
        let p = plan.parts_mut();
        let start = rng.below(chained.len());
        for i in 0..n {
            // Mostly a walk along the stamped chain (clean), else anything.
            let k = (start + i) % chained.len();
            let clean = rng.chance(80);
            p.slot_indices[i] = if rng.chance(5) {
                0
            } else if clean {
                chained[k]
            } else {
                1 + rng.below(SLOTS - 1) as i64
            };
            p.prev_slot_indices[i] = match rng.below(10) {
                0 => 0,
                1 => -1 - rng.below(3) as i64,
                2 => rng.slot(),
                _ if k > 0 => chained[k - 1],
                _ => -1,
            };
            p.expected_positions[i] = if clean { k as i64 } else { rng.below(4) as i64 };
            p.expected_tokens[i] = rng.below(5) as i64 - 1;
        }
        *p.num_valid = if rng.chance(10) {
            n as i32 + 3
        } else {
            n as i32
        };
        *p.enable = i32::from(!rng.chance(5));
        let rk = real_kv(&mut rng, &kv);
        let launch = LaunchSettings::new(LaunchTag::TailVSwa).with_real_kv(rk);
        let token_check = rng.chance(50);
        let ring_rows = 1 + rng.below(40);

        // The model: spec §5, one entry at a time.
        let bytes = buf.as_bytes();
        let mut model = ModelRing { rows: Vec::new() };
        let active = if plan.enable() == 0 { 0 } else { n };
        for i in 0..active {
            let slot = plan.slot_indices()[i];
            if slot == 0 {
                continue;
            }
            let [token, position, prev_hash, stored_rk] = record(bytes, slot as usize);
            let prev = plan.prev_slot_indices()[i];
            let chain = if prev != 0 {
                chain_of(bytes, prev)
            } else {
                prev_hash
            };
            let etok = if token_check {
                plan.expected_tokens()[i]
            } else {
                -1
            };
            let erk = fingerprint(&launch.real_kv, slot as usize);
            let bits = i64::from(prev_hash != chain)
                | (i64::from(etok != -1 && token != etok) << 5)
                | (i64::from(position != plan.expected_positions()[i]) << 1)
                | (i64::from(stored_rk != erk) << 2);
            if bits != 0 {
                model.rows.push([
                    launch.tag.value(),
                    slot,
                    position,
                    token,
                    etok,
                    prev_hash,
                    chain,
                    bits,
                ]);
            }
        }

        let shape = UncheckedShape::from_capacities(cap(n), cap(1), cap(1));
        let mut ring = ViolationRing::with_capacity(cap(ring_rows));
        let mut counters = HealthCounters::new();
        let summary = if token_check {
            verify(
                &shape,
                &plan,
                TokenCheckOn,
                &launch,
                &buf,
                &mut ring,
                &mut counters,
            )
        } else {
            verify(
                &shape,
                &plan,
                TokenCheckOff,
                &launch,
                &buf,
                &mut ring,
                &mut counters,
            )
        }
        .unwrap();
        compare_ring(&ring, &model, case);
        assert_eq!(summary.violations as usize, model.rows.len(), "case {case}");
        assert_eq!(counters.slot_run_counter(), active as i64, "case {case}");
        let checked = plan.slot_indices()[..active]
            .iter()
            .filter(|&&s| s != 0)
            .count();
        assert_eq!(summary.checked, checked, "case {case}");
    }
}

#[test]
fn blocked_write_matches_the_entry_model() {
    let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
    let kv = kv_memory(&mut rng);
    for case in 0..300 {
        let mut buf = canary(&mut rng);
        let reqs = 1 + rng.below(5);
        let mut offsets = vec![0i64];
        for _ in 0..reqs {
            let len = [0, 1, 3, 31, 32, 33, 70][rng.below(7)];
            offsets.push(offsets.last().unwrap() + len);
        }
        let n = *offsets.last().unwrap() as usize;
        let seeds: Vec<i64> = (0..reqs)
            .map(|_| if rng.chance(30) { -1 } else { rng.slot() })
            .collect();
        let plan =
            WritePlan::from_parts(cap(reqs), offsets.clone(), seeds.clone(), reqs as i32).unwrap();
        let mut inputs = WriteInputs::try_with_capacity(cap(n))
            .and_then(WriteInputs::try_with_input_assert)
            .unwrap();
        let p = inputs.parts_mut();
        for i in 0..n {
            // Seeds of later requests are often written by earlier ones.
            p.out_cache_loc[i] = match rng.below(10) {
                0 => -1 - rng.below(2) as i64,
                1 => seeds[rng.below(reqs)],
                _ => rng.slot(),
            };
            p.input_ids[i] = rng.below(6) as i64;
            p.positions[i] = i as i64 - rng.below(2) as i64;
        }
        let (ids, pos, slots) = (
            inputs.input_ids().to_vec(),
            inputs.positions().to_vec(),
            inputs.out_cache_loc().to_vec(),
        );
        let e = inputs.expected_mut();
        for i in 0..n {
            e.tokens[i] = ids[i] + i64::from(rng.chance(10));
            e.positions[i] = pos[i] - i64::from(rng.chance(10));
        }
        let (etok, epos) = (
            inputs.expected_tokens().to_vec(),
            inputs.expected_positions().to_vec(),
        );
        let rk = real_kv(&mut rng, &kv);
        let flag = ChainPositionAssert::from_flag(rng.below(2) as i32);
        let launch = LaunchSettings::new(LaunchTag::HeadVFull)
            .with_real_kv(rk)
            .with_chain_position_assert(flag);
        let assert_inputs = rng.chance(50);
        let ring_rows = 1 + rng.below(40);

        // The model: spec §4, one request and one entry at a time.
        let mut bytes = buf.as_bytes().to_vec();
        let mut model = ModelRing { rows: Vec::new() };
        let tag = launch.tag.value();
        let mut written = 0;
        for r in 0..reqs {
            let (start, end) = (offsets[r] as usize, offsets[r + 1] as usize);
            if start == end {
                continue;
            }
            let seed = seeds[r];
            let mut running = chain_of(&bytes, seed);
            let chain_assert = seed >= 0 && flag.is_on();
            let mut prev_pos = if chain_assert {
                record(&bytes, seed as usize)[1]
            } else {
                0
            };
            for i in start..end {
                let slot = slots[i];
                if slot < 0 {
                    continue;
                }
                let (token, position) = (ids[i], pos[i]);
                if assert_inputs {
                    let bits =
                        (i64::from(token != etok[i]) << 3) | (i64::from(position != epos[i]) << 4);
                    if bits != 0 {
                        model
                            .rows
                            .push([tag, slot, position, token, etok[i], running, epos[i], bits]);
                    }
                }
                if chain_assert {
                    if position != prev_pos.wrapping_add(1) {
                        model.rows.push([
                            tag,
                            slot,
                            position,
                            token,
                            token,
                            running,
                            prev_pos.wrapping_add(1),
                            16,
                        ]);
                    }
                    prev_pos = position;
                }
                let rec = [
                    token,
                    position,
                    running,
                    fingerprint(&launch.real_kv, slot as usize),
                ];
                let at = slot as usize * 32;
                for (f, v) in rec.iter().enumerate() {
                    bytes[at + 8 * f..at + 8 * f + 8].copy_from_slice(&v.to_le_bytes());
                }
                running = mix3(running as u64, token as u64, position as u64) as i64;
                written += 1;
            }
        }

        let shape = UncheckedShape::from_capacities(cap(1), cap(reqs), cap(n));
        let mut ring = ViolationRing::with_capacity(cap(ring_rows));
        let mut counters = HealthCounters::new();
        let summary = if assert_inputs {
            write(
                &shape,
                &plan,
                &inputs,
                &launch,
                &mut buf,
                &mut ring,
                &mut counters,
            )
        } else {
            let off = inputs.clone().without_input_assert();
            write(
                &shape,
                &plan,
                &off,
                &launch,
                &mut buf,
                &mut ring,
                &mut counters,
            )
        }
        .unwrap();
        assert_eq!(buf.as_bytes(), &bytes[..], "case {case}");
        compare_ring(&ring, &model, case);
        assert_eq!(summary.written, written, "case {case}");
        assert_eq!(counters.slot_run_counter(), written as i64, "case {case}");
    }
}
