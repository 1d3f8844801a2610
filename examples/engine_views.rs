//! An engine with its own `u32` tables drives the canary through views: `req_to_token`, the
//! expected-token pool, the batch columns, the valid lengths and the per-token write inputs are
//! borrowed as they are, with no copy and no cast (`examples/engine_views/sim.rs`,
//! `Engine::step_views`). Before views, the same engine copied every array into the crate's
//! `i64`/`i32` types with 9 casts (`Engine::step_owned`); both give the same reports.
//!
//! ```text
//! cargo run --example engine_views                 # 300 clean steps
//! cargo run --example engine_views -- --bug 120    # a stray req_to_token store at step 120
//! ```

#[path = "engine_views/sim.rs"]
mod sim;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bug_at = match args.as_slice() {
        [] => None,
        [flag, step] if flag == "--bug" => match step.parse() {
            Ok(step) => Some(step),
            Err(e) => {
                eprintln!("--bug {step}: {e}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: engine_views [--bug STEP]");
            return ExitCode::from(2);
        }
    };
    let (out, reports) = match sim::run(300, bug_at, true) {
        Ok(run) => run,
        Err(err) => {
            eprintln!("the canary refused a launch: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} steps through views of the engine's u32 arrays: {} slot entries verified, {} stamped",
        out.steps, out.entries_checked, out.entries_written
    );
    match (out.detected_at, reports.last()) {
        (Some(step), Some(report)) => {
            println!("the canary reported the bug at step {step}:");
            for v in report.violations.iter().take(4) {
                println!("  - {v}");
            }
        }
        _ => println!("no violation"),
    }
    if out.detected_at.is_some() == bug_at.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
