//! Two device canaries on one `Gpu`, each on its own `Stream`, driven from two threads at once:
//! their buffers, streams and reports stay apart. Each thread runs the step API's CPU-vs-GPU
//! comparison ([`run_against_cpu`]) with its own random batches; a fault injected in one
//! thread's canaries is reported by that canary alone.

use crate::step::{run_against_cpu, Draw, Run};
use crate::{ensure, fail, scaled};
use kv_canary::cuda::Gpu;

/// Steps each thread runs.
const STEPS: u64 = 400;

/// Two threads share `gpu`; thread A tampers records, thread B never does.
pub fn two_canaries_two_threads(gpu: &Gpu) -> Result<(), String> {
    let steps = scaled(STEPS) as usize;
    let (a, b) = std::thread::scope(|scope| {
        let draw = |seed, tamper| Draw {
            seed,
            steps,
            tamper,
            force_tamper: false,
            recycle_full_rows: true,
            late: false,
        };
        let a = scope.spawn(move || run_against_cpu(gpu, draw(0x7A11_0001, true)));
        let b = scope.spawn(move || run_against_cpu(gpu, draw(0x7A11_0002, false)));
        (join(a.join()), join(b.join()))
    });
    let (a, b): (Run, Run) = (
        a.map_err(|e| format!("thread A: {e}"))?,
        b.map_err(|e| format!("thread B: {e}"))?,
    );
    println!(
        "    2 threads x {steps} steps on one GPU, each canary on its own stream, equal to its CPU \
         twin: A {} records tampered, {} steps with violations ({} violations), B {} steps with \
         violations ({} violations); overflows A {} B {}",
        a.tampered, a.found, a.violations, b.found, b.violations, a.overflows, b.overflows
    );
    ensure!(
        a.tampered > 0 && a.found > 0 && a.violations > 0,
        "thread A's injected faults went unseen: {a:?}"
    );
    ensure!(
        b.tampered == 0 && b.found == 0 && b.violations == 0,
        "thread B reported violations it never had (thread A's faults leaked?): {b:?}"
    );
    Ok(())
}

/// A thread's result, a panic turned into its failure message.
fn join(outcome: std::thread::Result<Result<Run, String>>) -> Result<Run, String> {
    outcome.unwrap_or_else(|_| Err("the thread panicked".to_owned()))
}

/// Issue 12: one canary on each of two devices (`Gpu::with_ordinal(0)` and `(1)`), each driven
/// from its own thread on its own stream, each equal to its CPU twin; a fault injected on device
/// 0 is reported by device 0 alone. With fewer than two devices it says so loudly and checks
/// nothing.
pub fn two_devices_two_threads(gpu: &Gpu) -> Result<(), String> {
    // The count first: device 1 is opened only where it exists (no `cuDeviceGet` of a
    // missing ordinal, which compute-sanitizer reports as an API error).
    let count = Gpu::device_count().map_err(fail("device count"))?;
    if count < 2 {
        println!(
            "    !!! SKIPPED: this machine has {count} CUDA device(s), fewer than two \
             (cuDeviceGetCount); nothing was checked. Run it on nvidia-h200-x2. !!!"
        );
        return Ok(());
    }
    let second = Gpu::with_ordinal(1).map_err(fail("device 1"))?;
    let steps = scaled(STEPS) as usize;
    let draw = |seed, tamper| Draw {
        seed,
        steps,
        tamper,
        force_tamper: false,
        recycle_full_rows: true,
        late: true,
    };
    let second = &second;
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(move || run_against_cpu(gpu, draw(0x7A12_0001, true)));
        let b = scope.spawn(move || run_against_cpu(second, draw(0x7A12_0002, false)));
        (join(a.join()), join(b.join()))
    });
    let (a, b): (Run, Run) = (
        a.map_err(|e| format!("device 0: {e}"))?,
        b.map_err(|e| format!("device 1: {e}"))?,
    );
    println!(
        "    2 devices ({} and {}), a thread and a stream each, {steps} steps, equal to the CPU: \
         device 0 {} records tampered, {} steps with violations ({} violations); device 1 {} \
         steps with violations ({} violations)",
        gpu.name(),
        second.name(),
        a.tampered,
        a.found,
        a.violations,
        b.found,
        b.violations
    );
    ensure!(
        a.tampered > 0 && a.found > 0,
        "device 0's faults went unseen: {a:?}"
    );
    ensure!(
        b.found == 0 && b.violations == 0,
        "device 1 reported violations it never had: {b:?}"
    );
    Ok(())
}
