//! The CPU verify op (spec §5): re-derive every planned slot's chain link, position, token and
//! real-KV fingerprint and report mismatches. Read-only on the canary buffer.
//!
//! Entries are checked in blocks: a block's records, predecessor hashes and fingerprints are
//! gathered first, so that its cache misses overlap, then its entries are checked in index order.

use super::fingerprints::{fingerprints, BLOCK};
use crate::canary::{
    CanaryBuffer, CanarySlot, FailReason, HealthCounters, LaunchSettings, TokenCheck, ViolationRing,
};
use crate::capacity::{Capacity, SameVerifyCapacity};
use crate::consts::TOKEN_TO_KV_SLOT_PADDING;
use crate::hash::CHAIN_HEAD;
use crate::plan::VerifyPlan;
use crate::shape::Shape;
use crate::Error;
use core::ops::Range;

/// What one verify call did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VerifySummary {
    /// Whether the plan was enabled (`enable != 0`).
    pub enabled: bool,
    /// Active entries, `clamp(verify_num_valid, 0, capacity)` (0 when disabled); the amount
    /// added to `slot_run_counter`.
    pub entries: usize,
    /// Entries actually checked (slot != 0).
    pub checked: usize,
    /// Violation rows recorded (stored or dropped); the amount added to the write index.
    pub violations: u64,
}

/// Runs the verify op of spec §5 on the CPU: checks the first `verify_num_valid` entries of
/// `plan` against `canary` and records one row per failing entry into `ring`.
///
/// Per call: `kernel_run_counter += 1` (always); if `enable == 0` nothing else happens (ring,
/// index and slot counter untouched). Otherwise `active = clamp(verify_num_valid, 0, capacity)`
/// (a count above the capacity or negative is clamped, as in SGLang's reference) and
/// `slot_run_counter += active`. For each active entry, in index order:
///
/// * slot 0 (the reserved padding slot) is skipped: no loads, no row — but it was counted;
/// * chain: `prev < 0` expects the anchor hash, `prev > 0` expects the chain hash of slot
///   `prev`, and `prev == 0` (predecessor unreachable) skips only the chain check;
/// * position: the stored position must equal the plan's;
/// * token (only with [`TokenCheckOn`](crate::TokenCheckOn), a compile-time variant):
///   an expected token other than -1 must equal the stored one; with
///   [`TokenCheckOff`](crate::TokenCheckOff) the expected-token array is never read;
/// * real KV: the stored `real_kv_hash` must equal the fingerprint of the slot's KV bytes now
///   (0 when the launch has no active fingerprint, so a non-zero stored hash is flagged).
///
/// A failing entry records `[tag, slot, stored position, stored token, expected token (-1 when
/// absent or unchecked), stored prev_hash, expected chain hash (= stored prev_hash when
/// skipped), bits]`. A full ring drops rows but the write index counts every one. `canary` is
/// taken by shared reference: verify never writes it.
///
/// # Malformed plans (spec §7, §10): validated before anything is mutated
///
/// SGLang's GPU path reads out of bounds on these and its reference wraps or raises; here each
/// is an error and nothing (ring, index, counters) is modified. Only entries the op would read
/// are checked (none when `enable == 0`; none past `active`; no prev of a slot-0 entry).
/// * A slot outside `[1, num_slots)` other than 0 is [`Error::SlotOutOfRange`] naming
///   `verify_slot_indices`, the entry index and the value. This includes **negative slots**: a
///   -1 that an SWA lookup table passed through for a position inside the window is a
///   bookkeeping bug to surface, not a sentinel (only slot 0 is skipped, as in SGLang).
/// * A predecessor `>= num_slots` is [`Error::SlotOutOfRange`] naming
///   `verify_prev_slot_indices` (negative predecessors are chain heads, 0 skips the chain check).
/// * With a fingerprint active, a slot whose row lies past a source's rows is
///   [`Error::RealKvSlotOutOfRange`].
pub fn verify<V, W, E, VB, K, S, R>(
    shape: &Shape<V, W, E>,
    plan: &VerifyPlan<VB>,
    check: K,
    launch: &LaunchSettings<'_>,
    canary: &CanaryBuffer<S>,
    ring: &mut ViolationRing<R>,
    counters: &mut HealthCounters,
) -> Result<VerifySummary, Error>
where
    V: SameVerifyCapacity<VB>,
    W: Capacity,
    E: Capacity,
    VB: Capacity,
    K: TokenCheck,
    S: Capacity,
    R: Capacity,
{
    let _ = check;
    shape.verify_capacity().check(plan.capacity())?;
    let active = plan.active_len();
    validate(plan, active, launch, canary)?;

    counters.add_kernel_run();
    let mut summary = VerifySummary {
        enabled: plan.is_enabled(),
        ..VerifySummary::default()
    };
    if !summary.enabled {
        return Ok(summary);
    }
    counters.add_slots(active as u64);
    summary.entries = active;
    let tag = launch.tag.value();
    let mut block = Block::new();
    for start in (0..active).step_by(BLOCK) {
        let entries = start..active.min(start + BLOCK);
        block.gather(plan, entries.clone(), launch, canary);
        for (j, i) in entries.enumerate() {
            let slot = plan.slot_indices[i];
            if slot == TOKEN_TO_KV_SLOT_PADDING {
                continue;
            }
            summary.checked += 1;
            let stored = block.stored[j];
            let reachable = plan.prev_slot_indices[i] != TOKEN_TO_KV_SLOT_PADDING;
            let expected_chain = if reachable {
                block.prev_hash[j]
            } else {
                stored.prev_hash
            };
            let expected_token = if K::ENABLED {
                plan.expected_tokens[i]
            } else {
                -1
            };
            let bits = FailReason::NONE
                .with_if(
                    FailReason::VERIFY_CHAIN_HASH_MISMATCH,
                    stored.prev_hash != expected_chain,
                )
                .with_if(
                    FailReason::VERIFY_TOKEN_MISMATCH,
                    expected_token != -1 && stored.token != expected_token,
                )
                .with_if(
                    FailReason::VERIFY_POSITION_MISMATCH,
                    stored.position != plan.expected_positions[i],
                )
                .with_if(
                    FailReason::VERIFY_REAL_KV_HASH_MISMATCH,
                    stored.real_kv_hash != block.real_kv[j],
                );
            if !bits.is_empty() {
                ring.record([
                    tag,
                    slot,
                    stored.position,
                    stored.token,
                    expected_token,
                    stored.prev_hash,
                    expected_chain,
                    bits.bits(),
                ]);
                summary.violations += 1;
            }
        }
    }
    Ok(summary)
}

/// What the checks of one block of validated entries need from memory, gathered before any check
/// so that the block's cache misses overlap. Slot-0 entries load nothing (their fields stay
/// default).
struct Block {
    /// The stored record of each entry's slot.
    stored: [CanarySlot; BLOCK],
    /// The record of each entry's predecessor slot (when `prev > 0`).
    prev_records: [CanarySlot; BLOCK],
    /// `slot_hash(prev)` of each entry whose predecessor is reachable (`prev != 0`).
    prev_hash: [i64; BLOCK],
    /// The slot's real-KV fingerprint now (0 without an active fingerprint).
    real_kv: [i64; BLOCK],
}

impl Block {
    fn new() -> Block {
        Block {
            stored: [CanarySlot::default(); BLOCK],
            prev_records: [CanarySlot::default(); BLOCK],
            prev_hash: [0; BLOCK],
            real_kv: [0; BLOCK],
        }
    }

    /// Fills the block for `entries` (at most [`BLOCK`] validated entries of `plan`).
    #[inline(always)]
    fn gather<VB: Capacity, S: Capacity>(
        &mut self,
        plan: &VerifyPlan<VB>,
        entries: Range<usize>,
        launch: &LaunchSettings<'_>,
        canary: &CanaryBuffer<S>,
    ) {
        let slots = &plan.slot_indices[entries.clone()];
        let prevs = &plan.prev_slot_indices[entries];
        // Loads only, back to back: the block's misses are in flight together.
        for (j, (&slot, &prev)) in slots.iter().zip(prevs).enumerate() {
            if slot != TOKEN_TO_KV_SLOT_PADDING {
                self.stored[j] = canary.load(slot as usize);
                if prev > 0 {
                    self.prev_records[j] = canary.load(prev as usize);
                }
            }
        }
        for (j, &prev) in prevs.iter().enumerate() {
            self.prev_hash[j] = if prev < 0 {
                CHAIN_HEAD
            } else {
                self.prev_records[j].chain_hash()
            };
        }
        fingerprints(
            &launch.real_kv,
            slots,
            |s| s != TOKEN_TO_KV_SLOT_PADDING,
            &mut self.real_kv,
        );
    }
}

/// Checks every slot the verify will load.
fn validate<VB: Capacity, S: Capacity>(
    plan: &VerifyPlan<VB>,
    active: usize,
    launch: &LaunchSettings<'_>,
    canary: &CanaryBuffer<S>,
) -> Result<(), Error> {
    for i in 0..active {
        let slot = plan.slot_indices[i];
        if slot == TOKEN_TO_KV_SLOT_PADDING {
            continue;
        }
        let s = canary.check_slot("verify_slot_indices", i, slot)?;
        launch.real_kv.check_slot(s)?;
        let prev = plan.prev_slot_indices[i];
        if prev > 0 {
            canary.check_slot("verify_prev_slot_indices", i, prev)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
