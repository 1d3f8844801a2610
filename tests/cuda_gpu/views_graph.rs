//! A whole device step in a CUDA graph over the engine's own memory: a `StepGraph` whose inputs
//! are all views (`from_raw`) of allocations the test owns as "the engine" (batch columns with
//! `bs` from an engine `i32`, `req_to_token`, the write inputs, a paged K/V pool at two byte
//! offsets of one allocation), captured once and replayed over steps between which the engine
//! refills its own allocations with its own copies (`cuMemcpyHtoD` through cust, not the
//! crate's `upload`). Every replay's report equals the CPU twin's step over the same data;
//! faults injected into the engine's data (a KV byte clobbered after it was written, a token's
//! `out_cache_loc` pointing into another request's prefix) are reported in the step they are
//! injected in, as the CPU twin reports them; and the replays issue no crate copy at all
//! (`cuda::transfers_issued` does not move from the capture to the last report).
//!
//! `unsafe` here: the views' raw constructors, over allocations the engine struct keeps alive
//! past its graph.
#![allow(unsafe_code)]

use crate::rng::Rng;
use crate::step::{compare, draw_rows};
use crate::views::{
    addr, engine, fill, host_kv, slot, strip, ENTRIES, KV_BYTES, K_AT, LAYOUT, PAGE, PARAMS, ROWS,
    SLOTS, V_AT, WIDTH,
};
use crate::{ensure, fail};
use cust::memory::DeviceBuffer;
use kv_canary::cuda::{
    self, DeviceBatch, DeviceRealKv, DeviceRealKvSource, DeviceStepReport, Gpu,
    PendingDeviceReport, RawBatch, RawWriteInputs, StepGraph, Stream,
};
use kv_canary::step::{Canary, KvPair, StepReport, TailKv};
use kv_canary::{
    Batch, BatchRow, Cap, Device, Error, FailReason, Full, InputAssertOff, LaunchTag,
    RealKvHashMode, ReqToToken, Shape, WriteInputs,
};
use std::collections::{HashSet, VecDeque};

/// Verify entries: every prefix of every row at once (7 rows of at most 31 prefix slots), so
/// no step goes unverified and every fault is checked in the step it is injected in.
const VERIFY: usize = ROWS * WIDTH;
/// Ring rows: more than a step can record (4 verify launches of at most 217 entries and 4
/// write launches of at most 64), so no row of a fault is ever dropped.
const RING: usize = 2048;

type Spec = Shape<Cap<VERIFY>, Cap<ROWS>, Cap<ENTRIES>>;
type DeviceCanary =
    Canary<Cap<VERIFY>, Cap<ROWS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<RING>, Full, cuda::Stream>;
type CpuCanary = Canary<Cap<VERIFY>, Cap<ROWS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<RING>>;

/// The engine's tensors: `cust` allocations standing for its torch tensors, which it refills
/// between steps with its own copies.
struct EngineMemory {
    table: DeviceBuffer<i32>,
    /// `req_pool_indices`, `prefix_lens`, `extend_seq_lens`.
    cols: [DeviceBuffer<i64>; 3],
    bs: DeviceBuffer<i32>,
    /// `input_ids`, `positions`, `out_cache_loc`.
    tokens: [DeviceBuffer<i64>; 3],
    /// The paged pool: K at `K_AT`, V at `V_AT`.
    kv: DeviceBuffer<u8>,
}

/// What the step graph replays over: views of [`EngineMemory`] only, nothing of the crate's.
struct Views {
    batch: DeviceBatch<Cap<ROWS>>,
    table: cuda::DeviceReqToToken,
    write: WriteInputs<Cap<ENTRIES>, InputAssertOff, Device>,
    k: DeviceRealKvSource<'static>,
    v: DeviceRealKvSource<'static>,
}

/// The engine's struct: its canary's step graph over views of its memory, and that memory.
/// The graph is declared first, so it is dropped first: dropping it waits for its last replay
/// while the memory it reads is still allocated.
struct Engine {
    graph: StepGraph<Cap<VERIFY>, Cap<ROWS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<RING>, Full, Views>,
    memory: EngineMemory,
}

const _: fn() = || {
    fn send<T: Send + 'static>() {}
    send::<Engine>();
};

impl EngineMemory {
    /// The engine's allocations, the table filled with `cells`.
    fn new(cells: &[i32]) -> Result<Self, String> {
        let mut table = engine(ROWS * WIDTH, 0i32)?;
        fill(&mut table, cells)?;
        Ok(EngineMemory {
            table,
            cols: [
                engine(ROWS, 0i64)?,
                engine(ROWS, 0i64)?,
                engine(ROWS, 0i64)?,
            ],
            bs: engine(1, 0i32)?,
            tokens: [
                engine(ENTRIES, 0i64)?,
                engine(ENTRIES, 0i64)?,
                engine(ENTRIES, -1i64)?,
            ],
            kv: engine(KV_BYTES, 0u8)?,
        })
    }

    /// Views of every allocation, for the step graph.
    ///
    /// # Safety
    ///
    /// The views (and any graph captured over them) must not outlive `self`.
    unsafe fn views(&self, gpu: &Gpu) -> Result<Views, String> {
        // SAFETY: each address is a live cust allocation of this Gpu's context with at least
        // the elements the view claims, aligned by cuMemAlloc; the caller keeps them alive
        // while the views and their graph live, and the engine writes them only between
        // replays (synchronous copies on the legacy default stream, ordered after the replays
        // queued on the canary's blocking stream).
        unsafe {
            let table = cuda::DeviceReqToToken::from_raw(gpu, addr(&self.table), ROWS, WIDTH)
                .map_err(fail("table view"))?;
            let raw = RawBatch {
                req_pool_indices: addr(&self.cols[0]),
                prefix_lens: addr(&self.cols[1]),
                extend_seq_lens: addr(&self.cols[2]),
                bs: Some(addr(&self.bs)),
            };
            let batch = DeviceBatch::from_raw(gpu, Cap::<ROWS>, raw).map_err(fail("batch view"))?;
            let raw = RawWriteInputs {
                input_ids: addr(&self.tokens[0]),
                positions: addr(&self.tokens[1]),
                out_cache_loc: addr(&self.tokens[2]),
            };
            let write =
                WriteInputs::from_raw(gpu, Cap::<ENTRIES>, raw).map_err(fail("inputs view"))?;
            let kv = addr(&self.kv);
            let half = |at: usize| {
                DeviceRealKvSource::from_raw(gpu, kv + at as u64, KV_BYTES - at, LAYOUT, PARAMS)
            };
            Ok(Views {
                batch,
                table,
                write,
                k: half(K_AT).map_err(fail("K view"))?,
                v: half(V_AT).map_err(fail("V view"))?,
            })
        }
    }

    /// The engine's refill of its tensors for the next step (its own synchronous copies).
    fn refill(&mut self, host: &Host, cols: &[Vec<i64>; 3], bs: usize) -> Result<(), String> {
        for (dst, src) in self.cols.iter_mut().zip(cols) {
            fill(dst, src)?;
        }
        fill(&mut self.bs, &[bs as i32])?;
        fill(&mut self.tokens[0], host.inputs.input_ids())?;
        fill(&mut self.tokens[1], host.inputs.positions())?;
        fill(&mut self.tokens[2], host.inputs.out_cache_loc())?;
        fill(&mut self.kv, &host.kv)
    }
}

/// The step closure of the graph: the whole step over the views, folding both halves' KV.
fn device_step(canary: &mut DeviceCanary, v: &Views) -> Result<PendingDeviceReport, Error> {
    let step = canary
        .plan(&cuda::PlanInputs::full(&v.batch, &v.table))?
        .verify_head()?
        .write(&v.write)?;
    // The forward pass would be queued here, on the canary's stream (captured too).
    step.verify_tail(KvPair {
        k: DeviceRealKv::new(RealKvHashMode::All, [v.k]),
        v: DeviceRealKv::new(RealKvHashMode::All, [v.v]),
    })
}

/// A fault the engine's data carries in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// One byte of a prefix slot's K strip changed after it was written.
    ClobberKv,
    /// One token's `out_cache_loc` (and so its KV bytes) points into another request's prefix.
    MisdirectWrite,
}

/// What a step with a fault must report: a `TAIL_*` row at `slot` with the real-KV bit for
/// each tag.
#[derive(Debug)]
struct Expected {
    fault: Fault,
    slot: i64,
    tags: &'static [LaunchTag],
}

/// The host side: the CPU twin and its inputs, the host image of the engine's KV pool, what
/// each request row has cached.
struct Host {
    cpu: CpuCanary,
    table: ReqToToken,
    inputs: WriteInputs<Cap<ENTRIES>>,
    kv: Vec<u8>,
    cached: [usize; ROWS],
    /// Slots whose K byte is clobbered since their last write (clobbering one again could
    /// restore the byte).
    clobbered: HashSet<i64>,
    rng: Rng,
}

/// A step ready to run: the CPU's batch, the engine's batch columns, the fault it carries.
struct Prepared {
    batch: Batch,
    cols: [Vec<i64>; 3],
    fault: Option<Expected>,
}

/// One drawn step: the batch rows `(row, prefix, extend)` and the tokens `(slot, token,
/// position)` in entry order.
struct Draw {
    rows: Vec<(usize, usize, usize)>,
    tokens: Vec<(i64, i64, i64)>,
}

impl Host {
    fn new(seed: u64) -> Result<Self, String> {
        let cpu = Canary::full(Spec::new(), Cap::<SLOTS>, Cap::<RING>);
        let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
        let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
        let inputs = cpu.write_inputs();
        Ok(Host {
            cpu,
            table,
            inputs,
            kv: vec![0; KV_BYTES],
            cached: [0; ROWS],
            clobbered: HashSet::new(),
            rng: Rng::new(seed),
        })
    }

    /// Random decode and prefill rows, as the views test draws them.
    fn draw(&mut self) -> Draw {
        let drawn = draw_rows(&mut self.rng, &mut self.cached, WIDTH, true);
        Draw {
            tokens: drawn.written(slot),
            rows: drawn.rows,
        }
    }

    /// Injects `fault` into the drawn step when it can (`None` when this batch has no place
    /// for it). A misdirected token goes to a prefix slot of another row of the batch that is
    /// not that row's seed (a seed slot written in the same write launch races on the GPU),
    /// so the step's tail verify of that row finds the foreign KV bytes there.
    fn misdirect(&mut self, draw: &mut Draw) -> Option<Expected> {
        let victims: Vec<_> = draw.rows.iter().filter(|r| r.1 >= 2).copied().collect();
        if victims.is_empty() {
            return None;
        }
        let (victim, prefix, _) = victims[self.rng.below(victims.len() as u64) as usize];
        let first = slot(victim, 0);
        let own = |s: i64| (first..first + WIDTH as i64).contains(&s);
        let movable: Vec<usize> = (0..draw.tokens.len())
            .filter(|&i| !own(draw.tokens[i].0))
            .collect();
        if movable.is_empty() {
            return None;
        }
        let i = movable[self.rng.below(movable.len() as u64) as usize];
        let target = slot(victim, self.rng.below(prefix as u64 - 1) as usize);
        draw.tokens[i].0 = target;
        Some(Expected {
            fault: Fault::MisdirectWrite,
            slot: target,
            tags: &[LaunchTag::TailKFull, LaunchTag::TailVFull],
        })
    }

    /// Clobbers one byte of the K strip of a prefix slot of a row of the batch that is not
    /// clobbered already (after the forward pass, so nothing of this step rewrites it).
    fn clobber(&mut self, draw: &Draw) -> Option<Expected> {
        let slots: Vec<i64> = draw
            .rows
            .iter()
            .flat_map(|&(row, prefix, _)| (0..prefix).map(move |pos| slot(row, pos)))
            .filter(|s| !self.clobbered.contains(s))
            .collect();
        if slots.is_empty() {
            return None;
        }
        let s = slots[self.rng.below(slots.len() as u64) as usize];
        self.kv[strip(K_AT, s as usize) + 20] ^= 0x5A;
        self.clobbered.insert(s);
        Some(Expected {
            fault: Fault::ClobberKv,
            slot: s,
            tags: &[LaunchTag::TailKFull],
        })
    }

    /// Draws the next step, fills the write inputs with its tokens and the KV image with their
    /// bytes (the forward pass), injecting `fault` if this batch has a place for it.
    fn prepare(&mut self, step: usize, fault: Option<Fault>) -> Prepared {
        let mut draw = self.draw();
        let mut expected = match fault {
            Some(Fault::MisdirectWrite) => self.misdirect(&mut draw),
            _ => None,
        };
        let batch: Batch = draw
            .rows
            .iter()
            .map(|&(r, p, e)| BatchRow {
                req_pool_index: r as i64,
                prefix_len: p as i64,
                extend_len: e as i64,
            })
            .collect();
        let mut cols = [vec![0i64; ROWS], vec![0i64; ROWS], vec![0i64; ROWS]];
        for (i, &(r, p, e)) in draw.rows.iter().enumerate() {
            (cols[0][i], cols[1][i], cols[2][i]) = (r as i64, p as i64, e as i64);
        }
        let p = self.inputs.parts_mut();
        p.input_ids.fill(0);
        p.positions.fill(0);
        p.out_cache_loc.fill(-1);
        for (i, &(s, t, pos)) in draw.tokens.iter().enumerate() {
            (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (s, t, pos);
        }
        for &(s, t, pos) in &draw.tokens {
            for (base, t, pos) in [(K_AT, t, pos), (V_AT, !t, !pos)] {
                let at = strip(base, s as usize);
                self.kv[at..at + 8].copy_from_slice(&t.to_le_bytes());
                self.kv[at + 8..at + 16].copy_from_slice(&pos.to_le_bytes());
                self.kv[at + 16..at + 32].copy_from_slice(&[step as u8; 16]);
            }
            self.clobbered.remove(&s);
        }
        if fault == Some(Fault::ClobberKv) {
            expected = self.clobber(&draw);
        }
        Prepared {
            batch,
            cols,
            fault: expected,
        }
    }

    /// The CPU twin's step over the prepared data.
    fn cpu_step(&mut self, batch: &Batch) -> Result<StepReport, String> {
        let step = self
            .cpu
            .plan(&kv_canary::PlanInputs::full(batch, &self.table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&self.inputs))
            .map_err(fail("cpu step"))?;
        step.verify_tail(TailKv::new(
            host_kv(&self.kv, K_AT)?,
            host_kv(&self.kv, V_AT)?,
        ))
        .map_err(fail("cpu tail"))
    }
}

/// Whether `report` (the CPU's or the device's) has, for each of `e`'s tags, a row at `e`'s
/// slot with the real-KV bit.
fn shows(e: &Expected, violations: &[kv_canary::Violation]) -> bool {
    e.tags.iter().all(|&tag| {
        violations.iter().any(|v| {
            v.launch_tag() == Some(tag)
                && v.slot == e.slot
                && v.reasons.contains(FailReason::VERIFY_REAL_KV_HASH_MISMATCH)
        })
    })
}

/// A step graph over views of the engine's memory, replayed over refilled steps with faults
/// injected into the engine's data: every report equal to the CPU twin's, each fault reported
/// in its own step on both, no crate copy from the capture to the last report, and the canary
/// equal to the CPU's afterwards.
pub fn step_graph_over_views(gpu: &Gpu) -> Result<(), String> {
    let replays = crate::scaled(80).max(24) as usize;
    gpu.make_current().map_err(fail("context"))?;
    let mut host = Host::new(0x7E_0F_6A_F0)?;
    let memory = EngineMemory::new(host.table.as_slice())?;
    // SAFETY: the views go into the engine's graph, which the engine struct drops before the
    // memory (field order), and which is taken apart below only after its last replay.
    let views = unsafe { memory.views(gpu) }?;
    ensure!(
        views.table.is_view() && views.write.is_view(),
        "the views do not say they are views"
    );
    let at = DeviceRealKvSource::at(&memory.kv, V_AT, LAYOUT, PARAMS).map_err(fail("V at"))?;
    ensure!(
        at == views.v,
        "a source at a byte offset differs from the raw view at that address"
    );
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let canary: DeviceCanary =
        Canary::full_on(stream, Spec::new(), Cap::<SLOTS>, Cap::<RING>).map_err(fail("canary"))?;
    let mut engine = Engine {
        graph: StepGraph::new(canary, views, device_step),
        memory,
    };
    engine.graph.capture().map_err(fail("capture"))?;

    let start = cuda::transfers_issued();
    let mut expected: VecDeque<(u64, StepReport, Option<Expected>)> = VecDeque::new();
    let (mut overflows, mut found) = (0, 0);
    let mut shown = Vec::new();
    let mut take = |engine: &mut Engine,
                    expected: &mut VecDeque<(u64, StepReport, Option<Expected>)>,
                    block: bool|
     -> Result<(), String> {
        let got = if block {
            engine.graph.wait()
        } else {
            engine.graph.try_take()
        }
        .map_err(fail("report"))?;
        let Some((n, d)) = got else {
            return Ok(());
        };
        let (m, c, fault) = expected.pop_front().ok_or("a report nobody replayed")?;
        ensure!(n == m, "report of replay {n} delivered where {m} was due");
        compare(n as usize, &c, &d, &mut overflows, &mut found)?;
        ensure!(d.enabled, "replay {n} went unverified: {:?}", d.status());
        if let Some(e) = fault {
            check_fault(n, &e, &c, &d)?;
            shown.push(e.fault);
        }
        Ok(())
    };
    let mut pending: Option<Fault> = None;
    for n in 0..replays {
        // Now and then a fault, kept pending until a batch has a place for it.
        if n % 10 == 4 {
            pending = Some(Fault::ClobberKv);
        } else if n % 10 == 9 {
            pending = Some(Fault::MisdirectWrite);
        }
        let Prepared { batch, cols, fault } = host.prepare(n, pending);
        if fault.is_some() {
            pending = None;
        }
        // The engine's own copies into its own memory (after the replay before: ordered on the
        // legacy default stream with the canary's blocking stream).
        engine.memory.refill(&host, &cols, batch.len())?;
        let c = host.cpu_step(&batch)?;
        let before = cuda::transfers_issued();
        let queued = engine.graph.replay().map_err(fail("replay"))?;
        let copies = cuda::transfers_issued().since(before);
        ensure!(queued == n as u64, "replay {queued} queued as the {n}th");
        ensure!(
            copies == cuda::Transfers::default(),
            "replay {n} over views issued copies: {copies:?}"
        );
        expected.push_back((queued, c, fault));
        // One replay late: the oldest unread report, and the next if it landed already.
        if n > 0 {
            take(&mut engine, &mut expected, true)?;
        }
        take(&mut engine, &mut expected, false)?;
    }
    while !expected.is_empty() {
        take(&mut engine, &mut expected, true)?;
    }
    let copies = cuda::transfers_issued().since(start);
    ensure!(
        copies == cuda::Transfers::default(),
        "{replays} replays over views and their reports issued copies: {copies:?}"
    );
    ensure!(
        engine.graph.unread() == 0 && engine.graph.replays() == replays as u64,
        "{} replays, {} unread",
        engine.graph.replays(),
        engine.graph.unread()
    );
    let clobbers = shown.iter().filter(|&&f| f == Fault::ClobberKv).count();
    let misdirects = shown.len() - clobbers;
    ensure!(
        clobbers > 0 && misdirects > 0,
        "weak run: {clobbers} clobbered KV bytes and {misdirects} misdirected writes shown"
    );

    let Engine { graph, memory } = engine;
    let canary = graph.into_canary();
    crate::step::same_canaries(&host.cpu, &canary, &format!(" after {replays} replays"))?;
    ensure!(
        canary.total_violations() == host.cpu.total_violations(),
        "violation totals differ: GPU {}, CPU {}",
        canary.total_violations(),
        host.cpu.total_violations()
    );
    println!(
        "    {replays} graph replays over engine views (paged K/V, page {PAGE}, byte offsets \
         {K_AT}/{V_AT}, bs from the engine's i32) equal to the CPU ({found} with violations, \
         {overflows} unverified); {clobbers} clobbered KV bytes and {misdirects} misdirected \
         writes each reported in its own step; 0 crate copies from the capture to the last \
         report"
    );
    // The graph is gone (its replays waited for): the engine's memory may go now.
    drop(canary);
    drop(memory);
    Ok(())
}

/// The fault of replay `n` shows in its own report, the device's as the CPU's.
fn check_fault(n: u64, e: &Expected, c: &StepReport, d: &DeviceStepReport) -> Result<(), String> {
    ensure!(
        shows(e, &c.violations),
        "replay {n}: the CPU twin does not report the {:?} at slot {}: {:?}",
        e.fault,
        e.slot,
        c.violations
    );
    ensure!(
        shows(e, &d.violations),
        "replay {n}: the device does not report the {:?} at slot {} as the CPU does: {:?}",
        e.fault,
        e.slot,
        d.violations
    );
    Ok(())
}
