//! [`Stream`]s, the [`Queue`]s launches go to, CUDA [`Graph`] capture and [`Event`] timing.

use super::driver::{self, check, cust_error};
use super::gpu::Gpu;
use super::status::{decode, STATUS_WORDS};
use crate::Error;
use core::marker::PhantomData;
use cust::memory::DeviceBuffer;
use cust::stream::StreamFlags;
use cust::sys::{self, CUfunction, CUgraph, CUgraphExec, CUstream, CUstreamCaptureMode};

/// Words of a stream's launch scratch.
const SCRATCH_WORDS: usize = 4;
/// Their values when nothing runs: the plan's grid barrier (arrivals, generation, the first
/// out-of-LUT read of even and odd generations; kernels/plan.cu, `grid_lut_verdict`).
const SCRATCH_INIT: [i64; SCRATCH_WORDS] = [0, 0, i64::MAX, i64::MAX];

/// A CUDA stream of one [`Gpu`], with its sticky status word.
///
/// Always a *blocking* stream (it synchronises with the legacy default stream, on which every
/// transfer of this module runs), so transfers and launches are ordered as written, on any
/// stream. Launches on one stream run in order; launches on two streams touching the same
/// buffer are the caller's to order.
pub struct Stream<'g> {
    gpu: &'g Gpu,
    raw: cust::stream::Stream,
    status: DeviceBuffer<i64>,
    /// Launch scratch owned by the stream (launches allocate nothing): the checked plan's grid
    /// barrier and out-of-LUT keys (`SCRATCH_INIT`). Launches on one stream run in order, so
    /// they share it safely.
    scratch: DeviceBuffer<i64>,
}

impl<'g> Stream<'g> {
    /// A new blocking stream with a clear status word.
    pub fn new(gpu: &'g Gpu) -> Result<Self, Error> {
        // DEFAULT, i.e. blocking; cust would drop NON_BLOCKING anyway (rust-cuda#15).
        let raw = cust::stream::Stream::new(StreamFlags::DEFAULT, None)
            .map_err(cust_error("cuStreamCreate"))?;
        let status = driver::zeroed::<i64>(STATUS_WORDS)?;
        let scratch = driver::zeroed::<i64>(SCRATCH_WORDS)?;
        driver::upload(&scratch, 0, &SCRATCH_INIT)?;
        Ok(Stream {
            gpu,
            raw,
            status,
            scratch,
        })
    }

    /// The device this stream runs on.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Blocks the host until everything queued on this stream has run.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.raw
            .synchronize()
            .map_err(cust_error("cuStreamSynchronize"))
    }

    /// Synchronises, then returns the first malformed-data error the kernels of this stream
    /// recorded since the last [`clear_status`](Self::clear_status) (or since creation), as the
    /// [`Error`] the CPU op would return; `Ok` when there was none.
    pub fn status(&self) -> Result<(), Error> {
        self.synchronize()?;
        let mut words = [0i64; STATUS_WORDS];
        driver::download(&mut words, &self.status, 0)?;
        decode(&words)
    }

    /// Clears the status word (a synchronous copy, ordered after the queued launches).
    pub fn clear_status(&self) -> Result<(), Error> {
        driver::upload(&self.status, 0, &[0i64; STATUS_WORDS])
    }

    /// Records `event` at this point of the stream.
    pub fn record(&self, event: &Event) -> Result<(), Error> {
        event
            .0
            .record(&self.raw)
            .map_err(cust_error("cuEventRecord"))
    }

    /// Captures the launches `f` makes on the [`Capture`] into a CUDA graph, instead of running
    /// them, and instantiates it.
    ///
    /// Every buffer a captured launch takes is borrowed for `'a`, the graph's lifetime, so it
    /// stays alive and in place while the graph can replay; the stream is borrowed too (replays
    /// run on it, and nothing else can be queued on it during the capture). Inputs are refilled
    /// in place between replays with the buffers' `upload` methods. Capture runs in global mode:
    /// a transfer or allocation anywhere in the program during `f` fails the capture with an
    /// error instead of corrupting it.
    pub fn capture<'a>(
        &'a mut self,
        f: impl FnOnce(&Capture<'a, 'g>) -> Result<(), Error>,
    ) -> Result<Graph<'a, 'g>, Error> {
        let stream: &'a Stream<'g> = self;
        let raw = stream.raw.as_inner();
        // SAFETY: `raw` is this stream's live handle; global capture mode only restricts what
        // other calls may do while the capture is open.
        check("cuStreamBeginCapture", unsafe {
            sys::cuStreamBeginCapture_v2(raw, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        })?;
        let mut open = OpenCapture { raw, ended: false };
        let result = f(&Capture {
            stream,
            _invariant: PhantomData,
        });
        let graph = open.end()?;
        let graph = GraphHandle {
            graph,
            exec: core::ptr::null_mut(),
        };
        result?;
        let mut graph = graph;
        // SAFETY: `graph.graph` is the live graph the capture produced; `exec` receives a new
        // executable graph owned by `GraphHandle` from here on.
        check("cuGraphInstantiate", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut graph.exec, graph.graph, 0)
        })?;
        Ok(Graph {
            stream,
            handle: graph,
            _buffers: PhantomData,
        })
    }

    /// The raw stream handle (for the raw launches of `floors`).
    pub(crate) fn raw_handle(&self) -> CUstream {
        self.raw.as_inner()
    }

    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            gpu: self.gpu,
            stream: self.raw.as_inner(),
            status: driver::addr(&self.status),
            scratch: driver::addr(&self.scratch),
        }
    }
}

impl core::fmt::Debug for Stream<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Stream")
            .field("gpu", &self.gpu.name())
            .finish_non_exhaustive()
    }
}

/// Ends an open capture also when the closure panics, so the stream never stays capturing.
struct OpenCapture {
    raw: CUstream,
    ended: bool,
}

impl OpenCapture {
    fn end(&mut self) -> Result<CUgraph, Error> {
        self.ended = true;
        let mut graph: CUgraph = core::ptr::null_mut();
        // SAFETY: the stream is capturing (begun above, ended only here); `graph` receives the
        // captured graph, which the caller owns.
        let result = unsafe { sys::cuStreamEndCapture(self.raw, &mut graph) };
        if result != sys::CUresult::CUDA_SUCCESS && !graph.is_null() {
            // SAFETY: a graph returned with an error is still ours to destroy.
            unsafe { sys::cuGraphDestroy(graph) };
        }
        check("cuStreamEndCapture", result)?;
        Ok(graph)
    }
}

impl Drop for OpenCapture {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.end().map(|g| {
                // SAFETY: `g` is the graph just returned by the capture and owned by nobody.
                unsafe { sys::cuGraphDestroy(g) }
            });
        }
    }
}

/// Owns a captured graph and its executable instance.
struct GraphHandle {
    graph: CUgraph,
    exec: CUgraphExec,
}

impl Drop for GraphHandle {
    fn drop(&mut self) {
        // SAFETY: both handles are owned by this value and destroyed once; null ones (a failed
        // instantiation) are skipped.
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

/// The launch target inside [`Stream::capture`]: launches on it are recorded, not run, and the
/// buffers they take must be borrowed for the graph's lifetime `'a`.
///
/// Invariant in `'a`, so a launch cannot shorten it to a local buffer's lifetime.
pub struct Capture<'a, 'g> {
    stream: &'a Stream<'g>,
    _invariant: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl core::fmt::Debug for Capture<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Capture").finish_non_exhaustive()
    }
}

/// A captured, instantiated CUDA graph: the launches of one [`Stream::capture`], replayable on
/// that stream. The buffers they use stay borrowed while it lives.
pub struct Graph<'a, 'g> {
    stream: &'a Stream<'g>,
    handle: GraphHandle,
    _buffers: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl<'a, 'g> Graph<'a, 'g> {
    /// Queues one replay of the captured launches on the capturing stream (no host sync).
    pub fn replay(&self) -> Result<(), Error> {
        // SAFETY: `exec` is a live executable graph; every buffer its nodes use is borrowed for
        // 'a (see `Capture`), so all of them are alive; the stream is the capturing one.
        check("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(self.handle.exec, self.stream.raw.as_inner())
        })
    }

    /// The stream the graph replays on: for events, status and eager launches between replays.
    pub fn stream(&self) -> &'a Stream<'g> {
        self.stream
    }
}

impl core::fmt::Debug for Graph<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Graph").finish_non_exhaustive()
    }
}

/// A CUDA event, for timing launches on the device.
pub struct Event(cust::event::Event);

impl Event {
    /// A new timing event.
    pub fn new() -> Result<Event, Error> {
        cust::event::Event::new(cust::event::EventFlags::DEFAULT)
            .map(Event)
            .map_err(cust_error("cuEventCreate"))
    }

    /// Milliseconds of device time from `start` to this event; waits for this event.
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32, Error> {
        self.0
            .synchronize()
            .map_err(cust_error("cuEventSynchronize"))?;
        self.0
            .elapsed_time_f32(&start.0)
            .map_err(cust_error("cuEventElapsedTime"))
    }
}

impl core::fmt::Debug for Event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Event")
    }
}

/// Where a launch is queued: a [`Stream`] (runs now, any buffer lifetime) or a [`Capture`]
/// (recorded into a graph, buffers borrowed for `'a`). Sealed.
pub trait Queue<'a>: sealed::LaunchTarget {}

impl<'a> Queue<'a> for Stream<'_> {}
impl<'a> Queue<'a> for Capture<'a, '_> {}

pub(crate) use sealed::Target;

pub(crate) mod sealed {
    use super::{CUstream, Gpu};

    /// The raw pieces of a launch target.
    pub struct Target<'s> {
        pub(crate) gpu: &'s Gpu,
        pub(crate) stream: CUstream,
        pub(crate) status: u64,
        pub(crate) scratch: u64,
    }

    /// Gives the launch functions the stream to queue on.
    pub trait LaunchTarget {
        #[doc(hidden)]
        fn target(&self) -> Target<'_>;
    }
}

impl sealed::LaunchTarget for Stream<'_> {
    fn target(&self) -> Target<'_> {
        Stream::target(self)
    }
}

impl sealed::LaunchTarget for Capture<'_, '_> {
    fn target(&self) -> Target<'_> {
        self.stream.target()
    }
}

/// Queues `kernel<<<grid, block, shared_bytes>>>(*args)` on `target`'s stream; with
/// `cooperative`, as a cooperative launch (every block resident at once, or the launch fails).
///
/// # Safety
///
/// `A` must be the kernel's (single) parameter type, laid out as the kernel reads it, and every
/// device address in `args` must point to a live allocation at least as large as the sizes in
/// `args` tell the kernel it may access, for as long as the launch (or a graph replaying it)
/// can run.
pub(crate) unsafe fn launch<A: Copy>(
    target: &Target<'_>,
    kernel: CUfunction,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    args: &A,
) -> Result<(), Error> {
    // SAFETY: forwarded; the caller's contract is this function's.
    unsafe { launch_with(target, kernel, grid, block, shared_bytes, args, false) }
}

/// One kernel launch with its argument struct, ready to queue (see [`Prepared::queue`]).
#[derive(Clone, Copy)]
pub(crate) struct Prepared<A> {
    pub(crate) kernel: CUfunction,
    pub(crate) grid: u32,
    pub(crate) block: u32,
    pub(crate) shared: u32,
    pub(crate) args: A,
    pub(crate) cooperative: bool,
}

impl<A: Copy> Prepared<A> {
    /// Queues the launch on `target`'s stream.
    ///
    /// # Safety
    ///
    /// As for [`launch`]: `A` is the kernel's parameter type and every address in `args` is
    /// live (and as large as `args` says) for as long as the launch can run.
    pub(crate) unsafe fn queue(&self, target: &Target<'_>) -> Result<(), Error> {
        // SAFETY: forwarded; the caller's contract is this function's.
        unsafe {
            launch_with(
                target,
                self.kernel,
                self.grid,
                self.block,
                self.shared,
                &self.args,
                self.cooperative,
            )
        }
    }
}

/// [`launch`], cooperative or not.
///
/// # Safety
///
/// As for [`launch`].
pub(crate) unsafe fn launch_with<A: Copy>(
    target: &Target<'_>,
    kernel: CUfunction,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    args: &A,
    cooperative: bool,
) -> Result<(), Error> {
    let mut param = args as *const A as *mut core::ffi::c_void;
    if cooperative {
        // SAFETY: as below; a cooperative launch takes the same parameter array.
        return check("cuLaunchCooperativeKernel", unsafe {
            sys::cuLaunchCooperativeKernel(
                kernel,
                grid.max(1),
                1,
                1,
                block,
                1,
                1,
                shared_bytes,
                target.stream,
                &mut param,
            )
        });
    }
    // SAFETY: one kernel parameter, passed by pointer; the driver copies its bytes before
    // returning (also when capturing), so `args` may be a temporary. The caller vouches for the
    // rest (see above).
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            kernel,
            grid.max(1),
            1,
            1,
            block,
            1,
            1,
            shared_bytes,
            target.stream,
            &mut param,
            core::ptr::null_mut(),
        )
    })
}
