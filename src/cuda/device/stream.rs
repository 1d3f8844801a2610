//! [`Stream`]s, the [`Queue`]s launches go to, CUDA [`Graph`] capture and [`Event`] timing.

use super::gpu::Gpu;
use super::readbacks::ReadbackPool;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::abi::status::{decode, STATUS_WORDS};
use crate::cuda::driver::array::DeviceArray;
use crate::cuda::driver::memory;
use crate::cuda::driver::stream::{ExecGraph, RawEvent, RawStream};
use crate::Error;
use core::marker::PhantomData;
use cust::sys::CUstream;
use std::sync::Arc;

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
    raw: RawStream,
    status: DeviceArray<i64>,
    /// Launch scratch owned by the stream (launches allocate nothing): the checked plan's grid
    /// barrier and out-of-LUT keys (`SCRATCH_INIT`). Launches on one stream run in order, so
    /// they share it safely.
    scratch: DeviceArray<i64>,
    /// The pinned staging of this stream's asynchronous step reports (shared with the pending
    /// reports, which give their staging back when taken or dropped).
    readbacks: Arc<ReadbackPool>,
}

// `Send`: everything a stream holds (its `&Gpu`, cust's stream, two device buffers) is. `Sync`
// as well, soundly: every method takes `&self` and only makes driver calls, which are
// thread-safe, and whatever two threads queue on one stream runs in stream order, so the launch
// scratch is never used by two kernels at once; capture takes `&mut self`. What sharing a
// stream between threads does not give is meaning: their launches interleave in no fixed order
// and share one status word, so give each thread its own stream (the `cuda` module docs).
static_assertions::assert_impl_all!(Stream<'static>: Send, Sync);
static_assertions::assert_impl_all!(Event<'static>: Send, Sync);

impl<'g> Stream<'g> {
    /// A new blocking stream with a clear status word, in `gpu`'s context.
    pub fn new(gpu: &'g Gpu) -> Result<Self, Error> {
        let raw = RawStream::new(gpu.context())?;
        let status = memory::zeroed::<i64>(STATUS_WORDS)?;
        let scratch = memory::zeroed::<i64>(SCRATCH_WORDS)?;
        memory::upload(&scratch, 0, &SCRATCH_INIT)?;
        Ok(Stream {
            gpu,
            raw,
            status,
            scratch,
            readbacks: Arc::default(),
        })
    }

    /// The pinned staging pool of this stream's asynchronous reports.
    pub(crate) fn readbacks(&self) -> &Arc<ReadbackPool> {
        &self.readbacks
    }

    /// The device address of the status word (for the asynchronous reports' readback).
    pub(crate) fn status_addr(&self) -> u64 {
        memory::addr(&self.status)
    }

    /// Violations delivered by the device step reports taken so far from this stream's canary
    /// ([`PendingDeviceReport::wait`](crate::cuda::PendingDeviceReport::wait) or `try_take`).
    pub fn delivered_violations(&self) -> u64 {
        self.readbacks.delivered_violations()
    }

    /// Pinned staging buffers allocated so far for this stream's asynchronous reports: 1 after
    /// the first step, 2 after the second when reports are taken one step late, and then no
    /// more (each allocation is a possible host stall).
    pub fn report_stagings_allocated(&self) -> u64 {
        self.readbacks.allocated()
    }

    /// The device this stream runs on.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Blocks the host until everything queued on this stream has run.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.raw.synchronize(self.gpu.context())
    }

    /// Synchronises, then returns the first malformed-data error the kernels of this stream
    /// recorded since the last [`clear_status`](Self::clear_status) (or since creation), as the
    /// [`Error`] the CPU op would return; `Ok` when there was none.
    pub fn status(&self) -> Result<(), Error> {
        self.synchronize()?;
        let mut words = [0i64; STATUS_WORDS];
        memory::download(&mut words, &self.status, 0)?;
        decode(&words)
    }

    /// Clears the status word (a synchronous copy, ordered after the queued launches).
    pub fn clear_status(&self) -> Result<(), Error> {
        memory::upload(&self.status, 0, &[0i64; STATUS_WORDS])
    }

    /// Records `event` at this point of the stream (an event of this stream's [`Gpu`]).
    pub fn record(&self, event: &Event<'_>) -> Result<(), Error> {
        self.raw.record(self.gpu.context(), &event.raw)
    }

    /// The raw `CUstream`, valid while this stream lives: for the engine's own kernels and
    /// copies on the same stream (and for the benchmark floors of `kv-canary-testkit`).
    pub fn as_raw(&self) -> CUstream {
        self.raw.handle()
    }

    /// Captures the launches `f` makes on the [`Capture`] into a CUDA graph, instead of running
    /// them, and instantiates it.
    ///
    /// Every buffer a captured launch takes is borrowed for `'a`, the graph's lifetime, so it
    /// stays alive and in place while the graph can replay; the stream is borrowed too (replays
    /// run on it, and nothing else can be queued on it during the capture). Inputs are refilled
    /// in place between replays with the buffers' `upload` methods. Capture runs in global mode:
    /// a transfer or allocation anywhere in the program during `f` fails the capture with an
    /// error instead of corrupting it. Every kernel file is loaded before the capture begins.
    pub fn capture<'a>(
        &'a mut self,
        f: impl FnOnce(&Capture<'a, 'g>) -> Result<(), Error>,
    ) -> Result<Graph<'a, 'g>, Error> {
        let stream: &'a Stream<'g> = self;
        stream.gpu.load_all()?;
        let open = stream.raw.begin_capture(stream.gpu.context())?;
        let result = f(&Capture {
            stream,
            _invariant: PhantomData,
        });
        let graph = open.end()?;
        result?;
        Ok(Graph {
            stream,
            graph: graph.instantiate(stream.gpu.context())?,
            _buffers: PhantomData,
        })
    }

    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            gpu: self.gpu,
            stream: self.raw.handle(),
            status: memory::ptr(&self.status),
            scratch: memory::ptr(&self.scratch),
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
    graph: ExecGraph,
    _buffers: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl<'a, 'g> Graph<'a, 'g> {
    /// Queues one replay of the captured launches on the capturing stream (no host sync).
    pub fn replay(&self) -> Result<(), Error> {
        // SAFETY: the graph is instantiated (`capture`); every buffer its nodes use is borrowed
        // for 'a (see `Capture`), so all of them are alive; the stream is the capturing one.
        unsafe {
            self.stream
                .raw
                .replay(self.stream.gpu.context(), &self.graph)
        }
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

/// A CUDA event of one [`Gpu`], for timing launches on its streams.
pub struct Event<'g> {
    gpu: &'g Gpu,
    raw: RawEvent,
}

impl<'g> Event<'g> {
    /// A new timing event in `gpu`'s context.
    pub fn new(gpu: &'g Gpu) -> Result<Self, Error> {
        Ok(Event {
            gpu,
            raw: RawEvent::new(gpu.context())?,
        })
    }

    /// Milliseconds of device time from `start` (an event of the same [`Gpu`]) to this event;
    /// waits for this event.
    pub fn elapsed_ms(&self, start: &Event<'_>) -> Result<f32, Error> {
        self.raw.elapsed_ms(self.gpu.context(), &start.raw)
    }
}

impl core::fmt::Debug for Event<'_> {
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
    use super::{CUstream, DevPtr, Gpu};

    /// The raw pieces of a launch target.
    pub struct Target<'s> {
        pub(crate) gpu: &'s Gpu,
        pub(crate) stream: CUstream,
        pub(crate) status: DevPtr<i64>,
        pub(crate) scratch: DevPtr<i64>,
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
