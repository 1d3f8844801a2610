//! Asynchronous device reports: taken one step late (step N+1 queued before step N's report
//! is read), each equal to the CPU's; `try_take` never blocks while the stream is busy.

use crate::step::{run_against_cpu, Draw, Run};
use crate::{ensure, fail};
use kv_canary::cuda::{self, Gpu, Polled, Stream};
use kv_canary::step::Canary;
use kv_canary::{Batch, Cap, ReqToToken, Shape};
use kv_canary_testkit::floors::Floors;
use std::time::Instant;

/// Step N+1 is queued before step N's report is taken; every report equals the CPU's.
pub fn reports_one_step_late(gpu: &Gpu) -> Result<(), String> {
    let Run {
        tampered,
        found,
        overflows,
        violations,
    } = run_against_cpu(
        gpu,
        Draw {
            seed: 0x0057_E9A1,
            steps: 60,
            tamper: true,
            force_tamper: false,
            recycle_full_rows: false,
            late: true,
        },
    )?;
    println!(
        "    60 steps, each report taken after the next step was queued: equal to the CPU's \
         ({tampered} tampered, {found} steps with violations, {violations} violations, \
         {overflows} overflows)"
    );
    ensure!(
        tampered > 0 && found > 0 && overflows > 0,
        "weak generator: {tampered} tampered, {found} found, {overflows} overflows"
    );
    Ok(())
}

/// A small FULL canary on the device.
type Small = Canary<Cap<8>, Cap<4>, Cap<16>, Cap<64>, Cap<16>, kv_canary::Full, Stream>;

/// A 200 ms spin queued ahead of a step: `try_take` returns the pending report at once, and
/// `wait` then delivers it; with reports taken one step late, two pinned stagings serve 20
/// steps.
///
/// Under compute-sanitizer (`KV_CANARY_UNDER_SANITIZER`, set by `gpu-run-remote.sh`) launches
/// may run serialised, so the spin can finish before `try_take`: the test then says so and
/// checks nothing.
pub fn try_take_does_not_block(gpu: &Gpu) -> Result<(), String> {
    if std::env::var_os("KV_CANARY_UNDER_SANITIZER").is_some() {
        println!("    SKIPPED under compute-sanitizer: its serialised launches void the timing");
        return Ok(());
    }
    try_take_on(gpu)
}

fn try_take_on(gpu: &Gpu) -> Result<(), String> {
    let floors = Floors::new(gpu).map_err(fail("floors"))?;
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut canary =
        Canary::full_on(stream, shape, Cap::<64>, Cap::<16>).map_err(fail("canary"))?;
    let inputs = canary.try_write_inputs().map_err(fail("inputs"))?;
    let batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let table = ReqToToken::from_vec(4, 8, (0..32).collect()).map_err(fail("table"))?;
    let table = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    batch
        .upload(&Batch::from_columns([1], [0], [3]))
        .map_err(fail("batch"))?;
    let step = |canary: &mut Small| {
        canary
            .plan(&cuda::PlanInputs::full(&batch, &table))?
            .verify_head()?
            .write(&inputs)?
            .verify_tail(cuda::TailKvOnDevice::NONE)
    };
    // A warm-up step: loads the kernel modules (a load can synchronise) outside the timing.
    let warm = step(&mut canary).map_err(fail("step"))?;
    ensure!(
        warm.wait().map_err(fail("wait"))?.is_clean(),
        "warm-up step not clean"
    );
    floors
        .spin(canary.backend(), 200_000_000)
        .map_err(fail("spin"))?;
    let t = Instant::now();
    let pending = step(&mut canary).map_err(fail("step"))?;
    let queued_us = t.elapsed().as_micros();
    let pending = match pending.try_take().map_err(fail("try_take"))? {
        Polled::Pending(p) => p,
        Polled::Ready(r) => return Err(format!("report ready behind a 200 ms spin: {r:?}")),
    };
    let polled_us = t.elapsed().as_micros();
    let report = pending.wait().map_err(fail("wait"))?;
    ensure!(report.is_clean(), "first step not clean: {report:?}");
    let mut previous = None;
    for n in 0..20 {
        let pending = step(&mut canary).map_err(fail("step"))?;
        if let Some(p) = previous.replace(pending) {
            let r = cuda::PendingDeviceReport::wait(p).map_err(fail("wait"))?;
            ensure!(r.is_clean(), "step {n} not clean: {r:?}");
        }
    }
    let last = previous.ok_or("no last step")?;
    ensure!(
        last.wait().map_err(fail("wait"))?.is_clean(),
        "last step not clean"
    );
    let stagings = canary.backend().report_stagings_allocated();
    println!(
        "    a step queued behind a 200 ms spin in {queued_us} us, try_take pending after \
         {polled_us} us; 20 more steps taken one late used {stagings} pinned stagings"
    );
    ensure!(
        polled_us < 100_000,
        "queueing a step and polling took {polled_us} us: something blocked on the spin"
    );
    ensure!(
        stagings == 2,
        "{stagings} pinned stagings allocated, expected 2"
    );
    ensure!(
        canary.total_violations() == 0,
        "violations counted on a clean run"
    );
    Ok(())
}

/// A step whose device data is malformed (a request-pool row past the table) reports the
/// error the CPU's plan returns, and only that step: the step queued behind it before its report
/// was taken, and the steps after, report their own results, clean (a step's report consumes
/// the stream's status word: its readback zeroes it once copied; it used to stay set, failing
/// every later report).
pub fn data_error_stays_with_its_step(gpu: &Gpu) -> Result<(), String> {
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut canary =
        Canary::full_on(stream, shape, Cap::<64>, Cap::<16>).map_err(fail("canary"))?;
    let inputs = canary.try_write_inputs().map_err(fail("inputs"))?;
    let bad_batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let good_batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let host_table = ReqToToken::from_vec(4, 8, (0..32).collect()).map_err(fail("table"))?;
    let table = cuda::DeviceReqToToken::from_host(gpu, &host_table).map_err(fail("table"))?;
    // Row 9 of a 4-row table, with a prefix to read there.
    let bad = Batch::from_columns([9], [2], [1]);
    bad_batch.upload(&bad).map_err(fail("batch"))?;
    good_batch
        .upload(&Batch::from_columns([1], [0], [3]))
        .map_err(fail("batch"))?;
    let step = |canary: &mut Small, batch: &cuda::DeviceBatch<Cap<4>>| {
        canary
            .plan(&cuda::PlanInputs::full(batch, &table))?
            .verify_head()?
            .write(&inputs)?
            .verify_tail(cuda::TailKvOnDevice::NONE)
    };
    let cpu_error = Canary::try_full(shape, Cap::<64>, Cap::<16>)
        .map_err(fail("cpu canary"))?
        .plan(&kv_canary::PlanInputs::full(&bad, &host_table))
        .err()
        .ok_or("the CPU planned a row past the table")?;
    // The malformed step, and a good one queued before its report is taken.
    let failed = step(&mut canary, &bad_batch).map_err(fail("bad step"))?;
    let next = step(&mut canary, &good_batch).map_err(fail("good step"))?;
    match failed.wait() {
        Err(e) => ensure!(
            std::mem::discriminant(&e) == std::mem::discriminant(&cpu_error),
            "the malformed step reported {e}, the CPU's plan {cpu_error}"
        ),
        Ok(r) => return Err(format!("the malformed step reported {r:?}")),
    }
    let r = next
        .wait()
        .map_err(fail("the step after the malformed one"))?;
    ensure!(r.is_clean(), "the step after the malformed one: {r:?}");
    let mut last = None;
    for n in 0..3 {
        let r = step(&mut canary, &good_batch)
            .and_then(|p| p.wait())
            .map_err(fail("a later step"))?;
        ensure!(r.is_clean(), "later step {n}: {r:?}");
        last = Some(r);
    }
    let last = last.ok_or("no later step")?;
    let line = last.to_string();
    ensure!(
        line.starts_with("bs 1, ") && line.ends_with("; clean"),
        "the last report's line: {line}"
    );
    println!(
        "    a malformed step reported the CPU's error ({cpu_error}); the step queued behind it \
         and 3 more reported clean (the last: {line})"
    );
    Ok(())
}
