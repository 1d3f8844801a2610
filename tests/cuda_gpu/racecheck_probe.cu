// Racecheck probe (docs/reliability.md, "The write kernel's racecheck finding"): the round
// structure of kernels/write.cu's multi-tile path with its data replaced by sums, in two
// variants that differ only in the workers' named barrier.
//
// 352 threads: warp 0 is the consumer (write.cu's chain warp), warps 1-3, 5-7, 9, 10 are the 256
// workers, warps 4 and 8 idle. Round t (t = -1 .. ntiles): the consumer reads tile t from buffer
// t % 3 (eight flags a lane as one 64-bit word, like list_kept; every value, like chain_tile);
// the workers (with NAMED) meet at `bar.sync 1, 256` around a per-warp scratch word (like
// store_kept's scan), then write tile t + 1 into buffer (t + 1) % 3 (like load_tile); every
// thread ends the round at __syncthreads. Each buffer access is ordered by a CTA-wide barrier,
// so both variants are race-free: a racecheck hazard in `kv_canary_probe_named` and none in
// `kv_canary_probe_plain` is racecheck misreading the named barrier.
//
// Regenerate the PTX (checked in: the GPU test binary embeds it):
//   nvcc -ptx -arch=sm_80 -std=c++17 -O3 -lineinfo -o tests/cuda_gpu/racecheck_probe.ptx \
//     tests/cuda_gpu/racecheck_probe.cu

constexpr int PROBE_TILE = 256;
constexpr int PROBE_BUFS = 3;
constexpr int PROBE_THREADS = 352;

struct ProbeTile {
    long long value[PROBE_TILE];
    unsigned char flag[PROBE_TILE];
};

// out[block * 352 + thread]: a consumer lane's sum over the block's tiles of its eight flags,
// its values (index = lane mod 32) and value (t * 37) % 256; a worker's sum of the scratch
// words it read (with NAMED); 0 for the idle warps.
template <bool NAMED>
__device__ __forceinline__ void probe(const long long* in, long long* out, int ntiles) {
    __shared__ ProbeTile tiles[PROBE_BUFS];
    __shared__ long long s_warp[8];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int w = (warp & 3) == 0 ? -1 : (warp - 1 - (warp > 4 ? 1 : 0) - (warp > 8 ? 1 : 0)) * 32 + lane;
    const long long* block_in = in + static_cast<long long>(blockIdx.x) * ntiles * PROBE_TILE;
    long long acc = 0;
    for (int t = -1; t <= ntiles; ++t) {
        if (tid < 32) {
            if (t >= 0 && t < ntiles) {
                const ProbeTile& tl = tiles[t % PROBE_BUFS];
                const unsigned long long flags8 = *reinterpret_cast<const unsigned long long*>(tl.flag + lane * 8);
                acc += __popcll(flags8);
                for (int j = lane; j < PROBE_TILE; j += 32) acc += tl.value[j];
                acc += tl.value[(t * 37) % PROBE_TILE];  // one value read by every lane
            }
            __syncwarp();
        } else if (w >= 0) {
            if (NAMED && t >= 1) {
                if (lane == 31) s_warp[w >> 5] = t;
                asm volatile("bar.sync 1, 256;" ::: "memory");
                for (int k = 0; k < 8; ++k) acc += s_warp[k];
            }
            if (t + 1 < ntiles) {
                ProbeTile& tl = tiles[(t + 1) % PROBE_BUFS];
                const long long v = block_in[(t + 1) * PROBE_TILE + w];
                tl.value[w] = v;
                tl.flag[w] = static_cast<unsigned char>(v & 1);
            }
            __syncwarp();
        }
        __syncthreads();
    }
    out[static_cast<long long>(blockIdx.x) * PROBE_THREADS + tid] = acc;
}

extern "C" __global__ void __launch_bounds__(PROBE_THREADS, 2)
    kv_canary_probe_named(const long long* in, long long* out, int ntiles) {
    probe<true>(in, out, ntiles);
}

extern "C" __global__ void __launch_bounds__(PROBE_THREADS, 2)
    kv_canary_probe_plain(const long long* in, long long* out, int ntiles) {
    probe<false>(in, out, ntiles);
}
