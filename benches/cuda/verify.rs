//! Verify workloads of issue #5: random slots over a 1 GiB canary buffer (32 M slots of 32
//! bytes), chains of 2048 tokens whose slots are random, NONE mode at 1 M / 4 M / 16 M entries,
//! 1 M entries with four real-KV sources in ALL mode (128 bytes a token), a disabled plan; and
//! the gather floor (the same self + predecessor gathers, nothing else) in the same run.

use crate::timing::{self, print_table, Lead, Row};
use crate::Options;
use kv_canary::cuda::{
    self, DeviceRealKv, DeviceRealKvSource, DeviceSettings, Gpu, KernelTuning, Stream,
};
use kv_canary::hash::{chain_step, fold_words, splitmix64, CHAIN_HEAD};
use kv_canary::{
    CanaryBuffer, CanarySlot, Error, HealthCounters, LaunchTag, RealKvHashMode, RealKvParams,
    RowLayout, TokenCheckOff, UncheckedCapacity, UncheckedShape, VerifyPlan, ViolationRing,
};
use kv_canary_testkit::floors::{self, Floors, L2Flush};

/// Slots of the 1 GiB canary buffer.
pub const SLOTS: usize = 1 << 25;
const CHAIN: usize = 2048;
/// Bytes per token of each real-KV source.
const KV_BYTES: usize = 128;

fn cap(what: &'static str, n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new(what, n).unwrap()
}

/// A random permutation of the slots 1..SLOTS (slot 0 stays the padding slot).
pub fn shuffled_slots(seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (1..SLOTS as u32).collect();
    let mut x = seed;
    for i in (1..v.len()).rev() {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let j = (splitmix64(x) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// The canary contents and verify entries of `n` entries: chains of CHAIN tokens on random
/// slots, every record consistent (no violation) with real-KV hash `rk`.
fn build(n: usize, slots: &[u32], rk: i64) -> (Vec<u8>, [Vec<i64>; 4]) {
    let mut bytes = vec![0u8; SLOTS * 32];
    let mut e = [vec![0i64; n], vec![-1i64; n], vec![0i64; n], vec![0i64; n]];
    let mut running = CHAIN_HEAD;
    let mut prev = -1i64;
    for i in 0..n {
        let pos = (i % CHAIN) as i64;
        if pos == 0 {
            running = CHAIN_HEAD;
            prev = -1;
        }
        let s = slots[i] as i64;
        let token = (splitmix64(i as u64) % 150_000) as i64;
        let rec = CanarySlot {
            token,
            position: pos,
            prev_hash: running,
            real_kv_hash: rk,
        };
        let at = s as usize * 32;
        for (k, v) in [rec.token, rec.position, rec.prev_hash, rec.real_kv_hash]
            .into_iter()
            .enumerate()
        {
            bytes[at + 8 * k..at + 8 * k + 8].copy_from_slice(&v.to_le_bytes());
        }
        e[0][i] = s;
        e[2][i] = pos;
        e[3][i] = prev;
        running = chain_step(running, token, pos);
        prev = s;
    }
    (bytes, e)
}

pub fn run(gpu: &Gpu, o: &Options) -> Result<Vec<Row>, Error> {
    let flush = L2Flush::new(256 << 20)?;
    let floors_kit = &Floors::new(gpu)?;
    let slots = shuffled_slots(0xC0DE);
    let mut rows = Vec::new();
    let sizes: &[(&str, usize, f64, Option<f64>)] = &[
        ("NONE, 1 M entries", 1 << 20, 59.4, None),
        ("NONE, 4 M entries", 1 << 22, 216.0, None),
        ("NONE, 16 M entries", 1 << 24, 900.0, None),
    ];
    // Real-KV: four sources of SLOTS x 128 bytes, each filled with one byte value, so every
    // slot's fold is the same known number.
    let fills = [0x11u8, 0x22, 0x33, 0x44];
    let mut rk = 0u64;
    for f in fills {
        rk = splitmix64(rk ^ fold_words(&[f; KV_BYTES]));
    }
    let stream = Stream::new(gpu)?;
    let sink = cust::memory::DeviceBuffer::<i64>::from_slice(&[0]).map_err(|e| Error::Cuda {
        call: "cuMemAlloc",
        code: e.into(),
    })?;
    let mut floor_16m = 0.0;
    let mut alt_lines: Vec<String> = Vec::new();
    for (i, &(name, n, sglang, target)) in sizes.iter().enumerate() {
        if !o.wants(name) {
            continue;
        }
        let (bytes, e) = build(n, &slots, 0);
        let canary = CanaryBuffer::from_bytes(cap("slots", SLOTS), 32, bytes)?.to_device(gpu)?;
        let plan = VerifyPlan::from_parts(
            cap("v", n),
            e[0].clone(),
            e[1].clone(),
            e[2].clone(),
            e[3].clone(),
            n as i32,
            1,
        )?
        .to_device(gpu)?;
        let shape = UncheckedShape::from_capacities(cap("v", n), cap("w", 1), cap("e", 1));
        let ring = ViolationRing::try_with_capacity(cap("ring", 1024))?.to_device(gpu)?;
        let counters = HealthCounters::new().to_device(gpu)?;
        let launch = DeviceSettings::new(LaunchTag::TailKFull);
        let eager = timing::time(&stream, Lead::Idle, 5, o.reps, || {
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
        })?;
        let mut s2 = Stream::new(gpu)?;
        let graph = s2.capture(|c| {
            cuda::verify(
                c,
                &shape,
                &plan,
                TokenCheckOff,
                &launch,
                &canary,
                &ring,
                &counters,
            )
        })?;
        let timing::Replays { warm, queued, cold } =
            timing::replays(graph.stream(), floors_kit, &flush, 5, o.reps, || {
                graph.replay()
            })?;
        graph.stream().status()?;
        let r = ring.to_host()?;
        assert_eq!(
            r.write_index(),
            0,
            "the benchmark's canary must verify clean"
        );
        // The gather floor over the same entries, the same buffer.
        let (dslots, dprevs) = (plan_array(&e[0])?, plan_array(&e[3])?);
        let half = floors::StageHalf {
            buf: canary_bytes(&canary),
            kv: None,
        };
        let gather =
            floors::StageFloor::new(floors_kit, &dslots, &dprevs, n, &[half], 32, 0, &sink)?;
        let floor = timing::time(&stream, Lead::Idle, 5, o.reps, || gather.queue(&stream))?;
        if i == 2 {
            floor_16m = floor.median_us;
        }
        push(
            &mut rows,
            name,
            n,
            [eager, warm, queued, cold],
            sglang,
            target,
        );
        rows.push(Row::floor(
            "verify",
            &format!("gather floor, {name}"),
            n as u64,
            floor.median_us,
        ));
        if i == 0 {
            // Disabled plan (enable 0): only the kernel counter moves.
            let off = VerifyPlan::from_parts(
                cap("v", n),
                e[0].clone(),
                e[1].clone(),
                e[2].clone(),
                e[3].clone(),
                n as i32,
                0,
            )?
            .to_device(gpu)?;
            let mut s3 = Stream::new(gpu)?;
            let g = s3.capture(|c| {
                cuda::verify(
                    c,
                    &shape,
                    &off,
                    TokenCheckOff,
                    &launch,
                    &canary,
                    &ring,
                    &counters,
                )
            })?;
            let warm = timing::time(g.stream(), Lead::Idle, 5, o.reps, || g.replay())?;
            rows.push(Row {
                op: "verify",
                workload: "enable 0".into(),
                entries: 0,
                mode: "graph",
                l2: "warm",
                stats: warm,
                sglang_us: Some(3.9),
                target_us: None,
            });
            // Four real-KV sources, ALL mode, 128 bytes a token.
            let (bytes, e) = build(n, &slots, rk as i64);
            let canary =
                CanaryBuffer::from_bytes(cap("slots", SLOTS), 32, bytes)?.to_device(gpu)?;
            let kv: Vec<cust::memory::DeviceBuffer<u8>> = fills
                .iter()
                .map(|&f| {
                    let b = floors::filled(SLOTS * KV_BYTES, f)?;
                    Ok(b)
                })
                .collect::<Result<_, Error>>()?;
            let layout = RowLayout {
                num_rows: SLOTS,
                row_bytes: KV_BYTES,
                row_stride_bytes: KV_BYTES,
            };
            let params = RealKvParams::new(1, KV_BYTES as i64, KV_BYTES as i64);
            let sources = [
                DeviceRealKvSource::new(&kv[0], layout, params)?,
                DeviceRealKvSource::new(&kv[1], layout, params)?,
                DeviceRealKvSource::new(&kv[2], layout, params)?,
                DeviceRealKvSource::new(&kv[3], layout, params)?,
            ];
            let launch = DeviceSettings::new(LaunchTag::TailKFull)
                .with_real_kv(DeviceRealKv::new(RealKvHashMode::All, sources));
            let plan = VerifyPlan::from_parts(
                cap("v", n),
                e[0].clone(),
                e[1].clone(),
                e[2].clone(),
                e[3].clone(),
                n as i32,
                1,
            )?
            .to_device(gpu)?;
            let eager = timing::time(&stream, Lead::Idle, 5, o.reps, || {
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
            })?;
            let mut s4 = Stream::new(gpu)?;
            let g = s4.capture(|c| {
                cuda::verify(
                    c,
                    &shape,
                    &plan,
                    TokenCheckOff,
                    &launch,
                    &canary,
                    &ring,
                    &counters,
                )
            })?;
            let timing::Replays { warm, queued, cold } =
                timing::replays(g.stream(), floors_kit, &flush, 5, o.reps, || g.replay())?;
            g.stream().status()?;
            assert_eq!(
                ring.to_host()?.write_index(),
                0,
                "the real-KV canary must verify clean"
            );
            // The same launch on other kernels and grids (same context, shared buffers).
            let default = gpu.kernel_tuning();
            let mut line = String::from("  ALL, 1 M entries, graph warm us:");
            for (label, config) in [
                (
                    "unstaged 1/SM",
                    KernelTuning {
                        verify_all_staged: false,
                        ..default
                    },
                ),
                (
                    "staged 2/SM",
                    KernelTuning {
                        verify_all_staged_blocks_per_sm: 2,
                        ..default
                    },
                ),
                (
                    "staged 1/SM",
                    KernelTuning {
                        verify_all_staged_blocks_per_sm: 1,
                        ..default
                    },
                ),
            ] {
                let mut alt = Gpu::new()?;
                alt.set_kernel_tuning(config);
                let mut s5 = Stream::new(&alt)?;
                let g = s5.capture(|c| {
                    cuda::verify(
                        c,
                        &shape,
                        &plan,
                        TokenCheckOff,
                        &launch,
                        &canary,
                        &ring,
                        &counters,
                    )
                })?;
                let st = timing::time(g.stream(), Lead::Idle, 3, o.reps.min(50), || g.replay())?;
                g.stream().status()?;
                line += &format!("  {label} {:.1}", st.median_us);
            }
            alt_lines.push(line);
            push(
                &mut rows,
                "ALL, 4 sources x 128 B, 1 M entries",
                n,
                [eager, warm, queued, cold],
                688.0,
                Some(230.0),
            );
        }
    }
    // The 16 M target is relative to the floor measured here.
    for r in rows
        .iter_mut()
        .filter(|r| r.workload == "NONE, 16 M entries")
    {
        r.target_us = Some(1.15 * floor_16m);
    }
    print_table("verify (microseconds, median; SGLang = its graph replay; 16 M target = 1.15 x gather floor)", &rows);
    for r in rows.iter().filter(|r| r.mode == "floor") {
        println!(
            "  {:<44} {:>10} {:>10.1}",
            r.workload, r.entries, r.stats.median_us
        );
    }
    for line in alt_lines {
        println!("{line}");
    }
    Ok(rows)
}

fn canary_bytes(
    c: &CanaryBuffer<UncheckedCapacity, kv_canary::Device>,
) -> &kv_canary::cuda::DeviceArray<u8> {
    c.device_bytes()
}

fn plan_array(v: &[i64]) -> Result<cust::memory::DeviceBuffer<i64>, Error> {
    cust::memory::DeviceBuffer::from_slice(v).map_err(|e| Error::Cuda {
        call: "cuMemAlloc",
        code: e.into(),
    })
}

#[allow(clippy::too_many_arguments)]
fn push(
    rows: &mut Vec<Row>,
    name: &str,
    n: usize,
    [eager, warm, queued, cold]: [timing::Stats; 4],
    sglang: f64,
    target: Option<f64>,
) {
    for (mode, l2, stats) in [
        ("eager", "warm", eager),
        ("graph", "warm", warm),
        ("queued", "warm", queued),
        ("graph", "cold", cold),
    ] {
        rows.push(Row {
            op: "verify",
            workload: name.into(),
            entries: n as u64,
            mode,
            l2,
            stats,
            sglang_us: Some(sglang),
            target_us: target,
        });
    }
}
