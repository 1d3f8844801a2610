//! Issue 34's graph experiment (feature `cuda`, `candle-gpu --graph`): can the decode step be
//! captured as a CUDA graph the way mistral.rs captures it (cudarc stream capture on candle's
//! stream), with the canary's launches inside; and if candle's ops refuse capture, the
//! canary's launches alone as a [`StepGraph`] replayed after the eager model step.
//!
//! For one decode batch (`bs` rows of `prefix` cached tokens, the same arrays every replay), it
//! times with CUDA events, in this order: the eager model step; the eager model step followed by
//! the canary-only `StepGraph`; the model step as a captured graph (when it captures); the model
//! step and the canary in one `StepGraph` (when it captures). Each line says what captured and,
//! when something refused, the driver's or candle's error. Session 25's run (H100): the model
//! step refused capture (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: cudarc's event tracking, now
//! off, [`crate::gpu::cuda_device`]), and the canary-only graph, tried after it then, failed
//! too; it now runs first.

use crate::gpu::{median, Attend, Bench, Timer, MAX_DECODE_CONTEXT, ROUNDS, ROWS, TOKENS};
use crate::Result;
use candle_core::cuda_backend::cudarc::driver::sys::{
    CUgraphInstantiate_flags, CUstreamCaptureMode,
};
use kv_canary::cuda::StepGraph;
use kv_canary::{Cap, Error, RealKvHashMode};

/// The ms of each of `steps` runs of `run` between two events on candle's stream (after 3
/// untimed ones).
fn time(bench: &Bench, steps: usize, mut run: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    let timer = Timer::new(&bench.stream)?;
    let mut times = Vec::new();
    for s in 0..steps + 3 {
        timer.start.record(&bench.stream)?;
        run()?;
        timer.end.record(&bench.stream)?;
        timer.end.synchronize()?;
        if s >= 3 {
            times.push(f64::from(timer.start.elapsed_ms(&timer.end)?));
        }
    }
    Ok(times)
}

/// Replays `graph` once and takes every report that is ready; counts those with violations.
fn replay<K: Send + 'static>(
    graph: &mut StepGraph<
        Cap<{ crate::gpu::VERIFY }>,
        Cap<ROWS>,
        Cap<TOKENS>,
        Cap<{ crate::gpu::SLOTS }>,
        Cap<64>,
        kv_canary::Full,
        K,
    >,
    dirty: &mut u64,
) -> Result<()> {
    if graph.unread() == 2 {
        if let Some((_, r)) = graph.wait()? {
            *dirty += u64::from(!r.is_clean());
        }
    }
    graph.replay()?;
    while let Some((_, r)) = graph.try_take()? {
        *dirty += u64::from(!r.is_clean());
    }
    Ok(())
}

impl Bench {
    /// The graph experiment at decode `bs` over `prefix`-token contexts, `steps` timed steps a
    /// variant, tail fingerprints under `mode`. Prints one line per variant. The model step's
    /// capture is tried only with `capture_model`: with candle 0.10.2 it captures, but its
    /// replay reads out of bounds and leaves the context unusable (session 26, H100:
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`; memcheck: `index_select`'s kernel `is_i64_bf16`). Each of
    /// candle's strided ops uploads its dims and strides from a temporary host `Vec`
    /// (`clone_htod`), so the captured copy node replays from freed host memory; mistral.rs's
    /// candle fork caches those uploads for capture (`enable_cuda_graph_htod_cache`).
    pub fn graph_rows(
        &self,
        bs: usize,
        prefix: usize,
        steps: usize,
        mode: RealKvHashMode,
        capture_model: bool,
    ) -> Result<()> {
        let mut canary = self.canary()?;
        {
            let views = self.views()?;
            self.fill(&mut canary, &views, mode, bs, prefix)?;
        }
        // One decode step's arrays, the same every replay (the token at position `prefix`).
        self.arrays
            .upload(&Self::decode_step(bs, prefix + 1, 0), false)?;
        let max = MAX_DECODE_CONTEXT;
        let (model, kv, arrays) = (self.model.clone(), self.kv.clone(), self.arrays.clone());
        let forward = move || model.forward(&kv, &arrays, bs, bs, Attend::Decode, max);
        forward()?;

        // 1. The canary alone as a StepGraph (plan, head verify, write, tail verify), replayed
        //    after the eager model step (first: a refused model capture can leave the context
        //    unable to capture, as session 25's run found). The eager step alone and the eager
        //    step with the replay alternate in rounds (the machine's drift falls on both).
        let mut graph = StepGraph::new(canary, self.views()?, move |c, v| {
            c.plan(&v.plan_inputs())?
                .verify_head()?
                .write(v.write_inputs())?
                .verify_tail(v.fingerprints(mode))
        });
        graph.capture()?;
        let (mut dirty, mut alone, mut guarded) = (0, Vec::new(), Vec::new());
        let chunk = steps.div_ceil(ROUNDS);
        for _ in 0..ROUNDS {
            alone.extend(time(self, chunk, || Ok(forward().map(drop)?))?);
            guarded.extend(time(self, chunk, || {
                forward()?;
                replay(&mut graph, &mut dirty)
            })?);
        }
        while let Some((_, r)) = graph.wait()? {
            dirty += u64::from(!r.is_clean());
        }
        let (eager, ms) = (median(alone), median(guarded));
        println!("graph bs {bs:>3} mode {mode:?}: eager model step {eager:.3} ms");
        println!(
            "graph bs {bs:>3}: eager model + canary-only StepGraph: {ms:.3} ms, canary {:.3} ms ({:.2} %), reports with violations {dirty}",
            ms - eager,
            100.0 * (ms - eager) / eager
        );
        let canary = graph.into_canary();
        if !capture_model {
            return Ok(());
        }

        // 2. The model's step alone, captured on candle's stream as mistral.rs captures it.
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        // The step's output is dropped inside the capture, so its free is captured with its
        // allocation (stream-ordered, a graph memory node pair).
        let ran = forward().map(drop);
        let captured = self
            .stream
            .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
        let model_graph = match (ran, captured) {
            (Ok(_), Ok(Some(g))) => Some(g),
            (ran, captured) => {
                println!(
                    "graph bs {bs:>3}: the model step did not capture: forward {:?}, end_capture {:?}",
                    ran.err().map(|e| e.to_string()),
                    captured.err().map(|e| e.to_string())
                );
                None
            }
        };
        let mut model_graph_ms = None;
        if let Some(g) = &model_graph {
            let ms = median(time(self, steps, || Ok(g.launch()?))?);
            model_graph_ms = Some(ms);
            println!("graph bs {bs:>3}: the model step captured: graph replay {ms:.3} ms");
        }

        // 3. The model step and the canary in one StepGraph (the forward between write and the
        //    tail verify), when the model captured.
        if model_graph.is_some() {
            let forward = forward.clone();
            let mut graph = StepGraph::new(canary, self.views()?, move |c, v| {
                let written = c
                    .plan(&v.plan_inputs())?
                    .verify_head()?
                    .write(v.write_inputs())?;
                forward().map_err(|e| Error::EngineWork {
                    detail: e.to_string(),
                })?;
                written.verify_tail(v.fingerprints(mode))
            });
            match graph.capture() {
                Ok(()) => {
                    let mut dirty = 0;
                    let ms = median(time(self, steps, || replay(&mut graph, &mut dirty))?);
                    while let Some((_, r)) = graph.wait()? {
                        dirty += u64::from(!r.is_clean());
                    }
                    let base = model_graph_ms.unwrap_or(eager);
                    println!(
                        "graph bs {bs:>3}: model + canary in one StepGraph: {ms:.3} ms, canary {:.3} ms ({:.2} % of the model graph), reports with violations {dirty}",
                        ms - base,
                        100.0 * (ms - base) / base
                    );
                }
                Err(e) => {
                    println!("graph bs {bs:>3}: model + canary StepGraph did not capture: {e}")
                }
            }
        }

        Ok(())
    }
}
