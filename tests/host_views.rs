//! Views over an engine's own host slices: a step planned and written through views of `i32`,
//! `i64`, `u32`, `u64` and `usize` elements gives exactly the outputs of the same step through
//! the owned inputs, on random inputs (errors included), and elements past `i64::MAX` are errors
//! naming the value, never panics, with nothing modified.

use kv_canary::step::{Canary, SwaGroup, TailKv};
use kv_canary::{
    cpu, Batch, BatchColumns, BatchView, Cap, Error, IndexElement, LaunchTag, PlanInputs,
    ReqToToken, ReqToTokenView, Shape, Swa, WriteInputs, WriteInputsView,
};
use kv_canary::{ExpectedTokenTable, ExpectedTokenTableView, Full};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

const ROWS: usize = 6;
const WIDTH: usize = 16;
const SLOTS: usize = 64;
const BS: usize = 4;
const ENTRIES: usize = 12;
type Spec = Shape<Cap<{ ROWS * WIDTH }>, Cap<BS>, Cap<ENTRIES>>;

/// One step's inputs as an engine holds them, as `i64` values (converted to `T` for the views).
struct Inputs {
    table: Vec<i64>,
    pool: Vec<i64>,
    valid_lens: Vec<i64>,
    columns: [Vec<i64>; 3],
    write: [Vec<i64>; 5],
    lut: Vec<i64>,
}

/// Random inputs: mostly well-formed, with some slots, rows and lengths out of range (so that
/// both paths also meet every plan and write error). `signed` allows negative values.
fn random_inputs(rng: &mut ChaCha8Rng, signed: bool) -> Inputs {
    let lo = if signed { -2 } else { 0 };
    let value = |rng: &mut ChaCha8Rng, hi: i64| {
        if rng.random_bool(0.02) {
            rng.random_range(lo..=hi + 8)
        } else {
            rng.random_range(0..=hi)
        }
    };
    let table = (0..ROWS * WIDTH)
        .map(|_| value(rng, SLOTS as i64 - 1))
        .collect();
    let pool = (0..ROWS * WIDTH).map(|_| value(rng, 1000)).collect();
    let bs = rng.random_range(0..=BS);
    let mut columns = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..bs {
        columns[0].push(value(rng, ROWS as i64 - 1));
        columns[1].push(value(rng, WIDTH as i64));
        columns[2].push(value(rng, 3));
    }
    let valid_lens = (0..bs).map(|_| value(rng, WIDTH as i64 + 1)).collect();
    let mut write: [Vec<i64>; 5] = Default::default();
    for (k, array) in write.iter_mut().enumerate() {
        *array = (0..ENTRIES)
            .map(|_| match k {
                2 if signed && rng.random_bool(0.2) => -1,
                2 => value(rng, SLOTS as i64 - 1),
                _ => value(rng, 20),
            })
            .collect();
    }
    let lut_len = if rng.random_bool(0.1) {
        SLOTS - 3
    } else {
        SLOTS
    };
    let lut = (0..lut_len as i64)
        .map(|x| (x * 7) % SLOTS as i64)
        .collect();
    Inputs {
        table,
        pool,
        valid_lens,
        columns,
        write,
        lut,
    }
}

fn to<T: TryFrom<i64>>(v: &[i64]) -> Vec<T> {
    v.iter()
        .map(|&x| T::try_from(x).ok().expect("generated in range"))
        .collect()
}

/// The same random steps on two canaries, one fed the owned inputs and one fed views of `T`:
/// every result (report or error), the four canary buffers and the ring agree after each step.
/// Returns how many steps ended in a report and how many in an error.
fn owned_and_views_agree<T: IndexElement + TryFrom<i64>>(
    seed: u64,
    signed: bool,
    swa: bool,
) -> (u32, u32) {
    let mut outcomes = (0, 0);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut owned = Canary::full(Spec::new(), Cap::<SLOTS>, Cap::<8>);
    let mut viewed = Canary::full(Spec::new(), Cap::<SLOTS>, Cap::<8>);
    let mut owned_swa = Canary::swa(Spec::new(), Cap::<SLOTS>, Cap::<8>);
    let mut viewed_swa = Canary::swa(Spec::new(), Cap::<SLOTS>, Cap::<8>);
    for step in 0..40 {
        let inp = random_inputs(&mut rng, signed);
        let ctx = format!("{} seed {seed} step {step}", T::NAME);
        // Owned, as the crate's types hold them.
        let table = ReqToToken::from_vec(ROWS, WIDTH, to(&inp.table)).unwrap();
        let pool = ExpectedTokenTable::from_vec(ROWS, WIDTH, to(&inp.pool)).unwrap();
        let [c0, c1, c2] = inp.columns.clone();
        let batch = Batch::try_from_columns(c0, c1, c2).unwrap();
        let [w0, w1, w2, w3, w4] = inp.write.clone();
        let writes =
            WriteInputs::from_parts_with_expected(Cap::<ENTRIES>, w0, w1, w2, w3, w4).unwrap();
        // Views of the engine's `T` slices.
        let (t_table, t_pool, t_lens) = (
            to::<T>(&inp.table),
            to::<T>(&inp.pool),
            to::<T>(&inp.valid_lens),
        );
        let t_cols: Vec<Vec<T>> = inp.columns.iter().map(|c| to(c)).collect();
        let t_write: Vec<Vec<T>> = inp.write.iter().map(|c| to(c)).collect();
        let t_lut = to::<T>(&inp.lut);
        let table_view = ReqToTokenView::new(ROWS, WIDTH, &t_table).unwrap();
        let pool_view = ExpectedTokenTableView::new(ROWS, WIDTH, &t_pool).unwrap();
        let batch_view = BatchView::new(&t_cols[0], &t_cols[1], &t_cols[2]).unwrap();
        let writes_view =
            WriteInputsView::new(Cap::<ENTRIES>, &t_write[0], &t_write[1], &t_write[2])
                .unwrap()
                .with_expected(&t_write[3], &t_write[4])
                .unwrap();

        let plan_owned =
            PlanInputs::full(&batch, &table).with_expected(pool.with_valid_lens(&inp.valid_lens));
        let plan_view = PlanInputs::from_views(batch_view, table_view)
            .with_expected(pool_view.with_valid_lens(&t_lens));
        let a = run_step(&mut owned, &plan_owned, &writes);
        let b = run_step(&mut viewed, &plan_view, &writes_view);
        assert_eq!(a, b, "{ctx}");
        match a {
            Ok(_) => outcomes.0 += 1,
            Err(_) => outcomes.1 += 1,
        }
        for tag in owned.tags() {
            assert!(owned.buffer(tag) == viewed.buffer(tag), "{ctx}: {tag:?}");
        }
        assert!(owned.ring() == viewed.ring(), "{ctx}");
        if swa {
            // The LUT too: i64 for the owned inputs, the engine's `T` for the views.
            let window = Swa::window(5);
            let owned_plan = plan_owned.with_group(window.with_lut(&inp.lut));
            let a = run_step(&mut owned_swa, &owned_plan, &writes);
            let b = run_step(
                &mut viewed_swa,
                &plan_view.with_group(window.with_lut(&t_lut)),
                &writes_view,
            );
            assert_eq!(a, b, "{ctx} (SWA)");
            for tag in owned_swa.tags() {
                assert!(
                    owned_swa.buffer(tag) == viewed_swa.buffer(tag),
                    "{ctx}: {tag:?}"
                );
            }
        }
    }
    outcomes
}

/// One whole step on the step API; the report, or the error of the first stage that failed.
fn run_step<G, I, X>(
    canary: &mut Canary<Cap<{ ROWS * WIDTH }>, Cap<BS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<8>, G>,
    plan: &X,
    writes: &I,
) -> Result<kv_canary::step::StepReport, Error>
where
    G: kv_canary::step::GroupKind,
    X: kv_canary::step::PlanInputsOf<G::Pool>,
    G::Sources<kv_canary::RealKv<'static>>: From<TailKv<'static>>,
    kv_canary::backend::Cpu: kv_canary::backend::PlanWith<X, Cap<{ ROWS * WIDTH }>, Cap<BS>, Cap<ENTRIES>>
        + kv_canary::backend::WritesFrom<I>,
    I: kv_canary::WriteInputSource<Capacity = Cap<ENTRIES>>,
{
    canary
        .plan(plan)?
        .verify_head()?
        .write(writes)?
        .verify_tail(TailKv::NONE.into())
}

#[test]
fn view_steps_equal_owned_steps_on_random_inputs() {
    let mut total = (0, 0);
    for seed in 0..12 {
        for (ok, err) in [
            owned_and_views_agree::<i64>(seed, true, seed % 2 == 0),
            owned_and_views_agree::<i32>(seed, true, seed % 2 == 1),
            owned_and_views_agree::<u32>(seed, false, seed % 3 == 0),
            owned_and_views_agree::<u64>(seed, false, seed % 3 == 1),
            owned_and_views_agree::<usize>(seed, false, seed % 3 == 2),
        ] {
            total = (total.0 + ok, total.1 + err);
        }
    }
    // Both outcomes are exercised: steps that check and stamp, and steps that fail.
    eprintln!(
        "steps with a report: {}, with an error: {}",
        total.0, total.1
    );
    assert!(total.0 > 1000 && total.1 > 50, "{total:?}");
}

/// The plan of `batch` over `table` with a pool; the plans must be untouched on error.
fn plan_err<B: BatchColumns, T: IndexElement, P: IndexElement, L: IndexElement>(
    batch: BatchView<'_, B>,
    table: ReqToTokenView<'_, T>,
    pool: ExpectedTokenTableView<'_, P>,
    lens: &[L],
) -> Error {
    let shape = Spec::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    let (v0, w0) = (verify.clone(), write.clone());
    let inputs = PlanInputs::from_views(batch, table).with_expected(pool.with_valid_lens(lens));
    let err = cpu::plan(&shape, &inputs, &mut verify, &mut write).unwrap_err();
    assert!(verify == v0 && write == w0, "{err}: a plan output changed");
    err
}

fn past_i64(what: &'static str, index: usize, value: u64, element: &'static str) -> Error {
    Error::ElementOutOfRange {
        what,
        index,
        value: i128::from(value),
        element,
    }
}

#[test]
fn plan_elements_past_i64_are_errors_naming_the_value() {
    let big = 1u64 << 63;
    let table: Vec<u64> = (0..(ROWS * WIDTH) as u64).collect();
    let pool = vec![5u64; ROWS * WIDTH];
    let tv = || ReqToTokenView::new(ROWS, WIDTH, &table).unwrap();
    let pv = || ExpectedTokenTableView::new(ROWS, WIDTH, &pool).unwrap();
    // Each batch column.
    let err = plan_err(
        BatchView::from_arrays(&[1u64, big], &[2, 2], &[1, 1]),
        tv(),
        pv(),
        &[3u64, 3],
    );
    assert_eq!(err, past_i64("req_pool_indices", 1, big, "u64"));
    assert_eq!(
        err.to_string(),
        "kv-canary: req_pool_indices[1] = 9223372036854775808 (u64) is past i64::MAX, the largest value the ops read"
    );
    let err = plan_err(
        BatchView::from_arrays(&[1u64], &[u64::MAX], &[1]),
        tv(),
        pv(),
        &[3u64],
    );
    assert_eq!(err, past_i64("prefix_lens", 0, u64::MAX, "u64"));
    let err = plan_err(
        BatchView::from_arrays(&[1u64], &[2], &[big]),
        tv(),
        pv(),
        &[3u64],
    );
    assert_eq!(err, past_i64("extend_seq_lens", 0, big, "u64"));
    // A padding row is never read past its req_pool_index.
    let shape = Spec::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    let padding = BatchView::from_arrays(&[0u64], &[u64::MAX], &[u64::MAX]);
    let s = cpu::plan(
        &shape,
        &PlanInputs::from_views(padding, tv()),
        &mut verify,
        &mut write,
    )
    .unwrap();
    assert_eq!((s.bs, s.write_tokens), (1, 0));
    // A valid length, a table cell the plan reads, a pool cell it reads.
    let batch = BatchView::from_arrays(&[2u64], &[3], &[1]);
    let err = plan_err(batch, tv(), pv(), &[big]);
    assert_eq!(
        err,
        past_i64("req_to_verify_expected_tokens_valid_lens", 0, big, "u64")
    );
    let mut bad_table = table.clone();
    bad_table[2 * WIDTH + 1] = u64::MAX;
    let err = plan_err(
        batch,
        ReqToTokenView::new(ROWS, WIDTH, &bad_table).unwrap(),
        pv(),
        &[3u64],
    );
    assert_eq!(
        err,
        past_i64("req_to_token", 2 * WIDTH + 1, u64::MAX, "u64")
    );
    // A cell past the prefix is never read.
    bad_table[2 * WIDTH + 1] = 7;
    bad_table[2 * WIDTH + 5] = u64::MAX;
    let shape = Spec::new();
    let inputs =
        PlanInputs::from_views(batch, ReqToTokenView::new(ROWS, WIDTH, &bad_table).unwrap());
    assert!(cpu::plan(&shape, &inputs, &mut verify, &mut write).is_ok());
    let mut bad_pool = pool.clone();
    bad_pool[2 * WIDTH + 2] = big;
    let err = plan_err(
        batch,
        tv(),
        ExpectedTokenTableView::new(ROWS, WIDTH, &bad_pool).unwrap(),
        &[3u64],
    );
    assert_eq!(
        err,
        past_i64("req_to_verify_expected_tokens", 2 * WIDTH + 2, big, "u64")
    );
    // usize, the same.
    let table: Vec<usize> = (0..ROWS * WIDTH).collect();
    let pool = vec![1usize; ROWS * WIDTH];
    let err = plan_err(
        BatchView::from_arrays(&[usize::MAX], &[1], &[1]),
        ReqToTokenView::new(ROWS, WIDTH, &table).unwrap(),
        ExpectedTokenTableView::new(ROWS, WIDTH, &pool).unwrap(),
        &[1usize],
    );
    assert_eq!(
        err,
        past_i64("req_pool_indices", 0, usize::MAX as u64, "usize")
    );
}

#[test]
fn lut_entries_past_i64_are_errors_only_when_read() {
    let table: Vec<u32> = (0..(ROWS * WIDTH) as u32)
        .map(|x| x % SLOTS as u32)
        .collect();
    let mut lut: Vec<u64> = (0..SLOTS as u64).collect();
    let batch = BatchView::from_arrays(&[2u32], &[3], &[1]);
    let table = ReqToTokenView::new(ROWS, WIDTH, &table).unwrap();
    let shape = Spec::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    // Row 2 reads slots 32, 33, 34 (window 2: entries 33, 34, predecessor 32).
    lut[40] = u64::MAX; // never read
    let inputs = PlanInputs::from_views(batch, table).with_group(Swa::window(2).with_lut(&lut));
    cpu::plan(&shape, &inputs, &mut verify, &mut write).unwrap();
    assert_eq!(&verify.slot_indices()[..2], &[33, 34]);
    let (v0, w0) = (verify.clone(), write.clone());
    lut[32] = 1 << 63;
    let inputs = PlanInputs::from_views(batch, table).with_group(Swa::window(2).with_lut(&lut));
    let err = cpu::plan(&shape, &inputs, &mut verify, &mut write).unwrap_err();
    assert_eq!(
        err,
        past_i64("full_to_swa_index_mapping", 32, 1 << 63, "u64")
    );
    assert!(verify == v0 && write == w0);
}

#[test]
fn negative_i32_elements_get_the_ops_own_errors() {
    let table: Vec<i32> = (0..(ROWS * WIDTH) as i32).collect();
    let pool = vec![5i32; ROWS * WIDTH];
    let err = plan_err(
        BatchView::from_arrays(&[-5i32], &[2], &[1]),
        ReqToTokenView::new(ROWS, WIDTH, &table).unwrap(),
        ExpectedTokenTableView::new(ROWS, WIDTH, &pool).unwrap(),
        &[3i32],
    );
    assert_eq!(
        err,
        Error::ReqPoolIndexOutOfRange {
            row: 0,
            req_pool_index: -5,
            rows: ROWS
        }
    );
    assert!(err.to_string().contains("-5"), "{err}");
}

#[test]
fn write_elements_past_i64_are_errors_and_modify_nothing() {
    let shape = Spec::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    let table = ReqToToken::from_vec(ROWS, WIDTH, (0..(ROWS * WIDTH) as i32).collect()).unwrap();
    let batch = Batch::from_columns([1, 2], [0, 0], [2, 2]);
    cpu::plan(
        &shape,
        &PlanInputs::full(&batch, &table),
        &mut verify,
        &mut write,
    )
    .unwrap();
    let big = 1u64 << 63;
    for (array, what) in [
        (0, "input_ids"),
        (1, "positions"),
        (2, "out_cache_loc"),
        (3, "expected_input_tokens"),
        (4, "expected_input_positions"),
    ] {
        let mut arrays: Vec<Vec<u64>> = vec![vec![1; ENTRIES]; 5];
        arrays[array][3] = big;
        let view = WriteInputsView::new(Cap::<ENTRIES>, &arrays[0], &arrays[1], &arrays[2])
            .unwrap()
            .with_expected(&arrays[3], &arrays[4])
            .unwrap();
        let mut canary = kv_canary::CanaryBuffer::<Cap<SLOTS>>::new();
        let mut ring = kv_canary::ViolationRing::<Cap<8>>::new();
        let mut counters = kv_canary::HealthCounters::new();
        let launch = kv_canary::LaunchSettings::new(LaunchTag::HeadKFull);
        let before = (canary.clone(), ring.clone(), counters.clone());
        let err = cpu::write(
            &shape,
            &write,
            &view,
            &launch,
            &mut canary,
            &mut ring,
            &mut counters,
        )
        .unwrap_err();
        assert_eq!(err, past_i64(what, 3, big, "u64"));
        assert!(
            before == (canary, ring, counters),
            "{what}: something changed"
        );
    }
    // Past the planned total (4 entries), elements are never read.
    let mut arrays: Vec<Vec<u64>> = vec![vec![1; ENTRIES]; 3];
    arrays[2][ENTRIES - 1] = u64::MAX;
    let view = WriteInputsView::new(Cap::<ENTRIES>, &arrays[0], &arrays[1], &arrays[2]).unwrap();
    let mut canary = kv_canary::CanaryBuffer::<Cap<SLOTS>>::new();
    let s = cpu::write(
        &shape,
        &write,
        &view,
        &kv_canary::LaunchSettings::new(LaunchTag::HeadKFull),
        &mut canary,
        &mut kv_canary::ViolationRing::<Cap<8>>::new(),
        &mut kv_canary::HealthCounters::new(),
    )
    .unwrap();
    assert_eq!(s.written, 4);
}

// Keep the imports of group types used only in signatures.
#[allow(dead_code)]
type Groups = (Full, SwaGroup);
