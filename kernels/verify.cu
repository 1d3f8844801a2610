// The verify op (spec §5) over a full grid (every SM, several blocks each), grid-stride over the
// active entries. Per entry the self and predecessor slots are gathered together (two
// independent 32-byte loads in flight); with real-KV sources in ALL mode four lanes share an
// entry, each folding one source, so the per-slot folds run side by side instead of in series.
#include "common.cuh"

namespace kvc {

constexpr int VERIFY_THREADS = 512;

struct VerifyArgs {
    const i64* slots;
    const i64* tokens;
    const i64* positions;
    const i64* prevs;
    const i32* num_valid;
    const i32* enable;
    i64 capacity;
    const unsigned char* buf;
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

// Checks one entry; `fold` is this entry's real-KV hash (0 in NONE mode). Returns nothing: a
// mismatch is appended to the ring.
template <bool CHECK_TOKEN>
__device__ __forceinline__ void check_entry(const VerifyArgs& a, const Ring& ring, i64 e, i64 s,
                                            i64 prev, const Slot& st, const Slot& pv, u64 fold) {
    const i64 et = CHECK_TOKEN ? __ldg(a.tokens + e) : -1;
    const i64 ep = __ldg(a.positions + e);
    const bool reachable = prev != 0;
    const i64 ech = !reachable ? st.prev_hash
                   : prev < 0  ? static_cast<i64>(CHAIN_HEAD)
                               : static_cast<i64>(slot_hash(pv));
    i64 bits = 0;
    if (reachable && st.prev_hash != ech) bits |= VERIFY_CHAIN_HASH_MISMATCH;
    if (CHECK_TOKEN && et != -1 && st.token != et) bits |= VERIFY_TOKEN_MISMATCH;
    if (st.position != ep) bits |= VERIFY_POSITION_MISMATCH;
    if (st.real_kv_hash != static_cast<i64>(fold)) bits |= VERIFY_REAL_KV_HASH_MISMATCH;
    if (bits != 0) {
        const i64 seq = reserve_violations(ring, 1);
        store_violation(ring, seq, a.tag, s, st.position, st.token, et, st.prev_hash, ech, bits);
    }
}

// Whether entry e can be served; records why not in the status word. Slot 0 is skipped silently.
template <bool HAS_KV>
__device__ __forceinline__ bool entry_in_range(const VerifyArgs& a, i64 e, i64 s, i64 prev) {
    if (s == 0) return false;
    if (s < 0 || s >= a.num_slots) {
        record_status(a.status, ST_SLOT_OUT_OF_RANGE, SA_VERIFY_SLOT, e, s, a.num_slots);
        return false;
    }
    if (prev >= a.num_slots) {
        record_status(a.status, ST_SLOT_OUT_OF_RANGE, SA_VERIFY_PREV, e, prev, a.num_slots);
        return false;
    }
    if (HAS_KV && !real_kv_rows_ok(a.kv, s, a.status)) return false;
    return true;
}

__device__ __forceinline__ i64 active_entries(const VerifyArgs& a, bool& enabled) {
    enabled = *a.enable != 0;
    i64 n = *a.num_valid;
    if (n < 0) n = 0;
    if (n > a.capacity) n = a.capacity;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        atomic_add_i64(a.kernel_counter, 1);
        if (enabled) atomic_add_i64(a.slot_counter, n);
    }
    return enabled ? n : 0;
}

// Real-KV handling of a variant.
enum KvKind { KV_NONE = 0, KV_PARTIAL = 1 };

// One thread per entry: no real-KV fold (NONE mode or no sources), or PARTIAL (16 bytes a source).
template <int KV, bool CHECK_TOKEN>
__device__ __forceinline__ void verify_single(const VerifyArgs& a) {
    bool enabled;
    const i64 n = active_entries(a, enabled);
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    const i64 step = static_cast<i64>(gridDim.x) * blockDim.x;
    for (i64 e = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
        const i64 s = __ldg(a.slots + e);
        const i64 prev = __ldg(a.prevs + e);
        if (!entry_in_range<KV != KV_NONE>(a, e, s, prev)) continue;
        const Slot st = load_slot(a.buf, a.stride, s);
        Slot pv = {};
        if (prev > 0) pv = load_slot(a.buf, a.stride, prev);
        const u64 fold = KV == KV_NONE ? 0 : real_kv_hash<true>(a.kv, s);
        check_entry<CHECK_TOKEN>(a, ring, e, s, prev, st, pv, fold);
    }
}

// ALL mode: four lanes per entry, lane q folds source q, the group's first lane checks the slot.
template <int KV, bool CHECK_TOKEN>
__device__ __forceinline__ void verify_grouped(const VerifyArgs& a) {
    bool enabled;
    const i64 n = active_entries(a, enabled);
    const Ring ring = {a.ring, a.ring_capacity, a.write_index};
    const int lane = threadIdx.x & 31;
    const int q = lane & 3;
    const int leader = lane & ~3;
    const i64 groups = static_cast<i64>(gridDim.x) * blockDim.x / 4;
    const i64 warp_first = (static_cast<i64>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31)) / 4;
    for (i64 base = warp_first; base < n; base += groups) {
        const i64 e = base + (lane >> 2);
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
            const u64 hk = __shfl_sync(0xffffffffu, h, leader + k);
            if (k < a.kv.num_sources) acc = splitmix64(acc ^ hk);
        }
        if (ok && q == 0) check_entry<CHECK_TOKEN>(a, ring, e, s, prev, st, pv, acc);
    }
}

}  // namespace kvc

using kvc::VerifyArgs;
static_assert(sizeof(VerifyArgs) == 17 * 8 + 26 * 8, "VerifyArgs layout (src/cuda/abi.rs)");

#define KVC_VERIFY_ENTRY(NAME, BODY, KV, CHECK, MIN_BLOCKS)                                        \
    extern "C" __global__ void __launch_bounds__(kvc::VERIFY_THREADS, MIN_BLOCKS) NAME(VerifyArgs a) { \
        kvc::BODY<KV, CHECK>(a);                                                                    \
    }

// Name suffixes: _tokens = expected-token check on; _partial / _all = real-KV fold.
KVC_VERIFY_ENTRY(kv_canary_verify, verify_single, kvc::KV_NONE, false, 4)
KVC_VERIFY_ENTRY(kv_canary_verify_tokens, verify_single, kvc::KV_NONE, true, 4)
KVC_VERIFY_ENTRY(kv_canary_verify_partial, verify_single, kvc::KV_PARTIAL, false, 2)
KVC_VERIFY_ENTRY(kv_canary_verify_partial_tokens, verify_single, kvc::KV_PARTIAL, true, 2)
// ALL: one block of 512 a multiprocessor, so that each lane keeps its source's 128 bytes in
// registers (8 x 16-byte loads in flight) without spilling.
KVC_VERIFY_ENTRY(kv_canary_verify_all, verify_grouped, 2, false, 1)
KVC_VERIFY_ENTRY(kv_canary_verify_all_tokens, verify_grouped, 2, true, 1)
