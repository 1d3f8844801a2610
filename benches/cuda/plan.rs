//! Plan workloads of issue #5: decode batches, long prefixes, SWA with a LUT, the
//! expected-token pool, overflow, large batches; plus a grid-size sweep.

use crate::timing::{self, print_table, Lead, Row};
use crate::Options;
use kv_canary::cuda::{self, Gpu, KernelTuning, PlanKernel, Stream};
use kv_canary::ExpectedTokenTable;
use kv_canary::{Batch, BatchRow, Error, ReqToToken, UncheckedCapacity, UncheckedShape};
use kv_canary_testkit::floors::{Floors, L2Flush};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// One workload of the plan table.
pub struct Workload {
    pub name: &'static str,
    pub bs: usize,
    pub mean_prefix: usize,
    pub window: u64,
    pub pool: bool,
    pub half_capacity: bool,
    /// SWA with SGLang's GPU semantics (clamp) instead of the CPU's (check first).
    pub clamping: bool,
    pub sglang_us: f64,
    pub target_us: f64,
}

const fn w(
    name: &'static str,
    bs: usize,
    mean_prefix: usize,
    sglang_us: f64,
    target_us: f64,
) -> Workload {
    Workload {
        name,
        bs,
        mean_prefix,
        window: 0,
        pool: false,
        half_capacity: false,
        clamping: false,
        sglang_us,
        target_us,
    }
}

pub const WORKLOADS: &[Workload] = &[
    w("decode bs=1, prefix ~2k", 1, 2048, 7.3, 3.0),
    w("decode bs=8, ~2k", 8, 2048, 14.5, 4.0),
    w("decode bs=64, ~2k", 64, 2048, 15.4, 5.0),
    w("decode bs=256, ~2k", 256, 2048, 21.1, 9.0),
    w("decode bs=1024, ~2k", 1024, 2048, 49.3, 25.0),
    w("decode bs=256, ~32k", 256, 32768, 109.0, 85.0),
    Workload {
        window: 4096,
        ..w(
            "SWA bs=256, ~32k, window 4096, with LUT",
            256,
            32768,
            51.1,
            25.0,
        )
    },
    Workload {
        window: 4096,
        clamping: true,
        ..w(
            "SWA bs=256, ~32k, window 4096, LUT, clamping",
            256,
            32768,
            51.1,
            25.0,
        )
    },
    Workload {
        pool: true,
        ..w("expected-token pool bs=256, ~4k", 256, 4096, 28.5, 14.0)
    },
    Workload {
        half_capacity: true,
        ..w(
            "overflow bs=256, ~2k, capacity = half",
            256,
            2048,
            13.2,
            3.0,
        )
    },
    w("large bs=512, ~32k", 512, 32768, 214.1, 190.0),
    w("large bs=4096, ~4k", 4096, 4096, 333.9, 190.0),
];

/// Slots of the full KV pool the workloads draw from (and the LUT's length - 1).
const POOL_SLOTS: i64 = 1 << 24;

/// Device buffers of one workload.
struct Prepared {
    shape: UncheckedShape,
    batch: cuda::DeviceBatch<UncheckedCapacity>,
    table: cuda::DeviceReqToToken,
    lut: Option<cuda::DeviceLut>,
    pool: Option<(
        cuda::DeviceExpectedTable,
        cuda::DeviceValidLens<UncheckedCapacity>,
    )>,
    verify: kv_canary::VerifyPlan<UncheckedCapacity, kv_canary::Device>,
    write: kv_canary::WritePlan<UncheckedCapacity, kv_canary::Device>,
    entries: u64,
    clamping: bool,
}

fn prepare(gpu: &Gpu, wl: &Workload, seed: u64) -> Result<Prepared, Error> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let prefixes: Vec<i64> = (0..wl.bs)
        .map(|_| {
            let m = wl.mean_prefix as i64;
            if wl.bs == 1 {
                m + m / 20
            } else {
                rng.random_range(m / 2..=m + m / 2)
            }
        })
        .collect();
    let width = *prefixes.iter().max().unwrap() as usize + 1;
    let rows = wl.bs + 1;
    let cells: Vec<i32> = (0..rows * width)
        .map(|_| rng.random_range(1..=POOL_SLOTS - 1) as i32)
        .collect();
    let host_table = ReqToToken::from_vec(rows, width, cells)?;
    let batch: Batch = prefixes
        .iter()
        .enumerate()
        .map(|(r, &p)| BatchRow {
            req_pool_index: r as i64 + 1,
            prefix_len: p,
            extend_len: 1,
        })
        .collect();
    let entries: u64 = prefixes
        .iter()
        .map(|&p| {
            if wl.window > 0 {
                (p as u64).min(wl.window)
            } else {
                p as u64
            }
        })
        .sum();
    let capacity = if wl.half_capacity {
        entries / 2
    } else {
        entries
    } as usize;
    let cap = |what, n| UncheckedCapacity::new(what, n);
    let shape = UncheckedShape::from_capacities(
        cap("verify_capacity", capacity)?,
        cap("write_req_capacity", wl.bs)?,
        cap("write_entry_capacity", wl.bs)?,
    );
    let device_batch = shape.device_batch(gpu)?;
    device_batch.upload(&batch)?;
    let lut = if wl.window > 0 {
        let host: Vec<i64> = (0..=POOL_SLOTS)
            .map(|_| rng.random_range(1..=POOL_SLOTS / 4))
            .collect();
        Some(cuda::DeviceLut::from_host(gpu, &host)?)
    } else {
        None
    };
    let pool = if wl.pool {
        let cells: Vec<i32> = (0..rows * width)
            .map(|_| rng.random_range(0..=150_000i32))
            .collect();
        let t = cuda::DeviceExpectedTable::from_host(
            gpu,
            &ExpectedTokenTable::from_vec(rows, width, cells)?,
        )?;
        let lens = shape.device_valid_lens(gpu)?;
        lens.upload(&prefixes)?;
        Some((t, lens))
    } else {
        None
    };
    Ok(Prepared {
        verify: shape.device_verify_plan(gpu)?,
        write: shape.device_write_plan(gpu)?,
        table: cuda::DeviceReqToToken::from_host(gpu, &host_table)?,
        shape,
        batch: device_batch,
        lut,
        pool,
        entries,
        clamping: wl.clamping,
    })
}

/// Queues one plan of `p` on `on`.
fn launch<'a, L: cuda::Queue<'a> + ?Sized>(
    on: &L,
    p: &'a Prepared,
    window: u64,
) -> Result<(), Error> {
    let base = cuda::PlanInputs::full(&p.batch, &p.table);
    match (&p.lut, &p.pool) {
        (None, None) => cuda::plan(on, &p.shape, &base, &p.verify, &p.write),
        (None, Some((t, l))) => cuda::plan(
            on,
            &p.shape,
            &base.with_expected(t.with_valid_lens(l)),
            &p.verify,
            &p.write,
        ),
        (Some(lut), None) if p.clamping => cuda::plan(
            on,
            &p.shape,
            &base.with_group(cuda::Swa::clamping(window, lut)),
            &p.verify,
            &p.write,
        ),
        (Some(lut), None) => cuda::plan(
            on,
            &p.shape,
            &base.with_group(cuda::Swa::new(window, lut)),
            &p.verify,
            &p.write,
        ),
        (Some(lut), Some((t, l))) => cuda::plan(
            on,
            &p.shape,
            &base
                .with_group(cuda::Swa::new(window, lut))
                .with_expected(t.with_valid_lens(l)),
            &p.verify,
            &p.write,
        ),
    }
}

/// Eager warm, graph warm and graph cold timings of one workload, then graph warm timings of
/// the same plan under each of `alternatives` (printed: the kernel and grid sweep).
fn bench_one(
    gpu: &Gpu,
    wl: &Workload,
    o: &Options,
    floors: &Floors,
    flush: &L2Flush,
    rows: &mut Vec<Row>,
    alternatives: &[(&str, Gpu)],
) -> Result<(), Error> {
    let p = prepare(gpu, wl, 0xBE7C_0000 + wl.bs as u64)?;
    let reps = o.reps;
    let stream = Stream::new(gpu)?;
    let eager = timing::time(&stream, Lead::Idle, 10, reps, || {
        launch(&stream, &p, wl.window)
    })?;
    stream.status()?;
    drop(stream);
    let mut stream = Stream::new(gpu)?;
    let graph = stream.capture(|c| launch(c, &p, wl.window))?;
    let s = graph.stream();
    let timing::Replays { warm, queued, cold } =
        timing::replays(s, floors, flush, 10, reps, || graph.replay())?;
    s.status()?;
    for (mode, l2, stats) in [
        ("eager", "warm", eager),
        ("graph", "warm", warm),
        ("queued", "warm", queued),
        ("graph", "cold", cold),
    ] {
        rows.push(Row {
            op: "plan",
            workload: wl.name.into(),
            entries: p.entries,
            mode,
            l2,
            stats,
            sglang_us: Some(wl.sglang_us),
            target_us: Some(wl.target_us),
        });
    }
    let mut line = format!("  {:<44} {:>7.1}", wl.name, queued.median_us);
    for (_, alt) in alternatives {
        let mut stream = Stream::new(alt)?;
        let result = stream.capture(|c| launch(c, &p, wl.window)).and_then(|g| {
            let st = timing::time(g.stream(), Lead::Spin(floors), 10, reps.min(100), || {
                g.replay()
            })?;
            g.stream().status()?;
            Ok(st.median_us)
        });
        line += &match result {
            Ok(us) => format!(" {us:>9.1}"),
            Err(e) => format!(
                " {:>9}",
                format!("err:{}", &e.to_string()[..12.min(e.to_string().len())])
            ),
        };
    }
    println!("{line}");
    Ok(())
}

pub fn run(gpu: &mut Gpu, o: &Options) -> Result<Vec<Row>, Error> {
    let flush = L2Flush::new(256 << 20)?;
    let floors = &Floors::new(gpu)?;
    let mut rows = Vec::new();
    // What a launch costs by itself: empty kernels, graph replay.
    for (grid, block) in [(1u32, 32u32), (gpu.sm_count() * 2, 512)] {
        let mut stream = Stream::new(gpu)?;
        let graph = stream.capture(|c| floors.empty(c, grid, block))?;
        let st = timing::time(graph.stream(), Lead::Idle, 10, o.reps, || graph.replay())?;
        let q = timing::time(graph.stream(), Lead::Spin(floors), 10, o.reps, || {
            graph.replay()
        })?;
        println!(
            "empty kernel <<<{grid}, {block}>>>, graph replay: {:.1} us idle, {:.1} us queued (medians)",
            st.median_us, q.median_us
        );
        rows.push(Row::floor(
            "plan",
            &format!("empty kernel {grid}x{block}, graph"),
            0,
            st.median_us,
        ));
        rows.push(Row::floor(
            "plan",
            &format!("empty kernel {grid}x{block}, graph queued"),
            0,
            q.median_us,
        ));
    }
    // Chains of dependent loads (warm L2), graph replay: what round trips cost in a kernel.
    {
        use cust::memory::DeviceBuffer;
        let cuda = |e: cust::error::CudaError| Error::Cuda {
            call: "dependent-load buffers",
            code: e.into(),
        };
        let next: Vec<i64> = (0..4096i64).map(|i| (i * 1031 + 7) % 4096).collect();
        let dnext = DeviceBuffer::from_slice(&next).map_err(cuda)?;
        let dout = DeviceBuffer::from_slice(&[0i64]).map_err(cuda)?;
        let chase = kv_canary_testkit::floors::DependentLoads::new(floors, &dnext, &dout)?;
        print!("dependent loads then a store, one warp, graph replay queued (median):");
        for hops in [0usize, 1, 2, 3, 4, 8] {
            let mut stream = Stream::new(gpu)?;
            let graph = stream.capture(|c| chase.queue(c, hops))?;
            let st = timing::time(graph.stream(), Lead::Spin(floors), 10, o.reps, || {
                graph.replay()
            })?;
            print!("  {hops}: {:.2} us", st.median_us);
            rows.push(Row::floor(
                "plan",
                &format!("{hops} dependent loads, graph queued"),
                0,
                st.median_us,
            ));
        }
        println!();
    }
    // The same plans under other kernels and grids (same context: the buffers are shared).
    let default = gpu.kernel_tuning();
    let alternative = |kernel: PlanKernel, per_sm: u32| -> Result<Gpu, Error> {
        let mut g = Gpu::new()?;
        g.set_kernel_tuning(KernelTuning {
            plan_kernel: kernel,
            plan_blocks_per_sm: if kernel == PlanKernel::Large {
                per_sm
            } else {
                1
            },
            plan_small_blocks_per_sm: if kernel == PlanKernel::Small {
                per_sm
            } else {
                4
            },
            plan_lean_blocks_per_sm: if kernel == PlanKernel::Lean {
                per_sm
            } else {
                4
            },
            ..default
        });
        Ok(g)
    };
    let alternatives = [
        ("small", alternative(PlanKernel::Small, 4)?),
        ("large", alternative(PlanKernel::Large, 1)?),
        ("lean 1/SM", alternative(PlanKernel::Lean, 1)?),
        ("lean 4/SM", alternative(PlanKernel::Lean, 4)?),
    ];
    let mut header = format!(
        "  {:<44} {:>7}",
        "graph replay queued, warm L2, median us", "default"
    );
    for (name, _) in &alternatives {
        header += &format!(" {name:>9}");
    }
    println!("\nplan kernel and grid sweep\n{header}");
    for wl in WORKLOADS.iter().filter(|w| o.wants(w.name)) {
        if let Err(e) = bench_one(gpu, wl, o, floors, &flush, &mut rows, &alternatives) {
            println!("  {:<44} FAILED: {e}", wl.name);
        }
    }
    if o.wants("SWA") {
        lut_floor(gpu, floors, o, &mut rows)?;
    }
    print_table(
        "plan (microseconds, median; SGLang = its graph replay)",
        &rows,
    );
    Ok(rows)
}

/// The SWA workload's memory traffic alone (`floors::LutFloor`): 1 Mi random indices into a
/// LUT of `POOL_SLOTS + 1` elements, as the SWA plan gathers them, with and without the stores.
fn lut_floor(gpu: &Gpu, floors: &Floors, o: &Options, rows: &mut Vec<Row>) -> Result<(), Error> {
    use cust::memory::DeviceBuffer;
    use kv_canary_testkit::floors::{LutFloor, LutFloorMode};
    let n = 1usize << 20;
    let mut rng = ChaCha8Rng::seed_from_u64(0x1F7_F100);
    let idx: Vec<i32> = (0..n)
        .map(|_| rng.random_range(1..=POOL_SLOTS - 1) as i32)
        .collect();
    let lut: Vec<i64> = (0..=POOL_SLOTS)
        .map(|_| rng.random_range(1..=POOL_SLOTS / 4))
        .collect();
    let cuda = |e: cust::error::CudaError| Error::Cuda {
        call: "LUT floor buffers",
        code: e.into(),
    };
    let didx = DeviceBuffer::from_slice(&idx).map_err(cuda)?;
    let dlut = DeviceBuffer::from_slice(&lut).map_err(cuda)?;
    let outs: Vec<DeviceBuffer<i64>> = (0..4)
        .map(|_| DeviceBuffer::from_slice(&vec![0i64; n]).map_err(cuda))
        .collect::<Result<_, _>>()?;
    let floor = LutFloor::new(
        floors,
        &didx,
        &dlut,
        [&outs[0], &outs[1], &outs[2], &outs[3]],
    )?;
    let stream = Stream::new(gpu)?;
    print!("SWA plan traffic alone, 1 Mi entries (queued, median):");
    for (label, mode) in [
        ("gathers + stores", LutFloorMode::GatherAndStore),
        ("stores only", LutFloorMode::StoreOnly),
        ("gathers only", LutFloorMode::GatherOnly),
    ] {
        let st = timing::time(&stream, Lead::Spin(floors), 10, o.reps, || {
            floor.queue(&stream, mode)
        })?;
        print!("  {label} {:.1} us", st.median_us);
        rows.push(Row::floor(
            "plan",
            &format!("SWA floor, {label}"),
            n as u64,
            st.median_us,
        ));
    }
    println!();
    Ok(())
}
