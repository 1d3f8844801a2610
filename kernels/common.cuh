// Shared device code of the kv-canary kernels: hashes (spec §2.2), the real-KV fold (§2.11),
// canary slot access (§2.3), the violation sink (§2.6) and the sticky status word.
//
// Every kernel takes one argument struct by value. Its Rust twin (src/cuda/abi.rs) is #[repr(C)]
// with the same field order; every field is 8 bytes wide (pointers, i64), so both sides agree on
// the layout without padding rules.
#pragma once
#include <stdint.h>

typedef long long i64;
typedef unsigned long long u64;
typedef int i32;
typedef unsigned int u32;

namespace kvc {

// splitmix64(CANARY_CHAIN_ANCHOR): the prev hash of every chain head.
constexpr u64 CHAIN_HEAD = 0xDE7FAE23A9A1B716ull;
constexpr int VIOLATION_FIELDS = 8;
constexpr int MAX_REAL_KV_SOURCES = 4;

// FailReason bits (spec §2.9).
constexpr i64 VERIFY_CHAIN_HASH_MISMATCH = 1;
constexpr i64 VERIFY_POSITION_MISMATCH = 2;
constexpr i64 VERIFY_REAL_KV_HASH_MISMATCH = 4;
constexpr i64 WRITE_TOKEN_MISMATCH = 8;
constexpr i64 WRITE_POSITION_MISMATCH = 16;
constexpr i64 VERIFY_TOKEN_MISMATCH = 32;

// RealKvHashMode (spec §2.11).
constexpr i64 REAL_KV_NONE = 0;
constexpr i64 REAL_KV_PARTIAL = 1;

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ u64 mix3(u64 a, u64 b, u64 c) {
    return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c);
}

// ---------------------------------------------------------------------------------------------
// Status word: i64[STATUS_WORDS] in device memory, sticky. The first error since the host last
// cleared it wins (atomicCAS on the code); later errors leave it alone. Codes and fields are
// decoded by src/cuda/status.rs; keep both lists in step.
// ---------------------------------------------------------------------------------------------
constexpr int STATUS_WORDS = 8;
enum StatusCode : i64 {
    ST_OK = 0,
    ST_BATCH_EXCEEDS_CAPACITY = 1,  // a = bs, b = write_req_capacity
    ST_BATCH_TOO_LARGE = 2,         // a = bs, b = PLAN_MAX_ROWS
    ST_REQ_POOL_INDEX = 3,          // a = row, b = req_pool_index, c = table rows
    ST_PREFIX_BEYOND_ROW = 4,       // a = row, b = prefix_len, c = table width
    ST_EXPECTED_READ = 5,           // a = row, b = req_pool_index, c = column, d = rows, e = cols
    ST_WRITE_TOKEN_OVERFLOW = 6,    // a = row
    ST_LUT_INDEX = 7,               // a = slot, b = lut_len
    ST_SLOT_OUT_OF_RANGE = 8,       // a = which array, b = index, c = slot, d = num_slots
    ST_WRITE_RANGE = 9,             // a = offset index, b = value, c = smallest allowed, d = largest
    ST_REAL_KV_ROW = 10,            // a = source, b = slot, c = row, d = num_rows
    ST_VALID_LENS_LENGTH = 11,      // a = bs, b = valid_lens length
    ST_NEGATIVE_BS = 12,            // a = bs
    ST_SCATTER_RANGE = 13,          // a = offset index, b = value, c = smallest allowed, d = largest
    ST_POOL_ROW = 14,               // a = row, b = req_pool_index, c = pool rows
};
// `which` of ST_SLOT_OUT_OF_RANGE.
enum SlotArray : i64 {
    SA_VERIFY_SLOT = 0,
    SA_VERIFY_PREV = 1,
    SA_OUT_CACHE_LOC = 2,
    SA_WRITE_SEED = 3,
};

__device__ __forceinline__ void record_status(i64* status, i64 code, i64 a, i64 b = 0, i64 c = 0,
                                              i64 d = 0, i64 e = 0) {
    if (atomicCAS(reinterpret_cast<u64*>(status), 0ull, static_cast<u64>(code)) == 0ull) {
        status[1] = a;
        status[2] = b;
        status[3] = c;
        status[4] = d;
        status[5] = e;
    }
}

// ---------------------------------------------------------------------------------------------
// Canary slots (spec §2.3): four little-endian i64 at byte offsets 0, 8, 16, 24 of each slot.
// The host guarantees stride % 8 == 0 and stride >= 32; 16-byte vector accesses are used when
// stride % 16 == 0 (the buffer base comes from cuMemAlloc, 256-byte aligned).
// ---------------------------------------------------------------------------------------------
struct Slot {
    i64 token, position, prev_hash, real_kv_hash;
};

__device__ __forceinline__ Slot load_slot(const unsigned char* buf, i64 stride, i64 s) {
    const unsigned char* p = buf + s * stride;
    Slot out;
    if ((stride & 15) == 0) {
        longlong2 a = __ldg(reinterpret_cast<const longlong2*>(p));
        longlong2 b = __ldg(reinterpret_cast<const longlong2*>(p + 16));
        out.token = a.x;
        out.position = a.y;
        out.prev_hash = b.x;
        out.real_kv_hash = b.y;
    } else {
        const i64* q = reinterpret_cast<const i64*>(p);
        out.token = __ldg(q);
        out.position = __ldg(q + 1);
        out.prev_hash = __ldg(q + 2);
        out.real_kv_hash = __ldg(q + 3);
    }
    return out;
}

// A slot's chain hash as its successor expects it (compute_slot_hash, s >= 0).
__device__ __forceinline__ u64 slot_hash(const Slot& s) {
    return mix3(static_cast<u64>(s.prev_hash), static_cast<u64>(s.token),
                static_cast<u64>(s.position));
}

__device__ __forceinline__ void store_slot(unsigned char* buf, i64 stride, i64 s, const Slot& v) {
    unsigned char* p = buf + s * stride;
    if ((stride & 15) == 0) {
        reinterpret_cast<longlong2*>(p)[0] = make_longlong2(v.token, v.position);
        reinterpret_cast<longlong2*>(p)[1] = make_longlong2(v.prev_hash, v.real_kv_hash);
    } else {
        i64* q = reinterpret_cast<i64*>(p);
        q[0] = v.token;
        q[1] = v.position;
        q[2] = v.prev_hash;
        q[3] = v.real_kv_hash;
    }
}

// ---------------------------------------------------------------------------------------------
// Real-KV sources (spec §2.10, §2.11). The host validated page_size >= 1, bytes_per_token and
// read_bytes positive multiples of 16, read_bytes <= bytes_per_token,
// page_size * bytes_per_token <= row_stride and row_stride % 16 == 0; rows are checked here.
// ---------------------------------------------------------------------------------------------
struct RealKv {
    const unsigned char* base[MAX_REAL_KV_SOURCES];
    i64 row_stride[MAX_REAL_KV_SOURCES];
    i64 num_rows[MAX_REAL_KV_SOURCES];
    i64 page_size[MAX_REAL_KV_SOURCES];
    i64 bytes_per_token[MAX_REAL_KV_SOURCES];
    i64 read_bytes[MAX_REAL_KV_SOURCES];
    i64 num_sources;  // 0..=4
    i64 mode;         // 0 NONE, 1 PARTIAL, anything else ALL
};

__device__ __forceinline__ bool real_kv_active(const RealKv& kv) {
    return kv.mode != REAL_KV_NONE && kv.num_sources > 0;
}

// Whether every source has a row for slot s; records ST_REAL_KV_ROW for the first that has not.
__device__ __forceinline__ bool real_kv_rows_ok(const RealKv& kv, i64 s, i64* status) {
#pragma unroll
    for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
        if (k < kv.num_sources) {
            const i64 page = kv.page_size[k];
            const i64 row = page == 1 ? s : s / page;  // 64-bit division only for real pages
            if (row >= kv.num_rows[k]) {
                record_status(status, ST_REAL_KV_ROW, k, s, row, kv.num_rows[k]);
                return false;
            }
        }
    }
    return true;
}

// Fold of one source's strip for slot s: 8-byte words, h = splitmix64(h ^ w). PARTIAL folds the
// first 16 bytes, ALL the first read_bytes; loads run PREFETCH 16-byte vectors ahead of the
// (serial) fold.
template <bool PARTIAL, int PREFETCH = 4>
__device__ __forceinline__ u64 source_hash(const RealKv& kv, int k, i64 s) {
    const i64 page = kv.page_size[k];
    const i64 row = page == 1 ? s : s / page;
    const i64 col0 = (s - row * page) * kv.bytes_per_token[k];
    const ulonglong2* v =
        reinterpret_cast<const ulonglong2*>(kv.base[k] + row * kv.row_stride[k] + col0);
    if (PARTIAL) {
        const ulonglong2 w = __ldg(v);
        return splitmix64(splitmix64(w.x) ^ w.y);
    }
    const i64 vectors = kv.read_bytes[k] >> 4;
    u64 h = 0;
    for (i64 base = 0; base < vectors; base += PREFETCH) {
        ulonglong2 w[PREFETCH];
#pragma unroll
        for (int j = 0; j < PREFETCH; ++j) {
            if (base + j < vectors) w[j] = __ldg(v + base + j);
        }
#pragma unroll
        for (int j = 0; j < PREFETCH; ++j) {
            if (base + j < vectors) {
                h = splitmix64(h ^ w[j].x);
                h = splitmix64(h ^ w[j].y);
            }
        }
    }
    return h;
}

// real_kv_hash(slot) (spec §2.11) for an active configuration (mode != NONE, sources > 0); the
// caller checked the rows with real_kv_rows_ok.
template <bool PARTIAL>
__device__ __forceinline__ u64 real_kv_hash(const RealKv& kv, i64 s) {
    u64 acc = 0;
#pragma unroll
    for (int k = 0; k < MAX_REAL_KV_SOURCES; ++k) {
        if (k < kv.num_sources) acc = splitmix64(acc ^ source_hash<PARTIAL>(kv, k, s));
    }
    return acc;
}

// real_kv_hash(slot) for any configuration: 0 in NONE mode or without sources.
__device__ __forceinline__ u64 real_kv_hash_any(const RealKv& kv, i64 s) {
    if (!real_kv_active(kv)) return 0;
    return kv.mode == REAL_KV_PARTIAL ? real_kv_hash<true>(kv, s) : real_kv_hash<false>(kv, s);
}

// ---------------------------------------------------------------------------------------------
// Violation ring (spec §2.6): seq = atomicAdd(index, n); rows past the capacity are dropped, the
// index keeps counting. Rows are plain stores followed by a system-scope fence.
// ---------------------------------------------------------------------------------------------
struct Ring {
    i64* rows;          // [capacity][8]
    i64 capacity;
    i32* write_index;   // [1]
};

__device__ __forceinline__ void store_violation(const Ring& ring, i64 seq, i64 f0, i64 f1, i64 f2,
                                                i64 f3, i64 f4, i64 f5, i64 f6, i64 f7) {
    if (seq < 0 || seq >= ring.capacity) return;
    i64* r = ring.rows + seq * VIOLATION_FIELDS;
    r[0] = f0;
    r[1] = f1;
    r[2] = f2;
    r[3] = f3;
    r[4] = f4;
    r[5] = f5;
    r[6] = f6;
    r[7] = f7;
    __threadfence_system();
}

// Reserves n consecutive rows; returns the first sequence number.
__device__ __forceinline__ i64 reserve_violations(const Ring& ring, int n) {
    return static_cast<i64>(static_cast<u32>(atomicAdd(ring.write_index, n)));
}

__device__ __forceinline__ void atomic_add_i64(i64* p, i64 v) {
    atomicAdd(reinterpret_cast<u64*>(p), static_cast<u64>(v));
}

}  // namespace kvc

static_assert(sizeof(kvc::RealKv) == 26 * 8, "RealKv layout (src/cuda/abi.rs)");
