//! The engine's streams: a crate-owned non-blocking stream and a foreign stream wrapped with
//! `Stream::from_raw` run the step API equal to the CPU, with the forward pass on another
//! stream ordered before the tail verify by an event (`Stream::wait_for`); sync events poll and
//! wait.
#![allow(unsafe_code)]

use crate::step::{run_against_cpu_on, Draw, Run, Setup};
use crate::{ensure, fail};
use kv_canary::cuda::{Event, Gpu, Stream};
use kv_canary_testkit::floors::Floors;

/// A non-blocking stream and a foreign one (created here with `cuStreamCreate`), 40 steps
/// each (tampered records, one of them forced at the first step that must report it so that
/// quick mode's 4 steps find a violation too; rows restarted, reports taken one step late),
/// equal to the CPU;
/// the KV bytes of each step are copied on another non-blocking stream behind a spin, and the
/// tail verify waits for them through an event.
pub fn unordered_streams_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let floors = Floors::new(gpu).map_err(fail("floors"))?;
    let other = Stream::non_blocking(gpu).map_err(fail("other stream"))?;
    let event = Event::sync(gpu).map_err(fail("event"))?;
    let draw = |seed| Draw {
        seed,
        // Two at least: the forced tamper lands at the first step decoding a row of two
        // records (step 1 for these seeds), whatever the quick mode leaves.
        steps: crate::scaled(40).max(2) as usize,
        tamper: true,
        force_tamper: true,
        recycle_full_rows: true,
        late: true,
    };
    let stream = Stream::non_blocking(gpu).map_err(fail("non-blocking stream"))?;
    ensure!(
        !stream.is_blocking(),
        "a non-blocking stream says it blocks"
    );
    let setup = |stream| Setup::Unordered {
        stream,
        other: &other,
        event: &event,
        floors: &floors,
    };
    let Run {
        found, tampered, ..
    } = run_against_cpu_on(gpu, draw(0x0B10_0001), setup(stream))?;
    println!("    non-blocking stream: equal to the CPU ({tampered} tampered, {found} steps with violations)");
    ensure!(
        found > 0,
        "no step found a violation on the non-blocking stream ({tampered} tampered)"
    );

    let mut raw: cust::sys::CUstream = core::ptr::null_mut();
    gpu.make_current().map_err(fail("context"))?;
    // SAFETY: the driver writes a new non-blocking stream of the current context (gpu's) into
    // `raw`.
    let created = unsafe {
        cust::sys::cuStreamCreate(
            &mut raw,
            cust::sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
        )
    };
    ensure!(
        created == cust::sys::CUresult::CUDA_SUCCESS,
        "cuStreamCreate: {created:?}"
    );
    // SAFETY: `raw` is a live stream of gpu's primary context; it is destroyed below, after the
    // run, which drops the wrapper and waits for everything queued through it.
    let foreign = unsafe { Stream::from_raw(gpu, raw) }.map_err(fail("from_raw"));
    let result = foreign.and_then(|stream| {
        ensure!(!stream.is_blocking(), "a foreign stream says it blocks");
        ensure!(
            stream.as_raw() == raw,
            "the wrapper queues on another stream"
        );
        run_against_cpu_on(gpu, draw(0x0B10_0002), setup(stream))
    });
    gpu.synchronize().map_err(fail("synchronize"))?;
    // SAFETY: `raw` was created above; its wrapper is gone and its work done (synchronised).
    unsafe { cust::sys::cuStreamDestroy_v2(raw) };
    let Run {
        found, tampered, ..
    } = result?;
    println!("    foreign stream (from_raw): equal to the CPU ({tampered} tampered, {found} steps with violations)");
    ensure!(
        found > 0,
        "no step found a violation on the foreign stream ({tampered} tampered)"
    );
    Ok(())
}

/// A sync event recorded behind a 100 ms spin: `query` says not yet, `synchronize` waits, then
/// `query` says done; a stream waiting for it runs after the spin (its own event completes
/// later). Skipped under compute-sanitizer (serialised launches void the timing).
pub fn sync_events_poll_and_order(gpu: &Gpu) -> Result<(), String> {
    if std::env::var_os("KV_CANARY_UNDER_SANITIZER").is_some() {
        println!("    SKIPPED under compute-sanitizer: its serialised launches void the timing");
        return Ok(());
    }
    let floors = Floors::new(gpu).map_err(fail("floors"))?;
    let (a, b) = (
        Stream::non_blocking(gpu).map_err(fail("stream"))?,
        Stream::non_blocking(gpu).map_err(fail("stream"))?,
    );
    let (spun, after) = (
        Event::sync(gpu).map_err(fail("event"))?,
        Event::sync(gpu).map_err(fail("event"))?,
    );
    ensure!(
        spun.query().map_err(fail("query"))?,
        "a fresh event is not complete"
    );
    floors.spin(&a, 100_000_000).map_err(fail("spin"))?;
    a.record(&spun).map_err(fail("record"))?;
    b.wait_for(&spun).map_err(fail("wait_for"))?;
    b.record(&after).map_err(fail("record"))?;
    ensure!(
        !spun.query().map_err(fail("query"))?,
        "the spin's event completed at once"
    );
    ensure!(
        !after.query().map_err(fail("query"))?,
        "the waiting stream did not wait"
    );
    after.synchronize().map_err(fail("synchronize"))?;
    ensure!(
        spun.query().map_err(fail("query"))?,
        "the waiting stream's event completed before the event it waited for"
    );
    Ok(())
}

/// A cudarc stream wrapped with `Stream::from_cudarc` (feature `cudarc`) runs 20 steps equal to
/// the CPU, the forward pass on another stream as above.
#[cfg(feature = "cudarc")]
pub fn cudarc_stream_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    let context = cudarc::driver::CudaContext::new(gpu.ordinal() as usize)
        .map_err(|e| format!("cudarc context: {e:?}"))?;
    let theirs = context
        .new_stream()
        .map_err(|e| format!("cudarc stream: {e:?}"))?;
    let stream = Stream::from_cudarc(gpu, theirs).map_err(fail("from_cudarc"))?;
    let floors = Floors::new(gpu).map_err(fail("floors"))?;
    let other = Stream::non_blocking(gpu).map_err(fail("other stream"))?;
    let event = Event::sync(gpu).map_err(fail("event"))?;
    let draw = Draw {
        seed: 0x0B10_0003,
        steps: crate::scaled(20).max(2) as usize,
        tamper: true,
        force_tamper: true,
        recycle_full_rows: true,
        late: true,
    };
    let setup = Setup::Unordered {
        stream,
        other: &other,
        event: &event,
        floors: &floors,
    };
    let Run { found, .. } = run_against_cpu_on(gpu, draw, setup)?;
    println!("    cudarc stream: equal to the CPU ({found} steps with violations)");
    Ok(())
}
