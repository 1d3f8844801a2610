//! [`HealthCounters`]: how much work the kernels did (spec §2.7).

use crate::memory::{Host, Memory};
use derive_where::derive_where;

/// The two health counters of one launch tag (spec §2.7), `i64` each.
///
/// * `slot_run_counter`: verify adds every active entry (slot-0 entries included); write adds
///   every entry it actually stamped (slot >= 0).
/// * `kernel_run_counter`: +1 per launch, unconditionally (also when verify is disabled or there
///   is no work).
///
/// In production each launch tag has its own pair. Both counters wrap on `i64` overflow, like the
/// device's 64-bit atomics.
#[derive_where(Clone, PartialEq, Eq, Debug; M::Scalar<i64>)]
pub struct HealthCounters<M: Memory = Host> {
    pub(crate) slot_run_counter: M::Scalar<i64>,
    pub(crate) kernel_run_counter: M::Scalar<i64>,
}

impl HealthCounters {
    /// Both counters at 0.
    pub fn new() -> Self {
        Self::from_parts(0, 0)
    }

    /// Counters with the given values (conformance dumps, FFI).
    pub fn from_parts(slot_run_counter: i64, kernel_run_counter: i64) -> Self {
        HealthCounters {
            slot_run_counter,
            kernel_run_counter,
        }
    }

    /// `slot_run_counter`.
    pub fn slot_run_counter(&self) -> i64 {
        self.slot_run_counter
    }

    /// `kernel_run_counter`.
    pub fn kernel_run_counter(&self) -> i64 {
        self.kernel_run_counter
    }

    #[inline]
    pub(crate) fn add_slots(&mut self, n: u64) {
        self.slot_run_counter = self.slot_run_counter.wrapping_add(n as i64);
    }

    #[inline]
    pub(crate) fn add_kernel_run(&mut self) {
        self.kernel_run_counter = self.kernel_run_counter.wrapping_add(1);
    }
}

impl Default for HealthCounters {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_wrap() {
        let mut c = HealthCounters::from_parts(i64::MAX, 5);
        c.add_slots(1);
        c.add_kernel_run();
        assert_eq!(c.slot_run_counter(), i64::MIN);
        assert_eq!(c.kernel_run_counter(), 6);
        assert_eq!(HealthCounters::new(), HealthCounters::from_parts(0, 0));
    }
}
