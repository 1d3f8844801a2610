//! `scatter_req_token_ids` (spec §6) on device buffers.

use super::Prepared;
use crate::cuda::abi::args::ScatterArgs;
use crate::cuda::abi::kernels::Kernel;
use crate::cuda::device::plan_inputs::DeviceExpectedTable;
use crate::cuda::device::stream::Queue;
use crate::cuda::driver::array::ViewableSlice;
use crate::cuda::driver::launch::LaunchDims;
use crate::cuda::driver::memory as driver;
use crate::Error;

/// Queues `scatter_req_token_ids` on `on`: for each request `r` of the `bs =
/// req_pool_indices.len()` rows, copies the low 32 bits of `flat_in[offsets[r] ..
/// offsets[r] + min(len, width))` into row `req_pool_indices[r]` of `pool_out`. One block per
/// request. Each array is a crate [`DeviceArray`](crate::cuda::DeviceArray) (an engine view
/// included) or a `cust` `DeviceBuffer`.
///
/// The device twin of [`cpu::scatter_req_token_ids`](crate::cpu::scatter_req_token_ids). The
/// lengths are checked here (`offsets` holds `bs + 1`: [`Error::LengthMismatch`]); the offsets
/// and rows are read on the device, and a request whose offsets decrease or leave
/// `[0, flat_in.len()]` ([`Error::MalformedOffsets`]) or whose pool row does not exist
/// ([`Error::PoolRowOutOfRange`]) is skipped and recorded in the status word (the CPU op
/// rejects the whole call). Two requests naming the same row (padding rows both name row 0)
/// race, as in SGLang's kernel; the CPU op lets the later one win.
pub fn scatter_req_token_ids<'a, Q: Queue<'a> + ?Sized>(
    on: &Q,
    flat_in: &'a (impl ViewableSlice<i64> + ?Sized),
    offsets: &'a (impl ViewableSlice<i64> + ?Sized),
    req_pool_indices: &'a (impl ViewableSlice<i64> + ?Sized),
    pool_out: &'a DeviceExpectedTable,
) -> Result<(), Error> {
    let bs = req_pool_indices.len();
    if offsets.len() != bs + 1 {
        return Err(Error::LengthMismatch {
            what: "scatter_req_token_ids offsets (bs + 1)",
            expected: bs + 1,
            found: offsets.len(),
        });
    }
    if bs == 0 {
        return Ok(());
    }
    let grid = u32::try_from(bs).map_err(|_| Error::OutOfRange {
        what: "scatter bs",
        value: bs as i64,
        allowed: "[0, u32::MAX]",
    })?;
    let target = on.target();
    let args = ScatterArgs {
        flat_in: driver::ptr(flat_in),
        num_tokens: flat_in.len() as i64,
        offsets: driver::ptr(offsets),
        req_pool_indices: driver::ptr(req_pool_indices),
        pool: driver::ptr(&pool_out.data),
        pool_rows: pool_out.rows() as i64,
        pool_width: pool_out.width() as i64,
        status: target.status,
    };
    // SAFETY: `ScatterArgs` mirrors the kernel's parameter; the kernel runs bs blocks and reads
    // offsets[r], offsets[r + 1] (bs + 1 entries, checked) and req_pool_indices[r] (bs); it
    // reads flat_in only inside [start, end) after checking 0 <= start <= end <= num_tokens,
    // and writes pool row rp only after checking rp < pool_rows, columns < pool_width.
    unsafe {
        Prepared {
            kernel: Kernel::Scatter,
            function: target.gpu.function(Kernel::Scatter)?,
            dims: LaunchDims {
                grid,
                grid_y: 1,
                block: Kernel::Scatter.threads(),
                shared_bytes: 0,
                cooperative: false,
                early_start: target.gpu.early_start(),
            },
            args,
        }
        .queue(&target)
    }
}
