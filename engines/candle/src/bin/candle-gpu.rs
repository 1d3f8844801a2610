//! The GPU engine's benchmark (feature `cuda`): decode steps at bs 1, 64 and 256 over ~2k-token
//! prefixes and a prefill of 8192 tokens, the model alone and guarded by the canary in PARTIAL
//! and ALL modes, timed with CUDA events on candle's stream; optionally a bug made by the real
//! kernels in the decode loop, and the canary's report of it.
//!
//! With `--serve`, the serving loop instead (`Engine` over `gpu_serve::GpuBackend`: arrivals,
//! prefix sharing, chunked prefill, decode, preemption, forks, the six bug flags): the clean run
//! and every bug flag (or one), one line each, as the CPU path's `cargo run` prints them.
//!
//! ```text
//! candle-gpu [--layers N] [--steps N] [--prefix N] [--bs 1,64,256] [--prefill N | --no-prefill]
//!            [--modes partial,all] [--bug slot-off-by-one|live-kv-flip]
//!            [--graph | --graph-model]
//! candle-gpu --serve [--layers N] [--steps N] [--seed S] [--bug NAME | --clean] [--no-canary]
//! ```

use kv_canary::RealKvHashMode;
use kv_canary_candle_engine::bugs::Bug;
use kv_canary_candle_engine::engine::{run_suite, RunConfig};
use kv_canary_candle_engine::footprint::gpu_canary_footprint;
use kv_canary_candle_engine::gpu::{layers_that_fit, Bench, GpuBug, HIDDEN, TOKENS};
use kv_canary_candle_engine::gpu_serve::GpuBackend;

/// The serving loop on the GPU: the clean run, then each bug flag (or only `--bug NAME`).
fn serve(mut args: impl Iterator<Item = String>) -> kv_canary_candle_engine::Result<()> {
    let (mut steps, mut seed, mut layers) = (1000u64, 7u64, 4usize);
    let (mut only, mut clean_only, mut canary) = (None, false, true);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} takes a value"));
        match a.as_str() {
            "--steps" => steps = value()?.parse()?,
            "--seed" => seed = value()?.parse()?,
            "--layers" => layers = value()?.parse()?,
            "--bug" => only = Some(value()?.parse::<Bug>()?),
            "--clean" => clean_only = true,
            "--no-canary" => canary = false,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let (lines, names) = gpu_canary_footprint();
    println!(
        "GPU serving loop: hidden {HIDDEN}, 32 query heads, 8 KV heads of 128, bf16, block 16, \
         {layers} layers; canary integration (src/gpu_canary.rs, src/canary_common.rs): {lines} code lines, {} \
         kv-canary names: {}",
        names.len(),
        names.join(", ")
    );
    let clean = RunConfig {
        seed,
        steps,
        bug: None,
        bug_step: 0,
        canary,
    };
    run_suite(
        &clean,
        only,
        clean_only,
        || GpuBackend::new(layers, canary),
        |name, o, seconds| println!("{} [{seconds:.1} s]", o.summary(name)),
    )
}

fn main() -> kv_canary_candle_engine::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--serve") {
        args.next();
        return serve(args);
    }
    let (mut layers, mut steps, mut prefix) = (None, 20usize, 2048usize);
    let (mut sizes, mut prefill, mut bug) = (vec![1usize, 64, 256], Some(TOKENS), None);
    let (mut graph, mut capture_model) = (false, false);
    let mut modes = vec![RealKvHashMode::Partial, RealKvHashMode::All];
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} takes a value"));
        match a.as_str() {
            "--layers" => layers = Some(value()?.parse()?),
            "--steps" => steps = value()?.parse()?,
            "--prefix" => prefix = value()?.parse()?,
            "--bs" => {
                sizes = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--prefill" => prefill = Some(value()?.parse()?),
            "--no-prefill" => prefill = None,
            "--graph" => graph = true,
            "--graph-model" => (graph, capture_model) = (true, true),
            "--modes" => {
                modes = value()?
                    .split(',')
                    .map(|m| match m {
                        "partial" => Ok(RealKvHashMode::Partial),
                        "all" => Ok(RealKvHashMode::All),
                        other => Err(format!("unknown mode {other:?}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--bug" => {
                bug = Some(match value()?.as_str() {
                    "slot-off-by-one" => GpuBug::SlotOffByOne,
                    "live-kv-flip" => GpuBug::LiveKvFlip,
                    other => return Err(format!("unknown GPU bug {other:?}").into()),
                })
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let (free, total) = candle_core::cuda_backend::cudarc::driver::result::mem_get_info()
        .unwrap_or((80 << 30, 80 << 30));
    let layers = layers.unwrap_or_else(|| layers_that_fit(free));
    println!(
        "GPU engine: hidden {HIDDEN}, 32 query heads, 8 KV heads of 128, bf16, block 16, {layers} layers; device memory {:.1} of {:.1} GiB free",
        free as f64 / (1u64 << 30) as f64,
        total as f64 / (1u64 << 30) as f64
    );
    let bench = Bench::new(layers)?;
    println!(
        "device: {} ({} SMs)",
        bench.gpu.name(),
        bench.gpu.sm_count()
    );
    if graph {
        for bs in sizes {
            for &mode in &modes {
                bench.graph_rows(bs, prefix, steps, mode, capture_model)?;
            }
        }
        return Ok(());
    }
    if let Some(bug) = bug {
        println!("bug {bug:?} at bs 4 (mode ALL):");
        bench.decode_rows(4, prefix, 12, &[RealKvHashMode::All], Some(bug))?;
        return Ok(());
    }
    for bs in sizes {
        for row in bench.decode_rows(bs, prefix, steps, &modes, None)? {
            println!("{}", row.line());
        }
    }
    if let Some(tokens) = prefill {
        for row in bench.prefill_rows(tokens, steps.min(3), &modes)? {
            println!("{}", row.line());
        }
    }
    Ok(())
}
