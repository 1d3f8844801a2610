//! GPU tests of the CUDA backend (feature `cuda`): GPU-vs-CPU differential tests, graph capture
//! and replay, malformed device data, two canaries driven from two threads. A differential test runs one code path, generic over
//! `kv_canary_testkit::HostBackend`, on `kv_canary::backend::Cpu` and on
//! `kv_canary_testkit::Offload` (the GPU ops on host buffers), and compares the two. The golden vectors through the GPU path are the
//! conformance runner's GPU test (`cargo test -p kv-canary-conformance --features cuda --test
//! golden_gpu`).
//!
//! A harness of its own (`harness = false`), so that without a CUDA device every test prints
//! `SKIPPED` on the console instead of passing silently. Arguments, as libtest's
//! (`kv_canary_testkit::TestSelection`): name filters (a test runs if its name contains any of
//! them), `--skip NAME` (repeatable: a test whose name contains NAME does not run), `--exact`
//! (both match whole names); `--list` lists the tests they select; libtest's other options are
//! accepted and ignored.

mod block_tables;
mod canary;
#[cfg(feature = "faults")]
#[path = "../shared/fault_scenario.rs"]
mod fault_scenario;
#[cfg(feature = "faults")]
mod faults;
mod graph;
mod hostile;
mod moves;
mod nothing_lost;
#[cfg(feature = "cudarc")]
mod paged_views;
mod plan;
mod plan_verify;
mod probe;
mod reports;
mod reshape;
mod rng;
mod step;
mod step_graph;
mod streams;
mod sub_slices;
mod sweep;
mod threads;
mod typed_inputs;
mod views;
mod views_graph;
mod watchdog;
mod write_ends;

use kv_canary::cuda::Gpu;
use kv_canary::Error;
use kv_canary_testkit::TestSelection;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::Instant;

/// A GPU test: `Err` (or a panic) fails it.
pub type TestFn = fn(&Gpu) -> Result<(), String>;

const TESTS: &[(&str, TestFn)] = &[
    ("worked_examples_write_verify", canary::worked_example),
    ("plan_differential_vs_cpu", plan::differential),
    (
        "plan_block_tables_match_cpu",
        block_tables::block_tables_match_cpu,
    ),
    (
        "plan_hostile_block_tables",
        block_tables::hostile_block_tables,
    ),
    ("plan_large_batches_vs_cpu", plan::large_batches),
    ("plan_kernels_agree_vs_cpu", plan::kernels_agree),
    (
        "plan_malformed_rows_write_nothing",
        plan::malformed_rows_write_nothing,
    ),
    ("write_differential_vs_cpu", canary::write_differential),
    ("verify_differential_vs_cpu", canary::verify_differential),
    ("paged_real_kv_match_cpu", canary::paged_real_kv),
    ("moves_match_cpu", moves::moves_match_cpu),
    ("watchdog_matches_cpu", watchdog::watchdog_matches_cpu),
    (
        "verify_pair_differential_vs_cpu",
        canary::verify_pair_differential,
    ),
    ("scatter_differential_vs_cpu", canary::scatter_differential),
    ("ring_clear_matches_cpu", canary::ring_clear_matches_cpu),
    (
        "write_verify_malformed_device_data",
        canary::malformed_write_verify,
    ),
    ("plan_graph_capture_and_replay", graph::plan_replay),
    ("plan_checked_lut_graph_replay", graph::plan_lut_replay),
    ("step_graph_capture_and_replay", graph::step_replay),
    (
        "write_ends_match_separate_writes",
        write_ends::write_ends_match_separate_writes,
    ),
    (
        "plan_verify_head_matches_two_launches",
        plan_verify::plan_verify_head_matches_two_launches,
    ),
    (
        "step_api_on_the_gpu_matches_cpu",
        step::step_api_matches_cpu,
    ),
    (
        "step_api_launch_modes_match_cpu",
        step::launch_modes_match_cpu,
    ),
    ("step_cancel_matches_cpu", step::cancel_matches_cpu),
    (
        "step_sweep_and_head_findings_match_cpu",
        sweep::sweep_and_head_findings_match_cpu,
    ),
    ("step_k_only_canary_matches_cpu", sweep::k_only_matches_cpu),
    (
        "step_table_row_sweeps_match_cpu",
        sweep::table_row_sweeps_match_cpu,
    ),
    (
        "step_reshape_keeps_state_and_views_rebind",
        reshape::reshape_keeps_state_and_views_rebind,
    ),
    (
        "step_reports_taken_one_step_late",
        reports::reports_one_step_late,
    ),
    (
        "step_try_take_does_not_block",
        reports::try_take_does_not_block,
    ),
    (
        "step_data_error_stays_with_its_step",
        reports::data_error_stays_with_its_step,
    ),
    (
        "step_graph_owned_replays_match_cpu",
        step_graph::step_graph_replays_match_cpu,
    ),
    (
        "step_graph_engine_capture",
        step_graph::engine_captures_a_step,
    ),
    (
        "step_api_on_non_blocking_and_foreign_streams",
        streams::unordered_streams_match_cpu,
    ),
    (
        "sync_events_poll_and_order",
        streams::sync_events_poll_and_order,
    ),
    #[cfg(feature = "cudarc")]
    (
        "step_api_on_a_cudarc_stream",
        streams::cudarc_stream_matches_cpu,
    ),
    (
        "two_canaries_from_two_threads",
        threads::two_canaries_two_threads,
    ),
    (
        "two_devices_from_two_threads",
        threads::two_devices_two_threads,
    ),
    ("hostile_plan_device_data", hostile::plan_hostile),
    ("hostile_write_device_data", hostile::write_hostile),
    ("hostile_verify_device_data", hostile::verify_hostile),
    ("hostile_scatter_device_data", hostile::scatter_hostile),
    (
        "nothing_lost_verify_checksum_and_ring_count",
        nothing_lost::verify_checksum_and_ring_count,
    ),
    (
        "nothing_lost_one_slot_twice_in_one_request",
        nothing_lost::one_slot_twice_in_one_request,
    ),
    (
        "nothing_lost_seed_written_in_same_launch",
        nothing_lost::seed_written_in_same_launch,
    ),
    (
        "views_step_over_engine_memory_matches_cpu_with_no_copies",
        views::step_over_views_matches_cpu_with_no_copies,
    ),
    (
        "views_plan_over_engine_memory_matches_cpu",
        views::plan_over_views_matches_cpu,
    ),
    (
        "views_refused_past_their_allocation",
        views::views_refused_past_their_allocation,
    ),
    #[cfg(feature = "cudarc")]
    ("views_cudarc_slices_plan", views::cudarc_views_plan),
    #[cfg(feature = "cudarc")]
    (
        "block_tables_over_cudarc_match_cpu",
        block_tables::block_tables_over_cudarc_match_cpu,
    ),
    #[cfg(feature = "cudarc")]
    (
        "paged_step_views_match_cpu",
        paged_views::paged_step_views_match_cpu,
    ),
    (
        "views_step_over_sub_slices_matches_cpu",
        sub_slices::step_over_sub_slices_matches_cpu,
    ),
    ("step_graph_over_views", views_graph::step_graph_over_views),
    (
        "typed_write_inputs_match_cpu",
        typed_inputs::typed_write_inputs_match_cpu,
    ),
    #[cfg(feature = "faults")]
    ("device_faults_match_host", faults::device_faults_match_host),
    #[cfg(feature = "faults")]
    (
        "device_live_kv_flip_detected",
        faults::device_live_kv_flip_detected,
    ),
    #[cfg(feature = "faults")]
    ("device_detection_table", faults::device_detection_table),
    ("racecheck_probe_named_barrier", probe::named_barrier),
];

/// `Err(message)` unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

/// `n`, or a tenth of it (at least 1) when `KV_CANARY_GPU_QUICK` is set (sanitizer runs).
pub fn scaled(n: u64) -> u64 {
    if std::env::var_os("KV_CANARY_GPU_QUICK").is_some() {
        (n / 10).max(1)
    } else {
        n
    }
}

/// Turns any error into the test's failure message.
pub fn fail<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

fn main() -> ExitCode {
    let selection = TestSelection::from_env();
    let selected: Vec<_> = TESTS
        .iter()
        .filter(|(name, _)| selection.selects(name))
        .collect();
    if selection.lists() {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    println!("\nrunning {} GPU tests", selected.len());
    if selection.filters_by_name() {
        println!("({} filtered out)", TESTS.len() - selected.len());
    }
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(Error::NoCudaDevice { detail }) => {
            for (name, _) in &selected {
                println!("test {name} ... SKIPPED (no CUDA device)");
            }
            println!(
                "\n!!! SKIPPED: {} GPU tests did not run: no CUDA device ({detail}). \
                 Run scripts/gpu-build.sh and scripts/gpu-run-remote.sh on a GPU machine. !!!\n",
                selected.len()
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("GPU setup failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("device: {} ({} SMs)", gpu.name(), gpu.sm_count());
    let mut failed = Vec::new();
    for (name, test) in &selected {
        let start = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| test(&gpu)));
        let secs = start.elapsed().as_secs_f64();
        match outcome {
            Ok(Ok(())) => println!("test {name} ... ok ({secs:.2} s)"),
            Ok(Err(why)) => {
                println!("test {name} ... FAILED ({secs:.2} s)\n    {why}");
                failed.push(*name);
            }
            Err(_) => {
                println!("test {name} ... FAILED (panicked)");
                failed.push(*name);
            }
        }
    }
    println!(
        "\nGPU test result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
