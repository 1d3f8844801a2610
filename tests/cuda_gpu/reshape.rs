//! Reconfiguration on the GPU (issue 10 item 6): a CPU and a device canary of run-time
//! capacities (an engine's config) run the same steps, are reshaped in place twice (a larger
//! batch and verify capacity, then a verify capacity too small for the prefixes), and the
//! device's views of the engine's batch and write tensors are rebound to the new capacities
//! (`Shared::rebind`) over the same buffers. In-flight requests stay verified: every report,
//! the counters and the canary bytes equal the CPU's.

use crate::rng::Rng;
use crate::step::{
    compare, dev_kv, fill_write_inputs, host_kv, same_canaries, slot, stamp_kv, token, ROWS, SLOTS,
    STRIP, WIDTH,
};
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{self, Gpu, Shared, Stream};
use kv_canary::step::{Canary, KvPair, TailKv};
use kv_canary::{
    Batch, BatchRow, CanarySlot, Cap, Capacity, Device, InputAssertOff, LaunchTag, RealKvParams,
    ReqToToken, RowLayout, UncheckedCapacity, UncheckedShape, WriteInputs,
};
use std::sync::Arc;

/// The engine's buffers hold its largest config: 16 batch rows, 64 tokens a step.
const BATCH_ROOM: usize = 16;
const TOKEN_ROOM: usize = 64;

type Caps = UncheckedCapacity;

fn shape(verify: usize, write_reqs: usize, write_entries: usize) -> Result<UncheckedShape, String> {
    let cap = |what, n| UncheckedCapacity::new(what, n).map_err(fail("capacity"));
    Ok(UncheckedShape::from_capacities(
        cap("verify_capacity", verify)?,
        cap("write_req_capacity", write_reqs)?,
        cap("write_entry_capacity", write_entries)?,
    ))
}

/// Up to `max_rows` rows of `cached` (row 0 the padding row) step: a decode of 1 token, or a
/// prefill of 1..=3 for a row with nothing cached (a finished row is recycled), at most
/// `max_tokens` tokens in all. Returns the batch and its `(slot, token, position)` writes.
fn draw(
    rng: &mut Rng,
    cached: &mut [usize; ROWS],
    max_rows: usize,
    max_tokens: usize,
) -> (Batch, Vec<(i64, i64, i64)>) {
    let (mut rows, mut writes) = (Vec::new(), Vec::new());
    for (row, cached) in cached.iter_mut().enumerate().skip(1) {
        if *cached >= WIDTH {
            *cached = 0;
        }
        if rows.len() == max_rows || !rng.chance(70) {
            continue;
        }
        let extend = if *cached == 0 {
            rng.range(1, 3) as usize
        } else {
            1
        };
        let extend = extend.min(WIDTH - *cached);
        if writes.len() + extend > max_tokens {
            continue;
        }
        rows.push(BatchRow {
            req_pool_index: row as i64,
            prefix_len: *cached as i64,
            extend_len: extend as i64,
        });
        writes.extend((*cached..*cached + extend).map(|p| (slot(row, p), token(row, p), p as i64)));
        *cached += extend;
    }
    (rows.into_iter().collect(), writes)
}

/// The engine's own device tensors: batch columns, `bs`, the write arrays, the KV pools.
struct EngineMemory {
    batch: [Arc<DeviceBuffer<i64>>; 3],
    bs: Arc<DeviceBuffer<i32>>,
    write: [Arc<DeviceBuffer<i64>>; 3],
    k: DeviceBuffer<u8>,
    v: DeviceBuffer<u8>,
}

impl EngineMemory {
    fn new() -> Result<Self, String> {
        let cuda = |e: cust::error::CudaError| format!("engine buffer: {e}");
        let column = |n| -> Result<_, String> {
            Ok(Arc::new(
                DeviceBuffer::from_slice(&vec![0i64; n]).map_err(cuda)?,
            ))
        };
        let pool = || DeviceBuffer::from_slice(&vec![0u8; SLOTS * STRIP]).map_err(cuda);
        Ok(EngineMemory {
            batch: [
                column(BATCH_ROOM)?,
                column(BATCH_ROOM)?,
                column(BATCH_ROOM)?,
            ],
            bs: Arc::new(DeviceBuffer::from_slice(&[0i32]).map_err(cuda)?),
            write: [
                column(TOKEN_ROOM)?,
                column(TOKEN_ROOM)?,
                column(TOKEN_ROOM)?,
            ],
            k: pool()?,
            v: pool()?,
        })
    }
}

/// Two reshapes of a CPU and a device canary in an engine's struct, the device's views rebound
/// over the engine's buffers; 36 random steps, every report equal.
pub fn reshape_keeps_state_and_views_rebind(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let first = shape(96, 4, 16)?;
    let slots = UncheckedCapacity::new("slots", SLOTS).map_err(fail("slots"))?;
    let rows = UncheckedCapacity::new("ring rows", 64).map_err(fail("rows"))?;
    let mut cpu = Canary::try_full(first, slots, rows).map_err(fail("cpu canary"))?;
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev = Canary::full_on(stream, first, slots, rows).map_err(fail("canary"))?;
    let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let memory = EngineMemory::new()?;
    let mut batch: Shared<cuda::DeviceBatch<Caps>> = cuda::DeviceBatch::from_shared(
        gpu,
        first.write_req_capacity(),
        {
            let [a, b, c] = memory.batch.clone();
            (a, b, c)
        },
        Some(Arc::clone(&memory.bs)),
    )
    .map_err(fail("batch view"))?;
    let mut inputs: Shared<WriteInputs<Caps, InputAssertOff, Device>> = WriteInputs::from_shared(
        gpu,
        first.write_entry_capacity(),
        Arc::clone(&memory.write[0]),
        Arc::clone(&memory.write[1]),
        Arc::clone(&memory.write[2]),
    )
    .map_err(fail("inputs view"))?;
    let (mut k, mut v) = (vec![0u8; SLOTS * STRIP], vec![0u8; SLOTS * STRIP]);
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let layout = RowLayout::dense(SLOTS, STRIP);
    let (mut memory, mut rng, mut cached) = (memory, Rng::new(0x2e5_4a9e), [0usize; ROWS]);
    let (mut overflows, mut found, mut tampered) = (0, 0, 0);
    let mut line = Vec::new();
    for step in 0..36 {
        if step == 12 || step == 24 {
            // The engine's config changes: at step 12 up to 8 requests of 32 tokens and 160
            // verify entries; at step 24 a verify capacity of 24, below most prefixes.
            let next = if step == 12 {
                shape(160, 8, 32)?
            } else {
                shape(24, 8, 32)?
            };
            cpu.reshape(next).map_err(fail("cpu reshape"))?;
            dev.reshape(next).map_err(fail("device reshape"))?;
            // The old views' capacities no longer match the shape: rebound, same buffers.
            batch = batch
                .rebind(next.write_req_capacity())
                .map_err(fail("rebind batch"))?;
            inputs = inputs
                .rebind(next.write_entry_capacity())
                .map_err(fail("rebind inputs"))?;
            ensure!(
                batch.capacity().get() == 8 && inputs.capacity().get() == 32,
                "rebound views of {} rows, {} tokens",
                batch.capacity().get(),
                inputs.capacity().get()
            );
            line.push(format!(
                "step {step}: reshaped to V {}, W 8, E 32 and views rebound",
                next.verify_capacity().get()
            ));
        }
        if step % 5 == 3 {
            // A cached record corrupted in both canaries' tail K buffers.
            let row = 1 + rng.below(ROWS as u64 - 1) as usize;
            if cached[row] >= 2 {
                let s = slot(row, rng.below(cached[row] as u64 - 1) as usize) as usize;
                let tag = LaunchTag::TailKFull;
                let host = cpu.buffer_mut(tag).ok_or("tail K")?;
                let rec = host.slot(s).ok_or("slot")?;
                let bad = CanarySlot {
                    token: rec.token ^ 1,
                    ..rec
                };
                host.set_slot(s, bad).map_err(fail("tamper"))?;
                let dbuf = dev.buffer(tag).ok_or("device tail K")?;
                let mut copy = dbuf.to_host().map_err(fail("download"))?;
                copy.set_slot(s, bad).map_err(fail("tamper"))?;
                dbuf.upload(&copy).map_err(fail("upload"))?;
                tampered += 1;
            }
        }
        let shape = *cpu.shape();
        let (host_batch, writes) = draw(
            &mut rng,
            &mut cached,
            shape.write_req_capacity().get(),
            shape.write_entry_capacity().get(),
        );
        let mut host_inputs = cpu.try_write_inputs().map_err(fail("inputs"))?;
        fill_write_inputs(host_inputs.parts_mut(), &writes);
        batch.upload(&host_batch).map_err(fail("batch upload"))?;
        inputs.upload(&host_inputs).map_err(fail("inputs upload"))?;
        let c = cpu
            .plan(&kv_canary::PlanInputs::full(&host_batch, &table))
            .and_then(|s| s.verify_head()?.write(&host_inputs))
            .map_err(fail("cpu step"))?;
        let d = dev
            .plan(&cuda::PlanInputs::full(&batch, &dtable))
            .and_then(|s| s.verify_head()?.write(&*inputs))
            .map_err(fail("device step"))?;
        stamp_kv(&mut k, &mut v, &writes);
        memory.k.copy_from(&k[..]).map_err(|e| format!("kv: {e}"))?;
        memory.v.copy_from(&v[..]).map_err(|e| format!("kv: {e}"))?;
        let c = c
            .verify_tail(TailKv::new(host_kv(&k, params)?, host_kv(&v, params)?))
            .map_err(fail("cpu tail"))?;
        let d = d
            .verify_tail(KvPair {
                k: dev_kv(&memory.k, layout, params)?,
                v: dev_kv(&memory.v, layout, params)?,
            })
            .map_err(fail("device tail"))?
            .wait()
            .map_err(fail("device report"))?;
        compare(step, &c, &d, &mut overflows, &mut found)?;
        // Before the first tamper every step is clean: the reshape reported no false violation.
        ensure!(
            tampered > 0 || d.is_clean() || !d.enabled,
            "step {step}: {d} with nothing corrupted"
        );
    }
    ensure!(
        overflows > 0 && found > 0 && tampered > 0,
        "weak run: {overflows} overflowed plans, {found} steps with violations, {tampered} \
         tampered"
    );
    same_canaries(&cpu, &dev, " after two reshapes")?;
    ensure!(
        dev.steps() == 36 && dev.total_violations() == cpu.total_violations(),
        "steps {} (36), violations GPU {} CPU {}",
        dev.steps(),
        cpu.total_violations(),
        dev.total_violations()
    );

    // A capacity past the engine's buffers is refused, naming it; the view stays usable.
    let past = UncheckedCapacity::new("write_req_capacity", BATCH_ROOM + 1).map_err(fail("cap"))?;
    let err = batch.rebind(past).map(drop).unwrap_err().to_string();
    ensure!(
        err.contains("req_pool_indices") && err.contains("past the 16 elements"),
        "rebinding past the buffer: {err}"
    );
    let lens = Arc::new(DeviceBuffer::from_slice(&[0i64; BATCH_ROOM]).map_err(|e| e.to_string())?);
    let valid =
        cuda::DeviceValidLens::from_shared(gpu, Cap::<4>, lens, None::<Arc<DeviceBuffer<i32>>>)
            .map_err(fail("valid lens view"))?;
    let grown = valid
        .rebind(Cap::<BATCH_ROOM>)
        .map_err(fail("valid lens rebind"))?;
    let short = valid
        .rebind(Cap::<{ BATCH_ROOM + 1 }>)
        .map(drop)
        .unwrap_err();
    ensure!(
        grown.capacity().get() == BATCH_ROOM && short.to_string().contains("past the 16"),
        "valid lengths rebound to {} and past the buffer: {short}",
        grown.capacity().get()
    );
    for l in &line {
        println!("    {l}");
    }
    println!(
        "    36 steps across two reshapes equal to the CPU ({found} with violations, {tampered} \
         tampered, {overflows} plans over the shrunk verify capacity); the state kept (no false \
         violation after a reshape); rebinding past the 16-row buffers refused: {err}"
    );
    Ok(())
}
