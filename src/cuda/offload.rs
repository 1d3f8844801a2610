//! [`Offload`]: the GPU ops on *host* buffers (upload, launch, synchronise, download), for the
//! conformance runner and the GPU-vs-CPU differential tests.
//!
//! Engines keep their buffers on the device and launch directly; this path allocates device
//! twins per call and is only as fast as that allows.

use super::gpu::Gpu;
use super::inputs::{
    self, DeviceBatch, DeviceExpectedTable, DeviceLut, DeviceReqToToken, DeviceValidLens,
};
use super::stream::Stream;
use crate::capacity::{Capacity, SameVerifyCapacity, SameWriteReqCapacity};
use crate::input::{ExpectedTokens, Group, PlanInputs};
use crate::plan::{VerifyPlan, WritePlan};
use crate::{Error, Shape};

/// Runs the ops of this backend on host buffers through one stream of a [`Gpu`].
#[derive(Debug)]
pub struct Offload<'g> {
    stream: Stream<'g>,
}

impl<'g> Offload<'g> {
    /// An offload path on a new stream of `gpu`.
    pub fn new(gpu: &'g Gpu) -> Result<Self, Error> {
        Ok(Offload {
            stream: Stream::new(gpu)?,
        })
    }

    /// The stream it launches on.
    pub fn stream(&self) -> &Stream<'g> {
        &self.stream
    }

    /// The plan op on the GPU with [`cpu::plan`](crate::cpu::plan)'s signature: uploads the
    /// inputs and both plan buffers, launches [`cuda::plan`](super::plan), synchronises, and
    /// downloads both buffers back into `verify` and `write` (whatever the device holds, so a
    /// launch that wrote before failing would show). Returns the error the kernels recorded,
    /// if any.
    pub fn plan<V, W, E, VB, WB, G, X>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &PlanInputs<'_, G, X>,
        verify: &mut VerifyPlan<VB>,
        write: &mut WritePlan<WB>,
    ) -> Result<(), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        E: Capacity,
        VB: Capacity,
        WB: Capacity,
        G: Group,
        X: ExpectedTokens,
    {
        let gpu = self.stream.gpu();
        shape.verify_capacity().check(verify.capacity())?;
        shape.write_req_capacity().check(write.capacity())?;
        let bs = inputs.batch.len();
        let batch = DeviceBatch::new(gpu, write.capacity())?;
        batch.upload(inputs.batch)?;
        let table = DeviceReqToToken::from_host(gpu, inputs.req_to_token)?;
        let lut = inputs
            .group
            .lut()
            .map(|l| DeviceLut::from_host(gpu, l))
            .transpose()?;
        let pool = match inputs.expected.pool() {
            None => None,
            Some(p) => {
                if p.valid_lens().len() != bs {
                    return Err(Error::LengthMismatch {
                        what: "req_to_verify_expected_tokens_valid_lens",
                        expected: bs,
                        found: p.valid_lens().len(),
                    });
                }
                let lens = DeviceValidLens::new(gpu, write.capacity())?;
                lens.upload(p.valid_lens())?;
                Some((DeviceExpectedTable::from_host(gpu, p.table())?, lens))
            }
        };
        let (dv, dw) = (verify.to_device(gpu)?, write.to_device(gpu)?);
        let base = inputs::PlanInputs::full(&batch, &table).with_offset(inputs.offset);
        let s = &self.stream;
        s.clear_status()?;
        let window = inputs.group.window();
        match (&lut, &pool) {
            (None, None) => super::plan(s, shape, &base, &dv, &dw),
            (None, Some((t, l))) => super::plan(
                s,
                shape,
                &base.with_expected(t.with_valid_lens(l)),
                &dv,
                &dw,
            ),
            (Some(lut), None) => super::plan(
                s,
                shape,
                &base.with_group(inputs::Swa::new(window, lut)),
                &dv,
                &dw,
            ),
            (Some(lut), Some((t, l))) => {
                let i = base
                    .with_group(inputs::Swa::new(window, lut))
                    .with_expected(t.with_valid_lens(l));
                super::plan(s, shape, &i, &dv, &dw)
            }
        }?;
        let status = s.status();
        *verify = dv.to_host()?;
        *write = dw.to_host()?;
        status
    }
}

thread_local! {
    static DEFAULT: std::cell::OnceCell<Result<&'static Offload<'static>, Error>> =
        const { std::cell::OnceCell::new() };
}

impl Offload<'static> {
    /// Runs `f` with this thread's default offload path (device 0), made on first use and
    /// kept (leaked) for the thread's lifetime. [`Error::NoCudaDevice`] without a device.
    pub fn with_default<R>(
        f: impl FnOnce(&Offload<'static>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let offload = DEFAULT.with(|cell| {
            cell.get_or_init(|| {
                let gpu: &'static Gpu = Box::leak(Box::new(Gpu::new()?));
                Ok(Box::leak(Box::new(Offload::new(gpu)?)))
            })
            .clone()
        })?;
        f(offload)
    }
}
