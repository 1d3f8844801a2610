// The previous write kernels (chain thread beside eight worker warps, per-step select), kept
// while the kernels of write.cu are measured against them (LaunchConfig::write_legacy).
// The write op (spec §4): one block per request row, the serial hash chain split from
// everything that does not depend on it.
//
// The chain of request r needs only (token, position, skipped?) per entry; loads, real-KV
// folds, input-assert comparisons, slot stores and violation rows do not depend on it. So each
// block runs a three-stage pipeline over tiles of WRITE_TILE entries, in shared memory
// (triple-buffered, nothing allocated at launch):
//
//   round t:  chain thread (warp 0, lane 0)  -> runs the chain over tile t
//             worker warps (1..8)            -> load + fold tile t+1, store tile t-1
//
// so the chain thread does nothing but the mix3 chain out of shared memory, and the stores of
// the (independent) results trail it by one tile. Violation rows keep entry order within a
// request: the workers scan their row counts and reserve one contiguous range per tile.
#include "common.cuh"

namespace kvc {

constexpr int WRITE_TILE = 256;
constexpr int WRITE_WORKERS = WRITE_TILE;
constexpr int WRITE_THREADS = 32 + WRITE_WORKERS;
constexpr int WRITE_BUFS = 3;
constexpr int WORKER_WARPS = WRITE_WORKERS / 32;

// Per-entry flags.
constexpr unsigned char F_SKIP = 1;  // slot < 0 (or not servable): nothing written, chain holds
constexpr unsigned char F_TOK = 2;   // input assert: token differs from the expected one
constexpr unsigned char F_POS = 4;   // input assert: position differs
constexpr unsigned char F_CPOS = 8;  // chain-position assert: position != previous + 1

struct WriteArgs {
    const i64* offsets;  // req_capacity + 1
    const i64* seeds;    // req_capacity
    const i32* num_valid_reqs;
    i64 req_capacity;
    const i64* input_ids;  // entry_capacity each
    const i64* positions;
    const i64* out_cache_loc;
    i64 entry_capacity;
    const i64* exp_tokens;  // null unless the input assert is on
    const i64* exp_positions;
    const i32* chain_assert;  // enable_chain_position_assert [1], or null: use chain_assert_fixed
    i64 chain_assert_fixed;
    unsigned char* buf;
    i64 num_slots;
    i64 stride;
    i64* ring;
    i64 ring_capacity;
    i32* write_index;
    i64* slot_counter;
    i64* kernel_counter;
    i64 tag;
    i64* status;
    RealKv kv;
};

struct Tile {
    i64 tok[WRITE_TILE];
    i64 pos[WRITE_TILE];
    i64 slot[WRITE_TILE];
    i64 rk[WRITE_TILE];
    i64 hash[WRITE_TILE];
    i64 cexp[WRITE_TILE];
    unsigned char flags[WRITE_TILE];
};

__device__ __forceinline__ void worker_barrier() {
    asm volatile("bar.sync 1, %0;" ::"n"(WRITE_WORKERS) : "memory");
}

// One entry as the chain and the stores need it.
struct Entry {
    i64 tk, ps, sl, rk;
    unsigned char f;
};

// Loads entry i, checks its slot, folds its real-KV bytes, compares the input assert.
// KV: 0 = no fold, 1 = PARTIAL, 2 = ALL.
template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ Entry load_entry(const WriteArgs& a, i64 i) {
    Entry e;
    e.tk = __ldg(a.input_ids + i);
    e.ps = __ldg(a.positions + i);
    e.sl = __ldg(a.out_cache_loc + i);
    e.f = 0;
    e.rk = 0;
    if (e.sl < 0) {
        e.f = F_SKIP;
    } else if (e.sl >= a.num_slots) {
        record_status(a.status, ST_SLOT_OUT_OF_RANGE, SA_OUT_CACHE_LOC, i, e.sl, a.num_slots);
        e.f = F_SKIP;
    } else if (KV != 0 && !real_kv_rows_ok(a.kv, e.sl, a.status)) {
        e.f = F_SKIP;
    } else {
        if (KV != 0) e.rk = static_cast<i64>(real_kv_hash<KV == 1>(a.kv, e.sl));
        if (INPUT_ASSERT) {
            if (e.tk != __ldg(a.exp_tokens + i)) e.f |= F_TOK;
            if (e.ps != __ldg(a.exp_positions + i)) e.f |= F_POS;
        }
    }
    return e;
}

template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void load_entry_to(const WriteArgs& a, Tile& t, int k, i64 i) {
    const Entry e = load_entry<KV, INPUT_ASSERT>(a, i);
    t.tok[k] = e.tk;
    t.pos[k] = e.ps;
    t.slot[k] = e.sl;
    t.rk[k] = e.rk;
    t.flags[k] = e.f;
}

// Stores entry k of a finished tile and appends its violation rows in entry order.
template <bool INPUT_ASSERT>
__device__ __forceinline__ void store_entry(const WriteArgs& a, const Ring& ring, Tile& t, int k,
                                            bool valid, i64 i, i64* s_warp, i64* s_seq) {
    const int w = threadIdx.x - 32;
    const int lane = threadIdx.x & 31;
    const int wwarp = w >> 5;
    unsigned char f = valid ? t.flags[k] : F_SKIP;
    if (!(f & F_SKIP)) {
        Slot v = {t.tok[k], t.pos[k], t.hash[k], t.rk[k]};
        store_slot(a.buf, a.stride, t.slot[k], v);
    }
    const int input_row = (INPUT_ASSERT && !(f & F_SKIP) && (f & (F_TOK | F_POS))) ? 1 : 0;
    const int chain_row = (!(f & F_SKIP) && (f & F_CPOS)) ? 1 : 0;
    const int rows = input_row + chain_row;
    // Ordered reservation: scan the row counts over the 256 workers.
    int inc = rows;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        int n = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += n;
    }
    if (lane == 31) s_warp[wwarp] = inc;
    worker_barrier();
    i64 total = 0, before = 0;
#pragma unroll
    for (int j = 0; j < WORKER_WARPS; ++j) {
        if (j < wwarp) before += s_warp[j];
        total += s_warp[j];
    }
    if (total == 0) return;  // the common case: no violations in this tile
    if (w == 0) *s_seq = reserve_violations(ring, static_cast<int>(total));
    worker_barrier();
    i64 seq = *s_seq + before + (inc - rows);
    if (input_row) {
        const i64 bits = ((f & F_TOK) ? WRITE_TOKEN_MISMATCH : 0) |
                         ((f & F_POS) ? WRITE_POSITION_MISMATCH : 0);
        store_violation(ring, seq++, a.tag, t.slot[k], t.pos[k], t.tok[k], __ldg(a.exp_tokens + i),
                        t.hash[k], __ldg(a.exp_positions + i), bits);
    }
    if (chain_row) {
        store_violation(ring, seq, a.tag, t.slot[k], t.pos[k], t.tok[k], t.tok[k], t.hash[k],
                        t.cexp[k], WRITE_POSITION_MISMATCH);
    }
}

// A request of at most 32 entries, in one warp: lane i loads (and folds) entry i; every lane runs
// the same chain over the entries (shuffled to all lanes), so each knows its entry's hash; rows
// are reserved in entry order with one atomic.
template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void write_small(const WriteArgs& a, const Ring& ring, i64 start, int count, i64 seed) {
    const int lane = threadIdx.x & 31;
    u64 running = CHAIN_HEAD;
    i64 prev_pos = 0;
    bool chain_assert = false;
    Slot sd = {};
    if (seed >= 0 && lane == 0) sd = load_slot(a.buf, a.stride, seed);
    Entry e = {0, 0, -1, 0, F_SKIP};
    if (lane < count) e = load_entry<KV, INPUT_ASSERT>(a, start + lane);
    if (seed >= 0) {
        sd.token = __shfl_sync(0xffffffffu, sd.token, 0);
        sd.position = __shfl_sync(0xffffffffu, sd.position, 0);
        sd.prev_hash = __shfl_sync(0xffffffffu, sd.prev_hash, 0);
        running = slot_hash(sd);
        chain_assert = (a.chain_assert ? *a.chain_assert : a.chain_assert_fixed) != 0;
        prev_pos = sd.position;
    }
    i64 my_hash = 0, my_cexp = 0;
    bool my_cpos = false;
    for (int k = 0; k < count; ++k) {
        const i64 tk = __shfl_sync(0xffffffffu, e.tk, k);
        const i64 ps = __shfl_sync(0xffffffffu, e.ps, k);
        const bool skip = (__shfl_sync(0xffffffffu, static_cast<int>(e.f), k) & F_SKIP) != 0;
        if (lane == k) my_hash = static_cast<i64>(running);
        const u64 next = mix3(running, static_cast<u64>(tk), static_cast<u64>(ps));
        if (chain_assert && !skip) {
            const i64 want = static_cast<i64>(static_cast<u64>(prev_pos) + 1);
            if (lane == k && ps != want) {
                my_cpos = true;
                my_cexp = want;
            }
            prev_pos = ps;
        }
        running = skip ? running : next;
    }
    const bool stored = !(e.f & F_SKIP);
    if (stored) {
        const Slot v = {e.tk, e.ps, my_hash, e.rk};
        store_slot(a.buf, a.stride, e.sl, v);
    }
    const unsigned written = __popc(__ballot_sync(0xffffffffu, stored));
    if (lane == 0 && written > 0) atomic_add_i64(a.slot_counter, written);
    const int input_row = (INPUT_ASSERT && stored && (e.f & (F_TOK | F_POS))) ? 1 : 0;
    const int chain_row = (stored && my_cpos) ? 1 : 0;
    const int rows = input_row + chain_row;
    int inc = rows;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += n;
    }
    const int total = __shfl_sync(0xffffffffu, inc, 31);
    if (total == 0) return;
    i64 base = 0;
    if (lane == 0) base = reserve_violations(ring, total);
    base = __shfl_sync(0xffffffffu, base, 0);
    i64 seq = base + inc - rows;
    const i64 i = start + lane;
    if (input_row) {
        const i64 bits = ((e.f & F_TOK) ? WRITE_TOKEN_MISMATCH : 0) | ((e.f & F_POS) ? WRITE_POSITION_MISMATCH : 0);
        store_violation(ring, seq++, a.tag, e.sl, e.ps, e.tk, __ldg(a.exp_tokens + i), my_hash,
                        __ldg(a.exp_positions + i), bits);
    }
    if (chain_row) {
        store_violation(ring, seq, a.tag, e.sl, e.ps, e.tk, e.tk, my_hash, my_cexp, WRITE_POSITION_MISMATCH);
    }
}

// The chain over one tile (thread 0). Only mix3 depends on the previous step: flags, tokens
// and positions of eight entries are read ahead, and a skipped entry keeps the running hash by
// a select, not a branch, so the reads never wait for the chain. Without the chain-position
// assert the loop has no branch at all.
template <bool CHAIN_ASSERT>
__device__ __forceinline__ void chain_tile(Tile& tl, int len, u64& running, i64& prev_pos, i64& written) {
    for (int k0 = 0; k0 < len; k0 += 8) {
        i64 tk[8], ps[8];
        unsigned char fl[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int k = k0 + j < len ? k0 + j : len - 1;
            fl[j] = k0 + j < len ? tl.flags[k] : F_SKIP;
            tk[j] = tl.tok[k];
            ps[j] = tl.pos[k];
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int k = k0 + j;
            const bool skip = (fl[j] & F_SKIP) != 0;
            if (k < len) tl.hash[k] = static_cast<i64>(running);  // unread when skipped
            const u64 next = mix3(running, static_cast<u64>(tk[j]), static_cast<u64>(ps[j]));
            if (CHAIN_ASSERT && !skip) {
                const i64 want = static_cast<i64>(static_cast<u64>(prev_pos) + 1);
                if (ps[j] != want) {
                    tl.flags[k] = fl[j] | F_CPOS;
                    tl.cexp[k] = want;
                }
                prev_pos = ps[j];
            }
            running = skip ? running : next;
            written += skip ? 0 : 1;
        }
    }
}

template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void write_body(const WriteArgs& a) {
    __shared__ Tile s_tiles[WRITE_BUFS];
    __shared__ i64 s_warp[WORKER_WARPS];
    __shared__ i64 s_seq;

    const int tid = threadIdx.x;
    const i64 r = blockIdx.x;
    if (r == 0 && tid == 0) atomic_add_i64(a.kernel_counter, 1);
    i64 nreq = *a.num_valid_reqs;
    nreq = nreq < 0 ? 0 : (nreq > a.req_capacity ? a.req_capacity : nreq);
    if (r >= nreq) return;
    const i64 start = __ldg(a.offsets + r);
    const i64 end = __ldg(a.offsets + r + 1);
    const i64 seed = __ldg(a.seeds + r);  // read together with the offsets
    // Offsets must be non-decreasing and inside [0, entry_capacity] (the CPU's check, per
    // request): a request whose range breaks that is recorded and skipped.
    if (start < 0 || start > a.entry_capacity) {
        if (tid == 0) record_status(a.status, ST_WRITE_RANGE, r, start, 0, a.entry_capacity);
        return;
    }
    if (end < start || end > a.entry_capacity) {
        if (tid == 0) record_status(a.status, ST_WRITE_RANGE, r + 1, end, start, a.entry_capacity);
        return;
    }
    if (end == start) return;  // empty request: no seed read
    if (seed >= a.num_slots) {
        if (tid == 0) record_status(a.status, ST_SLOT_OUT_OF_RANGE, SA_WRITE_SEED, r, seed, a.num_slots);
        return;
    }
    const i64 count = end - start;
    const i64 ntiles = (count + WRITE_TILE - 1) / WRITE_TILE;
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    if (count <= 32) {
        // Decode-sized requests: warp 0 alone, no block barrier.
        if (tid < 32) write_small<KV, INPUT_ASSERT>(a, ring, start, static_cast<int>(count), seed);
        return;
    }

    // Chain state (thread 0 only).
    u64 running = CHAIN_HEAD;
    i64 prev_pos = 0, written = 0;
    bool chain_assert = false;

    for (i64 t = -1; t <= ntiles; ++t) {
        if (tid == 0) {
            if (t == -1) {
                if (seed >= 0) {
                    const Slot sd = load_slot(a.buf, a.stride, seed);
                    running = slot_hash(sd);
                    chain_assert = (a.chain_assert ? *a.chain_assert : a.chain_assert_fixed) != 0;
                    prev_pos = sd.position;
                }
            } else if (t < ntiles) {
                Tile& tl = s_tiles[t % WRITE_BUFS];
                const int len = static_cast<int>(min(static_cast<i64>(WRITE_TILE), count - t * WRITE_TILE));
                if (chain_assert) {
                    chain_tile<true>(tl, len, running, prev_pos, written);
                } else {
                    chain_tile<false>(tl, len, running, prev_pos, written);
                }
            }
        } else if (tid >= 32) {
            const int w = tid - 32;
            if (t + 1 < ntiles) {
                const i64 i0 = start + (t + 1) * WRITE_TILE;
                if (w < count - (t + 1) * WRITE_TILE) {
                    load_entry_to<KV, INPUT_ASSERT>(a, s_tiles[(t + 1) % WRITE_BUFS], w, i0 + w);
                }
            }
            if (t - 1 >= 0) {
                const i64 i0 = start + (t - 1) * WRITE_TILE;
                const bool valid = w < count - (t - 1) * WRITE_TILE;
                store_entry<INPUT_ASSERT>(a, ring, s_tiles[(t - 1) % WRITE_BUFS], w, valid,
                                          i0 + w, s_warp, &s_seq);
            }
        }
        __syncthreads();
    }
    if (tid == 0 && written > 0) atomic_add_i64(a.slot_counter, written);
}

}  // namespace kvc

using kvc::WriteArgs;
static_assert(sizeof(WriteArgs) == 22 * 8 + 26 * 8, "WriteArgs layout (src/cuda/abi.rs)");

#define KVC_WRITE_ENTRY(NAME, KV, ASSERT)                                                     \
    extern "C" __global__ void __launch_bounds__(kvc::WRITE_THREADS, 2) NAME(WriteArgs a) { \
        kvc::write_body<KV, ASSERT>(a);                                                      \
    }

// Name suffixes: _partial / _all = real-KV fold; _assert = input assert on.
KVC_WRITE_ENTRY(kv_canary_legacy_write, 0, false)
KVC_WRITE_ENTRY(kv_canary_legacy_write_assert, 0, true)
KVC_WRITE_ENTRY(kv_canary_legacy_write_partial, 1, false)
KVC_WRITE_ENTRY(kv_canary_legacy_write_partial_assert, 1, true)
KVC_WRITE_ENTRY(kv_canary_legacy_write_all, 2, false)
KVC_WRITE_ENTRY(kv_canary_legacy_write_all_assert, 2, true)
