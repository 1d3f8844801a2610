//! `PagedStepViews` (feature `cudarc`): a vLLM-style engine's step arrays as cudarc slices (u32
//! block tables, u32 context and query lengths, a device i32 `bs`, u32 token ids, i64
//! positions and slot mapping with -1 padding, a u32 token table and the write-input check's
//! expected ids and positions) drive the device canary, step after step, and every report
//! equals the CPU canary's over the same arrays as host slices (`PagedStepSlices`). Faults
//! (a wrong expected id, a stale token-table cell, a slot mapping gone astray) make violations
//! the two must agree on.

use crate::rng::Rng;
use crate::step::compare;
use crate::{ensure, fail, scaled};
use cudarc::driver::{CudaContext, CudaSlice, DriverError};
use kv_canary::cuda::{Gpu, PagedStepViews, Stream, TailKvOnDevice};
use kv_canary::step::{Canary, TailKv};
use kv_canary::{Cap, ExpectedTokenTableView, PagedStepSlices, Shape};
use std::sync::Arc;

const ROWS: usize = 8;
const BLOCKS_PER_ROW: usize = 4;
const BLOCK: usize = 4;
const WIDTH: usize = BLOCKS_PER_ROW * BLOCK;
const TOKENS: usize = 64;
/// Blocks 1..=32 belong to the rows; block 33 is where a slot mapping goes astray.
const SLOTS: usize = (ROWS * BLOCKS_PER_ROW + 2) * BLOCK;
const ASTRAY: i64 = ((ROWS * BLOCKS_PER_ROW + 1) * BLOCK) as i64;
type Spec = Shape<Cap<{ ROWS * WIDTH }>, Cap<ROWS>, Cap<TOKENS>>;

/// One step's arrays on the host, as the engine fills them.
struct Arrays {
    block_tables: Vec<u32>,
    token_table: Vec<u32>,
    context_lens: Vec<u32>,
    query_lens: Vec<u32>,
    bs: usize,
    input_ids: Vec<u32>,
    positions: Vec<i64>,
    slot_mapping: Vec<i64>,
    expected_ids: Vec<u32>,
    expected_positions: Vec<i64>,
}

impl Arrays {
    fn slices(&self) -> PagedStepSlices<'_> {
        PagedStepSlices {
            block_tables: &self.block_tables,
            blocks_per_row: BLOCKS_PER_ROW,
            block_size: BLOCK,
            context_lens: &self.context_lens,
            query_lens: &self.query_lens,
            bs: self.bs,
            input_ids: &self.input_ids,
            positions: &self.positions,
            slot_mapping: &self.slot_mapping,
        }
    }
}

pub fn paged_step_views_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let cudarc_err = |e: DriverError| format!("cudarc: {e:?}");
    let engine = CudaContext::new(gpu.ordinal() as usize)
        .map_err(cudarc_err)?
        .default_stream();
    let up = |data: &[u32]| -> Result<Arc<CudaSlice<u32>>, String> {
        Ok(Arc::new(engine.clone_htod(data).map_err(cudarc_err)?))
    };
    let up64 = |data: &[i64]| -> Result<Arc<CudaSlice<i64>>, String> {
        Ok(Arc::new(engine.clone_htod(data).map_err(cudarc_err)?))
    };
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut cpu = Canary::full(Spec::new(), Cap::<SLOTS>, Cap::<64>);
    let mut dev =
        Canary::full_on(stream, Spec::new(), Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let mut rng = Rng::new(0x9A6E_D5EB);
    // Row r owns blocks 1 + r * BLOCKS_PER_ROW .. (block 0 unused), its tokens in the token table.
    let mut a = Arrays {
        block_tables: (0..ROWS * BLOCKS_PER_ROW).map(|c| 1 + c as u32).collect(),
        token_table: vec![0; ROWS * WIDTH],
        context_lens: vec![0; ROWS],
        query_lens: vec![0; ROWS],
        bs: 0,
        input_ids: vec![0; TOKENS],
        positions: vec![0; TOKENS],
        slot_mapping: vec![-1; TOKENS],
        expected_ids: vec![0; TOKENS],
        expected_positions: vec![0; TOKENS],
    };
    let mut cached = [0usize; ROWS];
    let steps = scaled(200).max(40) as usize;
    let (mut overflows, mut found, mut faults) = (0, 0, [0usize; 3]);
    for step in 0..steps {
        // The batch: rows 0..bs, each a prefill chunk, a decode, or (full) a new request.
        a.bs = 1 + rng.below(ROWS as u64) as usize;
        let mut n = 0;
        for (r, cached) in cached.iter_mut().enumerate().take(a.bs) {
            if *cached >= WIDTH {
                *cached = 0;
            }
            let q = match *cached {
                0 => 1 + rng.below(6) as usize,
                _ if rng.chance(20) => 1 + rng.below(3) as usize,
                _ => 1,
            }
            .min(WIDTH - *cached);
            for i in 0..q {
                let pos = *cached + i;
                let id = rng.below(30_000) as u32;
                a.token_table[r * WIDTH + pos] = id;
                let block = a.block_tables[r * BLOCKS_PER_ROW + pos / BLOCK] as usize;
                a.input_ids[n] = id;
                a.positions[n] = pos as i64;
                a.slot_mapping[n] = (block * BLOCK + pos % BLOCK) as i64;
                a.expected_ids[n] = id;
                a.expected_positions[n] = pos as i64;
                n += 1;
            }
            *cached += q;
            (a.context_lens[r], a.query_lens[r]) = (*cached as u32, q as u32);
        }
        // Padding past the batch: garbage lengths, -1 slots.
        for r in a.bs..ROWS {
            (a.context_lens[r], a.query_lens[r]) = (999, 999);
        }
        a.slot_mapping[n..].fill(-1);
        a.input_ids[n..].fill(0);
        a.expected_ids[n..].fill(0);
        // One fault every few steps, each a violation both canaries must report alike.
        let mut stale = None;
        match step % 8 {
            3 => {
                a.expected_ids[rng.below(n as u64) as usize] ^= 1;
                faults[0] += 1;
            }
            5 if cached[0] > 2 => {
                let cell = rng.below(cached[0] as u64 - 1) as usize;
                stale = Some((cell, a.token_table[cell]));
                a.token_table[cell] ^= 4;
                faults[1] += 1;
            }
            7 => {
                // Into a block no row holds: the row's own slot stays unwritten.
                let t = rng.below(n as u64) as usize;
                a.slot_mapping[t] = ASTRAY + a.slot_mapping[t] % BLOCK as i64;
                faults[2] += 1;
            }
            _ => {}
        }
        let host = a.slices();
        let tokens = ExpectedTokenTableView::new(ROWS, WIDTH, &a.token_table)
            .map_err(fail("token table"))?;
        let inputs = (host.plan_inputs().map_err(fail("host inputs"))?)
            .with_expected(tokens.with_valid_lens(&a.context_lens));
        let write = (host
            .write_inputs(Cap::<TOKENS>)
            .map_err(fail("host write"))?)
        .with_expected(&a.expected_ids, &a.expected_positions)
        .map_err(fail("host expected"))?;
        let c = cpu
            .plan(&inputs)
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&write))
            .and_then(|s| s.verify_tail(TailKv::NONE))
            .map_err(|e| format!("step {step}: CPU: {e}"))?;
        // The same arrays on the device, viewed in place.
        let arrays = kv_canary::PagedStepArrays {
            block_tables: up(&a.block_tables)?,
            blocks_per_row: BLOCKS_PER_ROW,
            block_size: BLOCK,
            context_lens: up(&a.context_lens)?,
            query_lens: up(&a.query_lens)?,
            bs: Some(Arc::new(
                engine.clone_htod(&[a.bs as i32]).map_err(cudarc_err)?,
            )),
            input_ids: up(&a.input_ids)?,
            positions: up64(&a.positions)?,
            slot_mapping: up64(&a.slot_mapping)?,
        };
        let (token_table, expected_ids, expected_positions) = (
            up(&a.token_table)?,
            up(&a.expected_ids)?,
            up64(&a.expected_positions)?,
        );
        engine.synchronize().map_err(cudarc_err)?;
        let views = PagedStepViews::from_cudarc(gpu, Cap::<ROWS>, Cap::<TOKENS>, arrays)
            .and_then(|v| v.with_expected_tokens(token_table, WIDTH))
            .and_then(|v| v.with_expected_inputs(expected_ids, expected_positions))
            .map_err(fail("views"))?;
        let d = dev
            .plan(&views.plan_inputs())
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(views.write_inputs()))
            .and_then(|s| s.verify_tail(TailKvOnDevice::NONE))
            .and_then(|p| p.wait())
            .map_err(|e| format!("step {step}: GPU: {e}"))?;
        compare(step, &c, &d, &mut overflows, &mut found)?;
        ensure!(
            c.head_counters.slots_run() == d.head_counters.slots_run(),
            "step {step}: slots run differ"
        );
        if let Some((cell, id)) = stale {
            a.token_table[cell] = id;
        }
    }
    ensure!(
        found > 0 && faults.iter().all(|&f| f > 0),
        "the faults must make violations: {found} reports with violations, faults {faults:?}"
    );
    println!(
        "    {steps} steps over PagedStepViews (cudarc: u32 tables and lengths, device bs, i64 \
         slots, token table, expected inputs): every report equal to the CPU's over \
         PagedStepSlices; faults (expected id, stale token, slot astray) {faults:?}, {found} \
         reports with violations, {overflows} overflowed plans"
    );
    Ok(())
}
