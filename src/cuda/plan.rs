//! The plan launch (spec §3.2) on device buffers.

use super::abi::PlanArgs;
use super::driver;
use super::inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use super::stream::{launch, Queue};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::plan::{VerifyPlan, WritePlan};
use crate::{Device, Error, Shape};

/// Threads per plan block (`PLAN_THREADS` in kernels/plan.cu).
const PLAN_THREADS: u32 = 512;
/// Rows one plan block scans (`PLAN_MAX_ROWS`).
const PLAN_MAX_ROWS: usize = crate::consts::PLAN_BS_BLOCK_SIZE;

/// Dynamic shared memory of a plan block holding `rows` rows: an `i64` offset (plus one) and
/// four `i32` facts a row (kernels/plan.cu, `Smem`).
pub(crate) const fn plan_shared_bytes(rows: usize) -> u32 {
    ((rows + 1) * 8 + rows * 16) as u32
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
/// nothing is written): with a LUT the op takes two launches, a check that reads the table
/// values and the plan that writes nothing if the check found one. [`Swa::clamping`] opts into
/// SGLang's GPU semantics instead (one launch; the index is clamped to the last element, the
/// error recorded, the outputs written).
///
/// The one difference from the CPU op: **`bs > 4096`** is [`Error::BatchTooLarge`], nothing
/// written (a block scans at most 4096 rows in shared memory, as SGLang's GPU path; the CPU op
/// plans any `bs`).
///
/// [`Swa::clamping`]: super::Swa::clamping
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
    let shared = plan_shared_bytes(smem_rows);
    let target = on.target();
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
        window: i64::try_from(inputs.group.window()).unwrap_or(i64::MAX),
        offset: inputs.offset.value(),
        v_slots: driver::addr(&verify.slot_indices),
        v_tokens: driver::addr(&verify.expected_tokens),
        v_positions: driver::addr(&verify.expected_positions),
        v_prevs: driver::addr(&verify.prev_slot_indices),
        v_num_valid: driver::box_addr(&verify.num_valid),
        v_enable: driver::box_addr(&verify.enable),
        verify_capacity: verify_capacity as i64,
        w_offsets: driver::addr(&write.offsets),
        w_seeds: driver::addr(&write.seed_slot_indices),
        w_num_valid_reqs: driver::box_addr(&write.num_valid_reqs),
        write_capacity: write.capacity().get() as i64,
        status: target.status,
        lut_key: target.scratch,
        lut_done: target.scratch + 8,
        smem_rows: smem_rows as i64,
    };
    let kernels = target.gpu.kernels();
    let variant = usize::from(lut.is_some()) * 2 + usize::from(pool.is_some());
    let grid = target.gpu.sm_count() * target.gpu.launch_config().plan_blocks_per_sm;
    if lut.is_some() && inputs.group.checks_lut() {
        // SAFETY: as for the plan kernel below (same arguments; the check kernel only reads the
        // inputs, bounded the same way, and the stream's two scratch words).
        unsafe {
            launch(
                &target,
                kernels.plan_lut_check[usize::from(pool.is_some())],
                grid,
                PLAN_THREADS,
                shared,
                &args,
            )
        }?;
    }
    // SAFETY: `PlanArgs` mirrors the kernel's parameter. Every address is a live buffer borrowed
    // for 'a (at least the launch; the whole graph for a capture): the batch columns hold
    // capacity(BB) = write capacity rows and the kernel reads rows < bs only after checking
    // bs <= write_capacity; the table holds rows x width cells, the LUT lut_len, the pool
    // pool_rows x pool_width, the valid lengths the write capacity; the verify arrays hold
    // verify_capacity entries, the write offsets write_capacity + 1 and the seeds write_capacity;
    // the kernel bounds every access by these numbers (kernels/plan.cu).
    unsafe {
        launch(
            &target,
            kernels.plan[variant],
            grid,
            PLAN_THREADS,
            shared,
            &args,
        )
    }
}
