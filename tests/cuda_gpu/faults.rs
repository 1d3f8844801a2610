//! Fault injection into device memory (issue 33 item 5, features `faults` and `cuda`): the
//! injector's hooks corrupt a device KV cache and a device block table exactly as they corrupt
//! host memory (same seeds, same bytes, same records; over a cust `DeviceBuffer`, the crate's
//! `DeviceArray` and with `cudarc` a `CudaSlice`), and a live-KV flip injected into the device
//! cache is reported by the next device verify as the CPU's verify reports it on the host cache.

use crate::rng::Rng;
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{self, DeviceRealKv, DeviceRealKvSource, DeviceSettings, Gpu, Stream};
use kv_canary::guard::faults::{Fault, FaultInjector, FaultPlan};
use kv_canary::{
    cpu, CanaryBuffer, Cap, HealthCounters, LaunchSettings, LaunchTag, RealKv, RealKvHashMode,
    RealKvParams, RowLayout, Shape, TokenCheckOff, VerifyEntry, ViolationRing,
};

const SLOTS: usize = 32;
const STRIP: usize = 64;

fn plan(fault: Fault) -> FaultPlan {
    FaultPlan {
        fault,
        probability: 0.5,
        warmup: 1,
        limit: 6,
    }
}

/// The hooks over host memory and over device memory from the same seeds: equal bytes and
/// records after 12 steps of every byte-flip hook and the table-cell hook.
pub fn device_faults_match_host(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let mut rng = Rng::new(0xFA17_0001);
    let kv: Vec<u8> = (0..SLOTS * STRIP).map(|_| rng.next_u64() as u8).collect();
    let table: Vec<u32> = (0..64).map(|_| rng.range(0, 100) as u32).collect();
    let byte_of = |s: i64| Some(s as usize * STRIP + 3);
    let plans = [
        plan(Fault::LiveKv),
        plan(Fault::IdleKv),
        plan(Fault::AfterStamp),
        plan(Fault::TableCell),
    ];
    let slots: Vec<i64> = (1..SLOTS as i64).collect();
    let eligible: Vec<usize> = (0..64).step_by(3).collect();
    // The same steps on every memory.
    let run = |kv: &mut dyn FnMut(&mut FaultInjector, Fault),
               cells: &mut dyn FnMut(&mut FaultInjector)|
     -> Vec<(Fault, u64, i64)> {
        let mut injector = FaultInjector::new(0x5EED, &plans);
        for _ in 0..12 {
            injector.begin_step();
            kv(&mut injector, Fault::LiveKv);
            kv(&mut injector, Fault::IdleKv);
            kv(&mut injector, Fault::AfterStamp);
            cells(&mut injector);
        }
        injector
            .injected()
            .iter()
            .map(|i| (i.fault, i.step, i.at))
            .collect()
    };
    // Host.
    let (mut host_kv, mut host_table) = (kv.clone(), table.clone());
    let host_log = run(
        &mut |inj, fault| {
            let _ = match fault {
                Fault::LiveKv => inj.live_kv(&mut host_kv, &slots, byte_of),
                Fault::IdleKv => inj.idle_kv(&mut host_kv, &slots, byte_of),
                _ => inj.after_stamp(&mut host_kv, &slots, byte_of),
            };
        },
        &mut |inj| {
            let _ = inj.table_cell(&mut host_table, &eligible, &[7u32, 9]);
        },
    );
    ensure!(
        host_log.len() >= 8,
        "weak run: {} faults injected",
        host_log.len()
    );
    // A cust DeviceBuffer.
    let mut dev_kv = DeviceBuffer::from_slice(&kv).map_err(fail("kv"))?;
    let mut dev_table = DeviceBuffer::from_slice(&table).map_err(fail("table"))?;
    let dev_log = run(
        &mut |inj, fault| {
            let _ = match fault {
                Fault::LiveKv => inj.live_kv(&mut dev_kv, &slots, byte_of),
                Fault::IdleKv => inj.idle_kv(&mut dev_kv, &slots, byte_of),
                _ => inj.after_stamp(&mut dev_kv, &slots, byte_of),
            };
        },
        &mut |inj| {
            let _ = inj.table_cell(&mut dev_table, &eligible, &[7u32, 9]);
        },
    );
    ensure!(dev_log == host_log, "DeviceBuffer: injections differ");
    let (mut back_kv, mut back_table) = (vec![0u8; kv.len()], vec![0u32; table.len()]);
    dev_kv.copy_to(&mut back_kv[..]).map_err(fail("kv back"))?;
    dev_table
        .copy_to(&mut back_table[..])
        .map_err(fail("table back"))?;
    ensure!(
        back_kv == host_kv,
        "DeviceBuffer: KV bytes differ from the host's"
    );
    ensure!(
        back_table == host_table,
        "DeviceBuffer: table cells differ from the host's"
    );
    // Out of range: nothing changes, nothing recorded.
    let mut one = FaultInjector::new(
        1,
        &[FaultPlan {
            fault: Fault::LiveKv,
            probability: 1.0,
            warmup: 0,
            limit: 1,
        }],
    );
    one.begin_step();
    ensure!(
        one.live_kv(&mut dev_kv, &[5], |_| Some(SLOTS * STRIP))
            .is_none(),
        "a flip past the device buffer was recorded"
    );
    #[cfg(feature = "cudarc")]
    {
        let cudarc_err = |e: cudarc::driver::DriverError| format!("cudarc: {e:?}");
        let stream = cudarc::driver::CudaContext::new(gpu.ordinal() as usize)
            .map_err(cudarc_err)?
            .default_stream();
        let mut slice_kv = stream.clone_htod(&kv).map_err(cudarc_err)?;
        let mut slice_table = stream.clone_htod(&table).map_err(cudarc_err)?;
        let log = run(
            &mut |inj, fault| {
                let _ = match fault {
                    Fault::LiveKv => inj.live_kv(&mut slice_kv, &slots, byte_of),
                    Fault::IdleKv => inj.idle_kv(&mut slice_kv, &slots, byte_of),
                    _ => inj.after_stamp(&mut slice_kv, &slots, byte_of),
                };
            },
            &mut |inj| {
                let _ = inj.table_cell(&mut slice_table, &eligible, &[7u32, 9]);
            },
        );
        ensure!(log == host_log, "CudaSlice: injections differ");
        let back_kv = stream.clone_dtoh(&slice_kv).map_err(cudarc_err)?;
        let back_table = stream.clone_dtoh(&slice_table).map_err(cudarc_err)?;
        ensure!(
            back_kv == host_kv,
            "CudaSlice: KV bytes differ from the host's"
        );
        ensure!(
            back_table == host_table,
            "CudaSlice: table cells differ from the host's"
        );
    }
    println!(
        "    {} faults injected over 12 steps (live, idle, after-stamp KV flips, table cells): \
         device memory equal to host memory after each hook",
        host_log.len()
    );
    Ok(())
}

/// A live-KV flip injected into the device KV cache is reported by the next device verify
/// (real-KV PARTIAL), as the CPU reports the same flip of the host cache: equal rings.
pub fn device_live_kv_flip_detected(gpu: &Gpu) -> Result<(), String> {
    let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
    let mut rng = Rng::new(0xFA17_0002);
    let kv: Vec<u8> = (0..SLOTS * STRIP).map(|_| rng.next_u64() as u8).collect();
    let params = RealKvParams::new(1, STRIP as i64, STRIP as i64);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    // Slots 8..12 hold a request's four tokens, written with their fingerprints.
    let mut plan = shape.write_plan();
    let p = plan.parts_mut();
    p.offsets[..2].copy_from_slice(&[0, 4]);
    p.seed_slot_indices[0] = -1;
    *p.num_valid_reqs = 1;
    let mut inputs = shape.write_inputs();
    let q = inputs.parts_mut();
    q.input_ids[..4].copy_from_slice(&[11, 12, 13, 14]);
    q.positions[..4].copy_from_slice(&[0, 1, 2, 3]);
    q.out_cache_loc[..4].copy_from_slice(&[8, 9, 10, 11]);
    let mut vplan = shape.verify_plan();
    let entries: Vec<VerifyEntry> = (0..4)
        .map(|i| VerifyEntry {
            slot: 8 + i,
            expected_token: 11 + i,
            expected_position: i,
            prev_slot: if i == 0 { -1 } else { 7 + i },
        })
        .collect();
    vplan.set_entries(&entries).map_err(fail("entries"))?;
    let fault = FaultPlan {
        fault: Fault::LiveKv,
        probability: 1.0,
        warmup: 0,
        limit: 1,
    };
    let byte_of = |s: i64| Some(s as usize * STRIP);
    let live = [8i64, 9, 10, 11];
    // The CPU.
    let mut host_kv = kv.clone();
    let (mut buf, mut ring, mut counters) = (
        CanaryBuffer::<Cap<SLOTS>>::new(),
        ViolationRing::<Cap<8>>::new(),
        HealthCounters::new(),
    );
    {
        let real = RealKv::dense(RealKvHashMode::Partial, &host_kv, STRIP).map_err(fail("kv"))?;
        let launch = LaunchSettings::new(LaunchTag::TailKFull).with_real_kv(real);
        cpu::write(
            &shape,
            &plan,
            &inputs.view(),
            &launch,
            &mut buf,
            &mut ring,
            &mut counters,
        )
        .map_err(fail("cpu write"))?;
    }
    let mut injector = FaultInjector::new(3, &[fault]);
    injector.begin_step();
    let injected = injector
        .live_kv(&mut host_kv, &live, byte_of)
        .ok_or("the host flip was not injected")?;
    {
        let real = RealKv::dense(RealKvHashMode::Partial, &host_kv, STRIP).map_err(fail("kv"))?;
        let launch = LaunchSettings::new(LaunchTag::HeadKFull).with_real_kv(real);
        cpu::verify(
            &shape,
            &vplan,
            TokenCheckOff,
            &launch,
            &buf,
            &mut ring,
            &mut counters,
        )
        .map_err(fail("cpu verify"))?;
    }
    ensure!(
        ring.stored_len() == 1,
        "the CPU reported {} rows",
        ring.stored_len()
    );
    // The GPU.
    let mut dkv = DeviceBuffer::from_slice(&kv).map_err(fail("kv"))?;
    let (dbuf, dring, dcounters) = (
        CanaryBuffer::<Cap<SLOTS>>::new()
            .to_device(gpu)
            .map_err(fail("canary"))?,
        ViolationRing::<Cap<8>>::new()
            .to_device(gpu)
            .map_err(fail("ring"))?,
        HealthCounters::new()
            .to_device(gpu)
            .map_err(fail("counters"))?,
    );
    let (dplan, dinputs, dv) = (
        plan.to_device(gpu).map_err(fail("plan"))?,
        inputs.to_device(gpu).map_err(fail("inputs"))?,
        vplan.to_device(gpu).map_err(fail("verify plan"))?,
    );
    let layout = RowLayout::dense(SLOTS, STRIP);
    {
        let source = DeviceRealKvSource::new(&dkv, layout, params).map_err(fail("source"))?;
        let settings = DeviceSettings::new(LaunchTag::TailKFull)
            .with_real_kv(DeviceRealKv::new(RealKvHashMode::Partial, [source]));
        cuda::write(
            &stream, &shape, &dplan, &dinputs, &settings, &dbuf, &dring, &dcounters,
        )
        .and_then(|()| stream.status())
        .map_err(fail("gpu write"))?;
    }
    let mut device_injector = FaultInjector::new(3, &[fault]);
    device_injector.begin_step();
    let device_injected = device_injector
        .live_kv(&mut dkv, &live, byte_of)
        .ok_or("the device flip was not injected")?;
    ensure!(
        device_injected == injected,
        "the device flip differs: {device_injected:?} vs {injected:?}"
    );
    {
        let source = DeviceRealKvSource::new(&dkv, layout, params).map_err(fail("source"))?;
        let settings = DeviceSettings::new(LaunchTag::HeadKFull)
            .with_real_kv(DeviceRealKv::new(RealKvHashMode::Partial, [source]));
        cuda::verify(
            &stream,
            &shape,
            &dv,
            TokenCheckOff,
            &settings,
            &dbuf,
            &dring,
            &dcounters,
        )
        .and_then(|()| stream.status())
        .map_err(fail("gpu verify"))?;
    }
    let gring = dring.to_host().map_err(fail("ring back"))?;
    ensure!(
        gring.raw_rows().collect::<Vec<_>>() == ring.raw_rows().collect::<Vec<_>>(),
        "rings differ: GPU {:?}, CPU {:?}",
        gring.raw_rows().collect::<Vec<_>>(),
        ring.raw_rows().collect::<Vec<_>>()
    );
    let row = ring.raw_rows().next().unwrap_or_default();
    ensure!(
        row[1] == injected.at,
        "the row names slot {}, the flip hit {}",
        row[1],
        injected.at
    );
    println!(
        "    live-KV flip of slot {} injected into the device cache at step {}: reported by the \
         next device verify (HEAD_K_FULL, row {row:?}), equal to the CPU's",
        injected.at, injected.step
    );
    Ok(())
}
