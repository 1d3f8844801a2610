//! [`PreparedLaunch`]: a plan or verify launch checked and built once, queued later.

use super::{plan, verify, PlanLaunch, VerifyLaunch};
use crate::canary::{CanaryBuffer, HealthCounters, TokenCheck, ViolationRing};
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::cuda::abi::args::{PlanArgs, VerifyArgs};
use crate::cuda::device::plan_inputs::{DeviceExpectedTokens, DeviceGroup, PlanInputs};
use crate::cuda::device::settings::DeviceSettings;
use crate::cuda::device::stream::Stream;
use crate::memory::Device;
use crate::plan::{VerifyPlan, WritePlan};
use crate::shape::Shape;
use crate::Error;
use core::marker::PhantomData;

// A verify's argument struct is 544 bytes (four real-KV sources with their token layouts), a
// plan's 296: a prepared launch is built once and kept, and its parameter is read in place, so
// the variants stay unboxed.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
enum Launch {
    Verify(VerifyLaunch),
    Plan(PlanLaunch),
}

/// A plan or verify launch checked and built for one stream, not queued: the same kernel, grid
/// and argument struct [`cuda::plan`](crate::cuda::plan()) or
/// [`cuda::verify`](crate::cuda::verify()) would queue there. [`queue`](Self::queue) queues it
/// without checking again; [`raw_parts`](Self::raw_parts) gives what a bare driver launch of it
/// takes (the host-cost benchmark of `kv-canary-testkit` compares the two).
///
/// The buffers the launch reads and writes, and the stream, stay borrowed for `'a`.
#[derive(Debug)]
pub struct PreparedLaunch<'a> {
    stream: &'a Stream,
    launch: Launch,
    _buffers: PhantomData<&'a ()>,
}

/// What a bare `cuLaunchKernel` of a [`PreparedLaunch`] takes.
#[derive(Clone, Copy, Debug)]
pub struct RawLaunchParts {
    /// The kernel.
    pub function: cust::sys::CUfunction,
    /// Blocks.
    pub grid: u32,
    /// Threads of a block.
    pub block: u32,
    /// Dynamic shared memory of a block.
    pub shared_bytes: u32,
    /// Whether the launch must be cooperative (`cuLaunchCooperativeKernel`).
    pub cooperative: bool,
    /// The stream.
    pub stream: cust::sys::CUstream,
    /// The one kernel parameter (the argument struct), valid while the `PreparedLaunch` lives.
    pub param: *const core::ffi::c_void,
}

impl<'a> PreparedLaunch<'a> {
    /// What [`cuda::verify`](crate::cuda::verify()) would queue on `stream` with these
    /// arguments (the same checks, the same errors).
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
        let launch = verify::prepare(
            &stream.target(),
            shape,
            plan,
            check,
            settings,
            canary,
            ring,
            counters,
        )?;
        Ok(PreparedLaunch {
            stream,
            launch: Launch::Verify(launch),
            _buffers: PhantomData,
        })
    }

    /// What [`cuda::plan`](crate::cuda::plan()) would queue on `stream` with these arguments.
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
        let launch = plan::prepare(&stream.target(), shape, inputs, verify, write)?;
        Ok(PreparedLaunch {
            stream,
            launch: Launch::Plan(launch),
            _buffers: PhantomData,
        })
    }

    /// Queues the launch on its stream.
    pub fn queue(&self) -> Result<(), Error> {
        let target = self.stream.target();
        // SAFETY: the launch was built by the same `prepare` as the typed op's, for this
        // stream (its status and scratch words); every buffer it names is borrowed for 'a.
        unsafe {
            match &self.launch {
                Launch::Verify(l) => l.queue(&target),
                Launch::Plan(l) => l.queue(&target),
            }
        }
    }

    /// The raw pieces of the launch.
    pub fn raw_parts(&self) -> RawLaunchParts {
        let (function, dims, param) = match &self.launch {
            Launch::Verify(l) => (l.function, l.dims, (&l.args as *const VerifyArgs).cast()),
            Launch::Plan(l) => (l.function, l.dims, (&l.args as *const PlanArgs).cast()),
        };
        RawLaunchParts {
            function: function.raw(),
            grid: dims.grid.max(1),
            block: dims.block,
            shared_bytes: dims.shared_bytes,
            cooperative: dims.cooperative,
            stream: self.stream.as_raw(),
            param,
        }
    }
}
