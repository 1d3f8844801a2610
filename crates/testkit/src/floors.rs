//! Hardware floors the benchmark measures beside the ops (issue #5; formerly
//! `kv_canary::cuda::floors`): device-to-device copy
//! bandwidth, the verify op's gathers without its checks, the write op's serial hash chain
//! without its memory, an L2 flush for cold-cache timings, and raw launches to compare a typed
//! launch's host cost against. Not needed by engines.

use cust::memory::DeviceBuffer;
use cust::sys::{self, CUresult};
use kv_canary::cuda::{
    launch_custom, CustomKernel, CustomModule, DeviceExpectedTokens, DeviceGroup, DeviceSettings,
    Gpu, PlanInputs, PreparedLaunch, Queue, Stream,
};
use kv_canary::{CanaryBuffer, HealthCounters, TokenCheck, ViolationRing};
use kv_canary::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use kv_canary::{Device, Element, Error, Shape};
use kv_canary::{VerifyPlan, WritePlan};

/// `kernels/bench.cu`, compiled by this crate's build script.
const BENCH_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/bench.ptx"));

/// `Ok` for `CUDA_SUCCESS`, else [`Error::Cuda`] of `call`.
fn check(call: &'static str, result: CUresult) -> Result<(), Error> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call,
            code: kv_canary::cuda::CudaErrorCode::from_result(result),
        })
    }
}

/// The raw device address of a buffer.
fn addr<T: cust::memory::DeviceCopy>(buffer: &DeviceBuffer<T>) -> u64 {
    buffer.as_device_ptr().as_raw()
}

/// A zeroed device buffer of `len` elements in the current context.
fn zeroed<T: cust::memory::DeviceCopy + Default + Clone>(
    len: usize,
) -> Result<DeviceBuffer<T>, Error> {
    DeviceBuffer::from_slice(&vec![T::default(); len]).map_err(|e| Error::Cuda {
        call: "cuMemAlloc/cuMemcpyHtoD",
        code: e.into(),
    })
}

/// The first `n` elements of a device buffer (synchronous).
fn download<T: cust::memory::DeviceCopy + Default + Clone>(
    buffer: &DeviceBuffer<T>,
    n: usize,
) -> Result<Vec<T>, Error> {
    let mut host = vec![T::default(); buffer.len()];
    cust::memory::CopyDestination::copy_to(&**buffer, &mut host[..]).map_err(|e| Error::Cuda {
        call: "cuMemcpyDtoH",
        code: e.into(),
    })?;
    host.truncate(n);
    Ok(host)
}

/// The entry points of `kernels/bench.cu`, looked up once (not inside a capture).
const BENCH_KERNELS: [&str; 7] = [
    "kv_canary_stage_floor",
    "kv_canary_chain_floor",
    "kv_canary_chain_floor_vector",
    "kv_canary_empty",
    "kv_canary_spin",
    "kv_canary_lut_floor",
    "kv_canary_dependent_loads",
];

/// The bench kernels of `kernels/bench.cu`, loaded into one [`Gpu`]'s context. It owns its
/// module, which keeps a clone of the [`Gpu`], so it borrows nothing. `Send` and `Sync` like
/// the module.
#[derive(Debug)]
pub struct Floors {
    // Before the module: its functions are valid while it is loaded.
    kernels: [CustomKernel; BENCH_KERNELS.len()],
    module: CustomModule,
}

// `Send + Sync`: a `CustomModule` and its `CustomKernel`s are (asserted in kv-canary), and
// nothing else is held.
const _: fn() = || {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Floors>();
};

impl Floors {
    /// Loads the bench kernels on `gpu` (keeping a clone of it) and looks up every entry point.
    pub fn new(gpu: &Gpu) -> Result<Self, Error> {
        let module = CustomModule::from_ptx(gpu, BENCH_PTX)?;
        let mut kernels = Vec::with_capacity(BENCH_KERNELS.len());
        for name in BENCH_KERNELS {
            kernels.push(module.kernel(name)?);
        }
        let kernels = kernels.try_into().map_err(|_| Error::Malformed {
            detail: "kv-canary-testkit: bench kernel table".to_owned(),
        })?;
        Ok(Floors { kernels, module })
    }

    /// The kernel `name` of [`BENCH_KERNELS`] (a name outside it is an error).
    fn kernel(&self, name: &str) -> Result<CustomKernel, Error> {
        BENCH_KERNELS
            .iter()
            .position(|&k| k == name)
            .map(|i| self.kernels[i])
            .ok_or_else(|| Error::Malformed {
                detail: format!("kv-canary-testkit: no bench kernel {name}"),
            })
    }

    fn sm_count(&self) -> u32 {
        self.module.gpu().sm_count()
    }
}

/// A scratch buffer larger than the L2 cache; writing it evicts everything else.
pub struct L2Flush {
    scratch: DeviceBuffer<u8>,
}

impl L2Flush {
    /// A flush buffer of `bytes` (use a few times the L2 size: the H200 has 60 MB).
    pub fn new(bytes: usize) -> Result<Self, Error> {
        Ok(L2Flush {
            scratch: zeroed(bytes)?,
        })
    }

    /// Queues a write of the whole buffer on `stream`.
    pub fn queue(&self, stream: &Stream) -> Result<(), Error> {
        // SAFETY: the scratch buffer is live and exactly `len` bytes long; the memset is
        // stream-ordered and the buffer outlives the call (it is borrowed, and the caller
        // synchronises before dropping it like any buffer used on a stream).
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(
                addr(&self.scratch),
                0x5A,
                self.scratch.len(),
                stream.as_raw(),
            )
        })
    }
}

/// A device buffer of `len` bytes, every byte `value` (synchronous).
pub fn filled(len: usize, value: u8) -> Result<DeviceBuffer<u8>, Error> {
    let buf = zeroed::<u8>(len)?;
    if len > 0 {
        // SAFETY: `buf` is a live allocation of exactly `len` bytes.
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(addr(&buf), value, len)
        })?;
    }
    Ok(buf)
}

/// Queues a device-to-device copy of `src` into `dst` (same length) on `stream`: the copy
/// roofline moves `2 * len` bytes.
pub fn device_copy(
    stream: &Stream,
    dst: &DeviceBuffer<u8>,
    src: &DeviceBuffer<u8>,
) -> Result<(), Error> {
    if dst.len() != src.len() {
        return Err(Error::LengthMismatch {
            what: "device copy destination",
            expected: src.len(),
            found: dst.len(),
        });
    }
    // SAFETY: both buffers are live allocations of `src.len()` bytes; the copy is
    // stream-ordered.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(addr(dst), addr(src), src.len(), stream.as_raw())
    })
}

/// One half of a [`StageFloor`]: its canary buffer and, for a tail stage in PARTIAL mode, its
/// real-KV pool (one row of `kv_row_stride` bytes a slot, page size 1).
#[derive(Clone, Copy, Debug)]
pub struct StageHalf<'a> {
    /// The half's canary buffer (32-byte records at the floor's stride).
    pub buf: &'a kv_canary::cuda::DeviceArray<u8>,
    /// The half's real-KV pool, whose first 16 bytes of each entry's row are read.
    pub kv: Option<&'a DeviceBuffer<u8>>,
}

/// The gather floor of one verify stage as the step's pair launch runs it (with one half and no
/// pool, the gather floor of one verify launch): for each of the first `n` entries, on every
/// half (one or two, side by side in one launch), load `slots[e]`
/// and `prevs[e]`, gather the 32-byte records of the half's buffer (the predecessor from the
/// lane before when it is that lane's slot, as the verify kernel does) and, where the half has
/// a pool, the 16 bytes of the entry's row: the memory traffic of a head stage, or of a PARTIAL
/// tail stage, alone. The indices are checked once, when it is built (the kernel trusts them).
pub struct StageFloor<'a> {
    floors: &'a Floors,
    slots: &'a DeviceBuffer<i64>,
    prevs: &'a DeviceBuffer<i64>,
    n: usize,
    halves: [Option<StageHalf<'a>>; 2],
    stride: usize,
    kv_row_stride: usize,
    sink: &'a DeviceBuffer<i64>,
}

impl<'a> StageFloor<'a> {
    /// Checks every index against every buffer and pool (synchronous downloads) and keeps the
    /// buffers; `halves` holds one or two halves, all with pools or none.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        floors: &'a Floors,
        slots: &'a DeviceBuffer<i64>,
        prevs: &'a DeviceBuffer<i64>,
        n: usize,
        halves: &[StageHalf<'a>],
        stride: usize,
        kv_row_stride: usize,
        sink: &'a DeviceBuffer<i64>,
    ) -> Result<Self, Error> {
        let n = n.min(slots.len()).min(prevs.len());
        if stride < 32 || !stride.is_multiple_of(8) || sink.is_empty() {
            return Err(Error::OutOfRange {
                what: "stage floor slot stride",
                value: stride as i64,
                allowed: "multiples of 8, at least 32, with a sink",
            });
        }
        if halves.is_empty() || halves.len() > 2 {
            return Err(Error::OutOfRange {
                what: "stage floor halves",
                value: halves.len() as i64,
                allowed: "1 or 2",
            });
        }
        if halves
            .iter()
            .any(|h| h.kv.is_some() != halves[0].kv.is_some())
            || (halves[0].kv.is_some() && (kv_row_stride < 16 || !kv_row_stride.is_multiple_of(16)))
        {
            return Err(Error::OutOfRange {
                what: "stage floor real-KV row stride",
                value: kv_row_stride as i64,
                allowed: "multiples of 16, with a pool on every half or on none",
            });
        }
        for h in halves {
            let mut num_slots = h.buf.len() / stride;
            if let Some(kv) = h.kv {
                // Row s must hold 16 bytes: s * kv_row_stride + 16 <= len.
                let rows =
                    kv.len().saturating_sub(16) / kv_row_stride + usize::from(kv.len() >= 16);
                num_slots = num_slots.min(rows);
            }
            check_indices("stage floor slots", slots, n, 0, num_slots)?;
            check_indices("stage floor prevs", prevs, n, i64::MIN, num_slots)?;
        }
        Ok(StageFloor {
            floors,
            slots,
            prevs,
            n,
            halves: [halves.first().copied(), halves.get(1).copied()],
            stride,
            kv_row_stride,
            sink,
        })
    }

    /// Queues one pass on `stream`: `4 x SMs` blocks a half.
    pub fn queue(&self, stream: &Stream) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(u64, u64, i64, i64, u64, u64, u64, u64, i64, i64, u64);
        let per_half = self.floors.sm_count() * 4;
        let half =
            |i: usize| self.halves[i].map_or((0, 0), |h| (h.buf.as_raw(), h.kv.map_or(0, addr)));
        let ((b0, k0), (b1, k1)) = (half(0), half(1));
        let halves = if self.halves[1].is_some() { 2 } else { 1 };
        let args = Args(
            addr(self.slots),
            addr(self.prevs),
            self.n as i64,
            i64::from(per_half),
            b0,
            k0,
            b1,
            k1,
            self.stride as i64,
            self.kv_row_stride as i64,
            addr(self.sink),
        );
        let kernel = self.floors.kernel("kv_canary_stage_floor")?;
        // SAFETY: eleven parameters, passed as one packed struct of eleven 8-byte fields, which
        // is how the kernel's parameter buffer is laid out; every slot and predecessor index was
        // checked in `new` against every half's buffer and pool (16 bytes of row s inside the
        // pool), and the index buffers have been borrowed shared since, so safe code cannot have
        // rewritten them; blocks past the first `per_half` run the second half only when there
        // is one (the grid is `halves x per_half`); `n` is within both index arrays and `sink`
        // holds one element.
        unsafe { launch_packed(stream, &kernel, per_half * halves, 512, &args) }
    }
}

/// Checks that the first `n` elements of `indices` lie in `[lowest, num_slots)` (synchronous
/// download); the first that does not is [`Error::SlotOutOfRange`] named `what`.
fn check_indices<T: Element + cust::memory::DeviceCopy + Into<i64>>(
    what: &'static str,
    indices: &DeviceBuffer<T>,
    n: usize,
    lowest: i64,
    num_slots: usize,
) -> Result<(), Error> {
    let host = download(indices, n)?;
    match host
        .into_iter()
        .map(Into::into)
        .enumerate()
        .find(|&(_, s): &(usize, i64)| s < lowest || s >= num_slots as i64)
    {
        Some((index, slot)) => Err(Error::SlotOutOfRange {
            what,
            index,
            slot,
            num_slots,
        }),
        None => Ok(()),
    }
}

/// What [`LutFloor`] moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LutFloorMode {
    /// Index loads, LUT gathers and the four output stores: the SWA plan's traffic.
    GatherAndStore = 0,
    /// Index loads and the stores, no gather.
    StoreOnly = 1,
    /// Index loads and the gathers, no stores.
    GatherOnly = 2,
}

/// The SWA plan's memory traffic alone: for each of `n` entries, load a 4-byte index, gather
/// the 8-byte LUT element it names and store four 8-byte outputs (or a part of that, see
/// [`LutFloorMode`]), on a full grid. The indices are checked against the LUT once, when it is
/// built (the kernel trusts them).
pub struct LutFloor<'a> {
    floors: &'a Floors,
    idx: &'a DeviceBuffer<i32>,
    lut: &'a DeviceBuffer<i64>,
    out: [&'a DeviceBuffer<i64>; 4],
    n: usize,
}

impl<'a> LutFloor<'a> {
    /// Checks every index against the LUT and every output's length (synchronous download).
    pub fn new(
        floors: &'a Floors,
        idx: &'a DeviceBuffer<i32>,
        lut: &'a DeviceBuffer<i64>,
        out: [&'a DeviceBuffer<i64>; 4],
    ) -> Result<Self, Error> {
        let n = idx.len();
        if let Some(o) = out.iter().find(|o| o.len() < n.max(1)) {
            return Err(Error::LengthMismatch {
                what: "LUT floor output",
                expected: n.max(1),
                found: o.len(),
            });
        }
        check_indices("LUT floor index", idx, n, 0, lut.len())?;
        Ok(LutFloor {
            floors,
            idx,
            lut,
            out,
            n,
        })
    }

    /// Queues one pass on `stream`.
    pub fn queue(&self, stream: &Stream, mode: LutFloorMode) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(u64, i64, u64, u64, u64, u64, u64, i64);
        let args = Args(
            addr(self.idx),
            self.n as i64,
            addr(self.lut),
            addr(self.out[0]),
            addr(self.out[1]),
            addr(self.out[2]),
            addr(self.out[3]),
            mode as i64,
        );
        let grid = self.floors.sm_count() * 4;
        let kernel = self.floors.kernel("kv_canary_lut_floor")?;
        // SAFETY: eight 8-byte parameters laid out as the packed struct; every index is inside
        // the LUT (checked in `new`; the buffers have been borrowed shared since) and every
        // output holds at least `n` elements (at least one, for the gather-only sink).
        unsafe { launch_packed(stream, &kernel, grid, 512, &args) }
    }
}

/// `hops` dependent loads through `next` (each element the index of the next one), then a
/// store to `out[0]`, in one warp: the least a kernel whose work is a chain of round trips to
/// memory costs.
pub struct DependentLoads<'a> {
    floors: &'a Floors,
    next: &'a DeviceBuffer<i64>,
    out: &'a DeviceBuffer<i64>,
}

impl<'a> DependentLoads<'a> {
    /// Checks that every element of `next` is an index inside it (synchronous download) and
    /// that `out` holds an element.
    pub fn new(
        floors: &'a Floors,
        next: &'a DeviceBuffer<i64>,
        out: &'a DeviceBuffer<i64>,
    ) -> Result<Self, Error> {
        let host = download(next, next.len())?;
        if next.is_empty()
            || out.is_empty()
            || host.iter().any(|&x| x < 0 || x as usize >= host.len())
        {
            return Err(Error::OutOfRange {
                what: "dependent-load chain",
                value: next.len() as i64,
                allowed: "a non-empty chain of indices inside it, and an output",
            });
        }
        Ok(DependentLoads { floors, next, out })
    }

    /// Queues one chase of `hops` loads on `on` (a stream, or a capture).
    pub fn queue<'q, Q: Queue<'q> + ?Sized>(&self, on: &Q, hops: usize) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(u64, i64, u64);
        let args = Args(addr(self.next), hops as i64, addr(self.out));
        let kernel = self.floors.kernel("kv_canary_dependent_loads")?;
        // SAFETY: three 8-byte parameters laid out as the packed struct; every index the chase
        // can reach is inside `next` (checked in `new`; borrowed shared since) and `out` holds
        // one element.
        unsafe { launch_packed(on, &kernel, 1, 32, &args) }
    }
}

impl Floors {
    /// Queues the chain floor: `n` dependent `mix3` steps in one thread, no memory traffic; the
    /// result lands in `out[0]`. With `vector`, the chain starts from the thread index, so nvcc
    /// cannot run it on the uniform datapath (as it does for the plain floor, whose every value
    /// is uniform): the floor of a chain whose inputs are per-thread, like the write kernel's.
    pub fn chain(
        &self,
        stream: &Stream,
        n: usize,
        out: &DeviceBuffer<i64>,
        vector: bool,
    ) -> Result<(), Error> {
        if out.is_empty() {
            return Err(Error::LengthMismatch {
                what: "chain floor output",
                expected: 1,
                found: 0,
            });
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(i64, u64);
        let args = Args(n as i64, addr(out));
        let kernel = self.kernel(if vector {
            "kv_canary_chain_floor_vector"
        } else {
            "kv_canary_chain_floor"
        })?;
        // SAFETY: two 8-byte parameters laid out as the packed struct; `out` holds one element.
        unsafe { launch_packed(stream, &kernel, 1, 1, &args) }
    }

    /// Queues an empty kernel of `grid` blocks of `block` threads: what a launch (or a graph
    /// replay of one kernel node) costs by itself.
    pub fn empty<'a, Q: Queue<'a> + ?Sized>(
        &self,
        on: &Q,
        grid: u32,
        block: u32,
    ) -> Result<(), Error> {
        let kernel = self.kernel("kv_canary_empty")?;
        // SAFETY: the kernel takes no parameters and touches no memory.
        unsafe { launch_custom(on, &kernel, grid, block, 0, &mut []) }
    }

    /// Queues one thread that spins for `ns` nanoseconds of the GPU's global timer. Queued
    /// ahead of a timed region, it keeps the GPU busy while the host queues the region, so the
    /// region's events time the device's work rather than the host's submission latency.
    pub fn spin(&self, stream: &Stream, ns: u64) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(i64);
        let args = Args(i64::try_from(ns).unwrap_or(i64::MAX));
        let kernel = self.kernel("kv_canary_spin")?;
        // SAFETY: one 8-byte parameter laid out as the packed struct; the kernel touches no
        // memory.
        unsafe { launch_packed(stream, &kernel, 1, 1, &args) }
    }
}

/// Launches a kernel of several scalar parameters from one `#[repr(C)]` struct of 8-byte
/// fields (the parameter buffer of such a kernel has the same layout).
///
/// # Safety
///
/// As for [`launch_custom`], with `A`'s fields being the kernel's parameters in order, all 8
/// bytes.
unsafe fn launch_packed<'a, A: Copy, Q: Queue<'a> + ?Sized>(
    on: &Q,
    kernel: &CustomKernel,
    grid: u32,
    block: u32,
    args: &A,
) -> Result<(), Error> {
    let fields = core::mem::size_of::<A>() / 8;
    let base = args as *const A as *const u64;
    let mut ptrs: Vec<*mut core::ffi::c_void> =
        // SAFETY: `fields` 8-byte fields lie inside `*args`.
        (0..fields).map(|i| unsafe { base.add(i) } as *mut core::ffi::c_void).collect();
    // SAFETY: one pointer per kernel parameter, each to 8 readable bytes; the caller vouches
    // for the kernel's expectations.
    unsafe { launch_custom(on, kernel, grid, block, 0, &mut ptrs) }
}

/// A typed launch recorded as the raw driver launch it wraps: the same kernel, grid, block,
/// shared memory and argument struct ([`PreparedLaunch`]), queued by a bare `cuLaunchKernel`
/// (cooperative for a checked-LUT plan) on the same stream. `cust::launch!` issues the same
/// call once it holds its function and the argument pointers, so this is the floor a typed
/// launch is compared with (issue #5: the typed launch costs the host the same time, within
/// 2 %).
///
/// The buffers the launch reads and writes stay borrowed for `'a`, as for the typed launch.
#[derive(Debug)]
pub struct RawLaunch<'a> {
    launch: PreparedLaunch<'a>,
}

impl<'a> RawLaunch<'a> {
    /// What [`cuda::verify`](kv_canary::cuda::verify()) would queue on `stream` with these
    /// arguments.
    #[allow(clippy::too_many_arguments)]
    pub fn verify<V, W, E, VB, K, S, R>(
        stream: &'a Stream,
        shape: &Shape<V, W, E>,
        plan: &'a VerifyPlan<VB, Device>,
        check: K,
        settings: &DeviceSettings<'a>,
        canary: &'a CanaryBuffer<S, Device>,
        ring: &'a ViolationRing<R, Device>,
        counters: &'a HealthCounters<Device>,
    ) -> Result<Self, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity,
    {
        Ok(RawLaunch {
            launch: PreparedLaunch::verify(
                stream, shape, plan, check, settings, canary, ring, counters,
            )?,
        })
    }

    /// What [`cuda::plan`](kv_canary::cuda::plan()) would queue on `stream` with these
    /// arguments.
    pub fn plan<V, W, E, VB, WB, BB, G, X>(
        stream: &'a Stream,
        shape: &Shape<V, W, E>,
        inputs: &PlanInputs<'a, BB, G, X>,
        verify: &'a VerifyPlan<VB, Device>,
        write: &'a WritePlan<WB, Device>,
    ) -> Result<Self, Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB> + SameWriteReqCapacity<BB>,
        E: Capacity,
        VB: Capacity,
        WB: Capacity,
        BB: Capacity,
        G: DeviceGroup<'a>,
        X: DeviceExpectedTokens<'a, W>,
    {
        Ok(RawLaunch {
            launch: PreparedLaunch::plan(stream, shape, inputs, verify, write)?,
        })
    }

    /// Queues the recorded launch with one bare driver call.
    pub fn queue(&self) -> Result<(), Error> {
        let p = self.launch.raw_parts();
        let mut param = p.param as *mut core::ffi::c_void;
        if p.cooperative {
            // SAFETY: as below, for the cooperative launch the typed plan would make.
            return check("cuLaunchCooperativeKernel", unsafe {
                sys::cuLaunchCooperativeKernel(
                    p.function,
                    p.grid,
                    1,
                    1,
                    p.block,
                    1,
                    1,
                    p.shared_bytes,
                    p.stream,
                    &mut param,
                )
            });
        }
        // SAFETY: the kernel, grid and argument struct are exactly what the typed launch
        // would queue (built by the same `prepare`), so the typed launch's safety argument
        // holds: the struct mirrors the kernel's parameter and every buffer it names is
        // borrowed for 'a; the stream is alive ('a); `param` points into `self.launch`.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                p.function,
                p.grid,
                1,
                1,
                p.block,
                1,
                1,
                p.shared_bytes,
                p.stream,
                &mut param,
                core::ptr::null_mut(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bench_kernels_are_embedded() {
        if std::env::var_os("DOCS_RS").is_some() {
            return;
        }
        for entry in super::BENCH_KERNELS {
            assert!(
                super::BENCH_PTX.contains(&format!(".entry {entry}(")),
                "{entry} missing"
            );
        }
    }
}
