//! Write workloads of issue #5: one 8192-token prefill (without and with four real-KV sources in
//! ALL mode), 64 requests of 512 tokens, 256 decodes of one token; the 8192-token prefill and
//! the 64 x 512 requests once more continuing cached chains with the chain-position assert on
//! (an engine's steps after `mark_initialised`: the write kernel's assert path, whose chain warp
//! also counts and reserves each tile's violation rows); slots random over the 1 GiB canary
//! buffer; and the chain floor (8192 dependent mix3 steps in one thread) in the same run.

use crate::timing::{self, print_table, Lead, Row};
use crate::verify::{shuffled_slots, SLOTS};
use crate::Options;
use kv_canary::cuda::{self, DeviceRealKv, DeviceRealKvSource, DeviceSettings, Gpu, Stream};
use kv_canary::hash::splitmix64;
use kv_canary::{
    CanaryBuffer, ChainPositionAssert, Error, HealthCounters, LaunchTag, RealKvHashMode,
    RealKvParams, RowLayout, UncheckedCapacity, UncheckedShape, ViolationRing, WriteInputs,
    WritePlan,
};
use kv_canary_testkit::floors::{self, Floors, L2Flush};

const KV_BYTES: usize = 128;

fn cap(what: &'static str, n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new(what, n).unwrap()
}

struct Workload {
    name: &'static str,
    reqs: usize,
    tokens: usize,
    real_kv: bool,
    /// Each request continues a cached chain (a seed slot whose record is at position 0) and
    /// the chain-position assert is on; its positions start at 1, so nothing is reported.
    chained: bool,
    /// SGLang's graph replay, where its benchmark has the workload.
    sglang_us: Option<f64>,
    /// Target in microseconds; `None` with `floor_factor` set: that many chain floors.
    target_us: Option<f64>,
    floor_factor: Option<f64>,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "prefill 8192 tokens, no real-KV",
        reqs: 1,
        tokens: 8192,
        real_kv: false,
        chained: false,
        sglang_us: Some(2116.0),
        target_us: None,
        floor_factor: Some(1.5),
    },
    Workload {
        name: "prefill 8192 tokens, 4 ALL sources x 128 B",
        reqs: 1,
        tokens: 8192,
        real_kv: true,
        chained: false,
        sglang_us: Some(36208.0),
        target_us: None,
        floor_factor: Some(1.5),
    },
    Workload {
        name: "64 requests x 512 tokens",
        reqs: 64,
        tokens: 512,
        real_kv: false,
        chained: false,
        sglang_us: Some(155.0),
        target_us: None,
        floor_factor: None,
    },
    Workload {
        name: "decode 256 x 1 token",
        reqs: 256,
        tokens: 1,
        real_kv: false,
        chained: false,
        sglang_us: Some(5.5),
        target_us: Some(4.0),
        floor_factor: None,
    },
    Workload {
        name: "prefill 8192 tokens after a cached prefix, chain assert",
        reqs: 1,
        tokens: 8192,
        real_kv: false,
        chained: true,
        sglang_us: None,
        target_us: None,
        floor_factor: Some(1.5),
    },
    Workload {
        name: "64 requests x 512 tokens after cached prefixes, chain assert",
        reqs: 64,
        tokens: 512,
        real_kv: false,
        chained: true,
        sglang_us: None,
        target_us: None,
        floor_factor: None,
    },
];

pub fn run(gpu: &Gpu, o: &Options) -> Result<Vec<Row>, Error> {
    let flush = L2Flush::new(256 << 20)?;
    let floors_kit = &Floors::new(gpu)?;
    let slots = shuffled_slots(0xF00D);
    let stream = Stream::new(gpu)?;
    // The chain floor: 8192 dependent mix3 steps in one thread.
    let out = floors::filled(8, 0).and_then(|_| {
        cust::memory::DeviceBuffer::<i64>::from_slice(&[0]).map_err(|e| Error::Cuda {
            call: "cuMemAlloc",
            code: e.into(),
        })
    })?;
    let floor = timing::time(&stream, Lead::Idle, 3, o.reps.min(50), || {
        floors_kit.chain(&stream, 8192, &out, false)
    })?;
    let vector_floor = timing::time(&stream, Lead::Idle, 3, o.reps.min(50), || {
        floors_kit.chain(&stream, 8192, &out, true)
    })?;
    let mut rows = vec![
        Row::floor(
            "write",
            "chain floor, 8192 mix3 steps",
            8192,
            floor.median_us,
        ),
        Row::floor(
            "write",
            "chain floor, vector datapath",
            8192,
            vector_floor.median_us,
        ),
    ];
    let canary = CanaryBuffer::<UncheckedCapacity, kv_canary::Device>::on_device(
        gpu,
        cap("slots", SLOTS),
        kv_canary::SlotStride::DEFAULT,
    )?;
    let kv: Vec<cust::memory::DeviceBuffer<u8>> = [0x11u8, 0x22, 0x33, 0x44]
        .iter()
        .map(|&f| floors::filled(SLOTS * KV_BYTES, f))
        .collect::<Result<_, _>>()?;
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
    for wl in WORKLOADS.iter().filter(|w| o.wants(w.name)) {
        let n = wl.reqs * wl.tokens;
        let offsets: Vec<i64> = (0..=wl.reqs).map(|r| (r * wl.tokens) as i64).collect();
        // Prefills start chains; decodes continue from random seed slots.
        // Chained requests: seed slots at the permutation's end, which no workload writes (their
        // records stay zero: position 0).
        let seeds: Vec<i64> = (0..wl.reqs)
            .map(|r| {
                if wl.chained {
                    slots[slots.len() - 1 - r] as i64
                } else if wl.tokens > 1 {
                    -1
                } else {
                    slots[n + r] as i64
                }
            })
            .collect();
        let plan = WritePlan::from_parts(cap("w", wl.reqs), offsets, seeds, wl.reqs as i32)?
            .to_device(gpu)?;
        let ids: Vec<i64> = (0..n)
            .map(|i| (splitmix64(i as u64) % 150_000) as i64)
            .collect();
        let first = i64::from(wl.chained);
        let positions: Vec<i64> = (0..n).map(|i| first + (i % wl.tokens) as i64).collect();
        let locs: Vec<i64> = slots[..n].iter().map(|&s| s as i64).collect();
        let inputs = WriteInputs::from_parts(cap("e", n), ids, positions, locs)?.to_device(gpu)?;
        let shape = UncheckedShape::from_capacities(cap("v", 1), cap("w", wl.reqs), cap("e", n));
        let ring = ViolationRing::try_with_capacity(cap("ring", 1024))?.to_device(gpu)?;
        let counters = HealthCounters::new().to_device(gpu)?;
        let assert = if wl.chained {
            ChainPositionAssert::ON
        } else {
            ChainPositionAssert::OFF
        };
        let mut launch =
            DeviceSettings::new(LaunchTag::TailKFull).with_chain_position_assert(assert);
        if wl.real_kv {
            launch = launch.with_real_kv(DeviceRealKv::new(RealKvHashMode::All, sources));
        }
        let eager = timing::time(&stream, Lead::Idle, 3, o.reps, || {
            cuda::write(
                &stream, &shape, &plan, &inputs, &launch, &canary, &ring, &counters,
            )
        })?;
        let mut s2 = Stream::new(gpu)?;
        let graph = s2.capture(|c| {
            cuda::write(
                c, &shape, &plan, &inputs, &launch, &canary, &ring, &counters,
            )
        })?;
        let timing::Replays { warm, queued, cold } =
            timing::replays(graph.stream(), floors_kit, &flush, 3, o.reps, || {
                graph.replay()
            })?;
        graph.stream().status()?;
        if wl.chained {
            // The workload is the clean case it claims: every chain continued as asserted.
            let reported = ring.to_host()?.write_index();
            assert_eq!(reported, 0, "{}: {reported} violation rows", wl.name);
        }
        let target = wl
            .target_us
            .or(wl.floor_factor.map(|f| f * floor.median_us));
        for (mode, l2, stats) in [
            ("eager", "warm", eager),
            ("graph", "warm", warm),
            ("queued", "warm", queued),
            ("graph", "cold", cold),
        ] {
            rows.push(Row {
                op: "write",
                workload: wl.name.into(),
                entries: n as u64,
                mode,
                l2,
                stats,
                sglang_us: wl.sglang_us,
                target_us: target,
            });
        }
    }
    print_table("write (microseconds, median; SGLang = its graph replay; prefill target = 1.5 x chain floor)", &rows);
    println!(
        "  chain floor (8192 dependent mix3 steps, one thread): {:.1} us; the same chain on the vector datapath: {:.1} us",
        floor.median_us, vector_floor.median_us
    );
    Ok(rows)
}
