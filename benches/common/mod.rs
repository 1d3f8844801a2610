//! Helpers shared by the bench binaries: a seeded generator, engine-like `req_to_token` tables and
//! batches, and criterion group settings. Each bench binary uses a subset.
#![allow(dead_code)]

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, SamplingMode};
use kv_canary::{Batch, ExpectedTokenTable, ReqToToken};
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The seed every bench starts from, so every run measures the same inputs.
pub const SEED: u64 = 0x6b76_2d63_616e_6172;

/// The benches' seeded generator: `rand_chacha`'s ChaCha8 (portable, reproducible).
pub type Rng = ChaCha8Rng;

/// The generator every bench starts from ([`SEED`]).
pub fn rng() -> Rng {
    ChaCha8Rng::seed_from_u64(SEED)
}

/// A `req_to_token` table of `requests + 1` rows of `width` cells: row 0 is the padding row (all
/// zeros), every cell of rows `1..=requests` holds a distinct slot id drawn uniformly from
/// `[1, num_slots)`, so slots are scattered as in an engine that has been running for a while.
pub fn slot_table(rng: &mut Rng, requests: usize, width: usize, num_slots: usize) -> ReqToToken {
    let cells = requests * width;
    assert!(
        cells < num_slots,
        "{cells} cells need more than {num_slots} slots"
    );
    let mut slots: Vec<i32> = (1..num_slots as i32).collect();
    slots.shuffle(rng);
    let mut data = vec![0i32; width];
    data.extend_from_slice(&slots[..cells]);
    ReqToToken::from_vec(requests + 1, width, data).expect("table shape")
}

/// A batch of the `bs` requests in rows `1..=bs`, in shuffled order, with prefix lengths drawn
/// uniformly from `prefix` and `extend` new tokens each.
pub fn batch(rng: &mut Rng, bs: usize, prefix: RangeInclusive<usize>, extend: i64) -> Batch {
    let mut rows: Vec<i64> = (1..=bs as i64).collect();
    rows.shuffle(rng);
    let span = prefix.end() - prefix.start() + 1;
    let prefixes = (0..bs)
        .map(|_| (prefix.start() + rng.random_range(0..span)) as i64)
        .collect();
    Batch::try_from_columns(rows, prefixes, vec![extend; bs]).expect("batch columns")
}

/// An expected-token pool shaped like `table`, random token ids below 150,000.
pub fn token_pool(rng: &mut Rng, table: &ReqToToken) -> ExpectedTokenTable {
    let (rows, width) = (table.rows(), table.width());
    let data = (0..rows * width)
        .map(|_| rng.random_range(0..150_000i32))
        .collect();
    ExpectedTokenTable::from_vec(rows, width, data).expect("pool shape")
}

/// How long and how often criterion measures one workload.
pub struct Timing {
    /// Samples per bench.
    pub samples: usize,
    /// Warm-up time per bench.
    pub warm_up: Duration,
    /// Measurement time per bench.
    pub measure: Duration,
    /// Flat sampling (for iterations of several milliseconds).
    pub flat: bool,
}

impl Timing {
    /// Applies these settings to `group`.
    pub fn apply(&self, group: &mut BenchmarkGroup<'_, WallTime>) {
        group
            .sample_size(self.samples)
            .warm_up_time(self.warm_up)
            .measurement_time(self.measure);
        if self.flat {
            group.sampling_mode(SamplingMode::Flat);
        }
    }
}
