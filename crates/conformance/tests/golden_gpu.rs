//! The golden vectors on the GPU (feature `cuda`): every golden case (plan, write, verify,
//! scatter and their errors) replayed through the CUDA backend, outputs compared in full (new
//! violation rows as a multiset) — the same code as
//! `cargo run -p kv-canary-conformance --features cuda -- tests/golden --backend cuda`.
//!
//! A harness of its own (`harness = false`), so that without a CUDA device it prints `SKIPPED`
//! on the console instead of passing silently. Its arguments select as libtest's do
//! (`kv_canary_testkit::TestSelection`: a name filter or `--skip` may leave it out). The golden
//! vectors are read from `$KV_CANARY_GOLDEN_DIR`, else `tests/golden` under the current
//! directory, else under the workspace root this was built from.

use kv_canary::cuda::Gpu;
use kv_canary_conformance::{run_dir, Backend, Outcome, RunOptions};
use kv_canary_testkit::TestSelection;
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the golden vectors are (see the module docs).
fn golden_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KV_CANARY_GOLDEN_DIR") {
        return dir.into();
    }
    let here = PathBuf::from("tests/golden");
    if here.is_dir() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden")
}

/// Every golden case through the GPU path: none fails, and every plan case ran and passed.
fn golden_vectors() -> Result<(), String> {
    let options = RunOptions {
        backend: Backend::Cuda,
    };
    let report = run_dir(golden_dir(), &options).map_err(|e| format!("golden vectors: {e}"))?;
    let plan: Vec<_> = report.results.iter().filter(|r| r.op == "plan").collect();
    let failures: Vec<String> = report
        .results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail(_)))
        .map(|r| r.to_string())
        .collect();
    println!("    golden on the GPU: {}", report.summary());
    if !failures.is_empty() {
        return Err(failures.join("\n    "));
    }
    if plan.len() < 39 + 17 + 5 {
        return Err(format!("only {} plan cases ran", plan.len()));
    }
    if !plan.iter().all(|r| r.outcome == Outcome::Pass) {
        return Err("a plan case did not pass".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let name = "golden_vectors_on_the_gpu";
    let selection = TestSelection::from_env();
    let selected = selection.selects(name);
    if selection.lists() {
        if selected {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    if !selected {
        println!("\nrunning 0 GPU tests\n(1 filtered out)");
        return ExitCode::SUCCESS;
    }
    println!("\nrunning 1 GPU test");
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(kv_canary::Error::NoCudaDevice { detail }) => {
            println!("test {name} ... SKIPPED (no CUDA device)");
            println!(
                "\n!!! SKIPPED: 1 GPU test did not run: no CUDA device ({detail}). \
                 Run scripts/gpu-build.sh and scripts/gpu-run-remote.sh on a GPU machine. !!!\n"
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("GPU setup failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("device: {} ({} SMs)", gpu.name(), gpu.sm_count());
    match golden_vectors() {
        Ok(()) => {
            println!("test {name} ... ok\n\nGPU test result: ok. 1 passed; 0 failed");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!(
                "test {name} ... FAILED\n    {why}\n\nGPU test result: FAILED. 0 passed; 1 failed"
            );
            ExitCode::FAILURE
        }
    }
}
