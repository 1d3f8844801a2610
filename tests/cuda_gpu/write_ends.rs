//! A step's tail writes and head writes in one launch (`cuda::write_ends`,
//! `cuda::write_ends_k`) against the separate writes they replace.

use crate::rng::Rng;
use crate::step::{dev_kv, sorted, Spec, ROWS, SLOTS, STRIP, WIDTH};
use crate::{ensure, fail};
use cust::memory::DeviceBuffer;
use kv_canary::cuda::{self, DeviceRealKv, DeviceSettings, Gpu, Stream};
use kv_canary::{
    cpu, Batch, BatchRow, CanaryBuffer, CanarySlot, Cap, ChainPositionAssert, HealthCounters,
    LaunchTag, PlanInputs, RealKvHashMode, RealKvParams, ReqToToken, RowLayout, Violation,
    ViolationRing,
};

type Outcome = (
    Vec<CanaryBuffer<Cap<SLOTS>>>,
    i32,
    Vec<String>,
    Vec<HealthCounters>,
);

/// Random decode and prefill batches over random canary records: tail K, V and head K, V
/// written as one launch equal the two pair launches (the K half alone: one pair launch against
/// two launches), in PARTIAL and ALL mode: the four buffers, the rows (as a set), the write
/// index and the counters; the fused forms queue one launch.
pub fn write_ends_match_separate_writes(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let layout = RowLayout {
        num_rows: SLOTS,
        row_bytes: STRIP,
        row_stride_bytes: STRIP,
    };
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let (mut cases, mut rows_seen) = (0, 0usize);
    for seed in 0..16u64 {
        let mut rng = Rng::new(0xE7D5_0000 + seed);
        let cells: Vec<i32> = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
        let table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
        let mut rows = Vec::new();
        for r in 1..ROWS {
            if rng.chance(70) {
                let extend = rng.range(1, if seed % 2 == 0 { 1 } else { 5 });
                rows.push(BatchRow {
                    req_pool_index: r as i64,
                    prefix_len: rng.range(0, (WIDTH as i64) - 6),
                    extend_len: extend,
                });
            }
        }
        let batch: Batch = rows.into_iter().collect();
        let mut verify = shape.verify_plan();
        let mut write = shape.write_plan();
        let inputs_plan = PlanInputs::full(&batch, &table);
        cpu::plan(&shape, &inputs_plan, &mut verify, &mut write).map_err(fail("cpu plan"))?;
        let mut inputs = shape.write_inputs();
        {
            let p = inputs.parts_mut();
            let mut i = 0;
            for row in batch.rows() {
                for k in 0..row.extend_len {
                    let pos = row.prefix_len + k;
                    p.out_cache_loc[i] = i64::from(
                        table
                            .get(row.req_pool_index as usize, pos as usize)
                            .unwrap_or(0),
                    );
                    p.input_ids[i] = rng.range(0, 150_000);
                    p.positions[i] = if rng.chance(5) { pos + 1 } else { pos };
                    i += 1;
                }
            }
        }
        // Random records (so seeds chain from something), the same in every variant.
        let mut buffers: Vec<CanaryBuffer<Cap<SLOTS>>> =
            (0..4).map(|_| CanaryBuffer::new()).collect();
        for b in &mut buffers {
            for s in 1..SLOTS {
                if rng.chance(60) {
                    let rec = CanarySlot {
                        token: rng.range(0, 1000),
                        position: rng.range(0, WIDTH as i64),
                        prev_hash: rng.range(0, i64::MAX),
                        real_kv_hash: rng.range(0, i64::MAX),
                    };
                    b.set_slot(s, rec).map_err(fail("record"))?;
                }
            }
        }
        let kv_bytes: Vec<u8> = (0..SLOTS * STRIP)
            .map(|_| rng.range(0, 255) as u8)
            .collect();
        let dk = DeviceBuffer::from_slice(&kv_bytes).map_err(|e| format!("kv: {e}"))?;
        let dplan = write.to_device(gpu).map_err(fail("write plan"))?;
        let dinputs = inputs.to_device(gpu).map_err(fail("inputs"))?;
        let tags = [
            LaunchTag::TailKFull,
            LaunchTag::TailVFull,
            LaunchTag::HeadKFull,
            LaunchTag::HeadVFull,
        ];
        for mode in [RealKvHashMode::Partial, RealKvHashMode::All] {
            for halves in [2usize, 1] {
                let kv: DeviceRealKv<'_> = match mode {
                    RealKvHashMode::All => dev_kv(&dk, layout, params)?,
                    _ => DeviceRealKv::new(
                        mode,
                        [cuda::DeviceRealKvSource::new(&dk, layout, params)
                            .map_err(fail("source"))?],
                    ),
                };
                // The chain-position assert on: the shifted positions make rows.
                let settings = [0, 1, 2, 3].map(|i| {
                    let s = DeviceSettings::new(tags[i])
                        .with_chain_position_assert(ChainPositionAssert::ON);
                    if i < 2 {
                        s.with_real_kv(kv)
                    } else {
                        s
                    }
                });
                let mut outcome: Vec<Outcome> = Vec::new();
                for ends in [false, true] {
                    let b: Vec<_> = buffers
                        .iter()
                        .map(|b| b.to_device(gpu))
                        .collect::<Result<_, _>>()
                        .map_err(fail("buffers"))?;
                    let c: Vec<_> = (0..4)
                        .map(|_| HealthCounters::new().to_device(gpu))
                        .collect::<Result<_, _>>()
                        .map_err(fail("counters"))?;
                    let ring = ViolationRing::<Cap<64>>::new()
                        .to_device(gpu)
                        .map_err(fail("ring"))?;
                    let before = cuda::launches_queued();
                    let r = match (ends, halves) {
                        (false, 2) => cuda::write_pair(
                            &stream,
                            &shape,
                            &dplan,
                            &dinputs,
                            (&settings[0], &settings[1]),
                            (&b[0], &b[1]),
                            &ring,
                            (&c[0], &c[1]),
                        )
                        .and_then(|()| {
                            cuda::write_pair(
                                &stream,
                                &shape,
                                &dplan,
                                &dinputs,
                                (&settings[2], &settings[3]),
                                (&b[2], &b[3]),
                                &ring,
                                (&c[2], &c[3]),
                            )
                        }),
                        (false, _) => cuda::write(
                            &stream,
                            &shape,
                            &dplan,
                            &dinputs,
                            &settings[0],
                            &b[0],
                            &ring,
                            &c[0],
                        )
                        .and_then(|()| {
                            cuda::write(
                                &stream,
                                &shape,
                                &dplan,
                                &dinputs,
                                &settings[2],
                                &b[2],
                                &ring,
                                &c[2],
                            )
                        }),
                        (true, 2) => cuda::write_ends(
                            &stream,
                            &shape,
                            &dplan,
                            &dinputs,
                            [&settings[0], &settings[1], &settings[2], &settings[3]],
                            [&b[0], &b[1], &b[2], &b[3]],
                            &ring,
                            [&c[0], &c[1], &c[2], &c[3]],
                        ),
                        (true, _) => cuda::write_ends_k(
                            &stream,
                            &shape,
                            &dplan,
                            &dinputs,
                            [&settings[0], &settings[2]],
                            [&b[0], &b[2]],
                            &ring,
                            [&c[0], &c[2]],
                        ),
                    };
                    r.map_err(fail("writes"))?;
                    let launches = cuda::launches_queued() - before;
                    let want = match (ends, halves) {
                        (true, _) => 1,
                        (false, _) => 2,
                    };
                    ensure!(
                        launches == want,
                        "case {seed} {mode:?} {halves} halves ends {ends}: {launches} launches, want {want}"
                    );
                    stream.status().map_err(fail("status"))?;
                    let ring = ring.to_host().map_err(fail("ring"))?;
                    let rows: Vec<Violation> = ring.violations().collect();
                    outcome.push((
                        b.iter()
                            .map(|b| b.to_host())
                            .collect::<Result<_, _>>()
                            .map_err(fail("buffers"))?,
                        ring.write_index(),
                        sorted(&rows),
                        c.iter()
                            .map(|c| c.to_host())
                            .collect::<Result<_, _>>()
                            .map_err(fail("counters"))?,
                    ));
                }
                let label = format!("case {seed} {mode:?} {halves} halves");
                let (two, one) = (&outcome[0], &outcome[1]);
                ensure!(one.0 == two.0, "{label}: canary bytes differ");
                ensure!(
                    one.1 == two.1 && one.2 == two.2,
                    "{label}: rows differ ({} against {})",
                    one.1,
                    two.1
                );
                ensure!(one.3 == two.3, "{label}: counters differ");
                rows_seen += one.2.len();
                cases += 1;
            }
        }
    }
    println!("    {cases} cases: the ends launch equals the separate writes ({rows_seen} rows)");
    ensure!(rows_seen > 0, "weak cases: no violation row");
    Ok(())
}
