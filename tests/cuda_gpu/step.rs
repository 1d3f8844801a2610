//! The step API on the GPU: one `step::Canary` on the CPU and one on a CUDA stream run the same
//! steps (random decode and prefill batches, real-KV folds, tampered records, plans over the
//! verify capacity), and every report must agree.

use crate::rng::Rng;
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{
    self, DeviceRealKv, DeviceRealKvSource, DeviceStepReport, Event, Gpu, PendingDeviceReport,
    Stream,
};
use kv_canary::step::{Canary, GroupKind, KvPair, StepReport, TailKv};
use kv_canary::Capacity;
use kv_canary::{
    Batch, CanarySlot, Cap, HealthCounters, LaunchTag, RealKv, RealKvHashMode, RealKvParams,
    RealKvSource, RealKvSources, ReqToToken, RowLayout, Shape, Violation, WriteInputsMut,
};
use kv_canary_testkit::floors::Floors;

/// Request rows (row 0 is the padding row) and positions per row.
pub const ROWS: usize = 8;
pub const WIDTH: usize = 32;
/// Slots: row r, position p is slot r * WIDTH + p + 1; slot 0 stays the padding slot.
pub const SLOTS: usize = ROWS * WIDTH + 1;
/// Bytes of one slot's K or V strip.
pub const STRIP: usize = 16;

pub type Spec = Shape<Cap<48>, Cap<ROWS>, Cap<64>>;

pub fn slot(row: usize, pos: usize) -> i64 {
    (row * WIDTH + pos + 1) as i64
}

pub fn token(row: usize, pos: usize) -> i64 {
    (1000 * row + pos) as i64
}

/// One step's batch as the step and view tests draw it. Each request row 1.. of `cached` (the
/// tokens it holds) is active with a 60 % chance; an active row holding nothing, or with a 15 %
/// chance, starts a new prefill of 1-8 tokens, else it decodes one token. A row holding `width`
/// tokens starts over when `recycle`, else stays idle. Advances `cached`.
pub fn draw_rows(rng: &mut Rng, cached: &mut [usize], width: usize, recycle: bool) -> DrawnRows {
    let (mut rows, mut tokens) = (Vec::new(), Vec::new());
    for (row, cached) in cached.iter_mut().enumerate().skip(1) {
        if recycle && *cached >= width {
            *cached = 0;
        }
        if !rng.chance(60) || *cached >= width {
            continue;
        }
        let (prefix, extend) = if *cached == 0 || rng.chance(15) {
            (0, 1 + rng.below(8) as usize)
        } else {
            (*cached, 1)
        };
        let extend = extend.min(width - prefix);
        tokens.extend((prefix..prefix + extend).map(|pos| (row, pos)));
        rows.push((row, prefix, extend));
        *cached = prefix + extend;
    }
    DrawnRows { rows, tokens }
}

/// What [`draw_rows`] drew, in batch order.
pub struct DrawnRows {
    /// `(row, prefix, extend)` per active row.
    pub rows: Vec<(usize, usize, usize)>,
    /// `(row, position)` per token written.
    pub tokens: Vec<(usize, usize)>,
}

impl DrawnRows {
    /// The rows as the plan's batch.
    pub fn batch(&self) -> Batch {
        self.rows
            .iter()
            .map(|&(row, prefix, extend)| kv_canary::BatchRow {
                req_pool_index: row as i64,
                prefix_len: prefix as i64,
                extend_len: extend as i64,
            })
            .collect()
    }

    /// `(slot, token, position)` per token written: `slot` is the test's slot numbering, the
    /// token [`token`].
    pub fn written(&self, slot: fn(usize, usize) -> i64) -> Vec<(i64, i64, i64)> {
        self.tokens
            .iter()
            .map(|&(row, pos)| (slot(row, pos), token(row, pos), pos as i64))
            .collect()
    }
}

/// Fills the write inputs with `written` (`(slot, token, position)` per entry, from the
/// first) and pads the rest (token and position 0, slot -1: skipped).
pub fn fill_write_inputs(p: WriteInputsMut<'_>, written: &[(i64, i64, i64)]) {
    p.input_ids.fill(0);
    p.positions.fill(0);
    p.out_cache_loc.fill(-1);
    for (i, &(s, t, pos)) in written.iter().enumerate() {
        (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (s, t, pos);
    }
}

/// The forward pass's KV bytes of `tokens` (slot, token id, position) in the host pools: the
/// slot's K strip holds the token and the position, its V strip their complements.
pub fn stamp_kv(k: &mut [u8], v: &mut [u8], tokens: &[(i64, i64, i64)]) {
    for &(s, t, pos) in tokens {
        let at = s as usize * STRIP;
        k[at..at + 8].copy_from_slice(&t.to_le_bytes());
        k[at + 8..at + 16].copy_from_slice(&pos.to_le_bytes());
        v[at..at + 8].copy_from_slice(&(!t).to_le_bytes());
        v[at + 8..at + 16].copy_from_slice(&(!pos).to_le_bytes());
    }
}

/// Every canary buffer of the device canary, downloaded, equals the CPU canary's; `after`
/// ends the message (`" after 60 steps"`, or empty).
pub fn same_canaries<V, W, E, S, R, G>(
    cpu: &Canary<V, W, E, S, R, G>,
    dev: &Canary<V, W, E, S, R, G, Stream>,
    after: &str,
) -> Result<(), String>
where
    V: Capacity,
    W: Capacity,
    E: Capacity,
    S: Capacity,
    R: Capacity,
    G: GroupKind,
{
    for tag in cpu.tags() {
        let host = cpu.buffer(tag).ok_or("buffer")?;
        let device = dev
            .buffer(tag)
            .ok_or("buffer")?
            .to_host()
            .map_err(fail("download"))?;
        ensure!(host == &device, "{tag:?}: canary bytes differ{after}");
    }
    Ok(())
}

/// The violations as a sorted list (the device records rows of different requests in no fixed
/// order).
pub fn sorted(rows: &[Violation]) -> Vec<String> {
    let mut rows: Vec<String> = rows.iter().map(|v| format!("{v:?}")).collect();
    rows.sort();
    rows
}

/// The host fingerprint of one half: ALL mode over its strips.
pub fn host_kv(bytes: &[u8], params: RealKvParams) -> Result<RealKv<'_>, String> {
    let src = RealKvSource::new(bytes, STRIP, params).map_err(fail("source"))?;
    Ok(RealKv::new(
        RealKvHashMode::All,
        RealKvSources::from_array([src]),
    ))
}

/// The device fingerprint of one half: the same strips in device memory.
pub fn dev_kv(
    bytes: &DeviceBuffer<u8>,
    layout: RowLayout,
    params: RealKvParams,
) -> Result<DeviceRealKv<'_>, String> {
    let src = DeviceRealKvSource::new(bytes, layout, params).map_err(fail("source"))?;
    Ok(DeviceRealKv::new(RealKvHashMode::All, [src]))
}

/// The random steps of one [`run_against_cpu`].
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    /// The generator's seed.
    pub seed: u64,
    /// Steps to run.
    pub steps: usize,
    /// Now and then tamper a stored record (in both canaries).
    pub tamper: bool,
    /// Tamper for sure, once, at the first step that must show it (whatever the step count,
    /// e.g. the tenth of it in quick mode): a request row this step decodes with a prefix of
    /// two records or more, the plan within the verify capacity; its second-to-last prefix
    /// record goes bad, so this step's head verify reports the chain break at the last one on
    /// both backends. No generator draw is used for it, so the random steps stay the same.
    pub force_tamper: bool,
    /// Start a full request row over with a prefill (else it stays idle once full), so that
    /// long runs keep every row busy.
    pub recycle_full_rows: bool,
    /// Take each device report one step late: step N+1 is queued (plan to tail) before step
    /// N's report is taken; else each report is waited for when its step ends.
    pub late: bool,
}

/// What one [`run_against_cpu`] saw.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// Records tampered (in both canaries).
    pub tampered: usize,
    /// Steps whose report held violation rows.
    pub found: usize,
    /// Plans over the verify capacity (reported unverified on both backends).
    pub overflows: usize,
    /// Violations the device canary counted over the run.
    pub violations: u64,
}

/// CPU and GPU canaries over random steps: reports, counters and canary bytes agree.
pub fn step_api_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    let Run {
        tampered,
        found,
        overflows,
        ..
    } = run_against_cpu(
        gpu,
        Draw {
            seed: 0x0057_E9A1,
            steps: 60,
            tamper: true,
            force_tamper: false,
            recycle_full_rows: false,
            late: false,
        },
    )?;
    println!(
        "    60 steps on both backends: equal reports ({tampered} records tampered, {found} steps \
         with violations, {overflows} plans over the verify capacity reported unverified on both)"
    );
    ensure!(
        tampered > 0 && found > 0 && overflows > 0,
        "weak generator: {tampered} tampered, {found} found, {overflows} overflows"
    );
    Ok(())
}

/// The same random steps in every launch mode of the tuning: the K+V pair launches off (each
/// half its own launch, K then V) and on, programmatic dependent launches (each launch may start
/// while the kernel ahead is running, waiting for it on the device) off and on; the default (both
/// on) is what every other step test runs. Each mode agrees with the CPU, so all agree.
pub fn launch_modes_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let draw = Draw {
        seed: 0x0051_4A1E,
        steps: 40,
        tamper: true,
        force_tamper: false,
        recycle_full_rows: false,
        late: false,
    };
    for (pairs, overlap, defer) in [
        (false, false, true),
        (true, false, true),
        (false, true, true),
        (true, true, true),
        (true, true, false),
        (false, true, false),
    ] {
        let mut handle = gpu.clone();
        let mut tuning = handle.kernel_tuning();
        tuning.pair_launches = pairs;
        tuning.overlap_launches = overlap;
        tuning.defer_head_writes = defer;
        handle.set_kernel_tuning(tuning);
        let Run {
            tampered, found, ..
        } = run_against_cpu(&handle, draw)?;
        let on = |b: bool| if b { "on" } else { "off" };
        println!(
            "    pair launches {}, overlapped launches {}, deferred head writes {}: 40 steps, \
             equal reports ({tampered} records tampered, {found} steps with violations)",
            on(pairs),
            on(overlap),
            on(defer)
        );
        ensure!(
            tampered > 0 && found > 0,
            "weak generator: {tampered} tampered, {found} found"
        );
    }
    Ok(())
}

/// `Step::cancel` on both backends, with the head writes deferred (the default) and not: a
/// prefill of row 1, then a decode cancelled after its write (the device's `Cancelled` says
/// the head buffers hold the token exactly when the head writes were not deferred, and its
/// head K buffer agrees; the CPU's always stamps the head), then the same decode run whole:
/// both reports count the cancelled step once and agree (the device's head counters one
/// launch behind when its head write was deferred and so never ran), and the canaries end
/// byte-equal.
pub fn cancel_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    for defer in [true, false] {
        let mut handle = gpu.clone();
        let mut tuning = handle.kernel_tuning();
        tuning.defer_head_writes = defer;
        handle.set_kernel_tuning(tuning);
        handle.make_current().map_err(fail("context"))?;
        let shape = Spec::new();
        let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
        let stream = Stream::new(&handle).map_err(fail("stream"))?;
        let mut dev =
            Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
        let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
        let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
        let dtable = cuda::DeviceReqToToken::from_host(&handle, &table).map_err(fail("table"))?;
        let dbatch = shape.device_batch(&handle).map_err(fail("batch"))?;
        let mut inputs = cpu.write_inputs();
        let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
        let (mut k, mut v) = (vec![0u8; SLOTS * STRIP], vec![0u8; SLOTS * STRIP]);
        let cuda_err = |e: cust::error::CudaError| format!("device KV: {e}");
        let mut dk = DeviceBuffer::from_slice(&k).map_err(cuda_err)?;
        let mut dv = DeviceBuffer::from_slice(&v).map_err(cuda_err)?;
        let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
        let layout = RowLayout {
            num_rows: SLOTS,
            row_bytes: STRIP,
            row_stride_bytes: STRIP,
        };
        let (mut overflows, mut found) = (0, 0);
        // (prefix, tokens) of row 1 per step: a prefill of 3, a decode cancelled, that decode.
        for (n, (prefix, extend, cancel)) in [(0, 3, false), (3, 1, true), (3, 1, false)]
            .into_iter()
            .enumerate()
        {
            let batch = Batch::from_columns([1], [prefix as i64], [extend as i64]);
            let tokens: Vec<_> = (prefix..prefix + extend)
                .map(|p| (slot(1, p), token(1, p), p as i64))
                .collect();
            fill_write_inputs(inputs.parts_mut(), &tokens);
            dinputs.upload(&inputs).map_err(fail("inputs"))?;
            dbatch.upload(&batch).map_err(fail("batch"))?;
            let cpu_step = cpu
                .plan(&kv_canary::PlanInputs::full(&batch, &table))
                .and_then(|s| s.verify_head())
                .and_then(|s| s.write(&inputs))
                .map_err(fail("cpu step"))?;
            let dev_step = dev
                .plan(&cuda::PlanInputs::full(&dbatch, &dtable))
                .and_then(|s| s.verify_head())
                .and_then(|s| s.write(&dinputs))
                .map_err(fail("device step"))?;
            if cancel {
                let (c, d) = (cpu_step.cancel(), dev_step.cancel());
                ensure!(
                    c.stage == "written" && c.head_stamped && c.abandoned_steps == 1,
                    "CPU: {c:?}"
                );
                ensure!(
                    d.stage == "written" && d.head_stamped != defer && d.abandoned_steps == 1,
                    "device, head writes deferred {defer}: {d:?}"
                );
                dev.backend().synchronize().map_err(fail("sync"))?;
                let s = tokens[0].0 as usize;
                let stamped = |tag| -> Result<i64, String> {
                    let buf = dev.buffer(tag).ok_or("buffer")?;
                    let host = buf.to_host().map_err(fail("download"))?;
                    Ok(host.slot(s).ok_or("slot")?.token)
                };
                let (head, tail) = (
                    stamped(LaunchTag::HeadKFull)?,
                    stamped(LaunchTag::TailKFull)?,
                );
                ensure!(
                    (head == tokens[0].1) == d.head_stamped && tail == 0,
                    "device, head writes deferred {defer}: slot {s} holds token {head} in the \
                     head K buffer and {tail} in the tail's after {d:?}"
                );
                continue;
            }
            stamp_kv(&mut k, &mut v, &tokens);
            dk.copy_from(&k[..]).map_err(cuda_err)?;
            dv.copy_from(&v[..]).map_err(cuda_err)?;
            let c: StepReport = cpu_step
                .verify_tail(TailKv::new(host_kv(&k, params)?, host_kv(&v, params)?))
                .map_err(fail("cpu tail"))?;
            let d = dev_step
                .verify_tail(KvPair {
                    k: dev_kv(&dk, layout, params)?,
                    v: dev_kv(&dv, layout, params)?,
                })
                .map_err(fail("device tail"))?
                .wait()
                .map_err(fail("device report"))?;
            // A deferred head write of the cancelled step never ran on the device: its head
            // counters are one launch and one slot a half behind the CPU's, which ran it.
            let mut expected = c.clone();
            if defer && n == 2 {
                let behind = |h: HealthCounters| {
                    HealthCounters::from_parts(h.slot_run_counter() - 1, h.kernel_run_counter() - 1)
                };
                expected.head_counters = KvPair {
                    k: behind(c.head_counters.k),
                    v: behind(c.head_counters.v),
                };
            }
            compare(n, &expected, &d, &mut overflows, &mut found)?;
            let want = u64::from(n == 2);
            ensure!(
                c.abandoned_steps == want && d.unverified().abandoned_steps == want,
                "step {n}: abandoned steps CPU {}, device {d}",
                c.abandoned_steps
            );
        }
        same_canaries(&cpu, &dev, "")?;
        println!(
            "    head writes deferred {defer}: a decode cancelled after its write (device head \
             buffers {}), counted once by the next report on both, canaries equal",
            if defer { "not stamped" } else { "stamped" }
        );
    }
    Ok(())
}

/// Where the device canary of a [`run_against_cpu_on`] runs, and its forward pass.
pub enum Setup<'a> {
    /// A new blocking [`Stream`]; the forward pass uploads the KV bytes synchronously.
    Blocking,
    /// `stream`, not ordered with the legacy default stream (non-blocking or foreign): the
    /// synchronous transfers are fenced as the `cuda` ordering rules say (the canary's stream
    /// synchronised before them, the context after), and the forward pass runs on `other`: a
    /// spin, then the KV copies (`cuMemcpyHtoDAsync`), then `event`, which the canary's stream
    /// waits for (`wait_for`) before the tail verify. Without that wait the tail would fold
    /// the previous KV bytes and differ from the CPU.
    Unordered {
        /// The canary's stream.
        stream: Stream,
        /// The forward pass's stream.
        other: &'a Stream,
        /// Recorded on `other` after the KV copies.
        event: &'a Event,
        /// The spin kernel.
        floors: &'a Floors,
    },
}

/// [`run_against_cpu_on`] on a new blocking stream.
pub fn run_against_cpu(gpu: &Gpu, draw: Draw) -> Result<Run, String> {
    run_against_cpu_on(gpu, draw, Setup::Blocking)
}

/// Queues copying `host` into `device` on `stream` (the test's forward pass on another stream).
#[allow(unsafe_code)]
fn copy_async(device: &DeviceBuffer<u8>, host: &[u8], stream: &Stream) -> Result<(), String> {
    ensure!(
        device.len() == host.len(),
        "KV copy of {} bytes into {}",
        host.len(),
        device.len()
    );
    // SAFETY: `device` holds `host.len()` bytes (checked) and outlives the copy (the run waits
    // for the canary's stream, which waits for this copy, before it drops or rewrites it); the
    // driver stages the pageable `host` before returning.
    let result = unsafe {
        cust::sys::cuMemcpyHtoDAsync_v2(
            device.as_device_ptr().as_raw(),
            host.as_ptr().cast(),
            host.len(),
            stream.as_raw(),
        )
    };
    ensure!(
        result == cust::sys::CUresult::CUDA_SUCCESS,
        "cuMemcpyHtoDAsync: {result:?}"
    );
    Ok(())
}

/// One CPU and one device canary (on a stream of `gpu` as `setup` says, with its own table,
/// batch, inputs and KV pool) run the random steps of `draw`; every report, the counters and,
/// at the end, the canary bytes must agree. Makes `gpu`'s context current first (the KV pool
/// is allocated with cust directly), so any thread may call it.
pub fn run_against_cpu_on(gpu: &Gpu, draw: Draw, setup: Setup<'_>) -> Result<Run, String> {
    let Draw {
        seed,
        steps,
        tamper,
        force_tamper,
        recycle_full_rows,
        late,
    } = draw;
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
    let (stream, forward) = match setup {
        Setup::Blocking => (Stream::new(gpu).map_err(fail("stream"))?, None),
        Setup::Unordered {
            stream,
            other,
            event,
            floors,
        } => (stream, Some((other, event, floors))),
    };
    let ordered = stream.is_blocking();
    // Before a synchronous transfer: the canary's stream is done with what it overwrites.
    let fence_before = |dev: &Stream| if ordered { Ok(()) } else { dev.synchronize() };
    // After: the transfers have landed before the next launch.
    let fence_after = || if ordered { Ok(()) } else { gpu.synchronize() };
    let mut dev =
        Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let mut inputs = cpu.write_inputs();
    let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
    // The KV pool: K and V strips per slot, on the host and on the device.
    let (mut k, mut v) = (vec![0u8; SLOTS * STRIP], vec![0u8; SLOTS * STRIP]);
    let cuda_err = |e: cust::error::CudaError| format!("device KV: {e}");
    let mut dk = DeviceBuffer::from_slice(&k).map_err(cuda_err)?;
    let mut dv = DeviceBuffer::from_slice(&v).map_err(cuda_err)?;
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let layout = RowLayout {
        num_rows: SLOTS,
        row_bytes: STRIP,
        row_stride_bytes: STRIP,
    };
    let mut rng = Rng::new(seed);
    let mut cached = [0usize; ROWS];
    let (mut overflows, mut found, mut tampered) = (0, 0, 0);
    // The record the forced tamper hit (`force_tamper`), once it did.
    let mut forced: Option<usize> = None;
    // The previous step's CPU report and its device report, still pending (`late`).
    let mut unread: Option<(usize, StepReport, PendingDeviceReport)> = None;
    for step in 0..steps {
        // Rows 1..ROWS: each active with a new prefill or a decode of what it has cached.
        let drawn = draw_rows(&mut rng, &mut cached, WIDTH, recycle_full_rows);
        let tokens = drawn.written(slot);
        assert!(tokens.len() <= 64, "at most 7 rows x 8 tokens");
        let batch = drawn.batch();
        fill_write_inputs(inputs.parts_mut(), &tokens);
        fence_before(dev.backend()).map_err(fail("fence"))?;
        dinputs.upload(&inputs).map_err(fail("inputs"))?;
        dbatch.upload(&batch).map_err(fail("batch"))?;
        // Flips the token of stored record `s` in both head K buffers.
        let mut spoil = |s: usize| -> Result<(), String> {
            let tag = LaunchTag::HeadKFull;
            let host = cpu.buffer_mut(tag).ok_or("no head K buffer")?;
            let rec = host.slot(s).ok_or("slot")?;
            let bad = CanarySlot {
                token: rec.token ^ 1,
                ..rec
            };
            host.set_slot(s, bad).map_err(fail("tamper"))?;
            let dbuf = dev.buffer(tag).ok_or("no device head K buffer")?;
            let mut copy = dbuf.to_host().map_err(fail("download"))?;
            copy.set_slot(s, bad).map_err(fail("tamper"))?;
            dbuf.upload(&copy).map_err(fail("upload"))?;
            tampered += 1;
            Ok(())
        };
        // The forced tamper: a row this step decodes over two stored records or more, the
        // plan's verify entries (the prefixes) within the capacity, so the head verify checks
        // the chain link from the spoiled record to the next.
        let entries: usize = drawn.rows.iter().map(|&(_, p, _)| p).sum();
        let decoded = drawn.rows.iter().find(|&&(_, p, _)| p >= 2);
        if let (true, None, Some(&(row, prefix, _))) = (force_tamper, forced, decoded) {
            if entries <= shape.verify_capacity().get() {
                let s = slot(row, prefix - 2) as usize;
                spoil(s)?;
                forced = Some(s);
            }
        }
        // Now and then a stored record goes bad in both head K buffers (never the forced one
        // again: a second flip would mend it).
        if tamper && step > 4 && rng.chance(20) {
            let row = 1 + rng.below(ROWS as u64 - 1) as usize;
            if cached[row] > 1 {
                let s = slot(row, rng.below(cached[row] as u64 - 1) as usize) as usize;
                if forced != Some(s) {
                    spoil(s)?;
                }
            }
        }
        fence_after().map_err(fail("fence"))?;
        let cpu_step = cpu
            .plan(&kv_canary::PlanInputs::full(&batch, &table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&inputs))
            .map_err(fail("cpu step"))?;
        // The device steps rotate through the three ways to queue the head stage: the three
        // calls; the plan, then the head verify and write in one call (the head writes then
        // read ahead of their wait, behind the head verify); and all of it in one call (the
        // plan and the head verify one launch on these lean, LUT-less plans): the same report.
        let plan_inputs = cuda::PlanInputs::full(&dbatch, &dtable);
        let launches_before = cuda::launches_queued();
        let dev_step = match step % 3 {
            0 => dev
                .plan(&plan_inputs)
                .and_then(|s| s.verify_head())
                .and_then(|s| s.write(&dinputs)),
            1 => dev
                .plan(&plan_inputs)
                .and_then(|s| s.verify_head_and_write(&dinputs)),
            _ => dev.plan_verify_head_and_write(&plan_inputs, &dinputs),
        }
        .map_err(fail("device step"))?;
        // The head stage's launches: the ring clear, the plan, a verify and a write (pair
        // launches, or one a half); in one call the plan and the verify are one launch.
        let head_launches = cuda::launches_queued() - launches_before;
        let tuning = dev_step.backend().gpu().kernel_tuning();
        let per_stage = if tuning.pair_launches { 1 } else { 2 };
        // Deferred head writes are queued with the tail writes.
        let writes = if tuning.defer_head_writes {
            0
        } else {
            per_stage
        };
        let clear = 1;
        let want = if step % 3 == 2 && tuning.plan_verify_fusion {
            clear + 1 + writes
        } else {
            clear + 1 + per_stage + writes
        };
        ensure!(
            head_launches == want,
            "step {step}: the head stage queued {head_launches} launches, want {want}"
        );
        // The forward pass: this step's KV bytes.
        stamp_kv(&mut k, &mut v, &tokens);
        let dev_step = match forward {
            None => {
                dk.copy_from(&k[..]).map_err(cuda_err)?;
                dv.copy_from(&v[..]).map_err(cuda_err)?;
                dev_step
            }
            Some((other, event, floors)) => {
                floors.spin(other, 200_000).map_err(fail("spin"))?;
                copy_async(&dk, &k, other)?;
                copy_async(&dv, &v, other)?;
                other.record(event).map_err(fail("record"))?;
                dev_step
                    .backend()
                    .wait_for(event)
                    .map_err(fail("wait_for"))?;
                dev_step
            }
        };
        let c: StepReport = cpu_step
            .verify_tail(TailKv::new(host_kv(&k, params)?, host_kv(&v, params)?))
            .map_err(fail("cpu tail"))?;
        let pending = dev_step
            .verify_tail(KvPair {
                k: dev_kv(&dk, layout, params)?,
                v: dev_kv(&dv, layout, params)?,
            })
            .map_err(fail("device tail"))?;
        // Step N+1 is queued now; step N's report is read only after that.
        if let Some((n, c, d)) = unread.take() {
            let d = d.wait().map_err(fail("device report"))?;
            compare(n, &c, &d, &mut overflows, &mut found)?;
        }
        if late {
            unread = Some((step, c, pending));
        } else {
            let d = pending.wait().map_err(fail("device report"))?;
            compare(step, &c, &d, &mut overflows, &mut found)?;
        }
    }
    if let Some((n, c, d)) = unread.take() {
        let d = d.wait().map_err(fail("device report"))?;
        compare(n, &c, &d, &mut overflows, &mut found)?;
    }
    fence_before(dev.backend()).map_err(fail("fence"))?;
    same_canaries(&cpu, &dev, &format!(" after {steps} steps"))?;
    ensure!(
        dev.steps() == cpu.steps() && dev.total_violations() == cpu.total_violations(),
        "step counts differ"
    );
    Ok(Run {
        tampered,
        found,
        overflows,
        violations: dev.total_violations(),
    })
}

/// One step's CPU and device reports agree (violations as sets, dropped rows, counters, plan
/// scalars, status); counts overflows and steps with violations.
pub fn compare(
    step: usize,
    c: &StepReport,
    d: &DeviceStepReport,
    overflows: &mut usize,
    found: &mut usize,
) -> Result<(), String> {
    ensure!(
        sorted(&c.violations) == sorted(&d.violations) && c.dropped == d.dropped,
        "step {step}: CPU violations {:?} (+{} dropped), GPU {:?} (+{} dropped)",
        c.violations,
        c.dropped,
        d.violations,
        d.dropped
    );
    ensure!(
        c.head_counters == d.head_counters && c.tail_counters == d.tail_counters,
        "step {step}: counters differ: CPU {:?} {:?}, GPU {:?} {:?}",
        c.head_counters,
        c.tail_counters,
        d.head_counters,
        d.tail_counters
    );
    ensure!(
        (c.plan.enabled, c.plan.bs, c.plan.write_tokens) == (d.enabled, d.bs, d.write_tokens),
        "step {step}: plan summaries differ: CPU {:?}, GPU {d:?}",
        c.plan
    );
    // The unverified parts equal, numbers and all: an overflowed plan names the entries it
    // needed (the device plan's requested count, read back) and the capacity on both.
    ensure!(
        c.is_clean() == d.is_clean()
            && c.unverified() == d.unverified()
            && c.plan.requested_entries == d.requested_entries,
        "step {step}: CPU says {c}, GPU {d}"
    );
    *overflows += usize::from(!d.enabled);
    *found += usize::from(d.recorded() > 0);
    Ok(())
}
