//! [`ReadbackPool`]: the pinned staging of a stream's asynchronous step reports, recycled.
//!
//! Each pending report owns one [`Readback`] (its own pinned words and event) from the moment
//! its copies are queued until it is taken or dropped, when the readback goes back to the pool
//! of its stream. So a report is never overwritten by a later step's copies, and none is lost:
//! a step whose report is queued while every readback of the pool is still held by an unread
//! report gets a new one (an allocation of pinned memory, which can stall the host; with
//! reports taken one step late, two readbacks serve every step and nothing is allocated after
//! the second step).

use super::gpu::Gpu;
use crate::cuda::driver::pinned::Readback;
use crate::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The free readbacks of one stream and the violations its taken reports delivered.
#[derive(Debug, Default)]
pub(crate) struct ReadbackPool {
    free: Mutex<Vec<Readback>>,
    delivered_violations: AtomicU64,
    allocated: AtomicU64,
}

impl ReadbackPool {
    /// A free readback of at least `wide` `i64` and `narrow` `i32` words, or a new one.
    pub(crate) fn take(&self, gpu: &Gpu, wide: usize, narrow: usize) -> Result<Readback, Error> {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.iter()
                .position(|r| r.wide_len() >= wide && r.narrow_len() >= narrow)
                .map(|i| free.swap_remove(i))
        };
        match reused {
            Some(readback) => Ok(readback),
            None => {
                self.allocated.fetch_add(1, Ordering::Relaxed);
                Readback::new(gpu.context(), wide, narrow)
            }
        }
    }

    /// A free readback of at least `wide` and `narrow` words, without allocating (a captured
    /// step may not allocate); `None` when none is free.
    pub(crate) fn take_free(&self, wide: usize, narrow: usize) -> Option<Readback> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.iter()
            .position(|r| r.wide_len() >= wide && r.narrow_len() >= narrow)
            .map(|i| free.swap_remove(i))
    }

    /// Allocates readbacks until `count` of at least `wide` and `narrow` words are free (before
    /// a capture, which may not allocate).
    pub(crate) fn reserve(
        &self,
        gpu: &Gpu,
        wide: usize,
        narrow: usize,
        count: usize,
    ) -> Result<(), Error> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let fitting = free
            .iter()
            .filter(|r| r.wide_len() >= wide && r.narrow_len() >= narrow)
            .count();
        for _ in fitting..count {
            self.allocated.fetch_add(1, Ordering::Relaxed);
            free.push(Readback::new(gpu.context(), wide, narrow)?);
        }
        Ok(())
    }

    /// Returns a readback to the pool.
    pub(crate) fn give_back(&self, readback: Readback) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(readback);
    }

    /// Counts `n` violations of a report just taken.
    pub(crate) fn deliver(&self, n: u64) {
        self.delivered_violations.fetch_add(n, Ordering::Relaxed);
    }

    /// Violations of every report taken so far.
    pub(crate) fn delivered_violations(&self) -> u64 {
        self.delivered_violations.load(Ordering::Relaxed)
    }

    /// Readbacks allocated so far (pinned allocations: host stalls).
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }
}
