//! GPU benchmark of the CUDA backend (issue #5): every op on the workloads of the issue, timed
//! with CUDA events after warm-up, median of `--reps` (default 200) repetitions, eager launches
//! and CUDA-graph replay (the stream idle before each repetition, or "queued" behind a spin
//! kernel so that the events time the device alone), warm and cold L2, beside the hardware
//! floors measured in the same run (1 GiB device-to-device copy and memset, the verify gather
//! floor, the write chain floor, an empty kernel, kernels of n dependent loads, the SWA plan's
//! memory traffic alone) and a sweep of the plan kernels and grids.
//!
//! ```text
//! cargo bench --features cuda --bench cuda -- [--out DIR] [--reps N] [--only plan|verify|write]
//!     [--filter TEXT] [--quick]
//! ```
//!
//! `--filter` keeps the workloads whose name contains TEXT (for profiling one of them).
//!
//! Writes `DIR/bench.csv` and `DIR/bench.json` (default DIR: `target/cuda-bench`) and prints a
//! table per op with SGLang's numbers and the targets beside ours. `scripts/bench-plot.py`
//! draws the PNG from the CSV. Without a CUDA device it says so and exits 0.

mod plan;
mod timing;
mod verify;
mod write;

use kv_canary::cuda::{Gpu, Stream};
use kv_canary::Error;
use kv_canary_testkit::floors;
use std::io::Write as _;
use std::path::PathBuf;
use timing::{Lead, Row};

/// Command-line options.
pub struct Options {
    pub out: PathBuf,
    pub reps: usize,
    pub only: Option<String>,
    pub filter: Option<String>,
    pub quick: bool,
}

impl Options {
    /// Whether the workload `name` runs (`--filter`).
    pub fn wants(&self, name: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| name.contains(f))
    }
}

fn options() -> Options {
    let mut o = Options {
        out: PathBuf::from("target/cuda-bench"),
        reps: 200,
        only: None,
        filter: None,
        quick: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => o.out = args.next().expect("--out DIR").into(),
            "--reps" => o.reps = args.next().expect("--reps N").parse().expect("--reps N"),
            "--only" => o.only = args.next(),
            "--filter" => o.filter = args.next(),
            "--quick" => o.quick = true,
            _ => {} // cargo bench passes --bench
        }
    }
    o
}

fn main() {
    let o = options();
    let mut gpu = match Gpu::new() {
        Ok(g) => g,
        Err(Error::NoCudaDevice { detail }) => {
            println!("\n!!! SKIPPED: the CUDA benchmark needs a GPU ({detail}) !!!\n");
            return;
        }
        Err(e) => panic!("GPU setup failed: {e}"),
    };
    println!(
        "device: {} ({} SMs), reps {}",
        gpu.name(),
        gpu.sm_count(),
        o.reps
    );
    std::fs::create_dir_all(&o.out).expect("create the output directory");
    let mut rows = Vec::new();
    let (copy_gbs, fill_gbs) = {
        let stream = Stream::new(&gpu).expect("stream");
        (
            copy_roofline(&stream, &o).expect("copy roofline"),
            fill_roofline(&stream, &o).expect("fill roofline"),
        )
    };
    println!("device-to-device copy of 1 GiB: {copy_gbs:.0} GB/s (read + write)");
    println!("memset of 1 GiB: {fill_gbs:.0} GB/s (write only)");
    rows.push(Row::floor(
        "copy",
        "d2d copy 1 GiB",
        1 << 30,
        2.0 * (1u64 << 30) as f64 / copy_gbs / 1e3,
    ));
    rows.push(Row::floor(
        "fill",
        "memset 1 GiB",
        1 << 30,
        (1u64 << 30) as f64 / fill_gbs / 1e3,
    ));
    let wants = |op: &str| o.only.as_deref().is_none_or(|x| x == op);
    if wants("plan") {
        rows.extend(plan::run(&mut gpu, &o).expect("plan benchmark"));
    }
    if wants("verify") {
        rows.extend(verify::run(&gpu, &o).expect("verify benchmark"));
    }
    if wants("write") {
        rows.extend(write::run(&gpu, &o).expect("write benchmark"));
    }
    let csv = o.out.join("bench.csv");
    let mut f = std::fs::File::create(&csv).expect("bench.csv");
    writeln!(f, "{}", Row::CSV_HEADER).unwrap();
    for r in &rows {
        writeln!(f, "{}", r.csv()).unwrap();
    }
    let json = o.out.join("bench.json");
    let body: Vec<String> = rows.iter().map(Row::json).collect();
    std::fs::write(
        &json,
        format!(
            "{{\"device\":\"{}\",\"sm_count\":{},\"reps\":{},\"copy_gb_per_s\":{copy_gbs:.1},\"fill_gb_per_s\":{fill_gbs:.1},\"rows\":[\n{}\n]}}\n",
            gpu.name(),
            gpu.sm_count(),
            o.reps,
            body.join(",\n")
        ),
    )
    .expect("bench.json");
    println!("\nwrote {} and {}", csv.display(), json.display());
}

/// A memset of 1 GiB, median of 20: GB/s of writes alone (the plan's roofline: it writes 32
/// bytes an entry and reads 4 to 8).
fn fill_roofline(stream: &Stream, o: &Options) -> Result<f64, Error> {
    let n = 1usize << 30;
    let fill = floors::L2Flush::new(n)?;
    let reps = if o.quick { 5 } else { 20 };
    let stats = timing::time(stream, Lead::Idle, 3, reps, || fill.queue(stream))?;
    Ok(n as f64 / (stats.median_us * 1e3))
}

/// Device-to-device copy of 1 GiB, median of 20: GB/s counting bytes read and written.
fn copy_roofline(stream: &Stream, o: &Options) -> Result<f64, Error> {
    let n = 1usize << 30;
    let src =
        cust::memory::DeviceBuffer::<u8>::from_slice(&vec![1u8; n]).map_err(|e| Error::Cuda {
            call: "cuMemAlloc",
            code: e.into(),
        })?;
    let dst =
        cust::memory::DeviceBuffer::<u8>::from_slice(&vec![0u8; n]).map_err(|e| Error::Cuda {
            call: "cuMemAlloc",
            code: e.into(),
        })?;
    let reps = if o.quick { 5 } else { 20 };
    let stats = timing::time(stream, Lead::Idle, 3, reps, || {
        floors::device_copy(stream, &dst, &src)
    })?;
    Ok(2.0 * n as f64 / (stats.median_us * 1e3))
}
