//! [`Stream`]s, the [`Queue`]s launches go to, CUDA [`Graph`] capture and [`Event`]s.
//!
//! # Which calls are stream-ordered
//!
//! Stream-ordered (queued on the stream, ordered with everything else queued on it, capturable):
//! every launch, [`Stream::clear_status`], [`Stream::reset_scratch`], [`Stream::record`],
//! [`Stream::wait_for`], the ring clear of a step's `plan` and the report copies of its
//! `verify_tail`.
//!
//! Not stream-ordered: every synchronous transfer of the crate (`upload`, `to_host`, `clear`,
//! `from_host`, the zeroing of new buffers), which runs on the legacy default stream. On a
//! blocking stream ([`Stream::new`]) they are ordered with the stream's work anyway (a
//! blocking stream synchronises with the legacy default stream). On a non-blocking
//! ([`Stream::non_blocking`]) or foreign ([`Stream::from_raw`], `Stream::from_cudarc`)
//! stream they are **not**: order them yourself (synchronise the stream before a transfer that
//! reads or overwrites what its launches use, and call [`Gpu::synchronize`] after transfers,
//! before launching on such a stream), or use the stream-ordered uploads where a buffer offers
//! them. The constructors of those streams synchronise the context once before they return, so
//! the stream's own words (status, launch scratch) are initialised before anything runs on it;
//! the allocations of a canary on such a stream ([`Backend`](crate::backend::Backend) methods of
//! `Stream`) do the same.

use super::gpu::Gpu;
use super::readbacks::ReadbackPool;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::abi::status::{decode, STATUS_WORDS};
use crate::cuda::driver::array::DeviceArray;
use crate::cuda::driver::memory;
use crate::cuda::driver::stream::{ExecGraph, RawEvent, RawStream, StreamKind};
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
/// Three kinds: a *blocking* stream ([`Stream::new`]: it synchronises with the legacy default
/// stream, on which every synchronous transfer of this module runs, so transfers and launches
/// are ordered as written), a crate-owned *non-blocking* stream ([`Stream::non_blocking`]) and
/// the engine's own stream, wrapped ([`Stream::from_raw`], `Stream::from_cudarc` with the
/// `cudarc` feature). On the last two the synchronous transfers are not ordered with the
/// stream (the module docs list what is). Launches on one stream run in order; launches on two
/// streams touching the same buffer are the caller's to order ([`Stream::record`] and
/// [`Stream::wait_for`] with an [`Event`] do it on the device).
pub struct Stream {
    raw: RawStream,
    status: DeviceArray<i64>,
    /// Launch scratch owned by the stream (launches allocate nothing): the checked plan's grid
    /// barrier and out-of-LUT keys (`SCRATCH_INIT`). Launches on one stream run in order, so
    /// they share it safely.
    scratch: DeviceArray<i64>,
    /// The pinned staging of this stream's asynchronous step reports (shared with the pending
    /// reports, which give their staging back when taken or dropped).
    readbacks: Arc<ReadbackPool>,
    /// What keeps a foreign stream alive (a cudarc stream's `Arc`), dropped after `raw`.
    _owner: Option<Arc<dyn core::any::Any + Send + Sync>>,
    /// Declared last, so dropped last: it may hold the last handle of the context everything
    /// above lives in.
    gpu: Gpu,
}

// `Send`: everything a stream holds (its `Gpu` handle, cust's stream, two device buffers) is. `Sync`
// as well, soundly: every method takes `&self` and only makes driver calls, which are
// thread-safe, and whatever two threads queue on one stream runs in stream order, so the launch
// scratch is never used by two kernels at once; capture takes `&mut self`. What sharing a
// stream between threads does not give is meaning: their launches interleave in no fixed order
// and share one status word, so give each thread its own stream (the `cuda` module docs).
static_assertions::assert_impl_all!(Stream: Send, Sync);
static_assertions::assert_impl_all!(Event: Send, Sync);
static_assertions::assert_impl_all!(Graph<'static>: Send);

impl Stream {
    /// A new blocking stream with a clear status word, in `gpu`'s context (it keeps a clone
    /// of `gpu`).
    pub fn new(gpu: &Gpu) -> Result<Self, Error> {
        Stream::with_raw(gpu, RawStream::create(gpu.context(), false)?, None)
    }

    /// A new non-blocking stream (`CU_STREAM_NON_BLOCKING`, created with the raw driver call:
    /// cust 0.3 drops the flag) with a clear status word, in `gpu`'s context. Its work does not
    /// synchronise with the legacy default stream, so it overlaps the engine's other streams;
    /// the synchronous transfers of this crate are then not ordered with it (the module docs
    /// say what to do). Synchronises the context once before returning, so the stream's own
    /// words are initialised before anything runs on it.
    pub fn non_blocking(gpu: &Gpu) -> Result<Self, Error> {
        Stream::with_raw(gpu, RawStream::create(gpu.context(), true)?, None)
    }

    /// Wraps the engine's own stream `raw`: launches, step stages and report copies of a
    /// canary on this `Stream` are queued on `raw`, in order with the engine's own work there.
    /// The stream is never destroyed by the wrapper. Checks that `raw` belongs to `gpu`'s
    /// primary context ([`Error::Malformed`] naming both contexts otherwise) and synchronises
    /// the context once before returning (the wrapper's status and scratch words are
    /// initialised by then). Its synchronous transfers are not ordered with `raw` (see the
    /// module docs).
    ///
    /// # Safety
    ///
    /// `raw` must be a live stream of `gpu`'s primary context (not the legacy or per-thread
    /// default stream), and stay alive while the returned `Stream`, and anything queued
    /// through it (a pending report's copies, a captured graph's replays), is in use.
    pub unsafe fn from_raw(gpu: &Gpu, raw: CUstream) -> Result<Self, Error> {
        // SAFETY: the caller vouches for `raw`'s context and lifetime.
        Stream::wrap(gpu, unsafe { RawStream::foreign(raw) }, None)
    }

    /// Wraps a cudarc stream (feature `cudarc`), keeping its `Arc` alive as long as the
    /// `Stream`: as [`from_raw`](Self::from_raw), safe because the `Arc` keeps the stream and
    /// its context alive. The stream must be on `gpu`'s device and in its primary context
    /// (cudarc's `CudaContext` retains the primary context); otherwise [`Error::Malformed`]
    /// names both devices and contexts.
    #[cfg(feature = "cudarc")]
    pub fn from_cudarc(gpu: &Gpu, stream: Arc<cudarc::driver::CudaStream>) -> Result<Self, Error> {
        let context = stream.context();
        let (ordinal, theirs) = (context.ordinal(), context.cu_ctx() as usize);
        let ours = gpu.context().raw() as usize;
        if ordinal != gpu.ordinal() as usize || theirs != ours {
            return Err(Error::Malformed {
                detail: format!(
                    "the cudarc stream is on device {ordinal} (context {theirs:#x}), \
                     this Gpu is device {} (primary context {ours:#x})",
                    gpu.ordinal()
                ),
            });
        }
        let raw: CUstream = stream.cu_stream().cast();
        // SAFETY: `raw` is the live stream of `stream`, in `gpu`'s primary context (checked
        // above); the `Arc` kept in the wrapper keeps it alive as long as the wrapper.
        let foreign = unsafe { RawStream::foreign(raw) };
        Stream::wrap(gpu, foreign, Some(stream))
    }

    /// A wrapper of a foreign stream, checked to be in `gpu`'s context.
    fn wrap(
        gpu: &Gpu,
        raw: RawStream,
        owner: Option<Arc<dyn core::any::Any + Send + Sync>>,
    ) -> Result<Self, Error> {
        let theirs = raw.context_handle()?;
        let ours = gpu.context().raw();
        if theirs != ours {
            return Err(Error::Malformed {
                detail: format!(
                    "the stream belongs to context {:#x}, not to the primary context \
                     {:#x} of device {} ({})",
                    theirs as usize,
                    ours as usize,
                    gpu.ordinal(),
                    gpu.name()
                ),
            });
        }
        Stream::with_raw(gpu, raw, owner)
    }

    /// The stream's words allocated and initialised; for a stream not ordered with the legacy
    /// default stream, the context is synchronised so they are in place before it runs work.
    fn with_raw(
        gpu: &Gpu,
        raw: RawStream,
        owner: Option<Arc<dyn core::any::Any + Send + Sync>>,
    ) -> Result<Self, Error> {
        gpu.make_current()?;
        let status = memory::zeroed::<i64>(STATUS_WORDS)?;
        let scratch = memory::zeroed::<i64>(SCRATCH_WORDS)?;
        memory::upload(&scratch, 0, &SCRATCH_INIT)?;
        let stream = Stream {
            raw,
            status,
            scratch,
            readbacks: Arc::default(),
            _owner: owner,
            gpu: gpu.clone(),
        };
        stream.settle_transfers()?;
        Ok(stream)
    }

    /// Synchronises the context when this stream is not ordered with the legacy default
    /// stream, so that the synchronous transfers and zeroing done so far have landed before
    /// anything queued on it next runs; nothing for a blocking stream. Constructors that
    /// allocate or upload for this stream call it once.
    pub(crate) fn settle_transfers(&self) -> Result<(), Error> {
        if self.raw.kind() == StreamKind::Blocking {
            Ok(())
        } else {
            self.gpu.synchronize()
        }
    }

    /// Whether this stream synchronises with the legacy default stream (made by
    /// [`Stream::new`]), so that the synchronous transfers of this crate are ordered with its
    /// work. `false` for [`Stream::non_blocking`] and for wrapped streams (whatever their
    /// flags: the crate does not rely on them).
    pub fn is_blocking(&self) -> bool {
        self.raw.kind() == StreamKind::Blocking
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
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Blocks the host until everything queued on this stream has run.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.raw.synchronize(self.gpu.context())
    }

    /// Synchronises, then returns the first malformed-data error the kernels of this stream
    /// recorded since the last [`clear_status`](Self::clear_status) (or since creation, or since
    /// the readback of the last step or sweep report of a canary on this stream, which consumes
    /// it), as the [`Error`] the CPU op would return; `Ok` when there was none.
    pub fn status(&self) -> Result<(), Error> {
        self.synchronize()?;
        let mut words = [0i64; STATUS_WORDS];
        memory::download(&mut words, &self.status, 0)?;
        decode(&words)
    }

    /// Clears the status word: stream-ordered (`cuMemsetD32Async` on this stream), after the
    /// launches queued before it and before those queued after it, on every kind of stream;
    /// capturable. Never blocks.
    pub fn clear_status(&self) -> Result<(), Error> {
        // SAFETY: the status buffer (`STATUS_WORDS` i64, i.e. twice as many 32-bit words) is
        // owned by this stream and allocated in its context; it is freed only when the stream
        // drops (`cuMemFree` waits for the device).
        unsafe {
            self.raw.zero_words(
                self.gpu.context(),
                memory::addr(&self.status),
                2 * STATUS_WORDS,
            )
        }
    }

    /// Resets the launch scratch to its idle values, stream-ordered (`cuMemcpyHtoDAsync` on
    /// this stream): for recovery after a launch was aborted mid-barrier (the kernels restore
    /// it themselves otherwise). Never blocks.
    pub fn reset_scratch(&self) -> Result<(), Error> {
        // SAFETY: the scratch buffer holds `SCRATCH_WORDS` i64 owned by this stream, in its
        // context, freed only when the stream drops; the driver stages the pageable
        // `SCRATCH_INIT` before returning.
        unsafe {
            self.raw.upload_words(
                self.gpu.context(),
                memory::addr(&self.scratch),
                &SCRATCH_INIT,
            )
        }
    }

    /// Records `event` at this point of the stream (an event of this stream's [`Gpu`]):
    /// stream-ordered, never blocks.
    pub fn record(&self, event: &Event) -> Result<(), Error> {
        self.raw.record(self.gpu.context(), &event.raw)
    }

    /// Makes everything queued on this stream from now on wait on the device until `event`
    /// (recorded on any stream of this [`Gpu`], e.g. after the engine's forward pass on its
    /// compute stream) has completed (`cuStreamWaitEvent`). The host does not wait. A tail
    /// verify queued after this reads what the work before the event wrote.
    pub fn wait_for(&self, event: &Event) -> Result<(), Error> {
        self.raw.wait_for(self.gpu.context(), &event.raw)
    }

    /// Whether the stream is being captured into a graph right now (by
    /// [`capture`](Self::capture), a [`StepGraph`](crate::cuda::StepGraph), or the engine's own
    /// `cuStreamBeginCapture` on [`as_raw`](Self::as_raw)).
    pub fn is_capturing(&self) -> Result<bool, Error> {
        self.raw.is_capturing(self.gpu.context())
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
        f: impl FnOnce(&Capture<'a>) -> Result<(), Error>,
    ) -> Result<Graph<'a>, Error> {
        let stream: &'a Stream = self;
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
            gpu: &self.gpu,
            stream: self.raw.handle(),
            status: memory::ptr(&self.status),
            scratch: memory::ptr(&self.scratch),
        }
    }
}

impl core::fmt::Debug for Stream {
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
pub struct Capture<'a> {
    stream: &'a Stream,
    _invariant: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl core::fmt::Debug for Capture<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Capture").finish_non_exhaustive()
    }
}

/// A captured, instantiated CUDA graph: the launches of one [`Stream::capture`], replayable on
/// that stream. The buffers they use stay borrowed while it lives.
pub struct Graph<'a> {
    stream: &'a Stream,
    graph: ExecGraph,
    _buffers: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl<'a> Graph<'a> {
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
    pub fn stream(&self) -> &'a Stream {
        self.stream
    }
}

impl core::fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Graph").finish_non_exhaustive()
    }
}

/// A CUDA event of one [`Gpu`]: a timing event ([`Event::new`]) or a sync event
/// ([`Event::sync`], no timing: cheaper), recorded on a stream with [`Stream::record`] and
/// waited for by another stream with [`Stream::wait_for`] (no host sync), or by the host with
/// [`query`](Event::query) and [`synchronize`](Event::synchronize).
pub struct Event {
    raw: RawEvent,
    /// Dropped after the event (it may hold the context's last handle).
    gpu: Gpu,
}

impl Event {
    /// A new timing event in `gpu`'s context (it keeps a clone of `gpu`).
    pub fn new(gpu: &Gpu) -> Result<Self, Error> {
        Ok(Event {
            raw: RawEvent::new(gpu.context(), true)?,
            gpu: gpu.clone(),
        })
    }

    /// A new sync event (`CU_EVENT_DISABLE_TIMING`) in `gpu`'s context: for ordering streams
    /// ([`Stream::wait_for`]) and polling, not for [`elapsed_ms`](Self::elapsed_ms) (an error
    /// on it).
    pub fn sync(gpu: &Gpu) -> Result<Self, Error> {
        Ok(Event {
            raw: RawEvent::new(gpu.context(), false)?,
            gpu: gpu.clone(),
        })
    }

    /// Whether the work queued before the event's last record has completed (an event never
    /// recorded has); never blocks (`cuEventQuery`).
    pub fn query(&self) -> Result<bool, Error> {
        self.raw.query(self.gpu.context())
    }

    /// Blocks the host until the work queued before the event's last record has completed
    /// (`cuEventSynchronize`).
    pub fn synchronize(&self) -> Result<(), Error> {
        self.raw.synchronize(self.gpu.context())
    }

    /// Milliseconds of device time from `start` (an event of the same [`Gpu`]) to this event;
    /// waits for this event.
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32, Error> {
        self.raw.elapsed_ms(self.gpu.context(), &start.raw)
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

impl<'a> Queue<'a> for Stream {}
impl<'a> Queue<'a> for Capture<'a> {}

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

impl sealed::LaunchTarget for Stream {
    fn target(&self) -> Target<'_> {
        Stream::target(self)
    }
}

impl sealed::LaunchTarget for Capture<'_> {
    fn target(&self) -> Target<'_> {
        self.stream.target()
    }
}
