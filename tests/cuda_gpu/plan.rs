//! The plan op on the GPU: random cases against the CPU reference, large batches, malformed
//! rows. (The golden vectors on the GPU are `crates/conformance`'s `golden_gpu` test.)

use crate::rng::Rng;
use crate::{ensure, fail};
use kv_canary::backend::{Cpu, PlanWith};
use kv_canary::cuda::{Gpu, KernelTuning, PlanKernel};
use kv_canary::{
    Batch, BatchRow, Error, ExpectedTokenTable, PlanInputs, PositionOffset, ReqToToken,
    RuntimePlanInputs, Swa, UncheckedCapacity, UncheckedShape, VerifyPlan, WritePlan,
};
use kv_canary_testkit::{HostBackend, Offload};

type Verify = VerifyPlan<UncheckedCapacity>;
type Write = WritePlan<UncheckedCapacity>;

/// One plan call's inputs and initial buffers.
pub struct Case {
    pub batch: Batch,
    pub table: ReqToToken,
    pub window: u64,
    pub lut: Option<Vec<i64>>,
    pub pool: Option<(ExpectedTokenTable, Vec<i64>)>,
    pub offset: PositionOffset,
    pub verify: Verify,
    pub write: Write,
}

fn cap(what: &'static str, n: usize) -> UncheckedCapacity {
    UncheckedCapacity::new(what, n.max(1)).unwrap()
}

fn poisoned_plans(rng: &mut Rng, verify_cap: usize, write_cap: usize) -> (Verify, Write) {
    let mut arr = |n: usize| (0..n).map(|_| rng.range(-9, 9)).collect::<Vec<_>>();
    let v = VerifyPlan::from_parts(
        cap("verify_capacity", verify_cap),
        arr(verify_cap),
        arr(verify_cap),
        arr(verify_cap),
        arr(verify_cap),
        -7,
        -7,
    )
    .unwrap();
    let w = WritePlan::from_parts(
        cap("write_req_capacity", write_cap),
        arr(write_cap + 1),
        arr(write_cap),
        -7,
    )
    .unwrap();
    (v, w)
}

/// A random case: mostly valid, sometimes malformed (out-of-range rows, prefixes, pool reads,
/// LUT indices, batch sizes, write-token overflow).
pub fn random_case(rng: &mut Rng, max_bs: i64, max_width: i64) -> Case {
    let rows = rng.range(2, 40) as usize;
    let width = rng.range(1, max_width) as usize;
    let pool_slots = rng.range(1, 300);
    let cells = (0..rows * width)
        .map(|_| {
            if rng.chance(4) {
                -1
            } else {
                rng.range(0, pool_slots - 1) as i32
            }
        })
        .collect();
    let table = ReqToToken::from_vec(rows, width, cells).unwrap();
    let bs = if rng.chance(10) {
        rng.range(0, max_bs)
    } else {
        rng.range(0, 12.min(max_bs))
    } as usize;
    let mut batch = Batch::new();
    for _ in 0..bs {
        let padding = rng.chance(20);
        let mut rp = if padding {
            0
        } else {
            rng.range(1, rows as i64 - 1)
        };
        if rng.chance(1) {
            rp = rng.pick(&[-3, rows as i64, rows as i64 + 5]);
        }
        let mut prefix = rng.range(-2, width as i64);
        if rng.chance(1) {
            prefix = width as i64 + rng.range(1, 3);
        }
        let mut extend = rng.range(-2, 9);
        if rng.chance(1) {
            extend = i64::MAX / 2;
        }
        batch.push(BatchRow {
            req_pool_index: rp,
            prefix_len: prefix,
            extend_len: extend,
        });
    }
    let (window, lut) = if rng.chance(40) {
        let window = rng.pick(&[0, 1, 2, 3, 7, width as u64]);
        let mut len = pool_slots as usize + 1;
        if rng.chance(5) {
            len = rng.range(1, pool_slots) as usize;
        }
        let mut lut: Vec<i64> = (0..len).map(|_| rng.range(-1, 499)).collect();
        *lut.last_mut().unwrap() = -1;
        (window, Some(lut))
    } else {
        (0, None)
    };
    let pool = if rng.chance(40) {
        let prow = if rng.chance(3) {
            rng.range(1, rows as i64) as usize
        } else {
            rows
        };
        let pwidth = if rng.chance(3) {
            rng.range(1, width as i64) as usize
        } else {
            width + 1
        };
        let t = (0..prow * pwidth)
            .map(|_| rng.range(-5, 100_000) as i32)
            .collect();
        let mut lens: Vec<i64> = (0..bs).map(|_| rng.range(-2, width as i64 + 2)).collect();
        if rng.chance(1) {
            lens.push(3);
        }
        Some((ExpectedTokenTable::from_vec(prow, pwidth, t).unwrap(), lens))
    } else {
        None
    };
    let offset = if rng.chance(50) {
        PositionOffset::Target
    } else {
        PositionOffset::EagleDraft
    };
    let mut write_cap = bs + rng.range(0, 3) as usize;
    if rng.chance(2) && bs > 1 {
        write_cap = bs - 1;
    }
    let mut case = Case {
        batch,
        table,
        window,
        lut,
        pool,
        offset,
        verify: VerifyPlan::from_parts(cap("v", 1), vec![0], vec![0], vec![0], vec![0], 0, 0)
            .unwrap(),
        write: WritePlan::from_parts(cap("w", 1), vec![0; 2], vec![0], 0).unwrap(),
    };
    // Size the verify capacity around what the case asks for: exact, loose, or one short.
    let requested = {
        let (mut v, mut w) = poisoned_plans(rng, 1, write_cap.max(1));
        match run(&case, &Cpu, &mut v, &mut w, 1 << 40) {
            Ok(_) => usize::try_from(requested_entries(&case)).unwrap_or(1),
            Err(_) => rng.range(1, 64) as usize,
        }
    };
    let verify_cap = match rng.below(3) {
        0 => requested,
        1 => requested + rng.range(1, 20) as usize,
        _ => requested.saturating_sub(1),
    }
    .max(1);
    let (v, w) = poisoned_plans(rng, verify_cap, write_cap.max(1));
    case.verify = v;
    case.write = w;
    case
}

/// Σ verify lengths of the case's active rows (the CPU rule, spec §3.2).
fn requested_entries(case: &Case) -> u64 {
    case.batch
        .rows()
        .filter(|r| r.is_active() && r.prefix_len > 0)
        .map(|r| {
            let p = r.prefix_len as u64;
            if case.window > 0 {
                p.min(case.window)
            } else {
                p
            }
        })
        .sum()
}

/// Runs the case's plan on `backend` into `verify` and `write`; `verify_override` replaces the
/// shape's verify capacity when it is not the buffer's (used to size cases). The case's LUT and
/// pool choice becomes types in the library ([`RuntimePlanInputs`]).
pub fn run<B: HostBackend>(
    case: &Case,
    backend: &B,
    verify: &mut Verify,
    write: &mut Write,
    verify_override: usize,
) -> Result<(), Error> {
    let vcap = if verify_override == 1 << 40 {
        // Sizing run: a capacity large enough for any case, the buffer matching it.
        *verify = VerifyPlan::try_with_capacity(cap("verify_capacity", 1 << 20))?;
        cap("verify_capacity", 1 << 20)
    } else {
        verify.capacity()
    };
    let shape = UncheckedShape::from_capacities(vcap, write.capacity(), cap("e", 1));
    let inputs = RuntimePlanInputs::new(
        PlanInputs::full(&case.batch, &case.table).with_offset(case.offset),
        case.lut
            .as_deref()
            .map(|lut| Swa::window(case.window).with_lut(lut)),
        case.pool.as_ref().map(|(t, l)| t.with_valid_lens(l)),
    );
    PlanWith::plan(backend, &shape, &inputs, verify, write).map(drop)
}

/// Runs `case` on the CPU and on this thread's default GPU from the same initial buffers and
/// compares result and buffers.
pub fn compare(case: &Case, label: &str) -> Result<(), String> {
    Offload::with_default(|gpu| Ok(compare_on(case, label, gpu)))
        .map_err(|e| format!("{label}: GPU failed: {e:?}"))?
}

/// The GPU's error with the CPU's `lengths` where the documented device behaviour leaves them
/// out: the plan kernel reports a `WriteTokenCountOverflow` by its row only (`lengths: None`;
/// `Error::WriteTokenCountOverflow`), the CPU op also names the two lengths. The row must agree.
fn with_cpu_lengths<T>(gpu: Error, cpu: &Result<T, Error>) -> Error {
    match (gpu, cpu) {
        (
            Error::WriteTokenCountOverflow { row, lengths: None },
            Err(Error::WriteTokenCountOverflow {
                row: cpu_row,
                lengths,
            }),
        ) if row == *cpu_row => Error::WriteTokenCountOverflow {
            row,
            lengths: *lengths,
        },
        (gpu, _) => gpu,
    }
}

/// [`compare`], the GPU side on `gpu` (one code path, [`run`], on both backends).
fn compare_on<G: HostBackend>(case: &Case, label: &str, gpu: &G) -> Result<(), String> {
    let (mut cv, mut cw) = (case.verify.clone(), case.write.clone());
    let (mut gv, mut gw) = (case.verify.clone(), case.write.clone());
    let cpu = run(case, &Cpu, &mut cv, &mut cw, 0);
    let gpu = run(case, gpu, &mut gv, &mut gw, 0);
    if let Err(Error::NoCudaDevice { .. }) | Err(Error::Cuda { .. }) = &gpu {
        return Err(format!("{label}: GPU failed: {gpu:?}"));
    }
    ensure!(
        cpu == gpu.clone().map_err(|e| with_cpu_lengths(e, &cpu)),
        "{label}: CPU returned {cpu:?}, GPU {gpu:?}"
    );
    ensure!(
        cv == gv,
        "{label}: verify plans differ\n  CPU {cv:?}\n  GPU {gv:?}"
    );
    ensure!(
        cw == gw,
        "{label}: write plans differ\n  CPU {cw:?}\n  GPU {gw:?}"
    );
    Ok(())
}

/// Random cases, GPU against CPU: results and both buffers byte-equal, errors equal.
pub fn differential(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(1500);
    let (mut errors, mut overflows) = (0, 0);
    for seed in 0..cases {
        let mut rng = Rng::new(0x5EED_0000 + seed);
        let case = random_case(&mut rng, 200, 48);
        compare(&case, &format!("plan case seed {seed}"))?;
        let (mut v, mut w) = (case.verify.clone(), case.write.clone());
        match run(&case, &Cpu, &mut v, &mut w, 0) {
            Err(_) => errors += 1,
            Ok(()) if v.enable() == 0 => overflows += 1,
            Ok(()) => {}
        }
    }
    println!(
        "    {cases} random plan cases equal ({errors} errors, {overflows} overflows among them)"
    );
    ensure!(
        cases < 1000 || (errors > 20 && overflows > 20),
        "the generator covers too few error/overflow cases"
    );
    Ok(())
}

/// Batches of up to 4096 rows and long rows; 4097 rows is the GPU's documented limit.
pub fn large_batches(_: &Gpu) -> Result<(), String> {
    for seed in 0..crate::scaled(12) {
        let mut rng = Rng::new(0xB16_0000 + seed);
        let case = random_case(&mut rng, 4096, 600);
        compare(&case, &format!("large plan case seed {seed}"))?;
    }
    // A full 4096-row batch of valid decode rows.
    let mut rng = Rng::new(7);
    let table = ReqToToken::from_vec(4097, 64, (0..4097 * 64).collect()).unwrap();
    let rows: Batch = (0..4096)
        .map(|r| BatchRow {
            req_pool_index: r + 1,
            prefix_len: rng.range(0, 64),
            extend_len: 1,
        })
        .collect();
    let (verify, write) = poisoned_plans(&mut rng, 4096 * 64, 4096);
    let case = Case {
        batch: rows,
        table,
        window: 0,
        lut: None,
        pool: None,
        offset: PositionOffset::Target,
        verify,
        write,
    };
    compare(&case, "4096 decode rows")?;
    // bs = 4097: the CPU plans it, the GPU reports BatchTooLarge and writes nothing.
    let mut big = case;
    big.batch.push(BatchRow {
        req_pool_index: 4096,
        prefix_len: 3,
        extend_len: 1,
    });
    let (v0, w0) = poisoned_plans(&mut rng, 4097 * 64, 4097);
    let (mut v, mut w) = (v0.clone(), w0.clone());
    big.verify = v0.clone();
    let got = Offload::with_default(|gpu| run(&big, gpu, &mut v, &mut w, 0));
    ensure!(
        got == Err(Error::BatchTooLarge {
            bs: 4097,
            max: 4096
        }),
        "bs 4097 on the GPU: {got:?}"
    );
    ensure!(v == v0 && w == w0, "bs 4097 modified the plans");
    Ok(())
}

/// Each row-level error the CPU reports: the GPU reports the same and writes nothing.
pub fn malformed_rows_write_nothing(_: &Gpu) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut seed = 0u64;
    while seen.len() < 5 && seed < 20_000 {
        let mut rng = Rng::new(0xBAD_0000 + seed);
        seed += 1;
        let case = random_case(&mut rng, 30, 24);
        let (mut v, mut w) = (case.verify.clone(), case.write.clone());
        let Err(e) = run(&case, &Cpu, &mut v, &mut w, 0) else {
            continue;
        };
        let kind = format!("{e:?}")
            .split([' ', '{'])
            .next()
            .unwrap_or("")
            .to_string();
        if seen.insert(kind) {
            compare(&case, &format!("malformed case seed {}", seed - 1))?;
        }
    }
    println!("    error kinds reproduced on the GPU: {seen:?}");
    ensure!(seen.len() >= 5, "only {seen:?} error kinds generated");
    Ok(())
}

/// A large valid-ish case (hundreds of rows of thousands of tokens, millions of entries), so
/// that every block of the GPU plan takes several rounds; LUTs (sometimes too short), pools,
/// capacities exact, loose or one short.
pub fn big_case(rng: &mut Rng) -> Case {
    let rows = 300usize;
    let width = rng.range(1000, 3000) as usize;
    let pool_slots = 5000i64;
    let cells = (0..rows * width)
        .map(|_| rng.range(-1, pool_slots - 1) as i32)
        .collect();
    let table = ReqToToken::from_vec(rows, width, cells).unwrap();
    let bs = rng.range(200, 1024) as usize;
    let batch: Batch = (0..bs)
        .map(|_| BatchRow {
            req_pool_index: rng.range(0, rows as i64 - 1),
            prefix_len: rng.range(-2, width as i64),
            extend_len: rng.range(-1, 4),
        })
        .collect();
    let (window, lut) = if rng.chance(40) {
        let window = rng.pick(&[0, 7, 700, width as u64]);
        let len = if rng.chance(15) {
            rng.range(pool_slots - 3, pool_slots) as usize
        } else {
            pool_slots as usize + 1
        };
        (
            window,
            Some((0..len).map(|_| rng.range(-1, 1 << 24)).collect()),
        )
    } else {
        (0, None)
    };
    let pool = if rng.chance(30) {
        let t = (0..rows * (width + 1))
            .map(|_| rng.range(-5, 100_000) as i32)
            .collect();
        let lens: Vec<i64> = (0..bs).map(|_| rng.range(-2, width as i64 + 2)).collect();
        Some((
            ExpectedTokenTable::from_vec(rows, width + 1, t).unwrap(),
            lens,
        ))
    } else {
        None
    };
    let offset = if rng.chance(50) {
        PositionOffset::Target
    } else {
        PositionOffset::EagleDraft
    };
    let write_cap = bs + rng.range(0, 3) as usize;
    let mut case = Case {
        batch,
        table,
        window,
        lut,
        pool,
        offset,
        verify: VerifyPlan::from_parts(cap("v", 1), vec![0], vec![0], vec![0], vec![0], 0, 0)
            .unwrap(),
        write: WritePlan::from_parts(cap("w", 1), vec![0; 2], vec![0], 0).unwrap(),
    };
    let requested = requested_entries(&case) as usize;
    let verify_cap = match rng.below(3) {
        0 => requested,
        1 => requested + rng.range(1, 20) as usize,
        _ => requested.saturating_sub(1),
    }
    .max(1);
    let (v, w) = poisoned_plans(rng, verify_cap, write_cap);
    case.verify = v;
    case.write = w;
    case
}

/// Every plan kernel (small, large and lean blocks, one block a multiprocessor at most, so that
/// blocks take several rounds; the lean one also with four blocks a multiprocessor, so that a
/// checked LUT's cooperative grid holds several blocks an SM) forced on random cases, small
/// ones and big ones (millions of entries): each equals the CPU op, errors included.
pub fn kernels_agree(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(300);
    let big = crate::scaled(30);
    let kernels = [
        (PlanKernel::Small, 1),
        (PlanKernel::Large, 1),
        (PlanKernel::Lean, 1),
        (PlanKernel::Lean, 4),
    ];
    for (kernel, per_sm) in kernels {
        let mut gpu = Gpu::new().map_err(fail("gpu"))?;
        gpu.set_kernel_tuning(KernelTuning {
            plan_kernel: kernel,
            plan_blocks_per_sm: per_sm,
            plan_small_blocks_per_sm: per_sm,
            plan_lean_blocks_per_sm: per_sm,
            ..gpu.kernel_tuning()
        });
        let kernel = format!("{kernel:?} {per_sm}/SM");
        let offload = Offload::new(&gpu).map_err(fail("offload"))?;
        for seed in 0..cases {
            let mut rng = Rng::new(0xCE_0000 + seed);
            let (max_bs, max_width) = if seed % 4 == 0 {
                (1024, 200)
            } else {
                (200, 48)
            };
            let case = random_case(&mut rng, max_bs, max_width);
            compare_on(&case, &format!("{kernel} plan case seed {seed}"), &offload)?;
        }
        for seed in 0..big {
            let mut rng = Rng::new(0xB16C_0000 + seed);
            let case = big_case(&mut rng);
            compare_on(
                &case,
                &format!("{kernel} big plan case seed {seed}"),
                &offload,
            )?;
        }
    }
    println!(
        "    {cases} random plan cases and {big} big ones (up to 3 M entries) x 4 kernels (small, large, lean; one block a multiprocessor; lean with four) equal to the CPU op"
    );
    Ok(())
}
