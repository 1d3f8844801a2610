//! KV that moves keeps its canary, on the device (issue 33 item 6): a CPU canary and a device
//! canary run the same prefill; the records of the request's slots exported from each are
//! equal; imported into other slots (the request "offloaded" and brought back elsewhere) and
//! copied once more (a copy-on-write), the two canaries stay byte-equal, the moved request's
//! next step verifies clean on both, and a step that reads slots nothing was moved into reports
//! the same violations on both. A bad slot list is the same error on both and changes nothing.

use crate::step::{
    fill_write_inputs, same_canaries, slot, sorted, token, Spec, ROWS, SLOTS, WIDTH,
};
use crate::{ensure, fail};
use kv_canary::cuda::{self, Gpu, Stream};
use kv_canary::step::{Canary, TailKv};
use kv_canary::{Batch, Cap, ReqToToken};

pub fn moves_match_cpu(gpu: &Gpu) -> Result<(), String> {
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev =
        Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let mut inputs = cpu.write_inputs();
    let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
    // One step on both: `row` holds `prefix` tokens of the request (token(1, p)) and writes
    // `extend` more.
    let mut run = |cpu: &mut Canary<_, _, _, _, _>,
                   dev: &mut Canary<_, _, _, _, _, _, Stream>,
                   row: usize,
                   prefix: usize,
                   extend: usize|
     -> Result<(Vec<String>, Vec<String>), String> {
        let batch = Batch::from_columns([row as i64], [prefix as i64], [extend as i64]);
        let tokens: Vec<_> = (prefix..prefix + extend)
            .map(|p| (slot(row, p), token(1, p), p as i64))
            .collect();
        fill_write_inputs(inputs.parts_mut(), &tokens);
        dinputs.upload(&inputs).map_err(fail("inputs"))?;
        dbatch.upload(&batch).map_err(fail("batch"))?;
        let c = cpu
            .plan(&kv_canary::PlanInputs::full(&batch, &table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&inputs))
            .and_then(|s| s.verify_tail(TailKv::NONE))
            .map_err(fail("cpu step"))?;
        let d = dev
            .plan(&cuda::PlanInputs::full(&dbatch, &dtable))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&dinputs))
            .and_then(|s| s.verify_tail(cuda::TailKvOnDevice::NONE))
            .map_err(fail("device step"))?
            .wait()
            .map_err(fail("device report"))?;
        Ok((sorted(&c.violations), sorted(&d.violations)))
    };
    // The request prefills 12 tokens in row 1.
    let (c, d) = run(&mut cpu, &mut dev, 1, 0, 12)?;
    ensure!(c.is_empty() && d.is_empty(), "prefill: {c:?} {d:?}");
    let from: Vec<i64> = (0..12).map(|p| slot(1, p)).collect();
    let exported = (
        cpu.export_records(&from).map_err(fail("cpu export"))?,
        dev.export_records(&from).map_err(fail("device export"))?,
    );
    ensure!(exported.0 == exported.1, "the exported records differ");
    // Brought back into row 2's slots (two runs: the table's row 2 is contiguous, the order as
    // given), on each canary from the OTHER's export: records travel between backends.
    let to: Vec<i64> = (0..12).map(|p| slot(2, p)).collect();
    cpu.import_records(&exported.1, &to)
        .map_err(fail("cpu import"))?;
    dev.import_records(&exported.0, &to)
        .map_err(fail("device import"))?;
    same_canaries(&cpu, &dev, " after the import")?;
    // A bad slot list: the same error, nothing written.
    let bad = [slot(3, 0), 0];
    let (ce, de) = (
        cpu.import_records(&exported.0, &bad).unwrap_err(),
        dev.import_records(&exported.0, &bad).unwrap_err(),
    );
    ensure!(
        ce.to_string() == de.to_string(),
        "errors differ: {ce} / {de}"
    );
    same_canaries(&cpu, &dev, " after a refused import")?;
    // The moved request decodes in row 2: its 12 cached tokens verify clean on both.
    let (c, d) = run(&mut cpu, &mut dev, 2, 12, 1)?;
    ensure!(c.is_empty() && d.is_empty(), "moved request: {c:?} {d:?}");
    // Copy-on-write of row 2's first 8 slots into row 3, then row 3 continues from them.
    let (src, dst): (Vec<i64>, Vec<i64>) = (0..8).map(|p| (slot(2, p), slot(3, p))).unzip();
    cpu.copy_records(&src, &dst).map_err(fail("cpu copy"))?;
    dev.copy_records(&src, &dst).map_err(fail("device copy"))?;
    same_canaries(&cpu, &dev, " after the copy")?;
    let (c, d) = run(&mut cpu, &mut dev, 3, 8, 1)?;
    ensure!(c.is_empty() && d.is_empty(), "copied prefix: {c:?} {d:?}");
    // Row 4 claims 6 cached tokens nothing was moved into: both report, the same rows.
    let (c, d) = run(&mut cpu, &mut dev, 4, 6, 1)?;
    ensure!(
        !c.is_empty() && c == d,
        "unmoved slots: CPU {c:?}, device {d:?}"
    );
    same_canaries(&cpu, &dev, " at the end")?;
    println!(
        "    12 records exported equal from both backends, imported crosswise into other slots and \
         copied (copy-on-write): canaries byte-equal, the moved and the copied request verify \
         clean, slots never moved into report {} rows on both",
        c.len()
    );
    Ok(())
}
