// The verify op (spec §5) over a full grid (every SM, several blocks each), grid-stride over the
// active entries. Per entry the self and predecessor slots are gathered together (two
// independent 32-byte loads in flight); with real-KV sources in ALL mode up to four lanes share
// an entry, one per source, so the per-slot folds run side by side instead of in series.
//
// ALL mode with strips of at most 128 bytes (verify_staged): each warp takes batches of eight
// entries. The batch's strips (8 entries x 4 sources x up to 128 bytes) and canary slots are
// copied into shared memory with cp.async, one entry's four strips per warp instruction (whole
// 128-byte lines), while the warp folds the previous batch out of shared memory, one strip a
// lane; the entry indices are loaded two batches ahead. So the random loads of one batch are in
// flight during the folds of another, and no lane waits on its own strip.
//
// Gathered sources (a paged engine's K or V cache, common.cuh's RealKv) fold through
// real_kv_piece in the PARTIAL and grouped ALL kernels; the host picks the staged and streamed
// kernels, which copy whole strips, for strip sources only.
#include <stddef.h>

#include "common.cuh"
#include "verify_checks.cuh"

namespace kvc {

// Real-KV handling of a variant.
enum KvKind { KV_NONE = 0, KV_PARTIAL = 1 };

// One thread per entry: no real-KV fold (NONE mode or no sources), or PARTIAL (16 bytes a source).
//
// A warp takes 32 consecutive entries. An entry's predecessor is most often the entry before's
// slot (consecutive positions of one request): that record is the one the lane before loads as
// its own, so such a lane takes its chain hash from that lane (one shuffle) instead of a second
// gather, which halves the random canary loads of a long prefix. Whether it can is known from
// the indices alone (before any record is loaded), so every load a lane does still goes out at
// once. The values are the same either way (a verify writes no canary byte).
//
// Per round a lane waits on one random access: its plan columns (slot, predecessor, expected
// position and token) are loaded a round ahead, and its canary records and real-KV pieces go
// out together, before any of them is hashed. With early_columns (the step API's tail verify:
// the plan is at least one of this crate's launches back, see VerifyArgs::early_columns) the
// first round's columns are loaded before the wait for the launch ahead, so after it a lane's
// first loads are its records and pieces.
struct PlanColumns {
    i64 slot = 0, prev = 0, position = 0, token = -1;
};

template <bool CHECK_TOKEN>
__device__ __forceinline__ PlanColumns load_columns(const VerifyArgs& a, i64 e, i64 n) {
    PlanColumns c;
    if (e < n) {
        c.slot = __ldg(a.slots + e);
        c.prev = __ldg(a.prevs + e);
        c.position = __ldg(a.positions + e);
        if (CHECK_TOKEN) c.token = __ldg(a.tokens + e);
    }
    return c;
}

template <int KV, bool CHECK_TOKEN>
__device__ __forceinline__ void verify_single(const VerifyArgs& a) {
    // Columns a round ahead only with a fold: without one, the extra registers spill at the
    // 32 that four blocks a multiprocessor leave (measured slower).
    constexpr bool AHEAD = KV != KV_NONE;
    const bool early = AHEAD && a.early_columns != 0;
    if (!early) grid_prologue();
    // Plan outputs only until the wait below (early): no canary byte, no real-KV byte, no
    // counter, no status word.
    bool enabled;
    const i64 planned = planned_entries(a, enabled);
    const i64 n = enabled ? planned : 0;
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    const int lane = threadIdx.x & 31;
    const i64 step = static_cast<i64>(gridDim.x) * blockDim.x;
    // Warp-uniform bounds: every lane of a warp runs every round (the shuffles need them all).
    const i64 first = static_cast<i64>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31u);
    PlanColumns next;
    if (AHEAD) next = load_columns<CHECK_TOKEN>(a, first + lane, n);
    if (early) grid_prologue();
    count_launch(a, enabled, planned);
    for (i64 base = first; base < n; base += step) {
        const i64 e = base + lane;
        const PlanColumns c = AHEAD ? next : load_columns<CHECK_TOKEN>(a, e, n);
        if (AHEAD && base + step < n) next = load_columns<CHECK_TOKEN>(a, e + step, n);
        const i64 s = c.slot, prev = c.prev;
        const bool ok = e < n && entry_in_range<KV != KV_NONE>(a, e, s, prev);
        const i64 s_before = __shfl_up_sync(0xffffffffu, s, 1);
        const bool ok_before = __shfl_up_sync(0xffffffffu, ok, 1);
        const bool from_before = lane > 0 && ok_before && prev > 0 && prev == s_before;
        Slot st = {}, pv = {};
        ulonglong2 piece[MAX_REAL_KV_SOURCES] = {};
        if (ok) {
            st = load_slot(a.buf, a.stride, s);
            if (prev > 0 && !from_before) pv = load_slot(a.buf, a.stride, prev);
            if (KV != KV_NONE) {
#pragma unroll
                for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
                    if (k < a.kv.num_sources) {
                        // Streaming (evict-first in L1 and L2): a verify reads each piece
                        // once, and the canary records and plan columns it would evict are
                        // read again (the pair's other half, the next step).
                        piece[k] = real_kv_piece<true>(a.kv, k, real_kv_strip(a.kv, k, s), 0);
                    }
                }
            }
        }
        const u64 hash_before = __shfl_up_sync(0xffffffffu, ok ? slot_hash(st) : 0ull, 1);
        if (!ok) continue;
        const u64 pv_hash = from_before ? hash_before : prev > 0 ? slot_hash(pv) : 0;
        u64 fold = 0;
        if (KV != KV_NONE) {
            // real_kv_hash<true> of the pieces loaded above (spec §2.11, PARTIAL).
#pragma unroll
            for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
                if (k < a.kv.num_sources) fold = splitmix64(fold ^ fold16(0, piece[k]));
            }
        }
        check_hashed<CHECK_TOKEN>(a, ring, e, s, prev, st, pv_hash, fold, c.token, c.position);
    }
}

// ALL mode: G lanes per entry (G = 1, 2 or 4: the number of sources rounded up to a power of
// two), lane q of a group folds source q, the group's first lane checks the slot. So one source
// (a K or V pool, a latent pool) keeps every lane folding its own entry instead of one lane in
// four, and four sources still fold side by side.
template <int KV, bool CHECK_TOKEN>
__device__ __forceinline__ void verify_grouped(const VerifyArgs& a) {
    bool enabled;
    const i64 n = active_entries(a, enabled);
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    const int lane = threadIdx.x & 31;
    // log2(G), uniform over the grid.
    const int lg = a.kv.num_sources <= 1 ? 0 : a.kv.num_sources == 2 ? 1 : 2;
    const int q = lane & ((1 << lg) - 1);
    const int leader = lane & ~((1 << lg) - 1);
    const i64 groups = (static_cast<i64>(gridDim.x) * blockDim.x) >> lg;
    // Warps interleaved over the blocks (warp w of block b is the grid's warp w * grid + b), so a
    // small plan spreads over every multiprocessor instead of filling the first blocks.
    const i64 grid_warp =
        static_cast<i64>(threadIdx.x >> 5) * gridDim.x + static_cast<i64>(blockIdx.x);
    const i64 warp_first = (grid_warp * 32) >> lg;
    for (i64 base = warp_first; base < n; base += groups) {
        const i64 e = base + (lane >> lg);
        bool ok = false;
        i64 s = 0, prev = 0;
        if (e < n) {
            s = __ldg(a.slots + e);
            prev = __ldg(a.prevs + e);
            // Every lane of the group decides alike; only one record survives (atomicCAS).
            ok = entry_in_range<true>(a, e, s, prev);
        }
        Slot st = {}, pv = {};
        if (ok && q == 0) {
            st = load_slot(a.buf, a.stride, s);
            if (prev > 0) pv = load_slot(a.buf, a.stride, prev);
        }
        u64 h = (ok && q < a.kv.num_sources) ? source_hash<false, 8>(a.kv, q, s) : 0;
        u64 acc = 0;
#pragma unroll
        for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
            // Lanes past the group (k >= G) are read and ignored: k < num_sources <= G.
            const u64 hk = __shfl_sync(0xffffffffu, h, (leader + k) & 31);
            if (k < a.kv.num_sources) acc = splitmix64(acc ^ hk);
        }
        if (ok && q == 0) check_entry<CHECK_TOKEN>(a, ring, e, s, prev, st, pv, acc);
    }
}

// ---------------------------------------------------------------------------------------------
// Staged ALL mode.
// ---------------------------------------------------------------------------------------------
constexpr int STAGED_WARPS = STAGED_THREADS / 32;
constexpr int STAGE_ENTRIES = VERIFY_STAGE_ENTRIES;  // src/cuda/abi/shared.rs
constexpr int STAGES = 2;

// One batch in shared memory: strip t = entry * 4 + source, its 16-byte piece p stored at
// [t][p ^ (t & 7)] (so eight lanes reading piece p of eight strips hit eight bank groups);
// slot[i] = entry i's own slot (pieces 0, 1) and predecessor slot (pieces 2, 3).
struct Stage {
    ulonglong2 strip[STAGE_ENTRIES * MAX_REAL_KV_SOURCES][8];
    ulonglong2 slot[STAGE_ENTRIES][4];
};
static_assert(sizeof(Stage) == RUST_VERIFY_STAGE_BYTES, "Stage layout (src/cuda/abi/shared.rs)");

// Copies 16 bytes from global `src` to shared memory at byte `offset` past `base` (generic
// address of the stage; `base_s` its shared-window address).
__device__ __forceinline__ void copy16_async(unsigned char* base, unsigned base_s, unsigned offset,
                                             const void* src) {
#if __CUDA_ARCH__ >= 800
    (void)base;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(base_s + offset), "l"(src) : "memory");
#else
    (void)base_s;
    *reinterpret_cast<ulonglong2*>(base + offset) = __ldg(reinterpret_cast<const ulonglong2*>(src));
#endif
}

__device__ __forceinline__ void copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most one committed group of this thread is still in flight.
__device__ __forceinline__ void copy_wait_all_but_one() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
}

// Lane l's index value of batch b: array l / 8 (slots, prevs, positions, tokens) of entry
// b * 8 + l % 8; 0 past the entries (-1 for a token without the token check).
template <bool CHECK_TOKEN>
__device__ __forceinline__ i64 batch_index(const VerifyArgs& a, i64 b, i64 n) {
    const int lane = threadIdx.x & 31;
    const int which = lane >> 3;
    const i64 e = b * STAGE_ENTRIES + (lane & 7);
    if (e >= n) return 0;
    if (which == 3) return CHECK_TOKEN ? __ldg(a.tokens + e) : -1;
    const i64* arr = which == 0 ? a.slots : which == 1 ? a.prevs : a.positions;
    return __ldg(arr + e);
}

// A lane's sources: k = lane % 4 (whose strip address it computes and later folds) and
// q = lane / 8 (whose pieces it copies).
struct LaneSources {
    const unsigned char* k_base;
    i64 k_stride, k_page, k_bpt;
    bool k_valid;
    int k_pieces;  // 16-byte pieces source k folds
    int q_pieces;  // 16-byte pieces source q copies
};

// Checks batch b's entries (lanes 0-7 each one: range checks, recorded when bad), then queues
// the copies of the servable ones into `st`. Returns the mask of servable entries.
__device__ __forceinline__ u32 batch_issue(const VerifyArgs& a, Stage& st, i64 b, i64 n, i64 v,
                                           const LaneSources& ls) {
    const int lane = threadIdx.x & 31;
    const i64 prev_own = __shfl_sync(0xffffffffu, v, (lane & 7) + 8);
    const i64 e_own = b * STAGE_ENTRIES + lane;
    const bool ok = lane < STAGE_ENTRIES && e_own < n && entry_in_range<true>(a, e_own, v, prev_own);
    const u32 mask = __ballot_sync(0xffffffffu, ok) & 0xFFu;
    // Lane l computes the address of entry l / 4's strip of source l % 4 (one division at most).
    const int i = lane >> 2;
    const i64 si = __shfl_sync(0xffffffffu, v, i);
    const i64 pi = __shfl_sync(0xffffffffu, v, i + 8);
    const bool ok_i = ((mask >> i) & 1u) != 0;
    u64 mine = 0;
    if (ok_i && ls.k_valid) {
        const i64 row = ls.k_page == 1 ? si : si / ls.k_page;
        mine = reinterpret_cast<u64>(ls.k_base + row * ls.k_stride + (si - row * ls.k_page) * ls.k_bpt);
    }
    // Strips: instruction m moves entry m's four strips; lane l piece l % 8 of source l / 8.
    unsigned char* base = reinterpret_cast<unsigned char*>(&st);
    const unsigned base_s = static_cast<unsigned>(__cvta_generic_to_shared(base));
    const int q = lane >> 3, p = lane & 7;
#pragma unroll
    for (int m = 0; m < STAGE_ENTRIES; ++m) {
        const u64 src = __shfl_sync(0xffffffffu, mine, m * MAX_REAL_KV_SOURCES + q);
        if (((mask >> m) & 1u) && p < ls.q_pieces) {
            const int t = m * MAX_REAL_KV_SOURCES + q;
            copy16_async(base, base_s, static_cast<unsigned>((t * 8 + (p ^ (t & 7))) * 16),
                         reinterpret_cast<const unsigned char*>(src) + p * 16);
        }
    }
    // Slots: lane l moves half (l & 1) of entry l / 4's own (l & 2 clear) or predecessor slot.
    const bool pred = (lane & 2) != 0;
    if (ok_i && (!pred || pi > 0)) {
        copy16_async(base, base_s, static_cast<unsigned>(offsetof(Stage, slot) + (i * 4 + (lane & 3)) * 16),
                     a.buf + (pred ? pi : si) * a.stride + (lane & 1) * 16);
    }
    copy_commit();
    return mask;
}

// Folds batch b out of `st` (lane l: entry l / 4, source l % 4) and checks each servable entry
// (its first lane).
template <bool CHECK_TOKEN>
__device__ __forceinline__ void batch_check(const VerifyArgs& a, const Ring& ring, const Stage& st,
                                            i64 b, i64 v, u32 mask, int fold_pieces) {
    const int lane = threadIdx.x & 31;
    const int i = lane >> 2, k = lane & 3;
    const bool ok = ((mask >> i) & 1u) != 0;
    u64 h = 0;
    if (ok && k < a.kv.num_sources) {
        for (int pc = 0; pc < fold_pieces; ++pc) h = fold16(h, st.strip[lane][pc ^ (lane & 7)]);
    }
    u64 acc = 0;
#pragma unroll
    for (int j = 0; j < MAX_REAL_KV_SOURCES; ++j) {
        const u64 hj = __shfl_sync(0xffffffffu, h, (lane & ~3) + j);
        if (j < a.kv.num_sources) acc = splitmix64(acc ^ hj);
    }
    const i64 s = __shfl_sync(0xffffffffu, v, i);
    const i64 prev = __shfl_sync(0xffffffffu, v, i + 8);
    const i64 ep = __shfl_sync(0xffffffffu, v, i + 16);
    const i64 et = __shfl_sync(0xffffffffu, v, i + 24);
    if (ok && k == 0) {
        const ulonglong2 a0 = st.slot[i][0], a1 = st.slot[i][1];
        const Slot self = {static_cast<i64>(a0.x), static_cast<i64>(a0.y), static_cast<i64>(a1.x),
                           static_cast<i64>(a1.y)};
        Slot pv = {};
        if (prev > 0) {
            const ulonglong2 b0 = st.slot[i][2], b1 = st.slot[i][3];
            pv = {static_cast<i64>(b0.x), static_cast<i64>(b0.y), static_cast<i64>(b1.x),
                  static_cast<i64>(b1.y)};
        }
        check_values<CHECK_TOKEN>(a, ring, b * STAGE_ENTRIES + i, s, prev, self, pv, acc, et, ep);
    }
}

// ALL mode, every source's read_bytes <= 128 and the slot stride a multiple of 16 (host
// checked): see the top of this file.
template <bool CHECK_TOKEN>
__device__ __forceinline__ void verify_staged(const VerifyArgs& a) {
    extern __shared__ __align__(16) unsigned char s_raw[];
    bool enabled;
    const i64 n = active_entries(a, enabled);
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    Stage* st = reinterpret_cast<Stage*>(s_raw) + warp * STAGES;
    // This lane's fold source (l % 4) and copy source (l / 8).
    LaneSources ls;
    {
        const int k = lane & 3, q = lane >> 3;
        ls.k_valid = k < a.kv.num_sources;
        ls.k_base = ls.k_valid ? a.kv.base[k] : nullptr;
        ls.k_stride = ls.k_valid ? a.kv.row_stride[k] : 0;
        ls.k_page = ls.k_valid ? a.kv.page_size[k] : 1;
        ls.k_bpt = ls.k_valid ? a.kv.bytes_per_token[k] : 0;
        ls.k_pieces = ls.k_valid ? static_cast<int>(a.kv.read_bytes[k] >> 4) : 0;
        ls.q_pieces = q < a.kv.num_sources ? static_cast<int>(a.kv.read_bytes[q] >> 4) : 0;
    }

    const i64 batches = (n + STAGE_ENTRIES - 1) / STAGE_ENTRIES;
    const i64 step = static_cast<i64>(gridDim.x) * STAGED_WARPS;
    i64 b = static_cast<i64>(blockIdx.x) * STAGED_WARPS + warp;
    if (b >= batches) return;
    i64 v_cur = batch_index<CHECK_TOKEN>(a, b, n);
    i64 v_next = batch_index<CHECK_TOKEN>(a, b + step, n);
    u32 mask_cur = batch_issue(a, st[0], b, n, v_cur, ls);
    for (int j = 0; b < batches; b += step, ++j) {
        const i64 bn = b + step;
        u32 mask_next = 0;
        if (bn < batches) {
            mask_next = batch_issue(a, st[(j + 1) & 1], bn, n, v_next, ls);
        } else {
            copy_commit();  // an empty group keeps one group per batch
        }
        const i64 v_next2 = bn + step < batches ? batch_index<CHECK_TOKEN>(a, bn + step, n) : 0;
        copy_wait_all_but_one();
        __syncwarp();
        batch_check<CHECK_TOKEN>(a, ring, st[j & 1], b, v_cur, mask_cur, ls.k_pieces);
        __syncwarp();  // stage j & 1 is refilled by the next iteration's copies
        v_cur = v_next;
        v_next = v_next2;
        mask_cur = mask_next;
    }
}

// ---------------------------------------------------------------------------------------------
// Streamed ALL mode: one source whose strips exceed 128 bytes (a K, V or latent pool row of
// 2 KB). Each warp takes batches of 32 entries, one a lane. A strip is folded in chunks of 128
// bytes: the chunk of all 32 entries is copied into shared memory with cp.async, whole
// 128-byte lines (eight lanes a line, four lines a warp instruction), while the lanes fold the
// previous chunk of their own entry out of shared memory. So every lane folds (the hash of a
// strip is serial) and the loads are whole lines, not a lane's 16 bytes of a line at a time.
// ---------------------------------------------------------------------------------------------
constexpr int STREAM_WARPS = STAGED_THREADS / 32;

// One chunk of a batch: entry i's 16-byte piece p at [i][p ^ (i & 7)] (eight lanes reading
// piece p of eight entries, or writing eight pieces of one, hit eight bank groups).
struct StreamChunk {
    ulonglong2 piece[32][8];
};
static_assert(sizeof(StreamChunk) * 2 * STREAM_WARPS == RUST_VERIFY_STREAMED_SHARED_BYTES,
              "streamed verify shared memory (src/cuda/abi/shared.rs)");

// Queues the copies of chunk c (pieces 8c .. 8c + 8, fewer in the last) of the batch's strips
// (lane l's strip at `strip`, 0 when not served) into `ck`, then commits them as one group.
__device__ __forceinline__ void stream_issue(StreamChunk& ck, u64 strip, int c, int pieces) {
    const int lane = threadIdx.x & 31;
    unsigned char* base = reinterpret_cast<unsigned char*>(&ck);
    const unsigned base_s = static_cast<unsigned>(__cvta_generic_to_shared(base));
    const int p = lane & 7;
    const int piece = c * 8 + p;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
        const int t = m * 4 + (lane >> 3);
        const u64 src = __shfl_sync(0xffffffffu, strip, t);
        if (src != 0 && piece < pieces) {
            copy16_async(base, base_s, static_cast<unsigned>((t * 8 + (p ^ (t & 7))) * 16),
                         reinterpret_cast<const unsigned char*>(src) + piece * 16);
        }
    }
    copy_commit();
}

template <bool CHECK_TOKEN>
__device__ __forceinline__ void verify_streamed(const VerifyArgs& a) {
    extern __shared__ __align__(16) unsigned char s_raw[];
    bool enabled;
    const i64 n = active_entries(a, enabled);
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    StreamChunk* ck = reinterpret_cast<StreamChunk*>(s_raw) + warp * 2;
    const int pieces = static_cast<int>(a.kv.read_bytes[0] >> 4);
    const int chunks = (pieces + 7) / 8;
    const i64 batches = (n + 31) / 32;
    const i64 step = static_cast<i64>(gridDim.x) * STREAM_WARPS;
    // Warps interleaved over the blocks, so a small plan spreads over every multiprocessor.
    for (i64 b = static_cast<i64>(warp) * gridDim.x + blockIdx.x; b < batches; b += step) {
        const i64 e = b * 32 + lane;
        bool ok = false;
        i64 s = 0, prev = 0;
        if (e < n) {
            s = __ldg(a.slots + e);
            prev = __ldg(a.prevs + e);
            ok = entry_in_range<true>(a, e, s, prev);
        }
        const u64 strip = ok ? reinterpret_cast<u64>(real_kv_strip(a.kv, 0, s)) : 0;
        Slot st = {}, pv = {};
        if (ok) {
            st = load_slot(a.buf, a.stride, s);
            if (prev > 0) pv = load_slot(a.buf, a.stride, prev);
        }
        __syncwarp();  // the previous batch's last chunk is folded before it is refilled
        stream_issue(ck[0], strip, 0, pieces);
        u64 h = 0;
        for (int c = 0; c < chunks; ++c) {
            if (c + 1 < chunks) {
                stream_issue(ck[(c + 1) & 1], strip, c + 1, pieces);
            } else {
                copy_commit();  // an empty group keeps one group per chunk
            }
            copy_wait_all_but_one();
            __syncwarp();
            const int here = min(8, pieces - c * 8);
            if (ok) {
                const StreamChunk& k = ck[c & 1];
                for (int p = 0; p < here; ++p) h = fold16(h, k.piece[lane][p ^ (lane & 7)]);
            }
            __syncwarp();  // chunk c & 1 is refilled by the next iteration's copies
        }
        if (ok) check_entry<CHECK_TOKEN>(a, ring, e, s, prev, st, pv, splitmix64(h));
    }
}

}  // namespace kvc

using kvc::VerifyArgs;
KVC_CHECK_LAYOUT_VerifyArgs(VerifyArgs);

// The K+V pair launch of a verify (KVC_PAIR_ENTRY in common.cuh).
struct VerifyPairArgs {
    VerifyArgs k;
    VerifyArgs v;
};
KVC_CHECK_LAYOUT_VerifyPairArgs(VerifyPairArgs);

// Each entry point NAME comes with NAME_pair, its K+V pair launch; PROLOGUE runs before BODY
// (KVC_PAIR_ENTRY_WITH in common.cuh).
#define KVC_VERIFY_ENTRY_WITH(NAME, BODY, KV, CHECK, MIN_BLOCKS, PROLOGUE)                         \
    extern "C" __global__ void __launch_bounds__(kvc::VERIFY_THREADS, MIN_BLOCKS) NAME(VerifyArgs a) { \
        PROLOGUE                                                                                    \
        kvc::BODY<KV, CHECK>(a);                                                                    \
    }                                                                                               \
    KVC_PAIR_ENTRY_WITH(NAME, kvc::VERIFY_THREADS, MIN_BLOCKS, VerifyPairArgs, PROLOGUE,             \
                        (kvc::BODY<KV, CHECK>))
#define KVC_VERIFY_ENTRY(NAME, BODY, KV, CHECK, MIN_BLOCKS) \
    KVC_VERIFY_ENTRY_WITH(NAME, BODY, KV, CHECK, MIN_BLOCKS, kvc::grid_prologue();)
// verify_single runs grid_prologue() itself (after the early column loads it may do first).
#define KVC_VERIFY_SINGLE_ENTRY(NAME, KV, CHECK, MIN_BLOCKS) \
    KVC_VERIFY_ENTRY_WITH(NAME, verify_single, KV, CHECK, MIN_BLOCKS, )

// Name suffixes: _tokens = expected-token check on; _partial / _all = real-KV fold; _pair = the
// K+V pair launch.
KVC_VERIFY_SINGLE_ENTRY(kv_canary_verify, kvc::KV_NONE, false, 4)
KVC_VERIFY_SINGLE_ENTRY(kv_canary_verify_tokens, kvc::KV_NONE, true, 4)
KVC_VERIFY_SINGLE_ENTRY(kv_canary_verify_partial, kvc::KV_PARTIAL, false, 2)
KVC_VERIFY_SINGLE_ENTRY(kv_canary_verify_partial_tokens, kvc::KV_PARTIAL, true, 2)
// ALL: one block of 512 a multiprocessor, so that each lane keeps its source's 128 bytes in
// registers (8 x 16-byte loads in flight) without spilling.
KVC_VERIFY_ENTRY(kv_canary_verify_all, verify_grouped, 2, false, 1)
KVC_VERIFY_ENTRY(kv_canary_verify_all_tokens, verify_grouped, 2, true, 1)
// ALL, staged in shared memory (73,728 bytes a block: 8 warps x 2 stages); three blocks a
// multiprocessor.
#define KVC_VERIFY_STAGED(NAME, CHECK)                                                            \
    extern "C" __global__ void __launch_bounds__(kvc::STAGED_THREADS, 3) NAME(VerifyArgs a) {     \
        kvc::grid_prologue();                                                                     \
        kvc::verify_staged<CHECK>(a);                                                             \
    }                                                                                             \
    KVC_PAIR_ENTRY(NAME, kvc::STAGED_THREADS, 3, VerifyPairArgs, (kvc::verify_staged<CHECK>))
KVC_VERIFY_STAGED(kv_canary_verify_all_staged, false)
KVC_VERIFY_STAGED(kv_canary_verify_all_staged_tokens, true)
// ALL, one source of strips over 128 bytes, streamed through shared memory (64 KB a block: 8
// warps x 2 chunks of 32 entries x 128 bytes); three blocks a multiprocessor.
#define KVC_VERIFY_STREAMED(NAME, CHECK)                                                          \
    extern "C" __global__ void __launch_bounds__(kvc::STAGED_THREADS, 3) NAME(VerifyArgs a) {     \
        kvc::grid_prologue();                                                                     \
        kvc::verify_streamed<CHECK>(a);                                                           \
    }                                                                                             \
    KVC_PAIR_ENTRY(NAME, kvc::STAGED_THREADS, 3, VerifyPairArgs, (kvc::verify_streamed<CHECK>))
KVC_VERIFY_STREAMED(kv_canary_verify_all_streamed, false)
KVC_VERIFY_STREAMED(kv_canary_verify_all_streamed_tokens, true)
