//! The plan launch (spec §3.2) on device buffers.

use super::{PlanLaunch, Prepared};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::cuda::abi::args::PlanArgs;
use crate::cuda::abi::kernels::{plan_shared_bytes, Kernel, LutMode, PlanFamily};
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::abi::shared::PLAN_MAX_ROWS;
use crate::cuda::device::plan_inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use crate::cuda::device::stream::{Queue, Target};
use crate::cuda::device::tuning::{KernelTuning, PlanKernel};
use crate::cuda::driver::launch::LaunchDims;
use crate::cuda::driver::memory as driver;
use crate::memory::Device;
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use crate::Error;

/// What the driver reserves of a multiprocessor's shared memory per block.
const BLOCK_RESERVED_SHARED_BYTES: u32 = 1024;

/// Blocks per multiprocessor the tuning asks for of `family`.
fn blocks_per_sm(family: PlanFamily, tuning: &KernelTuning) -> u32 {
    match family {
        PlanFamily::Small => tuning.plan_small_blocks_per_sm,
        PlanFamily::Large => tuning.plan_blocks_per_sm,
        PlanFamily::Lean => tuning.plan_lean_blocks_per_sm,
        PlanFamily::LeanLarge => (tuning.plan_lean_blocks_per_sm / 2).max(1),
    }
}

/// Blocks per multiprocessor of `family` that are sure to be resident together (a cooperative
/// launch): at most `per_sm`, what the kernel's launch bounds guarantee by registers and what
/// `shared` bytes a block leave room for in `sm_shared` bytes of a multiprocessor.
fn resident_per_sm(family: PlanFamily, per_sm: u32, shared: u32, sm_shared: u32) -> u32 {
    let by_shared = sm_shared / (shared + BLOCK_RESERVED_SHARED_BYTES);
    per_sm
        .min(family.resident_by_registers())
        .min(by_shared)
        .max(1)
}

/// Queues the plan op of spec §3.2 on `on`: `inputs` -> `verify` and `write`, in one launch.
///
/// The device twin of [`cpu::plan`](crate::cpu::plan): the same capacity relations at compile
/// time (shape vs verify plan, write plan, batch and valid lengths), the same outputs byte for
/// byte. Nothing is synchronised and nothing is returned but launch errors: read the outputs
/// with `to_host`, and malformed data with [`Stream::status`](crate::cuda::Stream::status).
///
/// # On the device
///
/// The batch size is read from `inputs.batch` (device memory), so one launch, or one captured
/// graph, serves every batch up to the capacity. Every block scans all rows and validates them
/// before anything is written, so for every row-level problem the CPU op reports (request-pool
/// index outside `req_to_token`, prefix beyond the row width, expected-token read outside the
/// pool, write-token count overflowing `i64`, `bs` above the capacity, valid lengths whose count
/// is not `bs`) the launch writes **nothing**, like the CPU op, and records the same error (the
/// first in row order) in the stream's status word.
///
/// A LUT index past the end is checked as the CPU op checks it (every slot the plan would
/// translate, also when the entries overflow the capacity; the first in row order is reported;
/// nothing is written), still in one launch: a cooperative launch (at most one block per
/// multiprocessor, all resident) whose blocks read their chunks' table values, agree on the
/// first read past the LUT through a grid-wide barrier (scratch words of the stream), and only
/// then write. [`Swa::clamping`] opts into SGLang's GPU semantics instead (no barrier; the
/// index is clamped to the last element, the error recorded, the outputs written).
///
/// The grid is sized from the verify capacity (one round of entries per block, plus a block
/// for the write metadata). The kernel is chosen from the shape ([`PlanKernel::Auto`]): blocks
/// of 256 threads (the lean kernel: grid-strided rounds of four entries a thread, one at a time,
/// at most 64 registers) for plans of at most 1024 rows, else blocks of 512 threads
/// (software-pipelined rounds over a contiguous chunk a block); see
/// [`KernelTuning`](crate::cuda::KernelTuning).
///
/// The one difference from the CPU op: **`bs > 4096`** is [`Error::BatchTooLarge`], nothing
/// written (a block scans at most 4096 rows in shared memory, as SGLang's GPU path; the CPU op
/// plans any `bs`).
///
/// [`Swa::clamping`]: crate::cuda::Swa::clamping
/// [`PlanKernel::Auto`]: crate::cuda::PlanKernel::Auto
///
/// The inputs are borrowed for `'a`, the outputs for `'o` (no longer than the inputs): a
/// capture records the launch for its graph's lifetime `'o`, so every buffer must outlive it.
pub fn plan<'a, 'o, L, V, W, E, VB, WB, BB, G, X>(
    on: &L,
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'a, BB, G, X>,
    verify: &'o VerifyPlan<VB, Device>,
    write: &'o WritePlan<WB, Device>,
) -> Result<(), Error>
where
    'a: 'o,
    L: Queue<'o> + ?Sized,
    V: SameVerifyCapacity<VB>,
    W: SameWriteReqCapacity<WB> + SameWriteReqCapacity<BB>,
    E: Capacity,
    VB: Capacity,
    WB: Capacity,
    BB: Capacity,
    G: DeviceGroup<'a>,
    X: DeviceExpectedTokens<'a, W>,
{
    let target = on.target();
    let launch = prepare(&target, shape, inputs, verify, write)?;
    // SAFETY: the arguments mirror the kernel's parameter and every address in them is a live
    // buffer borrowed for 'o or longer, at least the launch (the whole graph for a capture); see
    // `prepare` for the bounds the kernels keep.
    unsafe { launch.queue(&target) }
}

/// The launch [`plan`] queues (cooperative with a checked LUT): kernel, grid and arguments,
/// checked and built.
///
/// The arguments mirror the kernels' parameters. The batch columns hold capacity(BB) = write
/// capacity rows and a kernel reads rows < smem_rows <= that; the table holds rows x width
/// cells, the LUT lut_len, the pool pool_rows x pool_width, the valid lengths the write
/// capacity; the verify arrays hold verify_capacity entries (written only when the entries
/// fit), the write offsets write_capacity + 1 and the seeds write_capacity; the kernels bound
/// every access by these numbers (kernels/plan.cu). The small kernel scans at most 1024 rows
/// (`small` implies smem_rows <= 1024). The stream's scratch holds the four words the checked
/// kernel's grid barrier uses, with its invariant (kernels/plan.cu, `grid_lut_verdict`); that
/// kernel is launched cooperatively, at most one block per multiprocessor, so every block is
/// resident and the barrier cannot hang.
pub(crate) fn prepare<'a, V, W, E, VB, WB, BB, G, X>(
    target: &Target<'_>,
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'a, BB, G, X>,
    verify: &VerifyPlan<VB, Device>,
    write: &WritePlan<WB, Device>,
) -> Result<PlanLaunch, Error>
where
    V: SameVerifyCapacity<VB>,
    W: SameWriteReqCapacity<WB> + SameWriteReqCapacity<BB>,
    E: Capacity,
    VB: Capacity,
    WB: Capacity,
    BB: Capacity,
    G: DeviceGroup<'a>,
    X: DeviceExpectedTokens<'a, W>,
{
    let w = shape.write_req_capacity();
    shape.verify_capacity().check(verify.capacity())?;
    <W as SameWriteReqCapacity<WB>>::check(w, write.capacity())?;
    <W as SameWriteReqCapacity<BB>>::check(w, inputs.batch.capacity())?;
    let pool = inputs.expected.pool(w)?;
    let verify_capacity = verify.capacity().get();
    if i32::try_from(verify_capacity).is_err() {
        return Err(Error::OutOfRange {
            what: "verify_capacity on the GPU",
            value: verify_capacity as i64,
            allowed: "[1, i32::MAX]",
        });
    }
    let table = inputs.req_to_token;
    let lut = inputs.group.lut();
    let (pool_ptr, pool_rows, pool_width, pool_kind, lens, lens_kind, lens_len) = match pool {
        Some((t, lens, kind, len)) => (
            driver::ptr(&t.data),
            t.rows() as i64,
            t.width() as i64,
            if t.is_unsigned() { 2 } else { 1 },
            lens,
            kind,
            len,
        ),
        None => (DevPtr::NULL, 0, 0, 0, DevPtr::NULL, 0, DevPtr::NULL),
    };
    let smem_rows = write.capacity().get().min(PLAN_MAX_ROWS);
    let config = target.gpu.kernel_tuning();
    let sms = target.gpu.sm_count();
    let window = i64::try_from(inputs.group.window()).unwrap_or(i64::MAX);
    let (v_slots, v_tokens, v_positions, v_prevs) = (
        driver::ptr(&verify.slot_indices),
        driver::ptr(&verify.expected_tokens),
        driver::ptr(&verify.expected_positions),
        driver::ptr(&verify.prev_slot_indices),
    );
    let checked = lut.is_some() && inputs.group.checks_lut();
    // The benchmark's sweep (docs/cuda.md): the lean kernel for plans of at most 1024 rows (its
    // grid-strided rounds keep the stores of all blocks together; as fast as the small one on
    // one-round plans), the large one above 1024 rows.
    let auto = if smem_rows <= PlanFamily::Lean.max_rows() {
        PlanFamily::Lean
    } else {
        PlanFamily::Large
    };
    let family = match config.plan_kernel {
        PlanKernel::Small if smem_rows <= PlanFamily::Small.max_rows() => PlanFamily::Small,
        PlanKernel::Small | PlanKernel::Large => PlanFamily::Large,
        PlanKernel::Lean if smem_rows <= PlanFamily::Lean.max_rows() => PlanFamily::Lean,
        PlanKernel::Lean => PlanFamily::LeanLarge,
        PlanKernel::Auto => auto,
    };
    let (threads, per_thread) = family.block();
    let per_sm = blocks_per_sm(family, &config);
    let shared = plan_shared_bytes(smem_rows, threads);
    // Enough entry blocks for the capacity in one round each, plus a block of its own for the
    // write metadata, within the grid limit; a checked LUT needs every block resident (as many
    // a multiprocessor as its registers and shared memory allow, whatever else the GPU runs).
    let max_blocks = if checked {
        sms * resident_per_sm(family, per_sm, shared, target.gpu.shared_bytes_per_sm())
    } else {
        sms * per_sm
    };
    let round = (threads * per_thread) as usize;
    let needed = verify_capacity.div_ceil(round).max(1);
    let (grid, entry_blocks) = if needed < max_blocks as usize {
        (needed as u32 + 1, needed as u32)
    } else {
        (max_blocks, max_blocks)
    };
    let args = PlanArgs {
        req_pool_indices: DevPtr::from_addr(inputs.batch.columns[0].addr()),
        prefix_lens: DevPtr::from_addr(inputs.batch.columns[1].addr()),
        extend_lens: DevPtr::from_addr(inputs.batch.columns[2].addr()),
        bs: driver::box_ptr(&inputs.batch.bs),
        table: driver::ptr(&table.data),
        table_rows: table.rows() as i64,
        table_width: table.width() as i64,
        lut: lut.map_or(DevPtr::NULL, |l| driver::ptr(&l.data)),
        lut_len: lut.map_or(0, |l| l.len() as i64),
        pool: pool_ptr,
        pool_rows,
        pool_width,
        valid_lens: lens,
        valid_lens_len: lens_len,
        window,
        offset: inputs.offset.value(),
        v_slots,
        v_tokens,
        v_positions,
        v_prevs,
        v_num_valid: driver::box_ptr(&verify.num_valid),
        v_enable: driver::box_ptr(&verify.enable),
        v_requested: driver::box_ptr(&verify.requested),
        verify_capacity: verify_capacity as i64,
        w_offsets: driver::ptr(&write.offsets),
        w_seeds: driver::ptr(&write.seed_slot_indices),
        w_num_valid_reqs: driver::box_ptr(&write.num_valid_reqs),
        write_capacity: write.capacity().get() as i64,
        status: target.status,
        scratch: target.scratch,
        smem_rows: smem_rows as i64,
        entry_blocks: i64::from(entry_blocks),
        block: table.block_size() as i64,
        table_tokens: table.tokens_per_row() as i64,
        table_unsigned: i64::from(table.is_unsigned()),
        layout: inputs.batch.layout,
        kinds: inputs.batch.kinds() | (lens_kind << 24) | (pool_kind << 32),
    };
    let lut = match (lut.is_some(), checked) {
        (false, _) => LutMode::None,
        (true, false) => LutMode::Clamp,
        (true, true) => LutMode::Checked,
    };
    let kernel = Kernel::Plan {
        family,
        lut,
        pool: pool.is_some(),
    };
    Ok(Prepared {
        kernel,
        function: target.gpu.function(kernel)?,
        dims: LaunchDims {
            grid,
            grid_y: 1,
            block: threads,
            shared_bytes: shared,
            cooperative: checked,
            early_start: target.gpu.early_start(),
        },
        args,
    })
}
