//! Streams, events, stream capture and executable graphs: the raw handles, each owned by one
//! value and destroyed once. Every call that reaches the driver takes the [`PrimaryContext`]
//! the handle belongs to and makes it current first, so it runs in the right context on any
//! thread.

use super::context::PrimaryContext;
use super::error::{check, cust_error};
use crate::Error;
use cust::stream::StreamFlags;
use cust::sys::{self, CUgraph, CUgraphExec, CUstream, CUstreamCaptureMode};

/// A blocking CUDA stream of one context. `Send` and `Sync` as cust's stream is (the driver's
/// stream calls are thread-safe).
#[derive(Debug)]
pub(crate) struct RawStream(cust::stream::Stream);

impl RawStream {
    /// A new blocking stream of `context` (`DEFAULT` flags; cust would drop `NON_BLOCKING`
    /// anyway, Rust-GPU/rust-cuda#15).
    pub(crate) fn new(context: &PrimaryContext) -> Result<Self, Error> {
        context.make_current()?;
        cust::stream::Stream::new(StreamFlags::DEFAULT, None)
            .map(RawStream)
            .map_err(cust_error("cuStreamCreate"))
    }

    /// The handle, valid while `self` lives.
    pub(crate) fn handle(&self) -> CUstream {
        self.0.as_inner()
    }

    /// Blocks the host until everything queued has run.
    pub(crate) fn synchronize(&self, context: &PrimaryContext) -> Result<(), Error> {
        context.make_current()?;
        self.0
            .synchronize()
            .map_err(cust_error("cuStreamSynchronize"))
    }

    /// Records `event` at this point of the stream.
    pub(crate) fn record(&self, context: &PrimaryContext, event: &RawEvent) -> Result<(), Error> {
        context.make_current()?;
        event.0.record(&self.0).map_err(cust_error("cuEventRecord"))
    }

    /// Starts capturing this stream in global mode; the returned guard ends the capture (also
    /// when dropped during a panic, so the stream never stays capturing).
    pub(crate) fn begin_capture<'c>(
        &self,
        context: &'c PrimaryContext,
    ) -> Result<OpenCapture<'c>, Error> {
        context.make_current()?;
        let raw = self.handle();
        // SAFETY: `raw` is this stream's live handle; global capture mode only restricts what
        // other calls may do while the capture is open.
        check("cuStreamBeginCapture", unsafe {
            sys::cuStreamBeginCapture_v2(raw, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        })?;
        Ok(OpenCapture {
            context,
            raw,
            ended: false,
        })
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
        context.make_current()?;
        // SAFETY: `exec` is a live executable graph and the stream is alive; the caller
        // vouches for the buffers.
        check("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(graph.exec, self.handle())
        })
    }
}

/// A CUDA timing event of one context. `Send` and `Sync` as cust's event is.
#[derive(Debug)]
pub(crate) struct RawEvent(cust::event::Event);

impl RawEvent {
    /// A new timing event of `context`.
    pub(crate) fn new(context: &PrimaryContext) -> Result<Self, Error> {
        context.make_current()?;
        cust::event::Event::new(cust::event::EventFlags::DEFAULT)
            .map(RawEvent)
            .map_err(cust_error("cuEventCreate"))
    }

    /// Milliseconds of device time from `start` to this event; waits for this event.
    pub(crate) fn elapsed_ms(
        &self,
        context: &PrimaryContext,
        start: &RawEvent,
    ) -> Result<f32, Error> {
        context.make_current()?;
        self.0
            .synchronize()
            .map_err(cust_error("cuEventSynchronize"))?;
        self.0
            .elapsed_time_f32(&start.0)
            .map_err(cust_error("cuEventElapsedTime"))
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
