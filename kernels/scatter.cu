// scatter_req_token_ids (spec §6): one block per request copies its tokens (low 32 bits) into
// its pool row, coalesced. Offsets and pool rows are checked per request; a request that breaks
// them is skipped and recorded in the status word.
#include "common.cuh"

namespace kvc {


struct ScatterArgs {
    const i64* flat_in;
    i64 num_tokens;
    const i64* offsets;  // bs + 1
    const i64* req_pool_indices;
    i32* pool;
    i64 pool_rows;
    i64 pool_width;
    i64* status;
};

__device__ __forceinline__ void scatter_body(const ScatterArgs& a) {
    const i64 r = blockIdx.x;
    const i64 start = __ldg(a.offsets + r);
    const i64 end = __ldg(a.offsets + r + 1);
    if (start < 0 || start > a.num_tokens) {
        if (threadIdx.x == 0) record_status(a.status, ST_SCATTER_RANGE, r, start, 0, a.num_tokens);
        return;
    }
    if (end < start || end > a.num_tokens) {
        if (threadIdx.x == 0) record_status(a.status, ST_SCATTER_RANGE, r + 1, end, start, a.num_tokens);
        return;
    }
    const i64 n = min(end - start, a.pool_width);
    if (n <= 0) return;
    const i64 rp = __ldg(a.req_pool_indices + r);
    if (rp < 0 || rp >= a.pool_rows) {
        if (threadIdx.x == 0) record_status(a.status, ST_POOL_ROW, r, rp, a.pool_rows);
        return;
    }
    i32* row = a.pool + rp * a.pool_width;
    for (i64 j = threadIdx.x; j < n; j += SCATTER_THREADS) {
        row[j] = static_cast<i32>(static_cast<u32>(static_cast<u64>(__ldg(a.flat_in + start + j))));
    }
}

}  // namespace kvc

using kvc::ScatterArgs;
KVC_CHECK_LAYOUT_ScatterArgs(ScatterArgs);

extern "C" __global__ void __launch_bounds__(kvc::SCATTER_THREADS) kv_canary_scatter(ScatterArgs a) {
    kvc::grid_prologue();
    kvc::scatter_body(a);
}
