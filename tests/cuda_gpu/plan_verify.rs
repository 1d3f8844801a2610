//! The plan and the head verify in one launch (`cuda::plan_verify_head_pair`,
//! `cuda::plan_verify_head`) against the two launches they replace (`cuda::plan`, then
//! `cuda::verify_pair` or `cuda::verify`).

use crate::rng::Rng;
use crate::step::sorted;
use crate::{ensure, fail};
use kv_canary::cuda::{self, DeviceSettings, Gpu, Stream};
use kv_canary::step::{Canary, TailKv};
use kv_canary::{
    Batch, BatchRow, CanarySlot, Cap, HealthCounters, LaunchTag, PlanInputs, ReqToToken, Shape,
    TokenCheckOff, Violation, ViolationRing,
};

type S = Shape<Cap<16384>, Cap<64>, Cap<16384>>;
const SLOTS: usize = 16384;
const RING: usize = 32768;
const WIDTH: usize = 256;

/// Random prefills stamped by a CPU canary, some head records spoiled, then a decode batch over
/// them: the fused launch (of both halves, and of the K half alone) and the two launches, each
/// on its own copy of the head buffers, give the same plans, rows (as a set), write index and
/// counters; the fused forms queue one launch, and with `plan_verify_fusion` off two.
pub fn plan_verify_head_matches_two_launches(gpu: &Gpu) -> Result<(), String> {
    let (mut cases, mut rows_seen, mut entries_seen) = (0, 0usize, 0usize);
    for seed in 0..12u64 {
        let mut rng = Rng::new(0x9E_AD00 + seed);
        let bs = [1usize, 7, 40, 63][seed as usize % 4];
        let rows = bs + 1;
        // Request row r's positions take distinct slots of a shuffled pool (slot 0: padding).
        let mut ids: Vec<i32> = (1..SLOTS as i32).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.range(0, i as i64) as usize);
        }
        let mut cells = vec![0i32; rows * WIDTH];
        let mut next = ids.into_iter();
        let per_row = (SLOTS - 1) / rows;
        let lens: Vec<usize> = (0..rows)
            .map(|_| rng.range(1, per_row.min(WIDTH) as i64) as usize)
            .collect();
        for r in 1..rows {
            for p in 0..lens[r] {
                cells[r * WIDTH + p] = next.next().unwrap_or(0);
            }
        }
        let table = ReqToToken::from_vec(rows, WIDTH, cells).map_err(fail("table"))?;
        // The prefill: every request's prefix, stamped into the head buffers on the CPU.
        let mut canary = Canary::full(S::new(), Cap::<SLOTS>, Cap::<RING>);
        let prefill: Batch = (1..rows)
            .map(|r| BatchRow {
                req_pool_index: r as i64,
                prefix_len: 0,
                extend_len: lens[r] as i64 - 1,
            })
            .collect();
        let mut inputs = canary.write_inputs();
        {
            let p = inputs.parts_mut();
            p.out_cache_loc.fill(-1);
            let mut i = 0;
            #[allow(clippy::needless_range_loop)] // r is also the request's row in the table
            for r in 1..rows {
                for pos in 0..lens[r] - 1 {
                    p.out_cache_loc[i] = i64::from(table.get(r, pos).unwrap_or(0));
                    p.input_ids[i] = rng.range(0, 150_000);
                    p.positions[i] = pos as i64;
                    i += 1;
                }
            }
        }
        let step = canary
            .plan(&PlanInputs::full(&prefill, &table))
            .and_then(|s| s.verify_head_and_write(&inputs))
            .map_err(fail("cpu prefill"))?;
        step.verify_tail(TailKv::NONE)
            .map_err(fail("cpu prefill tail"))?;
        // Some head records spoiled, in either half.
        for _ in 0..rng.range(0, 40) {
            let tag = if rng.chance(50) {
                LaunchTag::HeadKFull
            } else {
                LaunchTag::HeadVFull
            };
            let buf = canary.buffer_mut(tag).ok_or("head buffer")?;
            let s = rng.range(1, SLOTS as i64 - 1) as usize;
            let rec: CanarySlot = buf.slot(s).ok_or("slot")?;
            buf.set_slot(
                s,
                CanarySlot {
                    token: rec.token ^ 1,
                    ..rec
                },
            )
            .map_err(fail("spoil"))?;
        }
        // The decode batch (padding rows now and then).
        let decode: Batch = (1..rows)
            .flat_map(|r| {
                let row = BatchRow {
                    req_pool_index: r as i64,
                    prefix_len: lens[r] as i64 - 1,
                    extend_len: 1,
                };
                if r % 5 == 0 {
                    vec![row, BatchRow::PADDING]
                } else {
                    vec![row]
                }
            })
            .take(63)
            .collect();
        let shape = S::new();
        let dtable = cuda::DeviceReqToToken::from_host(gpu, &table).map_err(fail("table"))?;
        let dbatch = shape.device_batch(gpu).map_err(fail("batch"))?;
        dbatch.upload(&decode).map_err(fail("batch upload"))?;
        let head_k = canary.buffer(LaunchTag::HeadKFull).ok_or("head K")?;
        let head_v = canary.buffer(LaunchTag::HeadVFull).ok_or("head V")?;
        let settings = (
            DeviceSettings::new(LaunchTag::HeadKFull),
            DeviceSettings::new(LaunchTag::HeadVFull),
        );
        let plan_inputs = cuda::PlanInputs::full(&dbatch, &dtable);
        // Modes: 0 the plan and the verify pair, 1 both fused, 2 fused with the fusion tuned
        // off (two launches), 3 the plan and the K verify, 4 the K half fused.
        let mut outcome = Vec::new();
        for mode in 0..5 {
            let mut tuned = gpu.clone();
            let mut tuning = tuned.kernel_tuning();
            tuning.plan_verify_fusion = mode != 2;
            tuned.set_kernel_tuning(tuning);
            let stream = Stream::new(&tuned).map_err(fail("stream"))?;
            let verify = shape.device_verify_plan(gpu).map_err(fail("verify plan"))?;
            let write = shape.device_write_plan(gpu).map_err(fail("write plan"))?;
            let k = head_k.to_device(gpu).map_err(fail("head K"))?;
            let v = head_v.to_device(gpu).map_err(fail("head V"))?;
            let ring = ViolationRing::<Cap<RING>>::new()
                .to_device(gpu)
                .map_err(fail("ring"))?;
            let (ck, cv) = (
                HealthCounters::new()
                    .to_device(gpu)
                    .map_err(fail("counters"))?,
                HealthCounters::new()
                    .to_device(gpu)
                    .map_err(fail("counters"))?,
            );
            let before = cuda::launches_queued();
            match mode {
                0 => {
                    cuda::plan(&stream, &shape, &plan_inputs, &verify, &write)
                        .map_err(fail("plan"))?;
                    cuda::verify_pair(
                        &stream,
                        &shape,
                        &verify,
                        TokenCheckOff,
                        (&settings.0, &settings.1),
                        (&k, &v),
                        &ring,
                        (&ck, &cv),
                    )
                    .map_err(fail("verify pair"))?;
                }
                1 | 2 => cuda::plan_verify_head_pair(
                    &stream,
                    &shape,
                    &plan_inputs,
                    &verify,
                    &write,
                    (&settings.0, &settings.1),
                    (&k, &v),
                    &ring,
                    (&ck, &cv),
                )
                .map_err(fail("fused pair"))?,
                3 => {
                    cuda::plan(&stream, &shape, &plan_inputs, &verify, &write)
                        .map_err(fail("plan"))?;
                    cuda::verify(
                        &stream,
                        &shape,
                        &verify,
                        TokenCheckOff,
                        &settings.0,
                        &k,
                        &ring,
                        &ck,
                    )
                    .map_err(fail("verify"))?;
                }
                _ => cuda::plan_verify_head(
                    &stream,
                    &shape,
                    &plan_inputs,
                    &verify,
                    &write,
                    &settings.0,
                    &k,
                    &ring,
                    &ck,
                )
                .map_err(fail("fused K"))?,
            }
            let launches = cuda::launches_queued() - before;
            let want = if mode == 1 || mode == 4 { 1 } else { 2 };
            ensure!(
                launches == want,
                "case {seed} mode {mode}: {launches} launches queued, want {want}"
            );
            stream.status().map_err(fail("status"))?;
            let ring = ring.to_host().map_err(fail("ring"))?;
            let rows: Vec<Violation> = ring.violations().collect();
            outcome.push((
                verify.to_host().map_err(fail("verify plan"))?,
                write.to_host().map_err(fail("write plan"))?,
                ring.write_index(),
                sorted(&rows),
                ck.to_host().map_err(fail("counters"))?,
                cv.to_host().map_err(fail("counters"))?,
            ));
        }
        let label = format!("case {seed} (bs {bs})");
        for (one, two, what) in [
            (&outcome[1], &outcome[0], "pair"),
            (&outcome[2], &outcome[0], "pair, fusion off"),
            (&outcome[4], &outcome[3], "K half"),
        ] {
            ensure!(one.0 == two.0, "{label}, {what}: verify plans differ");
            ensure!(one.1 == two.1, "{label}, {what}: write plans differ");
            ensure!(
                one.2 == two.2 && one.3 == two.3,
                "{label}, {what}: rows differ: {} fused against {} ({:?} / {:?})",
                one.2,
                two.2,
                one.3.first(),
                two.3.first()
            );
            ensure!(
                one.4 == two.4 && one.5 == two.5,
                "{label}, {what}: counters differ"
            );
        }
        let one = &outcome[1];
        let two = &outcome[0];
        cases += 1;
        rows_seen += one.3.len();
        entries_seen += two.0.num_valid() as usize;
    }
    println!(
        "    {cases} plan + head verify cases (both halves, the K half): one launch equals the two ({entries_seen} entries, {rows_seen} violation rows)"
    );
    ensure!(rows_seen > 0, "weak cases: no violation row");
    Ok(())
}
