//! Fault injection into device memory (issue 33 item 5, features `faults` and `cuda`): the
//! injector's hooks corrupt a device KV cache and a device block table exactly as they corrupt
//! host memory (same seeds, same bytes, same records; over a cust `DeviceBuffer`, the crate's
//! `DeviceArray` and with `cudarc` a `CudaSlice`), and a live-KV flip injected into the device
//! cache is reported by the next device verify as the CPU's verify reports it on the host cache;
//! the detection table of `tests/faults.rs` on a device canary, every fault in device memory.

use crate::fault_scenario::{
    block_slot, detector, forward_token, plan as scenario_plan, Detector, BLOCKS, EXPECTED, SHAPE,
};
use crate::rng::Rng;
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{self, DeviceRealKv, DeviceRealKvSource, DeviceSettings, Gpu, Stream};
use kv_canary::guard::faults::{Fault, FaultInjector, FaultPlan, TokenOracle};
use kv_canary::step::{Canary, KvPair, SweepEntries};
use kv_canary::{
    cpu, CanaryBuffer, Cap, Full, HealthCounters, LaunchSettings, LaunchTag, RealKv,
    RealKvHashMode, RealKvParams, RowLayout, Shape, TokenCheckOff, TokenLayout, VerifyEntry,
    ViolationRing, WriteInputs,
};

const SLOTS: usize = 32;
const STRIP: usize = 64;

fn plan(fault: Fault) -> FaultPlan {
    FaultPlan {
        fault,
        probability: 0.5,
        warmup: 1,
        limit: 6,
    }
}

/// The hooks over host memory and over device memory from the same seeds: equal bytes and
/// records after 12 steps of every byte-flip hook and the table-cell hook.
pub fn device_faults_match_host(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let mut rng = Rng::new(0xFA17_0001);
    let kv: Vec<u8> = (0..SLOTS * STRIP).map(|_| rng.next_u64() as u8).collect();
    let table: Vec<u32> = (0..64).map(|_| rng.range(0, 100) as u32).collect();
    let byte_of = |s: i64| Some(s as usize * STRIP + 3);
    let plans = [
        plan(Fault::LiveKv),
        plan(Fault::IdleKv),
        plan(Fault::AfterStamp),
        plan(Fault::TableCell),
    ];
    let slots: Vec<i64> = (1..SLOTS as i64).collect();
    let eligible: Vec<usize> = (0..64).step_by(3).collect();
    // The same steps on every memory.
    let run = |kv: &mut dyn FnMut(&mut FaultInjector, Fault),
               cells: &mut dyn FnMut(&mut FaultInjector)|
     -> Vec<(Fault, u64, i64)> {
        let mut injector = FaultInjector::new(0x5EED, &plans);
        for _ in 0..12 {
            injector.begin_step();
            kv(&mut injector, Fault::LiveKv);
            kv(&mut injector, Fault::IdleKv);
            kv(&mut injector, Fault::AfterStamp);
            cells(&mut injector);
        }
        injector
            .injected()
            .iter()
            .map(|i| (i.fault, i.step, i.at))
            .collect()
    };
    // Host.
    let (mut host_kv, mut host_table) = (kv.clone(), table.clone());
    let host_log = run(
        &mut |inj, fault| {
            let _ = match fault {
                Fault::LiveKv => inj.live_kv(&mut host_kv, &slots, byte_of),
                Fault::IdleKv => inj.idle_kv(&mut host_kv, &slots, byte_of),
                _ => inj.after_stamp(&mut host_kv, &slots, byte_of),
            };
        },
        &mut |inj| {
            let _ = inj.table_cell(&mut host_table, &eligible, &[7u32, 9]);
        },
    );
    ensure!(
        host_log.len() >= 8,
        "weak run: {} faults injected",
        host_log.len()
    );
    // A cust DeviceBuffer.
    let mut dev_kv = DeviceBuffer::from_slice(&kv).map_err(fail("kv"))?;
    let mut dev_table = DeviceBuffer::from_slice(&table).map_err(fail("table"))?;
    let dev_log = run(
        &mut |inj, fault| {
            let _ = match fault {
                Fault::LiveKv => inj.live_kv(&mut dev_kv, &slots, byte_of),
                Fault::IdleKv => inj.idle_kv(&mut dev_kv, &slots, byte_of),
                _ => inj.after_stamp(&mut dev_kv, &slots, byte_of),
            };
        },
        &mut |inj| {
            let _ = inj.table_cell(&mut dev_table, &eligible, &[7u32, 9]);
        },
    );
    ensure!(dev_log == host_log, "DeviceBuffer: injections differ");
    let (mut back_kv, mut back_table) = (vec![0u8; kv.len()], vec![0u32; table.len()]);
    dev_kv.copy_to(&mut back_kv[..]).map_err(fail("kv back"))?;
    dev_table
        .copy_to(&mut back_table[..])
        .map_err(fail("table back"))?;
    ensure!(
        back_kv == host_kv,
        "DeviceBuffer: KV bytes differ from the host's"
    );
    ensure!(
        back_table == host_table,
        "DeviceBuffer: table cells differ from the host's"
    );
    // Out of range: nothing changes, nothing recorded.
    let mut one = FaultInjector::new(
        1,
        &[FaultPlan {
            fault: Fault::LiveKv,
            probability: 1.0,
            warmup: 0,
            limit: 1,
        }],
    );
    one.begin_step();
    ensure!(
        one.live_kv(&mut dev_kv, &[5], |_| Some(SLOTS * STRIP))
            .is_none(),
        "a flip past the device buffer was recorded"
    );
    #[cfg(feature = "cudarc")]
    {
        let cudarc_err = |e: cudarc::driver::DriverError| format!("cudarc: {e:?}");
        let stream = cudarc::driver::CudaContext::new(gpu.ordinal() as usize)
            .map_err(cudarc_err)?
            .default_stream();
        let mut slice_kv = stream.clone_htod(&kv).map_err(cudarc_err)?;
        let mut slice_table = stream.clone_htod(&table).map_err(cudarc_err)?;
        let log = run(
            &mut |inj, fault| {
                let _ = match fault {
                    Fault::LiveKv => inj.live_kv(&mut slice_kv, &slots, byte_of),
                    Fault::IdleKv => inj.idle_kv(&mut slice_kv, &slots, byte_of),
                    _ => inj.after_stamp(&mut slice_kv, &slots, byte_of),
                };
            },
            &mut |inj| {
                let _ = inj.table_cell(&mut slice_table, &eligible, &[7u32, 9]);
            },
        );
        ensure!(log == host_log, "CudaSlice: injections differ");
        let back_kv = stream.clone_dtoh(&slice_kv).map_err(cudarc_err)?;
        let back_table = stream.clone_dtoh(&slice_table).map_err(cudarc_err)?;
        ensure!(
            back_kv == host_kv,
            "CudaSlice: KV bytes differ from the host's"
        );
        ensure!(
            back_table == host_table,
            "CudaSlice: table cells differ from the host's"
        );
    }
    println!(
        "    {} faults injected over 12 steps (live, idle, after-stamp KV flips, table cells): \
         device memory equal to host memory after each hook",
        host_log.len()
    );
    Ok(())
}

/// A live-KV flip injected into the device KV cache is reported by the next device verify
/// (real-KV PARTIAL), as the CPU reports the same flip of the host cache: equal rings.
pub fn device_live_kv_flip_detected(gpu: &Gpu) -> Result<(), String> {
    let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
    let mut rng = Rng::new(0xFA17_0002);
    let kv: Vec<u8> = (0..SLOTS * STRIP).map(|_| rng.next_u64() as u8).collect();
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    // Slots 8..12 hold a request's four tokens, written with their fingerprints.
    let mut plan = shape.write_plan();
    let p = plan.parts_mut();
    p.offsets[..2].copy_from_slice(&[0, 4]);
    p.seed_slot_indices[0] = -1;
    *p.num_valid_reqs = 1;
    let mut inputs = shape.write_inputs();
    let q = inputs.parts_mut();
    q.input_ids[..4].copy_from_slice(&[11, 12, 13, 14]);
    q.positions[..4].copy_from_slice(&[0, 1, 2, 3]);
    q.out_cache_loc[..4].copy_from_slice(&[8, 9, 10, 11]);
    let mut vplan = shape.verify_plan();
    let entries: Vec<VerifyEntry> = (0..4)
        .map(|i| VerifyEntry {
            slot: 8 + i,
            expected_token: 11 + i,
            expected_position: i,
            prev_slot: if i == 0 { -1 } else { 7 + i },
        })
        .collect();
    vplan.set_entries(&entries).map_err(fail("entries"))?;
    let fault = FaultPlan {
        fault: Fault::LiveKv,
        probability: 1.0,
        warmup: 0,
        limit: 1,
    };
    let byte_of = |s: i64| Some(s as usize * STRIP);
    let live = [8i64, 9, 10, 11];
    // The CPU.
    let mut host_kv = kv.clone();
    let (mut buf, mut ring, mut counters) = (
        CanaryBuffer::<Cap<SLOTS>>::new(),
        ViolationRing::<Cap<8>>::new(),
        HealthCounters::new(),
    );
    {
        let real = RealKv::dense(RealKvHashMode::Partial, &host_kv, STRIP).map_err(fail("kv"))?;
        let launch = LaunchSettings::new(LaunchTag::TailKFull).with_real_kv(real);
        cpu::write(
            &shape,
            &plan,
            &inputs.view(),
            &launch,
            &mut buf,
            &mut ring,
            &mut counters,
        )
        .map_err(fail("cpu write"))?;
    }
    let mut injector = FaultInjector::new(3, &[fault]);
    injector.begin_step();
    let injected = injector
        .live_kv(&mut host_kv, &live, byte_of)
        .ok_or("the host flip was not injected")?;
    {
        let real = RealKv::dense(RealKvHashMode::Partial, &host_kv, STRIP).map_err(fail("kv"))?;
        let launch = LaunchSettings::new(LaunchTag::HeadKFull).with_real_kv(real);
        cpu::verify(
            &shape,
            &vplan,
            TokenCheckOff,
            &launch,
            &buf,
            &mut ring,
            &mut counters,
        )
        .map_err(fail("cpu verify"))?;
    }
    ensure!(
        ring.stored_len() == 1,
        "the CPU reported {} rows",
        ring.stored_len()
    );
    // The GPU.
    let mut dkv = DeviceBuffer::from_slice(&kv).map_err(fail("kv"))?;
    let (dbuf, dring, dcounters) = (
        CanaryBuffer::<Cap<SLOTS>>::new()
            .to_device(gpu)
            .map_err(fail("canary"))?,
        ViolationRing::<Cap<8>>::new()
            .to_device(gpu)
            .map_err(fail("ring"))?,
        HealthCounters::new()
            .to_device(gpu)
            .map_err(fail("counters"))?,
    );
    let (dplan, dinputs, dv) = (
        plan.to_device(gpu).map_err(fail("plan"))?,
        inputs.to_device(gpu).map_err(fail("inputs"))?,
        vplan.to_device(gpu).map_err(fail("verify plan"))?,
    );
    let layout = RowLayout::dense(SLOTS, STRIP);
    {
        let source = DeviceRealKvSource::new(&dkv, layout, params).map_err(fail("source"))?;
        let settings = DeviceSettings::new(LaunchTag::TailKFull)
            .with_real_kv(DeviceRealKv::new(RealKvHashMode::Partial, [source]));
        cuda::write(
            &stream, &shape, &dplan, &dinputs, &settings, &dbuf, &dring, &dcounters,
        )
        .and_then(|()| stream.status())
        .map_err(fail("gpu write"))?;
    }
    let mut device_injector = FaultInjector::new(3, &[fault]);
    device_injector.begin_step();
    let device_injected = device_injector
        .live_kv(&mut dkv, &live, byte_of)
        .ok_or("the device flip was not injected")?;
    ensure!(
        device_injected == injected,
        "the device flip differs: {device_injected:?} vs {injected:?}"
    );
    {
        let source = DeviceRealKvSource::new(&dkv, layout, params).map_err(fail("source"))?;
        let settings = DeviceSettings::new(LaunchTag::HeadKFull)
            .with_real_kv(DeviceRealKv::new(RealKvHashMode::Partial, [source]));
        cuda::verify(
            &stream,
            &shape,
            &dv,
            TokenCheckOff,
            &settings,
            &dbuf,
            &dring,
            &dcounters,
        )
        .and_then(|()| stream.status())
        .map_err(fail("gpu verify"))?;
    }
    let gring = dring.to_host().map_err(fail("ring back"))?;
    ensure!(
        gring.raw_rows().collect::<Vec<_>>() == ring.raw_rows().collect::<Vec<_>>(),
        "rings differ: GPU {:?}, CPU {:?}",
        gring.raw_rows().collect::<Vec<_>>(),
        ring.raw_rows().collect::<Vec<_>>()
    );
    let row = ring.raw_rows().next().unwrap_or_default();
    ensure!(
        row[1] == injected.at,
        "the row names slot {}, the flip hit {}",
        row[1],
        injected.at
    );
    println!(
        "    live-KV flip of slot {} injected into the device cache at step {}: reported by the \
         next device verify (HEAD_K_FULL, row {row:?}), equal to the CPU's",
        injected.at, injected.step
    );
    Ok(())
}

type DeviceCanary = Canary<Cap<128>, Cap<2>, Cap<8>, Cap<{ BLOCKS * 16 }>, Cap<64>, Full, Stream>;

/// The forward pass into the device caches: each written slot's K and V bytes (through host
/// copies of the caches, so that faults injected into device memory stay), after everything
/// queued (the stream is ordered with these synchronous copies).
fn forward(
    gpu: &Gpu,
    k: &mut DeviceBuffer<u8>,
    v: &mut DeviceBuffer<u8>,
    slots: &[i64],
    positions: &[i64],
) -> Result<(), String> {
    gpu.synchronize().map_err(fail("sync"))?;
    let (kl, vl) = (TokenLayout::vllm_k(SHAPE), TokenLayout::vllm_v(SHAPE));
    let (kl, vl) = (kl.map_err(fail("layout"))?, vl.map_err(fail("layout"))?);
    for (cache, layout) in [(k, kl), (v, vl)] {
        let mut host = vec![0u8; cache.len()];
        cache.copy_to(&mut host[..]).map_err(fail("cache down"))?;
        for (&s, &p) in slots.iter().zip(positions).filter(|(&s, _)| s >= 0) {
            forward_token(&mut host, layout, s, p as usize);
        }
        cache.copy_from(&host[..]).map_err(fail("cache up"))?;
    }
    gpu.synchronize().map_err(fail("sync"))
}

/// The device caches as the tail's and the sweep's fingerprints (all of a token's bytes).
fn tail<'a>(
    k: &'a DeviceBuffer<u8>,
    v: &'a DeviceBuffer<u8>,
) -> Result<KvPair<DeviceRealKv<'a>>, String> {
    let source = |bytes: &'a DeviceBuffer<u8>, layout| {
        DeviceRealKvSource::paged(bytes, BLOCKS, layout, SHAPE, SHAPE.token_bytes())
            .map_err(fail("paged source"))
    };
    let k = source(k, TokenLayout::vllm_k(SHAPE).map_err(fail("layout"))?)?;
    let v = source(v, TokenLayout::vllm_v(SHAPE).map_err(fail("layout"))?)?;
    Ok(KvPair {
        k: DeviceRealKv::new(RealKvHashMode::All, [k]),
        v: DeviceRealKv::new(RealKvHashMode::All, [v]),
    })
}

/// A paged engine's device memory: its caches and step arrays, in its element types.
struct DeviceEngine<'g> {
    gpu: &'g Gpu,
    canary: DeviceCanary,
    k: DeviceBuffer<u8>,
    v: DeviceBuffer<u8>,
    /// `[2, 2]` u32 block tables by batch row.
    table: DeviceBuffer<u32>,
    /// Context and query lengths (u32).
    lens: [DeviceBuffer<u32>; 2],
    bs: DeviceBuffer<i32>,
    /// Token ids, positions, slot mapping, expected ids and expected positions (i64, 8 each).
    write: [DeviceBuffer<i64>; 5],
}

impl DeviceEngine<'_> {
    /// Uploads a step's host arrays (before the step's fault hooks run on device memory).
    fn upload(
        &mut self,
        table: &[u32],
        context: &[u32],
        query: &[u32],
        write: [&[i64]; 5],
    ) -> Result<(), String> {
        let mut t = [0u32; 4];
        t[..table.len()].copy_from_slice(table);
        self.table.copy_from(&t[..]).map_err(fail("table"))?;
        for (buf, host) in self.lens.iter_mut().zip([context, query]) {
            let mut l = [0u32; 2];
            l[..host.len()].copy_from_slice(host);
            buf.copy_from(&l[..]).map_err(fail("lens"))?;
        }
        self.bs
            .copy_from(&[context.len() as i32][..])
            .map_err(fail("bs"))?;
        for (buf, host) in self.write.iter_mut().zip(write) {
            buf.copy_from(host).map_err(fail("write inputs"))?;
        }
        Ok(())
    }

    /// One device step over the uploaded arrays: plan, head verify, write (the write-input
    /// check on), the forward pass, tail verify; the report's violations.
    fn step(
        &mut self,
        rows: usize,
        slots: &[i64],
        positions: &[i64],
    ) -> Result<Vec<kv_canary::Violation>, String> {
        let gpu = self.gpu;
        let table = cuda::DeviceReqToToken::block_table_from_buffer(gpu, &self.table, rows, 2, 16)
            .map_err(fail("table view"))?;
        let [context, query] = &self.lens;
        let batch =
            cuda::DeviceBatch::from_query_lens(gpu, Cap::<2>, context, query, Some(&self.bs))
                .map_err(fail("batch view"))?;
        let [ids, pos, loc, eids, epos] = &self.write;
        let write =
            WriteInputs::from_buffers(gpu, Cap::<8>, ids, pos, loc).map_err(fail("write view"))?;
        let write = write
            .with_expected(gpu, eids, epos)
            .map_err(fail("expected view"))?;
        let step = (self.canary.plan(&cuda::PlanInputs::full(&batch, &table)))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&*write))
            .map_err(fail("step"))?;
        forward(gpu, &mut self.k, &mut self.v, slots, positions)?;
        let pending = step
            .verify_tail(tail(&self.k, &self.v)?)
            .map_err(fail("tail"))?;
        Ok(pending.wait().map_err(fail("report"))?.violations)
    }

    /// A sweep of the idle request's cached slots; its violations.
    fn sweep(&mut self, idle: &[i64]) -> Result<Vec<kv_canary::Violation>, String> {
        let mut entries = SweepEntries::new();
        entries
            .push_node(None::<i64>, 0, idle)
            .map_err(fail("entries"))?;
        let sweep = (self
            .canary
            .sweep(entries.as_slice(), tail(&self.k, &self.v)?))
        .map_err(fail("sweep"))?;
        Ok(sweep.wait().map_err(fail("sweep report"))?.violations)
    }
}

/// A request: its id and its two blocks.
type Request = (u64, [u32; 2]);

/// Token ids, positions, slots of `rows`' new tokens (`context - query ..context`), 8 at most.
type Tokens = (Vec<i64>, Vec<i64>, Vec<i64>);

fn tokens(
    rows: &[(u64, [u32; 2])],
    context: &[u32],
    query: &[u32],
    oracle: &TokenOracle,
) -> Tokens {
    let (mut ids, mut positions, mut slots) = (vec![0i64; 8], vec![0i64; 8], vec![-1i64; 8]);
    let mut t = 0;
    for (r, &(request, blocks)) in rows.iter().enumerate() {
        for p in (context[r] - query[r])..context[r] {
            let p = p as usize;
            if t < 8 {
                (ids[t], positions[t], slots[t]) = (
                    oracle.token(request, p as i64),
                    p as i64,
                    block_slot(&blocks, p),
                );
            }
            t += 1;
        }
    }
    (ids, positions, slots)
}

/// The host test's scenario (`tests/faults.rs`) on a device canary, every fault injected into
/// device memory: 8 decode steps of requests 1 (blocks 1, 2) and 2 (blocks 3, 4) after their
/// prefills (8 tokens a step), request 3 (block 5) cached idle and swept each step. Returns
/// the injection's step and the first (step, detector) that reported.
fn device_detection(gpu: &Gpu, plan: FaultPlan) -> Result<(u64, Option<(u64, Detector)>), String> {
    let oracle = TokenOracle {
        seed: 7,
        vocab: 32000,
    };
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let cache = || DeviceBuffer::from_slice(&vec![0u8; BLOCKS * SHAPE.block_bytes()]);
    let zeros = || DeviceBuffer::from_slice(&[0i64; 8]).map_err(fail("arrays"));
    let mut e = DeviceEngine {
        gpu,
        canary: Canary::full_on(stream, Shape::new(), Cap, Cap).map_err(fail("canary"))?,
        k: cache().map_err(fail("k"))?,
        v: cache().map_err(fail("v"))?,
        table: DeviceBuffer::from_slice(&[0u32; 4]).map_err(fail("table"))?,
        lens: [
            DeviceBuffer::from_slice(&[0u32; 2]).map_err(fail("lens"))?,
            DeviceBuffer::from_slice(&[0u32; 2]).map_err(fail("lens"))?,
        ],
        bs: DeviceBuffer::from_slice(&[0i32]).map_err(fail("bs"))?,
        write: [zeros()?, zeros()?, zeros()?, zeros()?, zeros()?],
    };
    let mut injector = FaultInjector::new(11, &[plan]);
    let requests: [Request; 2] = [(1, [1, 2]), (2, [3, 4])];
    let idle_blocks = [5u32, 0];
    let idle: Vec<i64> = (0..12).map(|p| block_slot(&idle_blocks, p)).collect();
    let k_byte = |s: i64| {
        let layout = TokenLayout::vllm_k(SHAPE).ok()?;
        let TokenLayout::Pieces(p) = layout else {
            return None;
        };
        Some((s as usize / 16) * SHAPE.block_bytes() + (s as usize % 16) * p.token_stride)
    };
    let mut first: Option<(u64, Detector)> = None;
    let mut note = |step: u64, rows: &[kv_canary::Violation]| {
        if let Some(row) = rows.first() {
            first = first.or(Some((step, detector(row))));
        }
    };
    for step in 0..10u64 {
        injector.begin_step();
        let (rows, context, query): (Vec<Request>, Vec<u32>, Vec<u32>) = match step {
            0 => (vec![(3, idle_blocks)], vec![12], vec![12]),
            1 => (requests.to_vec(), vec![16, 16], vec![16, 16]),
            _ => {
                let c = 16 + step as u32 - 1;
                (requests.to_vec(), vec![c, c], vec![1, 1])
            }
        };
        // Cached (live) slots: every row's positions before this step.
        let live: Vec<i64> = (rows.iter().enumerate())
            .flat_map(|(r, &(_, b))| {
                (0..(context[r] - query[r]) as usize).map(move |p| block_slot(&b, p))
            })
            .collect();
        injector.live_kv(&mut e.k, &live, k_byte);
        let mut violations = Vec::new();
        let mut written = Vec::new();
        if step < 2 {
            // Prefills: 8 tokens a canary step, one row at a time.
            for (r, &row) in rows.iter().enumerate() {
                for chunk in (0..context[r]).step_by(8) {
                    let n = (context[r] - chunk).min(8);
                    let (c, q) = ([chunk + n], [n]);
                    let (ids, pos, slots) = tokens(&[row], &c, &q, &oracle);
                    e.upload(&row.1, &c, &q, [&ids, &pos, &slots, &ids, &pos])?;
                    violations.extend(e.step(1, &slots, &pos)?);
                    written.extend(slots.iter().filter(|&&s| s >= 0));
                }
            }
        } else {
            let (mut ids, pos, slots) = tokens(&rows, &context, &query, &oracle);
            let expected = ids.clone();
            injector.swap_tokens(&mut ids[..2]);
            let table: Vec<u32> = rows.iter().flat_map(|r| r.1).collect();
            e.upload(
                &table,
                &context,
                &query,
                [&ids, &pos, &slots, &expected, &pos],
            )?;
            // A table cell of request 1 (its first block, cached, not written) pointed into
            // request 2's first block, in device memory.
            injector.table_cell(&mut e.table, &[0], &[requests[1].1[0]]);
            violations.extend(e.step(rows.len(), &slots, &pos)?);
            written.extend(slots.iter().filter(|&&s| s >= 0));
        }
        injector.after_stamp(&mut e.k, &written, k_byte);
        let mut swept = Vec::new();
        if step >= 1 {
            injector.idle_kv(&mut e.k, &idle, k_byte);
            swept = e.sweep(&idle)?;
        }
        note(step, &swept);
        note(step, &violations);
    }
    let injected = injector.injected().first().map(|i| i.step - 1);
    Ok((injected.ok_or("the fault was not injected")?, first))
}

/// The detection table on the GPU (issue 33): each of SGLang's five perturbations, injected
/// into device memory (the KV cache, the block table, the token ids) of a paged engine on a
/// device canary, is caught by the detector it targets within a step, as on the CPU
/// (`tests/faults.rs`).
pub fn device_detection_table(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    println!("    | fault | injected at step | detector (device) | steps to detection |");
    for (fault, detectors) in EXPECTED {
        let (injected, first) = device_detection(gpu, scenario_plan(fault))?;
        let (step, detector) = first.ok_or(format!("{fault:?} was not detected on the GPU"))?;
        ensure!(
            detectors.contains(&detector),
            "{fault:?} detected on the GPU by {detector:?}, not {detectors:?}"
        );
        ensure!(
            step >= injected && step <= injected + 1,
            "{fault:?}: detected at step {step}, injected at {injected}"
        );
        println!(
            "    | {fault:?} | {injected} | {detector:?} | {} |",
            step - injected
        );
    }
    Ok(())
}
