// The step reports' readback (src/cuda/driver/pinned.rs): one launch copies every piece of a
// report (ring rows, write index, counters, plan scalars, write offsets, status word) from
// device memory into the report's pinned host staging, which is mapped into the device's
// address space, instead of one cuMemcpyDtoHAsync a piece. One block a piece, 4-byte words
// (every piece is i32 or i64 words, 4-byte aligned at both ends). The host reads the staging
// only after the event recorded behind this launch completed.
#include "common.cuh"

namespace kvc {

struct ReadbackArgs {
    const unsigned char* src[READBACK_PIECES];
    unsigned char* dst[READBACK_PIECES];
    i64 bytes[READBACK_PIECES];
    i64 pieces;
};

}  // namespace kvc

using kvc::ReadbackArgs;
KVC_CHECK_LAYOUT_ReadbackArgs(ReadbackArgs);

extern "C" __global__ void __launch_bounds__(kvc::READBACK_THREADS) kv_canary_readback(ReadbackArgs a) {
    const int p = blockIdx.x;
    if (p >= a.pieces) return;
    const i64 words = a.bytes[p] >> 2;
    const unsigned* s = reinterpret_cast<const unsigned*>(a.src[p]);
    volatile unsigned* d = reinterpret_cast<volatile unsigned*>(a.dst[p]);
    for (i64 i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
}
