//! The CPU write op (spec §4): stamp every planned token into its canary slot, extending each
//! request's hash chain.
//!
//! With a real-KV fingerprint active, a request's entries are stamped in blocks whose
//! fingerprints are computed first, all strips of the block folded together (the fingerprints do
//! not depend on the chain, and the KV bytes are never written by the op).

use super::fingerprints::{fingerprints, BLOCK};
use crate::canary::{
    CanaryBuffer, CanarySlot, FailReason, HealthCounters, LaunchSettings, ViolationRing,
};
use crate::capacity::{Capacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::hash::chain_step;
use crate::input::{
    check_fits, read_i64, HostWriteInputs, IndexElement, WriteInputAssert, WriteInputsView,
};
use crate::plan::WritePlan;
use crate::shape::Shape;
use crate::Error;
use core::ops::Range;

/// What one write call did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WriteSummary {
    /// Requests with at least one planned token.
    pub requests: usize,
    /// Entries stamped (slot >= 0); the amount added to `slot_run_counter`.
    pub written: u64,
    /// Violation rows recorded (stored or dropped); the amount added to the write index.
    pub violations: u64,
}

/// Runs the write op of spec §4 on the CPU: for every request `r` of `plan`, stamps flat entries
/// `[write_offsets[r], write_offsets[r + 1])` of `inputs` into `canary`, chaining each token's
/// `prev_hash` to its predecessor, and reports assert failures into `ring`.
///
/// Per call: `kernel_run_counter += 1`; per request with tokens, the running hash starts at
/// `slot_hash(seed)` (the anchor hash for a seed < 0); each entry with `out_cache_loc >= 0`
/// stores `(token, position, running, real_kv_hash)` and advances
/// `running = mix3(running, token, position)` on the *actual* values; entries with a negative
/// slot write nothing and do not advance the chain. Slot 0 is written like any other slot.
/// `slot_run_counter` grows by the number of stamped entries.
///
/// Rows, in entry order (an entry can produce both, input-assert row first):
/// * input assert on ([`InputAssertOn`](crate::InputAssertOn), a type): token or position
///   differs from the expected tensors → `[tag, slot, pos, token, expected_token, running,
///   expected_position, WRITE_TOKEN | WRITE_POSITION bits]`;
/// * chain-position assert (run-time flag in `launch`, only for requests with a seed >= 0):
///   `pos != prev_pos + 1` → `[tag, slot, pos, token, token, running, prev_pos + 1,
///   WRITE_POSITION]`, where `prev_pos` starts at the seed's stored position and follows every
///   stamped entry.
///
/// The shape's write-request and write-entry capacities must match the plan's and the inputs'
/// (compile errors for static and branded capacities, [`Error::CapacityMismatch`] for unchecked).
///
/// ```
/// use kv_canary::{cpu, Batch, CanaryBuffer, Cap, HealthCounters, LaunchSettings, LaunchTag, PlanInputs,
///                 ReqToToken, Shape, TokenCheckOff, ViolationRing};
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
/// let (mut verify_plan, mut write_plan) = (shape.verify_plan(), shape.write_plan());
/// let table = ReqToToken::from_vec(4, 8, (0..32).collect())?; // row 1 holds slots 8..16
/// let mut canary = CanaryBuffer::<Cap<32>>::new();
/// let (mut ring, mut counters) = (ViolationRing::<Cap<16>>::new(), HealthCounters::new());
/// let launch = LaunchSettings::new(LaunchTag::HeadKFull);
///
/// // Step 1: the request in pool row 1 prefills three tokens into slots 8, 9, 10.
/// let batch = Batch::from_columns([1], [0], [3]);
/// cpu::plan(&shape, &PlanInputs::full(&batch, &table), &mut verify_plan, &mut write_plan)?;
/// let mut inputs = shape.write_inputs();
/// let p = inputs.parts_mut();
/// p.input_ids[..3].copy_from_slice(&[7, 8, 9]);
/// p.positions[..3].copy_from_slice(&[0, 1, 2]);
/// p.out_cache_loc[..3].copy_from_slice(&[8, 9, 10]);
/// cpu::write(&shape, &write_plan, &inputs, &launch, &mut canary, &mut ring, &mut counters)?;
///
/// // Step 2: it decodes one more token; verify re-derives the chain of its three-token prefix.
/// let batch = Batch::from_columns([1], [3], [1]);
/// cpu::plan(&shape, &PlanInputs::full(&batch, &table), &mut verify_plan, &mut write_plan)?;
/// let s = cpu::verify(&shape, &verify_plan, TokenCheckOff, &launch, &canary, &mut ring, &mut counters)?;
/// assert_eq!((s.checked, ring.write_index()), (3, 0));
/// # Ok::<(), kv_canary::Error>(())
/// ```
///
/// Write inputs allocated from another shape do not compile:
///
/// ```compile_fail
/// use kv_canary::{cpu, CanaryBuffer, Cap, HealthCounters, LaunchSettings, LaunchTag, Shape, ViolationRing};
/// let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
/// let stale = Shape::<Cap<8>, Cap<4>, Cap<4>>::new().write_inputs(); // 4 entries, not 8
/// let (mut canary, mut ring) = (CanaryBuffer::<Cap<32>>::new(), ViolationRing::<Cap<4>>::new());
/// let launch = LaunchSettings::new(LaunchTag::HeadKFull);
/// cpu::write(&shape, &shape.write_plan(), &stale, &launch, &mut canary, &mut ring,
///            &mut HealthCounters::new());
/// ```
///
/// # Malformed inputs (spec §7, §9): validated before anything is mutated
///
/// SGLang's GPU path reads or writes out of bounds on these and its reference raises or wraps;
/// here each is an error and **nothing** (buffer, ring, index, counters) is modified — unlike
/// SGLang's reference, which bumps `kernel_run_counter` before it validates.
/// * `write_num_valid_reqs` is clamped to `[0, write_req_capacity]` (a negative count processes
///   no request, as in the reference).
/// * `write_offsets[0..=active]` must be non-decreasing and inside `[0, E]` (`E` = entries of
///   `inputs`), else [`Error::MalformedOffsets`] naming the index and value. An empty range
///   (`offsets[r] == offsets[r + 1]`) is an empty request; its seed is never read.
/// * A seed `>= num_slots` (of a request with tokens) or an `out_cache_loc >= num_slots` is
///   [`Error::SlotOutOfRange`] naming the array, index and value. Negative seeds are chain heads
///   and negative `out_cache_loc` entries are skipped, as in SGLang.
/// * With a real-KV fingerprint active (mode not NONE, at least one source), a written slot
///   whose row lies past a source's rows is [`Error::RealKvSlotOutOfRange`].
///
/// # One slot written twice, and seeds written earlier in the same call
///
/// On the GPU, requests run concurrently, so a seed slot that another request of the same launch
/// writes is a data race (spec §9.8). This op is sequential like SGLang's reference (spec §4):
/// requests run in row order and entries in flat index order, so the outcome is defined:
///
/// * **Two entries with one `out_cache_loc`** (of one request or of two): the later entry's
///   record is what the slot holds. Within one request its `prev_hash` chains through the
///   earlier entry, which was stamped (and counted in `slot_run_counter`) before it was
///   overwritten.
/// * **A seed slot that an earlier request of the launch rewrote**: the later request's chain
///   starts at the chain hash of the rewritten record, and its chain-position assert reads the
///   rewritten position. A seed rewritten by a *later* request was read before it changed.
///
/// `tests/nothing_lost.rs` pins these outcomes.
///
/// # Views of the engine's element types
///
/// `inputs` are the owned [`WriteInputs`](crate::WriteInputs) or a
/// [`WriteInputsView`] over the engine's own slices, read alike. Each element of a view is
/// converted to `i64`; one past `i64::MAX` (a `u64` or `usize` element) in a planned entry is
/// [`Error::ElementOutOfRange`] naming the array, the index and the value, and nothing is
/// modified.
pub fn write<V, W, E, WB, I, S, R>(
    shape: &Shape<V, W, E>,
    plan: &WritePlan<WB>,
    inputs: &I,
    launch: &LaunchSettings<'_>,
    canary: &mut CanaryBuffer<S>,
    ring: &mut ViolationRing<R>,
    counters: &mut HealthCounters,
) -> Result<WriteSummary, Error>
where
    V: Capacity,
    W: SameWriteReqCapacity<WB>,
    E: SameWriteEntryCapacity<I::Capacity>,
    WB: Capacity,
    I: HostWriteInputs + ?Sized,
    S: Capacity,
    R: Capacity,
{
    let inputs = inputs.host_view();
    shape.write_req_capacity().check(plan.capacity())?;
    shape.write_entry_capacity().check(inputs.capacity())?;
    let active = validate(plan, &inputs, launch, canary)?;

    counters.add_kernel_run();
    let mut summary = WriteSummary::default();
    // Fingerprints of the current block of entries; all 0 without an active fingerprint.
    let mut real_kv = [0; BLOCK];
    for r in 0..active {
        let tokens = request_tokens(plan, r);
        if tokens.is_empty() {
            continue;
        }
        let seed = plan.seed_slot_indices[r];
        summary.requests += 1;
        let (written, violations) =
            write_request(seed, tokens, &inputs, launch, canary, ring, &mut real_kv);
        counters.add_slots(written);
        summary.written += written;
        summary.violations += violations;
    }
    Ok(summary)
}

/// Flat entries of request `r`, once `validate` has passed.
#[inline]
fn request_tokens<WB: Capacity>(plan: &WritePlan<WB>, r: usize) -> Range<usize> {
    plan.offsets[r] as usize..plan.offsets[r + 1] as usize
}

/// Checks every index the write will follow; returns the number of request rows to process.
#[allow(clippy::too_many_arguments, reason = "one element type per array")]
fn validate<
    WB: Capacity,
    EB: Capacity,
    A: WriteInputAssert,
    T: IndexElement,
    P: IndexElement,
    L: IndexElement,
    S: Capacity,
>(
    plan: &WritePlan<WB>,
    inputs: &WriteInputsView<'_, EB, A, T, P, L>,
    launch: &LaunchSettings<'_>,
    canary: &CanaryBuffer<S>,
) -> Result<usize, Error> {
    let active = plan.active_requests();
    if active == 0 {
        return Ok(0);
    }
    let n = inputs.capacity().get();
    let offsets = &plan.offsets[..=active];
    let mut min = 0i64;
    for (index, &value) in offsets.iter().enumerate() {
        if value < min || value as u64 > n as u64 {
            return Err(Error::MalformedOffsets {
                what: "write_offsets",
                index,
                value,
                min,
                max: n as i64,
            });
        }
        min = value;
    }
    for r in 0..active {
        let tokens = request_tokens(plan, r);
        if tokens.is_empty() {
            continue;
        }
        let seed = plan.seed_slot_indices[r];
        if seed >= 0 {
            canary.check_slot("write_seed_slot_indices", r, seed)?;
        }
        if !(T::FITS_I64 && P::FITS_I64 && L::FITS_I64) {
            check_entries_fit(inputs, tokens.clone())?;
        }
        for i in tokens {
            let slot = read_i64("out_cache_loc", i, inputs.out_cache_loc()[i])?;
            if slot >= 0 {
                let s = canary.check_slot("out_cache_loc", i, slot)?;
                launch.real_kv.check_slot(s)?;
            }
        }
    }
    Ok(active)
}

/// The entries of one request (every array the write reads) fit in `i64`.
fn check_entries_fit<
    EB: Capacity,
    A: WriteInputAssert,
    T: IndexElement,
    P: IndexElement,
    L: IndexElement,
>(
    inputs: &WriteInputsView<'_, EB, A, T, P, L>,
    tokens: Range<usize>,
) -> Result<(), Error> {
    let start = tokens.start;
    check_fits(
        "out_cache_loc",
        start,
        &inputs.out_cache_loc()[tokens.clone()],
    )?;
    check_fits("input_ids", start, &inputs.input_ids()[tokens.clone()])?;
    check_fits("positions", start, &inputs.positions()[tokens.clone()])?;
    if let Some((expected_tokens, expected_positions)) = inputs.input_assert_tensors() {
        check_fits(
            "expected_input_tokens",
            start,
            &expected_tokens[tokens.clone()],
        )?;
        check_fits(
            "expected_input_positions",
            start,
            &expected_positions[tokens],
        )?;
    }
    Ok(())
}

/// Stamps one validated request; returns `(entries written, rows recorded)`. `real_kv` is
/// scratch for a block's fingerprints, all 0 when the launch has no active fingerprint.
#[inline]
#[allow(clippy::too_many_arguments, reason = "one element type per array")]
fn write_request<
    EB: Capacity,
    A: WriteInputAssert,
    T: IndexElement,
    P: IndexElement,
    L: IndexElement,
    S: Capacity,
    R: Capacity,
>(
    seed: i64,
    tokens: Range<usize>,
    inputs: &WriteInputsView<'_, EB, A, T, P, L>,
    launch: &LaunchSettings<'_>,
    canary: &mut CanaryBuffer<S>,
    ring: &mut ViolationRing<R>,
    real_kv: &mut [i64; BLOCK],
) -> (u64, u64) {
    let tag = launch.tag.value();
    let mut running = canary.slot_hash(seed);
    let chain_assert = seed >= 0 && launch.chain_position_assert.is_on();
    let mut prev_pos = if chain_assert {
        canary.load(seed as usize).position
    } else {
        0
    };
    let (mut written, mut violations) = (0u64, 0u64);
    let hashing = launch.real_kv.is_active();
    // The request's entries of every array, sliced once: the loops below index nothing else.
    // Without the input assert the expected tensors are the inputs themselves, never read (the
    // type decides `A::ENABLED`), so one loop serves both.
    let (ids, positions) = (inputs.input_ids(), inputs.positions());
    let (expected_ids, expected_positions) =
        inputs.input_assert_tensors().unwrap_or((ids, positions));
    let entries = inputs.out_cache_loc()[tokens.clone()]
        .chunks(BLOCK)
        .zip(ids[tokens.clone()].chunks(BLOCK))
        .zip(positions[tokens.clone()].chunks(BLOCK))
        .zip(expected_ids[tokens.clone()].chunks(BLOCK))
        .zip(expected_positions[tokens].chunks(BLOCK));
    for (
        (((block_slots, block_ids), block_positions), block_expected_ids),
        block_expected_positions,
    ) in entries
    {
        if hashing {
            // The block's fingerprints first: their strips are loaded together, off the chain.
            fingerprints(&launch.real_kv, block_slots, |s| s >= 0, real_kv);
        }
        // Validated: every element of the request's entries fits in i64, so `as_i64` is exact.
        for (((((&slot, &token), &pos), &real_kv_hash), &et), &ep) in block_slots
            .iter()
            .zip(block_ids)
            .zip(block_positions)
            .zip(real_kv.iter())
            .zip(block_expected_ids)
            .zip(block_expected_positions)
        {
            let slot = slot.as_i64();
            if slot < 0 {
                continue;
            }
            let (token, pos) = (token.as_i64(), pos.as_i64());
            if A::ENABLED {
                let (et, ep) = (et.as_i64(), ep.as_i64());
                let bits = FailReason::NONE
                    .with_if(FailReason::WRITE_TOKEN_MISMATCH, token != et)
                    .with_if(FailReason::WRITE_POSITION_MISMATCH, pos != ep);
                if !bits.is_empty() {
                    ring.record([tag, slot, pos, token, et, running, ep, bits.bits()]);
                    violations += 1;
                }
            }
            if chain_assert {
                let want = prev_pos.wrapping_add(1);
                if pos != want {
                    let bits = FailReason::WRITE_POSITION_MISMATCH.bits();
                    ring.record([tag, slot, pos, token, token, running, want, bits]);
                    violations += 1;
                }
                prev_pos = pos;
            }
            canary.store(
                slot as usize,
                CanarySlot {
                    token,
                    position: pos,
                    prev_hash: running,
                    real_kv_hash,
                },
            );
            running = chain_step(running, token, pos);
            written += 1;
        }
    }
    (written, violations)
}

#[cfg(test)]
mod tests;
