// Layout experiment: random 32-byte canary record gathers of a K+V pair verify, from two
// separate buffers (stride 32) vs interleaved (stride 64 / 128, K at +0, V at +32), with and
// without a 16-byte real-KV read per entry from two 2 KB-row pools.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <random>
#include <cuda_runtime.h>
typedef long long i64;
struct Rec { int4 a, b; };
__device__ __forceinline__ Rec load_rec(const unsigned char* p) {
  Rec r; r.a = __ldg(reinterpret_cast<const int4*>(p)); r.b = __ldg(reinterpret_cast<const int4*>(p) + 1); return r;
}
// y = half (0: K, 1: V). buf[y] base, stride; kv[y] pool (nullptr: none).
__global__ void __launch_bounds__(512, 2) pair_gather(const i64* slots, const i64* prevs, const i64* pos, i64 n,
    const unsigned char* b0, const unsigned char* b1, i64 stride,
    const unsigned char* kv0, const unsigned char* kv1, i64* sink) {
  const unsigned char* buf = blockIdx.y ? b1 : b0;
  const unsigned char* kv = blockIdx.y ? kv1 : kv0;
  unsigned acc = 0;
  const int lane = threadIdx.x & 31;
  const i64 step = (i64)gridDim.x * blockDim.x;
  const i64 first = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31u);
  for (i64 base = first; base < n; base += step) {
    const i64 e = base + lane;
    i64 s = 0, p = 0, ps = 0;
    if (e < n) { s = __ldg(slots + e); p = __ldg(prevs + e); ps = __ldg(pos + e); }
    const i64 sb = __shfl_up_sync(0xffffffffu, s, 1);
    const bool shared = lane > 0 && sb > 0 && p == sb;
    if (s > 0) {
      Rec r = load_rec(buf + s * stride);
      acc ^= r.a.x ^ r.b.w ^ (unsigned)ps;
      if (kv) { int4 k = __ldg(reinterpret_cast<const int4*>(kv + s * 2048)); acc ^= k.x ^ k.w; }
    }
    if (p > 0 && !shared) { Rec r = load_rec(buf + p * stride); acc ^= r.a.y; }
  }
  if (acc == 0x12345678u) *sink = acc;
}
// One thread loads both halves' records (stride 64 interleave: one 64-byte unit).
__global__ void __launch_bounds__(512, 2) fused_gather(const i64* slots, const i64* prevs, const i64* pos, i64 n,
    const unsigned char* b, i64 stride, const unsigned char* kv0, const unsigned char* kv1, i64* sink) {
  unsigned acc = 0;
  const int lane = threadIdx.x & 31;
  const i64 step = (i64)gridDim.x * blockDim.x;
  const i64 first = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31u);
  for (i64 base = first; base < n; base += step) {
    const i64 e = base + lane;
    i64 s = 0, p = 0, ps = 0;
    if (e < n) { s = __ldg(slots + e); p = __ldg(prevs + e); ps = __ldg(pos + e); }
    const i64 sb = __shfl_up_sync(0xffffffffu, s, 1);
    const bool shared = lane > 0 && sb > 0 && p == sb;
    if (s > 0) {
      Rec r = load_rec(b + s * stride); Rec q = load_rec(b + s * stride + 32);
      acc ^= r.a.x ^ r.b.w ^ q.a.x ^ q.b.w ^ (unsigned)ps;
      if (kv0) { int4 k = __ldg(reinterpret_cast<const int4*>(kv0 + s * 2048)); int4 v = __ldg(reinterpret_cast<const int4*>(kv1 + s * 2048)); acc ^= k.x ^ v.w; }
    }
    if (p > 0 && !shared) { Rec r = load_rec(b + p * stride); Rec q = load_rec(b + p * stride + 32); acc ^= r.a.y ^ q.a.y; }
  }
  if (acc == 0x12345678u) *sink = acc;
}
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
int main(int argc, char** argv) {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = sms * 2;
  for (int bs : {1, 64, 256}) {
    const i64 prefix = 2048, n = bs * prefix, slots_n = n + 1 + bs;
    std::vector<i64> perm(slots_n - 1); for (i64 i = 0; i < slots_n - 1; ++i) perm[i] = i + 1;
    std::mt19937_64 rng(42); std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<i64> hs(n), hp(n), hpos(n);
    for (i64 r = 0; r < bs; ++r) for (i64 j = 0; j < prefix; ++j) { i64 e = r * prefix + j; hs[e] = perm[e]; hp[e] = j ? perm[e - 1] : -1; hpos[e] = j; }
    i64 *ds, *dp, *dpos, *sink; unsigned char *sep0, *sep1, *il64, *il128, *kv0, *kv1;
    CK(cudaMalloc(&ds, n * 8)); CK(cudaMalloc(&dp, n * 8)); CK(cudaMalloc(&dpos, n * 8)); CK(cudaMalloc(&sink, 8));
    CK(cudaMemcpy(ds, hs.data(), n * 8, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dp, hp.data(), n * 8, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dpos, hpos.data(), n * 8, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&sep0, slots_n * 32)); CK(cudaMalloc(&sep1, slots_n * 32)); CK(cudaMalloc(&il64, slots_n * 64)); CK(cudaMalloc(&il128, slots_n * 128));
    CK(cudaMalloc(&kv0, slots_n * 2048)); CK(cudaMalloc(&kv1, slots_n * 2048));
    CK(cudaMemset(sep0, 1, slots_n * 32)); CK(cudaMemset(sep1, 2, slots_n * 32)); CK(cudaMemset(il64, 3, slots_n * 64)); CK(cudaMemset(il128, 4, slots_n * 128));
    CK(cudaMemset(kv0, 5, slots_n * 2048)); CK(cudaMemset(kv1, 6, slots_n * 2048));
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    auto timeit = [&](const char* name, auto launch) {
      for (int i = 0; i < 5; ++i) launch();
      std::vector<float> t;
      for (int i = 0; i < 60; ++i) { CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b)); float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000); }
      std::sort(t.begin(), t.end());
      printf("bs %3d N %7lld  %-44s median %7.2f us  min %7.2f\n", bs, n, name, t[t.size() / 2], t[0]);
    };
    dim3 g2(grid, 2), g1(grid, 1);
    // also a 4x-grid variant
    dim3 g2b(sms * 4, 2);
    timeit("separate 32 B buffers, pair grid", [&] { pair_gather<<<g2, 512>>>(ds, dp, dpos, n, sep0, sep1, 32, nullptr, nullptr, sink); });
    timeit("interleaved stride 64, pair grid", [&] { pair_gather<<<g2, 512>>>(ds, dp, dpos, n, il64, il64 + 32, 64, nullptr, nullptr, sink); });
    timeit("interleaved stride 128, pair grid", [&] { pair_gather<<<g2, 512>>>(ds, dp, dpos, n, il128, il128 + 32, 128, nullptr, nullptr, sink); });
    timeit("interleaved stride 64, one thread both", [&] { fused_gather<<<g1, 512>>>(ds, dp, dpos, n, il64, 64, nullptr, nullptr, sink); });
    timeit("separate, pair grid x4 blocks", [&] { pair_gather<<<g2b, 512>>>(ds, dp, dpos, n, sep0, sep1, 32, nullptr, nullptr, sink); });
    timeit("separate + KV 16 B, pair grid", [&] { pair_gather<<<g2, 512>>>(ds, dp, dpos, n, sep0, sep1, 32, kv0, kv1, sink); });
    timeit("interleaved 64 + KV 16 B, pair grid", [&] { pair_gather<<<g2, 512>>>(ds, dp, dpos, n, il64, il64 + 32, 64, kv0, kv1, sink); });
    timeit("interleaved 128 + KV 16 B, pair grid", [&] { pair_gather<<<g2, 512>>>(ds, dp, dpos, n, il128, il128 + 32, 128, kv0, kv1, sink); });
    timeit("interleaved 64 + KV, one thread both", [&] { fused_gather<<<g1, 512>>>(ds, dp, dpos, n, il64, 64, kv0, kv1, sink); });
    timeit("K only: separate, one half", [&] { pair_gather<<<g1, 512>>>(ds, dp, dpos, n, sep0, sep1, 32, nullptr, nullptr, sink); });
    timeit("K only: separate + KV, one half", [&] { pair_gather<<<g1, 512>>>(ds, dp, dpos, n, sep0, sep1, 32, kv0, kv1, sink); });
    CK(cudaGetLastError());
    cudaFree(ds); cudaFree(dp); cudaFree(dpos); cudaFree(sink); cudaFree(sep0); cudaFree(sep1); cudaFree(il64); cudaFree(il128); cudaFree(kv0); cudaFree(kv1);
  }
  return 0;
}
