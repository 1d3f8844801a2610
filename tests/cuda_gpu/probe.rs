//! The racecheck probe of the write kernel's finding (docs/reliability.md, "The write kernel's
//! racecheck finding"): `racecheck_probe.cu`'s two kernels run write.cu's round structure
//! (a consumer warp reading tile t, 256 workers writing tile t + 1, three buffers, a
//! `__syncthreads` a round), one with the workers' `bar.sync 1, 256` and one without. Both are
//! race-free; the test checks their sums against the host. Under `compute-sanitizer --tool
//! racecheck` the verdict is in the sanitizer's report: hazards in `kv_canary_probe_named` and
//! none in `kv_canary_probe_plain` mean racecheck misreads the named barrier. The named variant
//! runs only with `KV_CANARY_RACECHECK_PROBE_NAMED=1` (the write kernel no longer has a named
//! barrier; `gpu-run-remote.sh racecheck-write` sets it).

use crate::{ensure, fail, rng::Rng};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{launch_custom, CustomModule, Gpu, Stream};

/// `racecheck_probe.cu` compiled to PTX (its header names the command).
const PROBE_PTX: &str = include_str!("racecheck_probe.ptx");
/// Entries a tile, threads a block (`racecheck_probe.cu`).
const TILE: usize = 256;
const THREADS: usize = 352;
/// Blocks of one launch, tiles a block, launches per variant.
const BLOCKS: usize = 264;
const TILES: usize = 7;
const LAUNCHES: usize = 4;

/// Both probe kernels over random tiles: every thread's sum equals the host's.
// The one `unsafe` of the GPU tests: launching PTX of their own is a driver-boundary call
// (`launch_custom`), as in kv-canary-testkit's floors.
#[allow(unsafe_code)]
pub fn named_barrier(gpu: &Gpu) -> Result<(), String> {
    let module = CustomModule::from_ptx(gpu, PROBE_PTX).map_err(fail("probe module"))?;
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut rng = Rng::new(0x7072_6f62);
    // The write kernel has used no named barrier since session 22, so the named variant (whose
    // hazards are racecheck's misreading, by design) runs only when asked for: a racecheck
    // over every GPU test then reports none of its own making.
    let with_named = std::env::var_os("KV_CANARY_RACECHECK_PROBE_NAMED").is_some_and(|v| v == "1");
    if !with_named {
        println!(
            "    named-barrier variant not run (KV_CANARY_RACECHECK_PROBE_NAMED=1 runs it, as \
             gpu-run-remote.sh racecheck-write does)"
        );
    }
    let variants = [
        ("kv_canary_probe_named", true),
        ("kv_canary_probe_plain", false),
    ];
    for (name, named) in variants
        .into_iter()
        .filter(|&(_, named)| with_named || !named)
    {
        let kernel = module.kernel(name).map_err(fail("probe kernel"))?;
        for launch in 0..LAUNCHES {
            let input: Vec<i64> = (0..BLOCKS * TILES * TILE)
                .map(|_| (rng.next_u64() >> 24) as i64)
                .collect();
            gpu.make_current().map_err(fail("context"))?;
            let din = DeviceBuffer::from_slice(&input).map_err(fail("probe input"))?;
            let dout = DeviceBuffer::from_slice(&vec![-1i64; BLOCKS * THREADS])
                .map_err(fail("probe output"))?;
            let (mut in_addr, mut out_addr) =
                (din.as_device_ptr().as_raw(), dout.as_device_ptr().as_raw());
            let mut ntiles = TILES as i32;
            let mut params = [
                (&mut in_addr as *mut u64).cast(),
                (&mut out_addr as *mut u64).cast(),
                (&mut ntiles as *mut i32).cast(),
            ];
            // SAFETY: the kernel takes (const i64*, i64*, int): three pointers to a u64 device
            // address, a u64 device address and an i32, in order. It reads
            // `BLOCKS x TILES x TILE` i64 of `din` and writes `BLOCKS x THREADS` i64 of `dout`,
            // both that long, and both outlive the launch (the stream is synchronised below,
            // before they drop); the module stays loaded until this function returns.
            unsafe {
                launch_custom(
                    &stream,
                    &kernel,
                    BLOCKS as u32,
                    THREADS as u32,
                    0,
                    &mut params,
                )
            }
            .map_err(fail("probe launch"))?;
            stream.synchronize().map_err(fail("probe sync"))?;
            let mut out = vec![0i64; BLOCKS * THREADS];
            dout.copy_to(&mut out[..]).map_err(fail("probe readback"))?;
            for block in 0..BLOCKS {
                let tiles = &input[block * TILES * TILE..(block + 1) * TILES * TILE];
                for tid in 0..THREADS {
                    let got = out[block * THREADS + tid];
                    let want = expected(tiles, tid, named);
                    ensure!(
                        got == want,
                        "{name} launch {launch}: block {block} thread {tid} summed {got}, the host {want}"
                    );
                }
            }
        }
    }
    println!(
        "    racecheck probe: {LAUNCHES} launches x {BLOCKS} blocks x {TILES} tiles of each kernel \
         (named barrier, plain) equal to the host"
    );
    Ok(())
}

/// Thread `tid`'s sum: a consumer lane, over the tiles `t`, its eight flags (`value & 1` of
/// entries `8 tid ..`), its values (entries `tid`, `tid + 32`, ...) and entry `(37 t) mod 256`;
/// a worker, with the named barrier, the eight scratch words (`t`) of rounds 1 ..= TILES; the
/// idle warps 0.
fn expected(tiles: &[i64], tid: usize, named: bool) -> i64 {
    let warp = tid / 32;
    if tid < 32 {
        tiles
            .chunks_exact(TILE)
            .enumerate()
            .map(|(t, tile)| {
                let flags = tile[tid * 8..tid * 8 + 8]
                    .iter()
                    .map(|v| v & 1)
                    .sum::<i64>();
                let strided = tile.iter().skip(tid).step_by(32).sum::<i64>();
                flags + strided + tile[(t * 37) % TILE]
            })
            .sum()
    } else if warp.is_multiple_of(4) || !named {
        0
    } else {
        (1..=TILES as i64).map(|t| 8 * t).sum()
    }
}
