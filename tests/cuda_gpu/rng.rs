//! The seeded generator of the GPU tests: `rand_chacha`'s ChaCha8, so failures reproduce from the
//! printed seed on every platform. The helpers keep the cases' vocabulary (`below`, `range`,
//! `chance`, `pick`) on top of `rand`'s uniform draws.

use rand::{Rng as _, RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// ChaCha8 seeded from a `u64`.
pub struct Rng(ChaCha8Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        self.0.random_range(lo..=hi)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.0.random_range(0..items.len())]
    }
}
