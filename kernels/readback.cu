// The step reports' readback (src/cuda/driver/pinned.rs): one launch copies every piece of a
// report (ring rows, write index, counters, plan scalars, write offsets, status word) from
// device memory into the report's pinned host staging, which is mapped into the device's
// address space, instead of one cuMemcpyDtoHAsync a piece. One block a piece, 4-byte words
// (every piece is i32 or i64 words, 4-byte aligned at both ends). A counted piece (the ring
// rows) copies only the units its device count names. The host reads the staging only after
// the event recorded behind this launch completed, and reads of a counted piece only the units
// that count names (it is copied too). A consumed piece (the stream's status word in a step's
// or a sweep's report) is zeroed once copied, so the next report holds the errors recorded
// after this one. Beside it, the ring clear of every step and sweep.
#include "common.cuh"

namespace kvc {

// A violation ring emptied (ViolationRing::clear_on): every row zeroed, write index 0.
struct RingClearArgs {
    i64* rows;
    i64 words;
    i32* write_index;
};

struct ReadbackArgs {
    const unsigned char* src[READBACK_PIECES];
    unsigned char* dst[READBACK_PIECES];
    i64 bytes[READBACK_PIECES];
    const i32* limit[READBACK_PIECES];
    i64 unit[READBACK_PIECES];
    i64 consume[READBACK_PIECES];
    i64 pieces;
};

}  // namespace kvc

using kvc::ReadbackArgs;
using kvc::RingClearArgs;
KVC_CHECK_LAYOUT_ReadbackArgs(ReadbackArgs);
KVC_CHECK_LAYOUT_RingClearArgs(RingClearArgs);

// The ring clear in one launch instead of two memsets (rows, write index): a kernel node takes
// part in the programmatic dependent launches around it (a memset node does not), so the plan
// behind it launches early. Grid-stride over the words; nothing reads the ring here, so the
// write index's store needs no order against the rows'. All of it completes before the launch
// behind it passes its grid_prologue().
extern "C" __global__ void __launch_bounds__(kvc::READBACK_THREADS) kv_canary_ring_clear(RingClearArgs a) {
    kvc::grid_prologue();
    const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
    for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.words; i += stride) {
        a.rows[i] = 0;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *a.write_index = 0;
}

extern "C" __global__ void __launch_bounds__(kvc::READBACK_THREADS) kv_canary_readback(ReadbackArgs a) {
    kvc::grid_prologue();
    const int p = blockIdx.x;
    if (p >= a.pieces) return;
    i64 bytes = a.bytes[p];
    if (a.limit[p] != nullptr) {
        // Only the counted units (the ring rows recorded): a count past the piece is clamped.
        const i64 units = bytes / a.unit[p];
        i64 n = *a.limit[p];
        n = n < 0 ? 0 : (n > units ? units : n);
        bytes = n * a.unit[p];
    }
    const i64 words = bytes >> 2;
    const unsigned* s = reinterpret_cast<const unsigned*>(a.src[p]);
    volatile unsigned* d = reinterpret_cast<volatile unsigned*>(a.dst[p]);
    if (a.consume[p] != 0) {
        // A consumed piece (the stream's status word): each word zeroed by the thread that
        // copied it; nothing else runs on the stream meanwhile (the launches around this one
        // wait for it in grid_prologue()).
        unsigned* z = const_cast<unsigned*>(s);
        for (i64 i = threadIdx.x; i < words; i += blockDim.x) {
            d[i] = s[i];
            z[i] = 0;
        }
        return;
    }
    for (i64 i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
}
