//! The device side: one workload on one GPU, through the device step API (`step::Canary` on a
//! `Stream`: eager steps timed with events, the host timeline) and through the raw ops of the
//! same step with the same tags on the canary's own buffers (eager launches timed one by one,
//! and the whole step captured into one CUDA graph and replayed), and through the library's own
//! whole-step graph ([`StepGraph`]: the step API captured, report copies included).
//!
//! "ours" is the raw graph: [`queue_step`] queues the launches of one step exactly as the step
//! API does (plan; HEAD_K, HEAD_V verify; HEAD_K, HEAD_V write; TAIL_K, TAIL_V verify; TAIL_K,
//! TAIL_V write) on the canary's buffers, without the report's copies, as SGLang's graph has
//! none; [`step_graph_run`] times the same step with them.

use crate::host_sched::{SchedMark, TimedCall};
use crate::timing::{self, Lead, Stats};
use crate::workload::{cap, Mode, Workload, KV_ROW_BYTES, RING_ROWS};
use crate::Options;
use cust::memory::DeviceBuffer;
use kv_canary::cuda::{
    self, DeviceBatch, DeviceRealKv, DeviceRealKvSource, DeviceReqToToken, DeviceSettings,
    DeviceStepReport, Gpu, PlanKernel, Polled, Queue, StepGraph, Stream, TailKvOnDevice,
};
use kv_canary::step::{Canary, GroupKind, KOnly, KvPair};
use kv_canary::{
    CanaryBuffer, Device, Error, Full, HealthCounters, InputAssertOff, NoExpectedTokens,
    TokenCheckOff, UncheckedCapacity, UncheckedShape, VerifyPlan, ViolationRing, WriteInputs,
    WritePlan,
};
use kv_canary_testkit::floors::{self, Floors, StageFloor, StageHalf};
use std::cell::Cell;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

type Uc = UncheckedCapacity;
/// A device canary of the benchmark: run-time capacities, group `G`, on a stream.
type CanaryOf<G> = Canary<Uc, Uc, Uc, Uc, Uc, G, Stream>;
/// The device canary of the raw launches: FULL group (its K halves serve K only too).
type DeviceCanary = CanaryOf<Full>;
type DeviceInputs = WriteInputs<Uc, InputAssertOff, Device>;
type DevicePlanInputs<'a> = cuda::PlanInputs<'a, Uc, Full, NoExpectedTokens>;

/// A message with its context.
fn ctx(what: &'static str) -> impl Fn(Error) -> String {
    move |e| format!("{what}: {e}")
}

/// What the host calls of the step API cost, over a run of steps.
#[derive(Clone, Debug, Default)]
pub struct HostTimes {
    /// `[plan_verify_head_and_write, verify_tail, try_take]`, every call (wall µs and the
    /// thread's scheduler accounting around it).
    pub calls: [Vec<TimedCall>; 3],
    /// `wait` calls (a report not ready at the next step), µs.
    pub waits: Vec<f64>,
    /// `try_take` calls that found the report ready one step late.
    pub ready: usize,
    /// Reports still pending one step late and taken at the next step's start, ready then
    /// (forward pass on the device only).
    pub ready_late: usize,
    /// The forward pass between write and tail verify, µs (0: none).
    pub forward_us: f64,
    /// Pinned report stagings the stream allocated (2 when reports are taken one step late).
    pub stagings: u64,
    /// Timeline lines of a few steps (host timestamps).
    pub timeline: Vec<String>,
}

/// The two host timelines of a row: the forward pass spun on the host, then queued on the
/// device.
pub type Timelines = [HostTimes; 2];

/// Names of [`HostTimes::calls`].
pub const HOST_CALLS: [&str; 3] = ["plan_verify_head_and_write", "verify_tail", "try_take"];

impl HostTimes {
    /// Calls longer than `stall_us` (`wait` excluded), in two counts: the stalls (the thread
    /// on a CPU or blocked for that long) and the calls the OS preempted (their run-queue wait
    /// explains the time: [`TimedCall::preempted`]).
    pub fn slow_calls(&self, stall_us: f64) -> (usize, usize) {
        let slow = self.calls.iter().flatten().filter(|c| c.wall_us > stall_us);
        slow.fold((0, 0), |(stalls, preempted), c| {
            if c.preempted(stall_us) {
                (stalls, preempted + 1)
            } else {
                (stalls + 1, preempted)
            }
        })
    }

    /// The stalls of [`slow_calls`](Self::slow_calls) during which the thread slept in the
    /// kernel (a blocking wait); the others ran on a CPU throughout.
    pub fn slept_stalls(&self, stall_us: f64) -> usize {
        self.calls
            .iter()
            .flatten()
            .filter(|c| c.wall_us > stall_us && !c.preempted(stall_us) && c.slept())
            .count()
    }

    /// Calls of at least half the forward pass queued on the device: what a call that waited
    /// for the device would last (0 with the forward pass on the host: no such bound).
    pub fn device_bound(&self) -> usize {
        let bound = self.forward_us / 2.0;
        self.calls
            .iter()
            .flatten()
            .filter(|c| bound > 0.0 && c.wall_us >= bound)
            .count()
    }

    /// Every call, for the legend of the accounting used.
    pub fn all_calls(&self) -> Vec<TimedCall> {
        self.calls.iter().flatten().copied().collect()
    }

    /// The largest call of each kind, µs.
    pub fn max(&self) -> [f64; 3] {
        self.calls
            .each_ref()
            .map(|c| c.iter().map(|c| c.wall_us).fold(0.0, f64::max))
    }

    /// Median of each kind, µs.
    pub fn median(&self) -> [f64; 3] {
        self.calls
            .each_ref()
            .map(|c| median(&c.iter().map(|c| c.wall_us).collect::<Vec<_>>()))
    }

    /// Steps recorded.
    pub fn steps(&self) -> usize {
        self.calls[0].len()
    }
}

/// The median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The floor of one row, measured ([`crate::workload::FLOOR_FORMULA`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Floor {
    /// The head stage's gather floor (both halves in one launch), µs.
    pub head_us: f64,
    /// The tail stage's gather floor (both halves in one launch, PARTIAL's 16-byte real-KV reads
    /// included), µs.
    pub tail_us: f64,
    /// Bytes moved besides the gathers.
    pub bytes: u64,
    /// `bytes` at the copy bandwidth, µs.
    pub traffic_us: f64,
    /// The chain floor of the longest request, µs.
    pub chain_us: f64,
}

impl Floor {
    /// The whole floor, µs.
    pub fn total_us(&self) -> f64 {
        self.head_us + self.tail_us + self.traffic_us + self.chain_us
    }
}

/// Results of one (step, mode) row on one device.
#[derive(Clone, Debug)]
pub struct RowResult {
    /// Which step.
    pub step: &'static str,
    /// Which mode.
    pub mode: Mode,
    /// Verify entries and written tokens of the step.
    pub entries: usize,
    /// Written tokens of the step.
    pub tokens: usize,
    /// Graph replay, stream idle before each replay (SGLang's method).
    pub graph: Stats,
    /// Graph replay queued behind a spin kernel (the device's time alone).
    pub queued: Option<Stats>,
    /// The library's own whole-step graph ([`cuda::StepGraph`]: the step API captured, report
    /// copies into pinned memory included), each replay's report taken and checked; one-device
    /// full run.
    pub step_graph: Option<Stats>,
    /// Eager steps through the step API, events around each step (report copies included); K
    /// only on a K-only canary (`Canary::k_only_on`).
    pub step_api: Option<Stats>,
    /// Eager raw launches, events between them: (launch, median µs).
    pub launches: Vec<(&'static str, f64)>,
    /// The host calls of the step API (timeline runs: the forward pass spun on the host, then
    /// queued on the device).
    pub host: Option<Timelines>,
    /// The floor (one-device full run only).
    pub floor: Option<Floor>,
    /// Step reports checked clean (step API) plus graph/raw executions checked clean.
    pub checked_steps: usize,
}

/// What the full run adds on device 0: the floor kernels and the copy bandwidth.
pub struct FloorKit {
    /// The bench kernels.
    pub floors: Floors,
    /// Device-to-device copy bandwidth, bytes per µs (read + written).
    pub copy_bytes_per_us: f64,
}

impl FloorKit {
    /// Loads the floor kernels and measures the copy bandwidth (512 MiB, median of 10).
    pub fn new(gpu: &Gpu, o: &Options) -> Result<Self, String> {
        let floors = Floors::new(gpu).map_err(ctx("floor kernels"))?;
        let stream = Stream::new(gpu).map_err(ctx("stream"))?;
        let n = 512usize << 20;
        let src = floors::filled(n, 1).map_err(ctx("copy source"))?;
        let dst = floors::filled(n, 0).map_err(ctx("copy destination"))?;
        let stats = timing::time(&stream, Lead::Idle, 2, if o.quick { 3 } else { 10 }, || {
            floors::device_copy(&stream, &dst, &src)
        })
        .map_err(ctx("copy floor"))?;
        Ok(FloorKit {
            floors,
            copy_bytes_per_us: 2.0 * n as f64 / stats.median_us,
        })
    }
}

/// The two groups the benchmark steps through the step API: [`Full`] for the K+V modes and
/// [`KOnly<Full>`] (an MLA-style pool without a V half) for K only.
trait BenchGroup: GroupKind<Pool = Full> + Sized {
    /// A fresh canary of `w` on a new stream of `gpu`.
    fn canary(gpu: &Gpu, w: &Workload) -> Result<CanaryOf<Self>, String>;
    /// This group's tail sources out of both halves' (K only drops the V half's).
    fn sources(kv: TailKvOnDevice<'_>) -> Self::Sources<DeviceRealKv<'_>>;
}

impl BenchGroup for Full {
    fn canary(gpu: &Gpu, w: &Workload) -> Result<CanaryOf<Self>, String> {
        Canary::full_on(
            Stream::new(gpu).map_err(ctx("stream"))?,
            w.shape,
            cap("slots", w.slots).map_err(ctx("slots"))?,
            cap("ring rows", RING_ROWS).map_err(ctx("ring"))?,
        )
        .map_err(ctx("device canary"))
    }

    fn sources(kv: TailKvOnDevice<'_>) -> Self::Sources<DeviceRealKv<'_>> {
        kv
    }
}

impl BenchGroup for KOnly<Full> {
    fn canary(gpu: &Gpu, w: &Workload) -> Result<CanaryOf<Self>, String> {
        Canary::k_only_on(
            Stream::new(gpu).map_err(ctx("stream"))?,
            w.shape,
            cap("slots", w.slots).map_err(ctx("slots"))?,
            cap("ring rows", RING_ROWS).map_err(ctx("ring"))?,
        )
        .map_err(ctx("K-only device canary"))
    }

    fn sources(kv: TailKvOnDevice<'_>) -> Self::Sources<DeviceRealKv<'_>> {
        kv.k
    }
}

/// The device copy of one workload's inputs, shared by its modes.
struct DeviceWorkload {
    table: DeviceReqToToken,
    setup: Option<(DeviceBatch<Uc>, DeviceInputs)>,
    batch: DeviceBatch<Uc>,
    inputs: DeviceInputs,
    k_pool: DeviceBuffer<u8>,
    v_pool: DeviceBuffer<u8>,
    /// The K+V modes' step-API canary, whose buffers the raw launches use too.
    canary: DeviceCanary,
    /// The K-only mode's step-API canary.
    k_only: CanaryOf<KOnly<Full>>,
}

impl DeviceWorkload {
    fn new(gpu: &Gpu, w: &Workload) -> Result<Self, String> {
        gpu.make_current().map_err(ctx("context"))?;
        let canary = Full::canary(gpu, w)?;
        let upload = |batch: &kv_canary::Batch, inputs: &WriteInputs<Uc>| {
            let b = w.shape.device_batch(gpu)?;
            b.upload(batch)?;
            let i = canary.try_write_inputs()?;
            i.upload(inputs)?;
            Ok::<_, Error>((b, i))
        };
        let setup = match &w.setup {
            Some((b, i)) => Some(upload(b, i).map_err(ctx("setup inputs"))?),
            None => None,
        };
        let (batch, inputs) = upload(&w.step.0, &w.step.1).map_err(ctx("step inputs"))?;
        Ok(DeviceWorkload {
            table: DeviceReqToToken::from_host(gpu, &w.table).map_err(ctx("table"))?,
            setup,
            batch,
            inputs,
            k_pool: floors::filled(w.kv_pool_bytes(), 0x5A).map_err(ctx("K pool"))?,
            v_pool: floors::filled(w.kv_pool_bytes(), 0xA5).map_err(ctx("V pool"))?,
            canary,
            k_only: KOnly::<Full>::canary(gpu, w)?,
        })
    }
}

/// The tail fingerprints of `mode` over the two pools (the V half folds nothing in K only).
fn tail_kv<'a>(
    w: &Workload,
    mode: Mode,
    k: &'a DeviceBuffer<u8>,
    v: &'a DeviceBuffer<u8>,
) -> Result<TailKvOnDevice<'a>, String> {
    let (layout, params) = w.kv_layout();
    let (k_token, v_token) = w.token_layouts();
    let one = |pool, token| -> Result<DeviceRealKv<'a>, String> {
        let s = DeviceRealKvSource::new(pool, layout, params)
            .and_then(|s| s.with_token_layout(token))
            .map_err(ctx("real-KV source"))?;
        Ok(DeviceRealKv::new(mode.hash_mode(), [s]))
    };
    Ok(KvPair {
        k: one(k, k_token)?,
        v: if mode.halves() == 2 {
            one(v, v_token)?
        } else {
            DeviceRealKv::NONE
        },
    })
}

/// One report must be clean, verified, with the step's numbers.
fn check_report(w: &Workload, r: &DeviceStepReport, what: &str) -> Result<(), String> {
    // The setup step writes the prefixes and verifies nothing; the others are the measured step.
    let numbers_ok = what == "setup"
        || (r.write_tokens as usize == w.write_tokens && r.verify_num_valid == w.verify_entries);
    if !r.is_clean() || !r.enabled || !numbers_ok {
        return Err(format!(
            "{}: a {what} report is not clean and verified: {:?} (enabled {}, {} verify \
             entries, {} tokens written, {} violations, {} dropped)",
            w.kind.name,
            r.status(),
            r.enabled,
            r.verify_num_valid,
            r.write_tokens,
            r.violations.len(),
            r.dropped
        ));
    }
    Ok(())
}

/// One step through the step API, waiting for its report (setup and checks).
fn step_and_wait<G: BenchGroup>(
    c: &mut CanaryOf<G>,
    inputs: &DevicePlanInputs<'_>,
    write: &DeviceInputs,
    kv: TailKvOnDevice<'_>,
) -> Result<DeviceStepReport, String> {
    c.plan_verify_head_and_write(inputs, write)
        .and_then(|s| s.verify_tail(G::sources(kv)))
        .and_then(|p| p.wait())
        .map_err(ctx("step API step"))
}

/// Busy-waits `d` on the host (the engine's forward pass, as the host sees it).
fn spin_host(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Where the engine's forward pass runs between a step's `write` and its `verify_tail` in
/// [`step_api_run`].
#[derive(Clone, Copy)]
enum Forward<'k> {
    /// Nothing in between (the timed eager steps).
    Nothing,
    /// Spun on the host for this long (the device idle while the host waits).
    Host(Duration),
    /// A spin kernel of this length queued on the canary's stream, as an engine queues its
    /// forward pass: the device is busy while the host queues the tail verify and polls the
    /// reports, so a call that waited for the device would last about this long. The engine's
    /// own wait (step N starts once step N-1's forward pass is done, as an engine waits for its
    /// sampled tokens) is outside the timed calls.
    Device(&'k Floors, Duration),
}

/// `reps` steps through the step API, each report taken one step late (after the next step is
/// queued: `try_take`), every report checked. Each step is timed on the device by events around
/// it; `forward` runs between `write` and `verify_tail`; the first `timeline_lines` steps are
/// kept as timeline lines. A report still pending at its `try_take` is waited for when the
/// forward pass ran on the host (`waits`); with the forward pass on the device it is polled
/// again at the start of the next step, after the engine's wait (`ready_late`), where it is
/// always ready: its tail verify was queued before the forward pass that wait waited for.
/// Returns the device times and the host's.
#[allow(clippy::too_many_arguments)]
fn step_api_run<G: BenchGroup>(
    w: &Workload,
    gpu: &Gpu,
    c: &mut CanaryOf<G>,
    inputs: &DevicePlanInputs<'_>,
    write: &DeviceInputs,
    kv: TailKvOnDevice<'_>,
    reps: usize,
    forward: Forward<'_>,
    timeline_lines: usize,
) -> Result<(Vec<f64>, HostTimes), String> {
    let events: Vec<_> = (0..reps)
        .map(|_| Ok((cuda::Event::new(gpu)?, cuda::Event::new(gpu)?)))
        .collect::<Result<_, Error>>()
        .map_err(ctx("events"))?;
    let forward_done = cuda::Event::new(gpu).map_err(ctx("event"))?;
    let mut host = HostTimes {
        forward_us: match forward {
            Forward::Nothing => 0.0,
            Forward::Host(d) | Forward::Device(_, d) => d.as_secs_f64() * 1e6,
        },
        ..HostTimes::default()
    };
    let origin = Instant::now();
    let us = |t: Instant| t.duration_since(origin).as_secs_f64() * 1e6;
    // The scheduler accounting (procfs reads) only in the timeline runs: the timed eager steps
    // measure the device, and reads between their events would show as device time.
    let accounting = !matches!(forward, Forward::Nothing);
    let mark = move || {
        if accounting {
            SchedMark::now()
        } else {
            SchedMark::default()
        }
    };
    // Takes `prev` (the report of step `of`) without blocking; `Err(prev)` when still pending.
    let take = |host: &mut HostTimes,
                prev,
                of: usize,
                line: &mut String|
     -> Result<Option<kv_canary::cuda::PendingDeviceReport>, String> {
        let m6 = mark();
        let t6 = Instant::now();
        let polled: Polled =
            kv_canary::cuda::PendingDeviceReport::try_take(prev).map_err(ctx("try_take"))?;
        let t7 = Instant::now();
        host.calls[2].push(TimedCall::new(t7 - t6, m6, mark()));
        let (report, how) = match polled {
            Polled::Ready(r) => (r, "ready"),
            Polled::Pending(p) => {
                *line += &format!(
                    "; then step {of}'s report: try_take at +{:.1} us ({:.1} us) -> pending",
                    us(t6),
                    (t7 - t6).as_secs_f64() * 1e6
                );
                return Ok(Some(p));
            }
        };
        check_report(w, &report, "step")?;
        *line += &format!(
            "; then step {of}'s report: try_take at +{:.1} us ({:.1} us) -> {how}, clean",
            us(t6),
            (t7 - t6).as_secs_f64() * 1e6
        );
        Ok(None)
    };
    let mut unread = None;
    let mut late: Option<(usize, _)> = None;
    for (n, (start, stop)) in events.iter().enumerate() {
        let mut head = String::new();
        if let Forward::Device(..) = forward {
            if n > 0 {
                forward_done.synchronize().map_err(ctx("engine wait"))?;
            }
            if let Some((of, prev)) = late.take() {
                if let Some(p) = take(&mut host, prev, of, &mut head)? {
                    return Err(format!(
                        "step {of}'s report still pending after step {}'s forward pass: {p:?}",
                        n - 1
                    ));
                }
                host.ready_late += 1;
            }
        }
        c.backend().record(start).map_err(ctx("record"))?;
        let m0 = mark();
        let t0 = Instant::now();
        let s = c
            .plan_verify_head_and_write(inputs, write)
            .map_err(ctx("plan_verify_head_and_write"))?;
        let t3 = Instant::now();
        let m3 = mark();
        match forward {
            Forward::Nothing => {}
            Forward::Host(d) => spin_host(d),
            Forward::Device(floors, d) => {
                let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                floors.spin(s.backend(), ns).map_err(ctx("forward"))?;
                s.backend().record(&forward_done).map_err(ctx("record"))?;
            }
        }
        let m4 = mark();
        let t4 = Instant::now();
        let pending = s.verify_tail(G::sources(kv)).map_err(ctx("verify_tail"))?;
        let t5 = Instant::now();
        let m5 = mark();
        c.backend().record(stop).map_err(ctx("record"))?;
        host.calls[0].push(TimedCall::new(t3 - t0, m0, m3));
        host.calls[1].push(TimedCall::new(t5 - t4, m4, m5));
        let forward_how = match forward {
            Forward::Device(..) => "queued",
            _ => "spun",
        };
        let mut line = format!(
            "    step {n}:{head} plan_verify_head_and_write at +{:.1} us ({:.1} us), \
             forward {:.0} us {forward_how}, verify_tail {:.1} us: queued at +{:.1} us",
            us(t0),
            host.calls[0][n].wall_us,
            (t4 - t3).as_secs_f64() * 1e6,
            host.calls[1][n].wall_us,
            us(t5)
        );
        if let Some(prev) = unread.take() {
            if let Some(p) = take(&mut host, prev, n - 1, &mut line)? {
                match forward {
                    Forward::Device(..) => late = Some((n - 1, p)),
                    _ => {
                        let t = Instant::now();
                        check_report(w, &p.wait().map_err(ctx("wait"))?, "step")?;
                        host.waits.push(t.elapsed().as_secs_f64() * 1e6);
                        line += ", then wait";
                    }
                }
            } else {
                host.ready += 1;
            }
        }
        if n < timeline_lines {
            host.timeline.push(line);
        }
        unread = Some(pending);
    }
    for last in late.map(|(_, p)| p).into_iter().chain(unread) {
        check_report(w, &last.wait().map_err(ctx("wait"))?, "step")?;
    }
    host.stagings = c.backend().report_stagings_allocated();
    let times = events
        .iter()
        .map(|(a, b)| b.elapsed_ms(a).map(|ms| f64::from(ms) * 1e3))
        .collect::<Result<_, Error>>()
        .map_err(ctx("elapsed"))?;
    Ok((times, host))
}

/// The eager step-API runs of one row on `c`: a probe, the timed steps (events around each),
/// and on the full run the two host timelines: the engine's forward pass (twice the eager step,
/// at least 100 µs) spun on the host, then queued on the device as a spin kernel. Returns the
/// device times with the steps checked, and the host's (`[host forward, device forward]`).
#[allow(clippy::too_many_arguments)]
fn step_api_rows<G: BenchGroup>(
    w: &Workload,
    gpu: &Gpu,
    o: &Options,
    kit: Option<&FloorKit>,
    c: &mut CanaryOf<G>,
    plan_inputs: &DevicePlanInputs<'_>,
    inputs: &DeviceInputs,
    kv: TailKvOnDevice<'_>,
) -> Result<((Stats, usize), Option<Timelines>), String> {
    let run = |c: &mut CanaryOf<G>, reps, forward, lines| {
        step_api_run(w, gpu, c, plan_inputs, inputs, kv, reps, forward, lines)
    };
    let (probe, _) = run(c, 3, Forward::Nothing, 0)?;
    let reps = within_budget(o.step_reps, median(&probe), 20);
    let (times, _) = run(c, reps, Forward::Nothing, 0)?;
    let mut checked = probe.len() + times.len();
    let eager = stats_of(&times);
    let host = match kit {
        Some(k) => {
            let forward = Duration::from_secs_f64((2.0 * eager.median_us).max(100.0) * 1e-6);
            let steps = within_budget(o.timeline_steps, 3.0 * eager.median_us, 20);
            let (t, on_host) = run(c, steps, Forward::Host(forward), 6)?;
            checked += t.len();
            let (t, on_device) = run(c, steps, Forward::Device(&k.floors, forward), 6)?;
            checked += t.len();
            Some([on_host, on_device])
        }
        None => None,
    };
    Ok(((eager, checked), host))
}

/// The engine's inputs of a [`StepGraph`] run, owned by the graph.
struct GraphInputs {
    table: DeviceReqToToken,
    batch: DeviceBatch<Uc>,
    write: DeviceInputs,
    k_pool: DeviceBuffer<u8>,
    v_pool: DeviceBuffer<u8>,
}

/// The library's whole-step graph ([`StepGraph`]) of `w` in `mode`: a fresh canary and inputs,
/// the setup step run eagerly, then the step API captured (plan, head verify, write, tail
/// verify with the report's copies) and replayed `reps` times, each replay timed by events
/// around it and every replay's report taken (at most one unread while the next replays) and
/// checked clean with the step's numbers. Returns the timing and the replays checked.
fn step_graph_run<G: BenchGroup>(
    gpu: &Gpu,
    w: &Workload,
    mode: Mode,
    reps: usize,
) -> Result<(Stats, usize), String> {
    gpu.make_current().map_err(ctx("context"))?;
    let mut canary = G::canary(gpu, w)?;
    let upload = |batch: &kv_canary::Batch, inputs: &WriteInputs<Uc>| {
        let b = w.shape.device_batch(gpu)?;
        b.upload(batch)?;
        let i = canary.try_write_inputs()?;
        i.upload(inputs)?;
        Ok::<_, Error>((b, i))
    };
    let table = DeviceReqToToken::from_host(gpu, &w.table).map_err(ctx("table"))?;
    let k_pool = floors::filled(w.kv_pool_bytes(), 0x5A).map_err(ctx("K pool"))?;
    let v_pool = floors::filled(w.kv_pool_bytes(), 0xA5).map_err(ctx("V pool"))?;
    let setup = match &w.setup {
        Some((b, i)) => Some(upload(b, i).map_err(ctx("setup inputs"))?),
        None => None,
    };
    let (batch, write) = upload(&w.step.0, &w.step.1).map_err(ctx("step inputs"))?;
    if let Some((b, i)) = &setup {
        let kv = tail_kv(w, mode, &k_pool, &v_pool)?;
        let r = step_and_wait(&mut canary, &cuda::PlanInputs::full(b, &table), i, kv)?;
        check_report(w, &r, "setup")?;
    }
    let (layout, params) = w.kv_layout();
    let (k_token, v_token) = w.token_layouts();
    let inputs = GraphInputs {
        table,
        batch,
        write,
        k_pool,
        v_pool,
    };
    let mut graph = StepGraph::new(canary, inputs, move |c, k: &GraphInputs| {
        let one = |pool, token| -> Result<DeviceRealKv<'_>, Error> {
            let s = DeviceRealKvSource::new(pool, layout, params)?.with_token_layout(token)?;
            Ok(DeviceRealKv::new(mode.hash_mode(), [s]))
        };
        let kv = KvPair {
            k: one(&k.k_pool, k_token)?,
            v: if mode.halves() == 2 {
                one(&k.v_pool, v_token)?
            } else {
                DeviceRealKv::NONE
            },
        };
        c.plan_verify_head_and_write(&cuda::PlanInputs::full(&k.batch, &k.table), &k.write)?
            .verify_tail(G::sources(kv))
    });
    graph.capture().map_err(ctx("step graph capture"))?;
    let mut checked = 0;
    // Takes (waiting) the oldest reports until a replay may be queued; checks each.
    let mut take = |g: &mut StepGraph<Uc, Uc, Uc, Uc, Uc, G, GraphInputs>, keep: u64| {
        while g.unread() > keep {
            let (_, r) = g
                .wait()
                .map_err(ctx("step graph wait"))?
                .ok_or("step graph: an unread replay had no report")?;
            check_report(w, &r, "step graph")?;
            checked += 1;
        }
        Ok::<_, String>(())
    };
    for _ in 0..5 {
        take(&mut graph, 1)?;
        graph.replay().map_err(ctx("step graph replay"))?;
    }
    let events: Vec<_> = (0..reps)
        .map(|_| Ok((cuda::Event::new(gpu)?, cuda::Event::new(gpu)?)))
        .collect::<Result<_, Error>>()
        .map_err(ctx("events"))?;
    for (start, stop) in &events {
        take(&mut graph, 1)?;
        graph.stream().record(start).map_err(ctx("record"))?;
        graph.replay().map_err(ctx("step graph replay"))?;
        graph.stream().record(stop).map_err(ctx("record"))?;
    }
    take(&mut graph, 0)?;
    let times: Vec<f64> = events
        .iter()
        .map(|(a, b)| b.elapsed_ms(a).map(|ms| f64::from(ms) * 1e3))
        .collect::<Result<_, Error>>()
        .map_err(ctx("elapsed"))?;
    Ok((stats_of(&times), checked))
}

/// Median, p10 and p90 of `v`.
fn stats_of(v: &[f64]) -> Stats {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Stats {
        median_us: at(0.5),
        p10_us: at(0.1),
        p90_us: at(0.9),
    }
}

/// The devices of a multi-device run lined up around each capture: a capture runs in global
/// mode, during which no other thread may allocate or transfer, so every thread stops at a
/// point before the captures, captures in turn (one lock), and meets the others again before
/// the replays, which then run on every device at once. Every thread passes the same number of
/// points; one that fails passes its remaining points when dropped, so that the others are not
/// left waiting for it.
pub struct Lineup<'b> {
    barrier: &'b Barrier,
    capture: &'b Mutex<()>,
    left: Cell<usize>,
}

/// Barrier points of one row ([`Lineup`]): before the captures, after them.
pub const LINEUP_POINTS_PER_ROW: usize = 2;

impl<'b> Lineup<'b> {
    /// `points` points on `barrier`, captures one at a time under `capture`.
    pub fn new(barrier: &'b Barrier, capture: &'b Mutex<()>, points: usize) -> Self {
        Lineup {
            barrier,
            capture,
            left: Cell::new(points),
        }
    }

    /// Waits for every device at the next point.
    fn wait(&self) {
        if self.left.get() > 0 {
            self.left.set(self.left.get() - 1);
            self.barrier.wait();
        }
    }
}

impl Drop for Lineup<'_> {
    fn drop(&mut self) {
        while self.left.get() > 0 {
            self.wait();
        }
    }
}

/// The buffers and settings of one step's raw launches: the canary's own buffers, tags and
/// shape, the step's inputs, the tail fingerprints.
pub struct StepParts<'a> {
    shape: &'a UncheckedShape,
    plan_inputs: DevicePlanInputs<'a>,
    verify: &'a VerifyPlan<Uc, Device>,
    write: &'a WritePlan<Uc, Device>,
    inputs: &'a DeviceInputs,
    /// Head K, head V, tail K, tail V.
    buffers: [&'a CanaryBuffer<Uc, Device>; 4],
    counters: [&'a HealthCounters<Device>; 4],
    /// The verify launches' settings, in `buffers` order: the tail's marked as following the
    /// head stage, as the step API marks them.
    settings: [DeviceSettings<'a>; 4],
    /// The write launches' settings, marked as the step API marks them
    /// (`plan_verify_head_and_write`, `verify_tail`).
    write_settings: [DeviceSettings<'a>; 4],
    ring: &'a ViolationRing<Uc, Device>,
    halves: usize,
    /// K and V of each stage as one pair launch (the step API's choice, from the tuning).
    pairs: bool,
    /// The plan and the head verify as one launch (`cuda::plan_verify_head`'s choice, from
    /// the tuning: the lean plan kernel, which `PlanKernel::Auto` takes for at most 1024 rows;
    /// the benchmark's plans have no LUT or expected-token pool).
    fused_head: bool,
    /// The head writes in the tail writes' launch (`KernelTuning::defer_head_writes`).
    defer_head_writes: bool,
}

impl<'a> StepParts<'a> {
    fn new(
        c: &'a DeviceCanary,
        plan_inputs: DevicePlanInputs<'a>,
        inputs: &'a DeviceInputs,
        kv: TailKvOnDevice<'a>,
        mode: Mode,
    ) -> Result<Self, String> {
        let tags = c.tags();
        let buffer = |i: usize| c.buffer(tags[i]).ok_or("a canary buffer is missing");
        let counter = |i: usize| c.counters(tags[i]).ok_or("a counter pair is missing");
        let (verify, write) = c.plans();
        let fold = [DeviceRealKv::NONE, DeviceRealKv::NONE, kv.k, kv.v];
        let tuning = c.backend().gpu().kernel_tuning();
        let fused_head = tuning.plan_verify_fusion
            && matches!(tuning.plan_kernel, PlanKernel::Auto | PlanKernel::Lean)
            && kv_canary::Capacity::get(c.shape().write_req_capacity()) <= 1024;
        // The head writes with the tail writes, in one launch behind the tail
        // verify (`cuda::write_ends`), as the step API queues them under
        // `KernelTuning::defer_head_writes`.
        let defer_head_writes = tuning.defer_head_writes;
        // Whether the tail verify may load its first plan columns early: some launch of the
        // head stage lies between the plan and it (not when the plan is fused with the head
        // verify and the head writes wait for the tail).
        let tail_columns_early = !(fused_head && defer_head_writes);
        // The tail verifies marked as following the head stage, as the step API marks them.
        let settings = [0, 1, 2, 3].map(|i| {
            let s = DeviceSettings::new(tags[i]).with_real_kv(fold[i]);
            if i < 2 || !tail_columns_early {
                s
            } else {
                s.following_head_stage()
            }
        });
        Ok(StepParts {
            shape: c.shape(),
            plan_inputs,
            verify,
            write,
            inputs,
            buffers: [buffer(0)?, buffer(1)?, buffer(2)?, buffer(3)?],
            counters: [counter(0)?, counter(1)?, counter(2)?, counter(3)?],
            settings,
            // As the step API marks them: the tail writes, and the head writes unless they
            // follow the fused plan launch (whose write plan they would read early).
            write_settings: [0, 1, 2, 3].map(|i| {
                if i < 2 && fused_head && !defer_head_writes {
                    settings[i]
                } else {
                    settings[i].following_verify()
                }
            }),
            ring: c.ring(),
            halves: mode.halves(),
            pairs: mode.halves() == 2 && c.backend().gpu().kernel_tuning().pair_launches,
            fused_head,
            defer_head_writes,
        })
    }

    /// The launches of one step, in queue order.
    fn launch_names(&self) -> Vec<&'static str> {
        let all: [&[&str]; 4] = [
            &["HEAD_K verify", "HEAD_V verify"],
            &["HEAD_K write", "HEAD_V write"],
            &["TAIL_K verify", "TAIL_V verify"],
            &["TAIL_K write", "TAIL_V write"],
        ];
        let mut names = vec![match (self.fused_head, self.halves) {
            (false, _) => "plan",
            (true, 2) => "plan + HEAD verify (K+V)",
            (true, _) => "plan + HEAD_K verify",
        }];
        let pairs = [
            "HEAD verify (K+V pair)",
            "HEAD write (K+V pair)",
            "TAIL verify (K+V pair)",
            "TAIL write (K+V pair)",
        ];
        for (n, (pair, halves)) in pairs.into_iter().zip(all).enumerate() {
            if n == 0 && self.fused_head || n == 1 && self.defer_head_writes {
                continue;
            }
            if n == 3 && self.defer_head_writes {
                names.push(if self.halves == 2 {
                    "TAIL + HEAD write (K+V)"
                } else {
                    "TAIL_K + HEAD_K write"
                });
                continue;
            }
            if self.pairs {
                names.push(pair);
            } else {
                names.extend(&halves[..self.halves]);
            }
        }
        names
    }
}

/// The launches `--elide` leaves out (indices in queue order), set once before any step.
static ELIDED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();

/// Sets the launches [`queue_step`] leaves out (`--elide`); a measurement of what each launch
/// of a step costs. The plan and the writes rewrite what the eager runs already wrote (the same
/// inputs every replay), so a graph without them still verifies clean.
pub fn set_elided(launches: &[usize]) {
    let _ = ELIDED.set(launches.to_vec());
}

fn elided(launch: usize) -> bool {
    ELIDED.get().is_some_and(|e| e.contains(&launch))
}

/// Queues one step's launches on `on` (a stream, or a capture) in the step API's order, but
/// those `--elide` names; `after(i)` runs after launch `i`, queued or not (events between eager
/// launches).
fn queue_step<'a, Q: Queue<'a> + ?Sized>(
    on: &Q,
    p: &StepParts<'a>,
    mut after: impl FnMut(usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut i = 0;
    let mut next = |f: &dyn Fn() -> Result<(), Error>| {
        let idx = i;
        i += 1;
        if !elided(idx) {
            f()?;
        }
        after(idx)
    };
    if p.fused_head {
        // The plan with the head verify (`plan_verify_head_and_write`'s first launch).
        next(&|| {
            if p.halves == 2 {
                cuda::plan_verify_head_pair(
                    on,
                    p.shape,
                    &p.plan_inputs,
                    p.verify,
                    p.write,
                    (&p.settings[0], &p.settings[1]),
                    (p.buffers[0], p.buffers[1]),
                    p.ring,
                    (p.counters[0], p.counters[1]),
                )
            } else {
                cuda::plan_verify_head(
                    on,
                    p.shape,
                    &p.plan_inputs,
                    p.verify,
                    p.write,
                    &p.settings[0],
                    p.buffers[0],
                    p.ring,
                    p.counters[0],
                )
            }
        })?;
    } else {
        next(&|| cuda::plan(on, p.shape, &p.plan_inputs, p.verify, p.write))?;
    }
    for end in [0, 2] {
        let (k, v) = (end, end + 1);
        let verified = end == 0 && p.fused_head;
        if p.defer_head_writes {
            if verified {
                continue; // the head verify ran in the plan's launch; the writes go later
            }
            if p.pairs {
                next(&|| {
                    cuda::verify_pair(
                        on,
                        p.shape,
                        p.verify,
                        TokenCheckOff,
                        (&p.settings[k], &p.settings[v]),
                        (p.buffers[k], p.buffers[v]),
                        p.ring,
                        (p.counters[k], p.counters[v]),
                    )
                })?;
            } else {
                for b in end..end + p.halves {
                    next(&|| {
                        cuda::verify(
                            on,
                            p.shape,
                            p.verify,
                            TokenCheckOff,
                            &p.settings[b],
                            p.buffers[b],
                            p.ring,
                            p.counters[b],
                        )
                    })?;
                }
            }
            if end == 0 {
                continue; // the head writes go with the tail writes
            }
            let w = &p.write_settings;
            next(&|| {
                if p.halves == 2 {
                    cuda::write_ends(
                        on,
                        p.shape,
                        p.write,
                        p.inputs,
                        [&w[2], &w[3], &w[0], &w[1]],
                        [p.buffers[2], p.buffers[3], p.buffers[0], p.buffers[1]],
                        p.ring,
                        [p.counters[2], p.counters[3], p.counters[0], p.counters[1]],
                    )
                } else {
                    cuda::write_ends_k(
                        on,
                        p.shape,
                        p.write,
                        p.inputs,
                        [&w[2], &w[0]],
                        [p.buffers[2], p.buffers[0]],
                        p.ring,
                        [p.counters[2], p.counters[0]],
                    )
                }
            })?;
            continue;
        }
        if p.pairs {
            // The step API's launches: one pair launch per stage and end.
            if !verified {
                next(&|| {
                    cuda::verify_pair(
                        on,
                        p.shape,
                        p.verify,
                        TokenCheckOff,
                        (&p.settings[k], &p.settings[v]),
                        (p.buffers[k], p.buffers[v]),
                        p.ring,
                        (p.counters[k], p.counters[v]),
                    )
                })?;
            }
            next(&|| {
                cuda::write_pair(
                    on,
                    p.shape,
                    p.write,
                    p.inputs,
                    (&p.write_settings[k], &p.write_settings[v]),
                    (p.buffers[k], p.buffers[v]),
                    p.ring,
                    (p.counters[k], p.counters[v]),
                )
            })?;
            continue;
        }
        for b in (end..end + p.halves).filter(|_| !verified) {
            next(&|| {
                cuda::verify(
                    on,
                    p.shape,
                    p.verify,
                    TokenCheckOff,
                    &p.settings[b],
                    p.buffers[b],
                    p.ring,
                    p.counters[b],
                )
            })?;
        }
        for b in end..end + p.halves {
            next(&|| {
                cuda::write(
                    on,
                    p.shape,
                    p.write,
                    p.inputs,
                    &p.write_settings[b],
                    p.buffers[b],
                    p.ring,
                    p.counters[b],
                )
            })?;
        }
    }
    Ok(())
}

/// Captures one step's launches into a graph on `stream` and times its replays (idle, and
/// queued behind a spin kernel when `floors` is given). The one place to switch to the step
/// API's own graph once branch `streams` lands.
fn capture_step(
    stream: &mut Stream,
    parts: &StepParts<'_>,
    o: &Options,
    floors: Option<&Floors>,
    lineup: Option<&Lineup<'_>>,
) -> Result<(Stats, Option<Stats>, usize), String> {
    if let Some(l) = lineup {
        l.wait();
    }
    let graph = {
        let _alone = lineup.map(|l| l.capture.lock().unwrap_or_else(|e| e.into_inner()));
        stream.capture(|c| queue_step(c, parts, |_| Ok(())))
    };
    if let Some(l) = lineup {
        l.wait();
    }
    let graph = graph.map_err(ctx("capture"))?;
    let warmup = 5;
    let probe = timing::time(graph.stream(), Lead::Idle, 1, 3, || graph.replay())
        .map_err(ctx("graph replay"))?;
    let reps = within_budget(o.reps, probe.median_us, 20);
    let idle = timing::time(graph.stream(), Lead::Idle, warmup, reps, || graph.replay())
        .map_err(ctx("graph replay"))?;
    let mut runs = 4 + warmup + reps;
    let queued = match floors {
        Some(f) => {
            runs += warmup + reps;
            Some(
                timing::time(graph.stream(), Lead::Spin(f), warmup, reps, || {
                    graph.replay()
                })
                .map_err(ctx("queued graph replay"))?,
            )
        }
        None => None,
    };
    graph.stream().status().map_err(ctx("graph status"))?;
    Ok((idle, queued, runs))
}

/// Repetitions of a timing: `reps`, fewer for a step so slow that they would take over about a
/// second and a half (at least `least`), so that the whole run stays within its few minutes.
pub fn within_budget(reps: usize, step_us: f64, least: usize) -> usize {
    let affordable = (1.5e6 / step_us.max(1.0)) as usize;
    reps.min(affordable.max(least))
}

/// (launch, median µs) of each launch of a step.
type LaunchTimes = Vec<(&'static str, f64)>;

/// Eager raw launches, events between them: the median of each launch over `reps` steps.
fn time_launches(
    gpu: &Gpu,
    parts: &StepParts<'_>,
    reps: usize,
) -> Result<(LaunchTimes, usize), String> {
    let stream = Stream::new(gpu).map_err(ctx("stream"))?;
    let names = parts.launch_names();
    let events: Vec<Vec<cuda::Event>> = (0..reps)
        .map(|_| (0..=names.len()).map(|_| cuda::Event::new(gpu)).collect())
        .collect::<Result<_, Error>>()
        .map_err(ctx("events"))?;
    for ev in &events {
        stream.record(&ev[0]).map_err(ctx("record"))?;
        queue_step(&stream, parts, |i| stream.record(&ev[i + 1])).map_err(ctx("raw launches"))?;
    }
    stream.status().map_err(ctx("raw launch status"))?;
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let t: Vec<f64> = events
            .iter()
            .map(|ev| ev[i + 1].elapsed_ms(&ev[i]).map(|ms| f64::from(ms) * 1e3))
            .collect::<Result<_, Error>>()
            .map_err(ctx("elapsed"))?;
        out.push((*name, median(&t)));
    }
    Ok((out, reps))
}

/// After raw launches and replays: the ring is still empty (nothing recorded by any of them),
/// the plan is enabled over exactly the step's entries.
fn check_raw(w: &Workload, parts: &StepParts<'_>, runs: usize) -> Result<(), String> {
    let ring = parts.ring.to_host().map_err(ctx("ring"))?;
    let plan = parts.verify.to_host().map_err(ctx("verify plan"))?;
    if ring.write_index() != 0
        || !plan.is_enabled()
        || plan.num_valid() as usize != w.verify_entries
    {
        return Err(format!(
            "{}: after {runs} raw steps the ring holds {} rows, the plan is enabled {} over {} \
             entries (expected {})",
            w.kind.name,
            ring.write_index(),
            plan.is_enabled(),
            plan.num_valid(),
            w.verify_entries
        ));
    }
    Ok(())
}

/// The floor of `mode` on this workload: the gather floor over the plan's own entries and the
/// head K canary buffer, the chain floor of the longest request, the bytes at copy bandwidth.
fn measure_floor(
    gpu: &Gpu,
    w: &Workload,
    mode: Mode,
    parts: &StepParts<'_>,
    pools: (&DeviceBuffer<u8>, &DeviceBuffer<u8>),
    kit: &FloorKit,
) -> Result<Floor, String> {
    let stream = Stream::new(gpu).map_err(ctx("stream"))?;
    let host = parts.verify.to_host().map_err(ctx("verify plan"))?;
    let n = w.verify_entries;
    let upload = |v: &[i64]| DeviceBuffer::from_slice(v).map_err(|e| format!("upload: {e}"));
    let (slots, prevs) = if n == 0 {
        (upload(&[0])?, upload(&[-1])?)
    } else {
        (
            upload(&host.slot_indices()[..n])?,
            upload(&host.prev_slot_indices()[..n])?,
        )
    };
    let sink = upload(&[0])?;
    let halves = mode.halves();
    let pools = [pools.0, pools.1];
    // One stage's floor: halves `first..first + halves` of the step's buffers, with their pools
    // when `with_kv` (a PARTIAL tail).
    let stage = |first: usize, with_kv: bool| -> Result<f64, String> {
        let list: Vec<StageHalf<'_>> = (0..halves)
            .map(|h| StageHalf {
                buf: parts.buffers[first + h].device_bytes(),
                kv: with_kv.then_some(pools[h]),
            })
            .collect();
        // The floor reads one random 16-byte sector an entry at strip strides (within the
        // pool in every layout: a paged pool holds at least `slots` tokens of 2 KB).
        let floor = StageFloor::new(
            &kit.floors,
            &slots,
            &prevs,
            n,
            &list,
            32,
            KV_ROW_BYTES,
            &sink,
        )
        .map_err(ctx("stage floor"))?;
        let t = timing::time(&stream, Lead::Idle, 3, 30, || floor.queue(&stream))
            .map_err(ctx("stage floor"))?;
        Ok(t.median_us)
    };
    let head_us = stage(0, false)?;
    let tail_us = stage(2, mode == Mode::KvPartial || mode == Mode::KOnlyPartial)?;
    let chain = timing::time(&stream, Lead::Idle, 3, 30, || {
        kit.floors.chain(&stream, w.longest_write, &sink, true)
    })
    .map_err(ctx("chain floor"))?;
    let bytes = w.traffic_bytes(mode);
    Ok(Floor {
        head_us,
        tail_us,
        bytes,
        traffic_us: bytes as f64 / kit.copy_bytes_per_us,
        chain_us: chain.median_us,
    })
}

/// Every mode of `w` on `gpu`. `kit`: the full run (floors, queued replays, per-launch times,
/// the host timeline); without it only the step API's eager steps and the graph replay (the
/// multi-device run, `lineup` lining the devices up before each replay run).
pub fn measure(
    gpu: &Gpu,
    w: &Workload,
    o: &Options,
    kit: Option<&FloorKit>,
    lineup: Option<&Lineup<'_>>,
) -> Result<Vec<RowResult>, String> {
    let mut d = DeviceWorkload::new(gpu, w)?;
    let mut rows = Vec::new();
    for mode in [Mode::KvPartial, Mode::KOnlyPartial, Mode::KvAll] {
        let kv = tail_kv(w, mode, &d.k_pool, &d.v_pool)?;
        let plan_inputs = cuda::PlanInputs::full(&d.batch, &d.table);
        let mut checked = 0;
        // Stamp the prefixes in this mode's fingerprints (the raw launches of K only reuse
        // PARTIAL's on the FULL canary's K halves; the K-only canary has its own).
        if let Some((batch, inputs)) = &d.setup {
            let setup = cuda::PlanInputs::full(batch, &d.table);
            let r = if mode == Mode::KOnlyPartial {
                step_and_wait(&mut d.k_only, &setup, inputs, kv)?
            } else {
                step_and_wait(&mut d.canary, &setup, inputs, kv)?
            };
            check_report(w, &r, "setup")?;
        }
        let (eager, host) = if mode == Mode::KOnlyPartial {
            step_api_rows(w, gpu, o, kit, &mut d.k_only, &plan_inputs, &d.inputs, kv)?
        } else {
            step_api_rows(w, gpu, o, kit, &mut d.canary, &plan_inputs, &d.inputs, kv)?
        };
        checked += eager.1;
        let step_api = Some(eager.0);
        d.canary.backend().synchronize().map_err(ctx("sync"))?;
        d.k_only.backend().synchronize().map_err(ctx("sync"))?;
        let parts = StepParts::new(&d.canary, plan_inputs, &d.inputs, kv, mode)?;
        let (launches, raw_runs) = match kit {
            Some(_) => {
                let reps = step_api.map_or(o.launch_reps, |s| {
                    within_budget(o.launch_reps, s.median_us, 5)
                });
                time_launches(gpu, &parts, reps)?
            }
            None => (Vec::new(), 0),
        };
        let mut graph_stream = Stream::new(gpu).map_err(ctx("stream"))?;
        let (graph, queued, graph_runs) =
            capture_step(&mut graph_stream, &parts, o, kit.map(|k| &k.floors), lineup)?;
        check_raw(w, &parts, raw_runs + graph_runs)?;
        checked += raw_runs + graph_runs;
        let floor = match kit {
            Some(k) => Some(measure_floor(
                gpu,
                w,
                mode,
                &parts,
                (&d.k_pool, &d.v_pool),
                k,
            )?),
            None => None,
        };
        let step_graph = if kit.is_some() {
            let reps = within_budget(o.reps, graph.median_us, 20);
            let (t, n) = if mode == Mode::KOnlyPartial {
                step_graph_run::<KOnly<Full>>(gpu, w, mode, reps)?
            } else {
                step_graph_run::<Full>(gpu, w, mode, reps)?
            };
            checked += n;
            Some(t)
        } else {
            None
        };
        rows.push(RowResult {
            step: w.kind.name,
            mode,
            entries: w.verify_entries,
            tokens: w.write_tokens,
            graph,
            queued,
            step_graph,
            step_api,
            launches,
            host,
            floor,
            checked_steps: checked,
        });
    }
    // One more step through the step API after every replay: still clean.
    let plan_inputs = cuda::PlanInputs::full(&d.batch, &d.table);
    let kv = tail_kv(w, Mode::KvAll, &d.k_pool, &d.v_pool)?;
    let r = step_and_wait(&mut d.canary, &plan_inputs, &d.inputs, kv)?;
    check_report(w, &r, "final step")?;
    let kv = tail_kv(w, Mode::KOnlyPartial, &d.k_pool, &d.v_pool)?;
    let r = step_and_wait(&mut d.k_only, &plan_inputs, &d.inputs, kv)?;
    check_report(w, &r, "final K-only step")?;
    Ok(rows)
}
