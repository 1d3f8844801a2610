//! The conformance runner's command line: replays every golden case in a directory and prints
//! one line per case, then `N passed, M failed, K skipped`.
//!
//! ```text
//! cargo run --release -p kv-canary-conformance -- tests/golden [--backend cpu]
//! cargo run --release -p kv-canary-conformance --features cuda -- tests/golden --backend cuda
//! ```
//!
//! Exits with 1 when a case failed or the directory holds no cases, 2 on a usage error.

use kv_canary_conformance::{run_dir, Backend, RunOptions};
use std::process::ExitCode;

fn usage() -> String {
    let names: Vec<_> = Backend::all().iter().map(|b| b.name()).collect();
    format!(
        "usage: kv-canary-conformance DIR [--backend {}]",
        names.join("|")
    )
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<(String, RunOptions), String> {
    let mut dir = None;
    let mut options = RunOptions::default();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--backend" => {
                let name = args.next().ok_or("--backend needs a value")?;
                options.backend =
                    Backend::from_name(&name).ok_or(format!("unknown backend {name:?}"))?;
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s:?}")),
            _ if dir.is_some() => return Err(format!("unexpected argument {arg:?}")),
            _ => dir = Some(arg),
        }
    }
    Ok((dir.ok_or("missing DIR")?, options))
}

fn main() -> ExitCode {
    let (dir, options) = match parse_args(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("conformance: {why}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let report = match run_dir(&dir, &options) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("conformance: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    if report.results.is_empty() {
        eprintln!("conformance: no golden cases in {dir}");
        return ExitCode::FAILURE;
    }
    if report.failed() > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
