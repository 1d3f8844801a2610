//! Hardware floors the benchmark measures beside the ops (issue #5): device-to-device copy
//! bandwidth, the verify op's gathers without its checks, the write op's serial hash chain
//! without its memory, an L2 flush for cold-cache timings, and raw launches to compare a typed
//! launch's host cost against. Not needed by engines.

use super::abi::{PlanArgs, VerifyArgs};
use super::canary::DeviceLaunch;
use super::driver::{self, check};
use super::inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use super::stream::{Prepared, Queue, Stream};
use crate::canary::{CanaryBuffer, HealthCounters, TokenCheck, ViolationRing};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::plan::{VerifyPlan, WritePlan};
use crate::{Device, Error, Shape};
use core::marker::PhantomData;
use cust::memory::DeviceBuffer;
use cust::sys;

/// A scratch buffer larger than the L2 cache; writing it evicts everything else.
pub struct L2Flush {
    scratch: DeviceBuffer<u8>,
}

impl L2Flush {
    /// A flush buffer of `bytes` (use a few times the L2 size: the H200 has 60 MB).
    pub fn new(bytes: usize) -> Result<Self, Error> {
        Ok(L2Flush {
            scratch: driver::zeroed(bytes)?,
        })
    }

    /// Queues a write of the whole buffer on `stream`.
    pub fn queue(&self, stream: &Stream<'_>) -> Result<(), Error> {
        let t = stream.target();
        // SAFETY: the scratch buffer is live and exactly `len` bytes long; the memset is
        // stream-ordered and the buffer outlives the call (it is borrowed, and the caller
        // synchronises before dropping it like any buffer used on a stream).
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(
                driver::addr(&self.scratch),
                0x5A,
                self.scratch.len(),
                t.stream,
            )
        })
    }
}

/// A device buffer of `len` bytes, every byte `value` (synchronous).
pub fn filled(len: usize, value: u8) -> Result<DeviceBuffer<u8>, Error> {
    let buf = driver::zeroed::<u8>(len)?;
    if len > 0 {
        // SAFETY: `buf` is a live allocation of exactly `len` bytes.
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(driver::addr(&buf), value, len)
        })?;
    }
    Ok(buf)
}

/// Queues a device-to-device copy of `src` into `dst` (same length) on `stream`: the copy
/// roofline moves `2 * len` bytes.
pub fn device_copy(
    stream: &Stream<'_>,
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
    let t = stream.target();
    // SAFETY: both buffers are live allocations of `src.len()` bytes; the copy is
    // stream-ordered.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(driver::addr(dst), driver::addr(src), src.len(), t.stream)
    })
}

/// The gather floor: for each of the first `n` entries, load `slots[e]` and `prevs[e]` and
/// gather their 32-byte canary slots (`buf`, `stride` bytes a slot), nothing else: the verify
/// op's memory traffic alone, on a full grid like the verify launch. The indices are checked
/// once, when it is built (the kernel trusts them).
pub struct GatherFloor<'a> {
    slots: &'a DeviceBuffer<i64>,
    prevs: &'a DeviceBuffer<i64>,
    n: usize,
    buf: &'a DeviceBuffer<u8>,
    stride: usize,
    sink: &'a DeviceBuffer<i64>,
}

impl<'a> GatherFloor<'a> {
    /// Checks every index against the buffer (synchronous downloads) and keeps the buffers.
    pub fn new(
        slots: &'a DeviceBuffer<i64>,
        prevs: &'a DeviceBuffer<i64>,
        n: usize,
        buf: &'a DeviceBuffer<u8>,
        stride: usize,
        sink: &'a DeviceBuffer<i64>,
    ) -> Result<Self, Error> {
        let n = n.min(slots.len()).min(prevs.len());
        if stride < 32 || !stride.is_multiple_of(8) || sink.is_empty() {
            return Err(Error::OutOfRange {
                what: "gather floor slot stride",
                value: stride as i64,
                allowed: "multiples of 8, at least 32, with a sink",
            });
        }
        let num_slots = buf.len() / stride;
        check_indices("gather floor slots", slots, n, 0, num_slots)?;
        check_indices("gather floor prevs", prevs, n, i64::MIN, num_slots)?;
        Ok(GatherFloor {
            slots,
            prevs,
            n,
            buf,
            stride,
            sink,
        })
    }

    /// Queues one pass on `stream`.
    pub fn queue(&self, stream: &Stream<'_>) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(u64, u64, i64, u64, i64, u64);
        let args = Args(
            driver::addr(self.slots),
            driver::addr(self.prevs),
            self.n as i64,
            driver::addr(self.buf),
            self.stride as i64,
            driver::addr(self.sink),
        );
        let t = stream.target();
        let grid = t.gpu.sm_count() * 4;
        // SAFETY: six parameters, passed as one packed struct of six 8-byte fields, which is
        // how the kernel's parameter buffer is laid out; every slot index was checked against
        // the buffer in `new`, and the index buffers have been borrowed shared since, so safe
        // code cannot have rewritten them (cust writes a `DeviceBuffer` through `&mut` only);
        // `n` is within both index arrays and `sink` holds one element.
        unsafe { launch_packed(&t, t.gpu.kernels().gather_floor, grid, 512, &args) }
    }
}

/// Checks that the first `n` elements of `indices` lie in `[lowest, num_slots)` (synchronous
/// download); the first that does not is [`Error::SlotOutOfRange`] named `what`.
fn check_indices<T: crate::Element + Default + Into<i64>>(
    what: &'static str,
    indices: &DeviceBuffer<T>,
    n: usize,
    lowest: i64,
    num_slots: usize,
) -> Result<(), Error> {
    let mut host = vec![T::default(); n];
    driver::download(&mut host, indices, 0)?;
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
    idx: &'a DeviceBuffer<i32>,
    lut: &'a DeviceBuffer<i64>,
    out: [&'a DeviceBuffer<i64>; 4],
    n: usize,
}

impl<'a> LutFloor<'a> {
    /// Checks every index against the LUT and every output's length (synchronous download).
    pub fn new(
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
        Ok(LutFloor { idx, lut, out, n })
    }

    /// Queues one pass on `stream`.
    pub fn queue(&self, stream: &Stream<'_>, mode: LutFloorMode) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(u64, i64, u64, u64, u64, u64, u64, i64);
        let args = Args(
            driver::addr(self.idx),
            self.n as i64,
            driver::addr(self.lut),
            driver::addr(self.out[0]),
            driver::addr(self.out[1]),
            driver::addr(self.out[2]),
            driver::addr(self.out[3]),
            mode as i64,
        );
        let t = stream.target();
        let grid = t.gpu.sm_count() * 4;
        // SAFETY: eight 8-byte parameters laid out as the packed struct; every index is inside
        // the LUT (checked in `new`; the buffers have been borrowed shared since) and every
        // output holds at least `n` elements (at least one, for the gather-only sink).
        unsafe { launch_packed(&t, t.gpu.kernels().lut_floor, grid, 512, &args) }
    }
}

/// `hops` dependent loads through `next` (each element the index of the next one), then a
/// store to `out[0]`, in one warp: the least a kernel whose work is a chain of round trips to
/// memory costs.
pub struct DependentLoads<'a> {
    next: &'a DeviceBuffer<i64>,
    out: &'a DeviceBuffer<i64>,
}

impl<'a> DependentLoads<'a> {
    /// Checks that every element of `next` is an index inside it (synchronous download) and
    /// that `out` holds an element.
    pub fn new(next: &'a DeviceBuffer<i64>, out: &'a DeviceBuffer<i64>) -> Result<Self, Error> {
        let mut host = vec![0i64; next.len()];
        driver::download(&mut host, next, 0)?;
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
        Ok(DependentLoads { next, out })
    }

    /// Queues one chase of `hops` loads on `on` (a stream, or a capture).
    pub fn queue<'q, Q: Queue<'q> + ?Sized>(&self, on: &Q, hops: usize) -> Result<(), Error> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Args(u64, i64, u64);
        let args = Args(driver::addr(self.next), hops as i64, driver::addr(self.out));
        let t = on.target();
        // SAFETY: three 8-byte parameters laid out as the packed struct; every index the chase
        // can reach is inside `next` (checked in `new`; borrowed shared since) and `out` holds
        // one element.
        unsafe { launch_packed(&t, t.gpu.kernels().dependent_loads, 1, 32, &args) }
    }
}

/// Queues the chain floor: `n` dependent `mix3` steps in one thread, no memory traffic; the
/// result lands in `out[0]`. With `vector`, the chain starts from the thread index, so nvcc
/// cannot run it on the uniform datapath (as it does for the plain floor, whose every value is
/// uniform): the floor of a chain whose inputs are per-thread, like the write kernel's.
pub fn chain_floor(
    stream: &Stream<'_>,
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
    let args = Args(n as i64, driver::addr(out));
    let t = stream.target();
    let k = t.gpu.kernels();
    let kernel = if vector {
        k.chain_floor_vector
    } else {
        k.chain_floor
    };
    // SAFETY: two 8-byte parameters laid out as the packed struct; `out` holds one element.
    unsafe { launch_packed(&t, kernel, 1, 1, &args) }
}

/// Queues an empty kernel of `grid` blocks of `block` threads: what a launch (or a graph replay
/// of one kernel node) costs by itself.
pub fn empty<'a, Q: Queue<'a> + ?Sized>(on: &Q, grid: u32, block: u32) -> Result<(), Error> {
    let t = on.target();
    // SAFETY: the kernel takes no parameters and touches no memory.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            t.gpu.kernels().empty,
            grid.max(1),
            1,
            1,
            block.max(1),
            1,
            1,
            0,
            t.stream,
            core::ptr::null_mut(),
            core::ptr::null_mut(),
        )
    })
}

/// Queues one thread that spins for `ns` nanoseconds of the GPU's global timer. Queued ahead
/// of a timed region, it keeps the GPU busy while the host queues the region, so the region's
/// events time the device's work rather than the host's submission latency.
pub fn spin(stream: &Stream<'_>, ns: u64) -> Result<(), Error> {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Args(i64);
    let args = Args(i64::try_from(ns).unwrap_or(i64::MAX));
    let t = stream.target();
    // SAFETY: one 8-byte parameter laid out as the packed struct; the kernel touches no memory.
    unsafe { launch_packed(&t, t.gpu.kernels().spin, 1, 1, &args) }
}

/// Launches a kernel of several scalar parameters from one `#[repr(C)]` struct of 8-byte
/// fields (the parameter buffer of such a kernel has the same layout).
///
/// # Safety
///
/// As for `stream::launch`, with `A`'s fields being the kernel's parameters in order, all 8 bytes.
unsafe fn launch_packed<A: Copy>(
    t: &super::stream::Target<'_>,
    kernel: sys::CUfunction,
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
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            kernel,
            grid.max(1),
            1,
            1,
            block,
            1,
            1,
            0,
            t.stream,
            ptrs.as_mut_ptr(),
            core::ptr::null_mut(),
        )
    })
}

/// A typed launch recorded as the raw driver launch it wraps: the same kernel, grid, block,
/// shared memory and argument struct, queued by a bare `cuLaunchKernel` (cooperative for a
/// checked-LUT plan) on the same stream. `cust::launch!` issues the same call once it holds
/// its function and the argument pointers, so this is the floor a typed launch is compared
/// with (issue #5: the typed launch costs the host the same time, within 2 %).
///
/// The buffers the launch reads and writes stay borrowed for `'a`, as for the typed launch.
pub struct RawLaunch<'a, 'g> {
    stream: &'a Stream<'g>,
    launch: RawArgs,
    _buffers: PhantomData<&'a ()>,
}

#[derive(Clone, Copy)]
enum RawArgs {
    Verify(Prepared<VerifyArgs>),
    Plan(Prepared<PlanArgs>),
}

impl<'a, 'g> RawLaunch<'a, 'g> {
    /// What [`cuda::verify`](super::verify()) would queue on `stream` with these arguments.
    #[allow(clippy::too_many_arguments)]
    pub fn verify<V, W, E, VB, K, S, R>(
        stream: &'a Stream<'g>,
        shape: &Shape<V, W, E>,
        plan: &'a VerifyPlan<VB, Device>,
        check: K,
        launch_settings: &DeviceLaunch<'a>,
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
        let launch = super::verify::prepare(
            &stream.target(),
            shape,
            plan,
            check,
            launch_settings,
            canary,
            ring,
            counters,
        )?;
        Ok(RawLaunch {
            stream,
            launch: RawArgs::Verify(launch),
            _buffers: PhantomData,
        })
    }

    /// What [`cuda::plan`](super::plan()) would queue on `stream` with these arguments.
    pub fn plan<V, W, E, VB, WB, BB, G, X>(
        stream: &'a Stream<'g>,
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
        let launch = super::plan::prepare(&stream.target(), shape, inputs, verify, write)?;
        Ok(RawLaunch {
            stream,
            launch: RawArgs::Plan(launch),
            _buffers: PhantomData,
        })
    }

    /// Queues the recorded launch with one bare driver call.
    pub fn queue(&self) -> Result<(), Error> {
        let raw = self.stream.raw_handle();
        let (kernel, grid, block, shared, cooperative, mut param) = match &self.launch {
            RawArgs::Verify(l) => (
                l.kernel,
                l.grid,
                l.block,
                l.shared,
                l.cooperative,
                &l.args as *const VerifyArgs as *mut core::ffi::c_void,
            ),
            RawArgs::Plan(l) => (
                l.kernel,
                l.grid,
                l.block,
                l.shared,
                l.cooperative,
                &l.args as *const PlanArgs as *mut core::ffi::c_void,
            ),
        };
        if cooperative {
            // SAFETY: as below, for the cooperative launch the typed plan would make.
            return check("cuLaunchCooperativeKernel", unsafe {
                sys::cuLaunchCooperativeKernel(
                    kernel, grid, 1, 1, block, 1, 1, shared, raw, &mut param,
                )
            });
        }
        // SAFETY: the kernel, grid and argument struct are exactly what the typed launch
        // would queue (built by the same `prepare`), so the typed launch's safety argument
        // holds: the struct mirrors the kernel's parameter and every buffer it names is
        // borrowed for 'a; the stream is alive ('a).
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                kernel,
                grid,
                1,
                1,
                block,
                1,
                1,
                shared,
                raw,
                &mut param,
                core::ptr::null_mut(),
            )
        })
    }
}

impl core::fmt::Debug for RawLaunch<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawLaunch").finish_non_exhaustive()
    }
}
