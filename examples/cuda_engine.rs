//! An engine's serving loop on the GPU with the device step API: the canary on a CUDA stream,
//! reading the engine's own tensors in place, with reports taken one step late.
//!
//! The engine owns its GPU memory (cust allocations standing for its framework's tensors):
//! `req_to_token`, the batch columns and `bs`, `input_ids`, `positions`, `out_cache_loc`, and a
//! K and a V pool of one 32-byte row a token (layer 0, page size 1). The canary sees them
//! through safe borrowed views (`from_buffer`, `from_buffers`, `DeviceRealKvSource::new`), so
//! it checks the tables attention reads, not a copy. Each step runs plan and head verify (one
//! launch), write, the engine's forward pass (a stand-in that writes each new token's K and V
//! bytes), tail verify with a real-KV fold of the pools; the report of step N is taken at step
//! N+1 (`try_take`, never blocking). Two bugs are injected and caught:
//!
//! * step 12: the forward pass also writes a token's K bytes over a cached slot of a request
//!   in the batch: that step's tail verify reports the slot (`TAIL_K`);
//! * step 20: a stray write lands in the KV of an idle cached request (no step reads it): the
//!   sweep of idle cached KV at step 24 (the idle request's table row, its entries derived on
//!   the device from the engine's `req_to_token`) reports it (`SWEEP_K`).
//!
//! Then the same decode step is captured into a `StepGraph` kept in an engine struct, over the
//! engine's buffers behind views that keep them alive (`from_shared`) and a K/V pool at two
//! byte offsets of one allocation folded by the tail inside the graph, and replayed over
//! refilled batches, each replay's report taken one replay late:
//!
//! * replay 12: a token's `out_cache_loc` points into another request's cached slot: the next
//!   replay reports both requests' chains, and the engine aborts them.
//!
//! A report names slots; the engine keeps the host copies of each step's batch and write
//! inputs until its report is taken, and the library's `guard::Guard` judges it under the
//! engine's policy (per request): `step::SlotRows` maps the violation rows back to the requests
//! that verified the slots (victims: recompute) or wrote them (culprits: abort); this engine
//! aborts both. A `guard::Watchdog` checks the device canary's counters every 8 steps after 8
//! (`after_device_step`).
//!
//! Run on a machine with a CUDA GPU: `cargo run --release --features cuda --example cuda_engine`
//! (or the binary staged by `scripts/gpu-build.sh`). Without a device it says so and exits.

use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{
    self, DeviceBatch, DeviceRealKv, DeviceRealKvSource, Gpu, Landed, PendingDeviceReport,
    PendingReadback, Shared, StepGraph, Stream,
};
use kv_canary::guard::{Action, Guard, Policy, Watchdog};
use kv_canary::step::{Canary, Findings, KvPair, SlotRows};
use kv_canary::{
    Batch, BatchRow, Cap, Device, Error, Full, InputAssertOff, LaunchTag, PlanInputs,
    RealKvHashMode, RealKvParams, ReqToToken, RowLayout, Shape, WriteInputs,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Request rows (row 0 is the padding row) and positions a row.
const ROWS: usize = 8;
const WIDTH: usize = 64;
/// Slots: row r, position p is slot `r * WIDTH + p`; slot 0 (row 0) is the padding slot.
const SLOTS: usize = ROWS * WIDTH;
/// Bytes of one token's K (or V) row.
const TOKEN_BYTES: usize = 32;
/// Tokens written a step at most.
const ENTRIES: usize = 64;
/// Steps of the eager loop.
const STEPS: usize = 32;

/// Verify every cached token of a batch (at most 4 requests of 64), 8 request rows, 64 tokens
/// written a step: the canary's buffers and the engine's views all derive from this type.
type Spec = Shape<Cap<256>, Cap<ROWS>, Cap<ENTRIES>>;
type DeviceCanary = Canary<Cap<256>, Cap<ROWS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<64>, Full, Stream>;

fn slot(row: usize, pos: usize) -> i64 {
    (row * WIDTH + pos) as i64
}

/// The token at `pos` of the request in `row` (any deterministic stand-in).
fn token(row: usize, pos: usize) -> i64 {
    1000 * row as i64 + pos as i64
}

/// The engine's own GPU tensors.
struct EngineMemory {
    req_to_token: DeviceBuffer<i32>,
    /// `req_pool_indices`, `prefix_lens`, `extend_seq_lens`.
    batch: [DeviceBuffer<i64>; 3],
    bs: DeviceBuffer<i32>,
    /// `input_ids`, `positions`, `out_cache_loc`.
    write: [DeviceBuffer<i64>; 3],
    k_pool: DeviceBuffer<u8>,
    v_pool: DeviceBuffer<u8>,
}

impl EngineMemory {
    /// cust's errors are `kv_canary::Error::Cuda` through `?`.
    fn new(table: &ReqToToken) -> Result<Self, Error> {
        let column = || DeviceBuffer::from_slice(&[0i64; ENTRIES]);
        Ok(EngineMemory {
            req_to_token: DeviceBuffer::from_slice(table.as_slice())?,
            batch: [column()?, column()?, column()?],
            bs: DeviceBuffer::from_slice(&[0i32])?,
            write: [column()?, column()?, column()?],
            k_pool: DeviceBuffer::from_slice(&[0u8; SLOTS * TOKEN_BYTES])?,
            v_pool: DeviceBuffer::from_slice(&[0u8; SLOTS * TOKEN_BYTES])?,
        })
    }
}

/// The stand-in scheduler: who is in the batch and what each request has cached.
struct Scheduler {
    /// Tokens cached per row.
    cached: [usize; ROWS],
    /// Prompt and output lengths of the request in each row (0: none).
    prompt: [usize; ROWS],
    output: [usize; ROWS],
    /// Rows being served (row 4 is prefilled, then idle: its KV stays cached).
    active: Vec<usize>,
}

impl Scheduler {
    fn new() -> Self {
        let mut s = Scheduler {
            cached: [0; ROWS],
            prompt: [0; ROWS],
            output: [0; ROWS],
            active: vec![1, 2, 3, 4],
        };
        for (row, prompt, output) in [(1, 12, 14), (2, 20, 40), (3, 7, 40), (4, 16, 0)] {
            (s.prompt[row], s.output[row]) = (prompt, output);
        }
        s
    }

    /// The next batch: a prefill of each new request's prompt, a decode token for the others
    /// (rows whose request is done leave it; a new request of 9 + 30 tokens takes row 5).
    fn next(&mut self) -> Vec<(usize, usize, usize)> {
        let done: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&r| self.cached[r] >= self.prompt[r] + self.output[r] && self.cached[r] > 0)
            .collect();
        self.active.retain(|r| !done.contains(r));
        if done.contains(&1) {
            (self.prompt[5], self.output[5]) = (9, 30);
            self.active.push(5);
        }
        self.active
            .iter()
            .map(|&r| {
                let extend = if self.cached[r] == 0 {
                    self.prompt[r]
                } else {
                    1
                };
                (r, self.cached[r], extend)
            })
            .collect()
    }
}

/// What the example itself fails on: the canary's errors, or a finding it expected and missed.
type Outcome = Result<(), Box<dyn std::error::Error>>;

fn main() -> Outcome {
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(Error::NoCudaDevice { detail }) => {
            println!("cuda_engine: SKIPPED, no CUDA device ({detail})");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    gpu.make_current()?;
    println!("device: {} ({} SMs)\n", gpu.name(), gpu.sm_count());
    let host_table =
        ReqToToken::from_vec(ROWS, WIDTH, (0..(ROWS * WIDTH) as i32).collect::<Vec<_>>())?;
    let mut memory = EngineMemory::new(&host_table)?;
    eager_loop(&gpu, &mut memory, &host_table)?;
    graph_loop(&gpu, &host_table)
}

/// The eager loop over views of the engine's memory: a step per scheduler batch, the forward
/// pass between `write` and `verify_tail`, reports one step late, a sweep of idle KV.
fn eager_loop(gpu: &Gpu, memory: &mut EngineMemory, host_table: &ReqToToken) -> Outcome {
    let shape = Spec::new();
    let mut canary: DeviceCanary =
        Canary::full_on(Stream::new(gpu)?, shape, Cap::<SLOTS>, Cap::<64>)?;
    // The canary's views of the engine's tensors: made once, kept (dropping one waits for the
    // launches that read it). The KV pools are borrowed per step instead: the forward pass
    // below writes them.
    let table = cuda::DeviceReqToToken::from_buffer(gpu, &memory.req_to_token, ROWS, WIDTH)?;
    let [rpi, prefix, extend] = &memory.batch;
    let batch =
        DeviceBatch::from_buffers(gpu, Cap::<ROWS>, (rpi, prefix, extend), Some(&memory.bs))?;
    let [ids, pos, loc] = &memory.write;
    let inputs = WriteInputs::from_buffers(gpu, Cap::<ENTRIES>, ids, pos, loc)?;

    let mut scheduler = Scheduler::new();
    let mut guard = engine_guard();
    // Every 8 steps after 8: the counters advance, no step dropped, the assert on once the
    // warm-up is over (the engine marks the canary initialised after its first step).
    let mut watchdog = Watchdog::new(8, 8);
    let (mut k_host, mut v_host) = (
        vec![0u8; SLOTS * TOKEN_BYTES],
        vec![0u8; SLOTS * TOKEN_BYTES],
    );
    let mut late: Option<(usize, PendingDeviceReport, Planned)> = None;
    let (mut crate_uploads, mut readbacks, mut clean) = (0, 0, 0);
    for step in 0..STEPS {
        let rows = scheduler.next();
        // The engine's scheduler fills its own tensors for the step (here from the host, on the
        // canary's stream, through the views; a real engine's kernels write them). The canary
        // copies none of them.
        let host_batch: Batch = rows
            .iter()
            .map(|&(r, cached, ext)| BatchRow {
                req_pool_index: r as i64,
                prefix_len: cached as i64,
                extend_len: ext as i64,
            })
            .collect();
        let mut host_inputs = shape.write_inputs();
        let p = host_inputs.parts_mut();
        let tokens: Vec<(usize, usize)> = rows
            .iter()
            .flat_map(|&(r, cached, ext)| (cached..cached + ext).map(move |q| (r, q)))
            .collect();
        for (i, &(r, q)) in tokens.iter().enumerate() {
            (p.input_ids[i], p.positions[i], p.out_cache_loc[i]) =
                (token(r, q), q as i64, slot(r, q));
        }
        batch.upload_on(canary.backend(), &host_batch)?;
        inputs.upload_on(canary.backend(), &host_inputs)?;

        let before = cuda::transfers_issued();
        let step_in_flight = canary
            .plan(&cuda::PlanInputs::full(&batch, &table))?
            .verify_head()?
            .write(&inputs)?;
        // The forward pass: each new token's K and V rows land in the pools (a stand-in for the
        // attention kernels, here a synchronous copy of the pools).
        for &(r, q) in &tokens {
            let at = slot(r, q) as usize * TOKEN_BYTES;
            k_host[at..at + 8].copy_from_slice(&token(r, q).to_le_bytes());
            v_host[at..at + 8].copy_from_slice(&(!token(r, q)).to_le_bytes());
        }
        if step == 12 {
            // Bug 1: request 3's new K row also lands on request 2's cached position 4.
            let (from, to) = (slot(3, scheduler.cached[3]) as usize, slot(2, 4) as usize);
            k_host.copy_within(
                from * TOKEN_BYTES..(from + 1) * TOKEN_BYTES,
                to * TOKEN_BYTES,
            );
            println!("step {step}: BUG: a K row written over slot {to} (request 2, position 4)");
        }
        if step == 20 {
            // Bug 2: a stray write into the idle request's KV (row 4, position 9).
            k_host[slot(4, 9) as usize * TOKEN_BYTES] ^= 0x40;
            println!(
                "step {step}: BUG: a stray byte in slot {} (idle request 4)",
                slot(4, 9)
            );
        }
        memory.k_pool.copy_from(&k_host[..])?;
        memory.v_pool.copy_from(&v_host[..])?;
        let pending = step_in_flight.verify_tail(KvPair {
            k: fold(&memory.k_pool)?,
            v: fold(&memory.v_pool)?,
        })?;
        let copies = cuda::transfers_issued().since(before);
        (crate_uploads, readbacks) = (
            crate_uploads + copies.host_to_device,
            readbacks + copies.device_to_host,
        );
        for &(r, _, ext) in &rows {
            scheduler.cached[r] += ext;
        }

        // Step N-1's report, taken now that step N is queued. A request whose KV is found
        // corrupted is aborted (an engine would recompute it).
        if let Some((n, report, planned)) = late.take() {
            clean += take(&mut scheduler, n, report, &planned, host_table, &mut guard)?;
        }
        late = Some((
            step,
            pending,
            Planned {
                batch: host_batch,
                inputs: host_inputs,
            },
        ));
        if step == 0 {
            // Warm-up over (one step here): the chain-position assert stays on from now on.
            watchdog.mark_initialised(&mut canary);
        }
        // At each check (every 8 steps) the watchdog waits for the stream and reads the
        // counters back: an engine that stopped launching the canary is told so.
        if let Some(stall) = watchdog.after_device_step(&canary)? {
            return Err(format!("step {step}: the canary's watchdog: {stall}").into());
        }

        if step == 24 {
            // Request 4 is idle, its KV cached: swept between steps by naming its table row
            // and cached length in the engine's batch tensors; the canary derives the entries
            // from the engine's device req_to_token (no host mirror needed).
            // This step's report first, only to print in order: its copies are queued ahead of
            // the sweep, which empties the ring after them.
            if let Some((n, report, planned)) = late.take() {
                clean += take(&mut scheduler, n, report, &planned, host_table, &mut guard)?;
            }
            let idle = Batch::from_columns([4], [scheduler.cached[4] as i64], [0]);
            batch.upload_on(canary.backend(), &idle)?;
            let sweep = landed(canary.sweep_table_rows(
                &cuda::PlanInputs::full(&batch, &table),
                KvPair {
                    k: fold(&memory.k_pool)?,
                    v: fold(&memory.v_pool)?,
                },
            )?)?;
            println!(
                "step {step}: sweep of request 4's table row: {} idle cached slots, {} violation(s)",
                sweep.entries,
                sweep.violations.len()
            );
            print_rows(&sweep);
            let found = sweep
                .violations
                .iter()
                .any(|v| v.launch_tag() == Some(LaunchTag::SweepKFull) && v.slot == slot(4, 9));
            if !found {
                return Err("the sweep missed the idle-KV fault".into());
            }
        }
    }
    if let Some((n, report, planned)) = late.take() {
        clean += take(&mut scheduler, n, report, &planned, host_table, &mut guard)?;
    }
    println!(
        "\neager loop: {STEPS} steps, {clean} clean, {} violation rows in all; copies the canary \
         issued during its steps: {crate_uploads} host-to-device, {} device-to-host a step (the \
         report's readback into pinned memory)\n",
        canary.total_violations(),
        readbacks / STEPS as u64
    );
    Ok(())
}

/// The host copies of what a step was planned from, kept until its report is taken: what
/// `SlotRows` maps the report's violation rows back to requests with.
struct Planned {
    batch: Batch,
    inputs: WriteInputs<Cap<ENTRIES>>,
}

/// Takes step `n`'s report and aborts the requests it names; 1 for a clean step.
fn take(
    scheduler: &mut Scheduler,
    n: usize,
    report: PendingDeviceReport,
    planned: &Planned,
    host_table: &ReqToToken,
    guard: &mut Guard<usize>,
) -> Result<u32, Error> {
    let Some(rows) = take_report(n, report, planned, host_table, guard)? else {
        return Ok(1);
    };
    for row in rows {
        if scheduler.active.contains(&row) {
            println!("    -> the engine aborts request {row}");
            scheduler.active.retain(|&r| r != row);
        }
    }
    Ok(0)
}

/// The tail verify's and the sweep's fold of a pool: whole 32-byte rows, one a token.
fn fold(pool: &DeviceBuffer<u8>) -> Result<DeviceRealKv<'_>, Error> {
    fold_at(pool, 0)
}

/// [`fold`] of the pool whose row 0 lies `byte_offset` bytes into `bytes`.
fn fold_at(bytes: &DeviceBuffer<u8>, byte_offset: usize) -> Result<DeviceRealKv<'_>, Error> {
    let layout = RowLayout::dense(SLOTS, TOKEN_BYTES);
    let params = RealKvParams::from_sizes(1, TOKEN_BYTES, TOKEN_BYTES);
    let source = DeviceRealKvSource::at(bytes, byte_offset, layout, params)?;
    Ok(DeviceRealKv::new(RealKvHashMode::All, [source]))
}

/// Step `n`'s report, through [`findings`].
fn take_report(
    n: usize,
    report: PendingDeviceReport,
    planned: &Planned,
    host_table: &ReqToToken,
    guard: &mut Guard<usize>,
) -> Result<Option<Vec<usize>>, Error> {
    findings(
        &format!("step {n}"),
        &landed(report)?,
        planned,
        host_table,
        guard,
    )
}

/// Any pending readback's report (a step's, a sweep's, head findings): taken at once when its
/// copies have landed, else waited for. An engine would try again at its next step instead of
/// waiting; here the wait keeps the output in order.
fn landed<P: PendingReadback>(pending: P) -> Result<P::Report, Error> {
    match pending.try_take()? {
        Landed::Ready(report) => Ok(report),
        Landed::Pending(pending) => pending.wait(),
    }
}

/// Prints the violation rows of any report.
fn print_rows(report: &impl Findings) {
    for v in report.violations() {
        println!("    {v}");
    }
}

/// Judges `report` with the engine's `guard` and prints what it found; the requests its new
/// violations concern (the guard's verdicts: victims and culprits, each violation judged once),
/// none for an unverified step, `None` for a clean step.
fn findings(
    what: &str,
    report: &impl Findings,
    planned: &Planned,
    host_table: &ReqToToken,
    guard: &mut Guard<usize>,
) -> Result<Option<Vec<usize>>, Error> {
    let plan_inputs = PlanInputs::full(&planned.batch, host_table);
    let rows = SlotRows::new(&plan_inputs, planned.inputs.out_cache_loc())?;
    // Batch row r served the request in pool row `req_pool_indices[r]` (0: a padding row).
    let requests: Vec<Option<usize>> = (planned.batch.req_pool_indices().iter())
        .map(|&r| (r > 0).then_some(r as usize))
        .collect();
    let judgement = guard.judge(report, &rows, &requests)?;
    if report.unverified().any() {
        // The plan's entries and the verify capacity, or the steps abandoned before this one
        // (printed once per run of such steps).
        if let Some(u) = judgement.unverified {
            println!("{what}: UNVERIFIED ({u})");
        }
        return Ok(Some(Vec::new()));
    }
    if report.violations().is_empty() {
        return Ok(None);
    }
    println!(
        "{what}: {} violation(s) in its report",
        report.violations().len()
    );
    print_rows(report);
    for v in &judgement.verdicts {
        println!("    request {}: {:?} ({:?})", v.request, v.verdict, v.role);
    }
    Ok(Some(judgement.verdicts.iter().map(|v| v.request).collect()))
}

/// The engine's policy: a verdict per request for violations, unverified steps logged.
fn engine_guard() -> Guard<usize> {
    Guard::new(Policy {
        violations: Action::PerRequest,
        unverified: Action::Log,
        ..Policy::default()
    })
}

/// What a stored step graph replays over: the engine's buffers behind the canary's views of
/// them (`from_shared`: each view keeps `Arc`s of its buffers, so nothing here borrows), and the
/// KV pool (K at byte 0, V at `V_AT` of one allocation), all owned by the graph and refilled in
/// place between replays.
struct GraphInputs {
    batch: Shared<DeviceBatch<Cap<ROWS>>>,
    table: Shared<cuda::DeviceReqToToken>,
    write: Shared<WriteInputs<Cap<ENTRIES>, InputAssertOff, Device>>,
    kv_pool: Arc<DeviceBuffer<u8>>,
}

/// Where the V half starts in the graph's one KV allocation.
const V_AT: usize = SLOTS * TOKEN_BYTES;

impl GraphInputs {
    /// The engine's buffers and the views of them (cust errors come back through `?`).
    fn new(gpu: &Gpu, host_table: &ReqToToken) -> Result<Self, Error> {
        let column = || -> Result<Arc<DeviceBuffer<i64>>, Error> {
            Ok(Arc::new(DeviceBuffer::from_slice(&[0i64; ENTRIES])?))
        };
        let bs = Arc::new(DeviceBuffer::from_slice(&[0i32])?);
        let table = Arc::new(DeviceBuffer::from_slice(host_table.as_slice())?);
        Ok(GraphInputs {
            batch: DeviceBatch::from_shared(gpu, Cap, (column()?, column()?, column()?), Some(bs))?,
            table: cuda::DeviceReqToToken::from_shared(gpu, table, ROWS, WIDTH)?,
            write: WriteInputs::from_shared(gpu, Cap, column()?, column()?, column()?)?,
            kv_pool: Arc::new(DeviceBuffer::from_slice(&vec![0u8; 2 * V_AT])?),
        })
    }

    /// The tail's real-KV sources: K and V at their byte offsets of the one pool.
    fn tail_kv(&self) -> Result<KvPair<DeviceRealKv<'_>>, Error> {
        Ok(KvPair {
            k: fold_at(&self.kv_pool, 0)?,
            v: fold_at(&self.kv_pool, V_AT)?,
        })
    }
}

/// An engine struct keeping its canary's step graph (`Send + 'static`: the graph owns the
/// canary, the inputs and the step closure).
struct Engine {
    graph: StepGraph<Cap<256>, Cap<ROWS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<64>, Full, GraphInputs>,
}

/// The decode step captured once and replayed over refilled batches (three requests, one token
/// each a replay), each replay's report taken one replay late. Bug 3, at replay 12: request 1's
/// new token is written into request 2's cached slot (a wrong `out_cache_loc`); the next
/// replay's verifies report both requests' chains, and the engine aborts them.
fn graph_loop(gpu: &Gpu, host_table: &ReqToToken) -> Outcome {
    let shape = Spec::new();
    let canary: DeviceCanary = Canary::full_on(Stream::new(gpu)?, shape, Cap, Cap)?;
    let mut engine = Engine {
        graph: StepGraph::new(
            canary,
            GraphInputs::new(gpu, host_table)?,
            |canary, k: &GraphInputs| {
                canary
                    .plan(&cuda::PlanInputs::full(&k.batch, &k.table))?
                    .verify_head()?
                    .write(&k.write)?
                    // The engine's forward pass would be captured here, on the canary's stream
                    // (its kernels write the new tokens' K and V rows; this one writes none, so
                    // the pool stays zero and every fold sees the bytes the last one did).
                    .verify_tail(k.tail_kv()?)
            },
        ),
    };
    engine.graph.capture()?;
    let mut guard = engine_guard();
    let mut active = vec![1usize, 2, 3];
    let mut cached = [0usize; ROWS];
    let (mut replays, mut clean, mut aborted) = (0u64, 0u64, Vec::new());
    // Each replay's host inputs until its report is taken.
    let mut planned: HashMap<u64, Planned> = HashMap::new();
    let mut take = |n: u64,
                    report: cuda::DeviceStepReport,
                    planned: &mut HashMap<u64, Planned>,
                    active: &mut Vec<usize>|
     -> Result<(), Error> {
        let inputs = planned.remove(&n).ok_or(Error::Malformed {
            detail: format!("no host inputs kept for replay {n}"),
        })?;
        match findings(
            &format!("replay {n}"),
            &report,
            &inputs,
            host_table,
            &mut guard,
        )? {
            None => clean += 1,
            Some(rows) => {
                for row in rows {
                    if active.contains(&row) {
                        println!("    -> the engine aborts request {row}");
                        active.retain(|&r| r != row);
                        aborted.push(row);
                    }
                }
            }
        }
        Ok(())
    };
    for replay in 0..24u64 {
        let extend = if replay == 0 { 8 } else { 1 };
        let host_batch: Batch = active
            .iter()
            .map(|&r| BatchRow {
                req_pool_index: r as i64,
                prefix_len: cached[r] as i64,
                extend_len: extend,
            })
            .collect();
        let mut host_inputs = shape.write_inputs();
        let p = host_inputs.parts_mut();
        let mut i = 0;
        for &r in &active {
            for q in cached[r]..cached[r] + extend as usize {
                (p.input_ids[i], p.positions[i], p.out_cache_loc[i]) =
                    (token(r, q), q as i64, slot(r, q));
                if replay == 12 && r == 1 {
                    p.out_cache_loc[i] = slot(2, 3);
                    println!(
                        "replay {replay}: BUG: request 1's token {q} written into slot {} \
                         (request 2, position 3)",
                        slot(2, 3)
                    );
                }
                i += 1;
            }
            cached[r] += extend as usize;
        }
        // At most two replays in flight: wait for the older one before refilling.
        if engine.graph.unread() == 2 {
            if let Some((n, report)) = engine.graph.wait()? {
                take(n, report, &mut planned, &mut active)?;
            }
        }
        // The engine refills its own buffers through the views (synchronous copies, ordered
        // with the replays on this blocking stream).
        engine.graph.inputs().batch.upload(&host_batch)?;
        engine.graph.inputs().write.upload(&host_inputs)?;
        let n = engine.graph.replay()?;
        planned.insert(
            n,
            Planned {
                batch: host_batch,
                inputs: host_inputs,
            },
        );
        replays += 1;
        while let Some((n, report)) = engine.graph.try_take()? {
            take(n, report, &mut planned, &mut active)?;
        }
    }
    while let Some((n, report)) = engine.graph.wait()? {
        take(n, report, &mut planned, &mut active)?;
    }
    println!(
        "step graph: {replays} replays of the captured decode step (real-KV tail inside the \
         graph), {clean} reports clean, requests aborted {aborted:?}, {} pinned stagings",
        engine.graph.stream().report_stagings_allocated()
    );
    if !(aborted.contains(&1) && aborted.contains(&2)) {
        return Err(format!("the misdirected write was not caught (aborted {aborted:?})").into());
    }
    Ok(())
}
