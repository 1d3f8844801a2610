//! A mini serving engine with the canary on every step.
//!
//! Requests arrive over time with random prompts (most start with a shared system prompt),
//! get a row of the request pool and KV slots from a refcounted paged allocator (page size 1,
//! slot 0 reserved), run chunked prefill then decode, and reuse the KV of a running request
//! with the same prompt prefix. Every step runs the step API: plan, head verify, write, the
//! forward pass (which writes fake K and V bytes per slot), tail verify (which fingerprints
//! them). `--bug NAME` makes the engine buggy; the canary reports it within a step or two.
//!
//! ```text
//! cargo run --release --example mini_engine                        # 2000 clean steps
//! cargo run --release --example mini_engine -- --bug use-after-free
//! cargo run --release --example mini_engine -- --bug off-by-one --inject-at 500 --seed 3
//! cargo run --release --example mini_engine -- --swa 16            # also an SWA-group canary
//! ```
//!
//! Bugs: use-after-free, off-by-one, stale-row, kv-scribble.

#[path = "mini_engine/sim/mod.rs"]
mod sim;

use sim::{Bug, Config, Outcome};
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: mini_engine [--bug use-after-free|off-by-one|stale-row|kv-scribble] \
                     [--steps N] [--seed N] [--inject-at STEP] [--swa WINDOW]";

fn main() -> ExitCode {
    let cfg = match parse_args(std::env::args().skip(1)) {
        Ok(cfg) => cfg,
        Err(msg) => {
            eprintln!("{msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let outcome = match sim::run(&cfg) {
        Ok(outcome) => outcome,
        Err(err) => {
            eprintln!("the canary refused a launch: {err}");
            return ExitCode::FAILURE;
        }
    };
    print_report(&cfg, &outcome, start.elapsed().as_secs_f64());
    let expected = cfg.bug.is_some() == outcome.detected_at.is_some();
    if expected && outcome.anomalies.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
    let mut cfg = Config::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--bug" => {
                let v = value()?;
                cfg.bug = Some(Bug::parse(&v).ok_or(format!("unknown bug {v:?}"))?);
            }
            "--steps" => cfg.steps = number(value()?)?,
            "--seed" => cfg.seed = number(value()?)?,
            "--inject-at" => cfg.inject_at = number(value()?)?,
            "--swa" => cfg.swa_window = Some(number(value()?)?),
            "-h" | "--help" => {
                return Err("a mini serving engine with the canary on every step".into())
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(cfg)
}

fn print_report(cfg: &Config, out: &Outcome, seconds: f64) {
    let groups = match cfg.swa_window {
        Some(w) => format!("FULL + SWA (window {w})"),
        None => "FULL".to_owned(),
    };
    println!(
        "mini engine: seed {}, {} group canary, bug: {}",
        cfg.seed,
        groups,
        cfg.bug.map_or("none", Bug::name)
    );
    let stats = &out.stats;
    println!(
        "ran {} steps in {seconds:.2} s: {} requests admitted, {} served, at most {} per batch",
        out.steps, stats.admitted, stats.served, out.max_running
    );
    println!(
        "  KV of {} tokens computed, of {} more reused from shared prompt prefixes",
        stats.tokens_written, stats.shared_tokens
    );
    println!(
        "canary: {} slot entries verified, {} stamped, {} violations",
        out.entries_checked, out.entries_written, out.violations
    );
    match (&out.bug.fired, &out.bug.injected) {
        (Some(fired), Some(injected)) if fired == injected => {
            println!("bug struck at step {}: {}", fired.0, fired.1);
        }
        (fired, injected) => {
            if let Some((step, what)) = fired {
                println!("bug fired at step {step}: {what}");
            }
            if let Some((step, what)) = injected {
                println!("cache first corrupted at step {step}: {what}");
            }
        }
    }
    match (out.detected_at, &out.bug.injected) {
        (Some(found), Some((injected, _))) => {
            let when = match found - injected {
                0 => "in the same step".to_owned(),
                1 => "1 step later".to_owned(),
                n => format!("{n} steps later"),
            };
            println!("the canary reported it at step {found}, {when}; the engine halts:");
        }
        (Some(found), None) => println!("the canary reported violations at step {found}:"),
        (None, _) if cfg.bug.is_some() => println!("the canary reported nothing"),
        (None, _) => println!("no violation in {} steps", out.steps),
    }
    for v in &out.first_violations {
        println!("  - {v}");
    }
    if !out.verdicts.is_empty() {
        println!("the guard's verdicts (kv_canary::guard, per request):");
        for v in &out.verdicts {
            println!("  - {v}");
        }
    }
    for a in &out.anomalies {
        println!("SIMULATION ANOMALY: {a}");
    }
}
