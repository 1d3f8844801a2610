//! The write launch (spec §4) on device buffers.

use super::Prepared;
use crate::canary::{CanaryBuffer, HealthCounters, ViolationRing};
use crate::capacity::{Capacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use crate::cuda::abi::args::{WriteArgs, WriteEndsArgs, WritePairArgs};
use crate::cuda::abi::kernels::Kernel;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::device::settings::{ChainAssert, DeviceSettings};
use crate::cuda::device::stream::{Queue, Target};
use crate::cuda::device::write_inputs::DeviceInputAssert;
use crate::cuda::driver::launch::LaunchDims;
use crate::cuda::driver::memory as driver;
use crate::input::WriteInputs;
use crate::memory::Device;
use crate::plan::WritePlan;
use crate::shape::Shape;
use crate::Error;

/// Queues the write op of spec §4 on `on`: stamps every planned token of `inputs` into
/// `canary`, extending each request's hash chain, and reports assert failures into `ring`.
///
/// The device twin of [`cpu::write`](crate::cpu::write), same capacity relations at compile
/// time (write plan, write inputs), same bytes in `canary`, `ring` and `counters` (rows of
/// different requests may be in another order: they run concurrently; within a request they
/// keep entry order). `write_num_valid_reqs` and the offsets are read on the device.
///
/// One block per request row: a single thread runs the request's `mix3` chain out of shared
/// memory while worker warps load and compact the next tile of tokens (the chain steps only
/// over the kept ones, with no per-step test), fold the current tile's real-KV bytes and store
/// the previous tile, so the serial part is only the chain itself. The chain's warp has its
/// scheduler to itself (warps 4 and 8 idle). Requests of at most 32 tokens run in one warp.
///
/// # On the device: what is recorded and skipped
///
/// The CPU op validates everything and then writes nothing on any error. A launch cannot see
/// the whole batch before writing, so each request checks its own data, and what it cannot
/// serve is skipped and recorded in the stream's status word (the first error wins):
/// * a request whose offsets leave `[0, E]` or decrease: [`Error::MalformedOffsets`], the
///   request is skipped;
/// * a seed `>= num_slots`: [`Error::SlotOutOfRange`] (`write_seed_slot_indices`), the request
///   is skipped;
/// * an `out_cache_loc >= num_slots`, or a slot whose real-KV row is past a source's rows:
///   [`Error::SlotOutOfRange`] / [`Error::RealKvSlotOutOfRange`]; that entry is skipped like a
///   negative slot (nothing written, the chain does not advance).
///
/// Other requests are written as usual.
///
/// # One slot written twice, a seed written in the same launch
///
/// Unlike [`cpu::write`](crate::cpu::write), which is sequential:
/// * two entries of **one request** with one `out_cache_loc` in different store rounds (256-entry
///   tiles of a request of more than 32 entries) are stored in entry order: the later entry's
///   record is what the slot holds, as on the CPU. Within one round (a request of at most 32
///   entries is one warp store; a tile is stored by its 256 worker threads at once) the stores
///   race. A record is stored as two 16-byte stores, `(token, position)` and
///   `(prev_hash, real_kv_hash)`, and CUDA leaves open which thread's same-address store lands,
///   for each of the two: so each half of the slot comes from one of the two entries, in any
///   combination (the later's whole record, the earlier's, or a torn one: one half of each).
///   Every other slot is the CPU's: the chain runs over the inputs, not over the stored records.
///   In every combination the next verify of the request's chain flags the slot: it holds the
///   position of at most one of the two entries, so the other entry's check fails (and a torn
///   record breaks its own entry's chain check too). Two tokens in one slot in one step is an
///   engine bug; the device does not say which entry won, the verify says that one did;
/// * two entries of **different requests** with one slot, and a seed slot that **another request
///   of the same launch** writes, are data races as in SGLang (spec §9.8): the blocks run
///   concurrently, so the seeded request chains from the old or the new record.
///
/// The GPU tests `nothing_lost_one_slot_twice_in_one_request` (with the next verify of the
/// request, flagging the slot in every combination, equal to the CPU's verify of the same
/// bytes) and `nothing_lost_seed_written_in_same_launch` check that the result is one of those
/// outcomes and print how often each occurred.
#[allow(clippy::too_many_arguments)]
pub fn write<'a, Q, V, W, E, WB, EB, A, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    plan: &'a WritePlan<WB, Device>,
    inputs: &'a WriteInputs<EB, A, Device>,
    settings: &DeviceSettings<'a>,
    canary: &'a CanaryBuffer<S, Device>,
    ring: &'a ViolationRing<R, Device>,
    counters: &'a HealthCounters<Device>,
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: Capacity,
    W: SameWriteReqCapacity<WB>,
    E: SameWriteEntryCapacity<EB>,
    WB: Capacity,
    EB: Capacity,
    A: DeviceInputAssert,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let [launch] = prepare_halves(
        &target,
        shape,
        plan,
        inputs,
        [settings],
        [canary],
        ring,
        [counters],
    )?;
    // SAFETY: built by `prepare_halves` for this target (its bounds are stated there); every
    // buffer it names is borrowed for 'a.
    unsafe { launch.queue(&target) }
}

/// Queues the write of one plan and one set of inputs into a K and a V canary buffer on `on`
/// (the step API's write of one end): [`write`](fn@write) of each half, K first, with each half's
/// settings, buffer and counters, queued as one pair launch whenever both halves use the same
/// kernel (the K and V chains of every request then run side by side; see
/// [`KernelTuning::pair_launches`](crate::cuda::KernelTuning)).
///
/// Both halves are checked before anything is queued. Each half's bytes, rows and counters are
/// those of its own launch; the two halves' rows interleave in the ring (rows of one request
/// and half keep entry order), and the status word keeps the first error of either half.
#[allow(clippy::too_many_arguments)]
pub fn write_pair<'a, Q, V, W, E, WB, EB, A, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    plan: &'a WritePlan<WB, Device>,
    inputs: &'a WriteInputs<EB, A, Device>,
    settings: (&DeviceSettings<'a>, &DeviceSettings<'a>),
    canary: (&'a CanaryBuffer<S, Device>, &'a CanaryBuffer<S, Device>),
    ring: &'a ViolationRing<R, Device>,
    counters: (&'a HealthCounters<Device>, &'a HealthCounters<Device>),
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: Capacity,
    W: SameWriteReqCapacity<WB>,
    E: SameWriteEntryCapacity<EB>,
    WB: Capacity,
    EB: Capacity,
    A: DeviceInputAssert,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let [k, v] = prepare_halves(
        &target,
        shape,
        plan,
        inputs,
        [settings.0, settings.1],
        [canary.0, canary.1],
        ring,
        [counters.0, counters.1],
    )?;
    // SAFETY: both launches were built by `prepare_halves` for this target (their bounds are
    // stated there), every buffer they name is borrowed for 'a; the pair kernel's parameter is
    // `WritePairArgs` (K's `WriteArgs`, then V's).
    unsafe { super::queue_pair(&target, &k, &v, |k, v| WritePairArgs { k, v }) }
}

/// The launches [`write`](fn@write), [`write_pair`], [`write_ends`] and [`write_ends_k`] queue:
/// for each of `N` halves over one plan and one set of inputs (half `i` with settings, canary
/// buffer and counters `i`), its kernel, grid and arguments, checked and built. The shape is
/// checked against the plan and the inputs once, before any half is built; then the halves
/// are built in order, and the first half that fails (its kernel not found) ends it, the
/// halves after it not built. Nothing is queued.
///
/// `WriteArgs` mirrors the kernel's parameter and the kernel's accesses stay inside the buffers
/// it names: offsets hold req_capacity + 1 entries and seeds req_capacity (the kernel runs one
/// block per row < req_capacity and reads offsets[r + 1]); the per-token arrays (and the
/// expected ones when the assert is on) hold entry_capacity entries and the kernel reads only
/// [start, end) after checking 0 <= start <= end <= entry_capacity; the canary buffer holds
/// num_slots x stride bytes and every slot is checked against num_slots; the ring holds
/// ring_capacity rows and rows past it are dropped; real-KV sources hold num_rows rows of
/// row_stride bytes (validated layout) and every row is checked; the chain-assert flag,
/// counters and write index are live scalars.
#[allow(clippy::too_many_arguments)]
fn prepare_halves<'a, const N: usize, V, W, E, WB, EB, A, S, R>(
    target: &Target<'_>,
    shape: &Shape<V, W, E>,
    plan: &'a WritePlan<WB, Device>,
    inputs: &'a WriteInputs<EB, A, Device>,
    settings: [&DeviceSettings<'a>; N],
    canary: [&'a CanaryBuffer<S, Device>; N],
    ring: &'a ViolationRing<R, Device>,
    counters: [&'a HealthCounters<Device>; N],
) -> Result<[Prepared<WriteArgs>; N], Error>
where
    V: Capacity,
    W: SameWriteReqCapacity<WB>,
    E: SameWriteEntryCapacity<EB>,
    WB: Capacity,
    EB: Capacity,
    A: DeviceInputAssert,
    S: Capacity,
    R: Capacity,
{
    const { assert!(N > 0, "a write launch has at least one half") };
    shape.write_req_capacity().check(plan.capacity())?;
    shape.write_entry_capacity().check(inputs.capacity())?;
    let req_capacity = plan.capacity().get();
    let grid = u32::try_from(req_capacity).map_err(|_| Error::OutOfRange {
        what: "write_req_capacity on the GPU",
        value: req_capacity as i64,
        allowed: "[1, u32::MAX] (one block per request row)",
    })?;
    let (exp_tokens, exp_positions, _) = A::addrs(&inputs.expected);
    let kinds = inputs.kinds();
    let half = |i: usize| -> Result<Prepared<WriteArgs>, Error> {
        let (settings, canary, counters) = (settings[i], canary[i], counters[i]);
        let (chain_assert, chain_assert_fixed) = match settings.chain_position_assert {
            ChainAssert::Fixed(v) => (DevPtr::NULL, i64::from(v.flag())),
            ChainAssert::Flag(f) => (driver::box_ptr(&f.flag), 0),
        };
        let kv = settings.real_kv;
        let args = WriteArgs {
            offsets: driver::ptr(&plan.offsets),
            seeds: driver::ptr(&plan.seed_slot_indices),
            num_valid_reqs: driver::box_ptr(&plan.num_valid_reqs),
            req_capacity: req_capacity as i64,
            input_ids: DevPtr::from_addr(inputs.input_ids.addr()),
            positions: DevPtr::from_addr(inputs.positions.addr()),
            out_cache_loc: DevPtr::from_addr(inputs.out_cache_loc.addr()),
            entry_capacity: inputs.capacity().get() as i64,
            exp_tokens,
            exp_positions,
            chain_assert,
            chain_assert_fixed,
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
            early_fold: i64::from(settings.follows_verify),
            kinds,
        };
        let kernel = Kernel::Write {
            fold: kv.fold(),
            assert: A::ENABLED,
            pair: false,
        };
        Ok(Prepared {
            kernel,
            function: target.gpu.function(kernel)?,
            dims: LaunchDims {
                grid,
                grid_y: 1,
                block: kernel.threads(),
                shared_bytes: 0,
                cooperative: false,
                early_start: target.gpu.early_start(),
            },
            args,
        })
    };
    let mut launches = [half(0)?; N];
    for (i, launch) in launches.iter_mut().enumerate().skip(1) {
        *launch = half(i)?;
    }
    Ok(launches)
}

/// Queues a step's tail writes and its head writes as one launch on `on`
/// (`kv_canary_write*_ends`, grid y = 4: tail K, tail V, head K, head V), the head halves run
/// by the tail's kernel over no real-KV source (a fingerprint of 0, as the NONE kernel's). Each half's bytes, rows and counters are those of its own
/// [`write`](fn@write); the halves' rows interleave in the ring. Nothing reads or writes the
/// head buffers between a step's head verify and the next step's, so their stamp may follow
/// the tail verify; a tail verify queued right behind the plan must then not load its plan
/// columns early (`DeviceSettings::following_head_stage`): no launch lies between them.
#[allow(clippy::too_many_arguments)]
pub fn write_ends<'a, Q, V, W, E, WB, EB, A, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    plan: &'a WritePlan<WB, Device>,
    inputs: &'a WriteInputs<EB, A, Device>,
    settings: [&DeviceSettings<'a>; 4],
    canary: [&'a CanaryBuffer<S, Device>; 4],
    ring: &'a ViolationRing<R, Device>,
    counters: [&'a HealthCounters<Device>; 4],
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: Capacity,
    W: SameWriteReqCapacity<WB>,
    E: SameWriteEntryCapacity<EB>,
    WB: Capacity,
    EB: Capacity,
    A: DeviceInputAssert,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let [tk, tv, hk, hv] = prepare_halves(
        &target, shape, plan, inputs, settings, canary, ring, counters,
    )?;
    let Kernel::Write { fold, assert, .. } = tk.kernel else {
        return Err(Error::Malformed {
            detail: format!("write_ends: a write launch of kernel {:?}", tk.kernel),
        });
    };
    for head in [&hk, &hv] {
        if head.args.kv.num_sources != 0 || tv.kernel != tk.kernel {
            return Err(Error::OutOfRange {
                what: "write_ends: head halves with real-KV sources, or tail halves of two kernels",
                value: head.args.kv.num_sources,
                allowed: "0 head sources, one tail kernel",
            });
        }
    }
    let kernel = Kernel::WriteEnds { fold, assert };
    let ends = Prepared {
        kernel,
        function: target.gpu.function(kernel)?,
        dims: LaunchDims {
            grid_y: 4,
            ..tk.dims
        },
        args: WriteEndsArgs {
            tail_k: tk.args,
            tail_v: tv.args,
            head_k: hk.args,
            head_v: hv.args,
        },
    };
    // SAFETY: four write launches built by `prepare_halves` for this target over one plan and
    // one set of inputs (their bounds are stated there; the head halves fold no source, which
    // every fold kernel serves with a fingerprint of 0), every buffer they name borrowed for 'a;
    // the kernel's parameter is `WriteEndsArgs` and block row y runs the half y names.
    unsafe { ends.queue(&target) }
}

/// [`write_ends`] of a pool without a V half: the K half's tail write and head write
/// as one pair launch of the tail's kernel (`WritePairArgs { k: tail, v: head }`), the head over
/// no real-KV source.
#[allow(clippy::too_many_arguments)]
pub fn write_ends_k<'a, Q, V, W, E, WB, EB, A, S, R>(
    on: &Q,
    shape: &Shape<V, W, E>,
    plan: &'a WritePlan<WB, Device>,
    inputs: &'a WriteInputs<EB, A, Device>,
    settings: [&DeviceSettings<'a>; 2],
    canary: [&'a CanaryBuffer<S, Device>; 2],
    ring: &'a ViolationRing<R, Device>,
    counters: [&'a HealthCounters<Device>; 2],
) -> Result<(), Error>
where
    Q: Queue<'a> + ?Sized,
    V: Capacity,
    W: SameWriteReqCapacity<WB>,
    E: SameWriteEntryCapacity<EB>,
    WB: Capacity,
    EB: Capacity,
    A: DeviceInputAssert,
    S: Capacity,
    R: Capacity,
{
    let target = on.target();
    let [tail, mut head] = prepare_halves(
        &target, shape, plan, inputs, settings, canary, ring, counters,
    )?;
    if head.args.kv.num_sources != 0 {
        return Err(Error::OutOfRange {
            what: "write_ends_k: a head half with real-KV sources",
            value: head.args.kv.num_sources,
            allowed: "0",
        });
    }
    head.kernel = tail.kernel;
    head.function = tail.function;
    // SAFETY: both launches built by `prepare_halves` for this target (their bounds are stated
    // there; the head folds no source, which every fold kernel serves with a fingerprint of 0),
    // every buffer borrowed for 'a; the pair kernel's parameter is `WritePairArgs`.
    unsafe { super::queue_pair(&target, &tail, &head, |k, v| WritePairArgs { k, v }) }
}
