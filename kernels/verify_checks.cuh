// The verify op's arguments and its per-entry checks (spec §5), shared by the verify kernels
// (verify.cu) and the plan-and-head-verify kernels (plan.cu), which check each entry they plan
// with the same range checks, records and rows.
#pragma once

#include "common.cuh"

namespace kvc {

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
    // 1: this crate's launches of the step's head stage lie between the plan and this verify on
    // its stream (the step API's tail verify), so the plan was complete before this launch
    // could start; the PARTIAL kernel then loads its first plan columns before its wait.
    i64 early_columns;
};

// Checks one entry against its expected token `et` and position `ep`; `pv_hash` is the
// predecessor's chain hash (slot_hash of its record; read only when prev > 0), `fold` this
// entry's real-KV hash (0 in NONE mode). Returns nothing: a mismatch is appended to the ring.
template <bool CHECK_TOKEN>
__device__ __forceinline__ void check_hashed(const VerifyArgs& a, const Ring& ring, i64 e, i64 s,
                                             i64 prev, const Slot& st, u64 pv_hash, u64 fold,
                                             i64 et, i64 ep) {
    const bool reachable = prev != 0;
    const i64 ech = !reachable ? st.prev_hash
                   : prev < 0  ? static_cast<i64>(CHAIN_HEAD)
                               : static_cast<i64>(pv_hash);
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

// check_hashed of the predecessor's record `pv` (loaded when prev > 0).
template <bool CHECK_TOKEN>
__device__ __forceinline__ void check_values(const VerifyArgs& a, const Ring& ring, i64 e, i64 s,
                                             i64 prev, const Slot& st, const Slot& pv, u64 fold,
                                             i64 et, i64 ep) {
    const u64 pv_hash = prev > 0 ? slot_hash(pv) : 0;
    check_hashed<CHECK_TOKEN>(a, ring, e, s, prev, st, pv_hash, fold, et, ep);
}

// check_hashed with the expected token and position loaded from the plan.
template <bool CHECK_TOKEN>
__device__ __forceinline__ void check_entry_hashed(const VerifyArgs& a, const Ring& ring, i64 e,
                                                   i64 s, i64 prev, const Slot& st, u64 pv_hash,
                                                   u64 fold) {
    const i64 et = CHECK_TOKEN ? __ldg(a.tokens + e) : -1;
    const i64 ep = __ldg(a.positions + e);
    check_hashed<CHECK_TOKEN>(a, ring, e, s, prev, st, pv_hash, fold, et, ep);
}

// check_values with the expected token and position loaded from the plan.
template <bool CHECK_TOKEN>
__device__ __forceinline__ void check_entry(const VerifyArgs& a, const Ring& ring, i64 e, i64 s,
                                            i64 prev, const Slot& st, const Slot& pv, u64 fold) {
    const u64 pv_hash = prev > 0 ? slot_hash(pv) : 0;
    check_entry_hashed<CHECK_TOKEN>(a, ring, e, s, prev, st, pv_hash, fold);
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

// The plan's active entries (clamp(num_valid, 0, capacity), 0 when it is disabled): plan
// outputs only, so a launch with early_columns may read them before its wait.
__device__ __forceinline__ i64 planned_entries(const VerifyArgs& a, bool& enabled) {
    enabled = *a.enable != 0;
    i64 n = *a.num_valid;
    if (n < 0) n = 0;
    if (n > a.capacity) n = a.capacity;
    return n;
}

// Block 0 counts the launch (and, when enabled, its n entries) in the half's health counters.
__device__ __forceinline__ void count_launch(const VerifyArgs& a, bool enabled, i64 n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        atomic_add_i64(a.kernel_counter, 1);
        if (enabled) atomic_add_i64(a.slot_counter, n);
    }
}

__device__ __forceinline__ i64 active_entries(const VerifyArgs& a, bool& enabled) {
    const i64 n = planned_entries(a, enabled);
    count_launch(a, enabled, n);
    return enabled ? n : 0;
}

}  // namespace kvc
