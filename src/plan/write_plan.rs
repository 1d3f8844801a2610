//! [`WritePlan`]: per-request write metadata (spec §2.5).

use crate::capacity::{Cap, Capacity};
use crate::memory::{host_array, static_size, Host, Memory};
use crate::Error;
use core::fmt;
use core::ops::Range;
use derive_where::derive_where;

/// Per-request write metadata of spec §2.5, with the write-request capacity `C` in the type.
///
/// `write_offsets` holds `C + 1` entries (an exclusive prefix sum: request `r`'s tokens are flat
/// indices `[offsets[r], offsets[r + 1])`), `write_seed_slot_indices` holds `C` (the slot of the
/// token just before request `r`'s first new token, or -1 for a chain head), and
/// `write_num_valid_reqs` the batch size, padding rows included.
///
/// `Clone` and `PartialEq` hold for host plans (device buffers are copied through the CUDA
/// transfers instead); equality compares the contents, the capacity follows from their lengths.
#[derive_where(Clone, PartialEq; M::Array<i64>, M::Scalar<i32>)]
pub struct WritePlan<C: Capacity, M: Memory = Host> {
    #[derive_where(skip(EqHashOrd))]
    pub(crate) capacity: C,
    pub(crate) offsets: M::Array<i64>,
    pub(crate) seed_slot_indices: M::Array<i64>,
    pub(crate) num_valid_reqs: M::Scalar<i32>,
}

/// One request's part of a write: where its chain starts and which flat tokens it stamps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WriteRequest {
    /// Batch row.
    pub row: usize,
    /// Seed slot (-1 = chain head).
    pub seed_slot: i64,
    /// Flat token indices `[write_offsets[r], write_offsets[r + 1])` (empty when the difference
    /// is not positive).
    pub tokens: Range<i64>,
}

/// Mutable views of a host [`WritePlan`]'s fields (lengths fixed).
#[derive(Debug)]
pub struct WritePlanMut<'a> {
    /// `write_offsets` (`C + 1` entries).
    pub offsets: &'a mut [i64],
    /// `write_seed_slot_indices` (`C` entries).
    pub seed_slot_indices: &'a mut [i64],
    /// `write_num_valid_reqs`.
    pub num_valid_reqs: &'a mut i32,
}

impl<const N: usize> WritePlan<Cap<N>> {
    /// A host write plan for `N` requests (zeroed).
    ///
    /// # Panics
    ///
    /// If the `N + 1` offsets cannot be allocated (a size fixed at compile time); run-time
    /// capacities use [`try_with_capacity`](Self::try_with_capacity).
    pub fn new() -> Self {
        static_size(Self::try_with_capacity(Cap))
    }
}

impl<const N: usize> Default for WritePlan<Cap<N>> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Capacity> WritePlan<C> {
    /// A host write plan for `capacity` requests, zeroed (SGLang leaves it uninitialised). A
    /// capacity whose arrays cannot be allocated is [`Error::AllocationFailed`] naming it
    /// (`write_offsets` holds `capacity + 1` entries).
    pub fn try_with_capacity(capacity: C) -> Result<Self, Error> {
        let n = capacity.get();
        let offsets_len = offsets_len(n)?;
        Ok(WritePlan {
            capacity,
            offsets: host_array("write_offsets", offsets_len, 0)?,
            seed_slot_indices: host_array("write_seed_slot_indices", n, 0)?,
            num_valid_reqs: 0,
        })
    }

    /// The infallible form, for the CUDA backend's host copies of buffers that already exist on
    /// the device (`to_host`); it panics with the allocation error. Crate-private: the public
    /// API allocates run-time capacities with `try_with_capacity` only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_capacity(capacity: C) -> Self {
        static_size(Self::try_with_capacity(capacity))
    }

    /// A host write plan from raw arrays: `offsets` must hold `capacity + 1` entries and
    /// `seed_slot_indices` `capacity`.
    pub fn from_parts(
        capacity: C,
        offsets: Vec<i64>,
        seed_slot_indices: Vec<i64>,
        num_valid_reqs: i32,
    ) -> Result<Self, Error> {
        let n = capacity.get();
        let offsets_len = offsets_len(n)?;
        if offsets.len() != offsets_len {
            return Err(Error::LengthMismatch {
                what: "write_offsets",
                expected: offsets_len,
                found: offsets.len(),
            });
        }
        if seed_slot_indices.len() != n {
            return Err(Error::LengthMismatch {
                what: "write_seed_slot_indices",
                expected: n,
                found: seed_slot_indices.len(),
            });
        }
        Ok(WritePlan {
            capacity,
            offsets: offsets.into(),
            seed_slot_indices: seed_slot_indices.into(),
            num_valid_reqs,
        })
    }

    /// `write_offsets` (`C + 1` entries).
    pub fn offsets(&self) -> &[i64] {
        &self.offsets
    }
    /// `write_seed_slot_indices` (`C` entries).
    pub fn seed_slot_indices(&self) -> &[i64] {
        &self.seed_slot_indices
    }
    /// `write_num_valid_reqs` as stored.
    pub fn num_valid_reqs(&self) -> i32 {
        self.num_valid_reqs
    }

    /// The number of request rows a write processes: `clamp(write_num_valid_reqs, 0, C)`.
    pub fn active_requests(&self) -> usize {
        usize::try_from(self.num_valid_reqs)
            .unwrap_or(0)
            .min(self.capacity.get())
    }

    /// The requests a write processes, in row order (empty ones included).
    pub fn requests(&self) -> impl ExactSizeIterator<Item = WriteRequest> + '_ {
        (0..self.active_requests()).map(move |r| {
            let start = self.offsets[r];
            let end = self.offsets[r + 1].max(start);
            WriteRequest {
                row: r,
                seed_slot: self.seed_slot_indices[r],
                tokens: start..end,
            }
        })
    }

    /// Mutable access to every field (lengths fixed).
    pub fn parts_mut(&mut self) -> WritePlanMut<'_> {
        WritePlanMut {
            offsets: &mut self.offsets,
            seed_slot_indices: &mut self.seed_slot_indices,
            num_valid_reqs: &mut self.num_valid_reqs,
        }
    }
}

/// `write_offsets`' length, `capacity + 1`; a capacity of `usize::MAX` has none.
fn offsets_len(capacity: usize) -> Result<usize, Error> {
    capacity.checked_add(1).ok_or(Error::CapacityTooLarge {
        what: "write_req_capacity",
        capacity,
        reason: "write_offsets holds write_req_capacity + 1 entries, more than usize::MAX",
    })
}

impl<C: Capacity, M: Memory> WritePlan<C, M> {
    /// The write-request capacity.
    pub fn capacity(&self) -> C {
        self.capacity
    }
}

// Written out, not derived: it prints SGLang's tensor names (`write_offsets`, ...), which a
// derive cannot (it prints the Rust field names).
impl<C: Capacity> fmt::Debug for WritePlan<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WritePlan")
            .field("capacity", &self.capacity)
            .field("write_num_valid_reqs", &self.num_valid_reqs)
            .field("write_offsets", &self.offsets)
            .field("write_seed_slot_indices", &self.seed_slot_indices)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::UncheckedCapacity;

    #[test]
    fn offsets_hold_one_more_than_the_capacity() {
        let plan = WritePlan::<Cap<4>>::new();
        assert_eq!(plan.offsets().len(), 5);
        assert_eq!(plan.seed_slot_indices().len(), 4);
        let cap = UncheckedCapacity::new("write_req_capacity", 4).unwrap();
        let err = WritePlan::from_parts(cap, vec![0; 4], vec![0; 4], 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: write_offsets length must be 5, got 4"
        );
    }

    #[test]
    fn absurd_capacities_are_errors_not_panics() {
        let max = UncheckedCapacity::new("write_req_capacity", usize::MAX).unwrap();
        let err = WritePlan::from_parts(max, vec![0; 1], vec![], 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "kv-canary: write_req_capacity={} is too large: write_offsets holds write_req_capacity + 1 entries, more than usize::MAX",
                usize::MAX
            )
        );
        assert_eq!(WritePlan::try_with_capacity(max).unwrap_err(), err);
        let huge = UncheckedCapacity::new("write_req_capacity", 1 << 61).unwrap();
        assert_eq!(
            WritePlan::try_with_capacity(huge).unwrap_err(),
            Error::AllocationFailed {
                what: "write_offsets",
                rows: (1 << 61) + 1,
                cols: 1,
                element_bytes: 8
            }
        );
    }

    #[test]
    fn requests_clamp_the_count_and_empty_ranges() {
        let cap = UncheckedCapacity::new("write_req_capacity", 3).unwrap();
        let plan = WritePlan::from_parts(cap, vec![0, 2, 1, 5], vec![9, -1, 4], 7).unwrap();
        let reqs: Vec<_> = plan.requests().collect();
        assert_eq!(reqs.len(), 3);
        assert_eq!(reqs[0].tokens, 0..2);
        assert!(reqs[1].tokens.is_empty());
        assert_eq!(reqs[2].seed_slot, 4);
    }
}
