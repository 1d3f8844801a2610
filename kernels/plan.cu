// The plan op (spec §3.2) as ONE launch: every block scans the batch rows in shared memory,
// validates them, writes its share of the write metadata, and copies its contiguous chunk of the
// verify work list.
//
// With a LUT the op takes two launches, so that an index past the LUT's end leaves every output
// untouched, as on the CPU: a check kernel reads every slot the plan would translate (the table
// values only, no LUT gathers) and keeps the first offending read in a stream scratch word; the
// plan kernel then writes nothing when that word is set, records the error, and resets it.
//
// Layout of the work (grid G blocks x PLAN_THREADS threads, G fixed when the launch is built):
//  1. Every block loads the bs <= PLAN_MAX_ROWS rows (bs is read from device memory), computes
//     each row's verify length, write length and first error, and scans both lengths
//     (block-wide, in shared memory). Every block reaches the same totals and the same verdict.
//  2. Any row error: block 0 records it in the status word and the launch writes nothing.
//  3. Write metadata: offsets (tail zeroed) and seeds, spread over the whole grid.
//  4. Verify entries: the T entries are cut into G chunks of whole 512-entry rounds; each thread
//     finds its first row once (a binary search per thread, not per entry), then walks rows
//     forward. Consecutive threads handle consecutive positions of a row, so table loads and the
//     four output stores are coalesced; a predecessor slot comes from the neighbouring lane
//     (warp shuffle) except at a row or warp start.
//
// Differences from the CPU reference are listed in src/cuda/plan.rs.
#include "common.cuh"

namespace kvc {

constexpr int PLAN_THREADS = 512;
constexpr int PLAN_MAX_ROWS = 4096;
constexpr int ROWS_PER_THREAD = PLAN_MAX_ROWS / PLAN_THREADS;  // 8
constexpr int PLAN_WARPS = PLAN_THREADS / 32;
constexpr u64 SAT = 1ull << 63;  // saturation bound of the length scans: "overflowed i64"

struct PlanArgs {
    const i64* req_pool_indices;
    const i64* prefix_lens;
    const i64* extend_lens;
    const i32* bs;
    const i32* table;
    i64 table_rows;
    i64 table_width;
    const i64* lut;  // null: no LUT (FULL group)
    i64 lut_len;
    const i32* pool;  // null: no expected-token pool
    i64 pool_rows;
    i64 pool_width;
    const i64* valid_lens;
    const i32* valid_lens_len;
    i64 window;
    i64 offset;
    i64* v_slots;
    i64* v_tokens;
    i64* v_positions;
    i64* v_prevs;
    i32* v_num_valid;
    i32* v_enable;
    i64 verify_capacity;  // <= i32::MAX (host check)
    i64* w_offsets;       // write_capacity + 1
    i64* w_seeds;         // write_capacity
    i32* w_num_valid_reqs;
    i64 write_capacity;
    i64* status;
    i64* lut_key;   // stream scratch: INT64_MAX, or the first out-of-LUT read (LUT variants)
    i64* lut_done;  // stream scratch: blocks of the write kernel done with lut_key
};

__device__ __forceinline__ u64 sat_add(u64 a, u64 b) {
    u64 s = a + b;  // a, b <= SAT, so no wrap
    return s > SAT ? SAT : s;
}

// Block-wide exclusive scan (saturating at SAT) of one value per thread; also returns the total.
__device__ __forceinline__ u64 block_exclusive_scan(u64 v, u64* s_warp, u64& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 inc = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        u64 n = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc = sat_add(inc, n);
    }
    if (lane == 31) s_warp[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        u64 w = lane < PLAN_WARPS ? s_warp[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            u64 n = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w = sat_add(w, n);
        }
        if (lane < PLAN_WARPS) s_warp[lane] = w;  // inclusive warp prefixes
    }
    __syncthreads();
    total = s_warp[PLAN_WARPS - 1];
    u64 warp_base = warp == 0 ? 0 : s_warp[warp - 1];
    u64 excl_in_warp = __shfl_up_sync(0xffffffffu, inc, 1);
    if (lane == 0) excl_in_warp = 0;
    u64 out = sat_add(warp_base, excl_in_warp);
    __syncthreads();  // s_warp is reused by the next scan
    return out;
}

template <bool HAS_LUT>
__device__ __forceinline__ i64 translate(const PlanArgs& a, i64 x) {
    if (!HAS_LUT || x < 0) return x;
    if (x >= a.lut_len) {
        // SGLang's GPU path clamps to the last element; the CPU reference errors (see plan.rs).
        record_status(a.status, ST_LUT_INDEX, x, a.lut_len);
        x = a.lut_len - 1;
    }
    return __ldg(a.lut + x);
}

// Per-row facts of step 1.
struct Row {
    i64 rp;        // req_pool_index
    i64 prefix;    // max(prefix_len, 0)
    i64 ws;        // window start
    u64 vlen;      // verify entries
    u64 wlen;      // write tokens
    i64 code;      // first error of the row (0 = none), in the CPU's check order
    i64 f1, f2, f3, f4;  // error fields
};

__device__ __forceinline__ Row load_row(const PlanArgs& a, i64 r, bool has_pool) {
    Row w = {};
    const i64 rp = __ldg(a.req_pool_indices + r);
    const i64 prefix_raw = __ldg(a.prefix_lens + r);
    const i64 ext = __ldg(a.extend_lens + r);
    w.rp = rp;
    if (rp == 0) return w;  // padding row: never read further
    w.wlen = ext > 0 ? static_cast<u64>(ext) : 0;
    const i64 prefix = prefix_raw > 0 ? prefix_raw : 0;
    w.prefix = prefix;
    if (prefix == 0) return w;
    if (rp < 0 || rp >= a.table_rows) {
        w.code = ST_REQ_POOL_INDEX;
        w.f1 = rp;
        w.f2 = a.table_rows;
        return w;
    }
    if (prefix > a.table_width) {
        w.code = ST_PREFIX_BEYOND_ROW;
        w.f1 = prefix_raw;
        w.f2 = a.table_width;
        return w;
    }
    w.ws = (a.window > 0 && prefix > a.window) ? prefix - a.window : 0;
    w.vlen = static_cast<u64>(prefix - w.ws);
    if (has_pool) {
        const i64 vl = __ldg(a.valid_lens + r);
        // clamp(valid_len - offset - ws, 0, vlen) without overflow.
        i64 k = vl < -(1ll << 62) ? -1 : vl - a.offset - w.ws;
        if (k > static_cast<i64>(w.vlen)) k = static_cast<i64>(w.vlen);
        if (k > 0) {
            const i64 last = w.ws + a.offset + k - 1;
            if (rp >= a.pool_rows || last >= a.pool_width) {
                w.code = ST_EXPECTED_READ;
                w.f1 = rp;
                w.f2 = last;
                w.f3 = a.pool_rows;
                w.f4 = a.pool_width;
            }
        }
    }
    return w;
}

// Entry chunking: the T entries in G chunks of whole rounds; [c0, c1) for this block.
struct Chunk {
    i64 c0, c1;
};
__device__ __forceinline__ Chunk block_chunk(i64 total) {
    const i64 per_block = (total + gridDim.x - 1) / gridDim.x;
    const i64 chunk = (per_block + PLAN_THREADS - 1) / PLAN_THREADS * PLAN_THREADS;
    const i64 c0 = static_cast<i64>(blockIdx.x) * chunk;
    return {c0, c0 + chunk < total ? c0 + chunk : total};
}

// The largest r in [0, bs) with s_off[r] <= f (s_off[bs] > f): the row holding entry f.
__device__ __forceinline__ i64 row_of(const i64* s_off, i64 bs, i64 f) {
    i64 lo = 0, hi = bs;
    while (hi - lo > 1) {
        const i64 mid = (lo + hi) >> 1;
        if (s_off[mid] <= f) lo = mid; else hi = mid;
    }
    return lo;
}

__device__ __forceinline__ i64 window_start(const PlanArgs& a, i64 prefix) {
    return (a.window > 0 && prefix > a.window) ? prefix - a.window : 0;
}

enum PlanMode { PLAN_WRITE = 0, PLAN_LUT_CHECK = 1 };

// One plan launch. PLAN_LUT_CHECK only validates and looks for table values past the LUT end;
// PLAN_WRITE writes the outputs (with a LUT: unless the check found one, given as lut_key).
template <bool HAS_LUT, bool HAS_POOL, int MODE>
__device__ __forceinline__ void plan_body(const PlanArgs& a, i64 lut_key) {
    __shared__ i64 s_off[PLAN_MAX_ROWS + 1];
    __shared__ u64 s_warp[32];
    __shared__ i64 s_err;
    constexpr bool WRITE = MODE == PLAN_WRITE;

    const int tid = threadIdx.x;
    const i64 bs = *a.bs;

    // Launch-level checks, in the CPU's order; every block sees the same values.
    {
        i64 code = 0, f1 = 0, f2 = 0;
        if (bs < 0) {
            code = ST_NEGATIVE_BS;
            f1 = bs;
        } else if (bs > a.write_capacity) {
            code = ST_BATCH_EXCEEDS_CAPACITY;
            f1 = bs;
            f2 = a.write_capacity;
        } else if (bs > PLAN_MAX_ROWS) {
            code = ST_BATCH_TOO_LARGE;
            f1 = bs;
            f2 = PLAN_MAX_ROWS;
        } else if (HAS_POOL && *a.valid_lens_len != bs) {
            code = ST_VALID_LENS_LENGTH;
            f1 = bs;
            f2 = *a.valid_lens_len;
        }
        if (code != 0) {
            if (WRITE && blockIdx.x == 0 && tid == 0) record_status(a.status, code, f1, f2);
            return;
        }
    }

    // Step 1: rows [tid * rpt, tid * rpt + rpt) of this thread.
    const int rpt = static_cast<int>((bs + PLAN_THREADS - 1) / PLAN_THREADS);
    u32 vlen[ROWS_PER_THREAD];  // <= table width < 2^31 (host check)
    u64 wlen[ROWS_PER_THREAD];
    u64 vsum = 0, wsum = 0;
    i64 err_key = INT64_MAX;
#pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD; ++k) {
        vlen[k] = 0;
        wlen[k] = 0;
        const i64 r = static_cast<i64>(tid) * rpt + k;
        if (k < rpt && r < bs) {
            Row w = load_row(a, r, HAS_POOL);
            vlen[k] = static_cast<u32>(w.vlen);
            wlen[k] = w.wlen;
            if (w.code != 0 && err_key == INT64_MAX) {
                err_key = r * 8 + (w.code == ST_REQ_POOL_INDEX ? 1 : w.code == ST_PREFIX_BEYOND_ROW ? 2 : 3);
            }
            vsum += w.vlen;
            wsum = sat_add(wsum, w.wlen);
        }
    }
    u64 vtotal, wtotal;
    const u64 vexcl = block_exclusive_scan(vsum, s_warp, vtotal);
    const u64 wexcl = block_exclusive_scan(wsum, s_warp, wtotal);

    // The first row whose running write total overflows i64 (CPU: WriteTokenCountOverflow).
    if (wtotal >= SAT) {
        u64 run = wexcl;
#pragma unroll
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (k < rpt && r < bs) {
                u64 next = sat_add(run, wlen[k]);
                if (next >= SAT && run < SAT) {
                    const i64 key = r * 8 + 4;
                    if (key < err_key) err_key = key;
                }
                run = next;
            }
        }
    }
    if (tid == 0) s_err = INT64_MAX;
    __syncthreads();
    if (err_key != INT64_MAX) atomicMin(reinterpret_cast<long long*>(&s_err), err_key);
    __syncthreads();
    const i64 first_err = s_err;
    if (first_err != INT64_MAX) {
        const i64 r = first_err >> 3;
        if (WRITE && blockIdx.x == 0 && r / rpt == tid) {
            const int kind = static_cast<int>(first_err & 7);
            if (kind == 4) {
                record_status(a.status, ST_WRITE_TOKEN_OVERFLOW, r);
            } else {
                Row w = load_row(a, r, HAS_POOL);
                record_status(a.status, w.code, r, w.f1, w.f2, w.f3, w.f4);
            }
        }
        return;  // nothing written
    }

    // s_off = exclusive verify offsets, s_off[bs] = T (the write step below reuses it first).
    auto verify_offsets = [&]() {
        u64 run = vexcl;
#pragma unroll
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (k < rpt && r < bs) {
                s_off[r] = static_cast<i64>(run);
                run += vlen[k];
            }
        }
        if (tid == 0) s_off[bs] = static_cast<i64>(vtotal);
        __syncthreads();
    };
    const i64 total = static_cast<i64>(vtotal);

    if (MODE == PLAN_LUT_CHECK) {
        // Every slot the plan translates: each entry's own, and the predecessor of a window
        // that starts past position 0; all T entries, also when they overflow the capacity
        // (as the CPU). Key 2f: the predecessor read of entry f, 2f + 1: its own read.
        verify_offsets();
        if (total == 0) return;
        const Chunk ch = block_chunk(total);
        if (ch.c0 >= ch.c1) return;
        i64 best = INT64_MAX;
        i64 f = ch.c0 + tid;
        i64 r = row_of(s_off, bs, f < ch.c1 ? f : ch.c1 - 1);
        for (; f < ch.c1; f += PLAN_THREADS) {
            while (f >= s_off[r + 1]) ++r;
            const i64 rp = __ldg(a.req_pool_indices + r);
            const i64 ws = window_start(a, __ldg(a.prefix_lens + r));
            const i64 pos = ws + (f - s_off[r]);
            const i32* row_ptr = a.table + rp * a.table_width;
            if (f == s_off[r] && pos > 0 && __ldg(row_ptr + pos - 1) >= a.lut_len) best = min(best, 2 * f);
            if (__ldg(row_ptr + pos) >= a.lut_len) best = min(best, 2 * f + 1);
        }
        if (best != INT64_MAX) atomicMin(reinterpret_cast<long long*>(a.lut_key), best);
        return;
    }

    if (HAS_LUT && lut_key != INT64_MAX) {
        // The check kernel found a slot past the LUT: report the first, write nothing.
        verify_offsets();
        if (blockIdx.x == 0 && tid == 0) {
            const i64 f = lut_key >> 1;
            const i64 r = row_of(s_off, bs, f);
            const i64 rp = __ldg(a.req_pool_indices + r);
            const i64 pos = window_start(a, __ldg(a.prefix_lens + r)) + (f - s_off[r]) - ((lut_key & 1) ? 0 : 1);
            record_status(a.status, ST_LUT_INDEX, __ldg(a.table + rp * a.table_width + pos), a.lut_len);
        }
        return;
    }

    // Step 3: write metadata. s_off = exclusive write offsets, s_off[bs] = total.
    {
        u64 run = wexcl;
#pragma unroll
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (k < rpt && r < bs) {
                s_off[r] = static_cast<i64>(run);
                run += wlen[k];
            }
        }
        if (tid == 0) s_off[bs] = static_cast<i64>(wtotal);
    }
    __syncthreads();
    const i64 stride = static_cast<i64>(gridDim.x) * PLAN_THREADS;
    for (i64 j = static_cast<i64>(blockIdx.x) * PLAN_THREADS + tid; j <= a.write_capacity; j += stride) {
        a.w_offsets[j] = j <= bs ? s_off[j] : 0;
        if (j < bs) {
            const i64 rp = __ldg(a.req_pool_indices + j);
            const i64 prefix = __ldg(a.prefix_lens + j);
            const i64 ext = __ldg(a.extend_lens + j);
            i64 seed = -1;
            if (rp != 0 && prefix > 0 && ext > 0) {
                // Validated: rp is a table row and prefix <= width.
                seed = translate<HAS_LUT>(a, __ldg(a.table + rp * a.table_width + prefix - 1));
            }
            a.w_seeds[j] = seed;
        }
    }
    __syncthreads();  // s_off is reused

    // Step 4: verify entries.
    verify_offsets();
    const bool enable = total <= a.verify_capacity;
    if (blockIdx.x == 0 && tid == 0) {
        *a.v_num_valid = static_cast<i32>(enable ? total : a.verify_capacity);
        *a.v_enable = enable ? 1 : 0;
        *a.w_num_valid_reqs = static_cast<i32>(bs);
    }
    if (!enable || total == 0) return;
    const Chunk ch = block_chunk(total);
    if (ch.c0 >= ch.c1) return;
    const i64 c0 = ch.c0, c1 = ch.c1;

    // This thread's first row (once per thread), then a forward walk.
    i64 f = c0 + tid;
    i64 r = row_of(s_off, bs, f < c1 ? f : c1 - 1);
    i64 row_start = -1, rp = 0, ws = 0, vl = 0;
    const int lane = tid & 31;
    for (i64 base = c0; base < c1; base += PLAN_THREADS, f += PLAN_THREADS) {
        const bool active = f < c1;
        i64 slot = 0, pos = 0;
        const i32* row_ptr = nullptr;
        if (active) {
            while (f >= s_off[r + 1]) ++r;
            if (s_off[r] != row_start) {
                row_start = s_off[r];
                rp = __ldg(a.req_pool_indices + r);
                ws = window_start(a, __ldg(a.prefix_lens + r));
                if (HAS_POOL) vl = __ldg(a.valid_lens + r);
            }
            row_ptr = a.table + rp * a.table_width;
            pos = ws + (f - row_start);
            slot = translate<HAS_LUT>(a, __ldg(row_ptr + pos));
        }
        const i64 from_left = __shfl_up_sync(0xffffffffu, slot, 1);
        if (active) {
            i64 prev;
            if (lane > 0 && f - 1 >= row_start) {
                prev = from_left;
            } else {
                prev = pos == 0 ? -1 : translate<HAS_LUT>(a, __ldg(row_ptr + pos - 1));
            }
            i64 tok = -1;
            if (HAS_POOL) {
                const i64 sot = pos + a.offset;
                if (sot >= 0 && sot < vl) tok = __ldg(a.pool + rp * a.pool_width + sot);
            }
            a.v_slots[f] = slot;
            a.v_tokens[f] = tok;
            a.v_positions[f] = pos;
            a.v_prevs[f] = prev;
        }
    }
}

// After every block of a LUT write kernel has read lut_key (at its start), the last block
// done resets it for the next launch.
__device__ __forceinline__ void release_lut_key(const PlanArgs& a) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const u32 done = atomicAdd(reinterpret_cast<u32*>(a.lut_done), 1u);
        if (done == gridDim.x - 1) {
            *reinterpret_cast<volatile i64*>(a.lut_key) = INT64_MAX;
            *reinterpret_cast<volatile i64*>(a.lut_done) = 0;
            __threadfence();
        }
    }
}

}  // namespace kvc

using kvc::PlanArgs;
static_assert(sizeof(PlanArgs) == 30 * 8, "PlanArgs layout (src/cuda/abi.rs)");

#define KVC_PLAN_ENTRY(NAME, POOL)                                                              \
    extern "C" __global__ void __launch_bounds__(kvc::PLAN_THREADS, 2) NAME(PlanArgs a) {     \
        kvc::plan_body<false, POOL, kvc::PLAN_WRITE>(a, INT64_MAX);                            \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(kvc::PLAN_THREADS, 2) NAME##_lut(PlanArgs a) { \
        const i64 key = *reinterpret_cast<volatile i64*>(a.lut_key);                 \
        kvc::plan_body<true, POOL, kvc::PLAN_WRITE>(a, key);                                   \
        kvc::release_lut_key(a);                                                               \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(kvc::PLAN_THREADS, 2) NAME##_lut_check(PlanArgs a) { \
        kvc::plan_body<true, POOL, kvc::PLAN_LUT_CHECK>(a, INT64_MAX);                         \
    }

// kv_canary_plan{,_pool}{,_lut,_lut_check}: FULL / SWA (LUT), without / with expected tokens.
KVC_PLAN_ENTRY(kv_canary_plan, false)
KVC_PLAN_ENTRY(kv_canary_plan_pool, true)
