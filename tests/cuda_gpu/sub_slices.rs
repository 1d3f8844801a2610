//! Views of parts of one engine allocation (`cuda::SubSlice`, `cuda::SharedSubSlice`): the
//! batch columns and the write arrays packed in one `i64` buffer, the request table behind a
//! header in an `i32` buffer, K and V at two byte offsets of one KV buffer, every view made
//! safely. A CPU and a device canary run the same random steps (a KV fault now and then), the
//! first half over borrowed views, the second over shared ones; every report must agree.
//!
//! `unsafe` here: the engine's whole-buffer writes of its `Arc`'d allocations (`engine_write`).
#![allow(unsafe_code)]

use crate::rng::Rng;
use crate::step::{
    compare, draw_rows, fill_write_inputs, host_kv, slot, stamp_kv, Spec, ROWS, SLOTS, STRIP, WIDTH,
};
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{
    self, DeviceBatch, DeviceRealKv, DeviceRealKvSource, Gpu, SharedSubSlice, Stream, SubSlice,
};
use kv_canary::step::{Canary, KvPair, TailKv};
use kv_canary::{Cap, RealKvHashMode, RealKvParams, ReqToToken, RowLayout, WriteInputs};
use std::sync::Arc;

/// Write entries a step (the shape's).
const ENTRIES: usize = 64;
/// Where each part starts in the packed `i64` buffer: a 5-element header, the three batch
/// columns, the three write arrays.
const COLUMN_AT: [usize; 3] = [5, 5 + ROWS, 5 + 2 * ROWS];
const ARRAY_AT: [usize; 3] = [
    5 + 3 * ROWS,
    5 + 3 * ROWS + ENTRIES,
    5 + 3 * ROWS + 2 * ENTRIES,
];
const PACKED: usize = 5 + 3 * ROWS + 3 * ENTRIES + 3;
/// The table behind a 7-cell header; K and V at byte offsets 48 and 48 + pool + 32.
const TABLE_AT: usize = 7;
const POOL: usize = SLOTS * STRIP;
const K_AT: usize = 48;
const V_AT: usize = K_AT + POOL + 32;

fn cuda_err(e: cust::error::CudaError) -> String {
    format!("engine buffer: {e}")
}

/// The engine's write of a whole buffer it shares with the views (synchronous, as its own
/// kernels would write it before the step; ordered by the legacy default stream with a
/// blocking stream, fenced by the caller on the others). Also the step-graph tests' write of
/// the KV pools their graph's inputs hold.
pub fn engine_write<T: cust::memory::DeviceCopy>(
    device: &DeviceBuffer<T>,
    host: &[T],
) -> Result<(), String> {
    ensure!(
        device.len() == host.len(),
        "write of {} elements into {}",
        host.len(),
        device.len()
    );
    // SAFETY: `device` holds `host.len()` elements (checked), a live allocation of the current
    // context; `host` is a live slice of as many; the copy is synchronous (the legacy default
    // stream, ordered with the canary's blocking stream).
    let result = unsafe {
        cust::sys::cuMemcpyHtoD_v2(
            device.as_device_ptr().as_raw(),
            host.as_ptr().cast(),
            core::mem::size_of_val(host),
        )
    };
    ensure!(
        result == cust::sys::CUresult::CUDA_SUCCESS,
        "engine write: {result:?}"
    );
    Ok(())
}

/// The device fold of one half: its sub-slice of the KV buffer.
fn fold<'a, B: cuda::ViewableSlice<u8> + ?Sized>(half: &'a B) -> Result<DeviceRealKv<'a>, String> {
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let source = DeviceRealKvSource::new(half, RowLayout::dense(SLOTS, STRIP), params)
        .map_err(fail("KV source"))?;
    Ok(DeviceRealKv::new(RealKvHashMode::All, [source]))
}

pub fn step_over_sub_slices_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev =
        Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let cells: Vec<i32> = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = ReqToToken::from_vec(ROWS, WIDTH, cells.clone()).map_err(fail("table"))?;
    // The engine's three allocations.
    let mut table_host = vec![-9i32; TABLE_AT + cells.len() + 3];
    table_host[TABLE_AT..TABLE_AT + cells.len()].copy_from_slice(&cells);
    let table_buf = DeviceBuffer::from_slice(&table_host).map_err(cuda_err)?;
    let packed = Arc::new(DeviceBuffer::from_slice(&[-7i64; PACKED]).map_err(cuda_err)?);
    let bs = Arc::new(DeviceBuffer::from_slice(&[0i32]).map_err(cuda_err)?);
    let mut kv_host = vec![0xa5u8; V_AT + POOL + 16];
    let mut kv = DeviceBuffer::from_slice(&kv_host).map_err(cuda_err)?;

    let part = |at: usize, n: usize| SubSlice::new(&*packed, at..at + n).map_err(fail("part"));
    let columns = [
        part(COLUMN_AT[0], ROWS)?,
        part(COLUMN_AT[1], ROWS)?,
        part(COLUMN_AT[2], ROWS)?,
    ];
    let arrays = [
        part(ARRAY_AT[0], ENTRIES)?,
        part(ARRAY_AT[1], ENTRIES)?,
        part(ARRAY_AT[2], ENTRIES)?,
    ];
    let tsub = SubSlice::new(&table_buf, TABLE_AT..TABLE_AT + ROWS * WIDTH).map_err(fail("t"))?;
    let dtable =
        cuda::DeviceReqToToken::from_buffer(gpu, &tsub, ROWS, WIDTH).map_err(fail("table view"))?;
    let borrowed_batch = DeviceBatch::from_buffers(
        gpu,
        Cap::<ROWS>,
        (&columns[0], &columns[1], &columns[2]),
        Some(&*bs),
    )
    .map_err(fail("batch view"))?;
    let borrowed_inputs =
        WriteInputs::from_buffers(gpu, Cap::<ENTRIES>, &arrays[0], &arrays[1], &arrays[2])
            .map_err(fail("inputs view"))?;
    let shared = |at: usize, n: usize| -> Result<_, String> {
        Ok(Arc::new(
            SharedSubSlice::new(Arc::clone(&packed), at..at + n).map_err(fail("shared part"))?,
        ))
    };
    let shared_batch = DeviceBatch::from_shared(
        gpu,
        Cap::<ROWS>,
        (
            shared(COLUMN_AT[0], ROWS)?,
            shared(COLUMN_AT[1], ROWS)?,
            shared(COLUMN_AT[2], ROWS)?,
        ),
        Some(Arc::clone(&bs)),
    )
    .map_err(fail("shared batch view"))?;
    let shared_inputs = WriteInputs::from_shared(
        gpu,
        Cap::<ENTRIES>,
        shared(ARRAY_AT[0], ENTRIES)?,
        shared(ARRAY_AT[1], ENTRIES)?,
        shared(ARRAY_AT[2], ENTRIES)?,
    )
    .map_err(fail("shared inputs view"))?;

    let (mut rng, mut cached) = (Rng::new(0x5b5_11ce), [0usize; ROWS]);
    let mut host_inputs = cpu.write_inputs();
    let (mut overflows, mut found, mut faults) = (0, 0, 0);
    let mut packed_host = vec![-7i64; PACKED];
    let steps = 40;
    for step in 0..steps {
        let drawn = draw_rows(&mut rng, &mut cached, WIDTH, true);
        let batch = drawn.batch();
        let writes = drawn.written(slot);
        fill_write_inputs(host_inputs.parts_mut(), &writes);
        // The engine writes its tensors into its packed buffer (one copy of the whole buffer:
        // the canary reads the parts through its views).
        let columns = [
            batch.req_pool_indices(),
            batch.prefix_lens(),
            batch.extend_seq_lens(),
        ];
        for (at, col) in COLUMN_AT.into_iter().zip(columns) {
            packed_host[at..at + col.len()].copy_from_slice(col);
        }
        let arrays = [
            host_inputs.input_ids(),
            host_inputs.positions(),
            host_inputs.out_cache_loc(),
        ];
        for (at, arr) in ARRAY_AT.into_iter().zip(arrays) {
            packed_host[at..at + ENTRIES].copy_from_slice(arr);
        }
        engine_write(&packed, &packed_host)?;
        engine_write(
            &bs,
            &[i32::try_from(batch.len()).map_err(|e| e.to_string())?],
        )?;

        let c = cpu
            .plan(&kv_canary::PlanInputs::full(&batch, &table))
            .and_then(|s| s.verify_head()?.write(&host_inputs))
            .map_err(fail("cpu step"))?;
        let half = step >= steps / 2;
        let (dbatch, dinputs): (&DeviceBatch<Cap<ROWS>>, &WriteInputs<_, _, _>) = if half {
            (&shared_batch, &shared_inputs)
        } else {
            (&borrowed_batch, &borrowed_inputs)
        };
        let d = dev
            .plan(&cuda::PlanInputs::full(dbatch, &dtable))
            .and_then(|s| s.verify_head()?.write(dinputs))
            .map_err(fail("device step"))?;
        // The forward pass, and now and then a stray byte in a cached slot's K or V.
        let (k_host, rest) = kv_host[K_AT..].split_at_mut(POOL);
        let v_host = &mut rest[32..32 + POOL];
        stamp_kv(k_host, v_host, &writes);
        if step % 6 == 5 {
            if let Some(&(row, prefix, _)) = drawn.rows.iter().find(|r| r.1 > 1) {
                let s = slot(row, rng.below(prefix as u64 - 1) as usize) as usize;
                let half = if rng.chance(50) {
                    &mut *k_host
                } else {
                    &mut *v_host
                };
                half[s * STRIP + 2] ^= 0x08;
                faults += 1;
            }
        }
        kv.copy_from(&kv_host[..]).map_err(cuda_err)?;
        let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
        let c = c
            .verify_tail(TailKv::new(
                host_kv(&kv_host[K_AT..K_AT + POOL], params)?,
                host_kv(&kv_host[V_AT..V_AT + POOL], params)?,
            ))
            .map_err(fail("cpu tail"))?;
        let ksub = SubSlice::new(&kv, K_AT..K_AT + POOL).map_err(fail("k part"))?;
        let vsub = SubSlice::new(&kv, V_AT..V_AT + POOL).map_err(fail("v part"))?;
        let d = d
            .verify_tail(KvPair {
                k: fold(&ksub)?,
                v: fold(&vsub)?,
            })
            .map_err(fail("device tail"))?
            .wait()
            .map_err(fail("device report"))?;
        compare(step, &c, &d, &mut overflows, &mut found)?;
    }
    ensure!(
        faults > 0 && found > 0,
        "weak run: {faults} KV faults, {found} steps with violations"
    );
    let err = SubSlice::new(&*packed, 200..PACKED + 1)
        .map(drop)
        .unwrap_err()
        .to_string();
    ensure!(
        err.contains(&format!("no elements 200..{}", PACKED + 1)),
        "a range past the buffer: {err}"
    );
    println!(
        "    {steps} steps over views of parts of three engine allocations (batch columns and \
         write arrays packed in one, the table behind a header, K and V at byte offsets 48 and \
         {V_AT}), borrowed then shared, equal to the CPU ({found} with violations from {faults} \
         KV faults, {overflows} unverified); a range past the buffer refused: {err}"
    );
    Ok(())
}
