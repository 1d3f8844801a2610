//! Throughput of the CPU plan op against a plain copy of the bytes it writes.
//!
//! Each workload is one decode step: `bs` requests in shuffled `req_to_token` rows, prefix
//! lengths drawn uniformly from a range, one new token each, slot ids a random permutation of
//! the pool (so LUT reads are scattered, as in a long-running engine). The verify capacity is
//! exactly the entries the step needs. Next to every `plan` bench, `copy` copies the same output
//! bytes (four `i64` arrays of `T` entries) from prefilled sources: `plan / copy` is the cost of
//! planning relative to the cheapest possible producer of the same output.
//!
//! Run with `cargo bench --bench plan`; see docs/benchmarks.md.

mod common;

use common::{Rng, Timing};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kv_canary::{
    cpu, Batch, BatchColumns, BatchView, ExpectedTokenTable, ExpectedTokens, Group, IndexElement,
    PlanInputs, ReqToToken, ReqToTokenView, Shape, Swa, UncheckedCapacity,
};
use rand::seq::SliceRandom as _;
use std::hint::black_box;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The host plans of a run-time `shape` (bench sizes always allocate).
fn plans(
    shape: &kv_canary::UncheckedShape,
) -> (
    kv_canary::VerifyPlan<UncheckedCapacity>,
    kv_canary::WritePlan<UncheckedCapacity>,
) {
    let verify = shape.try_verify_plan().expect("bench plan buffers");
    (verify, shape.try_write_plan().expect("bench plan buffers"))
}

/// One decode step: the batch, its `req_to_token` table and the number of pool slots in use.
struct Step {
    batch: Batch,
    table: ReqToToken,
    pool_slots: usize,
}

/// `bs` requests in rows `1..=bs` (row 0 is the padding row), visited in shuffled order, with
/// prefixes drawn from `prefix`; every table cell of those rows holds a distinct slot id `>= 1`
/// (a permutation of the whole pool).
fn decode_step(rng: &mut Rng, bs: usize, prefix: RangeInclusive<usize>) -> Step {
    let width = prefix.end() + 1;
    let pool_slots = bs * width;
    let table = common::slot_table(rng, bs, width, pool_slots + 1);
    let batch = common::batch(rng, bs, prefix, 1);
    Step {
        batch,
        table,
        pool_slots,
    }
}

/// `full_to_swa_index_mapping` for a pool of `pool_slots` slots: slot 0 to 0, slots `1..` to a
/// permutation of SWA slots `1..`, and a trailing -1, as SGLang lays it out.
fn lut(rng: &mut Rng, pool_slots: usize) -> Vec<i64> {
    let mut lut: Vec<i64> = (0..=pool_slots as i64).collect();
    lut[1..].shuffle(rng);
    lut.push(-1);
    lut
}

/// An expected-token pool shaped like `table`, random token ids; every verified position valid.
fn token_pool(rng: &mut Rng, step: &Step) -> (ExpectedTokenTable, Vec<i64>) {
    let pool = common::token_pool(rng, &step.table);
    let valid = step.batch.prefix_lens().iter().map(|p| p + 1).collect();
    (pool, valid)
}

const DECODE: Timing = Timing {
    samples: 40,
    warm_up: Duration::from_secs(1),
    measure: Duration::from_secs(4),
    flat: false,
};

const LARGE: Timing = Timing {
    samples: 10,
    warm_up: Duration::from_secs(2),
    measure: Duration::from_secs(8),
    flat: true,
};

/// Benches `plan` on `inputs` and, in the same group, `copy` of the same output bytes; `roomy`
/// is at least the entries the step verifies (its cached tokens).
fn plan_vs_copy<G: Group, X: ExpectedTokens, B: BatchColumns, T: IndexElement>(
    c: &mut Criterion,
    name: &str,
    inputs: &PlanInputs<'_, G, X, B, T>,
    roomy: usize,
    timing: &Timing,
) {
    let bs = inputs.batch.len();
    let cap = |what, n| UncheckedCapacity::new(what, n).expect("positive capacity");
    let probe = Shape::from_capacities(
        cap("verify_capacity", roomy),
        cap("write_req_capacity", bs),
        cap("write_entry_capacity", bs),
    );
    let (mut v, mut w) = plans(&probe);
    let entries = cpu::plan(&probe, inputs, &mut v, &mut w)
        .expect("valid workload")
        .verify_num_valid;
    drop((v, w));
    let shape = Shape::from_capacities(
        cap("verify_capacity", entries),
        cap("write_req_capacity", bs),
        cap("write_entry_capacity", bs),
    );
    let (mut verify, mut write) = plans(&shape);

    let mut group = c.benchmark_group(name);
    timing.apply(&mut group);
    group.throughput(Throughput::Elements(entries as u64));
    group.bench_function("plan", |b| {
        b.iter(|| {
            let summary = cpu::plan(&shape, black_box(inputs), &mut verify, &mut write);
            assert!(summary.expect("valid workload").enabled);
        })
    });
    let sources: Vec<Vec<i64>> = (0..4)
        .map(|k| (0..entries as i64).map(|i| i ^ k).collect())
        .collect();
    let mut targets: Vec<Vec<i64>> = (0..4).map(|_| vec![0; entries]).collect();
    group.bench_function("copy", |b| {
        b.iter(|| {
            for (dst, src) in targets.iter_mut().zip(&sources) {
                dst.copy_from_slice(black_box(src));
            }
            black_box(&mut targets);
        })
    });
    group.finish();
}

/// The cached tokens of a batch of SGLang's columns (at least the entries it verifies).
fn cached(batch: &Batch) -> usize {
    batch.prefix_lens().iter().sum::<i64>() as usize
}

/// The same decode step in mistral.rs's shape: a `u32` block table per batch row (blocks of
/// 16 slots, a random permutation of the pool's blocks), `u32` context and query lengths.
struct PagedStep {
    blocks: Vec<u32>,
    blocks_per_row: usize,
    context_lens: Vec<u32>,
    query_lens: Vec<u32>,
}

fn paged_step(rng: &mut Rng, bs: usize, prefix: RangeInclusive<usize>) -> PagedStep {
    let blocks_per_row = (prefix.end() + 1).div_ceil(16);
    let mut blocks: Vec<u32> = (1..=(bs * blocks_per_row) as u32).collect();
    blocks.shuffle(rng);
    let batch = common::batch(rng, bs, prefix, 1);
    let context_lens = batch.prefix_lens().iter().map(|&p| p as u32 + 1).collect();
    PagedStep {
        blocks,
        blocks_per_row,
        context_lens,
        query_lens: vec![1; bs],
    }
}

fn benches(c: &mut Criterion) {
    let mut rng = common::rng();

    // Decode: bs 256, prefixes around 2048 (about 0.5 M entries).
    let decode = decode_step(&mut rng, 256, 1792..=2304);
    let full = PlanInputs::full(&decode.batch, &decode.table);
    plan_vs_copy(c, "decode_full", &full, cached(&decode.batch), &DECODE);

    // The same sizes from a block table of 16-slot blocks, indexed by batch row.
    let paged = paged_step(&mut rng, 256, 1792..=2304);
    let table = ReqToTokenView::block_table(256, paged.blocks_per_row, 16, &paged.blocks)
        .expect("the block table");
    let batch = BatchView::from_query_lens(256, &paged.context_lens, &paged.query_lens)
        .expect("the columns");
    let roomy = paged.context_lens.iter().map(|&c| c as usize).sum();
    let blocks = PlanInputs::from_views(batch, table);
    plan_vs_copy(c, "decode_block_table_b16", &blocks, roomy, &DECODE);

    let lut = lut(&mut rng, decode.pool_slots);
    let swa = full.with_group(Swa::window(1024).with_lut(&lut));
    plan_vs_copy(
        c,
        "decode_swa_w1024_lut",
        &swa,
        cached(&decode.batch),
        &DECODE,
    );

    let (pool, valid) = token_pool(&mut rng, &decode);
    let expected = full.with_expected(pool.with_valid_lens(&valid));
    plan_vs_copy(
        c,
        "decode_full_expected",
        &expected,
        cached(&decode.batch),
        &DECODE,
    );

    // Large: bs 4096, prefixes around 4096 (about 16.8 M entries).
    let large = decode_step(&mut rng, 4096, 3584..=4608);
    let full = PlanInputs::full(&large.batch, &large.table);
    plan_vs_copy(c, "large_full", &full, cached(&large.batch), &LARGE);
}

criterion_group!(plan, benches);
criterion_main!(plan);
