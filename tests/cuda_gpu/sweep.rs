//! Sweeps, head findings and K-only canaries on the GPU: a CPU and a device `step::Canary` run
//! the same steps and sweeps with the same injected faults, and the device's head findings,
//! sweep reports, step reports, counters and canary bytes must equal the CPU's.

use crate::step::{compare, dev_kv, host_kv, slot, sorted, token, Spec, SLOTS, STRIP};
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{self, Gpu, Stream};
use kv_canary::step::{Canary, HeadFindings, KOnly, KvPair, SweepEntries, SweepReport, TailKv};
use kv_canary::{
    Batch, CanarySlot, Cap, Full, LaunchTag, RealKvParams, RowLayout, VerifyEntry, WriteInputs,
};

/// One token of a step: (slot, token id, position).
type Token = (i64, i64, i64);

/// The KV pool, on the host and on the device: a K and a V strip per slot.
struct Pool {
    k: Vec<u8>,
    v: Vec<u8>,
    dk: DeviceBuffer<u8>,
    dv: DeviceBuffer<u8>,
}

fn cuda_err(e: cust::error::CudaError) -> String {
    format!("device KV: {e}")
}

fn params() -> RealKvParams {
    RealKvParams::new(1, STRIP as i64, STRIP as i64)
}

fn layout() -> RowLayout {
    RowLayout {
        num_rows: SLOTS,
        row_bytes: STRIP,
        row_stride_bytes: STRIP,
    }
}

impl Pool {
    fn new() -> Result<Self, String> {
        let (k, v) = (vec![0u8; SLOTS * STRIP], vec![0u8; SLOTS * STRIP]);
        let dk = DeviceBuffer::from_slice(&k).map_err(cuda_err)?;
        let dv = DeviceBuffer::from_slice(&v).map_err(cuda_err)?;
        Ok(Pool { k, v, dk, dv })
    }

    /// The forward pass: the KV bytes of `tokens`, on both sides.
    fn forward(&mut self, tokens: &[Token]) -> Result<(), String> {
        crate::step::stamp_kv(&mut self.k, &mut self.v, tokens);
        self.sync()
    }

    /// A stray write into the K bytes of `slot`, on both sides.
    fn flip_k(&mut self, slot: i64) -> Result<(), String> {
        self.k[slot as usize * STRIP + 3] ^= 0x20;
        self.sync()
    }

    /// The tail's real-KV sources on the host (both halves).
    fn host_tail(&self) -> Result<TailKv<'_>, String> {
        Ok(TailKv::new(
            host_kv(&self.k, params())?,
            host_kv(&self.v, params())?,
        ))
    }

    /// The tail's real-KV sources on the device (both halves).
    fn device_tail(&self) -> Result<KvPair<cuda::DeviceRealKv<'_>>, String> {
        Ok(KvPair {
            k: dev_kv(&self.dk, layout(), params())?,
            v: dev_kv(&self.dv, layout(), params())?,
        })
    }

    fn sync(&mut self) -> Result<(), String> {
        self.dk.copy_from(&self.k[..]).map_err(cuda_err)?;
        self.dv.copy_from(&self.v[..]).map_err(cuda_err)
    }
}

/// The tokens of row `row` at positions `range`.
fn tokens(row: usize, range: core::ops::Range<usize>) -> Vec<Token> {
    range
        .map(|p| (slot(row, p), token(row, p), p as i64))
        .collect()
}

/// The sweep entries of row `row`'s first `n` positions, built as an engine builds them from
/// its request table (`SweepEntries::push_row`: what a radix-cache walk of the row emits).
fn entries(row: usize, n: usize) -> Result<SweepEntries, String> {
    let cells: Vec<i64> = (0..n).map(|p| slot(row, p)).collect();
    let mut entries = SweepEntries::new();
    entries.push_row(&cells, n).map_err(fail("sweep entries"))?;
    Ok(entries)
}

fn fill(inputs: &mut WriteInputs<Cap<64>>, tokens: &[Token]) {
    let p = inputs.parts_mut();
    p.input_ids.fill(0);
    p.positions.fill(0);
    p.out_cache_loc.fill(-1);
    for (i, &(s, t, pos)) in tokens.iter().enumerate() {
        (p.out_cache_loc[i], p.input_ids[i], p.positions[i]) = (s, t, pos);
    }
}

fn same_findings(what: &str, c: &HeadFindings, d: &HeadFindings) -> Result<(), String> {
    ensure!(
        sorted(&c.violations) == sorted(&d.violations)
            && c.dropped == d.dropped
            && c.plan_overflow == d.plan_overflow,
        "{what}: head findings differ: CPU {c:?}, GPU {d:?}"
    );
    Ok(())
}

/// Takes a pending readback (a step's report, a sweep's, head findings: any
/// `cuda::PendingReadback`) without blocking where it has landed, else waits for it.
fn take<P: cuda::PendingReadback>(pending: P) -> Result<P::Report, kv_canary::Error> {
    match pending.try_take()? {
        cuda::Landed::Ready(report) => Ok(report),
        cuda::Landed::Pending(pending) => pending.wait(),
    }
}

pub fn same_sweep(what: &str, c: &SweepReport, d: &cuda::DeviceSweepReport) -> Result<(), String> {
    ensure!(
        sorted(&c.violations) == sorted(&d.violations)
            && c.dropped == d.dropped
            && c.counters == d.counters
            && c.status() == d.status(),
        "{what}: sweeps differ: CPU {c:?}, GPU {d:?}"
    );
    Ok(())
}

/// Sweeps and head findings, K+V: faults only a sweep finds (KV bytes of an idle cached row)
/// and head faults read before the forward pass, equal on both backends. The reports, sweep
/// reports and head findings are all taken by one generic `take` (`cuda::PendingReadback`).
pub fn sweep_and_head_findings_match_cpu(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev =
        Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let cells = (0..crate::step::ROWS * crate::step::WIDTH)
        .map(|i| i as i32 + 1)
        .collect();
    let table = kv_canary::ReqToToken::from_vec(crate::step::ROWS, crate::step::WIDTH, cells)
        .map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let mut inputs = cpu.write_inputs();
    let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
    let mut pool = Pool::new()?;
    let (p, l) = (params(), layout());

    // Step 1: rows 1 and 2 prefill 4 and 3 tokens. Step 2: row 2 decodes; row 1 stays idle.
    // Step 3: rows 3 and 4 decode at position 25, 50 verify entries for a capacity of 48: the
    // plan overflows, and both backends' head findings and reports name 50 and 48.
    let plan: [(Batch, Vec<Token>); 3] = [
        (
            Batch::from_columns([1, 2], [0, 0], [4, 3]),
            [tokens(1, 0..4), tokens(2, 0..3)].concat(),
        ),
        (Batch::from_columns([2], [3], [1]), tokens(2, 3..4)),
        (
            Batch::from_columns([3, 4], [25, 25], [1, 1]),
            [tokens(3, 25..26), tokens(4, 25..26)].concat(),
        ),
    ];
    let overflow = Some(kv_canary::step::PlanOverflow {
        needed: Some(50),
        capacity: 48,
    });
    let mut head_rows = 0;
    for (n, (batch, toks)) in plan.iter().enumerate() {
        if n == 1 {
            // Faults: a head V record of row 2 (read before the forward pass), the K bytes
            // of an idle slot of row 1 (no step attends to it; only a sweep finds it).
            let tag = LaunchTag::HeadVFull;
            let host = cpu.buffer_mut(tag).ok_or("head V")?;
            let rec = host.slot(slot(2, 1) as usize).ok_or("slot")?;
            let bad = CanarySlot {
                position: rec.position + 5,
                ..rec
            };
            host.set_slot(slot(2, 1) as usize, bad)
                .map_err(fail("tamper"))?;
            let dbuf = dev.buffer(tag).ok_or("device head V")?;
            let mut copy = dbuf.to_host().map_err(fail("download"))?;
            copy.set_slot(slot(2, 1) as usize, bad)
                .map_err(fail("tamper"))?;
            dbuf.upload(&copy).map_err(fail("upload"))?;
            pool.flip_k(slot(1, 2))?;
        }
        fill(&mut inputs, toks);
        dinputs.upload(&inputs).map_err(fail("inputs"))?;
        dbatch.upload(batch).map_err(fail("batch"))?;
        let cpu_step = cpu
            .plan(&kv_canary::PlanInputs::full(batch, &table))
            .and_then(|s| s.verify_head())
            .map_err(fail("cpu head"))?;
        // Odd steps plan and verify the head in one call (one launch): the same findings.
        let plan_inputs = cuda::PlanInputs::full(&dbatch, &dtable);
        let dev_step = if n % 2 == 1 {
            dev.plan_and_verify_head(&plan_inputs)
        } else {
            dev.plan(&plan_inputs).and_then(|s| s.verify_head())
        }
        .map_err(fail("device head"))?;
        // The engine waits for the head findings before its forward pass.
        let cf = cpu_step.head_findings().map_err(fail("cpu findings"))?;
        let pending = dev_step.head_findings().map_err(fail("device findings"))?;
        let cpu_step = cpu_step.write(&inputs).map_err(fail("cpu write"))?;
        let dev_step = dev_step.write(&dinputs).map_err(fail("device write"))?;
        let df = take(pending).map_err(fail("device findings"))?;
        same_findings(&format!("step {n}"), &cf, &df)?;
        head_rows += df.recorded();
        pool.forward(toks)?;
        let c = cpu_step
            .verify_tail(TailKv::new(host_kv(&pool.k, p)?, host_kv(&pool.v, p)?))
            .map_err(fail("cpu tail"))?;
        let d = dev_step
            .verify_tail(KvPair {
                k: dev_kv(&pool.dk, l, p)?,
                v: dev_kv(&pool.dv, l, p)?,
            })
            .map_err(fail("device tail"))
            .and_then(|pending| take(pending).map_err(fail("device report")))?;
        let (mut overflows, mut found) = (0, 0);
        compare(n, &c, &d, &mut overflows, &mut found)?;
        ensure!(
            (df.plan_overflow == overflow && d.unverified().plan_overflow == overflow) == (n == 2),
            "step {n}: the overflow must be step 2's alone, with 50 needed for 48: head findings \
             {df:?}, report {d}"
        );
        // The head findings are the head verify's part of the final report, counted once:
        // on the CPU its first rows; on the device (no fixed order) rows it holds.
        ensure!(
            c.violations.get(..cf.violations.len()) == Some(&cf.violations[..]),
            "step {n}: CPU head findings {cf:?} are not the first rows of {c:?}"
        );
        ensure!(
            df.violations.iter().all(|v| d.violations.contains(v)) && d.recorded() >= df.recorded(),
            "step {n}: device head findings {df:?} missing from the report {d:?}"
        );
    }
    ensure!(
        head_rows > 0,
        "the head fault was not found before the forward pass"
    );

    // The sweep over idle row 1 finds the stray K write; the steps did not.
    let es = entries(1, 4)?;
    let c = cpu
        .sweep(&es, TailKv::new(host_kv(&pool.k, p)?, host_kv(&pool.v, p)?))
        .map_err(fail("cpu sweep"))?;
    let d = dev
        .sweep(
            &es,
            KvPair {
                k: dev_kv(&pool.dk, l, p)?,
                v: dev_kv(&pool.dv, l, p)?,
            },
        )
        .map_err(fail("device sweep"))?
        .wait()
        .map_err(fail("device sweep report"))?;
    same_sweep("sweep of row 1", &c, &d)?;
    ensure!(
        d.violations.len() == 1
            && d.violations[0].launch_tag() == Some(LaunchTag::SweepKFull)
            && d.violations[0].slot == slot(1, 2),
        "the sweep should find slot {} alone: {d:?}",
        slot(1, 2)
    );
    // A sweep over the verify capacity (48) checks nothing: unverified with the numbers.
    let many: Vec<VerifyEntry> = (0..49).map(|i| es[i % 4]).collect();
    let c = cpu
        .sweep(
            &many,
            TailKv::new(host_kv(&pool.k, p)?, host_kv(&pool.v, p)?),
        )
        .map_err(fail("cpu sweep"))?;
    let pending = dev
        .sweep(
            &many,
            KvPair {
                k: dev_kv(&pool.dk, l, p)?,
                v: dev_kv(&pool.dv, l, p)?,
            },
        )
        .map_err(fail("device sweep"))?;
    let d = take(pending).map_err(fail("device sweep report"))?;
    same_sweep("sweep over capacity", &c, &d)?;
    ensure!(
        !d.is_clean() && d.unverified().plan_overflow.and_then(|o| o.needed) == Some(49),
        "an overflowed sweep must be unverified with 49 needed: {d:?}"
    );
    ensure!(
        dev.total_violations() == cpu.total_violations() && dev.sweeps() == 2,
        "violation counts differ: CPU {}, GPU {}",
        cpu.total_violations(),
        dev.total_violations()
    );
    println!(
        "    head findings equal before the forward pass ({head_rows} rows); an overflowed plan \
         unverified on both with 50 needed for 48; the sweep found the idle-slot fault the steps \
         missed; an overflowed sweep unverified on both"
    );
    Ok(())
}

/// A K-only canary on both backends: the same steps, a real-KV fault found by `TAIL_K` and by
/// `SWEEP_K`; reports, counters and the two canary buffers equal.
pub fn k_only_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let mut cpu: Canary<_, _, _, _, _, KOnly<Full>> =
        Canary::k_only(shape, Cap::<SLOTS>, Cap::<64>);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev =
        Canary::<_, _, _, _, _, KOnly<Full>, _>::k_only_on(stream, shape, Cap::<SLOTS>, Cap::<64>)
            .map_err(fail("canary"))?;
    let cells = (0..crate::step::ROWS * crate::step::WIDTH)
        .map(|i| i as i32 + 1)
        .collect();
    let table = kv_canary::ReqToToken::from_vec(crate::step::ROWS, crate::step::WIDTH, cells)
        .map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let mut inputs = cpu.write_inputs();
    let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
    let mut pool = Pool::new()?;
    let (p, l) = (params(), layout());
    let plan: [(Batch, Vec<Token>); 3] = [
        (
            Batch::from_columns([1, 3], [0, 0], [5, 2]),
            [tokens(1, 0..5), tokens(3, 0..2)].concat(),
        ),
        (
            Batch::from_columns([1, 3], [5, 2], [1, 1]),
            [tokens(1, 5..6), tokens(3, 2..3)].concat(),
        ),
        (Batch::from_columns([3], [3], [1]), tokens(3, 3..4)),
    ];
    let mut found = 0;
    for (n, (batch, toks)) in plan.iter().enumerate() {
        if n == 2 {
            pool.flip_k(slot(3, 1))?; // TAIL_K of step 3 finds it
            pool.flip_k(slot(1, 4))?; // row 1 is idle: only SWEEP_K finds it
        }
        fill(&mut inputs, toks);
        dinputs.upload(&inputs).map_err(fail("inputs"))?;
        dbatch.upload(batch).map_err(fail("batch"))?;
        let cpu_step = cpu
            .plan(&kv_canary::PlanInputs::full(batch, &table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&inputs))
            .map_err(fail("cpu step"))?;
        // Odd steps plan and verify the head in one call (one launch on the device).
        let plan_inputs = cuda::PlanInputs::full(&dbatch, &dtable);
        let dev_step = if n % 2 == 1 {
            dev.plan_and_verify_head(&plan_inputs)
        } else {
            dev.plan(&plan_inputs).and_then(|s| s.verify_head())
        }
        .and_then(|s| s.write(&dinputs))
        .map_err(fail("device step"))?;
        pool.forward(toks)?;
        let c = cpu_step
            .verify_tail(host_kv(&pool.k, p)?)
            .map_err(fail("cpu tail"))?;
        let d = dev_step
            .verify_tail(dev_kv(&pool.dk, l, p)?)
            .map_err(fail("device tail"))?
            .wait()
            .map_err(fail("device report"))?;
        let mut overflows = 0;
        compare(n, &c, &d, &mut overflows, &mut found)?;
        ensure!(
            d.violations.iter().all(|v| matches!(
                v.launch_tag(),
                Some(LaunchTag::HeadKFull | LaunchTag::TailKFull)
            )),
            "step {n}: a K-only canary recorded a V tag: {d:?}"
        );
        ensure!(
            d.head_counters.v.kernel_run_counter() == 0
                && d.tail_counters.v.kernel_run_counter() == 0,
            "step {n}: V launches ran: {d:?}"
        );
    }
    let es = entries(1, 6)?;
    let c = cpu
        .sweep(&es, host_kv(&pool.k, p)?)
        .map_err(fail("cpu sweep"))?;
    let d = dev
        .sweep(&es, dev_kv(&pool.dk, l, p)?)
        .map_err(fail("device sweep"))?
        .wait()
        .map_err(fail("device sweep report"))?;
    same_sweep("K-only sweep", &c, &d)?;
    ensure!(
        d.violations.len() == 1 && d.violations[0].launch_tag() == Some(LaunchTag::SweepKFull),
        "the K-only sweep should find slot {} alone: {d:?}",
        slot(1, 4)
    );
    crate::step::same_canaries(&cpu, &dev, "")?;
    ensure!(
        dev.buffer(LaunchTag::HeadVFull).is_none() && dev.tags().len() == 2,
        "a K-only device canary has V buffers"
    );
    ensure!(
        found > 0 && dev.total_violations() == cpu.total_violations(),
        "violations: CPU {}, GPU {}, steps with findings {found}",
        cpu.total_violations(),
        dev.total_violations()
    );
    println!(
        "    K-only: 3 steps and a sweep equal on both backends ({} violations, K tags only)",
        dev.total_violations()
    );
    Ok(())
}

/// Sweeps of request-table rows (`Canary::sweep_table_rows`), FULL: the device derives the
/// entries from the engine's device table with its plan launch, the CPU from the host table.
/// Random rows (padding rows, empty and partial prefixes, rows swept twice, plans over the
/// verify capacity) over random faults in idle KV bytes and tail records; every report, the
/// derived plan and the counters equal the CPU's, and equal the CPU's sweep of the same rows'
/// walked entries. Then rows the table lacks: the device's error, taken with the report,
/// equals the CPU's, nothing stale is checked, and the next sweep is delivered.
pub fn table_row_sweeps_match_cpu(gpu: &Gpu) -> Result<(), String> {
    use crate::step::{ROWS, WIDTH};
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev =
        Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;
    let cells = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = kv_canary::ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
    let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
    let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let mut inputs = cpu.write_inputs();
    let dinputs = dev.try_write_inputs().map_err(fail("inputs"))?;
    let mut pool = Pool::new()?;

    // Rows 1..=7 prefill 3..=9 tokens (42 of the 64 write entries); the engine's requests then
    // finish, their KV stays cached.
    let lens: Vec<usize> = (1..ROWS).map(|r| r + 2).collect();
    let batch = Batch::try_from_columns(
        (1..ROWS as i64).collect(),
        vec![0; ROWS - 1],
        lens.iter().map(|&n| n as i64).collect(),
    )
    .map_err(fail("batch"))?;
    let toks: Vec<Token> = (1..ROWS).flat_map(|r| tokens(r, 0..lens[r - 1])).collect();
    fill(&mut inputs, &toks);
    dinputs.upload(&inputs).map_err(fail("inputs"))?;
    dbatch.upload(&batch).map_err(fail("batch"))?;
    let c = cpu
        .plan(&kv_canary::PlanInputs::full(&batch, &table))
        .and_then(|s| s.verify_head()?.write(&inputs))
        .map_err(fail("cpu prefill"))?;
    let d = dev
        .plan(&cuda::PlanInputs::full(&dbatch, &dtable))
        .and_then(|s| s.verify_head()?.write(&dinputs))
        .map_err(fail("device prefill"))?;
    pool.forward(&toks)?;
    let c = c.verify_tail(pool.host_tail()?).map_err(fail("cpu tail"))?;
    let d = d
        .verify_tail(pool.device_tail()?)
        .map_err(fail("device tail"))?
        .wait()
        .map_err(fail("device report"))?;
    ensure!(c.is_clean() && d.is_clean(), "prefill: CPU {c}, GPU {d}");

    let tables = SweepTables {
        table: &table,
        dtable: &dtable,
        dbatch: &dbatch,
    };
    let mut rng = crate::rng::Rng::new(0x7ab1_e5eb);
    let (mut found, mut overflows, mut entries) = (0, 0, 0);
    let rounds = crate::scaled(40) as usize;
    // The row of the last fault, swept whole by the next round that is not wide (so that the
    // reduced runs of the sanitizers find a fault too).
    let mut fault_row = None;
    for round in 0..rounds {
        if round % 4 == 1 {
            // An idle slot's K bytes, or a tail V record moved to another position.
            let r = rng.range(1, ROWS as i64 - 1) as usize;
            fault_row = Some(r);
            let s = slot(r, rng.below(lens[r - 1] as u64) as usize);
            if rng.chance(50) {
                pool.flip_k(s)?;
            } else {
                let tag = LaunchTag::TailVFull;
                let hbuf = cpu.buffer_mut(tag).ok_or("tail V")?;
                let rec = hbuf.slot(s as usize).ok_or("slot")?;
                let bad = CanarySlot {
                    position: rec.position + 3,
                    ..rec
                };
                hbuf.set_slot(s as usize, bad).map_err(fail("tamper"))?;
                let dbuf = dev.buffer(tag).ok_or("device tail V")?;
                let mut copy = dbuf.to_host().map_err(fail("download"))?;
                copy.set_slot(s as usize, bad).map_err(fail("tamper"))?;
                dbuf.upload(&copy).map_err(fail("upload"))?;
            }
        }
        // 1..=8 rows (the write request capacity), padding rows among them, any prefix of a
        // row's cached tokens (or none).
        // Every fifth round: 8 rows of 7 or more cached tokens each, over the capacity (and
        // round 2 of a run of fewer than five rounds: the sanitizers' reduced runs of 4).
        let wide = round % 5 == 4 || (rounds < 5 && round == 2);
        let n = if wide {
            ROWS
        } else {
            rng.range(1, ROWS as i64) as usize
        };
        let mut rows: Vec<(i64, i64)> = (0..n)
            .map(|_| {
                let r = if wide {
                    rng.range(5, ROWS as i64 - 1) as usize
                } else {
                    rng.below(ROWS as u64) as usize
                };
                let cached = if r == 0 { 0 } else { lens[r - 1] as i64 };
                (r as i64, if wide { cached } else { rng.range(0, cached) })
            })
            .collect();
        if let Some(r) = fault_row.filter(|_| !wide) {
            rows[0] = (r as i64, lens[r - 1] as i64);
            fault_row = None;
        }
        let batch = Batch::try_from_columns(
            rows.iter().map(|r| r.0).collect(),
            rows.iter().map(|r| r.1).collect(),
            vec![0; n],
        )
        .map_err(fail("sweep rows"))?;
        let what = format!("round {round}, rows {rows:?}");
        let (c, d) = tables.sweep(&mut cpu, &mut dev, &batch, &pool)?;
        let c = c.map_err(fail("cpu sweep"))?;
        let d = d.map_err(fail("device sweep report"))?;
        same_sweep(&what, &c, &d)?;
        ensure!(c.entries == d.entries, "{what}: entries CPU {c}, GPU {d}");
        // The plan the device derived is the CPU's (its entries when within the capacity).
        let dplan = dev.plans().0.to_host().map_err(fail("device plan"))?;
        let cplan = cpu.plans().0;
        ensure!(
            dplan.requested_entries() == cplan.requested_entries()
                && dplan.entries().eq(cplan.entries()),
            "{what}: plans differ: CPU {cplan:?}, GPU {dplan:?}"
        );
        // The walked entries of the same rows, swept on the CPU: the same findings.
        let mut walked = SweepEntries::new();
        for &(r, len) in rows.iter().filter(|r| r.0 != 0) {
            walked
                .push_table_row(&table, r as usize, len as usize)
                .map_err(fail("walk"))?;
        }
        let cw = cpu
            .sweep(&walked, pool.host_tail()?)
            .map_err(fail("cpu walk"))?;
        ensure!(
            sorted(&cw.violations) == sorted(&d.violations)
                && cw.entries == d.entries
                && cw.status() == d.status(),
            "{what}: the walked sweep differs: CPU {cw}, GPU {d}"
        );
        let dw = dev
            .sweep(&walked, pool.device_tail()?)
            .map_err(fail("device walk"))?
            .wait()
            .map_err(fail("device walk report"))?;
        same_sweep(&format!("{what}, walked"), &cw, &dw)?;
        found += d.recorded();
        overflows += usize::from(d.unverified().plan_overflow.is_some());
        entries += d.entries;
    }
    ensure!(
        found > 0 && overflows > 0 && overflows < rounds,
        "the rounds must find faults ({found}) and overflow in some rounds, not all \
         ({overflows} of {rounds})"
    );

    // Rows the table lacks, a prefix past the row: the plan's error, on the device with the
    // report. Nothing stale is checked (the counters' slots stay), the next sweep is delivered.
    let counters =
        |c: &KvPair<kv_canary::HealthCounters>| (c.k.slot_run_counter(), c.v.slot_run_counter());
    for (rows, cached) in [([1, ROWS as i64], [2, 2]), ([2, 3], [1, WIDTH as i64 + 1])] {
        let batch = Batch::from_columns(rows, cached, [0, 0]);
        let before = dev.sweeps();
        let slots_before = sweep_slots(&dev)?;
        let (ce, de) = match tables.sweep(&mut cpu, &mut dev, &batch, &pool)? {
            (Err(ce), Err(de)) => (ce.to_string(), de.to_string()),
            (c, d) => {
                return Err(format!(
                    "rows {rows:?} cached {cached:?}: CPU {c:?}, GPU {d:?}"
                ))
            }
        };
        ensure!(
            ce == de,
            "rows {rows:?} cached {cached:?}: CPU {ce}, GPU {de}"
        );
        ensure!(
            dev.sweeps() == before + 1 && sweep_slots(&dev)? == slots_before,
            "a failed device sweep checked entries: {:?} -> {:?}",
            slots_before,
            sweep_slots(&dev)?
        );
        println!("    rows {rows:?} cached {cached:?}: {de}");
    }
    let batch = Batch::from_columns([3], [lens[2] as i64], [0]);
    let (c, d) = tables.sweep(&mut cpu, &mut dev, &batch, &pool)?;
    let c = c.map_err(fail("cpu sweep"))?;
    let d = d.map_err(fail("the sweep after the errors"))?;
    ensure!(
        sorted(&c.violations) == sorted(&d.violations)
            && c.status() == d.status()
            && counters(&c.counters) == counters(&d.counters),
        "after the errors: CPU {c}, GPU {d}"
    );
    println!(
        "    {rounds} random table-row sweeps: {entries} entries derived on the device, {found} \
         violations, {overflows} over the verify capacity, all equal to the CPU's and to sweeps \
         of the walked entries; last: {d}"
    );
    Ok(())
}

/// A FULL canary of the sweep tests' shape on backend `B`.
type FullCanary<B> =
    Canary<Cap<48>, Cap<{ crate::step::ROWS }>, Cap<64>, Cap<SLOTS>, Cap<64>, Full, B>;

/// The request table a table-row sweep reads, on both sides, and the device batch that names
/// the rows.
struct SweepTables<'t> {
    table: &'t kv_canary::ReqToToken,
    dtable: &'t cuda::DeviceReqToToken,
    dbatch: &'t cuda::DeviceBatch<Cap<{ crate::step::ROWS }>>,
}

impl SweepTables<'_> {
    /// Sweeps the rows `batch` names on both canaries (the device's batch uploaded first, its
    /// report waited for), folding `pool`: each side's result as it came.
    #[allow(clippy::type_complexity, reason = "the two backends' results")]
    fn sweep(
        &self,
        cpu: &mut FullCanary<kv_canary::backend::Cpu>,
        dev: &mut FullCanary<Stream>,
        batch: &Batch,
        pool: &Pool,
    ) -> Result<
        (
            Result<SweepReport, kv_canary::Error>,
            Result<cuda::DeviceSweepReport, kv_canary::Error>,
        ),
        String,
    > {
        self.dbatch.upload(batch).map_err(fail("sweep rows"))?;
        let c = cpu.sweep_table_rows(
            &kv_canary::PlanInputs::full(batch, self.table),
            pool.host_tail()?,
        );
        let d = dev
            .sweep_table_rows(
                &cuda::PlanInputs::full(self.dbatch, self.dtable),
                pool.device_tail()?,
            )
            .and_then(|pending| pending.wait());
        Ok((c, d))
    }
}

/// The device's sweep counters' slot counts (K, V), read back.
fn sweep_slots(dev: &FullCanary<Stream>) -> Result<(i64, i64), String> {
    let read = |tag| -> Result<i64, String> {
        let c = dev.counters(tag).ok_or("sweep counters")?;
        Ok(c.to_host().map_err(fail("counters"))?.slot_run_counter())
    };
    Ok((read(LaunchTag::SweepKFull)?, read(LaunchTag::SweepVFull)?))
}
