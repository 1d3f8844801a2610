//! The watchdog over a device canary (issue 33 item 2 on the GPU): a CPU canary and a device
//! canary run the same engine steps, each with its own watchdog, through warm-up, the mark of
//! initialisation, healthy steps, steps the engine ran without the canary and steps whose head
//! stage was cancelled (a skipped stage); `after_device_step`, reading the device's counters,
//! must report exactly what the host watchdog reports, step for step.

use crate::step::{fill_write_inputs, slot, token, Spec, ROWS, SLOTS, WIDTH};
use crate::{ensure, fail};
use kv_canary::cuda::{self, Gpu, Stream};
use kv_canary::guard::{Stall, Watchdog};
use kv_canary::step::{Canary, TailKv};
use kv_canary::{Batch, Cap, ChainPositionAssert, ReqToToken};

pub fn watchdog_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>)
        .with_chain_position_assert(ChainPositionAssert::OFF);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev = Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>)
        .map_err(fail("canary"))?
        .with_chain_position_assert(ChainPositionAssert::OFF);
    let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let mut inputs = cpu.write_inputs();
    let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
    let (mut cdog, mut ddog) = (Watchdog::new(4, 4), Watchdog::new(4, 4));
    let mut stalls = Vec::new();
    for n in 0..40usize {
        if n == 6 {
            cdog.mark_initialised(&mut cpu);
            ddog.mark_initialised(&mut dev);
        }
        // Steps 20-23: the engine ran without the canary; steps 30-35: the head stage ran
        // and the step was cancelled before its write and tail (a skipped stage).
        let (skip, cancel) = ((20..24).contains(&n), (30..36).contains(&n));
        if !skip {
            let batch =
                Batch::from_columns([1], [n.min(WIDTH - 1) as i64], [i64::from(n < WIDTH - 1)]);
            let tokens: Vec<_> = (n..(n + 1).min(WIDTH - 1))
                .map(|p| (slot(1, p), token(1, p), p as i64))
                .collect();
            fill_write_inputs(inputs.parts_mut(), &tokens);
            dinputs.upload(&inputs).map_err(fail("inputs"))?;
            dbatch.upload(&batch).map_err(fail("batch"))?;
            let c = cpu
                .plan(&kv_canary::PlanInputs::full(&batch, &table))
                .and_then(|s| s.verify_head())
                .map_err(fail("cpu step"))?;
            let d = dev
                .plan(&cuda::PlanInputs::full(&dbatch, &dtable))
                .and_then(|s| s.verify_head())
                .map_err(fail("device step"))?;
            if cancel {
                c.cancel();
                d.cancel();
            } else {
                c.write(&inputs)
                    .and_then(|s| s.verify_tail(TailKv::NONE))
                    .map_err(fail("cpu tail"))?;
                d.write(&dinputs)
                    .and_then(|s| s.verify_tail(cuda::TailKvOnDevice::NONE))
                    .map_err(fail("device tail"))?
                    .wait()
                    .map_err(fail("device report"))?;
            }
        }
        let (c, d) = (
            cdog.after_step(&cpu),
            ddog.after_device_step(&dev)
                .map_err(fail("device watchdog"))?,
        );
        ensure!(
            c == d,
            "step {n}: host watchdog {c:?}, device watchdog {d:?}"
        );
        stalls.extend(d.map(|s| (n, s)));
    }
    let kinds = |f: fn(&Stall) -> bool| stalls.iter().filter(|(_, s)| f(s)).count();
    ensure!(
        kinds(|s| matches!(s, Stall::NeverInitialised { .. })) == 1
            && kinds(|s| matches!(s, Stall::StepsDropped { .. })) >= 1,
        "the expected stalls: {stalls:?}"
    );
    println!(
        "    40 engine steps, host and device watchdogs agree at every check: {}",
        stalls
            .iter()
            .map(|(n, s)| format!("step {n}: {s}"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}
