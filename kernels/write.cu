// The write op (spec §4): one block per request row, the serial hash chain split from
// everything that does not depend on it.
//
// The chain of request r needs only (token, position) of the entries it steps over (those not
// skipped); loads, real-KV folds, input-assert comparisons, slot stores and violation rows do
// not depend on it. So each block runs a pipeline over tiles of WRITE_TILE entries, in shared
// memory (triple-buffered, nothing allocated at launch):
//
//   round t:  chain warp (warp 0)            -> lists tile t's kept entries (not skipped),
//                                               runs the chain over them
//             worker warps                   -> load tile t+1, fold tile t's real-KV bytes,
//                                               store tile t-1
//
// * The chain warp first lists the tile's kept entries (eight flags a lane, a warp scan) and
//   then steps over that list only, so its loop has no skip test and no select on the running
//   hash; each step's token and position are read from shared memory during the step before.
//   All of warp 0 runs the chain in lockstep (lane 0 stores), so it never diverges around the
//   block barrier.
// * The folds of tile t run in the round the chain runs tile t (they are only needed to store
//   it), so the first round waits for tile 0's loads only, not for its folds.
// * Warps are assigned to the four schedulers of a multiprocessor round-robin: warp 0 (the
//   chain) shares scheduler 0 with warps 4 and 8, which stay idle, so no worker instruction
//   competes with the chain's.
// * Violation rows keep entry order within a request: after its chain over a tile, the chain
//   warp counts the tile's rows (input-assert and chain-assert rows of its listed entries, a
//   warp scan) and reserves one contiguous ring range for them; the workers store each row at
//   its place in the next round. No barrier but the block's (only the assert kernels count).
// * Requests of at most 32 entries (decode) run on warp 0 alone, a lane an entry; in ALL mode
//   the whole block first stages their strips in the (otherwise unused) tile memory, so each
//   lane folds its 2 KB strip out of shared memory instead of waiting on its own loads. Behind
//   this crate's verify of the same stage (WriteArgs::early_fold) everything but their stores
//   runs before the wait for that verify (write_body).
#include "common.cuh"

namespace kvc {

constexpr int WRITE_TILE = 256;
constexpr int WRITE_WORKERS = WRITE_TILE;
constexpr int WORKER_WARPS = WRITE_WORKERS / 32;  // 8: warps 1-3, 5-7, 9, 10
constexpr int WRITE_WARPS = 11;
constexpr int WRITE_THREADS = WRITE_WARPS * 32;
constexpr int WRITE_BUFS = 3;

// Per-entry flags.
constexpr unsigned char F_SKIP = 1;  // slot < 0 (or not servable): nothing written, chain holds
constexpr unsigned char F_TOK = 2;   // input assert: token differs from the expected one
constexpr unsigned char F_POS = 4;   // input assert: position differs
constexpr unsigned char F_CPOS = 8;  // chain-position assert: position != previous + 1
constexpr unsigned char F_ERR = 16;  // QUIET load_entry: an error it did not record (skipped too)

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
    i64 early_fold;  // 1: the grid ahead is a crate verify (fold before grid_prologue)
    i64 kinds;       // element kinds (load_index), a byte each: input_ids, positions,
                     // out_cache_loc, exp_tokens, exp_positions
};

// Entry i of the per-token input arrays, each read in its own element kind.
__device__ __forceinline__ i64 token_at(const WriteArgs& a, i64 i) {
    return load_index(a.input_ids, a.kinds & 0xff, i);
}
__device__ __forceinline__ i64 position_at(const WriteArgs& a, i64 i) {
    return load_index(a.positions, (a.kinds >> 8) & 0xff, i);
}
__device__ __forceinline__ i64 slot_at(const WriteArgs& a, i64 i) {
    return load_index(a.out_cache_loc, (a.kinds >> 16) & 0xff, i);
}
__device__ __forceinline__ i64 expected_token_at(const WriteArgs& a, i64 i) {
    return load_index(a.exp_tokens, (a.kinds >> 24) & 0xff, i);
}
__device__ __forceinline__ i64 expected_position_at(const WriteArgs& a, i64 i) {
    return load_index(a.exp_positions, (a.kinds >> 32) & 0xff, i);
}

// One tile: entries in entry order (workers), and the list of the kept ones (chain warp).
struct Tile {
    i64 tok[WRITE_TILE];   // entry order (workers)
    i64 pos[WRITE_TILE];
    i64 slot[WRITE_TILE];
    i64 rk[WRITE_TILE];    // entry order, kept entries (workers, in the chain's round)
    i64 hash[WRITE_TILE];  // list order (chain): the running hash before the entry
    i64 cexp[WRITE_TILE];  // list order (chain): the expected position of a chain-assert row
    i64 seq;                           // the tile's first reserved ring row (chain; read only if rows)
    unsigned short rowpre[WRITE_TILE];  // list order (chain): violation rows before kept entry j
    unsigned short idx[WRITE_TILE];     // list order (chain): the kept entry's index in the tile
    unsigned char flags[WRITE_TILE];    // entry order (workers): F_SKIP | F_TOK | F_POS
    unsigned char cflag[WRITE_TILE];    // list order (chain): F_CPOS (chain assert on)
    int m;                              // kept entries (chain)
};

// The worker index of a thread (0-255), or -1 for the chain warp and the idle warps 4 and 8.
__device__ __forceinline__ int worker_index() {
    const int warp = threadIdx.x >> 5;
    if ((warp & 3) == 0) return -1;
    return (warp - 1 - (warp > 4 ? 1 : 0) - (warp > 8 ? 1 : 0)) * 32 + (threadIdx.x & 31);
}

// One entry as the chain and the stores need it.
struct Entry {
    i64 tk, ps, sl, rk;
    unsigned char f;
};

// Loads entry i, checks its slot, compares the input assert; with FOLD, folds its real-KV
// bytes. KV: 0 = no fold, 1 = PARTIAL, 2 = ALL. QUIET: an error is not recorded but flagged
// (F_ERR), for a caller that redoes the request with recording.
template <int KV, bool INPUT_ASSERT, bool FOLD, bool QUIET = false>
__device__ __forceinline__ Entry load_entry(const WriteArgs& a, i64 i) {
    Entry e;
    e.tk = token_at(a, i);
    e.ps = position_at(a, i);
    e.sl = slot_at(a, i);
    e.f = 0;
    e.rk = 0;
    if (e.sl < 0) {
        e.f = F_SKIP;
    } else if (e.sl >= a.num_slots) {
        if (!QUIET) record_status(a.status, ST_SLOT_OUT_OF_RANGE, SA_OUT_CACHE_LOC, i, e.sl, a.num_slots);
        e.f = QUIET ? F_SKIP | F_ERR : F_SKIP;
    } else if (KV != 0 && (QUIET ? real_kv_missing_row(a.kv, e.sl) >= 0
                                  : !real_kv_rows_ok(a.kv, e.sl, a.status))) {
        e.f = QUIET ? F_SKIP | F_ERR : F_SKIP;
    } else {
        if (FOLD && KV != 0) e.rk = static_cast<i64>(real_kv_hash<KV == 1>(a.kv, e.sl));
        if (INPUT_ASSERT) {
            if (e.tk != expected_token_at(a, i)) e.f |= F_TOK;
            if (e.ps != expected_position_at(a, i)) e.f |= F_POS;
        }
    }
    return e;
}

// Worker w loads entry w of a tile starting at global index i0 (w < len).
template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void load_tile(const WriteArgs& a, Tile& t, int w, i64 i0, int len) {
    if (w >= len) return;
    const Entry e = load_entry<KV, INPUT_ASSERT, false>(a, i0 + w);
    t.tok[w] = e.tk;
    t.pos[w] = e.ps;
    t.slot[w] = e.sl;
    t.flags[w] = e.f;
}

// Stores kept entry j of a finished tile and its violation rows, at the places the chain warp
// reserved for them (reserve_tile_rows): entry order, no barrier.
template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void store_kept(const WriteArgs& a, const Ring& ring, const Tile& t, int j,
                                           i64 i0, bool chain_assert) {
    if (j >= t.m) return;
    const int e = t.idx[j];
    const unsigned char f = t.flags[e];
    const unsigned char cf = chain_assert ? t.cflag[j] : 0;
    const Slot v = {t.tok[e], t.pos[e], t.hash[j], KV == 0 ? 0 : t.rk[e]};
    store_slot(a.buf, a.stride, t.slot[e], v);
    const bool input_row = INPUT_ASSERT && (f & (F_TOK | F_POS));
    const bool chain_row = (cf & F_CPOS) != 0;
    if (!input_row && !chain_row) return;  // the common case: no violation at this entry
    i64 seq = t.seq + t.rowpre[j];
    if (input_row) {
        const i64 i = i0 + e;
        const i64 bits = ((f & F_TOK) ? WRITE_TOKEN_MISMATCH : 0) | ((f & F_POS) ? WRITE_POSITION_MISMATCH : 0);
        store_violation(ring, seq++, a.tag, t.slot[e], t.pos[e], t.tok[e], expected_token_at(a, i),
                        t.hash[j], expected_position_at(a, i), bits);
    }
    if (chain_row) {
        store_violation(ring, seq, a.tag, t.slot[e], t.pos[e], t.tok[e], t.tok[e], t.hash[j], t.cexp[j],
                        WRITE_POSITION_MISMATCH);
    }
}

// ALL folds of a decode-sized request (at most 32 entries), staged by the whole block: the
// strips of every entry (each source's leading read_bytes, sources in order) are copied into
// shared memory at `smem + i * per_entry` (16-byte pieces, every thread of the block, all loads
// in flight at once), then each lane of warp 0 folds its own entry out of shared memory. So a
// decode token's 2 KB strip costs one round of loads instead of a lane's serial round trips.
// Entries whose slot or rows are not servable are not copied (load_entry skips and records
// them; their strips are never read).
__device__ __forceinline__ void stage_small_strips(const WriteArgs& a, i64 start, int count,
                                                   int pieces_per_entry, ulonglong2* smem) {
    const int total = count * pieces_per_entry;
    for (int q = threadIdx.x; q < total; q += blockDim.x) {
        const int i = q / pieces_per_entry;
        int r = q - i * pieces_per_entry;
        const i64 sl = slot_at(a, start + i);
        if (sl < 0 || sl >= a.num_slots) continue;
        int k = 0;
        while (k + 1 < a.kv.num_sources && r >= static_cast<int>(a.kv.read_bytes[k] >> 4)) {
            r -= static_cast<int>(a.kv.read_bytes[k] >> 4);
            ++k;
        }
        if (real_kv_row(a.kv, k, sl) >= a.kv.num_rows[k]) continue;
        smem[q] = real_kv_piece(a.kv, k, real_kv_strip(a.kv, k, sl), r);
    }
}

// real_kv_hash (ALL) of one entry out of its staged strips (stage_small_strips).
__device__ __forceinline__ u64 fold_staged(const RealKv& kv, const ulonglong2* p) {
    u64 acc = 0;
#pragma unroll
    for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
        if (k < kv.num_sources) {
            const int n = static_cast<int>(kv.read_bytes[k] >> 4);
            u64 h = 0;
            for (int j = 0; j < n; ++j) h = fold16(h, p[j]);
            p += n;
            acc = splitmix64(acc ^ h);
        }
    }
    return acc;
}

// Whether every strip of slot `sl` was staged by stage_small_strips (the slot and every source's
// row in range): exactly the entries load_entry does not skip. Records nothing.
__device__ __forceinline__ bool strips_servable(const RealKv& kv, i64 sl, i64 num_slots) {
    return sl >= 0 && sl < num_slots && real_kv_missing_row(kv, sl) < 0;
}

// A decode-sized request (at most 32 entries) as write_body finds it: `ok` when r is a valid
// request whose offsets are in range, with 1 to 32 entries and a seed below num_slots (every
// check write_body makes, and records, before it takes the request to write_small). Reads the
// write plan only and records nothing; the same in every thread of the block.
struct SmallRequest {
    bool ok;
    bool assert_flag;
    int count;
    i64 start, seed;
};

__device__ __forceinline__ SmallRequest small_request(const WriteArgs& a, i64 r) {
    // Every load at once (r < req_capacity: always in bounds), then the checks.
    const i64 nreq_raw = *a.num_valid_reqs;
    const i64 start = __ldg(a.offsets + r);
    const i64 end = __ldg(a.offsets + r + 1);
    const i64 seed = __ldg(a.seeds + r);
    const bool assert_flag = (a.chain_assert ? *a.chain_assert : a.chain_assert_fixed) != 0;
    const i64 nreq = nreq_raw < 0 ? 0 : (nreq_raw > a.req_capacity ? a.req_capacity : nreq_raw);
    SmallRequest q = {};
    if (r >= nreq) return q;
    if (start < 0 || start > a.entry_capacity || end < start || end > a.entry_capacity) return q;
    if (end == start || end - start > 32 || seed >= a.num_slots) return q;
    q.ok = true;
    q.assert_flag = assert_flag;
    q.count = static_cast<int>(end - start);
    q.start = start;
    q.seed = seed;
    return q;
}

// The ALL folds of decode-sized request `q` (q.ok) when its strips fit in `smem`: stages the
// strips (the whole block), then lane i of warp 0 folds entry i into `fold` when its strips are
// all there. Returns whether it staged. It reads the inputs and the KV bytes and stores nothing
// but shared memory. Uniform over the block (__syncthreads).
__device__ __forceinline__ bool stage_and_fold_small(const WriteArgs& a, const SmallRequest& q,
                                                     ulonglong2* smem, i64 smem_bytes, u64& fold) {
    i64 bytes = 0;
    for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
        if (k < a.kv.num_sources) bytes += a.kv.read_bytes[k];
    }
    if (q.count * bytes > smem_bytes) return false;
    const int pieces = static_cast<int>(bytes >> 4);  // 16-byte pieces an entry
    stage_small_strips(a, q.start, q.count, pieces, smem);
    __syncthreads();
    const int tid = threadIdx.x;
    if (tid < q.count && strips_servable(a.kv, slot_at(a, q.start + tid), a.num_slots)) {
        fold = fold_staged(a.kv, smem + tid * pieces);
    }
    return true;
}

// A request of at most 32 entries, in one warp: lane i loads (and folds) entry i; every lane runs
// the same chain over the entries (shuffled to all lanes), so each knows its entry's hash; rows
// are reserved in entry order with one atomic. chain_small is the half that reads and computes,
// store_small the half that stores; write_small both.

// Lane i's entry of a decode-sized request and what the chain gave it.
struct SmallLane {
    Entry e;
    i64 hash;  // the running hash before the entry
    i64 cexp;  // the chain-position assert's expected position (cpos)
    bool cpos;
};

// The reading half over request `q`: stores nothing (QUIET: records nothing either, and returns
// false when an entry had an error to record: the caller redoes the request with write_small).
// When `staged`, the strips were staged and lane i's fold is `fold` (stage_and_fold_small).
template <int KV, bool INPUT_ASSERT, bool QUIET>
__device__ __forceinline__ bool chain_small(const WriteArgs& a, const SmallRequest& q, bool staged,
                                            u64 fold, SmallLane& out) {
    const int lane = threadIdx.x & 31;
    const int count = q.count;
    u64 running = CHAIN_HEAD;
    i64 prev_pos = 0;
    bool chain_assert = false;
    Slot sd = {};
    if (q.seed >= 0 && lane == 0) sd = load_slot(a.buf, a.stride, q.seed);
    Entry e = {0, 0, -1, 0, F_SKIP};
    if (lane < count) {
        if (staged) {
            e = load_entry<KV, INPUT_ASSERT, false, QUIET>(a, q.start + lane);
            if (!(e.f & F_SKIP)) e.rk = static_cast<i64>(fold);
        } else {
            e = load_entry<KV, INPUT_ASSERT, true, QUIET>(a, q.start + lane);
        }
    }
    if (QUIET && __any_sync(0xffffffffu, (e.f & F_ERR) != 0)) return false;
    if (q.seed >= 0) {
        sd.token = __shfl_sync(0xffffffffu, sd.token, 0);
        sd.position = __shfl_sync(0xffffffffu, sd.position, 0);
        sd.prev_hash = __shfl_sync(0xffffffffu, sd.prev_hash, 0);
        running = slot_hash(sd);
        chain_assert = q.assert_flag;
        prev_pos = sd.position;
    }
    i64 my_hash = 0, my_cexp = 0;
    bool my_cpos = false;
    for (int k = 0; k < count; ++k) {
        const i64 tk = __shfl_sync(0xffffffffu, e.tk, k);
        const i64 ps = __shfl_sync(0xffffffffu, e.ps, k);
        const bool skip = (__shfl_sync(0xffffffffu, static_cast<int>(e.f), k) & F_SKIP) != 0;
        if (lane == k) my_hash = static_cast<i64>(running);
        if (skip) continue;
        if (chain_assert) {
            const i64 want = static_cast<i64>(static_cast<u64>(prev_pos) + 1);
            if (lane == k && ps != want) {
                my_cpos = true;
                my_cexp = want;
            }
            prev_pos = ps;
        }
        if (k + 1 < count) running = mix3(running, static_cast<u64>(tk), static_cast<u64>(ps));
    }
    out = {e, my_hash, my_cexp, my_cpos};
    return true;
}

// The storing half: lane i's slot, the slot counter and the violation rows of request `q`.
template <bool INPUT_ASSERT>
__device__ __forceinline__ void store_small(const WriteArgs& a, const Ring& ring, const SmallRequest& q,
                                            const SmallLane& l) {
    const int lane = threadIdx.x & 31;
    const Entry& e = l.e;
    const bool stored = !(e.f & F_SKIP);
    if (stored) {
        const Slot v = {e.tk, e.ps, l.hash, e.rk};
        store_slot(a.buf, a.stride, e.sl, v);
    }
    const unsigned written = __popc(__ballot_sync(0xffffffffu, stored));
    if (lane == 0 && written > 0) atomic_add_i64(a.slot_counter, written);
    const int input_row = (INPUT_ASSERT && stored && (e.f & (F_TOK | F_POS))) ? 1 : 0;
    const int chain_row = (stored && l.cpos) ? 1 : 0;
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
    const i64 i = q.start + lane;
    if (input_row) {
        const i64 bits = ((e.f & F_TOK) ? WRITE_TOKEN_MISMATCH : 0) | ((e.f & F_POS) ? WRITE_POSITION_MISMATCH : 0);
        store_violation(ring, seq++, a.tag, e.sl, e.ps, e.tk, expected_token_at(a, i), l.hash,
                        expected_position_at(a, i), bits);
    }
    if (chain_row) {
        store_violation(ring, seq, a.tag, e.sl, e.ps, e.tk, e.tk, l.hash, l.cexp, WRITE_POSITION_MISMATCH);
    }
}

template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void write_small(const WriteArgs& a, const Ring& ring, const SmallRequest& q,
                                            bool staged, u64 fold) {
    SmallLane l;
    chain_small<KV, INPUT_ASSERT, false>(a, q, staged, fold, l);
    store_small<INPUT_ASSERT>(a, ring, q, l);
}

// One chain step over kept entry j (every lane of warp 0 computes it; lane 0 stores).
template <bool CHAIN_ASSERT>
__device__ __forceinline__ void chain_step(Tile& tl, int j, i64 tk, i64 ps, u64& running, i64& prev_pos,
                                           bool leader) {
    if (leader) tl.hash[j] = static_cast<i64>(running);
    if (CHAIN_ASSERT) {
        const i64 want = static_cast<i64>(static_cast<u64>(prev_pos) + 1);
        if (leader) {
            tl.cflag[j] = ps != want ? F_CPOS : 0;
            tl.cexp[j] = want;
        }
        prev_pos = ps;
    }
    running = mix3(running, static_cast<u64>(tk), static_cast<u64>(ps));
}

// Lists the kept entries of a tile's first `len` (warp 0: lane l reads the flags of entries
// 8l..8l+7; a warp scan places them) into tl.idx; returns (and stores) their count.
__device__ __forceinline__ int list_kept(Tile& tl, int len) {
    const int lane = threadIdx.x & 31;
    const u64 flags8 = *reinterpret_cast<const u64*>(tl.flags + lane * 8);
    unsigned keep = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const bool kept = lane * 8 + q < len && !((flags8 >> (8 * q)) & F_SKIP);
        keep |= kept ? 1u << q : 0u;
    }
    const int count = __popc(keep);
    int incl = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += n;
    }
    const int m = __shfl_sync(0xffffffffu, incl, 31);
    int at = incl - count;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        if ((keep >> q) & 1u) tl.idx[at++] = static_cast<unsigned short>(lane * 8 + q);
    }
    if (lane == 0) tl.m = m;
    __syncwarp();
    return m;
}

// The chain over one tile's m listed entries, run by all of warp 0 in lockstep (the same values
// in every lane: broadcast reads; lane 0 stores), so the warp never diverges around the block
// barrier. Only mix3 depends on the previous step: each step's token and position were read
// during the step before, its list entry two steps before.
template <bool CHAIN_ASSERT>
__device__ __forceinline__ void chain_tile(Tile& tl, int m, u64& running, i64& prev_pos) {
    if (m == 0) return;
    const bool leader = (threadIdx.x & 31) == 0;
    const int e0 = tl.idx[0];
    int e1 = tl.idx[m > 1 ? 1 : 0];
    i64 tk = tl.tok[e0], ps = tl.pos[e0];
#pragma unroll 8
    for (int j = 0; j < m; ++j) {
        const int e2 = tl.idx[j + 2 < m ? j + 2 : m - 1];
        const i64 tkn = tl.tok[e1], psn = tl.pos[e1];
        chain_step<CHAIN_ASSERT>(tl, j, tk, ps, running, prev_pos, leader);
        tk = tkn;
        ps = psn;
        e1 = e2;
    }
}

// After the chain over a tile's m listed entries (warp 0): counts each entry's violation rows
// (an input-assert row, a chain-assert row; lane l takes list entries 8l..8l+7, a warp scan),
// stores the rows before each entry in tl.rowpre and reserves the tile's rows in the ring at
// once (tl.seq), so that store_kept places them in entry order. Only the assert kernels call it:
// without an assert a tile has no rows.
template <bool INPUT_ASSERT>
__device__ __forceinline__ void reserve_tile_rows(const Ring& ring, Tile& tl, int m, bool chain_assert) {
    __syncwarp();  // tl.cflag was stored by lane 0 (chain_step)
    const int lane = threadIdx.x & 31;
    unsigned rows = 0;  // two bits an entry
    int count = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const int j = lane * 8 + q;
        int r = 0;
        if (j < m) {
            if (INPUT_ASSERT && (tl.flags[tl.idx[j]] & (F_TOK | F_POS))) ++r;
            if (chain_assert && (tl.cflag[j] & F_CPOS)) ++r;
        }
        rows |= static_cast<unsigned>(r) << (2 * q);
        count += r;
    }
    int incl = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += n;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (total == 0) return;  // the common case: store_kept reads neither rowpre nor seq
    int at = incl - count;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const int j = lane * 8 + q;
        if (j < m) tl.rowpre[j] = static_cast<unsigned short>(at);
        at += (rows >> (2 * q)) & 3u;
    }
    if (lane == 0) tl.seq = reserve_violations(ring, total);
    __syncwarp();
}

template <int KV, bool INPUT_ASSERT>
__device__ __forceinline__ void write_body(const WriteArgs& a) {
    __shared__ __align__(16) Tile s_tiles[WRITE_BUFS];

    const int tid = threadIdx.x;
    const i64 r = blockIdx.x;
    // A decode-sized request (at most 32 entries) runs on warp 0 alone; in ALL mode its strips
    // are first staged and folded in the tiles' memory (which that path does not use
    // otherwise). When the grid ahead is this crate's verify of the same stage (early_fold), it
    // writes nothing this request reads: the whole reading half (staged folds, loads, folds and
    // the chain) runs before the wait and overlaps that grid; only the stores, the counters and
    // the rows follow it. A request with an error to record is redone after the wait.
    u64 fold = 0;
    bool staged = false;
    const i64 smem_bytes = static_cast<i64>(sizeof(s_tiles));
    ulonglong2* smem = reinterpret_cast<ulonglong2*>(s_tiles);
    SmallRequest q = {};
    SmallLane early = {};
    bool chained = false;
    if (a.early_fold != 0) {
        q = small_request(a, r);
        if (KV == 2 && q.ok) staged = stage_and_fold_small(a, q, smem, smem_bytes, fold);
        if (q.ok && tid < 32) chained = chain_small<KV, INPUT_ASSERT, true>(a, q, staged, fold, early);
    }
    grid_prologue();
    if (r == 0 && tid == 0) atomic_add_i64(a.kernel_counter, 1);
    if (a.early_fold == 0) {
        q = small_request(a, r);
        if (KV == 2 && q.ok) staged = stage_and_fold_small(a, q, smem, smem_bytes, fold);
    }
    if (q.ok) {
        if (tid < 32) {
            const Ring ring = {a.ring, a.ring_capacity, a.write_index};
            if (chained) {
                store_small<INPUT_ASSERT>(a, ring, q, early);
            } else {
                write_small<KV, INPUT_ASSERT>(a, ring, q, staged, fold);
            }
        }
        return;
    }
    // Everything the block needs first is read at once (r < req_capacity: always in bounds).
    const i64 start = __ldg(a.offsets + r);
    const i64 end = __ldg(a.offsets + r + 1);
    const i64 seed = __ldg(a.seeds + r);
    const bool assert_flag = (a.chain_assert ? *a.chain_assert : a.chain_assert_fixed) != 0;
    i64 nreq = *a.num_valid_reqs;
    nreq = nreq < 0 ? 0 : (nreq > a.req_capacity ? a.req_capacity : nreq);
    if (r >= nreq) return;
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
    // Past small_request's checks: more than 32 entries.
    const i64 count = end - start;
    const i64 ntiles = (count + WRITE_TILE - 1) / WRITE_TILE;
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    // The chain-position assert needs a previous position: only a seeded chain has one.
    const bool chain_assert = seed >= 0 && assert_flag;
    const int w = worker_index();

    // Chain state (warp 0, the same in every lane).
    u64 running = CHAIN_HEAD;
    i64 prev_pos = 0, written = 0;

    for (i64 t = -1; t <= ntiles; ++t) {
        if (tid < 32) {
            if (t == -1) {
                if (seed >= 0) {
                    const Slot sd = load_slot(a.buf, a.stride, seed);
                    running = slot_hash(sd);
                    prev_pos = sd.position;
                }
            } else if (t < ntiles) {
                Tile& tl = s_tiles[t % WRITE_BUFS];
                const int len = static_cast<int>(min(static_cast<i64>(WRITE_TILE), count - t * WRITE_TILE));
                const int m = list_kept(tl, len);
                if (chain_assert) {
                    chain_tile<true>(tl, m, running, prev_pos);
                } else {
                    chain_tile<false>(tl, m, running, prev_pos);
                }
                if (INPUT_ASSERT || chain_assert) reserve_tile_rows<INPUT_ASSERT>(ring, tl, m, chain_assert);
                written += m;
            }
            __syncwarp();
        } else if (w >= 0) {
            if (t - 1 >= 0) {
                store_kept<KV, INPUT_ASSERT>(a, ring, s_tiles[(t - 1) % WRITE_BUFS], w,
                                         start + (t - 1) * WRITE_TILE, chain_assert);
            }
            if (t + 1 < ntiles) {
                const i64 i0 = start + (t + 1) * WRITE_TILE;
                const int len = static_cast<int>(min(static_cast<i64>(WRITE_TILE), count - (t + 1) * WRITE_TILE));
                load_tile<KV, INPUT_ASSERT>(a, s_tiles[(t + 1) % WRITE_BUFS], w, i0, len);
            }
            if (KV != 0 && t >= 0 && t < ntiles) {
                // The chain does not need the folds: tile t's are made while it runs tile t
                // (rows checked when the entry was loaded).
                Tile& tl = s_tiles[t % WRITE_BUFS];
                const int len = static_cast<int>(min(static_cast<i64>(WRITE_TILE), count - t * WRITE_TILE));
                if (w < len && !(tl.flags[w] & F_SKIP)) {
                    tl.rk[w] = static_cast<i64>(real_kv_hash<KV == 1>(a.kv, tl.slot[w]));
                }
            }
            __syncwarp();  // each warp reaches the block barrier converged
        }
        __syncthreads();
    }
    if (tid == 0 && written > 0) atomic_add_i64(a.slot_counter, written);
}

}  // namespace kvc

using kvc::WriteArgs;
KVC_CHECK_LAYOUT_WriteArgs(WriteArgs);
static_assert(kvc::WRITE_THREADS == kvc::RUST_WRITE_THREADS, "WRITE_THREADS (src/cuda/abi/shared.rs)");

// The K+V pair launch of a write (KVC_PAIR_ENTRY in common.cuh): the K and the V chains of
// every request run side by side.
struct WritePairArgs {
    WriteArgs k;
    WriteArgs v;
};
KVC_CHECK_LAYOUT_WritePairArgs(WritePairArgs);

// Deferred head writes (KernelTuning::defer_head_writes): the tail writes of a step and its
// head writes in one launch of grid y = 4 (tail K, tail V, head K, head V), the head halves
// over no real-KV source (so their fingerprint is 0, as the NONE kernel's). The head buffers
// are read and written by nothing between the head verify and the next step's, so their
// stamp may wait for the tail.
struct WriteEndsArgs {
    WriteArgs tail_k;
    WriteArgs tail_v;
    WriteArgs head_k;
    WriteArgs head_v;
};
KVC_CHECK_LAYOUT_WriteEndsArgs(WriteEndsArgs);

// Each entry point NAME comes with NAME_pair, its K+V pair launch, and NAME_ends (above).
// write_body runs grid_prologue() itself (after the early folds it may do first).
#define KVC_WRITE_ENTRY(NAME, KV, ASSERT)                                                     \
    extern "C" __global__ void __launch_bounds__(kvc::WRITE_THREADS, 2) NAME(WriteArgs a) { \
        kvc::write_body<KV, ASSERT>(a);                                                      \
    }                                                                                        \
    KVC_PAIR_ENTRY_OWN_PROLOGUE(NAME, kvc::WRITE_THREADS, 2, WritePairArgs,                  \
                                (kvc::write_body<KV, ASSERT>))                               \
    extern "C" __global__ void __launch_bounds__(kvc::WRITE_THREADS, 2)                      \
        NAME##_ends(WriteEndsArgs p) {                                                       \
        const unsigned y = blockIdx.y;                                                       \
        kvc::write_body<KV, ASSERT>(y == 0   ? p.tail_k                                      \
                                    : y == 1 ? p.tail_v                                      \
                                    : y == 2 ? p.head_k                                      \
                                             : p.head_v);                                    \
    }

// Name suffixes: _partial / _all = real-KV fold; _assert = input assert on; _pair = the K+V
// pair launch.
KVC_WRITE_ENTRY(kv_canary_write, 0, false)
KVC_WRITE_ENTRY(kv_canary_write_assert, 0, true)
KVC_WRITE_ENTRY(kv_canary_write_partial, 1, false)
KVC_WRITE_ENTRY(kv_canary_write_partial_assert, 1, true)
KVC_WRITE_ENTRY(kv_canary_write_all, 2, false)
KVC_WRITE_ENTRY(kv_canary_write_all_assert, 2, true)
