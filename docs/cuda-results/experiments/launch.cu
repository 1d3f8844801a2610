// Launch floor: replay time of a CUDA graph of k tiny kernels in a chain (k = 1..7), with plain
// stream edges and with programmatic (PDL) edges; the kernel is empty or does one dependent
// global load (a pointer chase of depth d) so each node has some latency.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
__global__ void chase(const long long* p, int depth, long long* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  long long i = threadIdx.x;
  for (int d = 0; d < depth; ++d) i = p[i];
  if (i == -12345) *out = i;
}
int main() {
  long long *p, *out; CK(cudaMalloc(&p, 1 << 20)); CK(cudaMalloc(&out, 8));
  std::vector<long long> h(1 << 17); for (size_t i = 0; i < h.size(); ++i) h[i] = (i * 7919 + 13) % h.size();
  CK(cudaMemcpy(p, h.data(), h.size() * 8, cudaMemcpyHostToDevice));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int depth : {0, 4}) for (int pdl : {0, 1}) for (int k = 1; k <= 7; ++k) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < k; ++i) {
      cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(132 * 2); cfg.blockDim = dim3(256); cfg.stream = s;
      cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
      CK(cudaLaunchKernelEx(&cfg, chase, (const long long*)p, depth, out));
    }
    CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    std::vector<float> t;
    for (int r = 0; r < 200; ++r) {
      CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000);
    }
    std::sort(t.begin(), t.end());
    printf("graph of %d nodes, chase depth %d, %s edges: median %6.2f us, min %6.2f\n", k, depth, pdl ? "PDL" : "plain", t[100], t[0]);
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  }
  return 0;
}
