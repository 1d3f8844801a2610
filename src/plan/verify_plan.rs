//! [`VerifyPlan`]: the flat verify work list (spec §2.4).

use crate::capacity::{Cap, Capacity};
use crate::memory::{host_array, static_size, Host, Memory};
use crate::Error;
use core::fmt;
use derive_where::derive_where;

/// The flat verify work list of spec §2.4, with its capacity `C` in the type.
///
/// Four `i64` arrays of exactly `C` entries (slot, expected token, expected position, predecessor
/// slot), the number of valid entries and the `enable` flag (`i32` each). The plan op writes it;
/// the verify op reads it. Entries at index `>= verify_num_valid` are stale and never read.
///
/// Beside SGLang's tensors it keeps one `i64` of its own: the entries the plan asked for
/// ([`requested_entries`](Self::requested_entries), `T` before the capacity clamp), so that a
/// plan over its capacity says by how much on either backend (the device's step reports read it
/// back with the rest).
///
/// `Clone` and `PartialEq` hold for every memory whose arrays and scalars have them (host plans;
/// device buffers are copied through the CUDA transfers instead). Equality compares the contents:
/// the capacity follows from the arrays' lengths.
#[derive_where(Clone, PartialEq; M::Array<i64>, M::Scalar<i32>, M::Scalar<i64>)]
pub struct VerifyPlan<C: Capacity, M: Memory = Host> {
    #[derive_where(skip(EqHashOrd))]
    pub(crate) capacity: C,
    pub(crate) slot_indices: M::Array<i64>,
    pub(crate) expected_tokens: M::Array<i64>,
    pub(crate) expected_positions: M::Array<i64>,
    pub(crate) prev_slot_indices: M::Array<i64>,
    pub(crate) num_valid: M::Scalar<i32>,
    pub(crate) enable: M::Scalar<i32>,
    /// `T`, the entries the plan asked for; -1 where unknown (a plan given by parts).
    pub(crate) requested: M::Scalar<i64>,
}

/// One verify entry: a slot to check and what it must hold (spec §2.4, §2.12 for sentinels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VerifyEntry {
    /// Canary slot to check (already SWA-translated); 0 = skip the entry.
    pub slot: i64,
    /// Expected token id; -1 = skip the token check.
    pub expected_token: i64,
    /// Expected stored position.
    pub expected_position: i64,
    /// Predecessor slot; negative = chain head, 0 = predecessor unreachable (chain check skipped).
    pub prev_slot: i64,
}

/// Mutable views of a host [`VerifyPlan`]'s fields, for host code that builds plans itself (a
/// sweep over running requests, say) or tampers with them in tests. Lengths cannot change.
#[derive(Debug)]
pub struct VerifyPlanMut<'a> {
    /// `verify_slot_indices`.
    pub slot_indices: &'a mut [i64],
    /// `verify_expected_tokens`.
    pub expected_tokens: &'a mut [i64],
    /// `verify_expected_positions`.
    pub expected_positions: &'a mut [i64],
    /// `verify_prev_slot_indices`.
    pub prev_slot_indices: &'a mut [i64],
    /// `verify_num_valid`.
    pub num_valid: &'a mut i32,
    /// `enable`.
    pub enable: &'a mut i32,
    /// The entries the plan asked for (`T`; -1: unknown).
    pub requested: &'a mut i64,
}

impl<const N: usize> VerifyPlan<Cap<N>> {
    /// A host verify plan of `N` entries (zeroed, `enable = 1`).
    ///
    /// # Panics
    ///
    /// If the `N` entries cannot be allocated (a size fixed at compile time, as for a
    /// `Box<[i64; N]>`); run-time capacities use [`try_with_capacity`](Self::try_with_capacity).
    pub fn new() -> Self {
        static_size(Self::try_with_capacity(Cap))
    }
}

impl<const N: usize> Default for VerifyPlan<Cap<N>> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Capacity> VerifyPlan<C> {
    /// A host verify plan of `capacity` entries: arrays zeroed, `verify_num_valid = 0`,
    /// `enable = 1` (SGLang leaves the arrays uninitialised; Rust gives them a value).
    ///
    /// Capacities come from a [`Shape`](crate::Shape) (`shape.try_verify_plan()`); this is the
    /// primitive it calls. A capacity whose arrays cannot be allocated is
    /// [`Error::AllocationFailed`] naming it.
    pub fn try_with_capacity(capacity: C) -> Result<Self, Error> {
        let n = capacity.get();
        Ok(VerifyPlan {
            capacity,
            slot_indices: host_array("verify_slot_indices", n, 0)?,
            expected_tokens: host_array("verify_expected_tokens", n, 0)?,
            expected_positions: host_array("verify_expected_positions", n, 0)?,
            prev_slot_indices: host_array("verify_prev_slot_indices", n, 0)?,
            num_valid: 0,
            enable: 1,
            requested: 0,
        })
    }

    /// The infallible form, for the CUDA backend's host copies of buffers that already exist on
    /// the device (`to_host`); it panics with the allocation error. Crate-private: the public
    /// API allocates run-time capacities with `try_with_capacity` only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_capacity(capacity: C) -> Self {
        static_size(Self::try_with_capacity(capacity))
    }

    /// A host verify plan from raw arrays (conformance dumps, FFI). Every array must hold exactly
    /// `capacity` entries. Its [`requested_entries`](Self::requested_entries) is `num_valid`
    /// when enabled (a plan within its capacity asked for exactly its entries), unknown (`None`)
    /// when not.
    pub fn from_parts(
        capacity: C,
        slot_indices: Vec<i64>,
        expected_tokens: Vec<i64>,
        expected_positions: Vec<i64>,
        prev_slot_indices: Vec<i64>,
        num_valid: i32,
        enable: i32,
    ) -> Result<Self, Error> {
        let n = capacity.get();
        for (what, len) in [
            ("verify_slot_indices", slot_indices.len()),
            ("verify_expected_tokens", expected_tokens.len()),
            ("verify_expected_positions", expected_positions.len()),
            ("verify_prev_slot_indices", prev_slot_indices.len()),
        ] {
            if len != n {
                return Err(Error::LengthMismatch {
                    what,
                    expected: n,
                    found: len,
                });
            }
        }
        Ok(VerifyPlan {
            capacity,
            slot_indices: slot_indices.into(),
            expected_tokens: expected_tokens.into(),
            expected_positions: expected_positions.into(),
            prev_slot_indices: prev_slot_indices.into(),
            num_valid,
            enable,
            requested: if enable != 0 {
                i64::from(num_valid)
            } else {
                -1
            },
        })
    }

    /// `verify_slot_indices` (all `C` entries, stale ones included).
    pub fn slot_indices(&self) -> &[i64] {
        &self.slot_indices
    }
    /// `verify_expected_tokens`.
    pub fn expected_tokens(&self) -> &[i64] {
        &self.expected_tokens
    }
    /// `verify_expected_positions`.
    pub fn expected_positions(&self) -> &[i64] {
        &self.expected_positions
    }
    /// `verify_prev_slot_indices`.
    pub fn prev_slot_indices(&self) -> &[i64] {
        &self.prev_slot_indices
    }
    /// `verify_num_valid` as stored (the plan op clamps it to the capacity).
    pub fn num_valid(&self) -> i32 {
        self.num_valid
    }
    /// `enable` as stored: 1 = run verify, 0 = skip the launch (plan overflow).
    pub fn enable(&self) -> i32 {
        self.enable
    }
    /// Whether a verify launch will check any entry (`enable != 0`).
    pub fn is_enabled(&self) -> bool {
        self.enable != 0
    }
    /// The verify entries the plan op asked for (`T`, before the capacity clamp): more than the
    /// capacity when the plan overflowed (`enable = 0`). `None` where unknown (a plan given by
    /// [`from_parts`](Self::from_parts) with `enable = 0`).
    pub fn requested_entries(&self) -> Option<u64> {
        u64::try_from(self.requested).ok()
    }

    /// The number of entries a verify launch reads: `clamp(verify_num_valid, 0, capacity)`,
    /// or 0 when disabled.
    pub fn active_len(&self) -> usize {
        if !self.is_enabled() {
            return 0;
        }
        usize::try_from(self.num_valid)
            .unwrap_or(0)
            .min(self.capacity.get())
    }

    /// The entries a verify launch reads, in index order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = VerifyEntry> + '_ {
        (0..self.active_len()).map(move |i| VerifyEntry {
            slot: self.slot_indices[i],
            expected_token: self.expected_tokens[i],
            expected_position: self.expected_positions[i],
            prev_slot: self.prev_slot_indices[i],
        })
    }

    /// Mutable access to every field (lengths fixed).
    pub fn parts_mut(&mut self) -> VerifyPlanMut<'_> {
        VerifyPlanMut {
            slot_indices: &mut self.slot_indices,
            expected_tokens: &mut self.expected_tokens,
            expected_positions: &mut self.expected_positions,
            prev_slot_indices: &mut self.prev_slot_indices,
            num_valid: &mut self.num_valid,
            enable: &mut self.enable,
            requested: &mut self.requested,
        }
    }

    /// Replaces the plan's work list by `entries` (a host-built sweep): writes them at `[0, n)`,
    /// sets `verify_num_valid = n` and `enable = 1`. More entries than the capacity is an error
    /// and leaves the plan untouched.
    pub fn set_entries(&mut self, entries: &[VerifyEntry]) -> Result<(), Error> {
        let cap = self.capacity.get();
        if entries.len() > cap || i32::try_from(entries.len()).is_err() {
            return Err(Error::SweepTooLong {
                entries: entries.len(),
                verify_capacity: cap,
            });
        }
        for (i, e) in entries.iter().enumerate() {
            self.slot_indices[i] = e.slot;
            self.expected_tokens[i] = e.expected_token;
            self.expected_positions[i] = e.expected_position;
            self.prev_slot_indices[i] = e.prev_slot;
        }
        self.num_valid = entries.len() as i32;
        self.enable = 1;
        self.requested = entries.len() as i64;
        Ok(())
    }
}

impl<C: Capacity, M: Memory> VerifyPlan<C, M> {
    /// The capacity (the length of each entry array).
    pub fn capacity(&self) -> C {
        self.capacity
    }
}

// Written out, not derived: it prints SGLang's tensor names (`verify_num_valid`, ...), which
// a derive cannot (it prints the Rust field names).
impl<C: Capacity> fmt::Debug for VerifyPlan<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifyPlan")
            .field("capacity", &self.capacity)
            .field("verify_num_valid", &self.num_valid)
            .field("enable", &self.enable)
            .field("requested_entries", &self.requested)
            .field("verify_slot_indices", &self.slot_indices)
            .field("verify_expected_tokens", &self.expected_tokens)
            .field("verify_expected_positions", &self.expected_positions)
            .field("verify_prev_slot_indices", &self.prev_slot_indices)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::UncheckedCapacity;

    #[test]
    fn allocation_matches_the_capacity_and_enables() {
        let plan = VerifyPlan::<Cap<5>>::new();
        assert_eq!(plan.slot_indices().len(), 5);
        assert_eq!(plan.enable(), 1);
        assert_eq!(plan.active_len(), 0);
    }

    #[test]
    fn run_time_capacities_allocate_fallibly() {
        let cap = UncheckedCapacity::new("verify_capacity", 1 << 61).unwrap();
        let err = VerifyPlan::try_with_capacity(cap).unwrap_err();
        assert_eq!(
            err,
            Error::AllocationFailed {
                what: "verify_slot_indices",
                rows: 1 << 61,
                cols: 1,
                element_bytes: 8
            }
        );
        let cap = UncheckedCapacity::new("verify_capacity", 3).unwrap();
        assert_eq!(VerifyPlan::try_with_capacity(cap).unwrap().enable(), 1);
    }

    #[test]
    fn the_requested_count_follows_its_source() {
        let cap = UncheckedCapacity::new("verify_capacity", 2).unwrap();
        let parts = |num_valid, enable| {
            VerifyPlan::from_parts(
                cap,
                vec![0; 2],
                vec![0; 2],
                vec![0; 2],
                vec![0; 2],
                num_valid,
                enable,
            )
            .unwrap()
        };
        // Given by parts: exactly its entries when enabled, unknown when over its capacity.
        assert_eq!(parts(2, 1).requested_entries(), Some(2));
        assert_eq!(parts(2, 0).requested_entries(), None);
        // A sweep's entries are what it asked for.
        let mut plan = parts(2, 0);
        let entry = VerifyEntry {
            slot: 1,
            expected_token: -1,
            expected_position: 0,
            prev_slot: -1,
        };
        plan.set_entries(&[entry]).unwrap();
        assert_eq!(plan.requested_entries(), Some(1));
        assert_eq!(VerifyPlan::<Cap<3>>::new().requested_entries(), Some(0));
    }

    #[test]
    fn from_parts_names_the_short_array() {
        let cap = UncheckedCapacity::new("verify_capacity", 2).unwrap();
        let err = VerifyPlan::from_parts(cap, vec![0; 2], vec![0; 1], vec![0; 2], vec![0; 2], 0, 1)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: verify_expected_tokens length must be 2, got 1"
        );
    }

    #[test]
    fn active_len_clamps_and_honours_enable() {
        let mut plan = VerifyPlan::<Cap<4>>::new();
        *plan.parts_mut().num_valid = 9;
        assert_eq!(plan.active_len(), 4);
        *plan.parts_mut().num_valid = -3;
        assert_eq!(plan.active_len(), 0);
        *plan.parts_mut().num_valid = 2;
        *plan.parts_mut().enable = 0;
        assert_eq!(plan.active_len(), 0);
    }

    #[test]
    fn set_entries_rejects_overflow_untouched() {
        let mut plan = VerifyPlan::<Cap<1>>::new();
        let e = VerifyEntry {
            slot: 3,
            expected_token: -1,
            expected_position: 0,
            prev_slot: -1,
        };
        assert_eq!(
            plan.set_entries(&[e, e]).unwrap_err().to_string(),
            "kv-canary: a sweep of 2 entries exceeds the verify plan: at most verify_capacity=1 entries (and at most i32::MAX = 2147483647, verify_num_valid's type)"
        );
        assert_eq!(plan, VerifyPlan::<Cap<1>>::new());
        plan.set_entries(&[e]).unwrap();
        assert_eq!(plan.entries().collect::<Vec<_>>(), vec![e]);
    }
}
