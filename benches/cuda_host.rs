//! Host cost of a typed launch against the raw driver launch it wraps (issue #5: the same host
//! time, within 2 %), with criterion, on a GPU machine:
//!
//! ```text
//! cargo bench --features cuda --bench cuda_host
//! ```
//!
//! `cuda::verify` and `cuda::plan` (capacity checks, argument struct, kernel and grid choice,
//! `cuLaunchKernel`) are timed against [`floors::RawLaunch`], which queues the very same
//! kernel, grid and argument struct with one bare `cuLaunchKernel` (what `cust::launch!` issues
//! once it holds its function and argument pointers). Launches are timed in batches of 256
//! with the stream synchronised between batches, outside the timed part, so the device never
//! backs the launch queue up. After criterion's report, an interleaved run of both prints the
//! typed/raw ratio of the medians. Without a CUDA device it says so and exits.

use criterion::{criterion_group, criterion_main, Criterion};
use kv_canary::cuda::{self, Gpu, Stream};
use kv_canary::{
    Batch, BatchRow, CanaryBuffer, Error, HealthCounters, LaunchTag, ReqToToken, TokenCheckOff,
    UncheckedCapacity, UncheckedShape, VerifyPlan, ViolationRing,
};
use kv_canary_testkit::floors::RawLaunch;
use std::time::{Duration, Instant};

const BATCH: u64 = 256;

/// One launch, typed or raw.
type Launcher<'a> = dyn FnMut() -> Result<(), Error> + 'a;

fn cap(what: &'static str, n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new(what, n).unwrap()
}

/// Host time of `iters` launches, in batches of `BATCH` with a synchronisation (untimed)
/// before each.
fn timed(stream: &Stream, iters: u64, mut launch: impl FnMut() -> Result<(), Error>) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        stream.synchronize().expect("synchronize");
        let t = Instant::now();
        for _ in 0..n {
            launch().expect("launch");
        }
        total += t.elapsed();
        left -= n;
    }
    stream.synchronize().expect("synchronize");
    total
}

/// Median nanoseconds per launch of `rounds` interleaved batches of each launch.
fn interleaved(
    stream: &Stream,
    rounds: usize,
    typed: &mut dyn FnMut() -> Result<(), Error>,
    raw: &mut dyn FnMut() -> Result<(), Error>,
) -> (f64, f64) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        a.push(timed(stream, BATCH, &mut *typed).as_nanos() as f64 / BATCH as f64);
        b.push(timed(stream, BATCH, &mut *raw).as_nanos() as f64 / BATCH as f64);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        v[v.len() / 2]
    };
    (median(&mut a), median(&mut b))
}

fn host_cost(c: &mut Criterion) {
    let gpu = match Gpu::new() {
        Ok(g) => g,
        Err(Error::NoCudaDevice { detail }) => {
            println!("\n!!! SKIPPED: the host-cost benchmark needs a GPU ({detail}) !!!\n");
            return;
        }
        Err(e) => panic!("GPU setup failed: {e}"),
    };
    let stream = Stream::new(&gpu).expect("stream");
    // Verify: a disabled plan of 1 M entries (the kernel exits at once), no real-KV sources.
    let n = 1 << 20;
    let shape = UncheckedShape::from_capacities(cap("v", n), cap("w", 1), cap("e", 1));
    let plan = VerifyPlan::from_parts(
        cap("v", n),
        vec![0; n],
        vec![-1; n],
        vec![0; n],
        vec![-1; n],
        0,
        0,
    )
    .and_then(|p| p.to_device(&gpu))
    .expect("verify plan");
    let canary = CanaryBuffer::try_with_capacity(cap("slots", 1 << 16))
        .and_then(|c| c.to_device(&gpu))
        .expect("canary");
    let ring = ViolationRing::try_with_capacity(cap("ring", 64))
        .and_then(|r| r.to_device(&gpu))
        .expect("ring");
    let counters = HealthCounters::new().to_device(&gpu).expect("counters");
    let launch = cuda::DeviceSettings::new(LaunchTag::TailKFull);
    let raw_verify = RawLaunch::verify(
        &stream,
        &shape,
        &plan,
        TokenCheckOff,
        &launch,
        &canary,
        &ring,
        &counters,
    )
    .expect("raw verify");
    // Plan: one decode row of 2048 tokens.
    let pshape = UncheckedShape::from_capacities(cap("v", 2048), cap("w", 1), cap("e", 1));
    let table = ReqToToken::from_vec(2, 2048, (0..4096).collect()).expect("table");
    let dtable = cuda::DeviceReqToToken::from_host(&gpu, &table).expect("table");
    let batch = pshape.device_batch(&gpu).expect("batch");
    let host_batch: Batch = [BatchRow {
        req_pool_index: 1,
        prefix_len: 2048,
        extend_len: 1,
    }]
    .into_iter()
    .collect();
    batch.upload(&host_batch).expect("upload");
    let (vplan, wplan) = (
        pshape.device_verify_plan(&gpu).expect("verify plan"),
        pshape.device_write_plan(&gpu).expect("write plan"),
    );
    let inputs = cuda::PlanInputs::full(&batch, &dtable);
    let raw_plan = RawLaunch::plan(&stream, &pshape, &inputs, &vplan, &wplan).expect("raw plan");

    let mut typed_verify = || {
        cuda::verify(
            &stream,
            &shape,
            &plan,
            TokenCheckOff,
            &launch,
            &canary,
            &ring,
            &counters,
        )
    };
    let mut typed_plan = || cuda::plan(&stream, &pshape, &inputs, &vplan, &wplan);
    let mut group = c.benchmark_group("host cost of a launch");
    group.bench_function("cuda::verify (typed)", |b| {
        b.iter_custom(|iters| timed(&stream, iters, &mut typed_verify))
    });
    group.bench_function("verify, raw cuLaunchKernel", |b| {
        b.iter_custom(|iters| timed(&stream, iters, || raw_verify.queue()))
    });
    group.bench_function("cuda::plan (typed)", |b| {
        b.iter_custom(|iters| timed(&stream, iters, &mut typed_plan))
    });
    group.bench_function("plan, raw cuLaunchKernel", |b| {
        b.iter_custom(|iters| timed(&stream, iters, || raw_plan.queue()))
    });
    group.finish();
    stream.status().expect("no kernel error");

    let mut raw_verify_launch = || raw_verify.queue();
    let mut raw_plan_launch = || raw_plan.queue();
    let pairs: [(&str, &mut Launcher, &mut Launcher); 2] = [
        ("verify", &mut typed_verify, &mut raw_verify_launch),
        ("plan", &mut typed_plan, &mut raw_plan_launch),
    ];
    for (name, typed, raw) in pairs {
        let (t, r) = interleaved(&stream, 200, typed, raw);
        println!(
            "host cost, {name}: typed {t:.0} ns, raw {r:.0} ns a launch (median of 200 interleaved batches of {BATCH}): typed/raw = {:.3} ({:+.1} %)",
            t / r,
            (t / r - 1.0) * 100.0
        );
    }
    stream.status().expect("no kernel error");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = host_cost
}
criterion_main!(benches);
