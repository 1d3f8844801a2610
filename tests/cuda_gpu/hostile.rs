//! Hostile device data (issue 11, item 4): the bad inputs of the CPU fuzz campaign through the
//! CUDA launches (`Offload`: upload, launch, `Stream::status()`, download), each compared with
//! the CPU outcome or the device behaviour documented in `docs/cuda.md` ("Malformed data on the
//! device") and on each op:
//!
//! * **exact**: the CPU and the GPU return the same result (the same `Error`, or `Ok`) and equal
//!   outputs (bytes, counters, write index; new ring rows as a multiset);
//! * **kind + model**: the CPU returns an error and changes nothing; the GPU records an error of
//!   the same kind (which of several bad entries is recorded first is unspecified) and writes
//!   what the documented model says: the CPU op on the same data with every bad entry skipped
//!   (`out_cache_loc = -1` for a write entry, slot 0 for a verify entry) or every bad request
//!   left out (`write_num_valid_reqs` or the scatter batch cut before it).
//!
//! Each kind prints a catalogue line with its case count and the outcomes it met.

use crate::canary::{
    all_rows, on_gpu, on_gpu_early, random_verify_case, random_write_case, run_verify, run_write,
    same_state, State, VerifyCase, WriteCase,
};
use crate::ensure;
use crate::plan::{compare, random_case, run, Case};
use crate::rng::Rng;
use kv_canary::backend::{Cpu, Scatters};
use kv_canary::cuda::Gpu;
use kv_canary::{
    Batch, BatchRow, Capacity, Error, ExpectedTokenTable, HealthCounters, RealKvHashMode,
    ReqToToken, UncheckedCapacity, ViolationRing,
};
use kv_canary_testkit::Offload;
use std::collections::BTreeMap;

/// The error's variant name (`SlotOutOfRange`, ...), or `Ok`.
fn outcome<T>(r: &Result<T, Error>) -> String {
    match r {
        Ok(_) => "Ok".to_owned(),
        Err(e) => format!("{e:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

/// One catalogue kind: its case count and the outcomes met.
struct Kind {
    name: &'static str,
    cases: u64,
    outcomes: BTreeMap<String, u64>,
}

impl Kind {
    fn new(name: &'static str) -> Self {
        Kind {
            name,
            cases: 0,
            outcomes: BTreeMap::new(),
        }
    }

    fn count(&mut self, outcome: String) {
        self.cases += 1;
        *self.outcomes.entry(outcome).or_default() += 1;
    }

    /// Prints the catalogue line; fails a kind that never produced the outcome it is about.
    fn report(&self, must_see: &[&str]) -> Result<u64, String> {
        let seen: Vec<String> = self
            .outcomes
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        println!(
            "    catalogue: {:<58} {:>6} cases  [{}]",
            self.name,
            self.cases,
            seen.join(", ")
        );
        for want in must_see {
            ensure!(
                self.outcomes.contains_key(*want),
                "{}: no case produced {want} (generator too weak): {seen:?}",
                self.name
            );
        }
        Ok(self.cases)
    }
}

// ---------------------------------------------------------------- plan

/// Replaces row `r` of the batch by `f(row)`.
fn with_row(batch: &Batch, r: usize, f: impl Fn(BatchRow) -> BatchRow) -> Batch {
    let mut out = Batch::new();
    for i in 0..batch.len() {
        let row = batch.row(i).expect("row inside the batch");
        out.push(if i == r { f(row) } else { row });
    }
    out
}

/// A random plan case with at least one row.
fn plan_case(rng: &mut Rng) -> Case {
    loop {
        let case = random_case(rng, 40, 32);
        if !case.batch.is_empty() {
            return case;
        }
    }
}

/// One plan kind: `mutate` the case, compare CPU and GPU exactly (result, both plans).
fn plan_kind(
    name: &'static str,
    seed0: u64,
    cases: u64,
    must_see: &[&str],
    mutate: impl Fn(&mut Rng, &mut Case),
) -> Result<u64, String> {
    let mut kind = Kind::new(name);
    for seed in 0..cases {
        let mut rng = Rng::new(seed0 + seed);
        let mut case = plan_case(&mut rng);
        mutate(&mut rng, &mut case);
        compare(&case, &format!("{name}, seed {seed}"))?;
        let (mut v, mut w) = (case.verify.clone(), case.write.clone());
        kind.count(outcome(&run(&case, &Cpu, &mut v, &mut w, 0)));
    }
    kind.report(must_see)
}

const I64_EXTREMES: [i64; 6] = [
    i64::MIN,
    i64::MIN + 1,
    -(1 << 40),
    -1,
    i64::MAX - 1,
    i64::MAX,
];

/// The plan kernels on out-of-range, negative and overflowing batch columns, short tables and
/// pools, garbage LUTs: the same error (first in row order) or the same plans as the CPU.
pub fn plan_hostile(_: &Gpu) -> Result<(), String> {
    let n = crate::scaled(300);
    let mut total = 0;
    total += plan_kind(
        "plan: req_pool_index negative / past the table / i64 extremes",
        0x4051_0000,
        n,
        &["ReqPoolIndexOutOfRange"],
        |rng, c| {
            let r = rng.below(c.batch.len() as u64) as usize;
            let rows = c.table.rows() as i64;
            let extreme = rng.pick(&I64_EXTREMES);
            let v = rng.pick(&[rows, rows + 1, 1 << 40, extreme]);
            c.batch = with_row(&c.batch, r, |row| BatchRow {
                req_pool_index: v,
                ..row
            });
        },
    )?;
    total += plan_kind(
        "plan: prefix_len negative / past the row / i64 extremes",
        0x4052_0000,
        n,
        &["PrefixBeyondRow"],
        |rng, c| {
            let r = rng.below(c.batch.len() as u64) as usize;
            let width = c.table.width() as i64;
            let extreme = rng.pick(&I64_EXTREMES);
            let v = rng.pick(&[width + 1, 1 << 40, extreme]);
            c.batch = with_row(&c.batch, r, |row| BatchRow {
                req_pool_index: row.req_pool_index.max(1),
                prefix_len: v,
                ..row
            });
        },
    )?;
    total += plan_kind(
        "plan: extend_len negative / i64 extremes / sums overflowing i64",
        0x4053_0000,
        n,
        &["WriteTokenCountOverflow"],
        |rng, c| {
            let r = rng.below(c.batch.len() as u64) as usize;
            let v = rng.pick(&I64_EXTREMES);
            c.batch = with_row(&c.batch, r, |row| BatchRow {
                extend_len: v,
                ..row
            });
            if rng.chance(50) {
                // Two rows of i64::MAX / 2 + 1: only their sum overflows.
                let half = i64::MAX / 2 + 1;
                c.batch = with_row(&c.batch, 0, |row| BatchRow {
                    extend_len: half,
                    ..row
                });
                c.batch.push(BatchRow {
                    req_pool_index: 1,
                    prefix_len: 0,
                    extend_len: half,
                });
            }
        },
    )?;
    total += plan_kind(
        "plan: req_to_token table shorter than the batch claims",
        0x4054_0000,
        n,
        &["ReqPoolIndexOutOfRange", "PrefixBeyondRow"],
        |rng, c| {
            let rows = rng.range(1, c.table.rows().min(3) as i64) as usize;
            let width = rng.range(1, c.table.width() as i64) as usize;
            let cells = (0..rows * width)
                .map(|_| rng.range(-1, 200) as i32)
                .collect();
            c.table = ReqToToken::from_vec(rows, width, cells).expect("a table");
        },
    )?;
    total += plan_kind(
        "plan: SWA LUT garbage (negative, past the SWA pool, -1 in the window, short)",
        0x4055_0000,
        n,
        &["LutIndexOutOfRange", "Ok"],
        |rng, c| {
            let len = match rng.below(4) {
                // Short, not empty: the device refuses an empty LUT when it is uploaded
                // (`DeviceLut::from_host`: `ZeroCapacity`), the CPU only when a slot needs it.
                0 => rng.range(1, 3) as usize,
                _ => 301,
            };
            let lut = (0..len)
                .map(|_| match rng.below(5) {
                    0 => rng.pick(&I64_EXTREMES),
                    1 => -1,
                    2 => rng.range(1 << 20, 1 << 40),
                    _ => rng.range(0, 400),
                })
                .collect();
            c.lut = Some(lut);
            c.window = rng.pick(&[0, 1, 3, 64, u64::MAX]);
        },
    )?;
    total += plan_kind(
        "plan: expected-token pool shorter than claimed, valid_lens garbage",
        0x4056_0000,
        n,
        &["ExpectedTokenReadOutOfRange"],
        |rng, c| {
            let rows = rng.range(1, 3) as usize;
            let width = rng.range(1, 4) as usize;
            let t = (0..rows * width)
                .map(|_| rng.range(-5, 99) as i32)
                .collect();
            let mut lens: Vec<i64> = (0..c.batch.len())
                .map(|_| match rng.below(4) {
                    0 => rng.pick(&I64_EXTREMES),
                    _ => rng.range(-2, 40),
                })
                .collect();
            if rng.chance(10) {
                lens.push(1);
            }
            c.pool = Some((
                ExpectedTokenTable::from_vec(rows, width, t).expect("a pool"),
                lens,
            ));
        },
    )?;
    println!("    plan hostile cases: {total}, every one equal to the CPU");
    Ok(())
}

// ---------------------------------------------------------------- write

/// The write case's active requests with at least one entry: `(request, start, end)`.
fn nonempty_requests(c: &WriteCase) -> Vec<(usize, usize, usize)> {
    let o = c.plan.offsets();
    (0..c.plan.active_requests())
        .filter(|&r| o[r + 1] > o[r])
        .map(|r| (r, o[r] as usize, o[r + 1] as usize))
        .collect()
}

/// A random write case with every request counted (`num_valid = reqs`) and at least one
/// non-empty request.
fn write_case(rng: &mut Rng) -> WriteCase {
    loop {
        let long = rng.chance(10);
        let mut c = random_write_case(rng, long);
        let active = c.plan.active_requests();
        *c.plan.parts_mut().num_valid_reqs = active as i32;
        if !nonempty_requests(&c).is_empty() {
            return c;
        }
    }
}

/// A launch case the campaign runs on both backends: a write or a verify case.
trait LaunchCase {
    /// The state before the launch.
    fn state(&self) -> &State;
    /// The launch on the CPU.
    fn on_cpu(&self, st: &mut State) -> Result<(), Error>;
    /// The launch on the GPU (through `Offload`).
    fn on_device(&self, st: &mut State) -> Result<(), Error>;
    /// For a write or a verify, the launch on the GPU as the step API's tail stage launches it
    /// (`on_gpu_early`), which the campaign holds to the same outcome and state; `None` for
    /// other launches.
    fn on_device_early(&self, _st: &mut State) -> Option<Result<(), Error>> {
        None
    }
}

impl LaunchCase for WriteCase {
    fn state(&self) -> &State {
        &self.state
    }
    fn on_cpu(&self, st: &mut State) -> Result<(), Error> {
        run_write(self, &Cpu, st)
    }
    fn on_device(&self, st: &mut State) -> Result<(), Error> {
        on_gpu(self, st, run_write)
    }
    fn on_device_early(&self, st: &mut State) -> Option<Result<(), Error>> {
        Some(on_gpu_early(self, st, run_write))
    }
}

impl LaunchCase for VerifyCase {
    fn state(&self) -> &State {
        &self.state
    }
    fn on_cpu(&self, st: &mut State) -> Result<(), Error> {
        run_verify(self, &Cpu, st)
    }
    fn on_device(&self, st: &mut State) -> Result<(), Error> {
        on_gpu(self, st, run_verify)
    }
    fn on_device_early(&self, st: &mut State) -> Option<Result<(), Error>> {
        Some(on_gpu_early(self, st, run_verify))
    }
}

/// CPU and GPU on `c`: the same result, equal state.
fn exact<C: LaunchCase>(c: &C, label: &str) -> Result<String, String> {
    let (mut cs, mut gs) = (c.state().clone(), c.state().clone());
    let cpu = c.on_cpu(&mut cs);
    let gpu = c.on_device(&mut gs);
    ensure!(
        outcome(&cpu) == outcome(&gpu),
        "{label}: CPU {cpu:?}, GPU {gpu:?}"
    );
    let mut es = c.state().clone();
    let early = c.on_device_early(&mut es);
    if let Some(early) = &early {
        ensure!(
            outcome(&cpu) == outcome(early),
            "{label}: CPU {cpu:?}, GPU launched early {early:?}"
        );
    }
    if cpu.is_ok() {
        let all = all_rows(c.state(), |s| c.on_cpu(s));
        same_state(label, &cs, &gs, c.state().ring.write_index(), &all)?;
        if early.is_some() {
            let early_label = format!("{label} (launched early)");
            same_state(&early_label, &cs, &es, c.state().ring.write_index(), &all)?;
        }
    } else {
        ensure!(&cs == c.state(), "{label}: the CPU modified state on error");
    }
    Ok(outcome(&cpu))
}

/// The CPU errs on `c` and changes nothing; the GPU records the same kind and leaves the state
/// the CPU leaves on `model` (the documented skip: `skipped` says what), which must succeed.
fn modelled<C: LaunchCase>(c: &C, model: &C, label: &str, skipped: &str) -> Result<String, String> {
    let mut cs = c.state().clone();
    let cpu = c.on_cpu(&mut cs);
    ensure!(cpu.is_err(), "{label}: the CPU accepted it");
    ensure!(&cs == c.state(), "{label}: the CPU modified state on error");
    let mut gs = c.state().clone();
    let gpu = c.on_device(&mut gs);
    ensure!(
        outcome(&cpu) == outcome(&gpu),
        "{label}: CPU {cpu:?}, GPU {gpu:?}"
    );
    let mut ms = c.state().clone();
    let m = model.on_cpu(&mut ms);
    ensure!(
        m.is_ok(),
        "{label}: the model case failed on the CPU: {m:?}"
    );
    let all = all_rows(c.state(), |s| model.on_cpu(s));
    same_state(
        &format!("{label} (GPU vs the CPU with {skipped} skipped)"),
        &ms,
        &gs,
        c.state().ring.write_index(),
        &all,
    )?;
    let mut es = c.state().clone();
    if let Some(early) = c.on_device_early(&mut es) {
        ensure!(
            outcome(&cpu) == outcome(&early),
            "{label}: CPU {cpu:?}, GPU launched early {early:?}"
        );
        same_state(
            &format!("{label} (GPU launched early vs the CPU with {skipped} skipped)"),
            &ms,
            &es,
            c.state().ring.write_index(),
            &all,
        )?;
    }
    Ok(outcome(&cpu))
}

/// [`exact`] for a write case.
fn write_exact(c: &WriteCase, label: &str) -> Result<String, String> {
    exact(c, label)
}

/// [`modelled`] for a write case: the model skips the bad part.
fn write_modelled(c: &WriteCase, model: &WriteCase, label: &str) -> Result<String, String> {
    modelled(c, model, label, "the bad part")
}

/// [`exact`] for a verify case.
fn verify_exact(c: &VerifyCase, label: &str) -> Result<String, String> {
    exact(c, label)
}

/// [`modelled`] for verify: the model skips every bad entry (slot 0).
fn verify_modelled(c: &VerifyCase, model: &VerifyCase, label: &str) -> Result<String, String> {
    modelled(c, model, label, "the bad entries")
}

/// A copy of the case (the case types hold no `Clone`).
fn clone_write(c: &WriteCase) -> WriteCase {
    WriteCase {
        plan: c.plan.clone(),
        ids: c.ids.clone(),
        positions: c.positions.clone(),
        slots: c.slots.clone(),
        expected: c.expected.clone(),
        kv: c.kv.copy(),
        tag: c.tag,
        chain: c.chain,
        state: c.state.clone(),
    }
}

/// Whether slot `s` is past some real-KV source of the case (only when it folds).
fn past_a_source(c: &WriteCase, s: i64) -> bool {
    c.kv.mode != RealKvHashMode::None
        && c.kv.bytes.iter().any(|(bytes, row, p)| {
            let rows = (bytes.len() / row) as i64;
            s / p.page_size >= rows
        })
}

/// The write kernel on out-of-range and extreme slots, seeds and offsets, garbage counts,
/// rings near full and counters near `i64::MAX`.
pub fn write_hostile(_: &Gpu) -> Result<(), String> {
    let n = crate::scaled(250);
    let mut total = 0;

    let mut k = Kind::new("write: out_cache_loc past the buffer (n, 2^40, i64::MAX)");
    for seed in 0..n {
        let mut rng = Rng::new(0x5701_0000 + seed);
        let mut c = write_case(&mut rng);
        let mut model = clone_write(&c);
        let num_slots = c.state.buf.num_slots() as i64;
        let reqs = nonempty_requests(&c);
        for _ in 0..rng.range(1, 3) {
            let (_, s, e) = rng.pick(&reqs);
            let i = rng.range(s as i64, e as i64 - 1) as usize;
            c.slots[i] = rng.pick(&[num_slots, num_slots + 1, 1 << 40, i64::MAX]);
            model.slots[i] = -1;
        }
        k.count(write_modelled(
            &c,
            &model,
            &format!("{}, seed {seed}", k.name),
        )?);
    }
    total += k.report(&["SlotOutOfRange"])?;

    let mut k = Kind::new("write: out_cache_loc negative (-2, -2^40, i64::MIN): skipped");
    for seed in 0..n {
        let mut rng = Rng::new(0x5702_0000 + seed);
        let mut c = write_case(&mut rng);
        let (_, s, e) = rng.pick(&nonempty_requests(&c));
        let i = rng.range(s as i64, e as i64 - 1) as usize;
        c.slots[i] = rng.pick(&[-2, -(1 << 40), i64::MIN, i64::MIN + 1]);
        k.count(write_exact(&c, &format!("{}, seed {seed}", k.name))?);
    }
    total += k.report(&["Ok"])?;

    let mut k = Kind::new("write: seed past the buffer (n, 2^40, i64::MAX)");
    for seed in 0..n {
        let mut rng = Rng::new(0x5703_0000 + seed);
        let mut c = write_case(&mut rng);
        let mut model = clone_write(&c);
        let num_slots = c.state.buf.num_slots() as i64;
        let (r, s, e) = rng.pick(&nonempty_requests(&c));
        c.plan.parts_mut().seed_slot_indices[r] =
            rng.pick(&[num_slots, num_slots + 7, 1 << 40, i64::MAX]);
        model.plan.parts_mut().seed_slot_indices[r] = -1;
        model.slots[s..e].fill(-1);
        k.count(write_modelled(
            &c,
            &model,
            &format!("{}, seed {seed}", k.name),
        )?);
    }
    total += k.report(&["SlotOutOfRange"])?;

    let mut k = Kind::new("write: seed negative (-2, i64::MIN): no seed");
    for seed in 0..n {
        let mut rng = Rng::new(0x5704_0000 + seed);
        let mut c = write_case(&mut rng);
        let (r, _, _) = rng.pick(&nonempty_requests(&c));
        c.plan.parts_mut().seed_slot_indices[r] = rng.pick(&[-2, -(1 << 40), i64::MIN]);
        k.count(write_exact(&c, &format!("{}, seed {seed}", k.name))?);
    }
    total += k.report(&["Ok"])?;

    let mut k = Kind::new("write: last request's end offset decreasing / past E / i64 extremes");
    for seed in 0..n {
        let mut rng = Rng::new(0x5705_0000 + seed);
        let mut c = write_case(&mut rng);
        let mut model = clone_write(&c);
        let last = c.plan.active_requests() - 1;
        let entries = c.ids.len() as i64;
        let start = c.plan.offsets()[last];
        let bad = rng.pick(&[
            start - 1,
            entries + 1,
            entries + (1 << 40),
            i64::MAX,
            i64::MIN,
            -1,
        ]);
        c.plan.parts_mut().offsets[last + 1] = bad;
        *model.plan.parts_mut().num_valid_reqs = last as i32;
        k.count(write_modelled(
            &c,
            &model,
            &format!("{}, seed {seed}", k.name),
        )?);
    }
    total += k.report(&["MalformedOffsets"])?;

    let mut k = Kind::new("write: write_num_valid_reqs negative / huge (clamped)");
    for seed in 0..n {
        let mut rng = Rng::new(0x5706_0000 + seed);
        let mut c = write_case(&mut rng);
        let cap = c.plan.capacity().get() as i32;
        *c.plan.parts_mut().num_valid_reqs = rng.pick(&[i32::MIN, -1, cap + 1, i32::MAX]);
        k.count(write_exact(&c, &format!("{}, seed {seed}", k.name))?);
    }
    total += k.report(&["Ok"])?;

    let mut k = Kind::new("write: real-KV sources shorter than the buffer");
    for seed in 0..n {
        let mut rng = Rng::new(0x5707_0000 + seed);
        let mut c = write_case(&mut rng);
        let num_slots = c.state.buf.num_slots();
        c.kv = crate::canary::KvSetup::sources(&mut rng, num_slots);
        if c.kv.mode == RealKvHashMode::None {
            c.kv.mode = RealKvHashMode::All;
        }
        for (bytes, row, _) in &mut c.kv.bytes {
            let rows = bytes.len() / *row;
            bytes.truncate((rows / 3).max(1) * *row);
        }
        let mut model = clone_write(&c);
        for i in 0..model.slots.len() {
            if past_a_source(&c, model.slots[i]) {
                model.slots[i] = -1;
            }
        }
        let label = format!("{}, seed {seed}", k.name);
        let o = if model.slots == c.slots {
            write_exact(&c, &label)?
        } else {
            write_modelled(&c, &model, &label)?
        };
        k.count(o);
    }
    total += k.report(&["RealKvSlotOutOfRange"])?;

    total += ring_and_counters(
        "write",
        n,
        0x5708_0000,
        |rng| {
            let mut c = write_case(rng);
            // Violations to record: half the expected inputs perturbed.
            if c.expected.is_none() {
                let t = c
                    .ids
                    .iter()
                    .map(|&x| x ^ i64::from(rng.chance(50)))
                    .collect();
                c.expected = Some((t, c.positions.clone()));
            }
            c
        },
        |c| &mut c.state,
        write_exact,
    )?;
    println!("    write hostile cases: {total}, every one as the CPU or its documented model");
    Ok(())
}

/// Rings near full (write index at capacity - 1, capacity, near `i32::MAX`, negative) and
/// counters near `i64::MAX`: exact against the CPU (both wrap like `atomicAdd`).
fn ring_and_counters<C>(
    op: &'static str,
    n: u64,
    seed0: u64,
    make: impl Fn(&mut Rng) -> C,
    state: impl Fn(&mut C) -> &mut State,
    exact: impl Fn(&C, &str) -> Result<String, String>,
) -> Result<u64, String> {
    let names: [&'static str; 2] = if op == "write" {
        [
            "write: ring near full (index cap-1..cap+3, near i32::MAX, negative)",
            "write: counters near i64::MAX (wrap)",
        ]
    } else {
        [
            "verify: ring near full (index cap-1..cap+3, near i32::MAX, negative)",
            "verify: counters near i64::MAX (wrap)",
        ]
    };
    let mut ring = Kind::new(names[0]);
    let mut counters = Kind::new(names[1]);
    for seed in 0..n {
        let mut rng = Rng::new(seed0 + seed);
        let mut c = make(&mut rng);
        let st = state(&mut c);
        let cap = st.ring.capacity().get();
        let capi = cap as i32;
        let index = rng.pick(&[
            capi - 1,
            capi,
            capi + 3,
            i32::MAX - 1,
            i32::MAX,
            i32::MIN,
            -1,
        ]);
        let rows = st.ring.rows_flat().to_vec();
        st.ring =
            ViolationRing::from_parts(UncheckedCapacity::new("ring", cap).unwrap(), rows, index)
                .map_err(|e| format!("ring at index {index}: {e}"))?;
        let label = format!("{}, seed {seed}, index {index}", ring.name);
        let o = exact(&c, &label)?;
        ring.count(o);

        let mut c = make(&mut rng);
        let st = state(&mut c);
        st.counters = HealthCounters::from_parts(
            i64::MAX - rng.range(0, 3),
            rng.pick(&[i64::MAX, i64::MAX - 1, -1, i64::MIN]),
        );
        let label = format!("{}, seed {seed}", counters.name);
        let o = exact(&c, &label)?;
        counters.count(o);
    }
    Ok(ring.report(&["Ok"])? + counters.report(&["Ok"])?)
}

// ---------------------------------------------------------------- verify

fn clone_verify(c: &VerifyCase) -> VerifyCase {
    VerifyCase {
        plan: c.plan.clone(),
        check: c.check,
        kv: c.kv.copy(),
        tag: c.tag,
        state: c.state.clone(),
    }
}

/// A verify case, enabled, with at least one active entry.
fn verify_case(rng: &mut Rng) -> VerifyCase {
    loop {
        let mut c = random_verify_case(rng, false);
        let p = c.plan.parts_mut();
        *p.enable = 1;
        if c.plan.active_len() > 0 {
            return c;
        }
    }
}

/// Mutates `k` random active entries with `bad`, skipping them (slot 0) in the model.
fn verify_bad_entries(
    name: &'static str,
    seed0: u64,
    n: u64,
    must_see: &[&str],
    bad: impl Fn(&mut Rng, i64, &mut i64, &mut i64),
) -> Result<u64, String> {
    let mut k = Kind::new(name);
    for seed in 0..n {
        let mut rng = Rng::new(seed0 + seed);
        let mut c = verify_case(&mut rng);
        let mut model = clone_verify(&c);
        let num_slots = c.state.buf.num_slots() as i64;
        let active = c.plan.active_len();
        for _ in 0..rng.range(1, 3) {
            let i = rng.below(active as u64) as usize;
            let p = c.plan.parts_mut();
            bad(
                &mut rng,
                num_slots,
                &mut p.slot_indices[i],
                &mut p.prev_slot_indices[i],
            );
            model.plan.parts_mut().slot_indices[i] = 0;
        }
        k.count(verify_modelled(
            &c,
            &model,
            &format!("{name}, seed {seed}"),
        )?);
    }
    k.report(must_see)
}

/// The verify kernel on out-of-range and extreme slots and predecessors, garbage counts and
/// flags, rings near full, counters near `i64::MAX`.
pub fn verify_hostile(_: &Gpu) -> Result<(), String> {
    let n = crate::scaled(250);
    let mut total = 0;
    total += verify_bad_entries(
        "verify: slot past the buffer (n, 2^40, i64::MAX)",
        0x7E01_0000,
        n,
        &["SlotOutOfRange"],
        |rng, num_slots, slot, _| *slot = rng.pick(&[num_slots, num_slots + 1, 1 << 40, i64::MAX]),
    )?;
    total += verify_bad_entries(
        "verify: slot negative (-1 from a LUT inside the window, i64::MIN)",
        0x7E02_0000,
        n,
        &["SlotOutOfRange"],
        |rng, _, slot, _| *slot = rng.pick(&[-1, -1, -2, i64::MIN]),
    )?;
    total += verify_bad_entries(
        "verify: predecessor past the buffer (n, i64::MAX)",
        0x7E03_0000,
        n,
        &["SlotOutOfRange"],
        |rng, num_slots, slot, prev| {
            *slot = rng.range(1, num_slots - 1);
            *prev = rng.pick(&[num_slots, num_slots + 9, i64::MAX]);
        },
    )?;

    let mut k = Kind::new("verify: predecessor negative extremes (chain head)");
    for seed in 0..n {
        let mut rng = Rng::new(0x7E04_0000 + seed);
        let mut c = verify_case(&mut rng);
        let i = rng.below(c.plan.active_len() as u64) as usize;
        c.plan.parts_mut().prev_slot_indices[i] = rng.pick(&[i64::MIN, -2, -(1 << 40)]);
        k.count(verify_exact(&c, &format!("{}, seed {seed}", k.name))?);
    }
    total += k.report(&["Ok"])?;

    let mut k = Kind::new("verify: verify_num_valid negative / huge, enable garbage");
    for seed in 0..n {
        let mut rng = Rng::new(0x7E05_0000 + seed);
        let mut c = verify_case(&mut rng);
        let cap = c.plan.capacity().get() as i32;
        let p = c.plan.parts_mut();
        *p.num_valid = rng.pick(&[i32::MIN, -1, cap + 1, i32::MAX]);
        *p.enable = rng.pick(&[0, 1, 2, -1, i32::MIN, i32::MAX]);
        k.count(verify_exact(&c, &format!("{}, seed {seed}", k.name))?);
    }
    total += k.report(&["Ok"])?;

    total += ring_and_counters(
        "verify",
        n,
        0x7E06_0000,
        verify_case,
        |c| &mut c.state,
        verify_exact,
    )?;
    println!("    verify hostile cases: {total}, every one as the CPU or its documented model");
    Ok(())
}

// ---------------------------------------------------------------- scatter

/// A scatter case: `bs` requests over distinct pool rows.
struct ScatterCase {
    flat: Vec<i64>,
    offsets: Vec<i64>,
    rows: Vec<i64>,
    pool: ExpectedTokenTable,
}

fn scatter_case(rng: &mut Rng) -> ScatterCase {
    let pool_rows = rng.range(2, 12) as usize;
    let width = rng.range(1, 64) as usize;
    let bs = rng.range(1, pool_rows as i64) as usize;
    let mut perm: Vec<i64> = (0..pool_rows as i64).collect();
    for i in (1..pool_rows).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut offsets = vec![0i64];
    for _ in 0..bs {
        offsets.push(offsets.last().unwrap() + rng.range(1, 2 * width as i64));
    }
    let flat = (0..*offsets.last().unwrap())
        .map(|_| rng.next_u64() as i64)
        .collect();
    let pool = ExpectedTokenTable::from_vec(
        pool_rows,
        width,
        (0..pool_rows * width)
            .map(|_| rng.range(-9, 9) as i32)
            .collect(),
    )
    .expect("a pool");
    ScatterCase {
        flat,
        offsets,
        rows: perm[..bs].to_vec(),
        pool,
    }
}

/// The scatter kernel on a bad last request (pool row or end offset): the CPU's error kind,
/// and the pool the CPU writes for the batch without that request.
pub fn scatter_hostile(_: &Gpu) -> Result<(), String> {
    let n = crate::scaled(300);
    let mut pool_row = Kind::new("scatter: pool row negative / past the pool / i64 extremes");
    let mut offsets = Kind::new("scatter: end offset decreasing / past the tokens / i64 extremes");
    for seed in 0..2 * n {
        let mut rng = Rng::new(0x5CA8_0000 + seed);
        let mut c = scatter_case(&mut rng);
        let last = c.rows.len() - 1;
        let k = if seed % 2 == 0 {
            let pr = c.pool.rows() as i64;
            let extreme = rng.pick(&I64_EXTREMES);
            c.rows[last] = rng.pick(&[pr, pr + 1, 1 << 40, extreme]);
            &mut pool_row
        } else {
            let start = c.offsets[last];
            let t = c.flat.len() as i64;
            c.offsets[last + 1] = rng.pick(&[start - 1, t + 1, i64::MAX, i64::MIN, -1]);
            &mut offsets
        };
        let label = format!("{}, seed {seed}", k.name);
        let mut cpu_pool = c.pool.clone();
        let cpu = Cpu
            .scatter_req_token_ids(&c.flat, &c.offsets, &c.rows, &mut cpu_pool)
            .map(drop);
        ensure!(cpu.is_err(), "{label}: the CPU accepted it");
        ensure!(
            cpu_pool == c.pool,
            "{label}: the CPU modified the pool on error"
        );
        let mut gpu_pool = c.pool.clone();
        let gpu = Offload::with_default(|o| {
            o.scatter_req_token_ids(&c.flat, &c.offsets, &c.rows, &mut gpu_pool)
        });
        ensure!(
            outcome(&cpu) == outcome(&gpu),
            "{label}: CPU {cpu:?}, GPU {gpu:?}"
        );
        let mut model = c.pool.clone();
        Cpu.scatter_req_token_ids(&c.flat, &c.offsets[..=last], &c.rows[..last], &mut model)
            .map_err(|e| format!("{label}: model: {e}"))?;
        ensure!(
            gpu_pool == model,
            "{label}: the GPU pool is not the CPU's without the bad request"
        );
        k.count(outcome(&cpu));
    }
    let total = pool_row.report(&["PoolRowOutOfRange"])? + offsets.report(&["MalformedOffsets"])?;
    println!("    scatter hostile cases: {total}, every one as the CPU's documented model");
    Ok(())
}
