//! CUDA graph capture and replay.

use crate::rng::Rng;
use crate::{ensure, fail};
use kv_canary::cuda::{self, Gpu, KernelTuning, PlanKernel, Stream};
use kv_canary::{cpu, Batch, BatchRow, Cap, ReqToToken, Shape};

/// One plan launch captured once, replayed over 20 different batches refilled in place; every
/// replay equals the CPU op run on the same inputs.
pub fn plan_replay(gpu: &Gpu) -> Result<(), String> {
    type S = Shape<Cap<2048>, Cap<64>, Cap<256>>;
    let shape = S::new();
    let mut rng = Rng::new(0x6A_0000);
    let host_table = ReqToToken::from_vec(
        65,
        48,
        (0..65 * 48).map(|_| rng.range(0, 9999) as i32).collect(),
    )
    .map_err(fail("table"))?;
    let table = cuda::DeviceReqToToken::from_host(gpu, &host_table).map_err(fail("table"))?;
    let batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let verify = shape.device_verify_plan(gpu).map_err(fail("verify plan"))?;
    let write = shape.device_write_plan(gpu).map_err(fail("write plan"))?;
    let (mut host_verify, mut host_write) = (shape.verify_plan(), shape.write_plan());
    let mut stream = Stream::new(gpu).map_err(fail("stream"))?;
    let inputs = cuda::PlanInputs::full(&batch, &table);
    let graph = stream
        .capture(|s| cuda::plan(s, &shape, &inputs, &verify, &write))
        .map_err(fail("capture"))?;
    for step in 0..20 {
        let bs = rng.range(0, 64);
        let host_batch: Batch = (0..bs)
            .map(|_| BatchRow {
                req_pool_index: if rng.chance(15) { 0 } else { rng.range(1, 64) },
                prefix_len: rng.range(0, 48),
                extend_len: rng.range(0, 4),
            })
            .collect();
        batch.upload(&host_batch).map_err(fail("upload"))?;
        graph.replay().map_err(fail("replay"))?;
        graph.stream().status().map_err(fail("status"))?;
        let inputs = kv_canary::PlanInputs::full(&host_batch, &host_table);
        cpu::plan(&shape, &inputs, &mut host_verify, &mut host_write).map_err(fail("cpu plan"))?;
        let (v, w) = (
            verify.to_host().map_err(fail("download"))?,
            write.to_host().map_err(fail("download"))?,
        );
        ensure!(
            v == host_verify,
            "step {step}: verify plans differ after replay"
        );
        ensure!(
            w == host_write,
            "step {step}: write plans differ after replay"
        );
    }
    println!("    1 capture, 20 replays over refilled batches: equal to the CPU op");
    Ok(())
}

/// A plan with a checked LUT (one cooperative launch whose blocks meet at a grid-wide barrier)
/// captured once and replayed 40 times over refilled batches, some of which read a table value
/// past the LUT: each replay equals the CPU op (the same error and nothing written, or the
/// same outputs), so the barrier's scratch words stay consistent across replays. Run twice: on
/// the default kernel (lean, entries cached across the barrier when every chunk is one round,
/// grid-strided otherwise), and on the small kernel with one block a multiprocessor, whose
/// grid holds 512 entries a block, so that many batches take several rounds.
pub fn plan_lut_replay(gpu: &Gpu) -> Result<(), String> {
    lut_replay_on(gpu, "default kernel", None)?;
    let mut small = Gpu::new().map_err(fail("gpu"))?;
    small.set_kernel_tuning(KernelTuning {
        plan_kernel: PlanKernel::Small,
        plan_small_blocks_per_sm: 1,
        ..small.kernel_tuning()
    });
    let round = small.sm_count() as usize * 512;
    lut_replay_on(&small, "small kernel, 1/SM", Some(round))
}

/// One run of [`plan_lut_replay`]; with `round` (entries of one round of the grid), at least 3
/// batches must need more than one.
fn lut_replay_on(gpu: &Gpu, label: &str, round: Option<usize>) -> Result<(), String> {
    type S = Shape<Cap<200_000>, Cap<256>, Cap<256>>;
    const ROWS: usize = 257;
    const WIDTH: usize = 1024;
    const LUT_LEN: usize = 10_001;
    let shape = S::new();
    let mut rng = Rng::new(0x1A7_0000);
    // Random slots inside the LUT, but rows 7 and 9 hold one value past it (columns 500, 1000).
    let mut cells: Vec<i32> = (0..ROWS * WIDTH)
        .map(|_| rng.range(-1, LUT_LEN as i64 - 1) as i32)
        .collect();
    cells[7 * WIDTH + 500] = LUT_LEN as i32 + 3;
    cells[9 * WIDTH + 1000] = LUT_LEN as i32;
    let host_table = ReqToToken::from_vec(ROWS, WIDTH, cells).map_err(fail("table"))?;
    let host_lut: Vec<i64> = (0..LUT_LEN).map(|_| rng.range(-1, 1 << 20)).collect();
    let window = 700u64;
    let table = cuda::DeviceReqToToken::from_host(gpu, &host_table).map_err(fail("table"))?;
    let lut = cuda::DeviceLut::from_host(gpu, &host_lut).map_err(fail("lut"))?;
    let batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let verify = shape.device_verify_plan(gpu).map_err(fail("verify plan"))?;
    let write = shape.device_write_plan(gpu).map_err(fail("write plan"))?;
    let (mut host_verify, mut host_write) = (shape.verify_plan(), shape.write_plan());
    let mut stream = Stream::new(gpu).map_err(fail("stream"))?;
    let inputs = cuda::PlanInputs::full(&batch, &table).with_group(cuda::Swa::new(window, &lut));
    let graph = stream
        .capture(|s| cuda::plan(s, &shape, &inputs, &verify, &write))
        .map_err(fail("capture"))?;
    let (mut errors, mut multi_round) = (0, 0);
    for step in 0..40 {
        let bs = rng.range(1, 255);
        let mut host_batch: Batch = (0..bs)
            .map(|_| {
                // Rows 7 and 9 (with their bad cells) in about one batch of three.
                let rp = if rng.chance(1) {
                    rng.pick(&[7, 9])
                } else {
                    rng.range(0, ROWS as i64 - 1)
                };
                BatchRow {
                    req_pool_index: rp,
                    prefix_len: rng.range(0, WIDTH as i64),
                    extend_len: rng.range(0, 3),
                }
            })
            .collect();
        if step % 3 == 1 {
            // Row 7's window [100, 800) holds its bad cell: a LUT error for sure.
            host_batch.push(BatchRow {
                req_pool_index: 7,
                prefix_len: 800,
                extend_len: 1,
            });
        }
        batch.upload(&host_batch).map_err(fail("upload"))?;
        graph.replay().map_err(fail("replay"))?;
        let got = graph.stream().status();
        graph.stream().clear_status().map_err(fail("clear"))?;
        let host_inputs = kv_canary::PlanInputs::full(&host_batch, &host_table)
            .with_group(kv_canary::Swa::window(window).with_lut(&host_lut));
        let want = cpu::plan(&shape, &host_inputs, &mut host_verify, &mut host_write);
        match (&want, &got) {
            (Err(w), Err(g)) => {
                ensure!(w == g, "step {step}: CPU error {w:?}, GPU {g:?}");
                errors += 1;
            }
            (Ok(summary), Ok(())) => {
                if round.is_some_and(|r| summary.requested_entries > r as u64) {
                    multi_round += 1;
                }
            }
            _ => return Err(format!("step {step}: CPU {want:?}, GPU {got:?}")),
        }
        let (v, w) = (
            verify.to_host().map_err(fail("download"))?,
            write.to_host().map_err(fail("download"))?,
        );
        ensure!(
            v == host_verify,
            "step {step}: verify plans differ after replay"
        );
        ensure!(
            w == host_write,
            "step {step}: write plans differ after replay"
        );
    }
    println!(
        "    {label}: 1 capture, 40 replays with a checked LUT: equal to the CPU op ({errors} LUT errors, nothing written; {multi_round} batches past one round of the grid)"
    );
    ensure!(
        (13..=35).contains(&errors) && (round.is_none() || multi_round >= 3),
        "{errors} LUT errors, {multi_round} multi-round batches: the batches do not mix enough"
    );
    Ok(())
}

/// A whole step — plan, verify, write, verify — captured once into one graph and replayed over
/// 24 engine steps (prefills, decodes, padding rows, a tampered slot now and then), the inputs
/// refilled in place and the chain-position assert flipped on the device after warm-up; after
/// every replay all state equals the CPU ops run on the same inputs.
pub fn step_replay(gpu: &Gpu) -> Result<(), String> {
    use kv_canary::cuda::{ChainAssertFlag, DeviceSettings};
    use kv_canary::{
        CanaryBuffer, CanarySlot, ChainPositionAssert, HealthCounters, LaunchSettings, LaunchTag,
        TokenCheckOff, ViolationRing,
    };
    type S = Shape<Cap<4096>, Cap<16>, Cap<512>>;
    const WIDTH: usize = 256;
    const ROWS: usize = 17;
    let shape = S::new();
    let mut rng = Rng::new(0x57E9_0000);
    // Request row r owns slots r * WIDTH + p + 1 (slot 0 stays the padding slot).
    let host_table = ReqToToken::from_vec(
        ROWS,
        WIDTH,
        (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect(),
    )
    .map_err(fail("table"))?;
    let mut host = (
        shape.verify_plan(),
        shape.write_plan(),
        CanaryBuffer::<Cap<4608>>::new(),
        ViolationRing::<Cap<256>>::new(),
        HealthCounters::new(),
        shape.write_inputs(),
    );
    let table = cuda::DeviceReqToToken::from_host(gpu, &host_table).map_err(fail("table"))?;
    let batch = shape.device_batch(gpu).map_err(fail("batch"))?;
    let verify = shape.device_verify_plan(gpu).map_err(fail("verify plan"))?;
    let write = shape.device_write_plan(gpu).map_err(fail("write plan"))?;
    let canary = host.2.to_device(gpu).map_err(fail("canary"))?;
    let ring = host.3.to_device(gpu).map_err(fail("ring"))?;
    let counters = host.4.to_device(gpu).map_err(fail("counters"))?;
    let inputs = host.5.to_device(gpu).map_err(fail("inputs"))?;
    let flag = ChainAssertFlag::new(gpu, ChainPositionAssert::OFF).map_err(fail("flag"))?;
    let launch = DeviceSettings::new(LaunchTag::TailKFull).with_chain_assert_flag(&flag);
    let plan_inputs = cuda::PlanInputs::full(&batch, &table);
    let mut stream = Stream::new(gpu).map_err(fail("stream"))?;
    let graph = stream
        .capture(|s| {
            cuda::plan(s, &shape, &plan_inputs, &verify, &write)?;
            cuda::verify(
                s,
                &shape,
                &verify,
                TokenCheckOff,
                &launch,
                &canary,
                &ring,
                &counters,
            )?;
            cuda::write(
                s, &shape, &write, &inputs, &launch, &canary, &ring, &counters,
            )?;
            cuda::verify(
                s,
                &shape,
                &verify,
                TokenCheckOff,
                &launch,
                &canary,
                &ring,
                &counters,
            )
        })
        .map_err(fail("capture"))?;
    let mut prefix = [0i64; ROWS];
    let mut total_rows = 0;
    for step in 0..24 {
        let assert = if step == 0 {
            ChainPositionAssert::OFF
        } else {
            ChainPositionAssert::ON
        };
        flag.set(assert).map_err(fail("flag"))?;
        // The batch: a few requests decoding or prefilling, some padding rows.
        let mut rows = Vec::new();
        let (mut ids, mut positions, mut slots) = (vec![], vec![], vec![]);
        #[allow(clippy::needless_range_loop)] // r is also the request's row in the table
        for r in 1..ROWS {
            if !rng.chance(60) {
                continue;
            }
            let room = WIDTH as i64 - prefix[r];
            let ext = if prefix[r] == 0 {
                rng.range(1, 40)
            } else {
                rng.range(0, 3)
            }
            .min(room);
            rows.push(BatchRow {
                req_pool_index: r as i64,
                prefix_len: prefix[r],
                extend_len: ext,
            });
            for p in prefix[r]..prefix[r] + ext {
                ids.push(rng.range(0, 50_000));
                positions.push(p);
                slots.push(host_table.get(r, p as usize).unwrap() as i64);
            }
            prefix[r] += ext;
            if rng.chance(20) {
                rows.push(BatchRow::PADDING);
            }
        }
        let host_batch: Batch = rows.into_iter().collect();
        {
            let p = host.5.parts_mut();
            p.input_ids[..ids.len()].copy_from_slice(&ids);
            p.positions[..positions.len()].copy_from_slice(&positions);
            p.out_cache_loc[..slots.len()].copy_from_slice(&slots);
        }
        // Now and then a tampered slot in some request's prefix.
        if step > 2 && rng.chance(30) {
            let s = rng.range(1, (ROWS * WIDTH) as i64) as usize;
            let mut rec: CanarySlot = host.2.slot(s).unwrap();
            rec.token ^= 1;
            host.2.set_slot(s, rec).map_err(fail("tamper"))?;
            canary.upload(&host.2).map_err(fail("tamper upload"))?;
        }
        host.3.clear();
        ring.clear().map_err(fail("ring clear"))?;
        batch.upload(&host_batch).map_err(fail("batch upload"))?;
        inputs.upload(&host.5).map_err(fail("inputs upload"))?;
        graph.replay().map_err(fail("replay"))?;
        graph.stream().status().map_err(fail("status"))?;
        // The CPU ops on the same inputs.
        let host_launch =
            LaunchSettings::new(LaunchTag::TailKFull).with_chain_position_assert(assert);
        let (v, w, buf, r, c, i) = &mut host;
        let pi = kv_canary::PlanInputs::full(&host_batch, &host_table);
        cpu::plan(&shape, &pi, v, w).map_err(fail("cpu plan"))?;
        cpu::verify(&shape, v, TokenCheckOff, &host_launch, buf, r, c)
            .map_err(fail("cpu verify"))?;
        cpu::write(&shape, w, i, &host_launch, buf, r, c).map_err(fail("cpu write"))?;
        cpu::verify(&shape, v, TokenCheckOff, &host_launch, buf, r, c)
            .map_err(fail("cpu verify"))?;
        let label = format!("step {step}");
        ensure!(
            verify.to_host().map_err(fail("download"))? == *v,
            "{label}: verify plans differ"
        );
        ensure!(
            write.to_host().map_err(fail("download"))? == *w,
            "{label}: write plans differ"
        );
        ensure!(
            canary.to_host().map_err(fail("download"))? == *buf,
            "{label}: canary buffers differ"
        );
        ensure!(
            counters.to_host().map_err(fail("download"))? == *c,
            "{label}: counters differ"
        );
        let gr = ring.to_host().map_err(fail("download"))?;
        ensure!(
            gr.write_index() == r.write_index(),
            "{label}: write index {} vs {}",
            gr.write_index(),
            r.write_index()
        );
        let mut a: Vec<_> = gr.raw_rows().collect();
        let mut b: Vec<_> = r.raw_rows().collect();
        a.sort_unstable();
        b.sort_unstable();
        ensure!(
            a == b,
            "{label}: violation rows differ\n  GPU {a:?}\n  CPU {b:?}"
        );
        total_rows += b.len();
    }
    println!("    1 capture (plan, verify, write, verify), 24 replays: equal to the CPU ops ({total_rows} violation rows)");
    ensure!(total_rows > 0, "no tampering was detected");
    Ok(())
}
