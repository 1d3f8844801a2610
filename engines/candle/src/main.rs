//! Runs the engine: the clean run and every bug flag (or one), one line per outcome.
//!
//! ```text
//! cargo run --release -- [--steps N] [--seed S] [--bug NAME | --clean] [--no-canary]
//! ```

use kv_canary_candle_engine::bugs::Bug;
use kv_canary_candle_engine::engine::{Engine, RunConfig};
use kv_canary_candle_engine::footprint::canary_footprint;
use std::time::Instant;

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
        "canary integration (src/canary.rs): {lines} code lines, {} kv-canary names: {}",
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
    if only.is_none() {
        let t = Instant::now();
        let o = Engine::run(&clean)?;
        println!(
            "{} [{:.1} s]",
            o.summary("clean"),
            t.elapsed().as_secs_f64()
        );
    }
    if clean_only {
        return Ok(());
    }
    for bug in Bug::ALL
        .into_iter()
        .filter(|b| only.is_none_or(|o| o == *b))
    {
        let config = RunConfig {
            bug: Some(bug),
            bug_step: 60,
            ..clean
        };
        let o = Engine::run(&config)?;
        println!("{}", o.summary(bug.name()));
    }
    Ok(())
}
