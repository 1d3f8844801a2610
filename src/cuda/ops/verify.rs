//! The verify launch (spec §5) on device buffers.

use super::{Prepared, VerifyLaunch};
use crate::canary::{CanaryBuffer, HealthCounters, TokenCheck, ViolationRing};
use crate::capacity::{Capacity, SameVerifyCapacity};
use crate::cuda::abi::args::{VerifyArgs, VerifyPairArgs};
use crate::cuda::abi::kernels::{Fold, Kernel, STAGED_SHARED_BYTES};
use crate::cuda::abi::shared::{
    STAGED_THREADS, VERIFY_STAGE_ENTRIES, VERIFY_STREAMED_SHARED_BYTES, VERIFY_THREADS,
};
use crate::cuda::device::settings::DeviceSettings;
use crate::cuda::device::stream::{Queue, Target};
use crate::cuda::device::tuning::KernelTuning;
use crate::cuda::driver::launch::LaunchDims;
use crate::cuda::driver::memory as driver;
use crate::memory::Device;
use crate::plan::VerifyPlan;
use crate::shape::Shape;
use crate::Error;

/// Queues the verify op of spec §5 on `on`: checks the plan's active entries against `canary`
/// and appends a row per failing entry to `ring`.
///
/// The device twin of [`cpu::verify`](crate::cpu::verify): same capacity relation (shape vs
/// plan), same token-check variant as a type, same rows (as a set: entries run concurrently,
/// so their order in the ring is unspecified), same write index and counters. `enable` and
/// `verify_num_valid` are read on the device.
///
/// A full grid (every SM) strides over the entries; each entry's own and predecessor slots are
/// gathered together. In ALL real-KV mode one lane per source shares an entry (1, 2 or 4 lanes:
/// the number of sources rounded up to a power of two), each folding one source;
/// when every source reads at most 128 bytes a token and the slot stride is a multiple of 16,
/// each warp stages batches of eight entries (their strips and slots) in shared memory with
/// asynchronous copies and folds one batch while the next is in flight.
///
/// # On the device: what is recorded and skipped
///
/// The CPU op rejects a malformed plan before doing anything. Here an entry that cannot be
/// served is skipped (no loads, no row) and recorded in the stream's status word, and the
/// others are checked as usual; counters count it as active, like every other entry:
/// * a slot outside `[0, num_slots)`: [`Error::SlotOutOfRange`] (`verify_slot_indices`);
/// * a predecessor `>= num_slots`: [`Error::SlotOutOfRange`] (`verify_prev_slot_indices`);
/// * a slot whose real-KV row is past a source's rows: [`Error::RealKvSlotOutOfRange`].
#[allow(clippy::too_many_arguments)]
pub fn verify<'a, Q, V, W, E, VB, K, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    plan: &'a VerifyPlan<VB, Device>,
    check: K,
    settings: &DeviceSettings<'a>,
    canary: &'a CanaryBuffer<S, Device>,
    ring: &'a ViolationRing<R, Device>,
    counters: &'a HealthCounters<Device>,
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: SameVerifyCapacity<VB>,
    W: Capacity,
    E: Capacity,
    VB: Capacity,
    K: TokenCheck,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let prepared = prepare(
        &target, shape, plan, check, settings, canary, ring, counters,
    )?;
    // SAFETY: `VerifyArgs` mirrors the kernel's parameter (see `prepare`); every address in it
    // is a live buffer borrowed for 'a, at least the launch (the whole graph for a capture).
    unsafe { prepared.queue(&target) }
}

/// Queues the verify of a K and a V canary buffer against one plan on `on` (the step API's
/// verify of one end): [`verify`] of each half, K first, with each half's settings, buffer and
/// counters, queued as one pair launch whenever both halves use the same kernel and grid (the
/// halves run side by side; see [`KernelTuning::pair_launches`](crate::cuda::KernelTuning)).
///
/// Both halves are checked before anything is queued. Each half's rows, counters and write
/// index are those of its own launch; the two halves' rows interleave in the ring (as the rows
/// of one launch do), and the status word keeps the first error of either half.
#[allow(clippy::too_many_arguments)]
pub fn verify_pair<'a, Q, V, W, E, VB, K, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    plan: &'a VerifyPlan<VB, Device>,
    check: K,
    settings: (&DeviceSettings<'a>, &DeviceSettings<'a>),
    canary: (&'a CanaryBuffer<S, Device>, &'a CanaryBuffer<S, Device>),
    ring: &'a ViolationRing<R, Device>,
    counters: (&'a HealthCounters<Device>, &'a HealthCounters<Device>),
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: SameVerifyCapacity<VB>,
    W: Capacity,
    E: Capacity,
    VB: Capacity,
    K: TokenCheck,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let mut k = prepare(
        &target, shape, plan, check, settings.0, canary.0, ring, counters.0,
    )?;
    let mut v = prepare(
        &target, shape, plan, check, settings.1, canary.1, ring, counters.1,
    )?;
    // SAFETY: both launches were built by `prepare` for this target (their bounds are stated
    // there), every buffer they name is borrowed for 'a.
    unsafe { queue_halves(&target, &mut k, &mut v) }
}

/// Queues the K and the V verify launch of one end as [`verify_pair`] does: sharing the grid
/// where [`share_pair_grid`] does, as one pair launch where [`queue_pair`](super::queue_pair)
/// allows.
///
/// # Safety
///
/// `k` and `v` were built by [`prepare`] for `target`, every buffer they name live for as
/// long as the launches can run; the pair kernel's parameter is `VerifyPairArgs` (K's
/// `VerifyArgs`, then V's).
pub(super) unsafe fn queue_halves(
    target: &Target<'_>,
    k: &mut VerifyLaunch,
    v: &mut VerifyLaunch,
) -> Result<(), Error> {
    share_pair_grid(target, k, v);
    // SAFETY: the caller's contract; the pair parameter is built from the two halves in order.
    unsafe { super::queue_pair(target, k, v, |k, v| VerifyPairArgs { k, v }) }
}

/// Lets the two halves of a pair launch of the one-thread-an-entry kernels (NONE, PARTIAL) share
/// the full grid when each half alone would fill most of it in one round: each half then takes
/// half the grid (two rounds a thread, the second round's plan columns loaded during the first:
/// `AHEAD` in kernels/verify.cu) instead of the pair running as two waves of one round, each
/// paying a round's dependent loads in full.
///
/// Measured on the H200 (docs/benchmarks.md, session 8): at decode bs 64 (131,072 entries a
/// half: 256 busy blocks of the PARTIAL grid's 264) the shared grid is faster; at bs 256 (each
/// half several rounds of the full grid either way) it was 5 % slower, so halves that need more
/// than one full grid keep theirs. Both kernels stride over the grid they are given, so the
/// entries each half checks, its rows and counters are the same on any grid.
///
/// Only when the halves will run as one pair launch (`fuses_as_pair`, the condition
/// `queue_pair` applies); separate launches keep their own grid. The ALL kernels keep
/// theirs: their rounds are bound by the strips' bandwidth, not by latency.
fn share_pair_grid(target: &Target<'_>, k: &mut VerifyLaunch, v: &mut VerifyLaunch) {
    let Kernel::Verify {
        fold: fold @ (Fold::None | Fold::Partial),
        ..
    } = k.kernel
    else {
        return;
    };
    if !super::fuses_as_pair(target, k, v) {
        return;
    }
    let per_sm = verify_blocks_per_sm(&target.gpu.kernel_tuning(), fold);
    let grid = pair_plane_grid(k.dims.grid, target.gpu.sm_count() * per_sm);
    k.dims.grid = grid;
    v.dims.grid = grid;
}

/// The grid of each half of a pair launch ([`share_pair_grid`]), from the half's own grid
/// (already capped at the blocks its plan keeps busy) and the `full` grid: when the two halves
/// together need more than the full grid but each fits in it, half the full grid (rounded up);
/// otherwise the half's own grid (both halves fit at once, or each needs several rounds).
fn pair_plane_grid(grid: u32, full: u32) -> u32 {
    let shared = full.div_ceil(2);
    if grid > shared && grid < full {
        shared
    } else {
        grid
    }
}

/// The launch [`verify`] queues: kernel, grid and arguments, checked and built.
///
/// `VerifyArgs` mirrors the kernel's parameter and the kernel's accesses stay inside the
/// buffers it names: the plan arrays hold `capacity` entries and the kernel reads entries
/// < clamp(num_valid, 0, capacity) only; the canary buffer holds num_slots x stride bytes and
/// every slot and predecessor is checked against num_slots before it is loaded; the ring holds
/// ring_capacity rows (rows past it are dropped); real-KV sources hold num_rows rows of
/// row_stride bytes (validated layout) and every row is checked; a gathered source's pieces lie
/// inside their row and its elements are aligned to their size (`with_token_layout`, checked
/// once), and only the PARTIAL and grouped ALL kernels read it; the scalars are live. The
/// staged kernel copies 16-byte pieces: slots at multiples of the stride (a multiple of 16,
/// checked here) and strips of read_bytes <= 128 (multiples of 16, validated), inside the rows
/// the same checks allow; its shared memory is the size it is given. The streamed kernel (one
/// source, read_bytes > 128) copies 16-byte pieces of the strips inside read_bytes of rows the
/// same checks allow (base, row stride and bytes per token multiples of 16, validated).
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare<'a, V, W, E, VB, K, S, R>(
    target: &Target<'_>,
    shape: &Shape<V, W, E>,
    plan: &'a VerifyPlan<VB, Device>,
    check: K,
    settings: &DeviceSettings<'a>,
    canary: &'a CanaryBuffer<S, Device>,
    ring: &'a ViolationRing<R, Device>,
    counters: &'a HealthCounters<Device>,
) -> Result<VerifyLaunch, Error>
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
    let kv = settings.real_kv;
    let args = VerifyArgs {
        slots: driver::ptr(&plan.slot_indices),
        tokens: driver::ptr(&plan.expected_tokens),
        positions: driver::ptr(&plan.expected_positions),
        prevs: driver::ptr(&plan.prev_slot_indices),
        num_valid: driver::box_ptr(&plan.num_valid),
        enable: driver::box_ptr(&plan.enable),
        capacity: plan.capacity().get() as i64,
        buf: driver::ptr(&canary.bytes),
        num_slots: canary.num_slots() as i64,
        stride: canary.stride().get() as i64,
        ring: driver::ptr(&ring.rows),
        ring_capacity: ring.capacity().get() as i64,
        write_index: driver::box_ptr(&ring.write_index),
        slot_counter: driver::box_ptr(&counters.slot_run_counter),
        kernel_counter: driver::box_ptr(&counters.kernel_run_counter),
        tag: settings.tag.value(),
        status: target.status,
        kv: kv.abi(),
        early_columns: i64::from(settings.follows_head_stage),
    };
    let fold = kv.fold();
    let config = target.gpu.kernel_tuning();
    // The staged and streamed kernels copy whole strips: gathered sources fold in the grouped one.
    let strips = !kv.gathered();
    let staged = fold == Fold::All
        && strips
        && config.verify_all_staged
        && args.stride % 16 == 0
        && args.kv.read_bytes[..args.kv.num_sources as usize]
            .iter()
            .all(|&b| b <= 128);
    let streamed = fold == Fold::All
        && strips
        && config.verify_all_streamed
        && args.kv.num_sources == 1
        && args.kv.read_bytes[0] > 128;
    let tokens = K::ENABLED;
    let (kernel, per_sm, shared_bytes) = if staged {
        (
            Kernel::VerifyStaged {
                tokens,
                pair: false,
            },
            config.verify_all_staged_blocks_per_sm,
            STAGED_SHARED_BYTES,
        )
    } else if streamed {
        (
            Kernel::VerifyStreamed {
                tokens,
                pair: false,
            },
            config.verify_all_streamed_blocks_per_sm,
            VERIFY_STREAMED_SHARED_BYTES,
        )
    } else {
        let per_sm = verify_blocks_per_sm(&config, fold);
        (
            Kernel::Verify {
                fold,
                tokens,
                pair: false,
            },
            per_sm,
            0,
        )
    };
    Ok(Prepared {
        kernel,
        function: target.gpu.function(kernel)?,
        dims: LaunchDims {
            grid: verify_grid(
                kernel,
                target.gpu.sm_count() * per_sm,
                args.capacity,
                args.kv.num_sources,
            ),
            grid_y: 1,
            block: kernel.threads(),
            shared_bytes,
            cooperative: false,
            early_start: target.gpu.early_start(),
        },
        args,
    })
}

/// Blocks per multiprocessor of the unstaged verify kernel (`Kernel::Verify`) of `fold`.
fn verify_blocks_per_sm(tuning: &KernelTuning, fold: Fold) -> u32 {
    match fold {
        Fold::None => tuning.verify_blocks_per_sm,
        Fold::Partial => tuning.verify_fold_blocks_per_sm,
        Fold::All => tuning.verify_all_blocks_per_sm,
    }
}

/// The grid of a verify launch: `full` blocks (the tuning's blocks per multiprocessor), capped
/// at the blocks the plan's capacity can keep busy, so that a small plan does not launch
/// blocks that would only find no entry and exit (never fewer than one: block 0 counts the
/// launch). The cap follows each kernel's own distribution of entries, so every entry goes to
/// the same warp and lane as on the full grid:
/// * one thread per entry (NONE, PARTIAL), consecutive blocks: `capacity / VERIFY_THREADS`;
/// * staged ALL, batches of `VERIFY_STAGE_ENTRIES` a warp, consecutive blocks:
///   `capacity / (VERIFY_STAGE_ENTRIES x warps a block)`;
/// * grouped ALL (`32 / G` entries a warp, G lanes an entry) and streamed ALL (32 entries a
///   warp), warps interleaved over the blocks (batch `b` on block `b % grid` first): one block a
///   batch, `capacity / (entries a warp)`.
fn verify_grid(kernel: Kernel, full: u32, capacity: i64, num_sources: i64) -> u32 {
    let per_block: u64 = match kernel {
        Kernel::Verify {
            fold: Fold::All, ..
        } => {
            let lanes = match num_sources {
                ..=1 => 1,
                2 => 2,
                _ => 4,
            };
            32 / lanes
        }
        Kernel::Verify { .. } => u64::from(VERIFY_THREADS),
        Kernel::VerifyStaged { .. } => u64::from(VERIFY_STAGE_ENTRIES * (STAGED_THREADS / 32)),
        Kernel::VerifyStreamed { .. } => 32,
        _ => return full,
    };
    let capacity = u64::try_from(capacity).unwrap_or(0);
    let needed = capacity.div_ceil(per_block).max(1);
    u32::try_from(needed).map_or(full, |n| n.min(full))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: u32 = 132 * 3;

    fn verify(fold: Fold) -> Kernel {
        Kernel::Verify {
            fold,
            tokens: false,
            pair: false,
        }
    }

    #[test]
    fn grid_is_capped_at_the_blocks_a_capacity_keeps_busy() {
        // One thread an entry, 512 a block.
        assert_eq!(verify_grid(verify(Fold::None), FULL, 2048, 0), 4);
        assert_eq!(verify_grid(verify(Fold::Partial), FULL, 2049, 1), 5);
        // Grouped ALL: 32, 16, 8 entries a warp for 1, 2, 3-4 sources; one block a warp batch.
        assert_eq!(verify_grid(verify(Fold::All), FULL, 100, 1), 4);
        assert_eq!(verify_grid(verify(Fold::All), FULL, 100, 2), 7);
        assert_eq!(verify_grid(verify(Fold::All), FULL, 100, 3), 13);
        // Staged: 8 entries a warp, 8 warps a block; streamed: 32 entries a warp.
        let staged = Kernel::VerifyStaged {
            tokens: true,
            pair: true,
        };
        assert_eq!(verify_grid(staged, FULL, 64, 4), 1);
        assert_eq!(verify_grid(staged, FULL, 65, 4), 2);
        let streamed = Kernel::VerifyStreamed {
            tokens: false,
            pair: false,
        };
        assert_eq!(verify_grid(streamed, FULL, 2048, 1), 64);
    }

    #[test]
    fn pair_planes_share_the_grid_only_when_each_fits_in_it() {
        // Decode bs 64, PARTIAL on 132 SMs x 2: each half's 256 busy blocks become 132.
        assert_eq!(pair_plane_grid(256, 264), 132);
        assert_eq!(pair_plane_grid(133, 264), 132);
        // Both halves fit at once: unchanged.
        assert_eq!(pair_plane_grid(132, 264), 132);
        assert_eq!(pair_plane_grid(4, 264), 4);
        // Each half needs the full grid (several rounds, bs 256): unchanged.
        assert_eq!(pair_plane_grid(264, 264), 264);
        // Odd full grids round up.
        assert_eq!(pair_plane_grid(300, 529), 265);
        assert_eq!(pair_plane_grid(1, 1), 1);
    }

    #[test]
    fn grid_keeps_one_block_and_never_exceeds_the_full_grid() {
        assert_eq!(verify_grid(verify(Fold::None), FULL, 0, 0), 1);
        assert_eq!(verify_grid(verify(Fold::None), FULL, -5, 0), 1);
        assert_eq!(verify_grid(verify(Fold::None), FULL, i64::MAX, 0), FULL);
        assert_eq!(verify_grid(verify(Fold::None), FULL, 1 << 40, 0), FULL);
        assert_eq!(verify_grid(verify(Fold::All), 7, 1 << 20, 4), 7);
    }
}
