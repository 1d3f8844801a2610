// The previous plan kernels (two launches with a checked LUT), kept while the fused kernel of
// plan.cu is measured against them (LaunchConfig::plan_kernel = PlanKernel::Legacy).
// The plan op (spec §3.2) as ONE launch: every block scans the batch rows in shared memory,
// validates them, and copies its contiguous chunk of the verify work list; one block writes the
// write metadata.
//
// With a LUT the op takes two launches, so that an index past the LUT's end leaves every output
// untouched, as on the CPU: a check kernel reads every slot the plan would translate (the table
// values only, no LUT gathers) and keeps the first offending read in a stream scratch word; the
// plan kernel then writes nothing when that word is set, records the error, and resets it.
//
// Layout of the work (grid G blocks x PLAN_THREADS threads, G fixed when the launch is built;
// bs is read from device memory):
//  1. Every block loads the rows (speculatively up to the capacity, in flight together with bs),
//     computes each row's verify length, write length, window start, token-read limit and first
//     error, keeps the per-row facts in shared memory and scans both lengths in one block-wide
//     scan. Every block reaches the same totals and the same verdict.
//  2. Any row error: block 0 records the first (in row order) and the launch writes nothing.
//  3. Write metadata: the last block writes offsets (tail zeroed) and seeds; the seeds' table
//     reads were issued in step 1.
//  4. Verify entries: the T entries are cut into G chunks of whole multiples of 512 entries.
//     Each thread finds its first row once (a binary search per thread, not per entry) and then
//     walks rows forward; per round it has four entries in flight (their table, LUT and pool
//     loads issued before any store). Consecutive threads handle consecutive positions of a
//     row, so loads and the four output stores are coalesced; a predecessor slot comes from the
//     neighbouring lane (warp shuffle) except at a row or warp start.
//
// Differences from the CPU reference are listed in src/cuda/plan.rs.
#include "common.cuh"

namespace kvc {

constexpr int PLAN_THREADS = 512;
constexpr int PLAN_MAX_ROWS = 4096;
constexpr int ROWS_PER_THREAD = PLAN_MAX_ROWS / PLAN_THREADS;  // 8
constexpr int PLAN_WARPS = PLAN_THREADS / 32;
constexpr int UNROLL = 4;  // entries in flight per thread
constexpr i64 ROUND = static_cast<i64>(PLAN_THREADS) * UNROLL;
constexpr u64 SAT = 1ull << 63;  // saturation bound of the length scans: "overflowed i64"

struct PlanArgs {
    const i64* req_pool_indices;
    const i64* prefix_lens;
    const i64* extend_lens;
    const i32* bs;
    const i32* table;
    i64 table_rows;  // < 2^31 (host check)
    i64 table_width;  // < 2^31 (host check)
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
    i64 smem_rows;  // rows the dynamic shared memory holds: min(write_capacity, PLAN_MAX_ROWS)
};

// Dynamic shared memory: off[smem_rows + 1] (i64), then rp, ws, lim, vlen[smem_rows] (i32):
// 24 bytes a row, 98 KB for 4096 rows.
struct Smem {
    i64* off;   // first the rows' write lengths, then their exclusive verify offsets
    i32* rp;    // req_pool_index of an active row with entries
    i32* ws;    // window start
    i32* lim;   // entries of the row whose expected token is read from the pool
    i32* vlen;  // verify entries (< 2^31: at most the table width)
};

__device__ __forceinline__ Smem smem_layout(const PlanArgs& a) {
    extern __shared__ __align__(16) unsigned char s_raw[];
    Smem s;
    s.off = reinterpret_cast<i64*>(s_raw);
    s.rp = reinterpret_cast<i32*>(s.off + a.smem_rows + 1);
    s.ws = s.rp + a.smem_rows;
    s.lim = s.ws + a.smem_rows;
    s.vlen = s.lim + a.smem_rows;
    return s;
}

__device__ __forceinline__ u64 sat_add(u64 a, u64 b) {
    const u64 s = a + b;  // a, b <= SAT: wraps (to 0) only when both are SAT
    return (s > SAT || s < a) ? SAT : s;
}

// Block-wide exclusive scan of a pair (plain sum, saturating sum) of one value per thread;
// also returns the totals. One pass, two barriers.
__device__ __forceinline__ void block_scan2(u64 v, u64 w, u64* s_warp, u64& v_excl, u64& w_excl,
                                            u64& v_total, u64& w_total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 vi = v, wi = w;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const u64 nv = __shfl_up_sync(0xffffffffu, vi, d);
        const u64 nw = __shfl_up_sync(0xffffffffu, wi, d);
        if (lane >= d) {
            vi += nv;
            wi = sat_add(wi, nw);
        }
    }
    if (lane == 31) {
        s_warp[warp] = vi;
        s_warp[32 + warp] = wi;
    }
    __syncthreads();
    u64 vb = 0, wb = 0, vt = 0, wt = 0;
#pragma unroll
    for (int k = 0; k < PLAN_WARPS; ++k) {
        const u64 x = s_warp[k], y = s_warp[32 + k];
        if (k < warp) {
            vb += x;
            wb = sat_add(wb, y);
        }
        vt += x;
        wt = sat_add(wt, y);
    }
    v_excl = vb + (vi - v);
    // Saturating sums are not invertible: take the left neighbour's inclusive value instead.
    u64 wl = __shfl_up_sync(0xffffffffu, wi, 1);
    if (lane == 0) wl = 0;
    w_excl = sat_add(wb, wl);
    v_total = vt;
    w_total = wt;
    __syncthreads();  // s_warp may be reused
}

template <bool HAS_LUT>
__device__ __forceinline__ i64 translate(const PlanArgs& a, i64 x) {
    if (!HAS_LUT || x < 0) return x;
    if (x >= a.lut_len) {
        // Unreachable after the check kernel (same inputs); clamped as SGLang's GPU path does.
        record_status(a.status, ST_LUT_INDEX, x, a.lut_len);
        x = a.lut_len - 1;
    }
    return __ldg(a.lut + x);
}

// Per-row facts of step 1.
struct Row {
    i64 rp;      // req_pool_index
    i64 prefix;  // max(prefix_len, 0)
    i64 ws;      // window start
    u64 vlen;    // verify entries
    u64 wlen;    // write tokens
    i64 lim;     // entries whose expected token is read from the pool
    i64 code;    // first error of the row (0 = none), in the CPU's check order
    i64 f1, f2, f3, f4;  // error fields
    bool seeded;         // active, prefix > 0, extend > 0: the seed is table[rp][prefix - 1]
};

// Loads and checks row r (r < smem_rows: inside every column). `vl` is valid_lens[r].
__device__ __forceinline__ Row make_row(const PlanArgs& a, i64 rp, i64 prefix_raw, i64 ext, i64 vl,
                                        bool has_pool) {
    Row w = {};
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
    w.seeded = ext > 0;
    if (has_pool) {
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
                return w;
            }
            w.lim = k;
        }
    }
    return w;
}

__device__ __forceinline__ Row load_row(const PlanArgs& a, i64 r, bool has_pool) {
    const i64 vl = has_pool ? __ldg(a.valid_lens + r) : 0;
    return make_row(a, __ldg(a.req_pool_indices + r), __ldg(a.prefix_lens + r), __ldg(a.extend_lens + r),
                    vl, has_pool);
}

// Entry chunking: the T entries in G chunks of whole 512-entry rows of threads; [c0, c1) for
// this block. (Small batches spread over many blocks, one entry a thread, for latency; large
// ones give each thread UNROLL entries in flight per round.)
struct Chunk {
    i64 c0, c1;
};
__device__ __forceinline__ Chunk block_chunk(i64 total) {
    const i64 per_block = (total + gridDim.x - 1) / gridDim.x;
    const i64 chunk = (per_block + PLAN_THREADS - 1) / PLAN_THREADS * PLAN_THREADS;
    const i64 c0 = static_cast<i64>(blockIdx.x) * chunk;
    return {c0, c0 + chunk < total ? c0 + chunk : total};
}

// The largest r in [0, bs) with off[r] <= f (off[bs] > f): the row holding entry f.
__device__ __forceinline__ i64 row_of(const i64* off, i64 bs, i64 f) {
    i64 lo = 0, hi = bs;
    while (hi - lo > 1) {
        const i64 mid = (lo + hi) >> 1;
        if (off[mid] <= f) lo = mid; else hi = mid;
    }
    return lo;
}

enum PlanMode { PLAN_WRITE = 0, PLAN_LUT_CHECK = 1 };

// One plan launch. PLAN_LUT_CHECK only validates and looks for table values past the LUT end;
// PLAN_WRITE writes the outputs (with a LUT: unless the check found one, given as lut_key).
template <bool HAS_LUT, bool HAS_POOL, int MODE>
__device__ __forceinline__ void plan_body(const PlanArgs& a, i64 lut_key) {
    __shared__ u64 s_warp[64];
    __shared__ i64 s_err;
    constexpr bool WRITE = MODE == PLAN_WRITE;
    const Smem sm = smem_layout(a);
    const int tid = threadIdx.x;
    const bool meta_block = WRITE && blockIdx.x == gridDim.x - 1;

    // Step 1: rows [tid * rpt, tid * rpt + rpt). bs is read while the first rows load; rows
    // past bs (up to the capacity: always inside the columns) are loaded and ignored.
    const i64 bs = *a.bs;
    const int rpt = static_cast<int>((a.smem_rows + PLAN_THREADS - 1) / PLAN_THREADS);
    u64 vsum = 0, wsum = 0;
    i64 err_key = INT64_MAX;
#pragma unroll 2
    for (int k = 0; k < ROWS_PER_THREAD; ++k) {
        const i64 r = static_cast<i64>(tid) * rpt + k;
        if (k < rpt && r < a.smem_rows) {
            const Row w = load_row(a, r, HAS_POOL);
            sm.off[r] = static_cast<i64>(w.wlen);
            sm.rp[r] = static_cast<i32>(w.rp);
            sm.ws[r] = static_cast<i32>(w.ws);
            sm.lim[r] = static_cast<i32>(w.lim);
            sm.vlen[r] = static_cast<i32>(w.vlen);
            if (r < bs) {
                if (w.code != 0 && err_key == INT64_MAX) {
                    err_key = r * 8 + (w.code == ST_REQ_POOL_INDEX ? 1 : w.code == ST_PREFIX_BEYOND_ROW ? 2 : 3);
                }
                vsum += w.vlen;
                wsum = sat_add(wsum, w.wlen);
            }
        }
    }

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

    u64 vexcl, wexcl, vtotal, wtotal;
    block_scan2(vsum, wsum, s_warp, vexcl, wexcl, vtotal, wtotal);

    // The first row whose running write total overflows i64 (CPU: WriteTokenCountOverflow).
    if (wtotal >= SAT) {
        u64 run = wexcl;
        for (int k = 0; k < rpt; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (r < bs) {
                const u64 next = sat_add(run, static_cast<u64>(sm.off[r]));
                if (next >= SAT && run < SAT) err_key = min(err_key, r * 8 + 4);
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
                const Row w = load_row(a, r, HAS_POOL);
                record_status(a.status, w.code, r, w.f1, w.f2, w.f3, w.f4);
            }
        }
        return;  // nothing written
    }

    // Step 3 (last block): write offsets (from the write lengths in off), seeds, tail zeros.
    // It needs no LUT verdict for the offsets, but the seeds are translated, so with a LUT it
    // waits for the check (lut_key) like everything else.
    const bool lut_failed = HAS_LUT && lut_key != INT64_MAX;
    if (meta_block && !lut_failed) {
        u64 run = wexcl;
        for (int k = 0; k < rpt; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (r < bs) {
                const i64 rp = __ldg(a.req_pool_indices + r);
                const i64 prefix = __ldg(a.prefix_lens + r);
                const i64 ext = __ldg(a.extend_lens + r);
                i64 seed = -1;
                if (rp != 0 && prefix > 0 && ext > 0) {
                    // Validated: rp is a table row and prefix <= width.
                    seed = translate<HAS_LUT>(a, __ldg(a.table + rp * a.table_width + prefix - 1));
                }
                a.w_offsets[r] = static_cast<i64>(run);
                a.w_seeds[r] = seed;
                run += static_cast<u64>(sm.off[r]);
            }
        }
        for (i64 j = bs + tid; j <= a.write_capacity; j += PLAN_THREADS) {
            a.w_offsets[j] = j == bs ? static_cast<i64>(wtotal) : 0;
        }
    }
    __syncthreads();  // off: write lengths -> verify offsets
    {
        u64 run = vexcl;
        for (int k = 0; k < rpt; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (r < bs) {
                sm.off[r] = static_cast<i64>(run);
                run += static_cast<u64>(sm.vlen[r]);
            }
        }
        if (tid == 0) sm.off[bs] = static_cast<i64>(vtotal);
    }
    __syncthreads();
    const i64 total = static_cast<i64>(vtotal);

    if (MODE == PLAN_LUT_CHECK) {
        // Every slot the plan translates: each entry's own, and the predecessor of a window
        // that starts past position 0; all T entries, also when they overflow the capacity
        // (as the CPU). Key 2f: the predecessor read of entry f, 2f + 1: its own read.
        if (total == 0) return;
        const Chunk ch = block_chunk(total);
        if (ch.c0 >= ch.c1) return;
        i64 best = INT64_MAX;
        i64 f = ch.c0 + tid;
        i64 r = row_of(sm.off, bs, f < ch.c1 ? f : ch.c1 - 1);
        for (; f < ch.c1; f += PLAN_THREADS) {
            while (f >= sm.off[r + 1]) ++r;
            const i64 ws = sm.ws[r];
            const i64 pos = ws + (f - sm.off[r]);
            const i32* row_ptr = a.table + static_cast<i64>(sm.rp[r]) * a.table_width;
            if (f == sm.off[r] && pos > 0 && __ldg(row_ptr + pos - 1) >= a.lut_len) best = min(best, 2 * f);
            if (__ldg(row_ptr + pos) >= a.lut_len) best = min(best, 2 * f + 1);
        }
        if (best != INT64_MAX) atomicMin(reinterpret_cast<long long*>(a.lut_key), best);
        return;
    }

    if (lut_failed) {
        // The check kernel found a slot past the LUT: report the first, write nothing.
        if (blockIdx.x == 0 && tid == 0) {
            const i64 f = lut_key >> 1;
            const i64 r = row_of(sm.off, bs, f);
            const i64 pos = sm.ws[r] + (f - sm.off[r]) - ((lut_key & 1) ? 0 : 1);
            record_status(a.status, ST_LUT_INDEX, __ldg(a.table + static_cast<i64>(sm.rp[r]) * a.table_width + pos),
                          a.lut_len);
        }
        return;
    }

    const bool enable = total <= a.verify_capacity;
    if (blockIdx.x == 0 && tid == 0) {
        *a.v_num_valid = static_cast<i32>(enable ? total : a.verify_capacity);
        *a.v_enable = enable ? 1 : 0;
        *a.w_num_valid_reqs = static_cast<i32>(bs);
    }

    if (!enable || total == 0) return;

    // Step 4: verify entries, UNROLL in flight per thread.
    const Chunk ch = block_chunk(total);
    if (ch.c0 >= ch.c1) return;
    const int lane = tid & 31;
    i64 r = row_of(sm.off, bs, ch.c0 + tid < ch.c1 ? ch.c0 + tid : ch.c1 - 1);
    for (i64 base = ch.c0; base < ch.c1; base += ROUND) {
        // Loads of all UNROLL entries first (table values and pool tokens are i32).
        i32 pos[UNROLL], x[UNROLL], xp[UNROLL], tok[UNROLL];
        bool head[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const i64 f = base + k * PLAN_THREADS + tid;
            x[k] = xp[k] = 0;
            tok[k] = -1;
            pos[k] = 0;
            head[k] = false;
            if (f < ch.c1) {
                while (f >= sm.off[r + 1]) ++r;
                const i64 idx = f - sm.off[r];
                pos[k] = static_cast<i32>(sm.ws[r] + idx);
                const i64 rp = sm.rp[r];
                const i32* row_ptr = a.table + rp * a.table_width;
                x[k] = __ldg(row_ptr + pos[k]);
                head[k] = lane == 0 || idx == 0;
                if (head[k] && pos[k] > 0) xp[k] = __ldg(row_ptr + pos[k] - 1);
                if (HAS_POOL && idx < sm.lim[r]) tok[k] = __ldg(a.pool + rp * a.pool_width + pos[k] + a.offset);
            }
        }
        // Then the LUT gathers (independent of each other), then shuffles and stores.
        i64 slot[UNROLL], prev_own[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const bool active = base + k * PLAN_THREADS + tid < ch.c1;
            slot[k] = active ? translate<HAS_LUT>(a, x[k]) : 0;
            prev_own[k] = (active && head[k] && pos[k] > 0) ? translate<HAS_LUT>(a, xp[k]) : -1;
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const i64 f = base + k * PLAN_THREADS + tid;
            const i64 from_left = __shfl_up_sync(0xffffffffu, slot[k], 1);
            if (f < ch.c1) {
                a.v_slots[f] = slot[k];
                a.v_tokens[f] = tok[k];
                a.v_positions[f] = pos[k];
                a.v_prevs[f] = head[k] ? prev_own[k] : from_left;
            }
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
static_assert(sizeof(PlanArgs) == 31 * 8, "PlanArgs layout (src/cuda/abi.rs)");

#define KVC_PLAN_ENTRY(NAME, POOL)                                                              \
    extern "C" __global__ void __launch_bounds__(kvc::PLAN_THREADS, 2) NAME(PlanArgs a) {     \
        kvc::plan_body<false, POOL, kvc::PLAN_WRITE>(a, INT64_MAX);                            \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(kvc::PLAN_THREADS, 2) NAME##_lut(PlanArgs a) { \
        const i64 key = *reinterpret_cast<volatile i64*>(a.lut_key);                           \
        kvc::plan_body<true, POOL, kvc::PLAN_WRITE>(a, key);                                   \
        kvc::release_lut_key(a);                                                               \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(kvc::PLAN_THREADS, 2) NAME##_lut_check(PlanArgs a) { \
        kvc::plan_body<true, POOL, kvc::PLAN_LUT_CHECK>(a, INT64_MAX);                         \
    }

// kv_canary_legacy_plan{,_pool}{,_lut,_lut_check}: FULL / SWA (LUT), without / with expected tokens.
KVC_PLAN_ENTRY(kv_canary_legacy_plan, false)
KVC_PLAN_ENTRY(kv_canary_legacy_plan_pool, true)
