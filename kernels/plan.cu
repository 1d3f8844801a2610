// The plan op (spec §3.2) as ONE launch, also when a LUT must be checked before anything is
// written. Every block scans the batch rows in shared memory and validates them; the entry
// blocks copy the verify work list (a contiguous chunk a block, or grid-strided rounds in the
// lean kernels); the last block writes the write metadata.
//
// Layout of the work (grid G blocks x THREADS threads, G chosen on the host from the verify
// capacity; bs is read from device memory):
//  1. Every block loads the rows (speculatively up to the capacity, in flight together with bs)
//     and keeps per-row facts in shared memory (verify and write lengths, request row, window
//     start, pool-read limit; the last block also reads every row's seed, all at once). One block-wide
//     scan gives both running sums and the first row error (a min in the same pass). Every
//     block reaches the same totals and the same verdict.
//  2. Any row error: block 0 records the first (in row order) and the launch writes nothing.
//  3. With a checked LUT (LUT_CHECKED): every entry block reads the table values of its chunk
//     (its own reads and each window's predecessor) and looks for one past the LUT's end; a
//     grid-wide barrier (every block is resident: cooperative launch, scratch words of the
//     stream) then gives every block the first such read of the launch. If there is one, block
//     0 records it and nothing is written, as on the CPU. When every block's chunk is one
//     round, the values read for the check are kept and their LUT gathers are already in
//     flight while the block waits at the barrier.
//  4. The last block writes offsets (tail zeroed) and seeds (read in step 1).
//  5. Entry blocks, U entries a thread a round; consecutive threads handle consecutive
//     entries, so loads and the four output stores are coalesced; a predecessor slot comes
//     from the neighbouring lane (warp shuffle) except at a row or warp start. The small and
//     large kernels (PIPE) walk a contiguous chunk a block: each thread finds its first row
//     once (a binary search), then walks rows forward with the row's facts in registers,
//     software-pipelined (while it stores round i, the LUT gathers of round i + 1 and the
//     table and pool loads of round i + 2 are in flight). The lean kernels take grid-strided
//     rounds one at a time (a binary search a round), with at most 64 registers.
//
// Differences from the CPU reference are listed in src/cuda/ops/plan.rs.
#include "common.cuh"
#include "verify_checks.cuh"

namespace kvc {

constexpr u64 SAT = 1ull << 63;     // saturation bound of the write-length scan: "overflowed i64"
constexpr u32 NO_ERR = 0xFFFFFFFFu;  // error key of a row without error (keys are row * 8 + kind)

// LUT handling of a variant.
enum LutMode { NO_LUT = 0, LUT_CLAMP = 1, LUT_CHECKED = 2 };

// The head verify a plan launch runs over the entries it plans (`kv_canary_plan_verify_head*`):
// the K half's arguments, and the V half's for a pair (HEADS = 2). HEADS = 0: a plain plan.
struct HeadVerify {
    const VerifyArgs* k;
    const VerifyArgs* v;
};

// Checks entry f (slot s, predecessor prev, expected token tok, position pos) against HEADS
// head buffers, as verify_single<KV_NONE, false> checks a planned entry: the same range checks,
// records, predecessor hash (the lane before's when it holds the predecessor) and rows. Every
// lane of the warp calls it (shuffles); `in` says whether the lane holds an entry.
template <int HEADS>
__device__ __forceinline__ void head_check(const HeadVerify& hv, bool in, i64 f, i64 s, i64 prev,
                                           i64 tok, i64 pos) {
    const int lane = threadIdx.x & 31;
    const i64 s_before = __shfl_up_sync(0xffffffffu, s, 1);
    // Every half's records are loaded before the first is hashed (all in flight together).
    bool ok[2], from_before[2];
    Slot st[2] = {}, pv[2] = {};
#pragma unroll
    for (int h = 0; h < HEADS; ++h) {
        const VerifyArgs& a = h == 0 ? *hv.k : *hv.v;
        ok[h] = in && entry_in_range<false>(a, f, s, prev);
        const bool ok_before = __shfl_up_sync(0xffffffffu, ok[h], 1);
        from_before[h] = lane > 0 && ok_before && prev > 0 && prev == s_before;
        if (ok[h]) {
            st[h] = load_slot(a.buf, a.stride, s);
            if (prev > 0 && !from_before[h]) pv[h] = load_slot(a.buf, a.stride, prev);
        }
    }
#pragma unroll
    for (int h = 0; h < HEADS; ++h) {
        const VerifyArgs& a = h == 0 ? *hv.k : *hv.v;
        const u64 before = __shfl_up_sync(0xffffffffu, ok[h] ? slot_hash(st[h]) : 0ull, 1);
        if (ok[h]) {
            const Ring ring = {a.ring, a.ring_capacity, a.write_index};
            const u64 pv_hash = from_before[h] ? before : prev > 0 ? slot_hash(pv[h]) : 0;
            check_hashed<false>(a, ring, f, s, prev, st[h], pv_hash, 0, tok, pos);
        }
    }
}

struct PlanArgs {
    const i64* req_pool_indices;
    const i64* prefix_lens;
    const i64* extend_lens;
    const i32* bs;
    const i32* table;
    i64 table_rows;   // < 2^31 (host check)
    i64 table_width;  // < 2^31 (host check)
    const i64* lut;   // null: no LUT (FULL group)
    i64 lut_len;      // >= 1 with a LUT
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
    i64* v_requested;     // T, the entries the batch asked for (also when over the capacity)
    i64 verify_capacity;  // <= i32::MAX (host check)
    i64* w_offsets;       // write_capacity + 1
    i64* w_seeds;         // write_capacity
    i32* w_num_valid_reqs;
    i64 write_capacity;
    i64* status;
    // Stream scratch (LUT_CHECKED): [0] barrier arrivals, [1] barrier generation g,
    // [2 + g % 2] the first out-of-LUT read of the launch of generation g (INT64_MAX: none).
    i64* scratch;
    i64 smem_rows;     // rows the dynamic shared memory holds: min(write_capacity, PLAN_MAX_ROWS)
    i64 entry_blocks;  // blocks [0, entry_blocks) copy entries (1 <= entry_blocks <= G)
    i64 block;           // tokens a table cell places (1: a token table; a block table's size)
    i64 table_tokens;    // tokens a row places: table_width * block (< 2^31, host check)
    i64 table_unsigned;  // 1: u32 cells (zero-extended), 0: i32 cells
    i64 layout;          // 0: SGLang's columns; 1: context_lens + query lengths; 2: + starts
    i64 kinds;           // column k's element type in byte k (0 i64, 1 i32, 2 u32); byte 3: valid_lens';
                         // byte 4: the expected-token pool's cells (1 i32, 2 u32; 0 no pool)
};

// Batch layouts (PlanArgs::layout).
enum BatchLayout { POOL_ROWS = 0, QUERY_LENS = 1, QUERY_STARTS = 2 };

// Element r of a batch column of element kind `kind` (load_index).
__device__ __forceinline__ i64 load_col(const i64* p, i64 kind, i64 r) { return load_index(p, kind, r); }

// Row r's valid length (its element kind in byte 3 of `kinds`).
__device__ __forceinline__ i64 valid_len(const PlanArgs& a, i64 r) {
    return load_index(a.valid_lens, (a.kinds >> 24) & 0xff, r);
}

// The expected token in pool cell `at`: an i32 cell sign-extended, a u32 cell (byte 4 of `kinds`)
// zero-extended, as the CPU widens either.
__device__ __forceinline__ i64 pool_token(const PlanArgs& a, i64 at) {
    const i32 bits = __ldg(a.pool + at);
    return ((a.kinds >> 32) & 0xff) == 2 ? static_cast<i64>(static_cast<u32>(bits)) : static_cast<i64>(bits);
}

// x - y saturated to [INT64_MIN, INT64_MAX] (the CPU's `saturating_sub`).
__device__ __forceinline__ i64 sat_sub_i64(i64 x, i64 y) {
    const i64 d = static_cast<i64>(static_cast<u64>(x) - static_cast<u64>(y));
    // Overflow iff x and y have different signs and d's sign differs from x's.
    if (((x ^ y) & (x ^ d)) < 0) return x < 0 ? INT64_MIN : INT64_MAX;
    return d;
}

// What the plan reads of a batch row, whatever the layout (the CPU's `RowRead`).
struct Cols {
    i64 rp;      // the table row (SGLang: req_pool_index; vLLM: the batch row)
    i64 prefix;  // cached tokens (raw: negative plans nothing)
    i64 ext;     // tokens written this step (raw)
    i64 qs0, qs1;  // QUERY_STARTS: the row's two offsets
    bool active;   // not a padding row (SGLang: req_pool_index != 0; vLLM: every row)
    bool qbad;     // QUERY_STARTS: the offsets decrease
};

// Row r's columns (r < smem_rows: inside every column; a QUERY_STARTS column holds one more).
__device__ __forceinline__ Cols load_cols(const PlanArgs& a, i64 r) {
    Cols c = {};
    const i64 ka = a.kinds & 0xff, kb = (a.kinds >> 8) & 0xff, kc = (a.kinds >> 16) & 0xff;
    if (a.layout == POOL_ROWS) {
        c.rp = load_col(a.req_pool_indices, ka, r);
        c.prefix = load_col(a.prefix_lens, kb, r);
        c.ext = load_col(a.extend_lens, kc, r);
        c.active = c.rp != 0;
        return c;
    }
    const i64 context = load_col(a.req_pool_indices, ka, r);
    i64 q;
    if (a.layout == QUERY_LENS) {
        q = load_col(a.prefix_lens, kb, r);
    } else {
        c.qs0 = load_col(a.prefix_lens, kb, r);
        c.qs1 = load_col(a.prefix_lens, kb, r + 1);
        c.qbad = c.qs1 < c.qs0;
        q = c.qbad ? 0 : sat_sub_i64(c.qs1, c.qs0);
    }
    c.rp = r;
    c.prefix = sat_sub_i64(context, q);
    c.ext = q;
    c.active = true;
    return c;
}

// The raw table cell holding position pos of table row rp (pos < table_tokens).
__device__ __forceinline__ i32 table_cell(const PlanArgs& a, i64 rp, i64 pos) {
    const i64 col = a.block == 1 ? pos : static_cast<i64>(static_cast<u32>(pos) / static_cast<u32>(a.block));
    return __ldg(a.table + rp * a.table_width + col);
}

// Whether a cell is a negative block of a block table (recorded where it is read, with its row).
__device__ __forceinline__ bool bad_block(const PlanArgs& a, i32 bits) {
    return a.block > 1 && !a.table_unsigned && bits < 0;
}

// The slot of position pos whose table cell is `bits`: the cell itself for a token table, else
// cell * block + pos % block (a negative block, recorded by whoever read it, gives slot 0,
// which no op reads).
__device__ __forceinline__ i64 cell_slot(const PlanArgs& a, i32 bits, i64 pos) {
    const i64 cell = a.table_unsigned ? static_cast<i64>(static_cast<u32>(bits)) : static_cast<i64>(bits);
    if (a.block == 1) return cell;
    if (cell < 0) return 0;
    return cell * a.block + static_cast<i64>(static_cast<u32>(pos) % static_cast<u32>(a.block));
}

// Dynamic shared memory, S slots per array: voff, woff (i64), then rp, ws, lim, seedx (i32):
// 32 bytes a slot. Thread t scans rows [t * rpt, t * rpt + rpt) (rpt a power of two); row r
// lives in slot r + r / rpt (for rpt > 1), so the k-th rows of consecutive threads are rpt + 1
// slots apart and fall in different banks. S = R + R / rpt + 1 (row R: the total).
struct Smem {
    i64* voff;   // first the rows' verify lengths, then their exclusive verify offsets
    i64* woff;   // the rows' write lengths
    i32* rp;     // req_pool_index of a row with entries (a table row: validated)
    i32* ws;     // window start
    i32* lim;    // entries of the row whose expected token is read from the pool
    i32* seedx;  // last block: the row's seed table value (seeded rows only)
    int shift;   // log2(rpt) when rpt > 1, else 63 (no padding)
    // The slot of row r.
    __device__ __forceinline__ i64 at(i64 r) const { return r + (r >> shift); }
};

// Rows a thread scans: the smallest power of two with rpt * THREADS >= R (at most 8).
template <int THREADS>
__device__ __forceinline__ int rows_per_thread(i64 R, int& shift) {
    int rpt = 1, sh = 0;
    while (static_cast<i64>(rpt) * THREADS < R) {
        rpt <<= 1;
        ++sh;
    }
    shift = sh == 0 ? 63 : sh;
    return rpt;
}

template <int THREADS>
__device__ __forceinline__ Smem smem_layout(const PlanArgs& a, int& rpt) {
    extern __shared__ __align__(16) unsigned char s_raw[];
    const i64 R = a.smem_rows;
    Smem s;
    rpt = rows_per_thread<THREADS>(R, s.shift);
    const i64 slots = R + (R >> s.shift) + 1;
    s.voff = reinterpret_cast<i64*>(s_raw);
    s.woff = s.voff + slots;
    s.rp = reinterpret_cast<i32*>(s.woff + slots);
    s.ws = s.rp + slots;
    s.lim = s.ws + slots;
    s.seedx = s.lim + slots;
    return s;
}

__device__ __forceinline__ u64 sat_add(u64 a, u64 b) {
    const u64 s = a + b;  // a, b <= SAT: wraps (to 0) only when both are SAT
    return (s > SAT || s < a) ? SAT : s;
}

// Block-wide exclusive scan of a pair (plain sum, saturating sum) of one value per thread, and
// the minimum of an error key; returns the totals too. One barrier (the warp partials are not
// reused).
template <int THREADS>
__device__ __forceinline__ void block_scan(u64 v, u64 w, u32 e, u64& v_excl, u64& w_excl,
                                           u64& v_total, u64& w_total, u32& e_min) {
    constexpr int WARPS = THREADS / 32;
    __shared__ u64 s_v[WARPS], s_w[WARPS];
    __shared__ u32 s_e[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 vi = v, wi = w;
    u32 ei = e;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const u64 nv = __shfl_up_sync(0xffffffffu, vi, d);
        const u64 nw = __shfl_up_sync(0xffffffffu, wi, d);
        ei = min(ei, __shfl_xor_sync(0xffffffffu, ei, d));
        if (lane >= d) {
            vi += nv;
            wi = sat_add(wi, nw);
        }
    }
    if (lane == 31) {
        s_v[warp] = vi;
        s_w[warp] = wi;
        s_e[warp] = ei;
    }
    __syncthreads();
    u64 vb = 0, wb = 0, vt = 0, wt = 0;
    u32 em = NO_ERR;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) {
        const u64 x = s_v[k], y = s_w[k];
        if (k < warp) {
            vb += x;
            wb = sat_add(wb, y);
        }
        vt += x;
        wt = sat_add(wt, y);
        em = min(em, s_e[k]);
    }
    v_excl = vb + (vi - v);
    // Saturating sums are not invertible: take the left neighbour's inclusive value instead.
    u64 wl = __shfl_up_sync(0xffffffffu, wi, 1);
    if (lane == 0) wl = 0;
    w_excl = sat_add(wb, wl);
    v_total = vt;
    w_total = wt;
    e_min = em;
}

// A table value as a slot: through the LUT when there is one (negative values pass through).
template <int MODE>
__device__ __forceinline__ i64 translate(const PlanArgs& a, i64 x) {
    if (MODE == NO_LUT || x < 0) return x;
    if (x >= a.lut_len) {
        // LUT_CHECKED: never stored (the launch found this read and writes nothing); the
        // gather is skipped. LUT_CLAMP: SGLang's GPU semantics, clamp and record.
        if (MODE == LUT_CHECKED) return 0;
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

// Checks a row from its columns (`vl`: its valid length, with a pool).
template <bool HAS_POOL>
__device__ __forceinline__ Row make_row(const PlanArgs& a, const Cols& c, i64 vl) {
    Row w = {};
    const i64 rp = c.rp, prefix_raw = c.prefix, ext = c.ext;
    w.rp = rp;
    if (c.qbad) {
        w.code = ST_QUERY_STARTS;
        w.f1 = c.qs0;
        w.f2 = c.qs1;
        return w;
    }
    if (!c.active) return w;  // padding row: never read further
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
    if (prefix > a.table_tokens) {
        w.code = ST_PREFIX_BEYOND_ROW;
        w.f1 = prefix_raw;
        w.f2 = a.table_tokens;
        return w;
    }
    w.ws = (a.window > 0 && prefix > a.window) ? prefix - a.window : 0;
    w.vlen = static_cast<u64>(prefix - w.ws);
    w.seeded = ext > 0;
    if (HAS_POOL) {
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

// Loads and checks row r (r < smem_rows: inside every column).
template <bool HAS_POOL>
__device__ __forceinline__ Row load_row(const PlanArgs& a, i64 r) {
    return make_row<HAS_POOL>(a, load_cols(a, r), HAS_POOL ? valid_len(a, r) : 0);
}

// Entry chunking: the T entries in `blocks` chunks of whole THREADS-entry rows of threads;
// [c0, c1) for this block (empty past the entry blocks).
struct Chunk {
    i64 c0, c1;
    i64 len;  // the chunk length of every block (the last one's range may be shorter)
};
template <int THREADS>
__device__ __forceinline__ Chunk block_chunk(i64 total, i64 blocks) {
    // 32-bit division when it fits (a 64-bit one is a long subroutine).
    const i64 per_block = total < (1ll << 31)
                              ? static_cast<i64>((static_cast<u32>(total) + static_cast<u32>(blocks) - 1) /
                                                 static_cast<u32>(blocks))
                              : (total + blocks - 1) / blocks;
    const i64 chunk = (per_block + THREADS - 1) / THREADS * THREADS;
    if (static_cast<i64>(blockIdx.x) >= blocks) return {0, 0, chunk};
    const i64 c0 = static_cast<i64>(blockIdx.x) * chunk;
    const i64 c1 = c0 + chunk < total ? c0 + chunk : total;
    return {c0 < c1 ? c0 : c1, c1, chunk};
}

// The largest r in [0, bs) with voff(r) <= f (voff(bs) > f): the row holding entry f.
__device__ __forceinline__ i64 row_of(const Smem& sm, i64 bs, i64 f) {
    i64 lo = 0, hi = bs;
    while (hi - lo > 1) {
        const i64 mid = (lo + hi) >> 1;
        if (sm.voff[sm.at(mid)] <= f) lo = mid; else hi = mid;
    }
    return lo;
}

// A thread's current row, its facts in registers; it only moves forward.
struct Cursor {
    i64 r, start, end, rp;
    i32 ws, lim;
};

template <bool HAS_POOL>
__device__ __forceinline__ Cursor cursor_at(const Smem& sm, i64 bs, i64 f) {
    Cursor c;
    c.r = row_of(sm, bs, f);
    const i64 at = sm.at(c.r);
    c.start = sm.voff[at];
    c.end = sm.voff[sm.at(c.r + 1)];
    c.rp = sm.rp[at];
    c.ws = sm.ws[at];
    c.lim = HAS_POOL ? sm.lim[at] : 0;
    return c;
}

// Moves the cursor to the row of entry f (f >= its start, f < T).
template <bool HAS_POOL>
__device__ __forceinline__ void cursor_seek(Cursor& c, const Smem& sm, i64 f) {
    if (f < c.end) return;
    do {
        ++c.r;
        c.start = c.end;
        c.end = sm.voff[sm.at(c.r + 1)];
    } while (f >= c.end);
    const i64 at = sm.at(c.r);
    c.rp = sm.rp[at];
    c.ws = sm.ws[at];
    if (HAS_POOL) c.lim = sm.lim[at];
}

// One round of a thread: entries f = base + k * THREADS + threadIdx.x, k < U.
template <int U>
struct Lanes {
    i32 x[U];    // table value at the entry's position
    i32 xp[U];   // table value at position - 1 (heads with position > 0)
    i64 tok[U];  // expected token (-1: none)
    i32 pos[U];
    bool ok[U];     // f < c1
    bool first[U];  // the row's first entry (its predecessor is the window's head read)
    bool head[U];   // first, or lane 0: the predecessor is not in the left lane
};

template <int THREADS, int U, bool HAS_POOL>
__device__ __forceinline__ void load_lanes(const PlanArgs& a, const Smem& sm, Cursor& c, i64 base,
                                           i64 c1, Lanes<U>& L) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < U; ++k) {
        const i64 f = base + static_cast<i64>(k) * THREADS + threadIdx.x;
        L.ok[k] = f < c1;
        L.x[k] = 0;
        L.xp[k] = 0;
        L.tok[k] = -1;
        L.pos[k] = 0;
        L.first[k] = false;
        L.head[k] = false;
        if (f < c1) {
            cursor_seek<HAS_POOL>(c, sm, f);
            const i64 idx = f - c.start;
            const i32 pos = static_cast<i32>(c.ws + idx);
            L.pos[k] = pos;
            L.x[k] = table_cell(a, c.rp, pos);
            L.first[k] = idx == 0;
            L.head[k] = idx == 0 || lane == 0;
            if (L.head[k] && pos > 0) L.xp[k] = table_cell(a, c.rp, pos - 1);
            if (bad_block(a, L.x[k])) record_status(a.status, ST_BLOCK_RANGE, c.r, pos, L.x[k], a.block);
            if (L.first[k] && pos > 0 && bad_block(a, L.xp[k]))
                record_status(a.status, ST_BLOCK_RANGE, c.r, pos - 1, L.xp[k], a.block);
            if (HAS_POOL && idx < c.lim) L.tok[k] = pool_token(a, c.rp * a.pool_width + pos + a.offset);
        }
    }
}

// The first read of a round past the LUT's end, as a key: 2f for the predecessor read of row
// head f, 2f + 1 for f's own read (the CPU's order); INT64_MAX for none.
template <int THREADS, int U>
__device__ __forceinline__ i64 check_lanes(const PlanArgs& a, i64 base, const Lanes<U>& L) {
    i64 best = INT64_MAX;
#pragma unroll
    for (int k = U - 1; k >= 0; --k) {
        const i64 f = base + static_cast<i64>(k) * THREADS + threadIdx.x;
        if (L.ok[k]) {
            if (L.first[k] && L.pos[k] > 0 && cell_slot(a, L.xp[k], L.pos[k] - 1) >= a.lut_len) {
                best = 2 * f;
            } else if (cell_slot(a, L.x[k], L.pos[k]) >= a.lut_len) {
                best = 2 * f + 1;
            }
        }
    }
    return best;
}

template <int MODE, int U>
__device__ __forceinline__ void translate_lanes(const PlanArgs& a, const Lanes<U>& L, i64 (&slot)[U],
                                                i64 (&pown)[U]) {
#pragma unroll
    for (int k = 0; k < U; ++k) {
        slot[k] = L.ok[k] ? translate<MODE>(a, cell_slot(a, L.x[k], L.pos[k])) : 0;
        pown[k] = (L.ok[k] && L.head[k] && L.pos[k] > 0) ? translate<MODE>(a, cell_slot(a, L.xp[k], L.pos[k] - 1))
                                                         : -1;
    }
}

template <int THREADS, int U>
__device__ __forceinline__ void emit_lanes(const PlanArgs& a, i64 base, const Lanes<U>& L,
                                           const i64 (&slot)[U], const i64 (&pown)[U]) {
#pragma unroll
    for (int k = 0; k < U; ++k) {
        const i64 f = base + static_cast<i64>(k) * THREADS + threadIdx.x;
        const i64 left = __shfl_up_sync(0xffffffffu, slot[k], 1);
        if (L.ok[k]) {
            a.v_slots[f] = slot[k];
            a.v_tokens[f] = L.tok[k];
            a.v_positions[f] = L.pos[k];
            a.v_prevs[f] = L.head[k] ? pown[k] : left;
        }
    }
}

// The entries [c0, c1) of a block, U a thread per round, software-pipelined: while round i is
// stored, round i + 1's LUT gathers and round i + 2's table loads are in flight.
template <int THREADS, int U, bool HAS_POOL, int MODE>
__device__ __forceinline__ void emit_chunk(const PlanArgs& a, const Smem& sm, i64 bs, i64 c0, i64 c1,
                                           i64 first_f) {
    constexpr i64 ROUND = static_cast<i64>(U) * THREADS;
    Cursor c = cursor_at<HAS_POOL>(sm, bs, first_f);
    Lanes<U> A, B;
    i64 sA[U], pA[U];
    load_lanes<THREADS, U, HAS_POOL>(a, sm, c, c0, c1, A);
    translate_lanes<MODE, U>(a, A, sA, pA);
    if (c0 + ROUND < c1) load_lanes<THREADS, U, HAS_POOL>(a, sm, c, c0 + ROUND, c1, B);
    for (i64 base = c0; base < c1; base += ROUND) {
        i64 sB[U], pB[U];
        if (base + ROUND < c1) translate_lanes<MODE, U>(a, B, sB, pB);
        Lanes<U> C;
        if (base + 2 * ROUND < c1) load_lanes<THREADS, U, HAS_POOL>(a, sm, c, base + 2 * ROUND, c1, C);
        emit_lanes<THREADS, U>(a, base, A, sA, pA);
        A = B;
        B = C;
#pragma unroll
        for (int k = 0; k < U; ++k) {
            sA[k] = sB[k];
            pA[k] = pB[k];
        }
    }
}

// The entries of a block, U a thread per round, one round at a time and grid-strided: round
// i of block b covers the entries from (i * entry_blocks + b) * U * THREADS, so the blocks'
// stores advance through the outputs together (one stream a block would scatter them over
// entry_blocks regions). A round's table loads are in flight together, then its LUT gathers,
// then its stores; each thread finds its round's first row by a binary search. Fewer registers
// than `emit_chunk`, so more warps per multiprocessor keep loads in flight instead.
template <int THREADS, int U, bool HAS_POOL, int MODE, int HEADS>
__device__ __forceinline__ void emit_grid_stride(const PlanArgs& a, const Smem& sm, i64 bs,
                                                 i64 total, const HeadVerify& hv) {
    constexpr i64 ROUND = static_cast<i64>(U) * THREADS;
    if (static_cast<i64>(blockIdx.x) >= a.entry_blocks) return;
    const i64 stride = a.entry_blocks * ROUND;
#pragma unroll 1
    for (i64 base = static_cast<i64>(blockIdx.x) * ROUND; base < total; base += stride) {
        const i64 f0 = base + threadIdx.x < total ? base + threadIdx.x : total - 1;
        Cursor c = cursor_at<HAS_POOL>(sm, bs, f0);
        Lanes<U> L;
        i64 slot[U], pown[U];
        load_lanes<THREADS, U, HAS_POOL>(a, sm, c, base, total, L);
        translate_lanes<MODE, U>(a, L, slot, pown);
        emit_lanes<THREADS, U>(a, base, L, slot, pown);
        if (HEADS > 0) {
            // The head verify of the entries just planned, from the registers that hold them
            // (emit_lanes's predecessor: the row's own seed at a row's head, else the lane
            // before's slot).
#pragma unroll
            for (int k = 0; k < U; ++k) {
                const i64 f = base + static_cast<i64>(k) * THREADS + threadIdx.x;
                const i64 left = __shfl_up_sync(0xffffffffu, slot[k], 1);
                const i64 prev = L.head[k] ? pown[k] : left;
                head_check<HEADS>(hv, L.ok[k], f, slot[k], prev, L.tok[k], L.pos[k]);
            }
        }
    }
}

__device__ __forceinline__ i64 warp_min64(i64 v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = min(v, static_cast<i64>(__shfl_xor_sync(0xffffffffu, v, d)));
    return v;
}

// Grid-wide barrier of a LUT_CHECKED launch, combining each block's first out-of-LUT read
// (`mine`, per thread); returns the launch's first to every thread. Every block of the launch
// is resident (cooperative launch) and calls this exactly once, or none does.
//
// The scratch words keep their invariant across launches (arrivals 0; the key of the next
// generation INT64_MAX): the last block to arrive resets the arrivals and the next
// generation's key, then bumps the generation, which releases the others.
template <int THREADS>
__device__ __forceinline__ i64 grid_lut_verdict(const PlanArgs& a, i64 mine) {
    constexpr int WARPS = THREADS / 32;
    __shared__ i64 s_min[WARPS];
    __shared__ i64 s_key;
    mine = warp_min64(mine);
    if ((threadIdx.x & 31) == 0) s_min[threadIdx.x >> 5] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        i64 m = INT64_MAX;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) m = min(m, s_min[w]);
        volatile i64* gen_word = a.scratch + 1;
        const u64 gen = static_cast<u64>(*gen_word);
        i64* key = a.scratch + 2 + (gen & 1);
        if (m != INT64_MAX) atomicMin(reinterpret_cast<long long*>(key), m);
        __threadfence();
        const u64 arrived = atomicAdd(reinterpret_cast<unsigned long long*>(a.scratch), 1ull);
        if (arrived == gridDim.x - 1) {
            *reinterpret_cast<volatile i64*>(a.scratch) = 0;
            *reinterpret_cast<volatile i64*>(a.scratch + 2 + ((gen + 1) & 1)) = INT64_MAX;
            __threadfence();
            atomicAdd(reinterpret_cast<unsigned long long*>(a.scratch + 1), 1ull);
        } else {
            while (static_cast<u64>(*gen_word) == gen) {
            }
        }
        __threadfence();
        s_key = *reinterpret_cast<volatile i64*>(key);
    }
    __syncthreads();
    return s_key;
}

// Step 1 for rows [tid * rpt + g, tid * rpt + g + G) of this thread (those < rpt, < R):
// loads their columns (all in flight at once), the last block also their seeds
// (table[rp][prefix - 1], only for rows that will pass validation), then checks them into shared
// memory and adds rows < bs to the running sums and the first error.
template <int G, bool HAS_POOL>
__device__ __forceinline__ void check_rows(const PlanArgs& a, const Smem& sm, int tid, int rpt, int g,
                                           i64 R, i64 bs, bool meta_block, u64& vsum, u64& wsum,
                                           u32& err) {
    Cols cols[G];
    i64 col_vl[G];
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const i64 r = static_cast<i64>(tid) * rpt + g + k;
        const bool in = g + k < rpt && r < R;
        cols[k] = in ? load_cols(a, r) : Cols{};
        col_vl[k] = (HAS_POOL && in) ? valid_len(a, r) : 0;
    }
    i32 seed_x[G];
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const i64 rp = cols[k].rp, prefix = cols[k].prefix;
        const bool seeded = meta_block && cols[k].active && !cols[k].qbad && cols[k].ext > 0 &&
                            prefix > 0 && prefix <= a.table_tokens && rp >= 0 && rp < a.table_rows;
        seed_x[k] = seeded ? table_cell(a, rp, prefix - 1) : 0;
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const i64 r = static_cast<i64>(tid) * rpt + g + k;
        if (g + k < rpt && r < R) {
            const Row w = make_row<HAS_POOL>(a, cols[k], col_vl[k]);
            const i64 at = sm.at(r);
            sm.voff[at] = static_cast<i64>(w.vlen);
            sm.woff[at] = static_cast<i64>(w.wlen);
            sm.rp[at] = static_cast<i32>(w.rp);
            sm.ws[at] = static_cast<i32>(w.ws);
            if (HAS_POOL) sm.lim[at] = static_cast<i32>(w.lim);
            if (meta_block) sm.seedx[at] = seed_x[k];
            if (r < bs) {
                if (w.code != 0 && err == NO_ERR) {
                    err = static_cast<u32>(r * 8 + (w.code == ST_REQ_POOL_INDEX      ? 1
                                                     : w.code == ST_PREFIX_BEYOND_ROW ? 2
                                                     : w.code == ST_QUERY_STARTS      ? 5
                                                                                      : 3));
                }
                vsum += w.vlen;
                wsum = sat_add(wsum, w.wlen);
            }
        }
    }
}

// RPT: rows a thread scans at most (THREADS * RPT >= smem_rows, host check); PIPE: a block's
// chunk of entries software-pipelined (`emit_chunk`), else grid-strided rounds one at a time
// (`emit_grid_stride`).
template <int THREADS, int U, bool HAS_POOL, int MODE, int RPT, bool PIPE, int HEADS = 0>
__device__ __forceinline__ void plan_body(const PlanArgs& a, HeadVerify hv = {nullptr, nullptr}) {
    int rpt;
    const Smem sm = smem_layout<THREADS>(a, rpt);
    const int tid = threadIdx.x;
    const bool meta_block = blockIdx.x == gridDim.x - 1;
    const i64 R = a.smem_rows;

    // Step 1: rows [tid * rpt, tid * rpt + rpt). bs is read while the first rows load; rows
    // past bs (up to the capacity: always inside the columns) are loaded and ignored.
    const i64 bs = *a.bs;
    const i64 lens_len = HAS_POOL ? *a.valid_lens_len : 0;
    u64 vsum = 0, wsum = 0;
    u32 err = NO_ERR;
    // The thread's rows go in groups of G (one group of one row when rpt is 1: no predicated
    // copies): every column of a group's rows is loaded first (all in flight at once), then the
    // group's seeds, then the rows are checked.
    constexpr int G = RPT < 4 ? RPT : 4;
    if (rpt == 1) {
        check_rows<1, HAS_POOL>(a, sm, tid, 1, 0, R, bs, meta_block, vsum, wsum, err);
    } else {
#pragma unroll 1
        for (int g = 0; g < rpt; g += G) {
            check_rows<G, HAS_POOL>(a, sm, tid, rpt, g, R, bs, meta_block, vsum, wsum, err);
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
        } else if (HAS_POOL && lens_len != bs) {
            code = ST_VALID_LENS_LENGTH;
            f1 = bs;
            f2 = lens_len;
        }
        if (code != 0) {
            if (blockIdx.x == 0 && tid == 0) record_status(a.status, code, f1, f2);
            return;
        }
    }

    u64 vexcl, wexcl, vtotal, wtotal;
    u32 first_err;
    block_scan<THREADS>(vsum, wsum, err, vexcl, wexcl, vtotal, wtotal, first_err);

    // The first row whose running write total overflows i64 (CPU: WriteTokenCountOverflow);
    // rare, so it takes its own pass.
    if (wtotal >= SAT) {
        __shared__ u32 s_first;
        if (tid == 0) s_first = first_err;
        __syncthreads();
        u64 run = wexcl;
        for (int k = 0; k < rpt; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (r < bs) {
                const u64 next = sat_add(run, static_cast<u64>(sm.woff[sm.at(r)]));
                if (next >= SAT && run < SAT) atomicMin(&s_first, static_cast<u32>(r * 8 + 4));
                run = next;
            }
        }
        __syncthreads();
        first_err = s_first;
    }
    if (first_err != NO_ERR) {
        const i64 r = first_err >> 3;
        if (blockIdx.x == 0 && r / rpt == tid) {
            if ((first_err & 7) == 4) {
                record_status(a.status, ST_WRITE_TOKEN_OVERFLOW, r);
            } else {
                const Row w = load_row<HAS_POOL>(a, r);
                record_status(a.status, w.code, r, w.f1, w.f2, w.f3, w.f4);
            }
        }
        return;  // nothing written
    }

    // Verify lengths -> exclusive verify offsets (each thread its own rows).
    {
        u64 run = vexcl;
        for (int k = 0; k < rpt; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (r < bs) {
                const i64 at = sm.at(r);
                const i64 len = sm.voff[at];
                sm.voff[at] = static_cast<i64>(run);
                run += static_cast<u64>(len);
            }
        }
        if (tid == 0) sm.voff[sm.at(bs)] = static_cast<i64>(vtotal);
    }
    __syncthreads();
    const i64 total = static_cast<i64>(vtotal);
    const bool enable = total <= a.verify_capacity;
    const Chunk ch = block_chunk<THREADS>(total, a.entry_blocks);
    const bool has_chunk = ch.c0 < ch.c1;
    const i64 first_f = ch.c0 + tid < ch.c1 ? ch.c0 + tid : ch.c1 - 1;

    // Step 3 (checked LUT): look for reads past the LUT, agree on the first across the grid.
    bool cached = false;  // one round whose loads and gathers are kept across the barrier
    Lanes<U> L0;
    i64 slot0[U], pown0[U];
    if (MODE == LUT_CHECKED && total > 0) {
        i64 best = INT64_MAX;
        // Cached only when every block's chunk is one round (uniform across the grid: the
        // entries are then emitted by chunk; otherwise grid-strided in the lean kernels).
        if (ch.len <= static_cast<i64>(U) * THREADS) {
            cached = true;
            if (has_chunk) {
                Cursor c = cursor_at<HAS_POOL>(sm, bs, first_f);
                load_lanes<THREADS, U, HAS_POOL>(a, sm, c, ch.c0, ch.c1, L0);
                best = check_lanes<THREADS, U>(a, ch.c0, L0);
                translate_lanes<LUT_CHECKED, U>(a, L0, slot0, pown0);
            }
        } else {
            // Several rounds: check each (the next one's loads in flight meanwhile), keep nothing.
            constexpr i64 ROUND = static_cast<i64>(U) * THREADS;
            Cursor c = cursor_at<HAS_POOL>(sm, bs, first_f);
            Lanes<U> A;
            load_lanes<THREADS, U, HAS_POOL>(a, sm, c, ch.c0, ch.c1, A);
            for (i64 base = ch.c0; base < ch.c1; base += ROUND) {
                Lanes<U> B;
                if (base + ROUND < ch.c1) load_lanes<THREADS, U, HAS_POOL>(a, sm, c, base + ROUND, ch.c1, B);
                best = min(best, check_lanes<THREADS, U>(a, base, A));
                A = B;
            }
        }
        const i64 key = grid_lut_verdict<THREADS>(a, best);
        if (key != INT64_MAX) {
            if (blockIdx.x == 0 && tid == 0) {
                const i64 f = key >> 1;
                const i64 r = row_of(sm, bs, f);
                const i64 at = sm.at(r);
                const i64 pos = sm.ws[at] + (f - sm.voff[at]) - ((key & 1) ? 0 : 1);
                record_status(a.status, ST_LUT_INDEX,
                              cell_slot(a, table_cell(a, static_cast<i64>(sm.rp[at]), pos), pos), a.lut_len);
            }
            return;  // nothing written
        }
    }

    if (blockIdx.x == 0 && tid == 0) {
        *a.v_num_valid = static_cast<i32>(enable ? total : a.verify_capacity);
        *a.v_enable = enable ? 1 : 0;
        *a.v_requested = total;
        *a.w_num_valid_reqs = static_cast<i32>(bs);
        // The head verify's counts, as its own launch would make them (count_launch).
#pragma unroll
        for (int h = 0; h < HEADS; ++h) {
            const VerifyArgs& v = h == 0 ? *hv.k : *hv.v;
            atomic_add_i64(v.kernel_counter, 1);
            if (enable) atomic_add_i64(v.slot_counter, total);
        }
    }

    // Step 4 (last block): write offsets, seeds, tail zeros.
    if (meta_block) {
        u64 run = wexcl;
        for (int k = 0; k < rpt; ++k) {
            const i64 r = static_cast<i64>(tid) * rpt + k;
            if (r < bs) {
                const i64 at = sm.at(r);
                const i64 wl = sm.woff[at];
                const i64 vlen = sm.voff[sm.at(r + 1)] - sm.voff[at];
                const bool seeded = wl > 0 && vlen > 0;
                a.w_offsets[r] = static_cast<i64>(run);
                if (seeded && bad_block(a, sm.seedx[at])) {
                    record_status(a.status, ST_BLOCK_RANGE, r, sm.ws[at] + vlen - 1, sm.seedx[at], a.block);
                }
                a.w_seeds[r] = seeded ? translate<MODE>(a, cell_slot(a, sm.seedx[at], sm.ws[at] + vlen - 1)) : -1;
                run += static_cast<u64>(wl);
            }
        }
        for (i64 j = bs + tid; j <= a.write_capacity; j += THREADS) {
            a.w_offsets[j] = j == bs ? static_cast<i64>(wtotal) : 0;
        }
    }

    if (!enable) return;

    // Step 5: verify entries, U in flight per thread.
    if (MODE == LUT_CHECKED && cached) {
        if (has_chunk) emit_lanes<THREADS, U>(a, ch.c0, L0, slot0, pown0);
        return;
    }
    if (PIPE) {
        if (has_chunk) emit_chunk<THREADS, U, HAS_POOL, MODE>(a, sm, bs, ch.c0, ch.c1, first_f);
    } else {
        emit_grid_stride<THREADS, U, HAS_POOL, MODE, HEADS>(a, sm, bs, total, hv);
    }
}

}  // namespace kvc

using kvc::PlanArgs;
KVC_CHECK_LAYOUT_PlanArgs(PlanArgs);

// Entry names: kv_canary_plan_{small,large,lean,leanl}{,_pool}{,_lut_clamp,_lut}.
//  * small: 128 threads, rounds of 4 entries a thread, software-pipelined, at most 1024 rows
//    (several blocks a multiprocessor; for decode-sized plans);
//  * large: 512 threads, the same, up to 4096 rows (one block a multiprocessor; 144 KB of
//    shared memory at 4096 rows);
//  * lean: 256 threads, rounds of 4 entries a thread one at a time (at most 64 registers, so
//    up to four blocks a multiprocessor), at most 1024 rows; leanl: the same with 512 threads,
//    up to 4096 rows (rows checked four at a time).
//  * _lut: the LUT checked in the same launch (cooperative launch); _lut_clamp: SGLang's GPU
//    semantics (an index past the end is clamped and recorded, the outputs written).
#define KVC_PLAN_ENTRY(NAME, THREADS, MINB, U, RPT, PIPE, POOL, MODE)                      \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB) NAME(PlanArgs a) {           \
        kvc::grid_prologue();                                                                \
        kvc::plan_body<THREADS, U, POOL, MODE, RPT, PIPE>(a);                                \
    }
// The plan and the head verify of the K half (`_pair`: of the K and the V half) in one launch:
// the lean plan's rounds at one entry a thread (no LUT, no expected-token pool), each entry
// checked against the head buffers by the thread that planned it, no token check, no real-KV
// fold (src/cuda/ops/plan_verify.rs). The plan columns are stored as by the plain plan; the
// head verify's rows, write index, status and counters are those its own launch makes.
struct PlanVerifyHeadArgs {
    PlanArgs plan;
    kvc::VerifyArgs k;
};
KVC_CHECK_LAYOUT_PlanVerifyHeadArgs(PlanVerifyHeadArgs);
struct PlanVerifyHeadPairArgs {
    PlanArgs plan;
    kvc::VerifyArgs k;
    kvc::VerifyArgs v;
};
KVC_CHECK_LAYOUT_PlanVerifyHeadPairArgs(PlanVerifyHeadPairArgs);
extern "C" __global__ void __launch_bounds__(kvc::PLAN_VERIFY_THREADS, kvc::PLAN_VERIFY_BLOCKS_PER_SM)
    kv_canary_plan_verify_head(PlanVerifyHeadArgs a) {
    kvc::grid_prologue();
    kvc::plan_body<kvc::PLAN_VERIFY_THREADS, kvc::PLAN_VERIFY_UNROLL, false, kvc::NO_LUT, 4, false, 1>(
        a.plan, kvc::HeadVerify{&a.k, nullptr});
}
extern "C" __global__ void __launch_bounds__(kvc::PLAN_VERIFY_THREADS, kvc::PLAN_VERIFY_BLOCKS_PER_SM)
    kv_canary_plan_verify_head_pair(PlanVerifyHeadPairArgs a) {
    kvc::grid_prologue();
    kvc::plan_body<kvc::PLAN_VERIFY_THREADS, kvc::PLAN_VERIFY_UNROLL, false, kvc::NO_LUT, 4, false, 2>(
        a.plan, kvc::HeadVerify{&a.k, &a.v});
}

#define KVC_PLAN_FAMILY(NAME, THREADS, MINB, U, RPT, PIPE)                                   \
    KVC_PLAN_ENTRY(NAME, THREADS, MINB, U, RPT, PIPE, false, kvc::NO_LUT)                    \
    KVC_PLAN_ENTRY(NAME##_pool, THREADS, MINB, U, RPT, PIPE, true, kvc::NO_LUT)              \
    KVC_PLAN_ENTRY(NAME##_lut_clamp, THREADS, MINB, U, RPT, PIPE, false, kvc::LUT_CLAMP)     \
    KVC_PLAN_ENTRY(NAME##_pool_lut_clamp, THREADS, MINB, U, RPT, PIPE, true, kvc::LUT_CLAMP) \
    KVC_PLAN_ENTRY(NAME##_lut, THREADS, MINB, U, RPT, PIPE, false, kvc::LUT_CHECKED)         \
    KVC_PLAN_ENTRY(NAME##_pool_lut, THREADS, MINB, U, RPT, PIPE, true, kvc::LUT_CHECKED)

KVC_PLAN_FAMILY(kv_canary_plan_small, 128, 4, 4, 8, true)
KVC_PLAN_FAMILY(kv_canary_plan_large, 512, 1, 4, 8, true)
KVC_PLAN_FAMILY(kv_canary_plan_lean, 256, 4, 4, 4, false)
KVC_PLAN_FAMILY(kv_canary_plan_leanl, 512, 2, 4, 8, false)
