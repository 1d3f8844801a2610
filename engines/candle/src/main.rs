//! Runs the engine: the clean run and every bug flag (or one), one line per outcome.
//!
//! ```text
//! cargo run --release -- [--steps N] [--seed S] [--bug NAME | --clean] [--no-canary]
//! ```

use kv_canary_candle_engine::backend::CpuBackend;
use kv_canary_candle_engine::bugs::Bug;
use kv_canary_candle_engine::engine::{run_suite, RunConfig};
use kv_canary_candle_engine::footprint::canary_footprint;

fn main() -> kv_canary_candle_engine::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut steps, mut seed, mut only, mut clean_only, mut canary) = (1000, 7, None, false, true);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--steps" => steps = args.next().ok_or("--steps N")?.parse()?,
            "--seed" => seed = args.next().ok_or("--seed S")?.parse()?,
            "--bug" => only = Some(args.next().ok_or("--bug NAME")?.parse::<Bug>()?),
            "--clean" => clean_only = true,
            "--no-canary" => canary = false,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let (lines, names) = canary_footprint();
    println!(
        "canary integration (src/canary.rs, src/canary_common.rs): {lines} code lines, {} kv-canary names: {}",
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
        || CpuBackend::new(seed, canary),
        |name, o, seconds| match name {
            "clean" => println!("{} [{seconds:.1} s]", o.summary(name)),
            _ => println!("{}", o.summary(name)),
        },
    )
}
