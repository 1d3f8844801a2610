//! Streams, events, stream capture and executable graphs: the raw handles, each owned by one
//! value and destroyed once. Every call that reaches the driver takes the [`PrimaryContext`]
//! the handle belongs to and makes it current first, so it runs in the right context on any
//! thread.

use super::context::PrimaryContext;
use super::error::check;
use crate::Error;
use cust::sys::{self, CUevent, CUgraph, CUgraphExec, CUresult, CUstream, CUstreamCaptureMode};

/// Whether a [`RawStream`] synchronises with the legacy default stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// Created with `CU_STREAM_DEFAULT`: ordered with the legacy default stream.
    Blocking,
    /// Created with `CU_STREAM_NON_BLOCKING`: not ordered with the legacy default stream.
    NonBlocking,
    /// The engine's stream, wrapped and not destroyed: its flags are the engine's.
    Foreign,
}

/// A CUDA stream of one context: created here (and destroyed on drop) or wrapped (the
/// engine's, never destroyed here). `Send` and `Sync`: the driver's stream calls are
/// thread-safe and take the handle by value.
#[derive(Debug)]
pub(crate) struct RawStream {
    handle: CUstream,
    kind: StreamKind,
}

// SAFETY: a `CUstream` is a handle the driver accepts from any thread; this value owns it (or,
// for a foreign stream, only uses it) and every call through it is a thread-safe driver call.
unsafe impl Send for RawStream {}
// SAFETY: as above; `&RawStream` only queues work or queries, which the driver serialises.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// A new stream of `context`: blocking (`CU_STREAM_DEFAULT`) or non-blocking
    /// (`CU_STREAM_NON_BLOCKING`, created with the raw call: cust 0.3 drops the flag,
    /// Rust-GPU/rust-cuda#15).
    pub(crate) fn create(context: &PrimaryContext, non_blocking: bool) -> Result<Self, Error> {
        context.make_current()?;
        let (flags, kind) = if non_blocking {
            (
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                StreamKind::NonBlocking,
            )
        } else {
            (
                sys::CUstream_flags::CU_STREAM_DEFAULT as u32,
                StreamKind::Blocking,
            )
        };
        let mut handle: CUstream = core::ptr::null_mut();
        // SAFETY: the driver writes a new stream of the current context into `handle`.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut handle, flags)
        })?;
        Ok(RawStream { handle, kind })
    }

    /// Wraps the engine's stream `handle`, which is never destroyed here.
    ///
    /// # Safety
    ///
    /// `handle` must be a live stream of the context the wrapper is used with, alive while the
    /// wrapper and everything queued through it is in use.
    pub(crate) unsafe fn foreign(handle: CUstream) -> Self {
        RawStream {
            handle,
            kind: StreamKind::Foreign,
        }
    }

    /// The handle, valid while `self` lives.
    pub(crate) fn handle(&self) -> CUstream {
        self.handle
    }

    /// How the stream was made.
    pub(crate) fn kind(&self) -> StreamKind {
        self.kind
    }

    /// The context the stream belongs to (`cuStreamGetCtx`).
    pub(crate) fn context_handle(&self) -> Result<sys::CUcontext, Error> {
        let mut context: sys::CUcontext = core::ptr::null_mut();
        // SAFETY: the stream is live; the driver writes one context handle into `context`.
        check("cuStreamGetCtx", unsafe {
            sys::cuStreamGetCtx(self.handle, &mut context)
        })?;
        Ok(context)
    }

    /// Blocks the host until everything queued has run.
    pub(crate) fn synchronize(&self, context: &PrimaryContext) -> Result<(), Error> {
        context.make_current()?;
        // SAFETY: the stream is live; this only blocks the thread.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.handle)
        })
    }

    /// Records `event` at this point of the stream.
    pub(crate) fn record(&self, context: &PrimaryContext, event: &RawEvent) -> Result<(), Error> {
        context.make_current()?;
        // SAFETY: the event and the stream are live handles of the same context.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event.handle, self.handle)
        })
    }

    /// Makes the work queued on this stream from now on wait until `event` (recorded on any
    /// stream of the same context) has completed; the host does not wait.
    pub(crate) fn wait_for(&self, context: &PrimaryContext, event: &RawEvent) -> Result<(), Error> {
        context.make_current()?;
        // SAFETY: the event and the stream are live handles of the same context.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.handle, event.handle, 0)
        })
    }

    /// Whether the stream is being captured into a graph (`cuStreamIsCapturing`).
    pub(crate) fn is_capturing(&self, context: &PrimaryContext) -> Result<bool, Error> {
        context.make_current()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is live; the driver writes one status into `status`.
        check("cuStreamIsCapturing", unsafe {
            sys::cuStreamIsCapturing(self.handle, &mut status)
        })?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Queues zeroing `words` 32-bit words at device address `dst` on this stream
    /// (`cuMemsetD32Async`: stream-ordered, capturable).
    ///
    /// # Safety
    ///
    /// `[dst, dst + 4 words)` must be live device memory of the stream's context, alive until
    /// the memset has run.
    pub(crate) unsafe fn zero_words(
        &self,
        context: &PrimaryContext,
        dst: u64,
        words: usize,
    ) -> Result<(), Error> {
        context.make_current()?;
        // SAFETY: the caller vouches for the destination; the stream is live.
        check("cuMemsetD32Async", unsafe {
            sys::cuMemsetD32Async(dst, 0, words, self.handle)
        })
    }

    /// Queues copying `src` to device address `dst` on this stream (`cuMemcpyHtoDAsync` from
    /// pageable memory: the driver stages `src` before returning, the copy itself is
    /// stream-ordered).
    ///
    /// # Safety
    ///
    /// `[dst, dst + size_of_val(src))` must be live device memory of the stream's context,
    /// alive until the copy has run.
    pub(crate) unsafe fn upload_words(
        &self,
        context: &PrimaryContext,
        dst: u64,
        src: &[i64],
    ) -> Result<(), Error> {
        context.make_current()?;
        // SAFETY: the caller vouches for the destination; `src` is a live host slice of the
        // given size; the stream is live.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                src.as_ptr().cast(),
                core::mem::size_of_val(src),
                self.handle,
            )
        })
    }

    /// Starts capturing this stream in global mode; the returned guard ends the capture (also
    /// when dropped during a panic, so the stream never stays capturing).
    pub(crate) fn begin_capture<'c>(
        &self,
        context: &'c PrimaryContext,
    ) -> Result<OpenCapture<'c>, Error> {
        // SAFETY: the handle is this stream's, live while `self` is.
        unsafe { begin_capture_on(context, self.handle()) }
    }

    /// Queues one replay of `graph` on this stream.
    ///
    /// # Safety
    ///
    /// `graph` must be instantiated, and every buffer its nodes use alive for as long as the
    /// replay can run.
    pub(crate) unsafe fn replay(
        &self,
        context: &PrimaryContext,
        graph: &ExecGraph,
    ) -> Result<(), Error> {
        // SAFETY: the handle is this stream's; the caller vouches for the graph's buffers.
        unsafe { launch_on(context, graph, self.handle()) }
    }
}

/// Starts capturing stream `raw` in global mode; the returned guard ends the capture.
///
/// # Safety
///
/// `raw` must be a live stream of `context`, alive until the capture ends.
pub(crate) unsafe fn begin_capture_on(
    context: &PrimaryContext,
    raw: CUstream,
) -> Result<OpenCapture<'_>, Error> {
    context.make_current()?;
    // SAFETY: `raw` is a live stream (the caller's promise); global capture mode only restricts
    // what other calls may do while the capture is open.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(raw, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
    })?;
    Ok(OpenCapture {
        context,
        raw,
        ended: false,
    })
}

/// Queues one replay of `graph` on stream `raw`.
///
/// # Safety
///
/// `raw` must be a live stream of `context`; `graph` instantiated, and every buffer its nodes
/// use alive for as long as the replay can run.
pub(crate) unsafe fn launch_on(
    context: &PrimaryContext,
    graph: &ExecGraph,
    raw: CUstream,
) -> Result<(), Error> {
    context.make_current()?;
    if graph.exec.is_null() {
        return Err(Error::Malformed {
            detail: "a graph was replayed before it was instantiated".to_owned(),
        });
    }
    // SAFETY: `exec` is a live executable graph (checked non-null: instantiated), the stream is
    // live; the caller vouches for the buffers.
    check("cuGraphLaunch", unsafe {
        sys::cuGraphLaunch(graph.exec, raw)
    })
}

impl Drop for RawStream {
    fn drop(&mut self) {
        if self.kind != StreamKind::Foreign {
            // SAFETY: the stream was created by `create`, is owned by this value and destroyed
            // once, here (work still queued on it completes; the driver defers the release).
            let _ = unsafe { sys::cuStreamDestroy_v2(self.handle) };
        }
    }
}

/// A CUDA event of one context, owned and destroyed on drop: a timing event or a sync event
/// (`CU_EVENT_DISABLE_TIMING`, cheaper to record and wait for). `Send` and `Sync` as the
/// driver's event calls are thread-safe.
#[derive(Debug)]
pub(crate) struct RawEvent {
    handle: CUevent,
}

// SAFETY: a `CUevent` is a handle the driver accepts from any thread; this value owns it.
unsafe impl Send for RawEvent {}
// SAFETY: `&RawEvent` only records, queries, waits or reads the elapsed time, all thread-safe
// driver calls.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// A new event of `context`: a timing event, or a sync event when `timing` is false.
    pub(crate) fn new(context: &PrimaryContext, timing: bool) -> Result<Self, Error> {
        context.make_current()?;
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT as u32
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
        };
        let mut handle: CUevent = core::ptr::null_mut();
        // SAFETY: the driver writes a new event of the current context into `handle`.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut handle, flags)
        })?;
        Ok(RawEvent { handle })
    }

    /// Whether the work before the last record has completed (an event never recorded has);
    /// never blocks.
    pub(crate) fn query(&self, context: &PrimaryContext) -> Result<bool, Error> {
        context.make_current()?;
        // SAFETY: the event is live and owned by `self`.
        match unsafe { sys::cuEventQuery(self.handle) } {
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            result => check("cuEventQuery", result).map(|()| true),
        }
    }

    /// Blocks the host until the work before the last record has completed.
    pub(crate) fn synchronize(&self, context: &PrimaryContext) -> Result<(), Error> {
        context.make_current()?;
        // SAFETY: the event is live and owned by `self`; this only blocks the thread.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.handle)
        })
    }

    /// Milliseconds of device time from `start` to this event; waits for this event.
    pub(crate) fn elapsed_ms(
        &self,
        context: &PrimaryContext,
        start: &RawEvent,
    ) -> Result<f32, Error> {
        self.synchronize(context)?;
        let mut ms = 0f32;
        // SAFETY: both events are live; the driver writes one float into `ms`.
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, start.handle, self.handle)
        })?;
        Ok(ms)
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: the event is owned by this value and destroyed once, here.
        let _ = unsafe { sys::cuEventDestroy_v2(self.handle) };
    }
}

/// An open stream capture; [`end`](Self::end) turns it into a graph.
#[derive(Debug)]
pub(crate) struct OpenCapture<'c> {
    context: &'c PrimaryContext,
    raw: CUstream,
    ended: bool,
}

impl OpenCapture<'_> {
    /// Ends the capture: the graph it recorded, not yet instantiated.
    pub(crate) fn end(mut self) -> Result<ExecGraph, Error> {
        let graph = self.end_raw()?;
        Ok(ExecGraph {
            graph,
            exec: core::ptr::null_mut(),
        })
    }

    fn end_raw(&mut self) -> Result<CUgraph, Error> {
        self.ended = true;
        self.context.make_current()?;
        let mut graph: CUgraph = core::ptr::null_mut();
        // SAFETY: the stream is capturing (begun in `begin_capture`, ended only here); `graph`
        // receives the captured graph, which the caller owns.
        let result = unsafe { sys::cuStreamEndCapture(self.raw, &mut graph) };
        if result != sys::CUresult::CUDA_SUCCESS && !graph.is_null() {
            // SAFETY: a graph returned with an error is still ours to destroy.
            unsafe { sys::cuGraphDestroy(graph) };
        }
        check("cuStreamEndCapture", result)?;
        Ok(graph)
    }
}

impl Drop for OpenCapture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.end_raw().map(|g| {
                // SAFETY: `g` is the graph just returned by the capture and owned by nobody.
                unsafe { sys::cuGraphDestroy(g) }
            });
        }
    }
}

/// A captured graph and (once instantiated) its executable instance.
#[derive(Debug)]
pub(crate) struct ExecGraph {
    graph: CUgraph,
    exec: CUgraphExec,
}

// SAFETY: both handles are owned by this value alone; the driver accepts them from any thread.
// Not `Sync`: one executable graph is launched by one thread at a time (`&mut` or its owner).
unsafe impl Send for ExecGraph {}

impl ExecGraph {
    /// Instantiates the captured graph in `context` (once; replays need it).
    pub(crate) fn instantiate(mut self, context: &PrimaryContext) -> Result<Self, Error> {
        context.make_current()?;
        // SAFETY: `self.graph` is the live graph the capture produced; `exec` (null so far)
        // receives a new executable graph owned by `self` from here on.
        check("cuGraphInstantiate", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut self.exec, self.graph, 0)
        })?;
        Ok(self)
    }
}

impl Drop for ExecGraph {
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
