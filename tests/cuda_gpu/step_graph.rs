//! A whole device step in a CUDA graph: a `StepGraph` stored in an engine's struct, replayed
//! over refilled batches against the CPU step by step, with faults injected between replays
//! and a replay too far ahead refused; and the engine's own capture of a step on a raw stream
//! of its own (`Stream::from_raw`, `CapturedReport`).
#![allow(unsafe_code)]

use crate::rng::Rng;
use crate::step::{compare, draw_rows, fill_write_inputs, slot, ROWS, SLOTS, STRIP, WIDTH};
use crate::{ensure, fail};
use cust::memory::DeviceBuffer;
use kv_canary::cuda::{
    self, CapturedReport, DeviceRealKv, DeviceRealKvSource, Gpu, PendingDeviceReport, Shared,
    StepGraph, Stream,
};
use kv_canary::step::{Canary, KvPair, StepReport, SweepEntries, TailKv};
use kv_canary::{
    Batch, CanarySlot, Cap, Device, Error, Full, InputAssertOff, LaunchTag, RealKv, RealKvHashMode,
    RealKvParams, RealKvSource, RealKvSources, ReqToToken, RowLayout, Shape, WriteInputs,
};
use std::collections::VecDeque;
use std::sync::Arc;

type Spec = Shape<Cap<48>, Cap<ROWS>, Cap<64>>;
type DeviceCanary = Canary<Cap<48>, Cap<ROWS>, Cap<64>, Cap<SLOTS>, Cap<64>, Full, cuda::Stream>;

/// What the graph replays over, refilled in place between replays: the engine's own cust
/// buffers (`Arc`s, shared with nothing else here) and the canary's safe views of them, which
/// keep them alive (`from_shared`), so the graph owns everything it replays over.
struct Inputs {
    batch: Shared<cuda::DeviceBatch<Cap<ROWS>>>,
    table: Shared<cuda::DeviceReqToToken>,
    /// The buffer `table` views (the engine's request table).
    table_buffer: Arc<DeviceBuffer<i32>>,
    write: Shared<WriteInputs<Cap<64>, InputAssertOff, Device>>,
    k: Arc<DeviceBuffer<u8>>,
    v: Arc<DeviceBuffer<u8>>,
}

/// An engine's struct holding its canary's step graph (`'static`, `Send`).
struct Engine {
    graph: StepGraph<Cap<48>, Cap<ROWS>, Cap<64>, Cap<SLOTS>, Cap<64>, Full, Inputs>,
    /// The rows a table-row sweep checks, and a second view of the graph's request table.
    sweep_rows: cuda::DeviceBatch<Cap<ROWS>>,
    table: Shared<cuda::DeviceReqToToken>,
}

const _: fn() = || {
    fn send<T: Send + 'static>() {}
    send::<Engine>();
};

fn params() -> RealKvParams {
    RealKvParams::new(1, STRIP as i64, STRIP as i64)
}

fn layout() -> RowLayout {
    RowLayout {
        num_rows: SLOTS,
        row_bytes: STRIP,
        row_stride_bytes: STRIP,
    }
}

fn host_kv(bytes: &[u8]) -> Result<RealKv<'_>, String> {
    let src = RealKvSource::new(bytes, STRIP, params()).map_err(fail("source"))?;
    Ok(RealKv::new(
        RealKvHashMode::All,
        RealKvSources::from_array([src]),
    ))
}

/// The real-KV sources of the inputs' KV pool (K and V), whole strips folded.
fn device_kv(k: &Inputs) -> Result<KvPair<DeviceRealKv<'_>>, Error> {
    let source = |bytes| -> Result<DeviceRealKv<'_>, Error> {
        let src = DeviceRealKvSource::new(bytes, layout(), params())?;
        Ok(DeviceRealKv::new(RealKvHashMode::All, [src]))
    };
    Ok(KvPair {
        k: source(&*k.k)?,
        v: source(&*k.v)?,
    })
}

/// The whole device step on `canary` over `k` (plan, head verify, write, tail verify folding
/// the KV bytes): the step closure of the graph, and the engine's own capture.
fn device_step(canary: &mut DeviceCanary, k: &Inputs) -> Result<PendingDeviceReport, Error> {
    let step = canary
        .plan(&cuda::PlanInputs::full(&k.batch, &k.table))?
        .verify_head()?
        .write(&k.write)?;
    // The forward pass would be queued here, on `step.backend()` (the canary's stream).
    step.verify_tail(device_kv(k)?)
}

/// The host side of the random steps: the CPU canary and its inputs, the KV pool, what each
/// request row has cached.
struct Twin {
    cpu: Canary<Cap<48>, Cap<ROWS>, Cap<64>, Cap<SLOTS>, Cap<64>>,
    table: ReqToToken,
    inputs: WriteInputs<Cap<64>>,
    k: Vec<u8>,
    v: Vec<u8>,
    cached: [usize; ROWS],
    rng: Rng,
    tampered: usize,
    /// The batch of the last draw.
    last_batch: Batch,
    /// Sweeps so far, and those of table rows (every other one).
    sweeps: usize,
    table_row_sweeps: usize,
}

impl Twin {
    fn new(seed: u64) -> Result<Self, String> {
        let shape = Spec::new();
        let cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
        let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
        let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
        let inputs = cpu.write_inputs();
        Ok(Twin {
            cpu,
            table,
            inputs,
            k: vec![0; SLOTS * STRIP],
            v: vec![0; SLOTS * STRIP],
            cached: [0; ROWS],
            rng: Rng::new(seed),
            tampered: 0,
            last_batch: Batch::default(),
            sweeps: 0,
            table_row_sweeps: 0,
        })
    }

    /// Draws the next batch, refills the device inputs and KV bytes with it (synchronous
    /// uploads), runs the CPU step and returns its report.
    fn step(&mut self, device: &Inputs) -> Result<StepReport, String> {
        let drawn = draw_rows(&mut self.rng, &mut self.cached, WIDTH, true);
        let tokens = drawn.written(slot);
        let batch = drawn.batch();
        fill_write_inputs(self.inputs.parts_mut(), &tokens);
        crate::step::stamp_kv(&mut self.k, &mut self.v, &tokens);
        device.write.upload(&self.inputs).map_err(fail("inputs"))?;
        device.batch.upload(&batch).map_err(fail("batch"))?;
        crate::sub_slices::engine_write(&device.k, &self.k)?;
        crate::sub_slices::engine_write(&device.v, &self.v)?;
        let step = self
            .cpu
            .plan(&kv_canary::PlanInputs::full(&batch, &self.table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&self.inputs))
            .map_err(fail("cpu step"))?;
        self.last_batch = batch;
        step.verify_tail(TailKv::new(host_kv(&self.k)?, host_kv(&self.v)?))
            .map_err(fail("cpu tail"))
    }

    /// Sweeps the cached positions of one cached row on both canaries between replays (the
    /// entries a radix-cache walk of the row emits), after flipping a KV byte of one of its
    /// slots in the pool when `fault` (both canaries fold the same bytes); the reports must be
    /// equal, and a flipped byte found. `None` when no row has two cached positions.
    fn sweep(&mut self, engine: &mut Engine, fault: bool) -> Result<Option<usize>, String> {
        let start = self.rng.below(ROWS as u64) as usize;
        let Some(row) = (0..ROWS)
            .map(|i| (start + i) % ROWS)
            .find(|&r| r > 0 && self.cached[r] >= 2)
        else {
            return Ok(None);
        };
        let n = self.cached[row];
        let cells: Vec<i64> = (0..n).map(|p| slot(row, p)).collect();
        let mut entries = SweepEntries::new();
        entries.push_row(&cells, n).map_err(fail("sweep entries"))?;
        if fault {
            let s = slot(row, self.rng.below(n as u64) as usize) as usize;
            self.k[s * STRIP + 3] ^= 0x10;
            crate::sub_slices::engine_write(&engine.graph.inputs().k, &self.k)?;
        }
        let c = self
            .cpu
            .sweep(&entries, TailKv::new(host_kv(&self.k)?, host_kv(&self.v)?))
            .map_err(fail("cpu sweep"))?;
        // Every other sweep names the row instead: its entries derived on the device from the
        // graph's table (through the engine's second view of it).
        self.sweeps += 1;
        let pending = if self.sweeps % 2 == 1 {
            engine.graph.sweep(&entries, device_kv)
        } else {
            self.table_row_sweeps += 1;
            let rows = Batch::from_columns([row as i64], [n as i64], [0]);
            engine
                .sweep_rows
                .upload(&rows)
                .map_err(fail("sweep rows"))?;
            let rows = cuda::PlanInputs::full(&engine.sweep_rows, &engine.table);
            engine.graph.sweep_table_rows(&rows, device_kv)
        };
        let d = pending
            .map_err(fail("device sweep"))?
            .wait()
            .map_err(fail("device sweep report"))?;
        ensure!(
            c.entries == d.entries,
            "sweep of row {row}: entries CPU {c}, GPU {d}"
        );
        crate::sweep::same_sweep(&format!("sweep of row {row}"), &c, &d)?;
        ensure!(
            !fault
                || d.violations
                    .iter()
                    .any(|v| v.launch_tag() == Some(LaunchTag::SweepKFull)),
            "the KV byte flipped in row {row} was not found by the sweep: {d:?}"
        );
        Ok(Some(d.violations.len()))
    }

    /// Tampers one stored head-K record in both canaries (a fault between replays); `false`
    /// when no row has a record to tamper.
    fn tamper(&mut self, device: &DeviceCanary) -> Result<bool, String> {
        let row = 1 + self.rng.below(ROWS as u64 - 1) as usize;
        if self.cached[row] < 2 {
            return Ok(false);
        }
        let s = slot(row, self.rng.below(self.cached[row] as u64 - 1) as usize) as usize;
        let tag = LaunchTag::HeadKFull;
        let host = self.cpu.buffer_mut(tag).ok_or("no head K buffer")?;
        let rec = host.slot(s).ok_or("slot")?;
        let bad = CanarySlot {
            token: rec.token ^ 1,
            ..rec
        };
        host.set_slot(s, bad).map_err(fail("tamper"))?;
        let dbuf = device.buffer(tag).ok_or("no device head K buffer")?;
        let mut copy = dbuf.to_host().map_err(fail("download"))?;
        copy.set_slot(s, bad).map_err(fail("tamper"))?;
        dbuf.upload(&copy).map_err(fail("upload"))?;
        self.tampered += 1;
        Ok(true)
    }
}

fn device_inputs(gpu: &Gpu, twin: &Twin) -> Result<Inputs, String> {
    let cuda_err = |e: cust::error::CudaError| format!("engine buffer: {e}");
    let buffer = |len: usize| {
        DeviceBuffer::from_slice(&vec![0i64; len])
            .map(Arc::new)
            .map_err(cuda_err)
    };
    let batch = (buffer(ROWS)?, buffer(ROWS)?, buffer(ROWS)?);
    let bs = Arc::new(DeviceBuffer::from_slice(&[0i32]).map_err(cuda_err)?);
    let write = [buffer(64)?, buffer(64)?, buffer(64)?];
    let table = Arc::new(DeviceBuffer::from_slice(twin.table.as_slice()).map_err(cuda_err)?);
    let zeros = vec![0u8; SLOTS * STRIP];
    Ok(Inputs {
        batch: cuda::DeviceBatch::from_shared(gpu, Cap::<ROWS>, batch, Some(bs))
            .map_err(fail("batch view"))?,
        table: cuda::DeviceReqToToken::from_shared(gpu, Arc::clone(&table), ROWS, WIDTH)
            .map_err(fail("table view"))?,
        table_buffer: table,
        write: {
            let [ids, pos, loc] = write;
            WriteInputs::from_shared(gpu, Cap::<64>, ids, pos, loc).map_err(fail("inputs view"))?
        },
        k: Arc::new(DeviceBuffer::from_slice(&zeros).map_err(cuda_err)?),
        v: Arc::new(DeviceBuffer::from_slice(&zeros).map_err(cuda_err)?),
    })
}

/// A canary and its step graph in an engine's struct, 60 replays over refilled batches, each
/// report taken one replay late and equal to the CPU step's; records tampered between replays
/// show in the next replay's report on both; at replay 30 (every report before 29 taken, none
/// since: two unread whatever the device's timing) a third replay ahead is refused
/// (`ReportUnread`, naming the unread replay) and nothing is lost: every replay's report is
/// delivered once, two pinned stagings serve all of them, and the canary comes back equal to
/// the CPU's. Every 8th replay is followed by a sweep of a cached row through the stored graph
/// (`StepGraph::sweep` of its entries, or `StepGraph::sweep_table_rows` of the row, its entries
/// derived on the device; folding the pool the graph's inputs own), equal to the CPU's sweep, with
/// a KV byte of the row flipped first in every other one: the sweep finds it.
pub fn step_graph_replays_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let replays = crate::scaled(60).max(32);
    gpu.make_current().map_err(fail("context"))?;
    let mut twin = Twin::new(0x6AF0_0001)?;
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let canary: DeviceCanary =
        Canary::full_on(stream, Spec::new(), Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let inputs = device_inputs(gpu, &twin)?;
    let table = Arc::clone(&inputs.table_buffer);
    let mut engine = Engine {
        graph: StepGraph::new(canary, inputs, device_step),
        sweep_rows: Spec::new().device_batch(gpu).map_err(fail("sweep rows"))?,
        table: cuda::DeviceReqToToken::from_shared(gpu, table, ROWS, WIDTH)
            .map_err(fail("table view"))?,
    };
    engine.graph.capture().map_err(fail("capture"))?;
    let mut expected: VecDeque<(u64, StepReport)> = VecDeque::new();
    let (mut overflows, mut found, mut refused, mut delivered) = (0, 0, 0, 0u64);
    let (mut sweeps, mut swept_rows) = (0, 0);
    let mut take = |engine: &mut Engine,
                    expected: &mut VecDeque<(u64, StepReport)>,
                    block: bool|
     -> Result<(), String> {
        let got = if block {
            engine.graph.wait()
        } else {
            engine.graph.try_take()
        }
        .map_err(fail("report"))?;
        if let Some((n, d)) = got {
            let (m, c) = expected.pop_front().ok_or("a report nobody replayed")?;
            ensure!(n == m, "report of replay {n} delivered where {m} was due");
            compare(n as usize, &c, &d, &mut overflows, &mut found)?;
            delivered += 1;
        }
        Ok(())
    };
    for n in 0..replays {
        if n > 3 && twin.rng.chance(20) {
            // The fault lands between replays: the previous replays must be done with the
            // buffer first (the transfer is ordered on this blocking stream).
            twin.tamper(engine.graph.canary())?;
        }
        let c = twin.step(engine.graph.inputs())?;
        if n == 29 {
            // Every report up to 28 taken, whenever each landed (the takes below take the
            // oldest unread one, which may already be the replay just queued when the device
            // runs ahead of the host, as under compute-sanitizer): 29 and 30 are then the
            // only unread replays when 30 is queued, whatever the timing.
            while engine.graph.unread() > 0 {
                take(&mut engine, &mut expected, true)?;
            }
        }
        let queued = engine.graph.replay().map_err(fail("replay"))?;
        ensure!(queued == n, "replay {queued} queued as the {n}th");
        expected.push_back((n, c));
        if n == 29 {
            // Nothing taken: 29 stays unread for the refusal at 30.
            continue;
        }
        if n == 30 {
            // Two unread (29, 30): a third replay would overwrite 29's staging.
            let unread = engine.graph.unread();
            ensure!(
                unread == 2,
                "{unread} replays unread after 29 and 30 were queued with nothing taken, not 2"
            );
            match engine.graph.replay() {
                Err(Error::ReportUnread { unread, replay }) => {
                    ensure!(
                        (unread, replay) == (29, 31),
                        "refused replay names {unread} and {replay}, not 29 and 31"
                    );
                    refused += 1;
                }
                other => return Err(format!("a replay too far ahead was not refused: {other:?}")),
            }
            ensure!(
                engine.graph.replays() == 31 && engine.graph.unread() == 2,
                "the refused replay changed the counts"
            );
        }
        // One replay late: the oldest unread report (replay n-1's, or n's when n-1's was
        // taken already), landed by now or soon.
        if n > 0 {
            take(&mut engine, &mut expected, true)?;
        }
        // And the next one if it landed already.
        take(&mut engine, &mut expected, false)?;
        if n % 8 == 5 {
            // A sweep of idle cached KV between two replays (a KV fault in every other one).
            if let Some(rows) = twin.sweep(&mut engine, n % 16 == 5)? {
                (sweeps, swept_rows) = (sweeps + 1, swept_rows + rows);
            }
        }
    }
    while !expected.is_empty() {
        take(&mut engine, &mut expected, true)?;
    }
    ensure!(
        delivered == replays && engine.graph.unread() == 0,
        "{delivered} reports delivered for {replays} replays"
    );
    // The graph's two, and one the first sweep took from the stream's pool (reused by the rest).
    let stagings = engine.graph.stream().report_stagings_allocated();
    ensure!(
        stagings == 2 + u64::from(sweeps > 0),
        "{stagings} pinned stagings allocated for 2 graph instances and {sweeps} sweeps"
    );
    ensure!(
        sweeps >= 2 && twin.table_row_sweeps > 0 && swept_rows > 0,
        "weak run: {sweeps} sweeps between replays, {swept_rows} violation rows found by them"
    );
    ensure!(refused == 1, "the replay too far ahead was not tried");
    ensure!(
        twin.tampered > 0 && found > 0,
        "weak run: {} tampered, {found} replays with violations",
        twin.tampered
    );
    let canary = engine.graph.canary();
    crate::step::same_canaries(&twin.cpu, canary, &format!(" after {replays} replays"))?;
    ensure!(
        canary.total_violations() == twin.cpu.total_violations(),
        "violation totals differ: GPU {}, CPU {}",
        canary.total_violations(),
        twin.cpu.total_violations()
    );
    let malformed = malformed_replay(&mut engine, &mut twin, replays)?;
    println!(
        "    {replays} replays equal to the CPU ({} tampered, {found} with violations, \
         {overflows} unverified), 1 replay too far ahead refused, {sweeps} sweeps between \
         replays equal to the CPU ({} of table rows; {swept_rows} rows), {stagings} stagings; \
         {malformed}",
        twin.tampered, twin.table_row_sweeps
    );
    Ok(())
}

/// After the compared replays: one replay over a written token whose `out_cache_loc` is past
/// the pool. Its report is taken as an error naming the replay (`Error::InReplay`) around the
/// CPU's error for the same inputs, it counts as taken, and the next replay's report is
/// delivered. Returns the line for the test's output.
fn malformed_replay(engine: &mut Engine, twin: &mut Twin, first: u64) -> Result<String, String> {
    // A batch that writes at least one token (draws until one does; the CPU twin runs them).
    let mut draws = 0;
    loop {
        twin.step(engine.graph.inputs())?;
        draws += 1;
        if twin.inputs.out_cache_loc().first().is_some_and(|&s| s >= 0) {
            break;
        }
        ensure!(draws < 50, "no batch in {draws} draws writes a token");
    }
    let mut bad = twin.inputs.clone();
    let past = SLOTS as i64 + 7;
    bad.parts_mut().out_cache_loc[0] = past;
    engine
        .graph
        .inputs()
        .write
        .upload(&bad)
        .map_err(fail("inputs"))?;
    let replay = engine.graph.replay().map_err(fail("replay"))?;
    // The draws refilled the inputs without replaying: this is the replay after the compared
    // ones.
    ensure!(
        replay == first,
        "malformed replay numbered {replay}, not {first}"
    );
    let cpu = twin
        .cpu
        .plan(&kv_canary::PlanInputs::full(&twin.last_batch, &twin.table))
        .and_then(|s| s.verify_head())
        .and_then(|s| s.write(&bad))
        .err()
        .ok_or("the CPU wrote a token past the pool")?;
    let got = engine.graph.wait();
    let Err(Error::InReplay { replay: n, error }) = &got else {
        return Err(format!(
            "replay {replay} over slot {past}: {got:?}, not InReplay"
        ));
    };
    ensure!(*n == replay, "the error names replay {n}, not {replay}");
    ensure!(
        **error == cpu && got.as_ref().err().map(Error::root) == Some(&cpu),
        "replay {replay}: the device's error {error:?} is not the CPU's {cpu:?}"
    );
    let message = got
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    ensure!(
        message.starts_with(&format!(
            "kv-canary: replay {replay} of the captured step: "
        )) && message.matches("kv-canary:").count() == 1,
        "message: {message}"
    );
    ensure!(
        engine.graph.unread() == 0,
        "{} unread after the malformed replay's error was taken",
        engine.graph.unread()
    );
    engine
        .graph
        .inputs()
        .write
        .upload(&twin.inputs)
        .map_err(fail("inputs"))?;
    let next = engine.graph.replay().map_err(fail("replay"))?;
    let taken = engine
        .graph
        .wait()
        .map_err(fail("report after the malformed replay"))?;
    ensure!(
        taken.as_ref().map(|t| t.0) == Some(next),
        "after the malformed replay {replay}: {taken:?}, not replay {next}'s report"
    );
    Ok(format!(
        "replay {replay} over slot {past} taken as `{message}`, replay {next} delivered after it"
    ))
}

/// The engine's own capture: a raw non-blocking stream created here, the canary on it
/// (`Stream::from_raw`), `cuStreamBeginCapture` / the step stages / `cuStreamEndCapture` by
/// the engine, its own `cuGraphLaunch` per replay, and a `CapturedReport` told about each;
/// 40 replays equal to the CPU, a second launch before the report is taken refused by
/// `can_replay`.
pub fn engine_captures_a_step(gpu: &Gpu) -> Result<(), String> {
    use cust::sys;
    let replays = crate::scaled(40).max(8);
    gpu.make_current().map_err(fail("context"))?;
    let mut raw: sys::CUstream = core::ptr::null_mut();
    // SAFETY: the driver writes a new non-blocking stream of the current (gpu's) context.
    let created = unsafe {
        sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    };
    ensure!(
        created == sys::CUresult::CUDA_SUCCESS,
        "cuStreamCreate: {created:?}"
    );
    let result = engine_capture_on(gpu, raw, replays);
    gpu.synchronize().map_err(fail("synchronize"))?;
    // SAFETY: the canary (and its wrapper of `raw`) is dropped and its work done.
    unsafe { sys::cuStreamDestroy_v2(raw) };
    result
}

fn engine_capture_on(gpu: &Gpu, raw: cust::sys::CUstream, replays: u64) -> Result<(), String> {
    use cust::sys;
    let check = |what: &str, r: sys::CUresult| -> Result<(), String> {
        ensure!(r == sys::CUresult::CUDA_SUCCESS, "{what}: {r:?}");
        Ok(())
    };
    let mut twin = Twin::new(0x6AF0_0002)?;
    // SAFETY: `raw` is a live stream of gpu's primary context, destroyed by the caller after
    // the canary and everything queued through it are gone.
    let stream = unsafe { Stream::from_raw(gpu, raw) }.map_err(fail("from_raw"))?;
    let mut canary: DeviceCanary =
        Canary::full_on(stream, Spec::new(), Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let inputs = device_inputs(gpu, &twin)?;
    canary.prepare_capture(1).map_err(fail("prepare capture"))?;
    // SAFETY: `raw` is live; global mode.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(raw, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
    })?;
    ensure!(
        canary
            .backend()
            .is_capturing()
            .map_err(fail("is_capturing"))?,
        "the wrapper does not see the engine's capture"
    );
    let pending = device_step(&mut canary, &inputs);
    let mut graph: sys::CUgraph = core::ptr::null_mut();
    // SAFETY: the capture begun above; the graph is ours (destroyed below).
    let ended = unsafe { sys::cuStreamEndCapture(raw, &mut graph) };
    let pending = pending.map_err(fail("captured step"))?;
    check("cuStreamEndCapture", ended)?;
    ensure!(
        pending.is_captured(),
        "the step's report does not know it was captured"
    );
    let mut exec: sys::CUgraphExec = core::ptr::null_mut();
    // SAFETY: `graph` is the live captured graph; `exec` receives its instance.
    check("cuGraphInstantiate", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
    })?;
    let mut report: CapturedReport = pending.into_captured().map_err(fail("into_captured"))?;
    let result = (|| -> Result<(), String> {
        let (mut overflows, mut found) = (0, 0);
        for n in 0..replays {
            // Transfers are not ordered with this non-blocking stream: the last replay is done
            // (its report was waited for), and the context is synchronised after them.
            if n > 3 && twin.rng.chance(20) {
                twin.tamper(&canary)?;
            }
            let c = twin.step(&inputs)?;
            gpu.synchronize().map_err(fail("fence"))?;
            report.can_replay(n).map_err(fail("can_replay"))?;
            // SAFETY: `exec` is instantiated; every buffer it uses (the canary's, `inputs`,
            // the report's staging) lives until after the loop and the final synchronise.
            check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, raw) })?;
            // SAFETY: one launch of the graph that captured `report` was just queued on its
            // stream, and the next waits for this report (taken below).
            unsafe { report.replayed(canary.backend()) }.map_err(fail("replayed"))?;
            if n == 5 {
                match report.can_replay(n + 1) {
                    Err(Error::ReportUnread { unread, replay }) => ensure!(
                        (unread, replay) == (5, 6),
                        "can_replay names {unread} and {replay}, not 5 and 6"
                    ),
                    other => return Err(format!("an unread report did not refuse: {other:?}")),
                }
            }
            let d = report
                .wait()
                .map_err(fail("report"))?
                .ok_or("no report after a replay")?;
            ensure!(
                report.try_take().map_err(fail("report"))?.is_none(),
                "replay {n}'s report delivered twice"
            );
            compare(n as usize, &c, &d, &mut overflows, &mut found)?;
        }
        ensure!(
            found > 0,
            "no replay found a violation ({} tampered)",
            twin.tampered
        );
        println!(
            "    the engine's own capture: {replays} replays equal to the CPU ({} tampered, \
             {found} with violations)",
            twin.tampered
        );
        Ok(())
    })();
    gpu.synchronize().map_err(fail("synchronize"))?;
    // SAFETY: both are ours, no replay is in flight (synchronised).
    unsafe {
        sys::cuGraphExecDestroy(exec);
        sys::cuGraphDestroy(graph);
    }
    drop(report);
    result
}
