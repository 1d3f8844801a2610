// Hardware floors the benchmark measures in the same run as the ops (issue #5):
//  * stage (gather) floor: the verify op's memory traffic alone (index loads plus the random
//    32-byte gathers of each entry's slot and of its predecessor's, the predecessor taken from
//    the lane before when it is that lane's slot, as the verify kernel does), full grid, no
//    hashing and no compares; for one launch's buffer, or the two halves of a K+V pair launch
//    side by side, with the 16-byte real-KV read of a PARTIAL tail stage;
//  * chain floor: n dependent mix3 steps in one thread, no memory: the write op's serial part.
#include "common.cuh"


// Stage floor: the gather floor of one verify launch, or of a stage's pair launch. Blocks
// [0, blocks_per_half) run the K half (the only one, for one launch), the next blocks_per_half
// the V half: the index loads and the 32-byte canary gathers of each entry on the half's own
// buffer (the predecessor from the lane before when it is that lane's slot, as the verify kernel
// does), plus, when the half has a real-KV pool (kv != null, a tail stage in PARTIAL mode), the
// 16 bytes at the start of the entry's row (the random sector the fold reads).
extern "C" __global__ void __launch_bounds__(512, 4)
    kv_canary_stage_floor(const i64* slots, const i64* prevs, i64 n, i64 blocks_per_half,
                          const unsigned char* buf0, const unsigned char* kv0,
                          const unsigned char* buf1, const unsigned char* kv1, i64 stride,
                          i64 kv_row_stride, i64* sink) {
    const bool second = static_cast<i64>(blockIdx.x) >= blocks_per_half;
    const unsigned char* buf = second ? buf1 : buf0;
    const unsigned char* kv = second ? kv1 : kv0;
    const i64 bx = static_cast<i64>(blockIdx.x) - (second ? blocks_per_half : 0);
    u64 acc = 0;
    const int lane = threadIdx.x & 31;
    const i64 step = blocks_per_half * blockDim.x;
    const i64 first = bx * blockDim.x + (threadIdx.x & ~31u);
    for (i64 base = first; base < n; base += step) {
        const i64 e = base + lane;
        const i64 s = e < n ? __ldg(slots + e) : 0;
        const i64 p = e < n ? __ldg(prevs + e) : 0;
        const i64 s_before = __shfl_up_sync(0xffffffffu, s, 1);
        const bool shared = lane > 0 && s_before > 0 && p == s_before;
        if (s > 0) {
            const kvc::Slot a = kvc::load_slot(buf, stride, s);
            acc ^= static_cast<u64>(a.token ^ a.position ^ a.prev_hash ^ a.real_kv_hash);
            if (kv != nullptr) {
                const ulonglong2 w = __ldg(reinterpret_cast<const ulonglong2*>(kv + s * kv_row_stride));
                acc ^= w.x ^ w.y;
            }
        }
        if (p > 0 && !shared) {
            const kvc::Slot b = kvc::load_slot(buf, stride, p);
            acc ^= static_cast<u64>(b.token ^ b.position ^ b.prev_hash);
        }
    }
    if (acc == 0x0123456789ABCDEFull) *sink = static_cast<i64>(acc);  // keeps the loads alive
}

// One thread, so every value is warp-uniform and nvcc runs the chain on the uniform datapath
// (UIMAD, ULOP3, ...), which a chain inside a multi-warp kernel (per-thread values) cannot use.
extern "C" __global__ void kv_canary_chain_floor(i64 n, i64* out) {
    u64 h = kvc::CHAIN_HEAD;
    for (i64 i = 0; i < n; ++i) h = kvc::mix3(h, static_cast<u64>(i), static_cast<u64>(i));
    *out = static_cast<i64>(h);
}

// The same chain on the vector datapath: the start depends on the thread index, so nothing is
// uniform (as in the write kernel's chain thread).
extern "C" __global__ void kv_canary_chain_floor_vector(i64 n, i64* out) {
    u64 h = kvc::CHAIN_HEAD ^ threadIdx.x;
    for (i64 i = 0; i < n; ++i) h = kvc::mix3(h, static_cast<u64>(i), static_cast<u64>(i));
    *out = static_cast<i64>(h);
}

// Nothing: the cost of a launch (or graph replay) itself.
extern "C" __global__ void kv_canary_empty() {}

// One thread that spins until `ns` nanoseconds of the global timer have passed: queued ahead of
// a timed region, it keeps the GPU busy while the host queues the region, so the events time
// the device's work and not the host's submission.
extern "C" __global__ void kv_canary_spin(i64 ns) {
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (static_cast<i64>(t - t0) < ns);
}

// The SWA plan's memory traffic alone (issue #5's SWA workload): entry e reads idx[e] (4 bytes,
// coalesced), gathers lut[idx[e]] (8 bytes at a random place) and stores four 8-byte outputs.
// mode 0: all of it; 1: no gather (the index is stored instead); 2: no stores (gathers only).
// Four entries a thread per round, a full grid.
extern "C" __global__ void __launch_bounds__(512, 4)
    kv_canary_lut_floor(const i32* idx, i64 n, const i64* lut, i64* o0, i64* o1, i64* o2, i64* o3,
                        i64 mode) {
    const i64 step = static_cast<i64>(gridDim.x) * blockDim.x * 4;
    u64 acc = 0;
    for (i64 base = static_cast<i64>(blockIdx.x) * blockDim.x * 4 + threadIdx.x; base < n;
         base += step) {
        i32 x[4];
        i64 s[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const i64 e = base + static_cast<i64>(k) * blockDim.x;
            x[k] = e < n ? __ldg(idx + e) : 0;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const i64 e = base + static_cast<i64>(k) * blockDim.x;
            s[k] = (e < n && mode != 1) ? __ldg(lut + x[k]) : x[k];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const i64 e = base + static_cast<i64>(k) * blockDim.x;
            if (e < n) {
                if (mode == 2) {
                    acc ^= static_cast<u64>(s[k]);
                } else {
                    o0[e] = s[k];
                    o1[e] = -1;
                    o2[e] = e;
                    o3[e] = s[k];
                }
            }
        }
    }
    if (acc == 0x0123456789ABCDEFull) *o0 = static_cast<i64>(acc);  // keeps the gathers alive
}

// `hops` dependent loads (a pointer chase through `next`, indices), then one store: what a
// kernel whose work is a chain of round trips to memory costs at the least.
extern "C" __global__ void kv_canary_dependent_loads(const i64* next, i64 hops, i64* out) {
    i64 x = 0;
    for (i64 i = 0; i < hops; ++i) x = __ldg(next + x);
    if (threadIdx.x == 0) *out = x;
}
