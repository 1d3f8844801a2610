//! Pinned (page-locked) host memory and stream-ordered readbacks into it: the raw calls behind
//! the asynchronous step reports (`cuMemHostAlloc` with `DEVICEMAP`, `cuMemFreeHost`, the
//! readback kernel's launch, `cuEventRecord`, `cuEventQuery`, `cuEventSynchronize`).
//!
//! [`PinnedHost`] owns one allocation, mapped into the device's address space. [`Readback`] owns
//! two of them (`i64` and `i32` words) and an event, and is the only way to copy into them
//! asynchronously: pieces are queued between [`begin`](Readback::begin) and
//! [`finish`](Readback::finish) and copied by launches of `kv_canary_readback`
//! (kernels/readback.cu, up to 16 pieces a launch: one launch for a step report, where one
//! `cuMemcpyDtoHAsync` a piece cost the host about 2 µs each); `finish` records the event after
//! them, and the words can be read only once that event has completed
//! ([`read`](Readback::read) returns `None` before), so the host never reads a word the device
//! may still be writing.

use super::context::PrimaryContext;
use super::error::check;
use super::launch::{launch_struct, LaunchDims};
use super::module::Function;
use crate::cuda::abi::args::ReadbackArgs;
use crate::cuda::abi::ptr::DevPtr;
use crate::cuda::abi::shared::{READBACK_PIECES, READBACK_THREADS};
use crate::memory::Element;
use crate::Error;
use core::ptr::NonNull;
use cust::sys::{self, CUcontext, CUevent, CUresult, CUstream};

/// `len` elements of `T` in pinned host memory, zero-filled, freed on drop.
#[derive(Debug)]
pub(crate) struct PinnedHost<T: Element> {
    ptr: NonNull<T>,
    len: usize,
    /// The allocation's address in the device's address space (`DEVICEMAP`): kernels write
    /// the report pieces there.
    device: u64,
}

// SAFETY: the allocation is owned by this value alone (like a `Box<[T]>`); pinned memory may be
// used from any thread (it is `PORTABLE`).
unsafe impl<T: Element + Send> Send for PinnedHost<T> {}
// SAFETY: `&PinnedHost` only reads (`as_slice`); writes need `&mut` or go through `Readback`,
// which owns its allocations privately.
unsafe impl<T: Element + Sync> Sync for PinnedHost<T> {}

impl<T: Element> PinnedHost<T> {
    /// `len` zeroed elements of pinned host memory, allocated with `context` current (`len` 0
    /// allocates one element, so the pointer is always a live allocation).
    pub(crate) fn zeroed(context: &PrimaryContext, len: usize) -> Result<Self, Error> {
        let bytes = len
            .max(1)
            .checked_mul(core::mem::size_of::<T>())
            .ok_or(Error::OutOfRange {
                what: "pinned host buffer size in bytes",
                value: i64::MAX,
                allowed: "[0, usize::MAX]",
            })?;
        context.make_current()?;
        let mut raw: *mut core::ffi::c_void = core::ptr::null_mut();
        // SAFETY: the driver writes the address of a new pinned allocation of `bytes` bytes (or
        // nothing, with an error) into `raw`.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(
                &mut raw,
                bytes,
                sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
            )
        })?;
        let ptr = NonNull::new(raw.cast::<T>()).ok_or(Error::AllocationFailed {
            what: "pinned host buffer",
            rows: len as u128,
            cols: 1,
            element_bytes: core::mem::size_of::<T>(),
        })?;
        // SAFETY: `ptr` is a fresh allocation of `bytes` bytes, suitably aligned (the driver
        // returns page-aligned memory); zero bytes are a valid value of every element type.
        unsafe { core::ptr::write_bytes(ptr.as_ptr().cast::<u8>(), 0, bytes) };
        let host = PinnedHost {
            ptr,
            len,
            device: 0,
        };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host.ptr` is a live `DEVICEMAP` allocation of the current context; the driver
        // writes its device address into `device`. (On error `host` frees the allocation.)
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host.ptr.as_ptr().cast(), 0)
        })?;
        let mut host = host;
        host.device = device;
        Ok(host)
    }

    /// The elements.
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` is a live, initialised allocation of at least `len` elements owned by
        // `self`; asynchronous writes into it happen only through `Readback`, which hands out
        // this slice only after its copies completed.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Elements held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<T: Element> Drop for PinnedHost<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `cuMemHostAlloc` and is freed once, here; no copy into it is
        // in flight (`Readback` waits for its copies before dropping its buffers).
        let _ = unsafe { sys::cuMemFreeHost(self.ptr.as_ptr().cast()) };
    }
}

/// The `i64` and `i32` words of a completed [`Readback`].
pub(crate) type Words<'a> = (&'a [i64], &'a [i32]);

/// Where a [`Readback`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No copy queued since the last completed readback: the words are stable.
    Idle,
    /// Copies queued, the event not yet recorded after them.
    Queued,
    /// Copies queued and the event recorded after them.
    Recorded,
    /// Copies captured into a graph (not run): the words are written by the graph's replays,
    /// each followed by [`Readback::rearm`].
    Captured,
}

/// Pinned `i64` and `i32` words filled by stream-ordered device-to-host copies, and the event
/// that tells when they have landed.
#[derive(Debug)]
pub(crate) struct Readback {
    wide: PinnedHost<i64>,
    narrow: PinnedHost<i32>,
    /// A `DISABLE_TIMING` event owned by this readback, destroyed on drop.
    event: CUevent,
    state: State,
    /// The context the copies run in (to wait for them on drop).
    context: CUcontext,
    /// The pieces queued since [`begin`](Self::begin) and not launched yet (boxed: a pending
    /// report stays small; allocated once with the readback).
    pending: Box<ReadbackArgs>,
    /// The readback kernel (`kv_canary_readback`) of this readback's context, given by
    /// [`begin`](Self::begin).
    kernel: Option<Function>,
    /// Its launches are programmatic dependent launches ([`LaunchDims::early_start`]), given
    /// by [`begin`](Self::begin).
    early_start: bool,
}

// SAFETY: the pinned buffers are `Send`; the event and context are handles the driver accepts
// from any thread (its event calls are thread-safe).
unsafe impl Send for Readback {}
// SAFETY: every `&self` method only queries the event or reads words after their copies
// completed.
unsafe impl Sync for Readback {}

impl Readback {
    /// A readback of `wide` `i64` words and `narrow` `i32` words in `context`.
    pub(crate) fn new(context: &PrimaryContext, wide: usize, narrow: usize) -> Result<Self, Error> {
        let wide = PinnedHost::zeroed(context, wide)?;
        let narrow = PinnedHost::zeroed(context, narrow)?;
        let mut event: CUevent = core::ptr::null_mut();
        // SAFETY: the driver writes a new event of the current context into `event`.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(
                &mut event,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
            )
        })?;
        let mut raw: CUcontext = core::ptr::null_mut();
        // SAFETY: the driver writes the current context (made current by `zeroed`) into `raw`.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut raw) })?;
        Ok(Readback {
            wide,
            narrow,
            event,
            state: State::Idle,
            context: raw,
            pending: Box::default(),
            kernel: None,
            early_start: false,
        })
    }

    /// `i64` words held.
    pub(crate) fn wide_len(&self) -> usize {
        self.wide.len()
    }

    /// `i32` words held.
    pub(crate) fn narrow_len(&self) -> usize {
        self.narrow.len()
    }

    /// Starts a new readback: the words are unreadable until the copies queued from now on
    /// and the event [`finish`](Self::finish) records have run. `kernel` is the readback kernel
    /// (`kv_canary_readback`) of this readback's context: the pieces are copied by launches of
    /// it (up to 16 pieces a launch), not by one `cuMemcpyDtoHAsync` each, launched early
    /// ([`LaunchDims::early_start`]) when `early_start` says so.
    pub(crate) fn begin(&mut self, kernel: Function, early_start: bool) {
        self.state = State::Queued;
        *self.pending = ReadbackArgs::default();
        self.kernel = Some(kernel);
        self.early_start = early_start;
    }

    /// Queues a copy of `len` `i64` words from device address `src` into words `[at, at +
    /// len)` on `stream`.
    ///
    /// `src` must be the address of `len` live device words of `context` (the device layer
    /// passes whole buffers and scalars it holds); the host side is bounds-checked here.
    pub(crate) fn copy_wide(
        &mut self,
        context: &PrimaryContext,
        at: usize,
        src: u64,
        len: usize,
        stream: CUstream,
    ) -> Result<(), Error> {
        self.copy_wide_words(context, at, src, len, false, stream)
    }

    /// As [`copy_wide`](Self::copy_wide), and the `len` source words are zeroed once copied, in
    /// the same launch (a report consuming the stream's status word: the next report holds the
    /// errors recorded after this one). The source must be written by nothing else while the
    /// stream's work runs (the status word: only this stream's launches write it).
    pub(crate) fn copy_wide_consumed(
        &mut self,
        context: &PrimaryContext,
        at: usize,
        src: u64,
        len: usize,
        stream: CUstream,
    ) -> Result<(), Error> {
        self.copy_wide_words(context, at, src, len, true, stream)
    }

    /// [`copy_wide`](Self::copy_wide), the source zeroed once copied with `consume`.
    fn copy_wide_words(
        &mut self,
        context: &PrimaryContext,
        at: usize,
        src: u64,
        len: usize,
        consume: bool,
        stream: CUstream,
    ) -> Result<(), Error> {
        Self::host_range(&self.wide, at, len, self.state)?;
        let dst = self.wide.device + (at * 8) as u64;
        self.push(context, dst, src, len * 8, None, consume, stream)
    }

    /// As [`copy_wide`](Self::copy_wide), copying only the first `clamp(*count, 0, len / unit)`
    /// units of `unit` words, `count` the device address of a live `i32` of `context` (the
    /// ring's write index before its rows: only the recorded rows travel). The words past them
    /// keep older values: read only the units the count (copied too) names.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_wide_counted(
        &mut self,
        context: &PrimaryContext,
        at: usize,
        src: u64,
        len: usize,
        count: u64,
        unit: usize,
        stream: CUstream,
    ) -> Result<(), Error> {
        Self::host_range(&self.wide, at, len, self.state)?;
        if unit == 0 {
            return Err(Error::OutOfRange {
                what: "counted readback unit",
                value: 0,
                allowed: "at least one word",
            });
        }
        let dst = self.wide.device + (at * 8) as u64;
        self.push(
            context,
            dst,
            src,
            len * 8,
            Some((count, unit * 8)),
            false,
            stream,
        )
    }

    /// Queues a copy of `len` `i32` words from device address `src` into words `[at, at +
    /// len)` on `stream` (preconditions of [`copy_wide`](Self::copy_wide)).
    pub(crate) fn copy_narrow(
        &mut self,
        context: &PrimaryContext,
        at: usize,
        src: u64,
        len: usize,
        stream: CUstream,
    ) -> Result<(), Error> {
        Self::host_range(&self.narrow, at, len, self.state)?;
        let dst = self.narrow.device + (at * 4) as u64;
        self.push(context, dst, src, len * 4, None, false, stream)
    }

    /// The host address of `[at, at + len)` of `buffer`, checked against its length; copies
    /// only between `begin` and `finish`.
    fn host_range<T: Element>(
        buffer: &PinnedHost<T>,
        at: usize,
        len: usize,
        state: State,
    ) -> Result<*mut T, Error> {
        if state != State::Queued {
            return Err(Error::OutOfRange {
                what: "readback copy outside begin/finish",
                value: 0,
                allowed: "a copy between begin and finish",
            });
        }
        if at.checked_add(len).is_none_or(|end| end > buffer.len()) {
            return Err(Error::LengthMismatch {
                what: "pinned readback",
                expected: buffer.len().saturating_sub(at),
                found: len,
            });
        }
        // SAFETY: `at <= len(buffer)` (checked above), so the offset stays inside (or one past)
        // the allocation.
        Ok(unsafe { buffer.ptr.as_ptr().add(at) })
    }

    /// Adds a piece of `bytes` bytes from device address `src` to device-mapped staging address
    /// `dst` to the pending launch (with `counted`: only as many units of the given bytes as
    /// the device `i32` at that address names; with `consume`, the source zeroed once copied),
    /// launching it first when it is full.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        context: &PrimaryContext,
        dst: u64,
        src: u64,
        bytes: usize,
        counted: Option<(u64, usize)>,
        consume: bool,
        stream: CUstream,
    ) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        if self.pending.pieces as usize == READBACK_PIECES {
            self.launch(context, stream)?;
        }
        super::memory::count_download();
        let p = self.pending.pieces as usize;
        self.pending.src[p] = DevPtr::from_addr(src);
        self.pending.dst[p] = DevPtr::from_addr(dst);
        self.pending.bytes[p] = bytes as i64;
        let (limit, unit) = counted.unwrap_or((0, 4));
        self.pending.limit[p] = DevPtr::from_addr(limit);
        self.pending.unit[p] = unit as i64;
        self.pending.consume[p] = i64::from(consume);
        self.pending.pieces += 1;
        Ok(())
    }

    /// Launches the readback kernel over the pending pieces on `stream` (nothing when none).
    fn launch(&mut self, context: &PrimaryContext, stream: CUstream) -> Result<(), Error> {
        let pieces = self.pending.pieces;
        if pieces == 0 {
            return Ok(());
        }
        let kernel = self.kernel.ok_or(Error::OutOfRange {
            what: "readback launched before begin",
            value: 0,
            allowed: "a readback between begin and finish",
        })?;
        let dims = LaunchDims {
            grid: pieces as u32,
            grid_y: 1,
            block: READBACK_THREADS,
            shared_bytes: 0,
            cooperative: false,
            early_start: self.early_start,
        };
        // SAFETY: `ReadbackArgs` mirrors `kvc::ReadbackArgs` (layout asserted by the generated
        // header); each of its `pieces` pieces copies `bytes` bytes (a multiple of 4: whole
        // `i32`/`i64` words) from live device words of `context` (the callers' precondition of
        // `copy_wide`/`copy_narrow`) into this readback's pinned staging at its device-mapped
        // address, inside the allocation (bounds checked in `host_range`). The staging outlives
        // the launch: it is dropped only after waiting for the event recorded behind it
        // (`Drop`), and read only once that event completed (`read`).
        unsafe { launch_struct(context, stream, kernel, dims, &*self.pending)? };
        *self.pending = ReadbackArgs::default();
        Ok(())
    }

    /// Launches the pending pieces, then records the event on `stream` after them.
    pub(crate) fn finish(
        &mut self,
        context: &PrimaryContext,
        stream: CUstream,
    ) -> Result<(), Error> {
        self.launch(context, stream)?;
        context.make_current()?;
        // SAFETY: the event is live and owned by `self`; `stream` is the live stream the copies
        // were queued on.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.event, stream)
        })?;
        self.state = State::Recorded;
        Ok(())
    }

    /// Ends a readback whose copies were captured into a graph instead of queued: the words
    /// are unreadable until a replay of that graph is followed by [`rearm`](Self::rearm).
    pub(crate) fn captured(
        &mut self,
        context: &PrimaryContext,
        stream: CUstream,
    ) -> Result<(), Error> {
        self.launch(context, stream)?;
        self.state = State::Captured;
        Ok(())
    }

    /// Whether the copies of the last replay may still be unread (recorded, not yet read).
    pub(crate) fn is_armed(&self) -> bool {
        self.state == State::Recorded
    }

    /// Records the event on `stream` right after a replay of the graph that captured this
    /// readback's copies was queued there: the words of that replay are readable once it
    /// completes.
    ///
    /// # Safety
    ///
    /// A launch of the graph holding this readback's captured copies must have just been
    /// queued on `stream`, and no other launch of it may be queued before the words are read
    /// ([`read`](Self::read)) or this readback is dropped (which waits for the event).
    pub(crate) unsafe fn rearm(
        &mut self,
        context: &PrimaryContext,
        stream: CUstream,
    ) -> Result<(), Error> {
        self.state = State::Queued;
        self.finish(context, stream)
    }

    /// Whether every copy queued before [`finish`](Self::finish) has landed (never blocks).
    pub(crate) fn is_done(&self, context: &PrimaryContext) -> Result<bool, Error> {
        match self.state {
            State::Idle => Ok(true),
            State::Queued | State::Captured => Ok(false),
            State::Recorded => {
                context.make_current()?;
                // SAFETY: the event is live and owned by `self`.
                match unsafe { sys::cuEventQuery(self.event) } {
                    CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                    result => check("cuEventQuery", result).map(|()| true),
                }
            }
        }
    }

    /// Blocks the host until the copies have landed.
    pub(crate) fn wait(&self, context: &PrimaryContext) -> Result<(), Error> {
        if self.state == State::Recorded {
            context.make_current()?;
            // SAFETY: the event is live and owned by `self`; this only blocks the thread.
            check("cuEventSynchronize", unsafe {
                sys::cuEventSynchronize(self.event)
            })?;
        }
        Ok(())
    }

    /// The `i64` and `i32` words once the copies have landed; `None` while they may still be
    /// running (never blocks).
    pub(crate) fn read(&mut self, context: &PrimaryContext) -> Result<Option<Words<'_>>, Error> {
        if !self.is_done(context)? {
            return Ok(None);
        }
        self.state = State::Idle;
        Ok(Some((self.wide.as_slice(), self.narrow.as_slice())))
    }
}

impl Drop for Readback {
    fn drop(&mut self) {
        // Never free pinned memory a copy may still write into.
        match self.state {
            // Captured copies run only in replays, each followed by `rearm` (`Recorded`).
            State::Idle | State::Captured => {}
            State::Recorded => {
                // SAFETY: the event is live and owned by `self`; this only blocks the thread.
                let _ = unsafe { sys::cuEventSynchronize(self.event) };
            }
            State::Queued => {
                // No event after the copies: wait for everything in their context.
                // SAFETY: `context` is the live context the copies were queued in (a readback
                // lives inside a `Stream` of its `Gpu` or a pending report, each holding a
                // handle of that `Gpu` that is dropped after the readback); setting it current and synchronising only blocks this thread.
                unsafe {
                    let _ = sys::cuCtxSetCurrent(self.context);
                    let _ = sys::cuCtxSynchronize();
                }
            }
        }
        // SAFETY: the event is owned by `self` and destroyed once, here.
        let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
    }
}
