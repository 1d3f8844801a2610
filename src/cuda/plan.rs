//! The plan launch (spec §3.2) on device buffers.

use super::abi::PlanArgs;
use super::driver;
use super::gpu::PlanKernel;
use super::inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use super::stream::{Prepared, Queue, Target};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::plan::{VerifyPlan, WritePlan};
use crate::{Device, Error, Shape};

/// Threads of a large plan block (`kv_canary_plan_large*` in kernels/plan.cu) and entries a
/// thread takes per round.
const LARGE: (u32, u32) = (512, 4);
/// Threads of a small plan block (`kv_canary_plan_small*`) and entries a thread takes per round.
const SMALL: (u32, u32) = (128, 4);
/// Rows one plan block scans (`PLAN_MAX_ROWS`).
const PLAN_MAX_ROWS: usize = crate::consts::PLAN_BS_BLOCK_SIZE;
/// Rows a small plan block scans (eight a thread).
const SMALL_MAX_ROWS: usize = 1024;
/// Rows a lean plan block of 256 threads scans (four a thread); the lean kernel of 512 threads
/// scans up to `PLAN_MAX_ROWS` (eight a thread).
const LEAN_MAX_ROWS: usize = 1024;
/// Shared memory of one multiprocessor (sm_90: 228 KB) and what the driver reserves per block.
const SM_SHARED_BYTES: u32 = 228 * 1024;
const BLOCK_RESERVED_SHARED_BYTES: u32 = 1024;

/// The fused plan kernels (kernels/plan.cu), in the order of `Kernels::plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// `kv_canary_plan_small*`: 128 threads, software-pipelined, at most 1024 rows.
    Small = 0,
    /// `kv_canary_plan_large*`: 512 threads, software-pipelined, up to 4096 rows.
    Large = 1,
    /// `kv_canary_plan_lean*`: 256 threads, a round at a time, at most 1024 rows.
    Lean = 2,
    /// `kv_canary_plan_leanl*`: 512 threads, a round at a time, up to 4096 rows.
    LeanLarge = 3,
}

impl Family {
    /// Threads of a block and entries a thread takes per round.
    const fn block(self) -> (u32, u32) {
        match self {
            Family::Small => SMALL,
            Family::Large | Family::LeanLarge => LARGE,
            Family::Lean => (256, 4),
        }
    }

    /// Blocks per multiprocessor the configuration asks for.
    fn blocks_per_sm(self, config: &super::LaunchConfig) -> u32 {
        match self {
            Family::Small => config.plan_small_blocks_per_sm,
            Family::Large => config.plan_blocks_per_sm,
            Family::Lean => config.plan_lean_blocks_per_sm,
            Family::LeanLarge => (config.plan_lean_blocks_per_sm / 2).max(1),
        }
    }

    /// Blocks per multiprocessor that are sure to be resident together (a cooperative launch):
    /// at most `per_sm`, what the kernel's launch bounds guarantee by registers (the pipelined
    /// kernels: one) and what `shared` bytes a block leave room for.
    fn resident_per_sm(self, per_sm: u32, shared: u32) -> u32 {
        let by_registers = match self {
            Family::Small | Family::Large => 1,
            Family::Lean => 4,
            Family::LeanLarge => 2,
        };
        let by_shared = SM_SHARED_BYTES / (shared + BLOCK_RESERVED_SHARED_BYTES);
        per_sm.min(by_registers).min(by_shared).max(1)
    }
}

/// Dynamic shared memory of a plan block of `threads` threads holding `rows` rows
/// (kernels/plan.cu, `Smem`): 32 bytes a slot, `rows + rows / rpt + 1` slots, where `rpt`,
/// the rows a thread scans, is the smallest power of two with `rpt * threads >= rows` (row
/// `r` lives in slot `r + r / rpt` when `rpt > 1`, against bank conflicts).
pub(crate) const fn plan_shared_bytes(rows: usize, threads: u32) -> u32 {
    let mut rpt = 1usize;
    while rpt * (threads as usize) < rows {
        rpt *= 2;
    }
    let pad = if rpt > 1 { rows / rpt } else { 0 };
    ((rows + pad + 1) * 32) as u32
}

/// Queues the plan op of spec §3.2 on `on`: `inputs` -> `verify` and `write`, in one launch.
///
/// The device twin of [`cpu::plan`](crate::cpu::plan): the same capacity relations at compile
/// time (shape vs verify plan, write plan, batch and valid lengths), the same outputs byte for
/// byte. Nothing is synchronised and nothing is returned but launch errors: read the outputs
/// with `to_host`, and malformed data with [`Stream::status`](super::Stream::status).
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
/// [`LaunchConfig`](super::LaunchConfig).
///
/// The one difference from the CPU op: **`bs > 4096`** is [`Error::BatchTooLarge`], nothing
/// written (a block scans at most 4096 rows in shared memory, as SGLang's GPU path; the CPU op
/// plans any `bs`).
///
/// [`Swa::clamping`]: super::Swa::clamping
/// [`PlanKernel::Auto`]: super::PlanKernel::Auto
pub fn plan<'a, L, V, W, E, VB, WB, BB, G, X>(
    on: &L,
    shape: &Shape<V, W, E>,
    inputs: &PlanInputs<'a, BB, G, X>,
    verify: &'a VerifyPlan<VB, Device>,
    write: &'a WritePlan<WB, Device>,
) -> Result<(), Error>
where
    L: Queue<'a> + ?Sized,
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
    // buffer borrowed for 'a, at least the launch (the whole graph for a capture); see
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
    verify: &'a VerifyPlan<VB, Device>,
    write: &'a WritePlan<WB, Device>,
) -> Result<Prepared<PlanArgs>, Error>
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
    let (pool_ptr, pool_rows, pool_width, lens, lens_len) = match pool {
        Some((t, lens, len)) => (
            driver::addr(&t.data),
            t.rows() as i64,
            t.width() as i64,
            lens,
            len,
        ),
        None => (0, 0, 0, 0, 0),
    };
    let smem_rows = write.capacity().get().min(PLAN_MAX_ROWS);
    let config = target.gpu.launch_config();
    let sms = target.gpu.sm_count();
    let window = i64::try_from(inputs.group.window()).unwrap_or(i64::MAX);
    let (v_slots, v_tokens, v_positions, v_prevs) = (
        driver::addr(&verify.slot_indices),
        driver::addr(&verify.expected_tokens),
        driver::addr(&verify.expected_positions),
        driver::addr(&verify.prev_slot_indices),
    );
    let pool_variant = usize::from(pool.is_some());
    let checked = lut.is_some() && inputs.group.checks_lut();
    // The benchmark's sweep (docs/cuda.md): the lean kernel for plans of at most 1024 rows (its
    // grid-strided rounds keep the stores of all blocks together; as fast as the small one on
    // one-round plans), the large one above 1024 rows.
    let auto = if smem_rows <= LEAN_MAX_ROWS {
        Family::Lean
    } else {
        Family::Large
    };
    let family = match config.plan_kernel {
        PlanKernel::Small if smem_rows <= SMALL_MAX_ROWS => Family::Small,
        PlanKernel::Small | PlanKernel::Large => Family::Large,
        PlanKernel::Lean if smem_rows <= LEAN_MAX_ROWS => Family::Lean,
        PlanKernel::Lean => Family::LeanLarge,
        PlanKernel::Auto => auto,
    };
    let (threads, per_thread) = family.block();
    let per_sm = family.blocks_per_sm(&config);
    let shared = plan_shared_bytes(smem_rows, threads);
    // Enough entry blocks for the capacity in one round each, plus a block of its own for the
    // write metadata, within the grid limit; a checked LUT needs every block resident (as many
    // a multiprocessor as its registers and shared memory allow, whatever else the GPU runs).
    let max_blocks = if checked {
        sms * family.resident_per_sm(per_sm, shared)
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
        req_pool_indices: driver::addr(&inputs.batch.req_pool_indices),
        prefix_lens: driver::addr(&inputs.batch.prefix_lens),
        extend_lens: driver::addr(&inputs.batch.extend_seq_lens),
        bs: driver::box_addr(&inputs.batch.bs),
        table: driver::addr(&table.data),
        table_rows: table.rows() as i64,
        table_width: table.width() as i64,
        lut: lut.map_or(0, |l| driver::addr(&l.data)),
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
        v_num_valid: driver::box_addr(&verify.num_valid),
        v_enable: driver::box_addr(&verify.enable),
        verify_capacity: verify_capacity as i64,
        w_offsets: driver::addr(&write.offsets),
        w_seeds: driver::addr(&write.seed_slot_indices),
        w_num_valid_reqs: driver::box_addr(&write.num_valid_reqs),
        write_capacity: write.capacity().get() as i64,
        status: target.status,
        scratch: target.scratch,
        smem_rows: smem_rows as i64,
        entry_blocks: i64::from(entry_blocks),
    };
    let lut_mode = match (lut.is_some(), checked) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    };
    let kernel = target.gpu.kernels().plan[family as usize][lut_mode * 2 + pool_variant];
    Ok(Prepared {
        kernel,
        grid,
        block: threads,
        shared,
        args,
        cooperative: checked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_an_sm_for_every_row_count() {
        // 227 KB: the most a Hopper block may opt into.
        for rows in 1..=PLAN_MAX_ROWS {
            assert!(
                plan_shared_bytes(rows, LARGE.0) <= 227 * 1024,
                "{rows} rows"
            );
        }
        for rows in 1..=SMALL_MAX_ROWS {
            assert!(plan_shared_bytes(rows, SMALL.0) <= plan_shared_bytes(PLAN_MAX_ROWS, LARGE.0));
        }
        // Row r of thread t sits in slot r + r / rpt: 4096 rows of 512 threads (rpt 8) take
        // 4096 + 512 slots plus the total.
        assert_eq!(plan_shared_bytes(4096, 512), (4096 + 512 + 1) * 32);
        assert_eq!(plan_shared_bytes(512, 512), (512 + 1) * 32);
        assert_eq!(plan_shared_bytes(513, 512), (513 + 256 + 1) * 32);
    }
}
