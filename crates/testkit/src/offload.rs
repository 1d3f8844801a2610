//! [`Offload`]: the GPU ops on *host* buffers (upload, launch, synchronise, download), a
//! [`Backend`] (and [`HostBackend`]) for the conformance runner and the GPU-vs-CPU differential
//! tests (formerly `kv_canary::cuda::Offload`).
//!
//! Written against the library's public API only (as `kv_canary::...`).
//!
//! Engines keep their buffers on the device and launch directly; this path allocates device
//! twins per call and is only as fast as that allows.

use crate::host_backend::HostBackend;
use cust::memory::DeviceBuffer;
use kv_canary::backend::{Backend, Cpu, PlanWith, Scatters, Writes};
use kv_canary::cuda::{
    self, DeviceBatch, DeviceExpectedTable, DeviceInputAssert, DeviceLut, DeviceRealKv,
    DeviceRealKvSource, DeviceReqToToken, DeviceSettings, DeviceValidLens, Gpu, Stream,
};
use kv_canary::{
    Batch, ExpectedTokenTable, ExpectedTokens, Group, PlanInputs, ReqToToken, WriteInputs,
};
use kv_canary::{CanaryBuffer, HealthCounters, LaunchSettings, TokenCheck, ViolationRing};
use kv_canary::{Capacity, SameVerifyCapacity, SameWriteEntryCapacity, SameWriteReqCapacity};
use kv_canary::{ChainPositionAssert, Host, LaunchTag, RealKv, WriteInputAssert};
use kv_canary::{Error, Shape};
use kv_canary::{RealKvParams, RowLayout};
use kv_canary::{VerifyPlan, WritePlan};

/// The CUDA ops on host buffers through one stream of a [`Gpu`]: a [`Backend`] whose buffers
/// live on the host ([`Host`]) and whose ops run on the GPU. Each op uploads its inputs and
/// state, launches, synchronises and downloads what the device holds back into the host
/// buffers (so a launch that wrote before failing would show), and returns the error the
/// kernels recorded, if any; the ops return `()` (no summaries).
#[derive(Debug)]
pub struct Offload {
    stream: Stream,
    early_launches: bool,
}

impl Offload {
    /// An offload path on a new stream of `gpu`.
    pub fn new(gpu: &Gpu) -> Result<Self, Error> {
        Ok(Offload {
            stream: Stream::new(gpu)?,
            early_launches: false,
        })
    }

    /// An offload path whose launches are marked as the step API marks its tail stage's: writes
    /// as following their verify ([`DeviceSettings::following_verify`]: the kernel's reading
    /// half, loads, folds and the chain of a decode-sized request, runs before it waits for the
    /// launch ahead, its stores after), verifies as following the head stage
    /// ([`DeviceSettings::following_head_stage`]: the PARTIAL kernel's first plan columns are
    /// loaded before its wait). Sound here as well: what is ahead of a launch on this stream is
    /// an upload, which a kernel never starts early behind. The GPU tests run their write and
    /// verify cases both ways.
    pub fn with_early_launches(gpu: &Gpu) -> Result<Self, Error> {
        Ok(Offload {
            stream: Stream::new(gpu)?,
            early_launches: true,
        })
    }

    /// `settings` as this path launches a verify: marked as following the head stage on an
    /// early-launches path.
    fn verify_settings<'a>(&self, settings: DeviceSettings<'a>) -> DeviceSettings<'a> {
        if self.early_launches {
            settings.following_head_stage()
        } else {
            settings
        }
    }

    /// The stream it launches on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The verify op over a K and a V buffer against one plan as the step API queues it
    /// ([`cuda::verify_pair`](kv_canary::cuda::verify_pair()): one pair launch when both halves
    /// use the same kernel and grid): uploads the plan and both halves' state, launches,
    /// synchronises, downloads the ring and both halves' counters. The K half's settings,
    /// buffer and counters come first in each pair.
    ///
    /// Not the [`Backend::verify_pair`] of this backend (which runs two single verifies, as the
    /// conformance runner's golden vectors were recorded): the GPU tests call it to compare the
    /// pair launch with the CPU's two verifies.
    #[allow(
        clippy::too_many_arguments,
        reason = "the verify op's own arguments, twice"
    )]
    pub fn verify_pair_launch<V, W, E, VB, K, S, R>(
        &self,
        shape: &Shape<V, W, E>,
        plan: &VerifyPlan<VB>,
        check: K,
        launch: (&LaunchSettings<'_>, &LaunchSettings<'_>),
        canary: (&CanaryBuffer<S>, &CanaryBuffer<S>),
        ring: &mut ViolationRing<R>,
        counters: (&mut HealthCounters, &mut HealthCounters),
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
        let (dk, dv, dr) = (
            canary.0.to_device(gpu)?,
            canary.1.to_device(gpu)?,
            ring.to_device(gpu)?,
        );
        let (nk, nv) = (counters.0.to_device(gpu)?, counters.1.to_device(gpu)?);
        let (sk, sv) = (
            SourceBytes::upload(launch.0)?,
            SourceBytes::upload(launch.1)?,
        );
        let (k, v) = (
            self.verify_settings(sk.settings(launch.0)?),
            self.verify_settings(sv.settings(launch.1)?),
        );
        let s = &self.stream;
        s.clear_status()?;
        cuda::verify_pair(s, shape, &dp, check, (&k, &v), (&dk, &dv), &dr, (&nk, &nv))?;
        let status = s.status();
        *ring = dr.to_host()?;
        *counters.0 = nk.to_host()?;
        *counters.1 = nv.to_host()?;
        status
    }

    /// The write launch for an input assert the device supports (both); see
    /// [`Writes::write`] below for why the inputs are re-typed first.
    #[allow(clippy::too_many_arguments, reason = "the write op's own arguments")]
    fn write_typed<V, W, E, WB, EB, A, S, R>(
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
        let settings = sources.settings(launch)?;
        let settings = if self.early_launches {
            settings.following_verify()
        } else {
            settings
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
}

/// Host buffers and host settings as on [`Cpu`] (allocation delegates to it); the ops on the
/// GPU.
impl Backend for Offload {
    type Memory = Host;
    type RealKv<'k> = RealKv<'k>;
    type Settings<'k> = LaunchSettings<'k>;
    type VerifyDone = ();
    type WriteDone = ();
    type PlanDone = ();

    fn no_real_kv() -> RealKv<'static> {
        Cpu::no_real_kv()
    }

    fn settings<'k>(
        tag: LaunchTag,
        real_kv: Self::RealKv<'k>,
        chain_position_assert: ChainPositionAssert,
    ) -> Self::Settings<'k> {
        Cpu::settings(tag, real_kv, chain_position_assert)
    }

    fn check_real_kv_covers(real_kv: &RealKv<'_>, slots: usize) -> Result<(), Error> {
        Cpu::check_real_kv_covers(real_kv, slots)
    }

    fn verify_plan<C: Capacity>(&self, capacity: C) -> Result<VerifyPlan<C>, Error> {
        Cpu.verify_plan(capacity)
    }

    fn write_plan<C: Capacity>(&self, capacity: C) -> Result<WritePlan<C>, Error> {
        Cpu.write_plan(capacity)
    }

    fn canary_buffer<S: Capacity>(&self, slots: S) -> Result<CanaryBuffer<S>, Error> {
        Cpu.canary_buffer(slots)
    }

    fn violation_ring<R: Capacity>(&self, rows: R) -> Result<ViolationRing<R>, Error> {
        Cpu.violation_ring(rows)
    }

    fn health_counters(&self) -> Result<HealthCounters, Error> {
        Cpu.health_counters()
    }

    fn write_inputs<E: Capacity>(&self, capacity: E) -> Result<WriteInputs<E>, Error> {
        Cpu.write_inputs(capacity)
    }

    fn clear_ring<R: Capacity>(&self, ring: &mut ViolationRing<R>) -> Result<(), Error> {
        Cpu.clear_ring(ring)
    }

    /// Uploads the plan and state, launches [`cuda::verify`](kv_canary::cuda::verify()),
    /// synchronises, downloads the ring and counters.
    fn verify<V, W, E, VB, K, S, R>(
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
        let settings = self.verify_settings(sources.settings(launch)?);
        let s = &self.stream;
        s.clear_status()?;
        cuda::verify(s, shape, &dp, check, &settings, &dc, &dr, &dn)?;
        let status = s.status();
        *ring = dr.to_host()?;
        *counters = dn.to_host()?;
        status
    }
}

/// The write op on the GPU (both input-assert states).
impl<A: WriteInputAssert> Writes<A> for Offload {
    /// Uploads the plan, inputs, real-KV source bytes and state, launches
    /// [`cuda::write`](kv_canary::cuda::write()), synchronises and downloads the canary buffer,
    /// ring and counters.
    ///
    /// The seam takes any [`WriteInputAssert`] while the device upload needs its
    /// [`DeviceInputAssert`] twin, so the inputs are first re-typed from what they hold
    /// ([`WriteInputs::input_assert_tensors`]): a host copy with the assert on or off, the same
    /// arrays.
    fn write<V, W, E, WB, EB, S, R>(
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
        S: Capacity,
        R: Capacity,
    {
        let (entries, ids, positions, slots) = (
            inputs.capacity(),
            inputs.input_ids().to_vec(),
            inputs.positions().to_vec(),
            inputs.out_cache_loc().to_vec(),
        );
        match inputs.input_assert_tensors() {
            None => {
                let off = WriteInputs::from_parts(entries, ids, positions, slots)?;
                self.write_typed(shape, plan, &off, launch, canary, ring, counters)
            }
            Some((tokens, expected_positions)) => {
                let on = WriteInputs::from_parts_with_expected(
                    entries,
                    ids,
                    positions,
                    slots,
                    tokens.to_vec(),
                    expected_positions.to_vec(),
                )?;
                self.write_typed(shape, plan, &on, launch, canary, ring, counters)
            }
        }
    }
}

/// The plan op on the GPU: uploads the inputs and both plan buffers, launches
/// [`cuda::plan`](kv_canary::cuda::plan()), synchronises, and downloads both buffers back into
/// `verify` and `write`. The host group and pool become their device twins through
/// [`with_plan_inputs_choice!`](kv_canary::with_plan_inputs_choice), the one bridge from
/// "has a LUT?"/"has a pool?" to types.
impl<'a, G, X, V, W, E> PlanWith<PlanInputs<'a, G, X>, V, W, E> for Offload
where
    G: Group<Lut = i64>,
    X: ExpectedTokens<Token = i32, Len = i64>,
    V: Capacity,
    W: Capacity,
    E: Capacity,
{
    fn plan<VB, WB>(
        &self,
        shape: &Shape<V, W, E>,
        inputs: &PlanInputs<'a, G, X>,
        verify: &mut VerifyPlan<VB>,
        write: &mut WritePlan<WB>,
    ) -> Result<(), Error>
    where
        V: SameVerifyCapacity<VB>,
        W: SameWriteReqCapacity<WB>,
        VB: Capacity,
        WB: Capacity,
    {
        let gpu = self.stream.gpu();
        shape.verify_capacity().check(verify.capacity())?;
        shape.write_req_capacity().check(write.capacity())?;
        let bs = inputs.batch.len();
        let batch = DeviceBatch::new(gpu, write.capacity())?;
        // The device twins upload from owned host inputs: the harness copies the views.
        let b = inputs.batch;
        let host_batch = Batch::try_from_columns(
            b.req_pool_indices().to_vec(),
            b.prefix_lens().to_vec(),
            b.extend_seq_lens().to_vec(),
        )?;
        batch.upload(&host_batch)?;
        let t = inputs.req_to_token;
        let host_table = ReqToToken::from_vec(t.rows(), t.width(), t.as_slice().to_vec())?;
        let table = DeviceReqToToken::from_host(gpu, &host_table)?;
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
                let t = p.table();
                let host =
                    ExpectedTokenTable::from_vec(t.rows(), t.width(), t.as_slice().to_vec())?;
                Some((DeviceExpectedTable::from_host(gpu, &host)?, lens))
            }
        };
        let (dv, dw) = (verify.to_device(gpu)?, write.to_device(gpu)?);
        let s = &self.stream;
        s.clear_status()?;
        let window = inputs.group.window();
        kv_canary::with_plan_inputs_choice!(
            cuda::PlanInputs::full(&batch, &table).with_offset(inputs.offset),
            group: lut.as_ref().map(|lut| cuda::Swa::new(window, lut)),
            expected: pool.as_ref().map(|(t, l)| t.with_valid_lens(l)),
            |device_inputs| cuda::plan(s, shape, &device_inputs, &dv, &dw)
        )?;
        let status = s.status();
        *verify = dv.to_host()?;
        *write = dw.to_host()?;
        status
    }
}

/// `scatter_req_token_ids` on the GPU: uploads, launches
/// [`cuda::scatter_req_token_ids`](kv_canary::cuda::scatter_req_token_ids()), synchronises and
/// downloads the pool.
impl Scatters for Offload {
    type ScatterDone = ();

    fn scatter_req_token_ids(
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

/// The GPU: rows of different requests or entries come in any order.
impl HostBackend for Offload {
    const NAME: &'static str = "cuda";
    const RECORDS_ROWS_IN_ORDER: bool = false;

    fn host_real_kv(real_kv: RealKv<'_>) -> RealKv<'_> {
        real_kv
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

    /// The device settings of `launch` over these sources.
    fn settings(&self, launch: &LaunchSettings<'_>) -> Result<DeviceSettings<'_>, Error> {
        Ok(DeviceSettings::new(launch.tag)
            .with_real_kv(self.real_kv(launch)?)
            .with_chain_position_assert(launch.chain_position_assert))
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
                DeviceRealKvSource::new(bytes, layout, params)?
                    .with_token_layout(src.token_layout())
            })
            .collect::<Result<Vec<_>, Error>>()?;
        DeviceRealKv::try_from_slice(rk.mode(), &sources)
    }
}

/// A thread's shared offload path: made on first use, kept (leaked) for the thread's lifetime.
type ThreadOffload = std::cell::OnceCell<Result<&'static Offload, Error>>;

thread_local! {
    static DEFAULT: ThreadOffload = const { std::cell::OnceCell::new() };
    static EARLY_LAUNCHES: ThreadOffload = const { std::cell::OnceCell::new() };
}

/// Runs `f` with the offload path of `key` on this thread, made by `make` on device 0 the
/// first time.
fn with_thread_offload<R>(
    key: &'static std::thread::LocalKey<ThreadOffload>,
    make: fn(&Gpu) -> Result<Offload, Error>,
    f: impl FnOnce(&Offload) -> Result<R, Error>,
) -> Result<R, Error> {
    let offload = key.with(|cell| {
        cell.get_or_init(|| {
            let offload: &'static Offload = Box::leak(Box::new(make(&Gpu::new()?)?));
            Ok(offload)
        })
        .clone()
    })?;
    f(offload)
}

impl Offload {
    /// Runs `f` with this thread's default offload path (device 0), made on first use and
    /// kept (leaked) for the thread's lifetime. [`Error::NoCudaDevice`] without a device.
    pub fn with_default<R>(f: impl FnOnce(&Offload) -> Result<R, Error>) -> Result<R, Error> {
        with_thread_offload(&DEFAULT, Offload::new, f)
    }

    /// [`Offload::with_default`] with this thread's early-launches path
    /// ([`Offload::with_early_launches`], device 0).
    pub fn with_default_early_launches<R>(
        f: impl FnOnce(&Offload) -> Result<R, Error>,
    ) -> Result<R, Error> {
        with_thread_offload(&EARLY_LAUNCHES, Offload::with_early_launches, f)
    }
}
