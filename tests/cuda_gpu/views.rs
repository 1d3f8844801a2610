//! The engine's own device memory: every input of a device step is a view (`from_raw`) of a
//! `cust` allocation standing for the engine's tensor, the real-KV sources are a paged pool
//! (16 tokens a page, rows with holes) with K and V at two byte offsets of one allocation, and
//! a whole step over them must agree with the CPU and issue no host-to-device copy (only the
//! report's readback).
//!
//! `unsafe` here: the views' raw constructors, over allocations this module keeps alive.
#![allow(unsafe_code)]

use crate::rng::Rng;
use crate::step::{compare, draw_rows, fill_write_inputs};
use crate::{ensure, fail};
use cust::memory::{CopyDestination, DeviceBuffer};
use kv_canary::cuda::{
    self, DeviceBatch, DeviceRealKv, DeviceRealKvSource, Gpu, RawBatch, RawWriteInputs, Stream,
};
use kv_canary::step::{Canary, KvPair, StepReport, TailKv};
use kv_canary::{
    Batch, Cap, RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources, ReqToToken,
    RowLayout, Shape, WriteInputs,
};

/// Request rows (row 0 is the padding row) and positions per row.
pub const ROWS: usize = 8;
pub const WIDTH: usize = 32;
/// Slots: row r, position p is slot r * WIDTH + p + 1; slot 0 stays the padding slot.
pub const SLOTS: usize = ROWS * WIDTH + 1;
/// Write entries a step.
pub const ENTRIES: usize = 64;
/// Tokens a page of the paged KV pool, bytes a token, bytes between page rows (a hole of 64
/// bytes after each page's 512).
pub const PAGE: usize = 16;
pub const TOKEN_BYTES: usize = 32;
const ROW_STRIDE: usize = PAGE * TOKEN_BYTES + 64;
/// Pages covering every slot.
const PAGES: usize = SLOTS.div_ceil(PAGE);
/// Where K and V start in the one KV allocation (16-byte multiples, not page multiples).
pub const K_AT: usize = 256;
pub const V_AT: usize = K_AT + PAGES * ROW_STRIDE + 128;
pub const KV_BYTES: usize = V_AT + PAGES * ROW_STRIDE + 48;
/// Copies of the step's report readback into pinned memory (ring rows, 8 counters, the write
/// offsets, the status word, 4 scalars, the entries requested): the only transfers of a step
/// over views.
const REPORT_COPIES: u64 = 16;

type Spec = Shape<Cap<48>, Cap<ROWS>, Cap<ENTRIES>>;

pub fn slot(row: usize, pos: usize) -> i64 {
    (row * WIDTH + pos + 1) as i64
}

/// Where slot `s`'s strip starts in a pool whose page 0 is at `base`.
pub fn strip(base: usize, s: usize) -> usize {
    base + (s / PAGE) * ROW_STRIDE + (s % PAGE) * TOKEN_BYTES
}

pub const LAYOUT: RowLayout = RowLayout {
    num_rows: PAGES,
    row_bytes: PAGE * TOKEN_BYTES,
    row_stride_bytes: ROW_STRIDE,
};
pub const PARAMS: RealKvParams =
    RealKvParams::new(PAGE as i64, TOKEN_BYTES as i64, TOKEN_BYTES as i64);

/// The host fingerprint of the half starting at `at` of the host KV image.
pub fn host_kv(kv: &[u8], at: usize) -> Result<RealKv<'_>, String> {
    let src = RealKvSource::strided(&kv[at..], LAYOUT, PARAMS).map_err(fail("host source"))?;
    Ok(RealKv::new(
        RealKvHashMode::All,
        RealKvSources::from_array([src]),
    ))
}

/// A `cust` allocation of `n` copies of `value`: the engine's tensor.
pub fn engine<T: cust::memory::DeviceCopy + Copy>(
    n: usize,
    value: T,
) -> Result<DeviceBuffer<T>, String> {
    DeviceBuffer::from_slice(&vec![value; n]).map_err(|e| format!("engine allocation: {e}"))
}

/// Writes `host` into the engine's tensor (the engine's own copy, not the crate's).
pub fn fill<T: cust::memory::DeviceCopy>(
    dst: &mut DeviceBuffer<T>,
    host: &[T],
) -> Result<(), String> {
    dst.copy_from(host).map_err(|e| format!("engine copy: {e}"))
}

/// The engine's device address of a tensor.
pub fn addr<T: cust::memory::DeviceCopy>(b: &DeviceBuffer<T>) -> u64 {
    b.as_device_ptr().as_raw()
}

/// CPU and GPU canaries over random steps, the GPU reading only views of engine memory: equal
/// reports, counters and canary bytes, and each step issues no host-to-device copy and exactly
/// the report's device-to-host copies.
pub fn step_over_views_matches_cpu_with_no_copies(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    let shape = Spec::new();
    let mut cpu = Canary::full(shape, Cap::<SLOTS>, Cap::<64>);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let mut dev =
        Canary::full_on(stream, shape, Cap::<SLOTS>, Cap::<64>).map_err(fail("canary"))?;

    // The engine's tensors.
    let cells: Vec<i32> = (0..ROWS * WIDTH).map(|i| i as i32 + 1).collect();
    let table = ReqToToken::from_vec(ROWS, WIDTH, cells.clone()).map_err(fail("table"))?;
    let mut e_table = engine(ROWS * WIDTH, 0i32)?;
    fill(&mut e_table, &cells)?;
    let mut e_cols = [
        engine(ROWS, 0i64)?,
        engine(ROWS, 0i64)?,
        engine(ROWS, 0i64)?,
    ];
    let mut e_bs = engine(1, 0i32)?;
    let mut e_tok = [
        engine(ENTRIES, 0i64)?,
        engine(ENTRIES, 0i64)?,
        engine(ENTRIES, -1i64)?,
    ];
    let mut e_kv = engine(KV_BYTES, 0u8)?;

    // Views of them (the engine keeps every allocation alive past the last step below).
    // SAFETY: each address is a live cust allocation of this Gpu's context with at least the
    // elements the view claims, aligned by cuMemAlloc; all outlive `dev`'s steps and reports,
    // which are waited for before they are dropped, and the test writes them only between
    // steps (synchronous cust copies, ordered with the blocking stream).
    let (dtable, dbatch, dinputs) = unsafe {
        let dtable = cuda::DeviceReqToToken::from_raw(gpu, addr(&e_table), ROWS, WIDTH)
            .map_err(fail("table view"))?;
        let raw = RawBatch {
            req_pool_indices: addr(&e_cols[0]),
            prefix_lens: addr(&e_cols[1]),
            extend_seq_lens: addr(&e_cols[2]),
            bs: Some(addr(&e_bs)),
        };
        let dbatch = DeviceBatch::from_raw(gpu, Cap::<ROWS>, raw).map_err(fail("batch view"))?;
        let raw = RawWriteInputs {
            input_ids: addr(&e_tok[0]),
            positions: addr(&e_tok[1]),
            out_cache_loc: addr(&e_tok[2]),
        };
        let dinputs =
            WriteInputs::from_raw(gpu, Cap::<ENTRIES>, raw).map_err(fail("inputs view"))?;
        (dtable, dbatch, dinputs)
    };
    ensure!(
        dtable.is_view() && dinputs.is_view(),
        "the views do not say they are views"
    );
    let kv_addr = addr(&e_kv);
    // SAFETY: the KV allocation holds KV_BYTES bytes and outlives every step (as above).
    let kv_view = |at: usize| unsafe {
        DeviceRealKvSource::from_raw(gpu, kv_addr + at as u64, KV_BYTES - at, LAYOUT, PARAMS)
    };
    // The same through a byte offset of the engine's allocation.
    let k_at = DeviceRealKvSource::at(&e_kv, K_AT, LAYOUT, PARAMS).map_err(fail("K source"))?;
    ensure!(
        k_at == kv_view(K_AT).map_err(fail("K view"))?,
        "a source at a byte offset differs from the raw view at that address"
    );

    let mut inputs = cpu.write_inputs();
    let mut kv = vec![0u8; KV_BYTES];
    let mut rng = Rng::new(0x0EA9_17E5);
    let mut cached = [0usize; ROWS];
    let (mut overflows, mut found, mut steps_checked) = (0, 0, 0);
    // `KV_CANARY_VIEW_STEPS` overrides the count (to bisect the racecheck exit-9 item of
    // docs/reliability.md, "Sanitizers at full case counts").
    let steps = std::env::var("KV_CANARY_VIEW_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(crate::scaled(120) as usize);
    for step in 0..steps {
        let drawn = draw_rows(&mut rng, &mut cached, WIDTH, true);
        let tokens = drawn.written(slot);
        let batch = drawn.batch();
        fill_write_inputs(inputs.parts_mut(), &tokens);
        // The engine fills its own tensors (its copies; the canary copies nothing).
        let mut cols = [vec![0i64; ROWS], vec![0i64; ROWS], vec![0i64; ROWS]];
        for (i, &(r, pr, e)) in drawn.rows.iter().enumerate() {
            (cols[0][i], cols[1][i], cols[2][i]) = (r as i64, pr as i64, e as i64);
        }
        for (dst, src) in e_cols.iter_mut().zip(&cols) {
            fill(dst, src)?;
        }
        fill(&mut e_bs, &[drawn.rows.len() as i32])?;
        fill(&mut e_tok[0], inputs.input_ids())?;
        fill(&mut e_tok[1], inputs.positions())?;
        fill(&mut e_tok[2], inputs.out_cache_loc())?;

        let cpu_step = cpu
            .plan(&kv_canary::PlanInputs::full(&batch, &table))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&inputs))
            .map_err(fail("cpu step"))?;
        let before = cuda::transfers_issued();
        let dev_step = dev
            .plan(&cuda::PlanInputs::full(&dbatch, &dtable))
            .and_then(|s| s.verify_head())
            .and_then(|s| s.write(&dinputs))
            .map_err(fail("device step"))?;
        let head = cuda::transfers_issued().since(before);
        // The forward pass: this step's K and V bytes, written by the engine into its pool.
        for &(s, t, pos) in &tokens {
            for (base, t, pos) in [(K_AT, t, pos), (V_AT, !t, !pos)] {
                let at = strip(base, s as usize);
                kv[at..at + 8].copy_from_slice(&t.to_le_bytes());
                kv[at + 8..at + 16].copy_from_slice(&pos.to_le_bytes());
                kv[at + 16..at + 32].copy_from_slice(&[step as u8; 16]);
            }
        }
        fill(&mut e_kv, &kv)?;
        let c: StepReport = cpu_step
            .verify_tail(TailKv::new(host_kv(&kv, K_AT)?, host_kv(&kv, V_AT)?))
            .map_err(fail("cpu tail"))?;
        let before_tail = cuda::transfers_issued();
        let k = DeviceRealKv::new(RealKvHashMode::All, [kv_view(K_AT).map_err(fail("K"))?]);
        let v = DeviceRealKv::new(RealKvHashMode::All, [kv_view(V_AT).map_err(fail("V"))?]);
        let views_made = cuda::transfers_issued().since(before_tail);
        let pending = dev_step
            .verify_tail(KvPair { k, v })
            .map_err(fail("device tail"))?;
        let step_copies = cuda::transfers_issued().since(before);
        ensure!(
            head.host_to_device == 0 && head.device_to_host == 0,
            "step {step}: plan, head verify and write over views issued copies: {head:?}"
        );
        ensure!(
            views_made == cuda::Transfers::default(),
            "step {step}: making real-KV views copied: {views_made:?}"
        );
        ensure!(
            step_copies.host_to_device == 0 && step_copies.device_to_host == REPORT_COPIES,
            "step {step}: a step over views issued {step_copies:?}, expected 0 uploads and \
             the report's {REPORT_COPIES} readbacks"
        );
        let d = pending.wait().map_err(fail("device report"))?;
        compare(step, &c, &d, &mut overflows, &mut found)?;
        steps_checked += 1;
    }
    crate::step::same_canaries(&cpu, &dev, &format!(" after {steps} steps"))?;
    // The counter counts: the crate's own synchronous upload of a batch is 4 copies.
    let owned = shape.device_batch(gpu).map_err(fail("owned batch"))?;
    let before = cuda::transfers_issued();
    owned
        .upload(&Batch::from_columns([1], [0], [3]))
        .map_err(fail("owned upload"))?;
    let counted = cuda::transfers_issued().since(before);
    ensure!(
        counted.host_to_device == 4,
        "an owned batch upload counted {counted:?}, expected 4 uploads"
    );
    println!(
        "    {steps_checked} steps over engine views (paged K/V, page {PAGE}, byte offsets \
         {K_AT}/{V_AT}) equal to the CPU ({found} with violations, {overflows} unverified); \
         per step 0 host-to-device copies and {REPORT_COPIES} report readbacks"
    );
    // Keep every engine allocation alive until here.
    drop((e_table, e_cols, e_bs, e_tok, e_kv));
    Ok(())
}

/// Views that cannot be right are refused with the values named; a view past its allocation's
/// end is caught by the driver's address range.
pub fn views_refused_past_their_allocation(gpu: &Gpu) -> Result<(), String> {
    gpu.make_current().map_err(fail("context"))?;
    // 2 MiB: a multiple of any allocation granularity, so the driver's range ends exactly there.
    const BYTES: usize = 1 << 21;
    const WORDS: usize = BYTES / 8;
    let e = engine(WORDS, 0i64)?;
    // SAFETY: every view below is refused before it could be used (checked by the test), but
    // the last, which covers the allocation exactly and is dropped before it.
    unsafe {
        let long = cuda::DeviceLut::from_raw(gpu, addr(&e), WORDS + 1);
        ensure!(
            matches!(long, Err(kv_canary::Error::DeviceView { len, .. }) if len == WORDS + 1),
            "a LUT view one past its allocation was accepted: {:?}",
            long.err()
        );
        let odd = cuda::DeviceLut::from_raw(gpu, addr(&e) + 4, 2);
        ensure!(
            matches!(odd, Err(kv_canary::Error::DeviceView { .. })),
            "a misaligned i64 view was accepted"
        );
        let empty = cuda::DeviceLut::from_raw(gpu, addr(&e), 0);
        ensure!(
            matches!(empty, Err(kv_canary::Error::ZeroCapacity { .. })),
            "an empty LUT view was accepted"
        );
        let strips = RowLayout {
            num_rows: BYTES / 16 + 1,
            row_bytes: 16,
            row_stride_bytes: 16,
        };
        let kv = DeviceRealKvSource::from_raw(
            gpu,
            addr(&e),
            BYTES + 16,
            strips,
            RealKvParams::new(1, 16, 16),
        );
        ensure!(
            matches!(kv, Err(kv_canary::Error::DeviceView { .. })),
            "a real-KV view past its allocation was accepted: {kv:?}"
        );
        let fits = cuda::DeviceLut::from_raw(gpu, addr(&e), WORDS).map_err(fail("exact view"))?;
        ensure!(fits.len() == WORDS, "exact view length");
        let msg = long.err().map(|e| e.to_string()).unwrap_or_default();
        println!("    refused: {msg}");
    }
    drop(e);
    Ok(())
}

/// The engine's table of `rows x width` cells in a new engine allocation.
fn engine_table<K: kv_canary::TableKind>(
    host: &kv_canary::ReqTable<K>,
) -> Result<DeviceBuffer<i32>, String> {
    DeviceBuffer::from_slice(host.as_slice()).map_err(|e| format!("engine: {e}"))
}

/// Valid lengths in an engine allocation of the engine's element type.
enum EngineLens {
    I64(DeviceBuffer<i64>),
    I32(DeviceBuffer<i32>),
    U32(DeviceBuffer<u32>),
}

impl EngineLens {
    /// `lens` padded to `len`: `i32` when `seed % 3 == 1` and `u32` when `seed % 3 == 2` if every
    /// length fits, else `i64`.
    fn new(lens: &[i64], len: usize, seed: u64) -> Result<Self, String> {
        let engine = |e: cust::error::CudaError| format!("engine: {e}");
        let mut v = lens.to_vec();
        v.resize(len.max(lens.len()).max(1), 0);
        let fits = |lo: i64, hi: i64| v.iter().all(|&x| (lo..=hi).contains(&x));
        Ok(match seed % 3 {
            1 if fits(i64::from(i32::MIN), i64::from(i32::MAX)) => EngineLens::I32(
                DeviceBuffer::from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>())
                    .map_err(engine)?,
            ),
            2 if fits(0, i64::from(u32::MAX)) => EngineLens::U32(
                DeviceBuffer::from_slice(&v.iter().map(|&x| x as u32).collect::<Vec<_>>())
                    .map_err(engine)?,
            ),
            _ => EngineLens::I64(DeviceBuffer::from_slice(&v).map_err(engine)?),
        })
    }

    /// 0 `i64`, 1 `i32`, 2 `u32`.
    fn kind(&self) -> usize {
        match self {
            EngineLens::I64(_) => 0,
            EngineLens::I32(_) => 1,
            EngineLens::U32(_) => 2,
        }
    }

    /// The device view of the lengths and their count.
    fn view<'a, W: kv_canary::Capacity>(
        &'a self,
        gpu: &Gpu,
        capacity: W,
        count: &'a DeviceBuffer<i32>,
    ) -> Result<kv_canary::cuda::Borrowed<'a, cuda::DeviceValidLens<W>>, String> {
        match self {
            EngineLens::I64(b) => {
                cuda::DeviceValidLens::from_buffers(gpu, capacity, b, Some(count))
            }
            EngineLens::I32(b) => {
                cuda::DeviceValidLens::from_buffers(gpu, capacity, b, Some(count))
            }
            EngineLens::U32(b) => {
                cuda::DeviceValidLens::from_buffers(gpu, capacity, b, Some(count))
            }
        }
        .map_err(fail("valid lens view"))
    }
}

/// The batch view of SGLang's three columns in the engine's element types (each its own).
fn engine_batch<'a, W: kv_canary::Capacity>(
    gpu: &Gpu,
    capacity: W,
    columns: &'a [EngineLens; 3],
    bs: Option<&'a DeviceBuffer<i32>>,
) -> Result<kv_canary::cuda::Borrowed<'a, DeviceBatch<W>>, String> {
    match (&columns[0], &columns[1], &columns[2]) {
        (EngineLens::I64(x), EngineLens::I64(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::I64(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::I64(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::I32(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::I32(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::I32(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::U32(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::U32(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I64(x), EngineLens::U32(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::I64(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::I64(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::I64(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::I32(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::I32(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::I32(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::U32(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::U32(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::I32(x), EngineLens::U32(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::I64(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::I64(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::I64(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::I32(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::I32(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::I32(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::U32(y), EngineLens::I64(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::U32(y), EngineLens::I32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
        (EngineLens::U32(x), EngineLens::U32(y), EngineLens::U32(z)) => {
            DeviceBatch::from_buffers(gpu, capacity, (x, y, z), bs)
        }
    }
    .map_err(fail("batch view"))
}

/// `values` padded with zeros to `len` in a new engine allocation.
fn padded(values: &[i64], len: usize) -> Result<DeviceBuffer<i64>, String> {
    let mut v = values.to_vec();
    v.resize(len.max(values.len()).max(1), 0);
    DeviceBuffer::from_slice(&v).map_err(|e| format!("engine: {e}"))
}

/// The raw plan op over views of engine memory (batch columns, `bs`, `req_to_token`, the SWA
/// LUT, the expected-token pool and its valid lengths with their count) agrees with the CPU on
/// the random plan cases of the plan tests (errors, overflows and plans). The views are the
/// safe ones over the engine's cust buffers (`from_buffer`, `from_buffers`: borrowed, no
/// `unsafe`); a buffer shorter than its view is refused naming both lengths.
pub fn plan_over_views_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    use crate::plan::{random_case, run};
    use kv_canary::backend::Cpu;
    gpu.make_current().map_err(fail("context"))?;
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let unchecked = |what, n: usize| kv_canary::UncheckedCapacity::new(what, n).map_err(fail(what));
    let cases = crate::scaled(600);
    let (mut compared, mut errors, mut swa, mut pools, mut u32_pools) = (0, 0, 0, 0, 0);
    let (mut lens_kinds, mut col_kinds) = ([0usize; 3], [0usize; 3]);
    for seed in 0..cases {
        let mut rng = Rng::new(0x71E3_0000 + seed);
        let case = random_case(&mut rng, 200, 48);
        let wcap = case.write.capacity();
        let w = kv_canary::Capacity::get(wcap);
        let bs = case.batch.len();
        // What a view cannot hold: an empty LUT (refused at construction), more valid lengths
        // than the capacity.
        if case.lut.as_ref().is_some_and(|l| l.is_empty())
            || case.pool.as_ref().is_some_and(|(_, l)| l.len() > w)
        {
            continue;
        }
        let (mut cv, mut cw) = (case.verify.clone(), case.write.clone());
        let mut cpu = run(&case, &Cpu, &mut cv, &mut cw, 0);
        // Every other pool of a FULL case in the engine's `u32` token ids (mistral.rs' token
        // table), a quarter of them at 2^31 or more: both backends zero-extend them.
        let u32_pool = (case.pool.as_ref())
            .filter(|_| case.lut.is_none() && seed % 2 == 1)
            .map(|(t, _)| {
                let cells: Vec<u32> = (t.as_slice().iter())
                    .map(|&c| {
                        if rng.chance(25) {
                            c as u32 | 0x8000_0000
                        } else {
                            c as u32
                        }
                    })
                    .collect();
                cells
            });
        if let (Some(cells), Some((t, l))) = (&u32_pool, &case.pool) {
            let view = kv_canary::ExpectedTokenTableView::new(t.rows(), t.width(), cells)
                .map_err(fail("u32 pool view"))?;
            let inputs = kv_canary::PlanInputs::full(&case.batch, &case.table)
                .with_offset(case.offset)
                .with_expected(view.with_valid_lens(l));
            let shape = kv_canary::UncheckedShape::from_capacities(
                case.verify.capacity(),
                wcap,
                unchecked("e", 1)?,
            );
            (cv, cw) = (case.verify.clone(), case.write.clone());
            cpu = kv_canary::backend::PlanWith::plan(&Cpu, &shape, &inputs, &mut cv, &mut cw)
                .map(drop);
            u32_pools += 1;
        }
        // The engine's memory (columns of the capacity, or of bs when it is larger: the device
        // then reports bs above the capacity from the engine's own bs).
        // SGLang's columns in the engine's element types: all `i64`, or (by seed) `i32` or
        // `u32` where every value fits, the same type for the three or each its own.
        let n = w.max(bs);
        let col_seed = |c: u64| seed / 2 + c * (seed % 2);
        let e_cols = [
            EngineLens::new(case.batch.req_pool_indices(), n, col_seed(0))?,
            EngineLens::new(case.batch.prefix_lens(), n, col_seed(1))?,
            EngineLens::new(case.batch.extend_seq_lens(), n, col_seed(2))?,
        ];
        for c in &e_cols {
            col_kinds[c.kind()] += 1;
        }
        let e_bs = DeviceBuffer::from_slice(&[bs as i32]).map_err(|e| format!("engine: {e}"))?;
        let e_lut = case
            .lut
            .as_deref()
            .map(|l| padded(l, l.len()))
            .transpose()?;
        // The valid lengths in the engine's element type: `i64`, or `i32` / `u32` (by seed)
        // when every length fits it.
        let e_lens = case
            .pool
            .as_ref()
            .map(|(_, l)| {
                Ok::<_, String>((
                    EngineLens::new(l, w, seed)?,
                    DeviceBuffer::from_slice(&[l.len() as i32])
                        .map_err(|e| format!("engine: {e}"))?,
                ))
            })
            .transpose()?;
        if let Some((l, _)) = &e_lens {
            lens_kinds[l.kind()] += 1;
        }
        let dv = case.verify.to_device(gpu).map_err(fail("verify"))?;
        let dw = case.write.to_device(gpu).map_err(fail("write"))?;
        let shape = kv_canary::UncheckedShape::from_capacities(
            case.verify.capacity(),
            wcap,
            unchecked("e", 1)?,
        );
        let e_table = engine_table(&case.table)?;
        let e_pool = case
            .pool
            .as_ref()
            .map(|(t, _)| engine_table(t))
            .transpose()?;
        let e_pool_u32 = (u32_pool.as_deref())
            .map(|c| DeviceBuffer::from_slice(c).map_err(|e| format!("engine: {e}")))
            .transpose()?;
        let gpu_result = {
            let (rows, width) = (case.table.rows(), case.table.width());
            let dtable = cuda::DeviceTable::from_buffer(gpu, &e_table, rows, width)
                .map_err(fail("table view"))?;
            let dbatch = engine_batch(gpu, wcap, &e_cols, Some(&e_bs))?;
            let dlut = match &e_lut {
                Some(b) => Some(cuda::DeviceLut::from_buffer(gpu, b).map_err(fail("lut view"))?),
                None => None,
            };
            let pool = match (&case.pool, &e_pool, &e_lens) {
                (Some((table, _)), Some(e_pool), Some((lens, count))) => {
                    let (rows, width) = (table.rows(), table.width());
                    let dpool = match &e_pool_u32 {
                        Some(cells) => cuda::DeviceTable::from_buffer(gpu, cells, rows, width),
                        None => cuda::DeviceTable::from_buffer(gpu, e_pool, rows, width),
                    }
                    .map_err(fail("pool view"))?;
                    let dlens = lens.view(gpu, wcap, count)?;
                    Some(((), dpool, dlens))
                }
                _ => None,
            };
            if seed == 0 {
                let short = cuda::DeviceReqToToken::from_buffer(gpu, &e_table, rows, width + 1);
                ensure!(
                    matches!(short, Err(kv_canary::Error::LengthMismatch { expected, found, .. })
                        if expected == rows * (width + 1) && found == rows * width),
                    "a table buffer shorter than its view was accepted: {:?}",
                    short.err()
                );
            }
            let inputs = cuda::PlanInputs::full(&*dbatch, &dtable).with_offset(case.offset);
            let queued = match (&dlut, &pool) {
                (None, None) => cuda::plan(&stream, &shape, &inputs, &dv, &dw),
                (Some(l), None) => cuda::plan(
                    &stream,
                    &shape,
                    &inputs.with_group(cuda::Swa::new(case.window, l)),
                    &dv,
                    &dw,
                ),
                (None, Some((_, t, lens))) => cuda::plan(
                    &stream,
                    &shape,
                    &inputs.with_expected(t.with_valid_lens(&**lens)),
                    &dv,
                    &dw,
                ),
                (Some(l), Some((_, t, lens))) => cuda::plan(
                    &stream,
                    &shape,
                    &inputs
                        .with_group(cuda::Swa::new(case.window, l))
                        .with_expected(t.with_valid_lens(&**lens)),
                    &dv,
                    &dw,
                ),
            };
            let status = queued.and_then(|()| stream.status());
            stream.clear_status().map_err(fail("clear"))?;
            status
        };
        ensure!(
            cpu.is_ok() == gpu_result.is_ok(),
            "plan case seed {seed} over views: CPU {cpu:?}, GPU {gpu_result:?}"
        );
        let (gv, gw) = (
            dv.to_host().map_err(fail("verify"))?,
            dw.to_host().map_err(fail("write"))?,
        );
        ensure!(
            cv == gv,
            "plan case seed {seed} over views: verify plans differ"
        );
        ensure!(
            cw == gw,
            "plan case seed {seed} over views: write plans differ"
        );
        compared += 1;
        errors += usize::from(cpu.is_err());
        swa += usize::from(case.lut.is_some());
        pools += usize::from(case.pool.is_some());
    }
    println!(
        "    {compared} random plan cases over engine views equal to the CPU ({errors} errors, \
         {swa} with an SWA LUT view, {pools} with expected-pool and valid-length views, \
         {u32_pools} of them u32 token ids; valid lengths i64 / i32 / u32: {lens_kinds:?}; \
         batch columns i64 / i32 / u32: {col_kinds:?})"
    );
    ensure!(
        compared > cases / 2
            && swa > 0
            && pools > 0
            && u32_pools > 0
            && lens_kinds[1] + lens_kinds[2] > 0
            && col_kinds[1] > 0
            && col_kinds[2] > 0,
        "weak coverage: {compared} compared, {swa} SWA, {pools} pools ({u32_pools} u32), lens \
         kinds {lens_kinds:?}"
    );
    Ok(())
}

/// The safe cudarc views (feature `cudarc`): the module docs' worked plan over cudarc slices, and
/// a real-KV source at a byte offset of a cudarc byte slice.
#[cfg(feature = "cudarc")]
pub fn cudarc_views_plan(gpu: &Gpu) -> Result<(), String> {
    use cudarc::driver::CudaContext;
    let cudarc_err = |e: cudarc::driver::DriverError| format!("cudarc: {e:?}");
    let ctx = CudaContext::new(0).map_err(cudarc_err)?;
    let engine = ctx.default_stream();
    let table = engine
        .clone_htod(&(0..32).collect::<Vec<i32>>())
        .map_err(cudarc_err)?;
    let cols = [
        engine.clone_htod(&[2i64, 0, 1, 0]).map_err(cudarc_err)?,
        engine.clone_htod(&[3i64, 99, 0, 0]).map_err(cudarc_err)?,
        engine.clone_htod(&[2i64, 99, 4, 0]).map_err(cudarc_err)?,
    ];
    let bs = engine.clone_htod(&[3i32]).map_err(cudarc_err)?;
    let kv = engine.clone_htod(&vec![0u8; 4096]).map_err(cudarc_err)?;
    engine.synchronize().map_err(cudarc_err)?;
    let shape = Shape::<Cap<8>, Cap<4>, Cap<16>>::new();
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let (verify, write) = (
        shape.device_verify_plan(gpu).map_err(fail("plan"))?,
        shape.device_write_plan(gpu).map_err(fail("plan"))?,
    );
    let dtable = cuda::DeviceReqToToken::from_cudarc(gpu, &table, 4, 8).map_err(fail("table"))?;
    let dbatch = DeviceBatch::from_cudarc(gpu, Cap::<4>, (&cols[0], &cols[1], &cols[2]), Some(&bs))
        .map_err(fail("batch"))?;
    cuda::plan(
        &stream,
        &shape,
        &cuda::PlanInputs::full(&dbatch, &dtable),
        &verify,
        &write,
    )
    .map_err(fail("plan"))?;
    stream.status().map_err(fail("status"))?;
    let slots = verify.to_host().map_err(fail("download"))?;
    ensure!(
        slots.slot_indices()[..3] == [16, 17, 18],
        "plan over cudarc views: {:?}",
        slots.slot_indices()
    );
    let too_short = cuda::DeviceReqToToken::from_cudarc(gpu, &table, 4, 9);
    ensure!(
        matches!(
            too_short,
            Err(kv_canary::Error::LengthMismatch {
                expected: 36,
                found: 32,
                ..
            })
        ),
        "a cudarc table view longer than its slice was accepted"
    );
    let layout = RowLayout {
        num_rows: 8,
        row_bytes: PAGE * TOKEN_BYTES,
        row_stride_bytes: PAGE * TOKEN_BYTES,
    };
    let source = cuda::CudarcKvSource::new(gpu, &kv, 0, layout, PARAMS).map_err(fail("kv"))?;
    ensure!(source.source().num_rows() == 8, "cudarc source rows");
    let past = cuda::CudarcKvSource::new(gpu, &kv, 16, layout, PARAMS);
    ensure!(past.is_err(), "a cudarc source past its slice was accepted");

    // The shared views: over `Arc`s of new slices that only the views hold once the engine's
    // handles are dropped; the same plan, byte for byte, into fresh plan buffers.
    let (shared_verify, shared_write) = (
        shape.device_verify_plan(gpu).map_err(fail("plan"))?,
        shape.device_write_plan(gpu).map_err(fail("plan"))?,
    );
    let host = |s: &cudarc::driver::CudaSlice<i64>| engine.clone_dtoh(s).map_err(cudarc_err);
    let arc_cols = [
        std::sync::Arc::new(engine.clone_htod(&host(&cols[0])?).map_err(cudarc_err)?),
        std::sync::Arc::new(engine.clone_htod(&host(&cols[1])?).map_err(cudarc_err)?),
        std::sync::Arc::new(engine.clone_htod(&host(&cols[2])?).map_err(cudarc_err)?),
    ];
    let arc_bs = std::sync::Arc::new(engine.clone_htod(&[3i32]).map_err(cudarc_err)?);
    let arc_table = std::sync::Arc::new(
        engine
            .clone_htod(&(0..32).collect::<Vec<i32>>())
            .map_err(cudarc_err)?,
    );
    let arc_kv = std::sync::Arc::new(engine.clone_htod(&vec![0u8; 4096]).map_err(cudarc_err)?);
    engine.synchronize().map_err(cudarc_err)?;
    let stable = cuda::DeviceReqToToken::from_cudarc_shared(gpu, arc_table.clone(), 4, 8)
        .map_err(fail("shared table"))?;
    let sbatch = DeviceBatch::from_cudarc_shared(
        gpu,
        Cap::<4>,
        {
            let [a, b, c] = arc_cols.clone();
            (a, b, c)
        },
        Some(arc_bs.clone()),
    )
    .map_err(fail("shared batch"))?;
    let skv = cuda::CudarcKvSource::shared(gpu, arc_kv.clone(), 0, layout, PARAMS)
        .map_err(fail("shared kv"))?;
    ensure!(
        std::sync::Arc::strong_count(&arc_table) == 2
            && std::sync::Arc::strong_count(&arc_bs) == 2
            && arc_cols
                .iter()
                .all(|c| std::sync::Arc::strong_count(c) == 2)
            && std::sync::Arc::strong_count(&arc_kv) == 2,
        "a shared cudarc view does not hold its slices"
    );
    drop((arc_cols, arc_bs, arc_table, arc_kv));
    cuda::plan(
        &stream,
        &shape,
        &cuda::PlanInputs::full(&sbatch, &stable),
        &shared_verify,
        &shared_write,
    )
    .map_err(fail("plan over shared views"))?;
    stream.status().map_err(fail("status"))?;
    let (sv, sw) = (
        shared_verify.to_host().map_err(fail("download"))?,
        shared_write.to_host().map_err(fail("download"))?,
    );
    let bw = write.to_host().map_err(fail("download"))?;
    ensure!(
        sv == slots && sw == bw,
        "plans over shared and borrowed cudarc views differ:\n  {sv:?}\n  {slots:?}"
    );
    ensure!(skv.source().num_rows() == 8, "shared cudarc source rows");
    let short = DeviceBatch::from_cudarc_shared(
        gpu,
        Cap::<8>,
        {
            let zeros = || std::sync::Arc::new(engine.alloc_zeros::<i64>(4).unwrap());
            (zeros(), zeros(), zeros())
        },
        None::<std::sync::Arc<cudarc::driver::CudaSlice<i32>>>,
    );
    ensure!(
        matches!(
            short,
            Err(kv_canary::Error::LengthMismatch {
                expected: 8,
                found: 4,
                ..
            })
        ),
        "a shared cudarc batch shorter than its capacity was accepted"
    );
    drop((stable, sbatch, skv));
    println!(
        "    plan over cudarc views equal to the worked example, over shared views (their slices \
         held by the views alone) byte-equal to it; short views refused"
    );
    Ok(())
}
