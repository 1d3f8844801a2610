//! The GPU engine's benchmark (feature `cuda`): decode steps at bs 1, 64 and 256 over ~2k-token
//! prefixes and a prefill of 8192 tokens, the model alone and guarded by the canary in PARTIAL
//! and ALL modes, timed with CUDA events on candle's stream; optionally a bug made by the real
//! kernels in the decode loop, and the canary's report of it.
//!
//! ```text
//! candle-gpu [--layers N] [--steps N] [--prefix N] [--bs 1,64,256] [--prefill N | --no-prefill]
//!            [--modes partial,all] [--bug slot-off-by-one|live-kv-flip]
//! ```

use kv_canary::RealKvHashMode;
use kv_canary_candle_engine::gpu::{layers_that_fit, Bench, GpuBug, HIDDEN, TOKENS};

fn main() -> kv_canary_candle_engine::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut layers, mut steps, mut prefix) = (None, 20usize, 2048usize);
    let (mut sizes, mut prefill, mut bug) = (vec![1usize, 64, 256], Some(TOKENS), None);
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
        for row in bench.prefill_rows(tokens, steps.min(10), &modes)? {
            println!("{}", row.line());
        }
    }
    Ok(())
}
