//! Block tables and vLLM's batch columns on the GPU (issue 32): the plan kernel reads the
//! engine's own block table (`u32` or `i32` cells, blocks of B slots) and columns (`context_lens`
//! with query lengths or cumulative offsets, each of its own element type, bucketed buffers
//! longer than the batch) in place, and every plan field equals the CPU plan over the same
//! values; hostile block tables and offsets are the CPU's named errors.

use crate::rng::Rng;
use crate::{ensure, fail, scaled};
use cust::memory::DeviceBuffer;
use kv_canary::cuda::{self, DeviceBatch, DeviceLut, DeviceReqToToken, Gpu, Stream};
use kv_canary::{
    cpu, BatchColumns, BatchView, Cap, Error, IndexElement, PlanInputs, ReqToTokenView, Shape, Swa,
    VerifyPlan, WritePlan,
};

const ROWS: usize = 16;
type S = Shape<Cap<2048>, Cap<ROWS>, Cap<64>>;

/// The engine's columns of one step, `ROWS` (the bucket) long, with garbage past `bs`.
struct Columns {
    bs: usize,
    context_lens: Vec<u32>,
    query_lens: Vec<i32>,
    query_starts: Vec<i64>,
}

fn random_columns(rng: &mut Rng, tokens_per_row: i64) -> Columns {
    let bs = rng.range(0, ROWS as i64) as usize;
    let (mut context_lens, mut query_lens) = (vec![7777; ROWS], vec![5555; ROWS]);
    for r in 0..bs {
        let (c, q) = match rng.below(4) {
            0 => (0, rng.range(0, 1)),
            1 => (rng.range(1, tokens_per_row), 1),
            _ => {
                let c = rng.range(1, tokens_per_row);
                (c, rng.range(1, c.min(8)))
            }
        };
        context_lens[r] = c as u32;
        query_lens[r] = q as i32;
    }
    let mut query_starts = vec![-3i64; ROWS + 1];
    query_starts[0] = rng.range(0, 5);
    for r in 0..bs {
        query_starts[r + 1] = query_starts[r] + i64::from(query_lens[r]);
    }
    Columns {
        bs,
        context_lens,
        query_lens,
        query_starts,
    }
}

/// The device plan over the engine's buffers and the CPU plan over the same values, compared
/// field by field (`Ok(None)`), or both errors, compared (`Ok(Some(error))`).
#[allow(clippy::too_many_arguments)]
fn plan_both<T: cuda::DeviceTableCell>(
    gpu: &Gpu,
    stream: &Stream,
    plans: &mut (VerifyPlan<Cap<2048>>, WritePlan<Cap<ROWS>>),
    device: &(
        VerifyPlan<Cap<2048>, kv_canary::Device>,
        WritePlan<Cap<ROWS>, kv_canary::Device>,
    ),
    cells: &[T],
    (rows, blocks_per_row, block_size): (usize, usize, usize),
    columns: &Columns,
    starts: bool,
    swa: Option<(u64, &[i64])>,
) -> Result<Option<Error>, String> {
    let shape = S::new();
    let host_table = ReqToTokenView::block_table(rows, blocks_per_row, block_size, cells)
        .map_err(fail("host table"))?;
    let cpu = if starts {
        let batch =
            BatchView::from_query_starts(columns.bs, &columns.context_lens, &columns.query_starts)
                .map_err(fail("host batch"))?;
        cpu_plan(batch, host_table, swa, plans)
    } else {
        let batch =
            BatchView::from_query_lens(columns.bs, &columns.context_lens, &columns.query_lens)
                .map_err(fail("host batch"))?;
        cpu_plan(batch, host_table, swa, plans)
    };
    let cells_buf = DeviceBuffer::from_slice(cells).map_err(fail("cells"))?;
    let ctx = DeviceBuffer::from_slice(&columns.context_lens).map_err(fail("context_lens"))?;
    let q = DeviceBuffer::from_slice(&columns.query_lens).map_err(fail("query_lens"))?;
    let qs = DeviceBuffer::from_slice(&columns.query_starts).map_err(fail("query_starts"))?;
    let bs = DeviceBuffer::from_slice(&[columns.bs as i32]).map_err(fail("bs"))?;
    let table = DeviceReqToToken::block_table_from_buffer::<T, _>(
        gpu,
        &cells_buf,
        rows,
        blocks_per_row,
        block_size,
    )
    .map_err(fail("device table"))?;
    let batch = if starts {
        DeviceBatch::from_query_starts(gpu, Cap::<ROWS>, &ctx, &qs, Some(&bs))
    } else {
        DeviceBatch::from_query_lens(gpu, Cap::<ROWS>, &ctx, &q, Some(&bs))
    }
    .map_err(fail("device batch"))?;
    let inputs = cuda::PlanInputs::full(&batch, &table);
    let lut = swa
        .map(|(_, lut)| DeviceLut::from_host(gpu, lut))
        .transpose()
        .map_err(fail("lut"))?;
    let queued = match (swa, &lut) {
        (Some((w, _)), Some(lut)) => cuda::plan(
            stream,
            &shape,
            &inputs.with_group(cuda::Swa::new(w, lut)),
            &device.0,
            &device.1,
        ),
        _ => cuda::plan(stream, &shape, &inputs, &device.0, &device.1),
    };
    let gpu_result = queued.and_then(|()| stream.status());
    if gpu_result.is_err() {
        // The status word is sticky: clear it for the next case.
        stream.clear_status().map_err(fail("clear status"))?;
    }
    match (cpu, gpu_result) {
        (Ok(_), Ok(())) => {
            let v = device.0.to_host().map_err(fail("download"))?;
            let w = device.1.to_host().map_err(fail("download"))?;
            ensure!(v == plans.0, "verify plans differ");
            ensure!(w == plans.1, "write plans differ");
            Ok(None)
        }
        (Err(c), Err(g)) => {
            ensure!(c == g, "the CPU says {c}, the GPU {g}");
            // An error writes nothing on either side: the outputs are still equal.
            let v = device.0.to_host().map_err(fail("download"))?;
            ensure!(v == plans.0, "verify plans differ after {c}");
            Ok(Some(c))
        }
        (c, g) => Err(format!("the CPU gives {c:?}, the GPU {g:?}")),
    }
}

/// The CPU plan of `batch` over `table` (with an SWA group when `swa` is given).
fn cpu_plan<B: BatchColumns, T: IndexElement>(
    batch: BatchView<'_, B>,
    table: ReqToTokenView<'_, T>,
    swa: Option<(u64, &[i64])>,
    plans: &mut (VerifyPlan<Cap<2048>>, WritePlan<Cap<ROWS>>),
) -> Result<(), Error> {
    let (shape, inputs) = (S::new(), PlanInputs::from_views(batch, table));
    match swa {
        None => cpu::plan(&shape, &inputs, &mut plans.0, &mut plans.1),
        Some((w, lut)) => cpu::plan(
            &shape,
            &inputs.with_group(Swa::window(w).with_lut(lut)),
            &mut plans.0,
            &mut plans.1,
        ),
    }
    .map(|_| ())
}

/// Random block tables (block sizes 1, 2, 5, 16 and 32; `u32` and `i32` blocks) under random
/// bucketed batches of both vLLM layouts, with and without an SWA LUT: every plan equal to the
/// CPU's, byte for byte.
pub fn block_tables_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let shape = S::new();
    let mut rng = Rng::new(0xB10C_7AB1);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let device = (
        shape.device_verify_plan(gpu).map_err(fail("verify plan"))?,
        shape.device_write_plan(gpu).map_err(fail("write plan"))?,
    );
    let mut plans = (
        device.0.to_host().map_err(fail("download"))?,
        device.1.to_host().map_err(fail("download"))?,
    );
    let lut: Vec<i64> = (0..48 * 32 + 1)
        .map(|x| if x % 11 == 5 { -1 } else { x + 5000 })
        .collect();
    let rounds = scaled(300);
    let (mut entries, mut swa_rounds, mut u32_rounds) = (0u64, 0, 0);
    for round in 0..rounds {
        let block_size = rng.pick(&[1usize, 2, 5, 16, 32]);
        let blocks_per_row = rng.range(1, 6) as usize;
        let tokens_per_row = (blocks_per_row * block_size) as i64;
        let columns = random_columns(&mut rng, tokens_per_row);
        let starts = rng.chance(50);
        let swa = rng.chance(30).then(|| (rng.range(0, 6) as u64, &lut[..]));
        let n = ROWS * blocks_per_row;
        let dims = (ROWS, blocks_per_row, block_size);
        let result = if round % 2 == 0 {
            let cells: Vec<u32> = (0..n).map(|_| rng.range(0, 47) as u32).collect();
            u32_rounds += 1;
            plan_both(
                gpu, &stream, &mut plans, &device, &cells, dims, &columns, starts, swa,
            )
        } else {
            let cells: Vec<i32> = (0..n).map(|_| rng.range(0, 47) as i32).collect();
            plan_both(
                gpu, &stream, &mut plans, &device, &cells, dims, &columns, starts, swa,
            )
        };
        match result.map_err(|e| format!("round {round} (block size {block_size}): {e}"))? {
            None => entries += plans.0.num_valid() as u64,
            Some(e) => return Err(format!("round {round}: a valid batch failed: {e}")),
        }
        swa_rounds += usize::from(swa.is_some());
    }
    ensure!(entries > rounds * 20, "too few entries planned: {entries}");
    println!(
        "    {rounds} random block-table batches ({u32_rounds} u32, {} i32; {swa_rounds} SWA): \
         {entries} verify entries, every plan equal to the CPU's",
        rounds - u32_rounds
    );
    Ok(())
}

/// Hostile block tables and columns on the device: the CPU's named errors, nothing written.
pub fn hostile_block_tables(gpu: &Gpu) -> Result<(), String> {
    let shape = S::new();
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let device = (
        shape.device_verify_plan(gpu).map_err(fail("verify plan"))?,
        shape.device_write_plan(gpu).map_err(fail("write plan"))?,
    );
    let mut plans = (
        device.0.to_host().map_err(fail("download"))?,
        device.1.to_host().map_err(fail("download"))?,
    );
    let one_row = |context: u32, query: i32| {
        let mut c = Columns {
            bs: 1,
            context_lens: vec![0; ROWS],
            query_lens: vec![0; ROWS],
            query_starts: vec![0; ROWS + 1],
        };
        c.context_lens[0] = context;
        c.query_lens[0] = query;
        c.query_starts[1] = i64::from(query);
        c
    };
    let mut seen = Vec::new();
    // A context past the row's blocks (2 blocks of 8 hold 16 tokens).
    let cells = vec![3u32; ROWS * 2];
    let e = plan_both(
        gpu,
        &stream,
        &mut plans,
        &device,
        &cells,
        (ROWS, 2, 8),
        &one_row(18, 1),
        false,
        None,
    )?;
    seen.push(e);
    // Decreasing cumulative offsets at row 1.
    let mut c = one_row(4, 2);
    c.bs = 2;
    c.context_lens[1] = 3;
    c.query_starts = vec![0; ROWS + 1];
    c.query_starts[1] = 2;
    c.query_starts[2] = 1;
    let e = plan_both(
        gpu,
        &stream,
        &mut plans,
        &device,
        &cells,
        (ROWS, 2, 8),
        &c,
        true,
        None,
    )?;
    seen.push(e);
    // More batch rows than the table has rows.
    let mut c = one_row(3, 1);
    c.bs = 3;
    c.context_lens[1..3].copy_from_slice(&[2, 2]);
    c.query_lens[1..3].copy_from_slice(&[1, 1]);
    let small = vec![1u32; 2];
    let e = plan_both(
        gpu,
        &stream,
        &mut plans,
        &device,
        &small,
        (2, 1, 8),
        &c,
        false,
        None,
    )?;
    seen.push(e);
    // An SWA slot of a block past the LUT.
    let lut = vec![0i64; 10];
    let cells = vec![0u32; ROWS * 2];
    let e = plan_both(
        gpu,
        &stream,
        &mut plans,
        &device,
        &cells,
        (ROWS, 2, 16),
        &one_row(18, 1),
        false,
        Some((4, &lut)),
    )?;
    seen.push(e);
    for e in &seen {
        let e = e
            .as_ref()
            .ok_or("a hostile batch planned without an error")?;
        println!("    refused on both backends: {e}");
    }
    // A negative block of an i32 table: the CPU refuses before planning; the device records
    // the same error (its entries get slot 0, which no op reads).
    let cells = vec![-1i32; ROWS * 2];
    let table = ReqToTokenView::block_table(ROWS, 2, 16, &cells).map_err(fail("table"))?;
    let c = one_row(18, 1);
    let cpu_err = cpu::plan(
        &shape,
        &PlanInputs::from_views(
            BatchView::from_query_lens(1, &c.context_lens, &c.query_lens).map_err(fail("batch"))?,
            table,
        ),
        &mut plans.0,
        &mut plans.1,
    )
    .map(|_| ())
    .unwrap_err();
    let cells_buf = DeviceBuffer::from_slice(&cells).map_err(fail("cells"))?;
    let ctx = DeviceBuffer::from_slice(&c.context_lens).map_err(fail("ctx"))?;
    let q = DeviceBuffer::from_slice(&c.query_lens).map_err(fail("q"))?;
    let bs = DeviceBuffer::from_slice(&[1i32]).map_err(fail("bs"))?;
    let table = DeviceReqToToken::block_table_from_buffer::<i32, _>(gpu, &cells_buf, ROWS, 2, 16)
        .map_err(fail("device table"))?;
    let batch = DeviceBatch::from_query_lens(gpu, Cap::<ROWS>, &ctx, &q, Some(&bs))
        .map_err(fail("device batch"))?;
    let gpu_err = cuda::plan(
        &stream,
        &shape,
        &cuda::PlanInputs::full(&batch, &table),
        &device.0,
        &device.1,
    )
    .and_then(|()| stream.status())
    .unwrap_err();
    ensure!(
        matches!(
            cpu_err,
            Error::BlockOutOfRange {
                block: -1,
                block_size: 16,
                ..
            }
        ) && matches!(
            gpu_err,
            Error::BlockOutOfRange {
                row: 0,
                block: -1,
                block_size: 16,
                ..
            }
        ),
        "negative block: the CPU says {cpu_err}, the GPU {gpu_err}"
    );
    let v = device.0.to_host().map_err(fail("download"))?;
    ensure!(
        v.slot_indices()[..17].iter().all(|&s| s == 0),
        "the negative block's entries must be slot 0"
    );
    println!("    negative block: CPU {cpu_err}; GPU {gpu_err}");
    Ok(())
}

/// mistral.rs's arrays as cudarc slices (feature `cudarc`): random `u32` block tables and `u32`
/// / `i32` columns uploaded with cudarc, viewed through `block_table_from_cudarc` and
/// `from_cudarc_query_lens` / `_starts` (borrowed) or their `_shared` twins (kept by the view,
/// as an engine's struct holds them), planned on the device: every plan equal to the CPU's.
#[cfg(feature = "cudarc")]
pub fn block_tables_over_cudarc_match_cpu(gpu: &Gpu) -> Result<(), String> {
    use cudarc::driver::CudaContext;
    use std::sync::Arc;
    let cudarc_err = |e: cudarc::driver::DriverError| format!("cudarc: {e:?}");
    let engine = CudaContext::new(gpu.ordinal() as usize)
        .map_err(cudarc_err)?
        .default_stream();
    let shape = S::new();
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let device = (
        shape.device_verify_plan(gpu).map_err(fail("verify plan"))?,
        shape.device_write_plan(gpu).map_err(fail("write plan"))?,
    );
    let mut plans = (
        device.0.to_host().map_err(fail("download"))?,
        device.1.to_host().map_err(fail("download"))?,
    );
    let mut rng = Rng::new(0xC0DA_7AB1);
    let rounds = scaled(60).max(8);
    let mut entries = 0u64;
    for round in 0..rounds {
        let block_size = rng.pick(&[1usize, 16, 32]);
        let blocks_per_row = rng.range(1, 4) as usize;
        let columns = random_columns(&mut rng, (blocks_per_row * block_size) as i64);
        let starts = round % 4 >= 2;
        let shared = round % 2 == 1;
        let cells: Vec<u32> = (0..ROWS * blocks_per_row)
            .map(|_| rng.range(1, 47) as u32)
            .collect();
        let host_table = ReqToTokenView::block_table(ROWS, blocks_per_row, block_size, &cells)
            .map_err(fail("host table"))?;
        let cpu = if starts {
            let b = BatchView::from_query_starts(
                columns.bs,
                &columns.context_lens,
                &columns.query_starts,
            )
            .map_err(fail("host batch"))?;
            cpu_plan(b, host_table, None, &mut plans)
        } else {
            let b =
                BatchView::from_query_lens(columns.bs, &columns.context_lens, &columns.query_lens)
                    .map_err(fail("host batch"))?;
            cpu_plan(b, host_table, None, &mut plans)
        };
        cpu.map_err(fail("cpu plan"))?;
        let d_cells = Arc::new(engine.clone_htod(&cells).map_err(cudarc_err)?);
        let d_ctx = Arc::new(
            engine
                .clone_htod(&columns.context_lens)
                .map_err(cudarc_err)?,
        );
        let d_q = Arc::new(engine.clone_htod(&columns.query_lens).map_err(cudarc_err)?);
        let d_qs = Arc::new(
            engine
                .clone_htod(&columns.query_starts)
                .map_err(cudarc_err)?,
        );
        let d_bs = Arc::new(
            engine
                .clone_htod(&[columns.bs as i32])
                .map_err(cudarc_err)?,
        );
        engine.synchronize().map_err(cudarc_err)?;
        let dims = (ROWS, blocks_per_row, block_size);
        let queued = if shared {
            let table = DeviceReqToToken::block_table_from_cudarc_shared::<u32, _>(
                gpu,
                Arc::clone(&d_cells),
                dims.0,
                dims.1,
                dims.2,
            )
            .map_err(fail("shared table"))?;
            let batch = if starts {
                DeviceBatch::from_cudarc_query_starts_shared(
                    gpu,
                    Cap::<ROWS>,
                    Arc::clone(&d_ctx),
                    Arc::clone(&d_qs),
                    Some(Arc::clone(&d_bs)),
                )
            } else {
                DeviceBatch::from_cudarc_query_lens_shared(
                    gpu,
                    Cap::<ROWS>,
                    Arc::clone(&d_ctx),
                    Arc::clone(&d_q),
                    Some(Arc::clone(&d_bs)),
                )
            }
            .map_err(fail("shared batch"))?;
            cuda::plan(
                &stream,
                &shape,
                &cuda::PlanInputs::full(&batch, &table),
                &device.0,
                &device.1,
            )
        } else {
            let table = DeviceReqToToken::block_table_from_cudarc::<u32, _>(
                gpu, &*d_cells, dims.0, dims.1, dims.2,
            )
            .map_err(fail("table"))?;
            let batch = if starts {
                DeviceBatch::from_cudarc_query_starts(
                    gpu,
                    Cap::<ROWS>,
                    &*d_ctx,
                    &*d_qs,
                    Some(&*d_bs),
                )
            } else {
                DeviceBatch::from_cudarc_query_lens(gpu, Cap::<ROWS>, &*d_ctx, &*d_q, Some(&*d_bs))
            }
            .map_err(fail("batch"))?;
            cuda::plan(
                &stream,
                &shape,
                &cuda::PlanInputs::full(&batch, &table),
                &device.0,
                &device.1,
            )
        };
        queued
            .and_then(|()| stream.status())
            .map_err(|e| format!("round {round}: {e}"))?;
        let v = device.0.to_host().map_err(fail("download"))?;
        let w = device.1.to_host().map_err(fail("download"))?;
        ensure!(
            v == plans.0,
            "round {round} (shared {shared}): verify plans differ"
        );
        ensure!(
            w == plans.1,
            "round {round} (shared {shared}): write plans differ"
        );
        entries += v.num_valid() as u64;
    }
    println!(
        "    {rounds} random block-table batches over cudarc slices (borrowed and shared views, \
         both vLLM layouts): {entries} verify entries, every plan equal to the CPU's"
    );
    Ok(())
}
