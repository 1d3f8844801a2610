//! The pinned staging of a device readback that is not a step report (a sweep's report, a
//! step's head findings): [`Staged`] holds one [`Readback`] of its stream's pool until it is
//! decoded or dropped, and [`Landed`] is what a non-blocking take finds.
//!
//! The rules are the step reports' ([`PendingDeviceReport`](super::PendingDeviceReport)): each
//! pending readback owns its staging, so a later copy never overwrites it, and taking it
//! consumes it, so it is decoded once.

use super::abi::kernels::Kernel;
use super::abi::status::{decode_at, STATUS_WORDS};
use super::device::gpu::Gpu;
use super::device::readbacks::ReadbackPool;
use super::device::stream::Stream;
use super::driver::memory::{addr, box_ptr};
use super::driver::pinned::Readback;
use crate::canary::{decode_rows, RingCount, Violation, ViolationRing};
use crate::capacity::Capacity;
use crate::consts::VIOLATION_FIELDS;
use crate::memory::Device;
use crate::Error;
use std::sync::Arc;

/// What a non-blocking take of a pending device readback found.
#[derive(Debug)]
pub enum Landed<T, P> {
    /// The copies have landed: the decoded value.
    Ready(T),
    /// The copies are still queued or running: the pending readback, to try again later.
    Pending(P),
}

/// A device readback queued on a stream and taken once, by value: a step's report
/// ([`PendingDeviceReport`](super::PendingDeviceReport)), a sweep's
/// ([`PendingSweepReport`](super::PendingSweepReport)) or a step's head findings
/// ([`PendingHeadFindings`](super::PendingHeadFindings)), so that one piece of an engine's code
/// polls whichever it holds (each type's own methods, which these call, say more). Sealed.
pub trait PendingReadback: Sized + sealed::Sealed {
    /// What the readback decodes to: a report whose [`Findings`](crate::step::Findings) one
    /// handler reads, whichever it is.
    type Report: crate::step::Findings;
    /// Whether the copies have landed, so that taking the report does not block.
    fn is_ready(&self) -> Result<bool, Error>;
    /// The report if its copies have landed, else this readback back; never blocks.
    fn try_take(self) -> Result<Landed<Self::Report, Self>, Error>;
    /// The report, blocking the host until its copies have landed.
    fn wait(self) -> Result<Self::Report, Error>;
}

pub(crate) mod sealed {
    /// The seal of [`PendingReadback`](super::PendingReadback).
    pub trait Sealed {}
}

/// [`PendingReadback`] of a type whose inherent `is_ready`, `try_take` and `wait` have its
/// shape.
macro_rules! pending_readback {
    ($pending:ty => $report:ty) => {
        impl $crate::cuda::pending::sealed::Sealed for $pending {}
        impl $crate::cuda::pending::PendingReadback for $pending {
            type Report = $report;
            fn is_ready(&self) -> Result<bool, $crate::Error> {
                <$pending>::is_ready(self)
            }
            fn try_take(
                self,
            ) -> Result<$crate::cuda::pending::Landed<$report, Self>, $crate::Error> {
                <$pending>::try_take(self)
            }
            fn wait(self) -> Result<$report, $crate::Error> {
                <$pending>::wait(self)
            }
        }
    };
}
pub(crate) use pending_readback;

/// Where the ring and the status word lie in a staging: ring rows at `i64` word 0, the status
/// words after them, then `extra` words of the caller's; the write index at `i32` word 0.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingLayout {
    /// Ring fields (`rows x 8`).
    pub(crate) ring_fields: usize,
    /// Ring rows (the capacity).
    pub(crate) ring_rows: usize,
}

impl RingLayout {
    /// The layout of `ring`.
    pub(crate) fn of<R: Capacity>(ring: &ViolationRing<R, Device>) -> Self {
        RingLayout {
            ring_fields: ring.rows.len(),
            ring_rows: ring.capacity().get(),
        }
    }

    /// The first `i64` word after the ring and the status words.
    pub(crate) fn extra_at(self) -> usize {
        self.ring_fields + STATUS_WORDS
    }

    /// Decodes the ring rows and the status word: the stored rows and the rows that did not
    /// fit; a malformed-data error the stream's kernels recorded is the CPU op's [`Error`].
    pub(crate) fn decode(
        self,
        wide: &[i64],
        narrow: &[i32],
    ) -> Result<(Vec<Violation>, u64), Error> {
        decode_at(wide, self.ring_fields)?;
        let write_index = narrow[0];
        // A negative (wrapped) index is an error naming it, never a clean report.
        let RingCount { stored, dropped } = RingCount::decode(write_index, self.ring_rows)?;
        Ok((decode_rows(wide, stored), dropped))
    }
}

/// A readback of its stream's pool, queued and not yet decoded.
#[derive(Debug)]
pub(crate) struct Staged {
    gpu: Gpu,
    pool: Arc<ReadbackPool>,
    /// `Some` until decoded (then back in the pool).
    readback: Option<Readback>,
}

impl Staged {
    /// Queues on `stream` the copies of `ring` (rows, write index) and the stream's status
    /// word (with `consume_status` zeroed once copied: a sweep's report consumes it, as a
    /// step's does; the head findings, read mid-step, leave it for the step's report) into a
    /// staging of `extra_wide` more `i64` and `extra_narrow` more `i32` words, then `more` (the
    /// caller's copies of those words), then the event. No host synchronisation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn queue<R: Capacity>(
        stream: &Stream,
        ring: &ViolationRing<R, Device>,
        consume_status: bool,
        extra_wide: usize,
        extra_narrow: usize,
        more: impl FnOnce(&mut Readback, RingLayout) -> Result<(), Error>,
    ) -> Result<(Self, RingLayout), Error> {
        let gpu = stream.gpu();
        let (context, raw) = (gpu.context(), stream.as_raw());
        let layout = RingLayout::of(ring);
        let pool = Arc::clone(stream.readbacks());
        let mut readback = pool.take(gpu, layout.extra_at() + extra_wide, 1 + extra_narrow)?;
        let queued = (|| {
            readback.begin(gpu.function(Kernel::Readback)?, gpu.early_start());
            // Only the recorded rows travel (the write index, clamped to the ring).
            readback.copy_wide_counted(
                context,
                0,
                addr(&ring.rows),
                layout.ring_fields,
                box_ptr(&ring.write_index).addr(),
                VIOLATION_FIELDS,
                raw,
            )?;
            let status = stream.status_addr();
            if consume_status {
                readback.copy_wide_consumed(
                    context,
                    layout.ring_fields,
                    status,
                    STATUS_WORDS,
                    raw,
                )?;
            } else {
                readback.copy_wide(context, layout.ring_fields, status, STATUS_WORDS, raw)?;
            }
            readback.copy_narrow(context, 0, box_ptr(&ring.write_index).addr(), 1, raw)?;
            more(&mut readback, layout)?;
            readback.finish(context, raw)
        })();
        let staged = Staged {
            gpu: gpu.clone(),
            pool,
            readback: Some(readback),
        };
        queued.map(|()| (staged, layout))
    }

    /// Whether the copies have landed (never blocks).
    pub(crate) fn is_ready(&self) -> Result<bool, Error> {
        match &self.readback {
            Some(r) => r.is_done(self.gpu.context()),
            None => Ok(true),
        }
    }

    /// Blocks the host until the copies have landed.
    pub(crate) fn wait(&self) -> Result<(), Error> {
        match &self.readback {
            Some(r) => r.wait(self.gpu.context()),
            None => Ok(()),
        }
    }

    /// Decodes the landed words with `f` and gives the staging back.
    pub(crate) fn decode<T>(
        &mut self,
        f: impl FnOnce(&[i64], &[i32]) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut readback = self.readback.take().ok_or(Error::OutOfRange {
            what: "device readback taken twice",
            value: 1,
            allowed: "one take",
        })?;
        let result = match readback.read(self.gpu.context())? {
            Some((wide, narrow)) => f(wide, narrow),
            None => Err(Error::OutOfRange {
                what: "device readback read before its copies landed",
                value: 0,
                allowed: "a completed event",
            }),
        };
        self.pool.give_back(readback);
        result
    }

    /// Counts `n` violations as delivered by the stream (a sweep's, once taken).
    pub(crate) fn deliver(&self, n: u64) {
        self.pool.deliver(n);
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Unread: the staging goes back; the copies still queued into it run before any later
        // copy into it (one stream), and nothing reads it before its next event completes.
        if let Some(readback) = self.readback.take() {
            self.pool.give_back(readback);
        }
    }
}
