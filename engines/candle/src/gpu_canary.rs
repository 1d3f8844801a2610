//! The canary on the GPU, as an engine author adds it (feature `cuda`): kv-canary on candle's
//! own stream (`Stream::from_cudarc`), over the engine's device arrays (u32 block tables by
//! batch row, u32 context and query lengths, a `bs` read as an i32, u32 token ids, i64 positions and slot
//! mapping, the u32 token table as the expected-token pool and the expected ids and positions
//! of the write-input check) and layer 0's K and V caches in vLLM's layouts, every view made
//! once and read in place; reports taken one step late and judged by the guard (per request);
//! idle prefix-cache blocks swept on a per-step budget; copy-on-write moving the records. The
//! twin of [`crate::canary`] (whose finding, block and idle-block helpers it shares).

use crate::batch::StepArrays;
use crate::block_allocator::BlockAllocator;
use crate::canary_common::{block_slots, findings, idle_blocks, paged, Finding, VERIFY};
use crate::config::{
    BLOCK_SIZE, MAX_BLOCKS, MAX_CONTEXT, MAX_ROWS, MAX_TOKENS, NUM_BLOCKS, NUM_SLOTS, SWEEP_BUDGET,
};
use crate::gpu::{GpuKv, HEAD_DIM, KV_HEADS};
use crate::gpu_serve::ServeArrays;
use crate::Result;
use candle_core::cuda_backend::cudarc::driver::CudaStream;
use kv_canary::cuda::{Gpu, PagedStepViews, PendingDeviceReport, Stream, StreamCanary};
use kv_canary::guard::{Guard, Policy, SweepCadence};
use kv_canary::step::SlotRows;
use kv_canary::{Cap, InputAssertOn, PagedShape, PagedStepArrays, RealKvHashMode, Shape};
use kv_canary_candle::TensorMemory;
use std::sync::Arc;

/// A step taken one step late: its number, batch rows, requests and report on its way.
type Late = (u64, SlotRows, Vec<Option<u64>>, PendingDeviceReport);

type DeviceCanary =
    StreamCanary<Cap<VERIFY>, Cap<MAX_ROWS>, Cap<MAX_TOKENS>, Cap<NUM_SLOTS>, Cap<64>>;

/// The engine's canary on the GPU.
pub struct GpuEngineCanary {
    canary: DeviceCanary,
    views: PagedStepViews<Cap<MAX_ROWS>, Cap<MAX_TOKENS>, InputAssertOn>,
    guard: Guard<u64>,
    cadence: SweepCadence,
    /// The step whose report is still on its way.
    pending: Option<Late>,
    /// Canary slots checked by steps and by sweeps (K and V each), since the canary began.
    pub checked: (u64, u64),
}

impl GpuEngineCanary {
    /// The canary on `stream` (candle's) over `a` and layer 0 of `kv`.
    pub fn new(stream: Arc<CudaStream>, a: &ServeArrays, kv: &GpuKv) -> Result<Self> {
        let gpu = Gpu::new()?;
        let stream = Stream::from_cudarc(&gpu, stream)?;
        let paged = PagedShape::new(KV_HEADS, HEAD_DIM, 2, BLOCK_SIZE);
        let arrays = PagedStepArrays {
            block_tables: TensorMemory::<u32>::shared(&a.block_tables)?,
            blocks_per_row: MAX_BLOCKS,
            block_size: BLOCK_SIZE,
            context_lens: TensorMemory::<u32>::shared(&a.context_lens)?,
            query_lens: TensorMemory::<u32>::shared(&a.query_lens)?,
            bs: Some(TensorMemory::<i32>::shared(&a.bs)?),
            input_ids: TensorMemory::<u32>::shared(&a.input_ids)?,
            positions: TensorMemory::<i64>::shared(&a.positions)?,
            slot_mapping: TensorMemory::<i64>::shared(&a.slot_mapping)?,
        };
        let views = PagedStepViews::from_cudarc(&gpu, Cap, Cap, arrays)?
            .with_expected_tokens(TensorMemory::<u32>::shared(&a.token_table)?, MAX_CONTEXT)?
            .with_expected_inputs(
                TensorMemory::<u32>::shared(&a.expected_ids)?,
                TensorMemory::<i64>::shared(&a.expected_positions)?,
            )?
            .with_kv_cache(
                TensorMemory::<u8>::shared(&kv.k[0])?,
                TensorMemory::<u8>::shared(&kv.v[0])?,
                NUM_BLOCKS,
                paged,
            )?;
        Ok(GpuEngineCanary {
            canary: DeviceCanary::full_on(stream, Shape::new(), Cap, Cap)?,
            views,
            guard: Guard::new(Policy::per_request()),
            cadence: SweepCadence::new(SWEEP_BUDGET),
            pending: None,
            checked: (0, 0),
        })
    }

    /// Runs step `step` (its arrays `a` uploaded) around `forward`: plan, head verify and write
    /// before it, tail verify after it, all queued on candle's stream; the step before's report
    /// taken and judged.
    pub fn step<R>(
        &mut self,
        step: u64,
        a: &StepArrays,
        forward: impl FnOnce() -> Result<R>,
    ) -> Result<(R, Vec<Finding>)> {
        let planned = self.canary.plan(&self.views.plan_inputs())?;
        let written = planned.verify_head()?.write(self.views.write_inputs())?;
        let out = forward()?;
        let report = written.verify_tail(self.views.fingerprints(RealKvHashMode::All))?;
        let host = paged(a);
        let rows = SlotRows::new(&host.plan_inputs()?, host.slot_mapping)?;
        let before = (self.pending).replace((step, rows, a.requests[..a.bs].to_vec(), report));
        Ok((out, self.judge(before)?))
    }

    /// The findings of a step's report (waits for it).
    fn judge(&mut self, late: Option<Late>) -> Result<Vec<Finding>> {
        let Some((step, rows, requests, report)) = late else {
            return Ok(Vec::new());
        };
        let report = report.wait()?;
        self.checked.0 = report.head_counters.slots_run() + report.tail_counters.slots_run();
        Ok(findings(
            step,
            &self.guard.judge(&report, &rows, &requests)?,
        ))
    }

    /// The last step's report, at the end of a run.
    pub fn finish(&mut self) -> Result<Vec<Finding>> {
        let last = self.pending.take();
        self.judge(last)
    }

    /// Copy-on-write moved block `from`'s KV to block `to`: its records move with it.
    pub fn copy_block(&mut self, from: u32, to: u32) -> Result<()> {
        Ok(self
            .canary
            .copy_records(&block_slots(from), &block_slots(to))?)
    }

    /// Between steps: sweeps the next idle cached slots of the prefix cache.
    pub fn sweep(&mut self, step: u64, alloc: &BlockAllocator) -> Result<Vec<Finding>> {
        let entries = self.cadence.next_entries(&idle_blocks(alloc)?)?;
        let tail = self.views.fingerprints(RealKvHashMode::All);
        let report = self.canary.sweep(entries.as_slice(), tail)?.wait()?;
        self.checked.1 = report.counters.slots_run();
        let judgement = self.guard.judge_sweep(&report)?;
        Ok(findings(step, &judgement))
    }
}
