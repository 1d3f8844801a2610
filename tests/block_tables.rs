//! Block tables and vLLM's batch columns on the CPU (issue 32 items 1, 2 and 5): the plan read
//! straight from an engine's block table equals, field by field, the plan over the token table
//! the block table expands to; hostile block tables and columns are named errors that leave
//! every output untouched.

use kv_canary::{
    cpu, BatchColumns, BatchView, Cap, Error, IndexElement, PagedStepArrays, PlanInputs,
    ReqToTokenView, Shape, Swa, VerifyPlan, WritePlan,
};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

const BS: usize = 12;
const MAX_BLOCKS: usize = 6;
type Spec = Shape<Cap<512>, Cap<BS>, Cap<64>>;

/// Plans marked with -7 everywhere, so that untouched and stale entries compare too.
fn marked() -> (VerifyPlan<Cap<512>>, WritePlan<Cap<BS>>) {
    let (mut v, mut w) = (VerifyPlan::new(), WritePlan::new());
    let p = v.parts_mut();
    for a in [
        p.slot_indices,
        p.expected_tokens,
        p.expected_positions,
        p.prev_slot_indices,
    ] {
        a.fill(-7);
    }
    (*p.num_valid, *p.enable, *p.requested) = (-7, -7, -7);
    let p = w.parts_mut();
    p.offsets.fill(-7);
    p.seed_slot_indices.fill(-7);
    *p.num_valid_reqs = -7;
    (v, w)
}

type Plans = (VerifyPlan<Cap<512>>, WritePlan<Cap<BS>>);

fn plan_of<B: BatchColumns, T: IndexElement>(
    batch: BatchView<'_, B>,
    table: ReqToTokenView<'_, T>,
    swa: Option<(u64, &[i64])>,
) -> Result<Plans, Error> {
    let (mut v, mut w) = marked();
    let inputs = PlanInputs::from_views(batch, table);
    match swa {
        None => cpu::plan(&Spec::new(), &inputs, &mut v, &mut w)?,
        Some((window, lut)) => cpu::plan(
            &Spec::new(),
            &inputs.with_group(Swa::window(window).with_lut(lut)),
            &mut v,
            &mut w,
        )?,
    };
    Ok((v, w))
}

/// The token table a block table stands for: `[rows, blocks_per_row * block_size]` slots,
/// `block * block_size + offset` (as `i64`: `u32` blocks past `i32::MAX` stay exact).
fn expand<T: IndexElement>(blocks: &[T], blocks_per_row: usize, block_size: usize) -> Vec<i64> {
    blocks
        .chunks(blocks_per_row)
        .flat_map(|row| {
            row.iter().flat_map(move |&b| {
                let b = b.to_i64().expect("test blocks fit i64");
                (0..block_size as i64).map(move |o| b * block_size as i64 + o)
            })
        })
        .collect()
}

/// One random bucketed batch in vLLM's columns: real rows (decode or chunked prefill) and
/// padding rows (context 0, query 0 or 1) anywhere, each row's context within its table row.
struct Step {
    bs: usize,
    context_lens: Vec<u32>,
    query_lens: Vec<u32>,
    query_starts: Vec<i64>,
}

fn random_step(rng: &mut ChaCha8Rng, tokens_per_row: usize) -> Step {
    let bs = rng.random_range(0..=BS);
    let (mut context_lens, mut query_lens) = (Vec::new(), Vec::new());
    for _ in 0..bs {
        let (c, q) = match rng.random_range(0..4) {
            0 => (0, rng.random_range(0..=1)), // a padding row of a bucket
            1 => {
                let c = rng.random_range(1..=tokens_per_row);
                (c, 1) // decode
            }
            _ => {
                let c = rng.random_range(1..=tokens_per_row);
                (c, rng.random_range(1..=c.min(8))) // a prefill chunk
            }
        };
        context_lens.push(c as u32);
        query_lens.push(q as u32);
    }
    // Bucketed: the columns are longer than the batch, with garbage past it.
    let bucket = bs + rng.random_range(0..3);
    context_lens.resize(bucket, 999);
    query_lens.resize(bucket, 999);
    let mut query_starts = vec![0i64];
    for &q in &query_lens[..bs] {
        query_starts.push(query_starts.last().unwrap() + i64::from(q));
    }
    query_starts.resize(bucket + 1, -5);
    Step {
        bs,
        context_lens,
        query_lens,
        query_starts,
    }
}

fn random_blocks<T: IndexElement>(
    rng: &mut ChaCha8Rng,
    n: usize,
    hi: i64,
    cast: impl Fn(i64) -> T,
) -> Vec<T> {
    (0..n).map(|_| cast(rng.random_range(0..=hi))).collect()
}

/// The SGLang columns of the same batch over the expanded table with a padding row 0 in front:
/// batch row r reads table row r + 1.
fn sglang_columns(step: &Step) -> [Vec<i64>; 3] {
    let mut cols = [Vec::new(), Vec::new(), Vec::new()];
    for r in 0..step.bs {
        let (c, q) = (
            i64::from(step.context_lens[r]),
            i64::from(step.query_lens[r]),
        );
        cols[0].push(r as i64 + 1);
        cols[1].push(c - q);
        cols[2].push(q);
    }
    cols
}

fn compare_rounds<T: IndexElement>(seed: u64, rounds: usize, cast: impl Fn(i64) -> T + Copy) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut compared = [0usize; 3];
    for round in 0..rounds {
        let block_size = [1, 2, 5, 16, 32][rng.random_range(0..5)];
        let blocks_per_row = rng.random_range(1..=MAX_BLOCKS);
        let tokens_per_row = blocks_per_row * block_size;
        let step = random_step(&mut rng, tokens_per_row);
        let rows = step.context_lens.len().max(1);
        let pool_blocks = 40i64;
        let blocks = random_blocks(&mut rng, rows * blocks_per_row, pool_blocks - 1, cast);
        let table = ReqToTokenView::block_table(rows, blocks_per_row, block_size, &blocks).unwrap();
        // The expanded token table, with the padding row 0 SGLang's columns need.
        let mut expanded = vec![0i64; tokens_per_row];
        expanded.extend(expand(&blocks, blocks_per_row, block_size));
        let tokens = ReqToTokenView::new(rows + 1, tokens_per_row, &expanded).unwrap();
        let lut: Vec<i64> = (0..pool_blocks * 32 + 1)
            .map(|x| if x % 7 == 3 { -1 } else { x + 1000 })
            .collect();
        let swa = match rng.random_range(0..3) {
            0 => Some((rng.random_range(0..6u64), &lut[..])),
            _ => None,
        };
        let cols = sglang_columns(&step);
        let expected = plan_of(
            BatchView::new(&cols[0], &cols[1], &cols[2]).unwrap(),
            tokens,
            swa,
        );
        let by_lens = plan_of(
            BatchView::from_query_lens(step.bs, &step.context_lens, &step.query_lens).unwrap(),
            table,
            swa,
        );
        let by_starts = plan_of(
            BatchView::from_query_starts(step.bs, &step.context_lens, &step.query_starts).unwrap(),
            table,
            swa,
        );
        // The same step as an engine names its arrays (PagedStepArrays): the views it derives.
        let none: [i64; 0] = [];
        let arrays = PagedStepArrays {
            block_tables: &blocks[..],
            blocks_per_row,
            block_size,
            context_lens: &step.context_lens[..],
            query_lens: &step.query_lens[..],
            bs: step.bs,
            input_ids: &none[..],
            positions: &none[..],
            slot_mapping: &none[..],
        };
        let inputs = arrays
            .plan_inputs()
            .unwrap_or_else(|e| panic!("round {round}: paged arrays: {e}"));
        let by_arrays = plan_of(inputs.batch, inputs.req_to_token, swa);
        let expected = expected.unwrap_or_else(|e| panic!("round {round}: expanded plan: {e}"));
        for (name, got) in [
            ("query_lens", by_lens),
            ("query_starts", by_starts),
            ("paged step arrays", by_arrays),
        ] {
            let got = got.unwrap_or_else(|e| panic!("round {round} {name}: {e}"));
            assert!(
                got == expected,
                "round {round} ({name}, block size {block_size}, bs {}): the plan read from the \
                 block table differs from the plan over its expansion",
                step.bs
            );
        }
        compared[0] += 1;
        compared[1] += usize::from(expected.0.enable() == 1 && expected.0.num_valid() > 0);
        compared[2] += usize::from(swa.is_some());
    }
    eprintln!(
        "{} random block-table batches ({}): plans equal to the expanded token table's \
         ({} with verify entries, {} SWA)",
        compared[0],
        T::NAME,
        compared[1],
        compared[2]
    );
    assert!(
        compared[1] > rounds / 2 && compared[2] > rounds / 5,
        "{compared:?}"
    );
}

#[test]
fn block_tables_by_batch_row_plan_as_their_expansion() {
    compare_rounds::<u32>(32, 400, |x| x as u32);
    compare_rounds::<i32>(33, 400, |x| x as i32);
    compare_rounds::<i64>(34, 200, |x| x);
}

/// SGLang's shape with blocks: the table indexed by the request's pool row, padding row 0.
#[test]
fn block_tables_by_pool_row_plan_as_their_expansion() {
    let mut rng = ChaCha8Rng::seed_from_u64(35);
    for round in 0..300 {
        let block_size = [1, 4, 16][rng.random_range(0..3)];
        let (rows, blocks_per_row) = (6, 4);
        let blocks: Vec<u32> = random_blocks(&mut rng, rows * blocks_per_row, 30, |x| x as u32);
        let table = ReqToTokenView::block_table(rows, blocks_per_row, block_size, &blocks).unwrap();
        let expanded = expand(&blocks, blocks_per_row, block_size);
        let tokens = ReqToTokenView::new(rows, blocks_per_row * block_size, &expanded).unwrap();
        let bs = rng.random_range(0..=BS);
        let mut cols: [Vec<u32>; 3] = Default::default();
        for _ in 0..bs {
            let rp = rng.random_range(0..rows as u32);
            cols[0].push(rp);
            cols[1].push(rng.random_range(0..=(blocks_per_row * block_size) as u32));
            cols[2].push(rng.random_range(0..4));
        }
        let a = plan_of(
            BatchView::new(&cols[0], &cols[1], &cols[2]).unwrap(),
            table,
            None,
        )
        .unwrap();
        let b = plan_of(
            BatchView::new(&cols[0], &cols[1], &cols[2]).unwrap(),
            tokens,
            None,
        )
        .unwrap();
        assert!(a == b, "round {round}: block size {block_size}");
    }
}

/// `u32` block ids past `i32::MAX` are blocks like any other: their slots are exact `i64`s (a
/// slot past the canary is the verify's and the write's error, as for any slot).
#[test]
fn u32_blocks_past_i32_max_are_exact() {
    let big = i32::MAX as u32 + 7;
    let blocks = [big, 2, 3, 4];
    let table = ReqToTokenView::block_table(2, 2, 16, &blocks).unwrap();
    let batch = BatchView::from_query_lens(1, &[18u32], &[1u32]).unwrap();
    let (v, w) = plan_of(batch, table, None).unwrap();
    assert_eq!(v.slot_indices()[0], i64::from(big) * 16);
    assert_eq!(v.slot_indices()[16], 2 * 16);
    assert_eq!(w.seed_slot_indices()[0], 2 * 16);
}

/// Each hostile input is its named error, and the plans stay untouched.
#[test]
fn hostile_block_tables_and_columns_are_named_errors() {
    let untouched = marked();
    let check = |result: Result<Plans, Error>, expected: Error| {
        let err = result.map(|_| ()).unwrap_err();
        assert_eq!(err, expected);
        assert!(err.to_string().starts_with("kv-canary: "), "{err}");
        eprintln!("{err}");
    };
    let (lens1, q1) = ([18u32], [1u32]);
    let one = || BatchView::from_query_lens(1, &lens1, &q1).unwrap();
    // A negative block (an i32 table's -1 for "no block") in the window.
    let blocks = [3i32, -1];
    check(
        plan_of(
            one(),
            ReqToTokenView::block_table(1, 2, 16, &blocks).unwrap(),
            None,
        ),
        Error::BlockOutOfRange {
            row: 0,
            position: 16,
            block: -1,
            block_size: 16,
        },
    );
    // A block whose slots pass i64::MAX.
    let blocks = [3i64, i64::MAX / 8];
    check(
        plan_of(
            one(),
            ReqToTokenView::block_table(1, 2, 16, &blocks).unwrap(),
            None,
        ),
        Error::BlockOutOfRange {
            row: 0,
            position: 16,
            block: i128::from(i64::MAX / 8),
            block_size: 16,
        },
    );
    // A u64 block past i64::MAX.
    let blocks = [3u64, u64::MAX];
    check(
        plan_of(
            one(),
            ReqToTokenView::block_table(1, 2, 16, &blocks).unwrap(),
            None,
        ),
        Error::BlockOutOfRange {
            row: 0,
            position: 16,
            block: i128::from(u64::MAX),
            block_size: 16,
        },
    );
    // A context past the row's blocks: 2 blocks of 8 hold 16 tokens.
    let blocks = [3u32, 4];
    check(
        plan_of(
            one(),
            ReqToTokenView::block_table(1, 2, 8, &blocks).unwrap(),
            None,
        ),
        Error::PrefixBeyondRow {
            row: 0,
            prefix_len: 17,
            width: 16,
        },
    );
    // More batch rows than the table's rows.
    let (lens, q) = ([3u32, 5], [1u32, 1]);
    check(
        plan_of(
            BatchView::from_query_lens(2, &lens, &q).unwrap(),
            ReqToTokenView::block_table(1, 1, 8, &[1u32]).unwrap(),
            None,
        ),
        Error::ReqPoolIndexOutOfRange {
            row: 1,
            req_pool_index: 1,
            rows: 1,
        },
    );
    // Cumulative offsets that decrease.
    let (lens, starts) = ([3u32, 5], [0i64, 2, 1]);
    check(
        plan_of(
            BatchView::from_query_starts(2, &lens, &starts).unwrap(),
            ReqToTokenView::block_table(2, 1, 8, &[1u32, 2]).unwrap(),
            None,
        ),
        Error::QueryStartsDecrease {
            row: 1,
            start: 2,
            end: 1,
        },
    );
    // An SWA slot of a block past the LUT.
    let lut = [0i64; 10];
    check(
        plan_of(
            one(),
            ReqToTokenView::block_table(1, 2, 16, &[0u32, 1]).unwrap(),
            Some((4, &lut)),
        ),
        Error::LutIndexOutOfRange {
            slot: 12,
            lut_len: 10,
        },
    );
    assert!(untouched.0.slot_indices().iter().all(|&x| x == -7));
    // Columns shorter than the batch, and block sizes outside [1, 65536].
    assert_eq!(
        BatchView::from_query_lens(3, &[1u32, 2], &[1u32, 1, 1]).unwrap_err(),
        Error::ColumnTooShort {
            what: "context_lens",
            len: 2,
            needed: 3
        }
    );
    assert_eq!(
        BatchView::from_query_starts(2, &[1u32, 2], &[0u32, 1])
            .unwrap_err()
            .to_string(),
        "kv-canary: query_starts holds 2 elements, the batch reads 3"
    );
    for bad in [0, kv_canary::MAX_BLOCK_SIZE + 1] {
        let err = ReqToTokenView::block_table(1, 1, bad, &[1u32]).unwrap_err();
        assert!(err.to_string().contains("block_size"), "{err}");
    }
    assert!(ReqToTokenView::block_table(1, 2, 16, &[1u32]).is_err());
}

/// The blocks a padding row or a row past the batch holds are never read, whatever they are.
#[test]
fn rows_without_entries_never_read_their_blocks() {
    let blocks = [5i32, 6, -9, i32::MIN, 7, 8];
    let table = ReqToTokenView::block_table(3, 2, 4, &blocks).unwrap();
    // Row 1 is a padding row (context 0); row 2 is past bs.
    let (lens, q) = ([6u32, 0, 99], [2u32, 1, 99]);
    let (v, w) = plan_of(
        BatchView::from_query_lens(2, &lens, &q).unwrap(),
        table,
        None,
    )
    .unwrap();
    assert_eq!(&v.slot_indices()[..4], &[20, 21, 22, 23]);
    assert_eq!(v.num_valid(), 4);
    assert_eq!(&w.offsets()[..4], &[0, 2, 3, 0]);
    assert_eq!(&w.seed_slot_indices()[..2], &[23, -1]);
}

/// The expected-token pool's valid lengths: vLLM's columns take an engine's bucketed
/// `context_lens` (longer than the batch; the rest is never read), SGLang's exactly one a row.
#[test]
fn valid_lens_of_a_bucketed_batch() {
    use kv_canary::{Batch, ExpectedTokenTableView, ReqToToken};
    let blocks = [5u32, 6, 7, 8];
    let table = ReqToTokenView::block_table(2, 2, 4, &blocks).unwrap();
    let tokens: Vec<i64> = (0..16).map(|t| 100 + t).collect();
    let pool = ExpectedTokenTableView::new(2, 8, &tokens).unwrap();
    // One real row (context 6, 1 new token) in a bucket of 4 rows.
    let (lens, q) = ([6u32, 0, 0, 0], [1u32, 0, 0, 0]);
    let plan = |n: usize| {
        let shape = Spec::new();
        let (mut v, mut w) = (shape.verify_plan(), shape.write_plan());
        let batch = BatchView::from_query_lens(1, &lens, &q).unwrap();
        let inputs =
            PlanInputs::from_views(batch, table).with_expected(pool.with_valid_lens(&lens[..n]));
        cpu::plan(&shape, &inputs, &mut v, &mut w).map(|_| v)
    };
    let whole = plan(4).unwrap();
    assert_eq!(
        whole,
        plan(1).unwrap(),
        "the bucket's other lengths are never read"
    );
    assert_eq!(&whole.expected_tokens()[..5], &[100, 101, 102, 103, 104]);
    assert!(matches!(plan(0), Err(Error::LengthMismatch { .. })));
    // SGLang's columns: exactly one valid length a row.
    let batch = Batch::from_columns([1], [3], [1]);
    let sg_table = ReqToToken::from_vec(2, 8, (0..16).collect()).unwrap();
    let sg_tokens = kv_canary::ExpectedTokenTable::from_vec(2, 8, (0..16).collect()).unwrap();
    let shape = Spec::new();
    let (mut v, mut w) = (shape.verify_plan(), shape.write_plan());
    let inputs =
        PlanInputs::full(&batch, &sg_table).with_expected(sg_tokens.with_valid_lens(&[4i64, 4]));
    assert!(matches!(
        cpu::plan(&shape, &inputs, &mut v, &mut w),
        Err(Error::LengthMismatch {
            expected: 1,
            found: 2,
            ..
        })
    ));
}

/// A sweep of a block-table row walks the slots the plan reads: the same entries as the row of
/// the expanded token table; a bad block is the plan's error.
#[test]
fn sweep_entries_of_block_table_rows_are_their_expansions() {
    use kv_canary::step::SweepEntries;
    let blocks = [4u32, 9, 2, 7, 1, 3];
    let table = ReqToTokenView::block_table(2, 3, 16, &blocks).unwrap();
    let expanded = expand(&blocks, 3, 16);
    let tokens = ReqToTokenView::new(2, 48, &expanded).unwrap();
    for (row, len) in [(0, 0), (0, 17), (1, 48), (1, 33)] {
        let (mut a, mut b) = (SweepEntries::new(), SweepEntries::new());
        a.push_table_row(table, row, len).unwrap();
        b.push_table_row(tokens, row, len).unwrap();
        assert_eq!(a.as_slice(), b.as_slice(), "row {row}, {len} tokens");
        assert_eq!(a.as_slice().len(), len);
    }
    let mut e = SweepEntries::new();
    assert_eq!(
        e.push_table_row(table, 1, 49).unwrap_err(),
        Error::CachedBeyondRow {
            row: Some(1),
            cached: 49,
            width: 48
        }
    );
    let bad = [4i32, -3];
    let table = ReqToTokenView::block_table(1, 2, 16, &bad).unwrap();
    assert!(matches!(
        e.push_table_row(table, 0, 20).unwrap_err(),
        Error::BlockOutOfRange { block: -3, .. }
    ));
    assert!(e.as_slice().is_empty());
}

#[test]
fn paged_step_arrays_name_their_bad_geometry() {
    let blocks = [1u32, 2, 3, 4, 5];
    let lens = [4u32, 1];
    let slots = [5i64, -1];
    let arrays = |blocks_per_row, block_size| PagedStepArrays {
        block_tables: &blocks[..],
        blocks_per_row,
        block_size,
        context_lens: &lens[..],
        query_lens: &lens[1..],
        bs: 1,
        input_ids: &[7u32, 0][..],
        positions: &[3i64, 0][..],
        slot_mapping: &slots[..],
    };
    let err = |a: PagedStepArrays<_, _, _, _, _, _>| a.plan_inputs().unwrap_err().to_string();
    let e = err(arrays(0, 4));
    assert!(
        e.starts_with("kv-canary:") && e.contains("blocks_per_row"),
        "{e}"
    );
    // 5 cells are not rows of 2: the table is ragged, named with its length.
    let e = err(arrays(2, 4));
    assert!(e.contains("block_tables") && e.contains('5'), "{e}");
    let e = err(arrays(5, 0));
    assert!(e.contains("block_size"), "{e}");
    // One row of 5 blocks of 4: valid, and the write inputs take the first 2 tokens.
    let a = arrays(5, 4);
    assert_eq!(a.plan_inputs().unwrap().batch.len(), 1);
    let w = a.write_inputs(Cap::<2>).unwrap();
    assert_eq!(w.out_cache_loc(), &slots);
    let e = a.write_inputs(Cap::<3>).unwrap_err().to_string();
    assert!(
        e.starts_with("kv-canary:") && e.contains("input_ids"),
        "{e}"
    );
}
