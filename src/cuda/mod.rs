//! The CUDA backend (feature `cuda`): the plan, write and verify ops as CUDA kernels on device
//! buffers typed like the host ones.
//!
//! ```no_run
//! use kv_canary::{cuda, Batch, Cap, ReqToToken, Shape};
//!
//! let gpu = cuda::Gpu::new()?;
//! let stream = cuda::Stream::new(&gpu)?;
//! let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
//! // Device twins of the host buffers, allocated from the same shape.
//! let (verify, write) = (shape.device_verify_plan(&gpu)?, shape.device_write_plan(&gpu)?);
//! let batch = shape.device_batch(&gpu)?;
//! let table = cuda::DeviceReqToToken::from_host(&gpu, &ReqToToken::from_vec(4, 8, (0..32).collect())?)?;
//!
//! batch.upload(&Batch::from_columns([2, 0, 1], [3, 99, 0], [2, 99, 4]))?;
//! cuda::plan(&stream, &shape, &cuda::PlanInputs::full(&batch, &table), &verify, &write)?;
//! stream.status()?; // synchronises; reports what the kernels found malformed
//! assert_eq!(&verify.to_host()?.slot_indices()[..3], &[16, 17, 18]);
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! # Types
//!
//! [`Device`](crate::Device) memory makes `VerifyPlan<C, Device>`, `WritePlan<C, Device>` and
//! the other buffers device twins of the host types, with the same capacity types; launches
//! accept device buffers only and demand the same capacity relations as the CPU ops
//! ([`SameVerifyCapacity`](crate::capacity::SameVerifyCapacity) and friends), so a host buffer
//! or a device buffer of another capacity does not compile. Transfers keep the capacity type:
//! `VerifyPlan<C>::to_device` gives a `VerifyPlan<C, Device>`, whose `to_host` gives the
//! `VerifyPlan<C>` back.
//!
//! # Names beside cust's
//!
//! [`Stream`] and [`Event`] are this crate's handles (a [`Gpu`] clone inside, `Send`, the right
//! context current on every call), not cust's types of the same names, which
//! `cust::prelude::*` imports. An engine that uses both imports the module and names the
//! crate's as `cuda::Stream` and `cuda::Event` (as the examples do); the trait that the safe
//! view constructors take is [`ViewableSlice`], a name cust does not use, so globs of both
//! crates import it unambiguously. [`Stream::as_raw`] gives the `CUstream` for cust or cudarc
//! calls on the same stream.
//!
//! ```no_run
//! use cust::prelude::*; // cust's Stream, Event, DeviceSlice, DeviceBuffer, ...
//! use kv_canary::cuda::{self, *};
//!
//! /// Any device memory a view can be made over: a cust buffer, a crate array, a part of one.
//! fn elements(memory: &impl ViewableSlice<i64>) -> usize {
//!     memory.len()
//! }
//!
//! let gpu = Gpu::new()?; // the crate's (cust has none of that name)
//! let stream = cuda::Stream::non_blocking(&gpu)?; // the crate's, named through the module
//! let engine_column = DeviceBuffer::from_slice(&[1i64, 2, 3])?; // cust's
//! assert_eq!(elements(&engine_column), 3);
//! assert_eq!(elements(&SubSlice::new(&engine_column, 1..3)?), 2);
//! let _raw = stream.as_raw(); // for cust or cudarc calls on the canary's stream
//! # Ok::<(), kv_canary::Error>(())
//! ```
//!
//! # Streams, ordering and graphs
//!
//! * [`Stream::new`] makes a *blocking* CUDA stream: it synchronises with the legacy default
//!   stream. All synchronous transfers of this module (`upload`, `to_host`, `clear`,
//!   `from_host`, the zeroing of new buffers) are copies on the legacy default stream, so on a
//!   blocking stream they are ordered after every launch queued before them and before every
//!   launch queued after them.
//! * [`Stream::non_blocking`] (`CU_STREAM_NON_BLOCKING`, made with the raw driver call: cust
//!   0.3 drops the flag, Rust-GPU/rust-cuda#15), [`Stream::from_raw`] (the engine's own
//!   stream, not destroyed by the wrapper) and `Stream::from_cudarc` (feature `cudarc`) make
//!   streams that are **not** ordered with those transfers. What stays ordered on them: every
//!   launch, the step stages (the ring clear of `plan` is one `kv_canary_ring_clear` launch, the
//!   report copies of `verify_tail` are one readback kernel launch into mapped pinned memory), [`Stream::clear_status`]
//!   (`cuMemsetD32Async`), [`Stream::reset_scratch`] (`cuMemcpyHtoDAsync`),
//!   [`Stream::record`] and [`Stream::wait_for`] (`cuStreamWaitEvent`), and the stream-ordered
//!   uploads of the device inputs (`upload_on(&stream, ..)`, `cuMemcpyHtoDAsync`). What is not: every synchronous transfer
//!   above. Fence them: [`Stream::synchronize`] before a transfer that overwrites or reads what
//!   queued launches use, [`Gpu::synchronize`] (`cuCtxSynchronize`) after transfers before the
//!   next launch. [`Stream::status`] synchronises the stream before it reads, so it is exact on
//!   every kind. The constructors of these streams, and the canary allocations on them (the
//!   `Backend` methods of `Stream`), synchronise the context once before they return, so
//!   initialisation is complete before anything runs on the stream.
//! * [`Event::sync`] (no timing) orders streams on the device: record it after the engine's
//!   forward pass on its compute stream, [`Stream::wait_for`] it on the canary's stream between
//!   `write` and `verify_tail` ([`Step::backend`](crate::step::Step::backend) gives the stream),
//!   and the tail verify reads the pass's KV bytes with no host sync.
//! * The step API queues the K and V launches of a stage as one pair launch
//!   ([`KernelTuning::pair_launches`]; also [`verify_pair`], [`write_pair`] for raw ops), and on
//!   compute capability 9.0+ every launch of the library may start while the kernel ahead of it
//!   is running, waiting for it on the device before it touches memory
//!   ([`KernelTuning::overlap_launches`]): neither changes what is ordered after what.
//! * Launches are stream-ordered, allocate nothing and never synchronise the host. They read
//!   the batch size, `verify_num_valid`, `enable` and `write_num_valid_reqs` from device memory,
//!   as SGLang does, so one sequence of launches serves every batch.
//! * Device buffers are written through shared references: Rust never borrows device memory,
//!   and every access to it is ordered on the streams. `&mut` would stop a captured graph from
//!   sharing the buffers it replays over.
//! * A whole step (plan, head verify, write, the engine's forward pass, tail verify, the
//!   report's copies) is captured into graphs that own everything they replay over by a
//!   [`StepGraph`]; an engine that captures its own stream instead turns the step's pending
//!   report into a [`CapturedReport`] and tells it about each of its launches (the step
//!   timeline docs of [`step::Canary`](crate::step::Canary) on a [`Stream`], "Graph capture of
//!   a whole step", in the `backend` module; GPU test `step_graph_engine_capture`).
//! * [`Stream::capture`] records launches into a CUDA [`Graph`]. Every buffer a captured launch
//!   uses is borrowed for the graph's lifetime (the launches of a [`Capture`] demand it), so
//!   none can be dropped or moved while the graph can replay; refill the inputs in place
//!   (`upload`) between replays.
//!
//! # The engine's memory
//!
//! Every device array is a [`DeviceArray`] (scalars a [`DeviceScalar`]): a crate allocation or a
//! view of memory the engine owns, made by the `unsafe` `from_raw` constructors of the input
//! types ([`DeviceBatch::from_raw`], [`DeviceTable::from_raw`], [`DeviceLut::from_raw`],
//! [`DeviceValidLens::from_raw`], `WriteInputs::from_raw`, [`DeviceRealKvSource::from_raw`]) or
//! at a byte offset of a device buffer ([`DeviceRealKvSource::at`]). Safe views of the engine's
//! cust buffers (or crate arrays): `from_buffer` / `from_buffers` ([`DeviceTable::from_buffer`],
//! [`DeviceBatch::from_buffers`], ...) borrow them ([`Borrowed`]), `from_shared`
//! ([`DeviceBatch::from_shared`], ...) keeps `Arc`s of them ([`Shared`]: storable in an engine's
//! struct or a [`StepGraph`]'s inputs); with the `cudarc` feature, `from_cudarc` borrows cudarc
//! slices and `from_cudarc_shared` keeps `Arc`s of them (`CudarcKvSource::new` / `::shared` for
//! the KV pool). Parts of one allocation are viewed through a [`SubSlice`] (borrowing the
//! buffer) or a [`SharedSubSlice`] (keeping an `Arc` of it), which every safe constructor takes
//! as it takes a whole buffer. After a reshape, [`Shared::rebind`] / [`Borrowed::rebind`] make a
//! view again with the new capacity over the same buffers ([`Rebind`]). Dropping a safe view
//! synchronises the context, so make views once and keep them. Idle cached KV is swept by
//! naming request-table rows ([`Canary::sweep_table_rows`](crate::step::Canary::sweep_table_rows)):
//! the plan launch derives the entries from the device table, so the engine keeps no host
//! mirror of it. The launches read views in place: a step over views copies no engine array
//! ([`transfers_issued`] counts the copies the crate issues; docs/cuda.md, "The engine's
//! memory").
//!
//! # Threads and contexts
//!
//! [`Gpu`] is `Send + Sync` and cheap to clone (one context and kernel table behind an `Arc`);
//! [`Stream`], [`Event`], [`PendingDeviceReport`] and [`CustomModule`] hold a clone and borrow
//! nothing, so a device canary is `Send + 'static` and an engine can store it (a module too).
//! [`Stream`], [`Event`],
//! [`CustomModule`] and every device buffer are
//! `Send + Sync` (the device buffers as cust's are: Rust never borrows device memory). Every call
//! of this module that reaches the driver makes the right context current on the calling thread
//! first: launches, stream and event creation, synchronisation, status reads, capture and replay
//! make their [`Gpu`]'s current, and every transfer (`upload`, `to_host`, `clear`, ...)
//! the context that owns its device buffer. So two `Gpu`s on one thread, or one `Gpu` on several
//! threads, never allocate or launch in the wrong context, and a new thread needs no setup.
//! Allocating with cust directly still uses the thread's current context: call
//! [`Gpu::make_current`] first. The context stays current after a call (it is not restored).
//!
//! What may run concurrently:
//!
//! * two threads sharing one `&Gpu` (or one `Gpu` per device, each on its own thread), each
//!   with its own [`Stream`] and its own canary (`step::Canary` on that stream, its buffers,
//!   inputs and report): their launches and reports stay apart (GPU test
//!   `two_canaries_from_two_threads`). Their synchronous transfers all run on the device's
//!   legacy default stream, so they serialise against each other's blocking streams: correct,
//!   not fast;
//! * kernel files loading on first use from several threads at once (each loads once into the
//!   `Gpu`).
//!
//! What may not:
//!
//! * one canary driven from two threads at once: its stages take it by `&mut` or by value, so
//!   the borrow rules already forbid it;
//! * sharing one `Stream` between threads is memory-safe (`Sync`: its calls are thread-safe
//!   driver calls, and what it queues runs in stream order) but meaningless: the threads'
//!   launches interleave in no fixed order and share one status word. Give each thread its own;
//! * a capture ([`Stream::capture`], global mode) while another thread transfers or allocates:
//!   the capture fails with an error (no corruption);
//! * [`Graph`] is `Send`, not `Sync` (one thread replays it at a time; it borrows its
//!   stream and buffers).
//!
//! # Malformed data on the device
//!
//! Kernels bounds-check every slot, row, position and count they read from device memory and
//! never access memory out of bounds. What they cannot serve is skipped and recorded in the
//! stream's sticky status word (the first error since the last [`Stream::clear_status`] wins);
//! [`Stream::status`] synchronises and returns it as the same [`Error`](crate::Error) the CPU
//! op returns. Each launch documents what it skips and how that differs from the CPU op, which
//! validates everything before it modifies anything. A step's report and a sweep's consume the
//! status word: their readback zeroes it once copied, so each report returns the first data
//! error recorded on the stream since the report before it (its own launches', or those of
//! launches queued between the two), and a malformed step does not fail the reports after it.
//! The head findings, read mid-step, leave it for the step's report.
//!
//! # Layers
//!
//! `abi` (argument structs, status codes, the kernel table, the embedded PTX; the source of the
//! generated kernel header) <- `driver` (every raw driver call, the one launch function) <-
//! `device` ([`Gpu`], [`Stream`], device buffers and settings) <- `ops` (the launches). Each
//! layer imports only from the layers before it.
#![deny(clippy::undocumented_unsafe_blocks)]

mod abi;
mod backend;
mod device;
mod driver;
#[cfg(feature = "faults")]
mod faults;
mod head_findings;
mod moves;
mod ops;
#[cfg(feature = "cudarc")]
mod paged_views;
mod pending;
mod report;
mod step_graph;
mod sweep;
mod watchdog;

pub use backend::{DeviceGroupTokens, StreamCanary, TailKvOnDevice};
/// The driver's result codes ([`CudaErrorCode::is`] takes one).
pub use cust::sys::CUresult;
/// The driver's stream handle, which [`Stream::from_raw`] wraps (re-exported so that an engine
/// names it without depending on `cust` itself).
pub use cust::sys::CUstream;
pub use device::borrowed::{Borrowed, Shared};
#[cfg(feature = "cudarc")]
#[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
pub use device::cudarc_views::CudarcKvSource;
pub use device::custom_module::{CustomKernel, CustomModule};
pub use device::gpu::Gpu;
pub use device::plan_inputs::{
    DeviceBatch, DeviceColumns, DeviceExpectedPool, DeviceExpectedTable, DeviceExpectedTokens,
    DeviceGroup, DeviceIndex, DeviceLut, DeviceReqToToken, DeviceTable, DeviceTableCell,
    DeviceValidLens, PlanInputs, RawBatch, Swa,
};
pub use device::rebind::Rebind;
pub use device::settings::{
    ChainAssert, ChainAssertFlag, DeviceRealKv, DeviceRealKvSource, DeviceSettings,
};
pub use device::stream::{Capture, Event, Graph, Queue, Stream};
pub use device::sub_slice::{SharedSubSlice, SubSlice};
pub use device::tuning::{KernelTuning, PlanKernel};
pub use device::write_inputs::{DeviceInputAssert, RawWriteInputs};
#[doc(hidden)]
pub use driver::array::DeviceColumn;
pub use driver::array::{DeviceArray, DeviceScalar, ViewableSlice};
pub use driver::error::CudaErrorCode;
pub use driver::launch::launches_queued;
pub use driver::memory::{transfers_issued, Transfers};
pub use head_findings::PendingHeadFindings;
pub use ops::custom::launch_custom;
pub use ops::plan::plan;
pub use ops::plan_verify::{plan_verify_head, plan_verify_head_pair};
pub use ops::prepared::{PreparedLaunch, RawLaunchParts};
pub use ops::scatter::scatter_req_token_ids;
pub use ops::verify::{verify, verify_pair};
pub use ops::write::{write, write_ends, write_ends_k, write_pair};
#[cfg(feature = "cudarc")]
#[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
pub use paged_views::PagedStepViews;
pub use pending::{Landed, PendingReadback};
pub use report::{CapturedReport, DeviceStepReport, PendingDeviceReport, Polled};
pub use step_graph::{NamedStepGraph, StepGraph};
pub use sweep::{DeviceSweepReport, PendingSweepReport};
