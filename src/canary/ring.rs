//! [`ViolationRing`]: the fill-once violation log and its write index (spec §2.6).

use super::violation::{raw_rows, Violation};
use crate::capacity::{Cap, Capacity};
use crate::consts::VIOLATION_FIELDS;
use crate::memory::{host_table, static_size, Host, Memory};
use crate::Error;
use core::fmt;
use derive_where::derive_where;

/// The violation ring of spec §2.6: `R` rows (its capacity, in the type) of 8 `i64` fields, and
/// the `i32` write index counting every violation recorded since the last clear.
///
/// "Fill-once": recording a row takes `seq = write_index` and increments the index; the row is
/// stored at `seq` only if `seq < R`, otherwise dropped. The index keeps counting past the
/// capacity, so `write_index - R` rows were lost once it exceeds `R`. There is no wrap-around
/// of the rows; the host clears the ring with [`clear`](ViolationRing::clear).
///
/// The index is an `i32` (spec §2.6, the device's `atomicAdd` on `int32`): a ring kept across
/// 2^31 violations without a clear wraps it negative, and a negative index given to
/// [`from_parts`](ViolationRing::from_parts) means nothing either. [`count`](ViolationRing::count)
/// reports such an index as an error naming it, never as a clean ring or a small count (the
/// step API clears its ring every step, so only a caller's own ring gets there).
///
/// `Clone` and `PartialEq` hold for host rings; equality compares rows and write index (the
/// capacity follows from the rows' length).
#[derive_where(Clone, PartialEq; M::Array<i64>, M::Scalar<i32>)]
pub struct ViolationRing<R: Capacity, M: Memory = Host> {
    #[derive_where(skip(EqHashOrd))]
    pub(crate) capacity: R,
    pub(crate) rows: M::Array<i64>,
    pub(crate) write_index: M::Scalar<i32>,
}

/// What a ring's write index says about the violations recorded since the last clear: the rows
/// stored and the rows dropped past the capacity (their sum is the write index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingCount {
    /// Rows stored in the ring: `min(write_index, capacity)`.
    pub stored: usize,
    /// Violations recorded but dropped because the ring was full: `write_index - capacity`
    /// once the index exceeds the capacity, else 0.
    pub dropped: u64,
}

/// The `what` of the [`Error::OutOfRange`] that [`RingCount::decode`] returns for a negative
/// write index.
pub const WRAPPED_WRITE_INDEX: &str = "violation_ring write_index (negative: it wrapped past \
     i32::MAX after 2^31 violations without a clear, or was given negative; the count of \
     violations is lost)";

impl RingCount {
    /// Decodes a ring's `write_index` against its `capacity` (host rings, and the device
    /// reports' readback of the index). A negative index (the `i32` wrapped past `i32::MAX`, or
    /// a negative index given) is [`Error::OutOfRange`] naming it, with `what` =
    /// [`WRAPPED_WRITE_INDEX`]: the number of violations it stands for is unknown, so it is
    /// reported neither as clean nor as a small count.
    pub fn decode(write_index: i32, capacity: usize) -> Result<RingCount, Error> {
        let recorded = u32::try_from(write_index).map_err(|_| Error::OutOfRange {
            what: WRAPPED_WRITE_INDEX,
            value: i64::from(write_index),
            allowed: "[0, 2147483647]",
        })?;
        let recorded = u64::from(recorded);
        let capacity = capacity as u64;
        Ok(RingCount {
            // At most `capacity`, a usize.
            stored: recorded.min(capacity) as usize,
            dropped: recorded.saturating_sub(capacity),
        })
    }

    /// Violations recorded since the last clear, stored or dropped (the write index).
    pub fn recorded(&self) -> u64 {
        self.stored as u64 + self.dropped
    }
}

impl<const N: usize> ViolationRing<Cap<N>> {
    /// An empty host ring of `N` rows.
    ///
    /// # Panics
    ///
    /// If the `N x 8` fields cannot be allocated (a size fixed at compile time); run-time
    /// capacities use [`try_with_capacity`](Self::try_with_capacity).
    pub fn new() -> Self {
        static_size(Self::try_with_capacity(Cap))
    }
}

impl<const N: usize> Default for ViolationRing<Cap<N>> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Capacity> ViolationRing<R> {
    /// An empty host ring of `capacity` rows (rows zeroed, write index 0). A capacity whose
    /// `capacity x 8` fields cannot be allocated is [`Error::AllocationFailed`] naming it.
    pub fn try_with_capacity(capacity: R) -> Result<Self, Error> {
        Ok(ViolationRing {
            capacity,
            rows: host_table("violation_ring", capacity.get(), VIOLATION_FIELDS, 0)?,
            write_index: 0,
        })
    }

    /// The infallible form, for the CUDA backend's host copies of buffers that already exist on
    /// the device (`to_host`); it panics with the allocation error. Crate-private: the public
    /// API allocates run-time capacities with `try_with_capacity` only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_capacity(capacity: R) -> Self {
        static_size(Self::try_with_capacity(capacity))
    }

    /// A host ring from raw contents (conformance dumps, FFI): `rows` holds `capacity x 8`
    /// fields row-major, `write_index` is stored as given (it may exceed the capacity).
    pub fn from_parts(capacity: R, rows: Vec<i64>, write_index: i32) -> Result<Self, Error> {
        if capacity.get().checked_mul(VIOLATION_FIELDS) != Some(rows.len()) {
            return Err(Error::TableShape {
                what: "violation_ring",
                rows: capacity.get(),
                cols: VIOLATION_FIELDS,
                len: rows.len(),
            });
        }
        Ok(ViolationRing {
            capacity,
            rows: rows.into(),
            write_index,
        })
    }

    /// Every field of every row, row-major (`capacity x 8`), unused rows included.
    pub fn rows_flat(&self) -> &[i64] {
        &self.rows
    }

    /// The write index: the number of violations recorded since the last clear (it keeps
    /// counting past the capacity).
    pub fn write_index(&self) -> i32 {
        self.write_index
    }

    /// The stored and dropped counts the write index stands for; a negative (wrapped) index is
    /// an error naming it ([`RingCount::decode`]). Reports use this, not the two raw readings
    /// below.
    pub fn count(&self) -> Result<RingCount, Error> {
        RingCount::decode(self.write_index, self.capacity.get())
    }

    /// The number of rows actually stored: `clamp(write_index, 0, capacity)` (0 for a negative
    /// index, which [`count`](Self::count) reports as an error).
    pub fn stored_len(&self) -> usize {
        usize::try_from(self.write_index)
            .unwrap_or(0)
            .min(self.capacity.get())
    }

    /// Violations recorded but dropped because the ring was full (0 for a negative index, which
    /// [`count`](Self::count) reports as an error).
    pub fn dropped(&self) -> u64 {
        u64::try_from(self.write_index)
            .unwrap_or(0)
            .saturating_sub(self.capacity.get() as u64)
    }

    /// The stored rows, raw, in recording order.
    pub fn raw_rows(&self) -> impl ExactSizeIterator<Item = [i64; VIOLATION_FIELDS]> + '_ {
        raw_rows(&self.rows[..self.stored_len() * VIOLATION_FIELDS])
    }

    /// The stored rows, decoded, in recording order.
    pub fn violations(&self) -> impl ExactSizeIterator<Item = Violation> + '_ {
        self.raw_rows().map(Violation::from_row)
    }

    /// Empties the ring: every row zeroed, write index 0.
    pub fn clear(&mut self) {
        self.rows.fill(0);
        self.write_index = 0;
    }

    /// Records one row: stored at `write_index` if that is inside the ring, dropped otherwise;
    /// the index is incremented either way (wrapping like the device's `atomicAdd` on `i32`).
    #[inline]
    pub(crate) fn record(&mut self, row: [i64; VIOLATION_FIELDS]) {
        let seq = self.write_index;
        self.write_index = seq.wrapping_add(1);
        if let Ok(seq) = usize::try_from(seq) {
            if seq < self.capacity.get() {
                let at = seq * VIOLATION_FIELDS;
                self.rows[at..at + VIOLATION_FIELDS].copy_from_slice(&row);
            }
        }
    }
}

impl<R: Capacity, M: Memory> ViolationRing<R, M> {
    /// The capacity (number of rows).
    pub fn capacity(&self) -> R {
        self.capacity
    }
}

// Written out, not derived: it prints the rows as 8-field rows, a derive the flat array.
impl<R: Capacity> fmt::Debug for ViolationRing<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViolationRing")
            .field("capacity", &self.capacity)
            .field("write_index", &self.write_index)
            .field("rows", &self.raw_rows().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::UncheckedCapacity;

    #[test]
    fn ten_violations_into_four_rows_count_ten() {
        let mut ring = ViolationRing::<Cap<4>>::new();
        for i in 0..10 {
            ring.record([0, i, 0, 0, 0, 0, 0, 2]);
        }
        assert_eq!(ring.write_index(), 10);
        assert_eq!(ring.stored_len(), 4);
        assert_eq!(ring.dropped(), 6);
        let slots: Vec<i64> = ring.violations().map(|v| v.slot).collect();
        assert_eq!(slots, [0, 1, 2, 3]);
    }

    #[test]
    fn rows_append_after_existing_ones() {
        let cap = UncheckedCapacity::new("ring_capacity", 3).unwrap();
        let mut rows = vec![0; 24];
        rows[..8].copy_from_slice(&[0, 5, 1, 2, 3, 4, 5, 2]);
        let mut ring = ViolationRing::from_parts(cap, rows, 1).unwrap();
        ring.record([1, 6, 0, 0, 0, 0, 0, 1]);
        assert_eq!(
            &ring.rows_flat()[..16],
            &[0, 5, 1, 2, 3, 4, 5, 2, 1, 6, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(ring.write_index(), 2);
        ring.clear();
        assert_eq!((ring.write_index(), ring.stored_len()), (0, 0));
        assert!(ring.rows_flat().iter().all(|&x| x == 0));
    }

    #[test]
    fn from_parts_checks_the_row_count() {
        let cap = UncheckedCapacity::new("ring_capacity", 2).unwrap();
        let err = ViolationRing::from_parts(cap, vec![0; 15], 0).unwrap_err();
        assert!(err.to_string().contains("15"), "{err}");
    }

    #[test]
    fn run_time_capacities_allocate_fallibly() {
        let cap = UncheckedCapacity::new("ring_capacity", usize::MAX).unwrap();
        assert_eq!(
            ViolationRing::try_with_capacity(cap).unwrap_err(),
            Error::AllocationFailed {
                what: "violation_ring",
                rows: usize::MAX as u128,
                cols: 8,
                element_bytes: 8
            }
        );
        let cap = UncheckedCapacity::new("ring_capacity", 3).unwrap();
        assert_eq!(
            ViolationRing::try_with_capacity(cap)
                .unwrap()
                .rows_flat()
                .len(),
            24
        );
    }

    #[test]
    fn count_decodes_the_index_and_names_a_wrapped_one() {
        let cap = UncheckedCapacity::new("ring_capacity", 4).unwrap();
        for (index, stored, dropped) in [(0, 0, 0), (3, 3, 0), (4, 4, 0), (10, 4, 6)] {
            let ring = ViolationRing::from_parts(cap, vec![0; 32], index).unwrap();
            let count = ring.count().unwrap();
            assert_eq!((count.stored, count.dropped), (stored, dropped), "{index}");
            assert_eq!(count.recorded(), index as u64);
            assert_eq!((ring.stored_len(), ring.dropped()), (stored, dropped));
        }
        let full = RingCount::decode(i32::MAX, 4).unwrap();
        assert_eq!((full.stored, full.dropped), (4, i32::MAX as u64 - 4));
        // One violation past i32::MAX: the index wraps (like the device's atomicAdd) and the
        // count is reported lost, naming the index, never as clean or as a small count.
        let mut ring = ViolationRing::from_parts(cap, vec![0; 32], i32::MAX).unwrap();
        ring.record([1; 8]);
        assert_eq!(ring.write_index(), i32::MIN);
        let err = ring.count().unwrap_err();
        assert_eq!(
            err,
            Error::OutOfRange {
                what: WRAPPED_WRITE_INDEX,
                value: i64::from(i32::MIN),
                allowed: "[0, 2147483647]",
            }
        );
        let message = err.to_string();
        assert!(message.starts_with("kv-canary: "), "{message}");
        assert!(message.contains("-2147483648"), "{message}");
        assert!(RingCount::decode(-1, usize::MAX).is_err());
        let huge = RingCount::decode(7, usize::MAX).unwrap();
        assert_eq!((huge.stored, huge.dropped), (7, 0));
    }

    #[test]
    fn a_negative_index_stores_nothing() {
        let cap = UncheckedCapacity::new("ring_capacity", 2).unwrap();
        let mut ring = ViolationRing::from_parts(cap, vec![0; 16], -1).unwrap();
        ring.record([9; 8]);
        assert!(ring.rows_flat().iter().all(|&x| x == 0));
        assert_eq!(ring.write_index(), 0);
    }
}
