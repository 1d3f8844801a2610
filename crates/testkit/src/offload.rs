//! [`Offload`]: the GPU ops on *host* buffers (upload, launch, synchronise, download), for the
//! conformance runner and the GPU-vs-CPU differential tests (formerly `kv_canary::cuda::Offload`).
//!
//! Written against the library's public API only (as `kv_canary::...`): while the conformance
//! runner still lives inside the library, it includes this file too.
//!
//! Engines keep their buffers on the device and launch directly; this path allocates device
//! twins per call and is only as fast as that allows.

use cust::memory::DeviceBuffer;
use kv_canary::cuda::{
    self, ChainAssert, DeviceBatch, DeviceExpectedTable, DeviceInputAssert, DeviceLut,
    DeviceRealKv, DeviceRealKvSource, DeviceReqToToken, DeviceSettings, DeviceValidLens, Gpu,
    Stream,
};
use kv_canary::{CanaryBuffer, HealthCounters, LaunchSettings, TokenCheck, ViolationRing};
use kv_canary::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use kv_canary::{Error, Shape};
use kv_canary::{ExpectedTokenTable, ExpectedTokens, Group, PlanInputs, WriteInputs};
use kv_canary::{RealKvParams, RowLayout};
use kv_canary::{VerifyPlan, WritePlan};

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

    /// The plan op on the GPU with [`cpu::plan`](kv_canary::cpu::plan)'s signature: uploads the
    /// inputs and both plan buffers, launches [`cuda::plan`](kv_canary::cuda::plan()), synchronises, and
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
        let base = cuda::PlanInputs::full(&batch, &table).with_offset(inputs.offset);
        let s = &self.stream;
        s.clear_status()?;
        let window = inputs.group.window();
        match (&lut, &pool) {
            (None, None) => cuda::plan(s, shape, &base, &dv, &dw),
            (None, Some((t, l))) => cuda::plan(
                s,
                shape,
                &base.with_expected(t.with_valid_lens(l)),
                &dv,
                &dw,
            ),
            (Some(lut), None) => cuda::plan(
                s,
                shape,
                &base.with_group(cuda::Swa::new(window, lut)),
                &dv,
                &dw,
            ),
            (Some(lut), Some((t, l))) => {
                let i = base
                    .with_group(cuda::Swa::new(window, lut))
                    .with_expected(t.with_valid_lens(l));
                cuda::plan(s, shape, &i, &dv, &dw)
            }
        }?;
        let status = s.status();
        *verify = dv.to_host()?;
        *write = dw.to_host()?;
        status
    }
}

impl<'g> Offload<'g> {
    /// The write op on the GPU with [`cpu::write`](kv_canary::cpu::write)'s signature: uploads the
    /// plan, inputs, real-KV source bytes and state, launches [`cuda::write`](kv_canary::cuda::write()),
    /// synchronises and downloads the canary buffer, ring and counters back (whatever the
    /// device holds). Returns the error the kernel recorded, if any.
    #[allow(clippy::too_many_arguments)]
    pub fn write<V, W, E, WB, EB, A, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &WritePlan<WB>,
        inputs: &WriteInputs<EB, A>,
        launch: &LaunchSettings<'_>,
        canary: &mut CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<(), Error>
    where
        V: Capacity,
        W: SameWriteReqCapacity<WB>,
        E: SameWriteEntryCapacity<EB>,
        WB: Capacity,
        EB: Capacity,
        A: DeviceInputAssert,
        S: Capacity,
        R: Capacity,
    {
        let gpu = self.stream.gpu();
        let (dp, di) = (plan.to_device(gpu)?, inputs.to_device(gpu)?);
        let (dc, dr, dn) = (
            canary.to_device(gpu)?,
            ring.to_device(gpu)?,
            counters.to_device(gpu)?,
        );
        let sources = SourceBytes::upload(launch)?;
        let settings = DeviceSettings {
            tag: launch.tag,
            real_kv: sources.real_kv(launch)?,
            chain_position_assert: ChainAssert::Fixed(launch.chain_position_assert),
        };
        let s = &self.stream;
        s.clear_status()?;
        cuda::write(s, shape, &dp, &di, &settings, &dc, &dr, &dn)?;
        let status = s.status();
        *canary = dc.to_host()?;
        *ring = dr.to_host()?;
        *counters = dn.to_host()?;
        status
    }

    /// The verify op on the GPU with [`cpu::verify`](kv_canary::cpu::verify)'s signature; uploads,
    /// launches [`cuda::verify`](kv_canary::cuda::verify()), synchronises, downloads the ring and counters.
    #[allow(clippy::too_many_arguments)]
    pub fn verify<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB>,
        check: K,
        launch: &LaunchSettings<'_>,
        canary: &CanaryBuffer<S>,
        ring: &mut ViolationRing<R>,
        counters: &mut HealthCounters,
    ) -> Result<(), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: Capacity,
        E: Capacity,
        VB: Capacity,
        K: TokenCheck,
        S: Capacity,
        R: Capacity,
    {
        let gpu = self.stream.gpu();
        let dp = plan.to_device(gpu)?;
        let (dc, dr, dn) = (
            canary.to_device(gpu)?,
            ring.to_device(gpu)?,
            counters.to_device(gpu)?,
        );
        let sources = SourceBytes::upload(launch)?;
        let settings = DeviceSettings {
            tag: launch.tag,
            real_kv: sources.real_kv(launch)?,
            chain_position_assert: ChainAssert::Fixed(launch.chain_position_assert),
        };
        let s = &self.stream;
        s.clear_status()?;
        cuda::verify(s, shape, &dp, check, &settings, &dc, &dr, &dn)?;
        let status = s.status();
        *ring = dr.to_host()?;
        *counters = dn.to_host()?;
        status
    }

    /// `scatter_req_token_ids` on the GPU with the CPU op's signature: uploads, launches
    /// [`cuda::scatter_req_token_ids`](kv_canary::cuda::scatter_req_token_ids()), synchronises and
    /// downloads the pool.
    pub fn scatter_req_token_ids(
        &self,
        flat_in: &[i64],
        offsets: &[i64],
        req_pool_indices: &[i64],
        pool_out: &mut ExpectedTokenTable,
    ) -> Result<(), Error> {
        let gpu = self.stream.gpu();
        let upload = |v: &[i64]| -> Result<DeviceBuffer<i64>, Error> {
            gpu.make_current()?;
            device_copy(v)
        };
        let (f, o, r) = (
            upload(flat_in)?,
            upload(offsets)?,
            upload(req_pool_indices)?,
        );
        let pool = DeviceExpectedTable::from_host(gpu, pool_out)?;
        let s = &self.stream;
        s.clear_status()?;
        cuda::scatter_req_token_ids(s, &f, &o, &r, &pool)?;
        let status = s.status();
        *pool_out = pool.to_host()?;
        status
    }
}

/// A device copy of `host` (synchronous), in the context current on this thread.
fn device_copy<T: cust::memory::DeviceCopy>(host: &[T]) -> Result<DeviceBuffer<T>, Error> {
    DeviceBuffer::from_slice(host).map_err(|e| Error::Cuda {
        call: "cuMemAlloc/cuMemcpyHtoD",
        code: e.into(),
    })
}

/// Device copies of a host launch's real-KV source bytes.
struct SourceBytes(Vec<DeviceBuffer<u8>>);

impl SourceBytes {
    fn upload(launch: &LaunchSettings<'_>) -> Result<Self, Error> {
        let sources = launch.real_kv.sources().as_slice();
        let mut out = Vec::with_capacity(sources.len());
        for src in sources {
            out.push(device_copy(src.bytes())?);
        }
        Ok(SourceBytes(out))
    }

    fn real_kv(&self, launch: &LaunchSettings<'_>) -> Result<DeviceRealKv<'_>, Error> {
        let rk = &launch.real_kv;
        let sources = rk
            .sources()
            .as_slice()
            .iter()
            .zip(&self.0)
            .map(|(src, bytes)| {
                let layout = RowLayout {
                    num_rows: src.num_rows(),
                    row_bytes: src.row_bytes(),
                    row_stride_bytes: src.row_stride_bytes(),
                };
                let params = RealKvParams::new(
                    src.page_size() as i64,
                    src.num_bytes_per_token() as i64,
                    src.read_bytes() as i64,
                );
                DeviceRealKvSource::new(bytes, layout, params)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        DeviceRealKv::try_from_slice(rk.mode(), &sources)
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
