// Hardware floors the benchmark measures in the same run as the ops (issue #5):
//  * gather floor: the verify op's memory traffic alone (index loads plus random 32-byte
//    self + predecessor gathers), full grid, no hashing and no compares;
//  * chain floor: n dependent mix3 steps in one thread, no memory: the write op's serial part.
#include "common.cuh"


extern "C" __global__ void __launch_bounds__(512, 4)
    kv_canary_gather_floor(const i64* slots, const i64* prevs, i64 n, const unsigned char* buf,
                           i64 stride, i64* sink) {
    u64 acc = 0;
    const i64 step = static_cast<i64>(gridDim.x) * blockDim.x;
    for (i64 e = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
        const i64 s = __ldg(slots + e);
        const i64 p = __ldg(prevs + e);
        const kvc::Slot a = kvc::load_slot(buf, stride, s);
        acc ^= static_cast<u64>(a.token ^ a.position ^ a.prev_hash ^ a.real_kv_hash);
        if (p > 0) {
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
