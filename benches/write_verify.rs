//! Throughput of the CPU write and verify ops, each next to a floor: the cheapest code that does
//! the unavoidable part of the same work.
//!
//! Every workload lives in a canary buffer of 4 Mi slots x 32 B (128 MiB) whose slots are
//! scattered at random (engine-like `req_to_token` tables drawn from the whole buffer), so every
//! load and store of a record is a random access into 128 MiB.
//!
//! * **verify**: 512 requests with 2048 cached tokens each (1 Mi entries), written by the write op
//!   beforehand so the chains are clean, then verified by the plan of the next decode step. NONE
//!   mode with the token check off and on; ALL mode over four real-KV sources of 128 bytes per
//!   token; a disabled plan (`enable == 0`); and a variant where 1% of the records were tampered
//!   with (one row each). Floor (`gather`): loading the same random 32-byte records (and, for
//!   ALL, the same 4 x 128 KV bytes) and folding them with XOR: the memory traffic verify cannot
//!   avoid.
//! * **write**: one 8192-token prefill request (also with four ALL sources), 64 prefill requests
//!   of 512 tokens, and a decode step of 256 requests x 1 token (seeded chains, chain-position
//!   assert on); input assert off and on. Floors: `mix3`, the per-request chains of `mix3`
//!   steps over the same tokens with no memory traffic (a request's chain is inherently serial),
//!   and `scatter`, storing the same 32-byte records at the same random slots with no hashing;
//!   with real-KV sources, `gather`, loading the same 4 x 128 KV bytes of every written slot.
//!
//! Run with `cargo bench --bench write_verify`; see docs/benchmarks.md.

mod common;

use common::{Rng, Timing};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kv_canary::hash::{chain_step, CHAIN_HEAD};
use kv_canary::{
    cpu, Batch, CanaryBuffer, ExpectedTokenTable, HealthCounters, InputAssertOn, LaunchSettings,
    LaunchTag, PlanInputs, RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources,
    ReqToToken, TokenCheckOff, TokenCheckOn, UncheckedCapacity, UncheckedShape, VerifyPlan,
    ViolationRing, WriteInputs, WritePlan,
};
use rand::Rng as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Slots of every canary buffer: 4 Mi x 32 B = 128 MiB.
const NUM_SLOTS: usize = 1 << 22;
/// Bytes per token of every real-KV source (all of them hashed in ALL mode).
const KV_BYTES_PER_TOKEN: usize = 128;

type Unchecked = UncheckedCapacity;
type Canary = CanaryBuffer<Unchecked>;
type Ring = ViolationRing<Unchecked>;

const VERIFY: Timing = Timing {
    samples: 10,
    warm_up: Duration::from_secs(1),
    measure: Duration::from_secs(4),
    flat: true,
};

const WRITE: Timing = Timing {
    samples: 30,
    warm_up: Duration::from_secs(1),
    measure: Duration::from_secs(3),
    flat: false,
};

fn cap(what: &'static str, n: usize) -> Unchecked {
    UncheckedCapacity::new(what, n.max(1)).expect("positive capacity")
}

fn canary() -> Canary {
    CanaryBuffer::try_with_capacity(cap("num_slots", NUM_SLOTS)).expect("bench buffers allocate")
}

fn ring(rows: usize) -> Ring {
    ViolationRing::try_with_capacity(cap("ring_capacity", rows)).expect("bench buffers allocate")
}

/// Four dense real-KV sources of `NUM_SLOTS` rows (page size 1) of random bytes.
fn kv_memory(rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..4)
        .map(|_| {
            let mut kv = vec![0u8; NUM_SLOTS * KV_BYTES_PER_TOKEN];
            rng.fill_bytes(&mut kv);
            kv
        })
        .collect()
}

fn all_mode(kv: &[Vec<u8>]) -> RealKv<'_> {
    let n = KV_BYTES_PER_TOKEN as i64;
    let sources: Vec<RealKvSource<'_>> = kv
        .iter()
        .map(|bytes| {
            RealKvSource::new(bytes, KV_BYTES_PER_TOKEN, RealKvParams::new(1, n, n))
                .expect("valid source")
        })
        .collect();
    let sources = RealKvSources::try_from_slice(&sources).expect("four sources");
    RealKv::new(RealKvHashMode::All, sources)
}

/// One planned step: its shape, both plans and the write inputs an engine would pass (token,
/// position and slot of every new token, in batch order).
struct Step {
    shape: UncheckedShape,
    verify: VerifyPlan<Unchecked>,
    write: WritePlan<Unchecked>,
    inputs: WriteInputs<Unchecked>,
    /// Verify entries (every cached position of every request).
    verify_entries: usize,
    /// New tokens written.
    write_entries: usize,
}

/// Plans `batch` (FULL group, expected tokens from `tokens` for every cached position) and fills
/// the write inputs from `table` and `tokens`.
fn step(batch: &Batch, table: &ReqToToken, tokens: &ExpectedTokenTable) -> Step {
    let verify_entries = batch.prefix_lens().iter().sum::<i64>() as usize;
    let write_entries = batch.extend_seq_lens().iter().sum::<i64>() as usize;
    let shape = UncheckedShape::from_capacities(
        cap("verify_capacity", verify_entries),
        cap("write_req_capacity", batch.len()),
        cap("write_entry_capacity", write_entries),
    );
    let verify = shape.try_verify_plan().expect("bench buffers allocate");
    let (mut verify, mut write) = (
        verify,
        shape.try_write_plan().expect("bench buffers allocate"),
    );
    let valid = batch.prefix_lens();
    let inputs = PlanInputs::full(batch, table).with_expected(tokens.with_valid_lens(valid));
    let summary = cpu::plan(&shape, &inputs, &mut verify, &mut write).expect("valid workload");
    assert_eq!(summary.verify_num_valid, verify_entries);
    let mut inputs = shape.try_write_inputs().expect("bench buffers allocate");
    let p = inputs.parts_mut();
    let mut i = 0;
    for row in batch.rows() {
        let rp = row.req_pool_index as usize;
        for pos in row.prefix_len..row.prefix_len + row.extend_len {
            let c = pos as usize;
            p.input_ids[i] = i64::from(tokens.get(rp, c).expect("token cell"));
            p.positions[i] = pos;
            p.out_cache_loc[i] = i64::from(table.get(rp, c).expect("slot cell"));
            i += 1;
        }
    }
    Step {
        shape,
        verify,
        write,
        inputs,
        verify_entries,
        write_entries,
    }
}

/// The same batch with every cached token as a new one: the prefill that wrote those tokens.
fn prefill_of(batch: &Batch) -> Batch {
    let rows = batch.req_pool_indices().to_vec();
    let bs = rows.len();
    Batch::try_from_columns(rows, vec![0; bs], batch.prefix_lens().to_vec()).expect("columns")
}

/// Runs `step`'s write into `canary` and checks it recorded no violation.
fn write_clean(step: &Step, launch: &LaunchSettings<'_>, canary: &mut Canary) {
    let mut counters = HealthCounters::new();
    let s = cpu::write(
        &step.shape,
        &step.write,
        &step.inputs,
        launch,
        canary,
        &mut ring(1),
        &mut counters,
    )
    .expect("valid write");
    assert_eq!((s.written, s.violations), (step.write_entries as u64, 0));
}

// ---------------------------------------------------------------------------------------------
// verify

/// Loads the 32-byte record of every slot of `slots` (when `canary` is given) and every word of
/// the slot's strip in each source of `kv`, and folds them with XOR; slot 0 and negative slots
/// are skipped. Blocks of 32 slots, each strip word of the whole block before the next word, so
/// that a block's misses are all in flight together.
fn gather(slots: &[i64], canary: Option<&Canary>, kv: &[Vec<u8>]) -> u64 {
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let mut acc = 0u64;
    for block in slots.chunks(32) {
        if let Some(canary) = canary {
            let bytes = canary.as_bytes();
            for &slot in block.iter().filter(|&&s| s > 0) {
                let at = slot as usize * 32;
                acc ^= word(bytes, at) ^ word(bytes, at + 8);
                acc ^= word(bytes, at + 16) ^ word(bytes, at + 24);
            }
        }
        for source in kv {
            for w in (0..KV_BYTES_PER_TOKEN).step_by(8) {
                for &slot in block.iter().filter(|&&s| s > 0) {
                    acc ^= word(source, slot as usize * KV_BYTES_PER_TOKEN + w);
                }
            }
        }
    }
    acc
}

/// Benches verify on `plan` (which must find exactly `violations` rows) with the token check
/// off (and on, if `token_on`), and the gather floor.
#[allow(clippy::too_many_arguments)]
fn verify_group(
    c: &mut Criterion,
    name: &str,
    step: &Step,
    plan: &VerifyPlan<Unchecked>,
    launch: &LaunchSettings<'_>,
    canary: &Canary,
    kv: &[Vec<u8>],
    violations: u64,
    token_on: bool,
) {
    let mut group = c.benchmark_group(name);
    VERIFY.apply(&mut group);
    group.throughput(Throughput::Elements(plan.active_len() as u64));
    let mut ring = ring(violations as usize + 1);
    let mut counters = HealthCounters::new();
    let shape = &step.shape;
    // The ring is cleared between calls, outside the timed region.
    let mut timed = |b: &mut criterion::Bencher<'_>, token: bool| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ring.clear();
                let start = Instant::now();
                let s = if token {
                    cpu::verify(
                        shape,
                        plan,
                        TokenCheckOn,
                        launch,
                        canary,
                        &mut ring,
                        &mut counters,
                    )
                } else {
                    cpu::verify(
                        shape,
                        plan,
                        TokenCheckOff,
                        launch,
                        canary,
                        &mut ring,
                        &mut counters,
                    )
                };
                total += start.elapsed();
                assert_eq!(s.expect("valid plan").violations, violations);
            }
            total
        })
    };
    group.bench_function("token_off", |b| timed(b, false));
    if token_on {
        group.bench_function("token_on", |b| timed(b, true));
    }
    let slots = &plan.slot_indices()[..plan.active_len()];
    group.bench_function("gather", |b| {
        b.iter(|| gather(black_box(slots), Some(canary), kv))
    });
    group.finish();
}

fn verify_benches(c: &mut Criterion, rng: &mut Rng, kv: &[Vec<u8>]) {
    // 512 requests x 2048 cached tokens = 1 Mi entries, one decode step each.
    let (bs, prefix) = (512, 2048);
    let table = common::slot_table(rng, bs, prefix + 1, NUM_SLOTS);
    let tokens = common::token_pool(rng, &table);
    let decode = common::batch(rng, bs, prefix..=prefix, 1);
    let prefill = step(&prefill_of(&decode), &table, &tokens);
    let check = step(&decode, &table, &tokens);
    let head = LaunchSettings::new(LaunchTag::HeadKFull);
    let mut canary = canary();
    write_clean(&prefill, &head, &mut canary);

    verify_group(
        c,
        "verify_none",
        &check,
        &check.verify,
        &head,
        &canary,
        &[],
        0,
        true,
    );

    let mut disabled = check.verify.clone();
    *disabled.parts_mut().enable = 0;
    let mut group = c.benchmark_group("verify_disabled");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(1));
    let (mut ring, mut counters) = (ring(1), HealthCounters::new());
    group.bench_function("token_off", |b| {
        b.iter(|| {
            let s = cpu::verify(
                &check.shape,
                black_box(&disabled),
                TokenCheckOff,
                &head,
                &canary,
                &mut ring,
                &mut counters,
            );
            assert!(!s.expect("valid plan").enabled);
        })
    });
    group.finish();

    // Tamper with the real-KV hash of every 100th entry's slot: one row each, no cascade.
    let slots = check.verify.slot_indices();
    let tampered = (0..check.verify_entries).step_by(100).count() as u64;
    for i in (0..check.verify_entries).step_by(100) {
        let s = slots[i] as usize;
        let mut record = canary.slot(s).expect("slot in buffer");
        record.real_kv_hash = 1;
        canary.set_slot(s, record).expect("slot in buffer");
    }
    verify_group(
        c,
        "verify_none_1pct",
        &check,
        &check.verify,
        &head,
        &canary,
        &[],
        tampered,
        false,
    );

    let tail = head.with_real_kv(all_mode(kv));
    write_clean(&prefill, &tail, &mut canary);
    verify_group(
        c,
        "verify_all4",
        &check,
        &check.verify,
        &tail,
        &canary,
        kv,
        0,
        false,
    );
}

// ---------------------------------------------------------------------------------------------
// write

/// Per request of `step`, the chain of `mix3` steps over its tokens from the anchor hash.
fn mix3_chains(step: &Step) -> i64 {
    let (ids, pos) = (step.inputs.input_ids(), step.inputs.positions());
    let offsets = step.write.offsets();
    let mut acc = 0i64;
    for r in 0..step.write.active_requests() {
        let mut running = CHAIN_HEAD;
        for i in offsets[r] as usize..offsets[r + 1] as usize {
            running = chain_step(running, ids[i], pos[i]);
        }
        acc ^= running;
    }
    acc
}

/// Stores `(token, position, 0, 0)` of every entry of `step` at its slot of `bytes`.
fn scatter(step: &Step, bytes: &mut [u8]) {
    let (ids, pos) = (step.inputs.input_ids(), step.inputs.positions());
    let slots = step.inputs.out_cache_loc();
    for i in 0..step.write_entries {
        let at = slots[i] as usize * 32;
        let record = &mut bytes[at..at + 32];
        record[..8].copy_from_slice(&ids[i].to_le_bytes());
        record[8..16].copy_from_slice(&pos[i].to_le_bytes());
        record[16..].fill(0);
    }
}

/// Benches write of `step` with the input assert off (and on, if `assert_on`), plus the floors:
/// `mix3` and `scatter` without real-KV sources, `gather` of the KV strips with them.
fn write_group(
    c: &mut Criterion,
    name: &str,
    step: &Step,
    launch: &LaunchSettings<'_>,
    canary: &mut Canary,
    assert_on: bool,
    kv: &[Vec<u8>],
) {
    let mut group = c.benchmark_group(name);
    WRITE.apply(&mut group);
    group.throughput(Throughput::Elements(step.write_entries as u64));
    let (mut ring, mut counters) = (ring(1), HealthCounters::new());
    let written = step.write_entries as u64;
    group.bench_function("assert_off", |b| {
        b.iter(|| {
            let s = cpu::write(
                &step.shape,
                &step.write,
                black_box(&step.inputs),
                launch,
                canary,
                &mut ring,
                &mut counters,
            );
            assert_eq!(s.expect("valid write").written, written);
        })
    });
    if assert_on {
        let mut inputs: WriteInputs<Unchecked, InputAssertOn> = step
            .inputs
            .clone()
            .try_with_input_assert()
            .expect("bench buffers allocate");
        let e = inputs.expected_mut();
        e.tokens.copy_from_slice(step.inputs.input_ids());
        e.positions.copy_from_slice(step.inputs.positions());
        group.bench_function("assert_on", |b| {
            b.iter(|| {
                let s = cpu::write(
                    &step.shape,
                    &step.write,
                    black_box(&inputs),
                    launch,
                    canary,
                    &mut ring,
                    &mut counters,
                );
                assert_eq!(s.expect("valid write").violations, 0);
            })
        });
    }
    assert_eq!(ring.write_index(), 0, "{name}: the write is clean");
    if kv.is_empty() {
        group.bench_function("mix3", |b| b.iter(|| mix3_chains(black_box(step))));
        let mut bytes = vec![0u8; NUM_SLOTS * 32];
        group.bench_function("scatter", |b| {
            b.iter(|| scatter(black_box(step), &mut bytes))
        });
    } else {
        let slots = &step.inputs.out_cache_loc()[..step.write_entries];
        group.bench_function("gather", |b| b.iter(|| gather(black_box(slots), None, kv)));
    }
    group.finish();
}

fn write_benches(c: &mut Criterion, rng: &mut Rng, kv: &[Vec<u8>]) {
    let head = LaunchSettings::new(LaunchTag::HeadKFull);
    let mut canary = canary();

    // One prefill request of 8192 tokens.
    let table = common::slot_table(rng, 1, 8192, NUM_SLOTS);
    let tokens = common::token_pool(rng, &table);
    let one = step(&common::batch(rng, 1, 0..=0, 8192), &table, &tokens);
    write_group(c, "write_prefill_8192", &one, &head, &mut canary, true, &[]);
    let tail = head.with_real_kv(all_mode(kv));
    write_group(
        c,
        "write_prefill_8192_all4",
        &one,
        &tail,
        &mut canary,
        false,
        kv,
    );

    // 64 prefill requests of 512 tokens.
    let table = common::slot_table(rng, 64, 512, NUM_SLOTS);
    let tokens = common::token_pool(rng, &table);
    let batch = step(&common::batch(rng, 64, 0..=0, 512), &table, &tokens);
    write_group(
        c,
        "write_prefill_64x512",
        &batch,
        &head,
        &mut canary,
        true,
        &[],
    );

    // A decode step: 256 requests with 1792..=2304 cached tokens (written first), 1 token each.
    let table = common::slot_table(rng, 256, 2305, NUM_SLOTS);
    let tokens = common::token_pool(rng, &table);
    let decode = common::batch(rng, 256, 1792..=2304, 1);
    write_clean(
        &step(&prefill_of(&decode), &table, &tokens),
        &head,
        &mut canary,
    );
    let decode = step(&decode, &table, &tokens);
    write_group(
        c,
        "write_decode_256",
        &decode,
        &head,
        &mut canary,
        true,
        &[],
    );
}

fn benches(c: &mut Criterion) {
    let mut rng = common::rng();
    let kv = kv_memory(&mut rng);
    verify_benches(c, &mut rng, &kv);
    write_benches(c, &mut rng, &kv);
}

criterion_group!(write_verify, benches);
criterion_main!(write_verify);
