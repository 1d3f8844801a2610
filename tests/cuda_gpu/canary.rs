//! The write, verify and scatter ops on the GPU against the CPU reference: random cases,
//! buffers and counters byte-equal, violation rows compared as multisets (GPU rows of
//! different requests or entries come in any order).

use crate::rng::Rng;
use crate::{ensure, fail};
use kv_canary::backend::{Backend, Cpu, Scatters};
use kv_canary::cuda::Gpu;
use kv_canary::{
    CanaryBuffer, CanarySlot, Capacity, ChainPositionAssert, Error, ExpectedTokenTable,
    HealthCounters, LaunchSettings, LaunchTag, PagedShape, RealKv, RealKvHashMode, RealKvParams,
    RealKvSource, RealKvSources, TokenCheck, TokenCheckOff, TokenCheckOn, TokenLayout,
    UncheckedCapacity, UncheckedShape, VerifyEntry, VerifyPlan, ViolationRing, WriteInputs,
    WritePlan,
};
use kv_canary_testkit::{HostBackend, Offload};

type U = UncheckedCapacity;

fn cap(what: &'static str, n: usize) -> U {
    UncheckedCapacity::new(what, n.max(1)).unwrap()
}

/// Everything a write or verify launch mutates.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub buf: CanaryBuffer<U>,
    pub ring: ViolationRing<U>,
    pub counters: HealthCounters,
}

/// Real-KV source bytes and parameters of a case (the launch borrows them), and each source's
/// token layout (a strip, or a paged engine's gathered K, V or HND layout).
pub struct KvSetup {
    pub bytes: Vec<(Vec<u8>, usize, RealKvParams)>,
    pub layouts: Vec<TokenLayout>,
    pub mode: RealKvHashMode,
}

impl KvSetup {
    pub fn none() -> Self {
        KvSetup {
            bytes: vec![],
            layouts: vec![],
            mode: RealKvHashMode::None,
        }
    }

    /// A copy (the hostile cases' models).
    pub fn copy(&self) -> Self {
        KvSetup {
            bytes: self.bytes.clone(),
            layouts: self.layouts.clone(),
            mode: self.mode,
        }
    }

    /// The host sources over these bytes.
    pub fn host_sources(&self) -> Vec<RealKvSource<'_>> {
        self.bytes
            .iter()
            .zip(&self.layouts)
            .map(|((b, row, p), layout)| {
                RealKvSource::new(b, *row, *p)
                    .and_then(|s| s.with_token_layout(*layout))
                    .unwrap()
            })
            .collect()
    }

    fn random(rng: &mut Rng, num_slots: usize) -> Self {
        if !rng.chance(45) {
            return Self::none();
        }
        Self::sources(rng, num_slots)
    }

    pub fn sources(rng: &mut Rng, num_slots: usize) -> Self {
        let n = rng.range(1, 4) as usize;
        let mode = rng.pick(&[
            RealKvHashMode::None,
            RealKvHashMode::Partial,
            RealKvHashMode::All,
            RealKvHashMode::All,
        ]);
        let (bytes, layouts) = (0..n)
            .map(|_| {
                // A third of the sources are a paged engine's cache: blocks of `page` tokens of
                // `heads x head_dim` elements of 2, 4 or 8 bytes in vLLM's K or V layout or HND.
                let paged = rng.chance(35);
                let (page, nbpt, layout) = if paged {
                    let element = rng.pick(&[2usize, 4, 8]);
                    let heads = rng.range(1, 3) as usize;
                    let head_dim = (16 / element) * rng.range(1, 3) as usize;
                    let shape = PagedShape::new(heads, head_dim, element, rng.range(1, 4) as usize);
                    let layout = match rng.range(0, 2) {
                        0 => TokenLayout::vllm_k(shape),
                        1 => TokenLayout::vllm_v(shape),
                        _ => TokenLayout::hnd(shape),
                    };
                    (shape.block_size, shape.token_bytes(), layout.unwrap())
                } else {
                    let nbpt = 16 * rng.range(1, 8) as usize;
                    (rng.range(1, 4) as usize, nbpt, TokenLayout::Strip)
                };
                let read = 16 * rng.range(1, (nbpt / 16) as i64) as usize;
                let row_bytes = page * nbpt + 16 * rng.range(0, 2) as usize;
                let rows = num_slots.div_ceil(page);
                let data = (0..rows * row_bytes)
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                let params = RealKvParams::new(page as i64, nbpt as i64, read as i64);
                ((data, row_bytes, params), layout)
            })
            .unzip();
        KvSetup {
            bytes,
            layouts,
            mode,
        }
    }

    /// One or two paged caches (a second source in the next layout) of a random shape: blocks
    /// of 1-4 tokens of 1-4 heads of up to 128 bytes of `element`-byte elements; `kind` 0 is
    /// vLLM's K layout, 1 its V layout, 2 HND. ALL reads a random prefix of the token's bytes.
    pub fn paged(
        rng: &mut Rng,
        num_slots: usize,
        kind: usize,
        element: usize,
        mode: RealKvHashMode,
    ) -> Self {
        let n = rng.range(1, 2) as usize;
        let shape = PagedShape::new(
            rng.range(1, 4) as usize,
            (16 / element) * rng.range(1, 8) as usize,
            element,
            rng.range(1, 4) as usize,
        );
        let (bytes, layouts) = (0..n)
            .map(|i| {
                let layout = match (kind + i) % 3 {
                    0 => TokenLayout::vllm_k(shape),
                    1 => TokenLayout::vllm_v(shape),
                    _ => TokenLayout::hnd(shape),
                };
                let nbpt = shape.token_bytes();
                let read = if rng.chance(50) {
                    nbpt
                } else {
                    16 * rng.range(1, (nbpt / 16) as i64) as usize
                };
                let rows = num_slots.div_ceil(shape.block_size);
                let row_bytes = shape.block_bytes();
                let data = (0..rows * row_bytes)
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                let params = RealKvParams::new(shape.block_size as i64, nbpt as i64, read as i64);
                ((data, row_bytes, params), layout.unwrap())
            })
            .unzip();
        KvSetup {
            bytes,
            layouts,
            mode,
        }
    }

    /// The launch settings of `B` over these sources.
    fn launch<B: HostBackend>(
        &self,
        tag: LaunchTag,
        chain: ChainPositionAssert,
    ) -> B::Settings<'_> {
        let sources = self.host_sources();
        let rk = RealKv::new(self.mode, RealKvSources::try_from_slice(&sources).unwrap());
        B::settings(tag, B::host_real_kv(rk), chain)
    }
}

fn random_state(rng: &mut Rng, num_slots: usize, ring_rows: usize) -> State {
    let stride = rng.pick(&[32usize, 32, 40, 64]);
    let bytes = (0..num_slots * stride)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let buf = CanaryBuffer::from_bytes(cap("num_slots", num_slots), stride, bytes).unwrap();
    let filled = rng.range(0, ring_rows as i64) as usize;
    let rows = (0..ring_rows * 8)
        .map(|i| if i < filled * 8 { rng.range(-5, 5) } else { 0 })
        .collect();
    let ring = ViolationRing::from_parts(cap("ring", ring_rows), rows, filled as i32).unwrap();
    let counters = HealthCounters::from_parts(rng.range(0, 1000), rng.range(0, 1000));
    State {
        buf,
        ring,
        counters,
    }
}

/// GPU state equals CPU state: bytes, counters and write index exactly; the rows appended since
/// `initial_index` as a multiset (when the ring overflowed, the stored rows a sub-multiset of
/// every row the CPU recorded, `all_rows`).
pub fn same_state(
    label: &str,
    cpu: &State,
    gpu: &State,
    initial_index: i32,
    all_rows: &[[i64; 8]],
) -> Result<(), String> {
    ensure!(cpu.buf == gpu.buf, "{label}: canary buffers differ");
    ensure!(
        cpu.counters == gpu.counters,
        "{label}: counters differ: CPU {:?} GPU {:?}",
        cpu.counters,
        gpu.counters
    );
    ensure!(
        cpu.ring.write_index() == gpu.ring.write_index(),
        "{label}: write index CPU {} GPU {}",
        cpu.ring.write_index(),
        gpu.ring.write_index()
    );
    if initial_index < 0 {
        // A negative write index (malformed ring state): the device reads each reservation's
        // start as unsigned and drops every row reserved from below 0 (docs/cuda.md, "Malformed
        // data on the device"); the CPU drops only the rows at negative positions. The index,
        // buffers and counters above agree; which rows are stored differs by design.
        return Ok(());
    }
    let start = usize::try_from(initial_index)
        .unwrap_or(0)
        .min(cpu.ring.capacity().get());
    let rows = |s: &State| -> Vec<[i64; 8]> { s.ring.raw_rows().skip(start).collect() };
    let (mut c, mut g) = (rows(cpu), rows(gpu));
    ensure!(
        cpu.ring
            .raw_rows()
            .take(start)
            .eq(gpu.ring.raw_rows().take(start)),
        "{label}: rows before the launch changed"
    );
    ensure!(
        cpu.ring.rows_flat()[cpu.ring.stored_len() * 8..]
            == gpu.ring.rows_flat()[gpu.ring.stored_len() * 8..],
        "{label}: unused ring rows changed"
    );
    c.sort_unstable();
    g.sort_unstable();
    // Rows the launch recorded but the ring could not store: past its capacity, or at a
    // negative write index. Which of them the GPU stores is its (unspecified) order's.
    let recorded = i64::from(cpu.ring.write_index()) - i64::from(initial_index);
    if cpu.ring.dropped() == 0 && c.len() as i64 == recorded {
        ensure!(
            c == g,
            "{label}: new violation rows differ\n  CPU {c:?}\n  GPU {g:?}"
        );
    } else {
        let mut all: Vec<[i64; 8]> = all_rows.to_vec();
        for row in &g {
            let Some(i) = all.iter().position(|r| r == row) else {
                return Err(format!(
                    "{label}: GPU stored a row the CPU never recorded: {row:?}"
                ));
            };
            all.swap_remove(i);
        }
        ensure!(
            c.len() == g.len(),
            "{label}: {} rows stored on the CPU, {} on the GPU",
            c.len(),
            g.len()
        );
    }
    Ok(())
}

/// The rows `run` records into an unbounded copy of `state`'s ring.
pub fn all_rows(state: &State, run: impl FnOnce(&mut State) -> Result<(), Error>) -> Vec<[i64; 8]> {
    let mut big = state.clone();
    let old = state.ring.clone();
    let extra = 4096;
    let cap_rows = old.capacity().get() + extra;
    let mut rows = old.rows_flat().to_vec();
    rows.resize(cap_rows * 8, 0);
    // A negative write index drops rows until it reaches 0: record from max(index, 0) so that
    // every row the launch records is kept.
    let index = old.write_index().max(0);
    big.ring = ViolationRing::from_parts(cap("ring", cap_rows), rows, index).unwrap();
    let start = old.stored_len();
    let _ = run(&mut big);
    big.ring.raw_rows().skip(start).collect()
}

/// A random write case: requests with distinct slots (no two entries of a launch share a slot,
/// and no seed is written by the same launch, so the CPU's sequential order and the GPU's
/// concurrent one must agree), some skipped entries, perturbed positions and expected inputs.
pub struct WriteCase {
    pub plan: WritePlan<U>,
    pub ids: Vec<i64>,
    pub positions: Vec<i64>,
    pub slots: Vec<i64>,
    pub expected: Option<(Vec<i64>, Vec<i64>)>,
    pub kv: KvSetup,
    pub tag: LaunchTag,
    pub chain: ChainPositionAssert,
    pub state: State,
}

pub fn random_write_case(rng: &mut Rng, long: bool) -> WriteCase {
    let reqs = rng.range(0, 8) as usize;
    let lens: Vec<usize> = (0..reqs)
        .map(|_| match rng.below(10) {
            0 if long => rng.range(200, 900) as usize,
            0 | 1 => 0,
            _ => rng.range(1, 40) as usize,
        })
        .collect();
    let total: usize = lens.iter().sum();
    let num_slots = (2 * total + 2 * reqs + 16).max(32);
    let ring_rows = rng.range(1, 48) as usize;
    let mut state = random_state(rng, num_slots, ring_rows);
    // A permutation of the slots: entries first, then seeds.
    let mut perm: Vec<i64> = (0..num_slots as i64).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let (mut ids, mut positions, mut slots) = (vec![], vec![], vec![]);
    let mut offsets = vec![0i64];
    let mut seeds = vec![];
    let mut next = 0usize;
    for (r, &n) in lens.iter().enumerate() {
        let seed = if rng.chance(30) { -1 } else { perm[total + r] };
        seeds.push(seed);
        let mut pos = if seed >= 0 {
            state
                .buf
                .slot(seed as usize)
                .unwrap()
                .position
                .wrapping_add(1)
        } else {
            rng.range(0, 5)
        };
        if rng.chance(50) && seed >= 0 {
            // A seed whose position is small, so that positions look real.
            let mut rec = state.buf.slot(seed as usize).unwrap();
            rec.position = rng.range(0, 100);
            state.buf.set_slot(seed as usize, rec).unwrap();
            pos = rec.position + 1;
        }
        for _ in 0..n {
            ids.push(if rng.chance(3) {
                rng.pick(&[-1, i64::MAX, i64::MIN, 0])
            } else {
                rng.range(0, 150_000)
            });
            positions.push(if rng.chance(4) {
                pos + rng.range(-3, 3)
            } else {
                pos
            });
            slots.push(if rng.chance(8) { -1 } else { perm[next] });
            pos += 1;
            next += 1;
        }
        offsets.push(next as i64);
    }
    let req_cap = reqs + rng.range(0, 2) as usize;
    let entries = (total + rng.range(0, 4) as usize).max(1);
    ids.resize(entries, 0);
    positions.resize(entries, 0);
    slots.resize(entries, -1);
    let mut off = offsets.clone();
    off.resize(req_cap.max(1) + 1, *offsets.last().unwrap());
    seeds.resize(req_cap.max(1), -1);
    let num_valid = if rng.chance(5) {
        rng.pick(&[-1, req_cap as i32 + 3])
    } else {
        reqs as i32
    };
    let plan = WritePlan::from_parts(cap("w", req_cap), off, seeds, num_valid).unwrap();
    let expected = rng.chance(50).then(|| {
        let perturb = |v: &[i64], rng: &mut Rng| -> Vec<i64> {
            v.iter()
                .map(|&x| if rng.chance(6) { x ^ 1 } else { x })
                .collect()
        };
        (perturb(&ids, rng), perturb(&positions, rng))
    });
    WriteCase {
        plan,
        kv: KvSetup::random(rng, num_slots),
        tag: rng.pick(&LaunchTag::ALL),
        chain: if rng.chance(70) {
            ChainPositionAssert::ON
        } else {
            ChainPositionAssert::OFF
        },
        ids,
        positions,
        slots,
        expected,
        state,
    }
}

/// The write case on `backend` (one code path for the CPU and the GPU).
pub fn run_write<B: HostBackend>(c: &WriteCase, backend: &B, st: &mut State) -> Result<(), Error> {
    let e = cap("e", c.ids.len());
    let shape = UncheckedShape::from_capacities(cap("v", 1), c.plan.capacity(), e);
    let launch = c.kv.launch::<B>(c.tag, c.chain);
    let (ids, positions, slots) = (c.ids.clone(), c.positions.clone(), c.slots.clone());
    let (buf, ring, counters) = (&mut st.buf, &mut st.ring, &mut st.counters);
    match &c.expected {
        None => {
            let inputs = WriteInputs::from_parts(e, ids, positions, slots)?;
            backend.write(&shape, &c.plan, &inputs, &launch, buf, ring, counters)
        }
        Some((t, p)) => {
            let inputs = WriteInputs::from_parts_with_expected(
                e,
                ids,
                positions,
                slots,
                t.clone(),
                p.clone(),
            )?;
            backend.write(&shape, &c.plan, &inputs, &launch, buf, ring, counters)
        }
    }
    .map(drop)
}

/// One launch from `initial` on the CPU, on the GPU and on the GPU with the step API's early
/// marks (`early`, as the messages name them): all three succeed and the GPU states equal the
/// CPU's, which is returned.
fn equal_three_ways(
    label: &str,
    initial: &State,
    early: &str,
    cpu: impl Fn(&mut State) -> Result<(), Error>,
    gpu: impl Fn(&mut State) -> Result<(), Error>,
    gpu_early: impl Fn(&mut State) -> Result<(), Error>,
) -> Result<State, String> {
    let (mut cs, mut gs, mut es) = (initial.clone(), initial.clone(), initial.clone());
    let (c, g, e) = (cpu(&mut cs), gpu(&mut gs), gpu_early(&mut es));
    ensure!(
        c.is_ok() && g.is_ok() && e.is_ok(),
        "{label}: CPU {c:?}, GPU {g:?}, GPU with {early} {e:?}"
    );
    let all = all_rows(initial, cpu);
    let index = initial.ring.write_index();
    same_state(label, &cs, &gs, index, &all)?;
    same_state(&format!("{label} ({early})"), &cs, &es, index, &all)?;
    Ok(cs)
}

/// Random write cases (short and multi-tile requests), GPU against CPU.
pub fn write_differential(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(1200);
    let (mut rows, mut overflows, mut long) = (0i64, 0, 0);
    for seed in 0..cases {
        let mut rng = Rng::new(0x0003_217E_0000 + seed);
        let c = random_write_case(&mut rng, seed % 8 == 0);
        long += usize::from(c.plan.offsets().windows(2).any(|w| w[1] - w[0] > 256));
        let cs = equal_three_ways(
            &format!("write case seed {seed}"),
            &c.state,
            "early writes",
            |s| run_write(&c, &Cpu, s),
            |s| on_gpu(&c, s, run_write),
            |s| on_gpu_early(&c, s, run_write),
        )?;
        rows += i64::from(cs.ring.write_index() - c.state.ring.write_index());
        overflows += usize::from(cs.ring.dropped() > c.state.ring.dropped());
    }
    println!("    {cases} random write cases equal, each also with early writes ({rows} violation rows, {overflows} ring overflows, {long} multi-tile requests)");
    ensure!(
        cases < 1000 || (rows > 500 && overflows > 20 && long > 20),
        "weak generator"
    );
    Ok(())
}

/// A random verify case over a buffer stamped by real chains, then tampered with.
pub struct VerifyCase {
    pub plan: VerifyPlan<U>,
    pub check: bool,
    pub kv: KvSetup,
    pub tag: LaunchTag,
    pub state: State,
}

pub fn random_verify_case(rng: &mut Rng, big: bool) -> VerifyCase {
    let wc = random_write_case(rng, big);
    verify_case_over(rng, wc)
}

/// A verify case over the buffer `wc` writes on the CPU (its sources' fingerprints), then
/// tampered with.
fn verify_case_over(rng: &mut Rng, wc: WriteCase) -> VerifyCase {
    let mut state = wc.state.clone();
    let _ = run_write(&wc, &Cpu, &mut state);
    let num_slots = state.buf.num_slots();
    // Tamper with a few slots.
    for _ in 0..rng.range(0, 4) {
        let s = rng.below(num_slots as u64) as usize;
        let mut rec = state.buf.slot(s).unwrap();
        match rng.below(4) {
            0 => rec.token ^= 1,
            1 => rec.position += 1,
            2 => rec.prev_hash ^= 1 << 40,
            _ => rec.real_kv_hash ^= 2,
        }
        state.buf.set_slot(s, rec).unwrap();
    }
    // Entries: the written chains (true predecessors and positions), plus random ones.
    let mut entries = Vec::new();
    let offsets = wc.plan.offsets();
    for r in 0..wc.plan.active_requests() {
        let mut prev = wc.plan.seed_slot_indices()[r];
        for i in offsets[r] as usize..offsets[r + 1].max(offsets[r]) as usize {
            let slot = wc.slots[i];
            if slot < 0 {
                continue;
            }
            entries.push(VerifyEntry {
                slot,
                expected_token: if rng.chance(50) { wc.ids[i] } else { -1 },
                expected_position: wc.positions[i],
                prev_slot: if rng.chance(5) { 0 } else { prev },
            });
            prev = slot;
        }
    }
    for _ in 0..rng.range(0, 30) {
        entries.push(VerifyEntry {
            slot: rng.range(0, num_slots as i64 - 1),
            expected_token: rng.range(-1, 3),
            expected_position: rng.range(0, 50),
            prev_slot: rng.range(-2, num_slots as i64 - 1),
        });
    }
    for i in (1..entries.len()).rev() {
        entries.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let capacity = entries.len() + rng.range(1, 8) as usize;
    let mut plan = VerifyPlan::try_with_capacity(cap("v", capacity)).unwrap();
    plan.set_entries(&entries).unwrap();
    let p = plan.parts_mut();
    if rng.chance(5) {
        *p.enable = 0;
    }
    if rng.chance(5) {
        *p.num_valid = rng.pick(&[-3, capacity as i32 + 5, (entries.len() / 2) as i32]);
    }
    // The fingerprint verify recomputes: the writer's (clean), or another one (REAL_KV rows).
    let kv = if rng.chance(80) {
        wc.kv
    } else {
        KvSetup::random(rng, num_slots)
    };
    VerifyCase {
        plan,
        check: rng.chance(50),
        kv,
        tag: rng.pick(&LaunchTag::ALL),
        state,
    }
}

/// The verify case on `backend` (one code path for the CPU and the GPU).
pub fn run_verify<B: HostBackend>(
    c: &VerifyCase,
    backend: &B,
    st: &mut State,
) -> Result<(), Error> {
    let shape = UncheckedShape::from_capacities(c.plan.capacity(), cap("w", 1), cap("e", 1));
    let launch = c.kv.launch::<B>(c.tag, ChainPositionAssert::ON);
    let (buf, ring, counters) = (&st.buf, &mut st.ring, &mut st.counters);
    if c.check {
        backend
            .verify(&shape, &c.plan, TokenCheckOn, &launch, buf, ring, counters)
            .map(drop)
    } else {
        backend
            .verify(&shape, &c.plan, TokenCheckOff, &launch, buf, ring, counters)
            .map(drop)
    }
}

/// `run` on this thread's default GPU.
pub fn on_gpu<C>(
    c: &C,
    st: &mut State,
    run: fn(&C, &Offload, &mut State) -> Result<(), Error>,
) -> Result<(), Error> {
    Offload::with_default(|gpu| run(c, gpu, st))
}

/// [`on_gpu`] with its launches marked as the step API's tail stage's (a write's reading half,
/// a PARTIAL verify's first plan columns before the wait: `Offload::with_early_launches`).
pub fn on_gpu_early<C>(
    c: &C,
    st: &mut State,
    run: fn(&C, &Offload, &mut State) -> Result<(), Error>,
) -> Result<(), Error> {
    Offload::with_default_early_launches(|gpu| run(c, gpu, st))
}

/// Random verify cases, GPU against CPU.
pub fn verify_differential(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(1200);
    let (mut rows, mut overflows) = (0i64, 0);
    for seed in 0..cases {
        let mut rng = Rng::new(0x0007_E21F_0000 + seed);
        let c = random_verify_case(&mut rng, seed % 10 == 0);
        let cs = equal_three_ways(
            &format!("verify case seed {seed}"),
            &c.state,
            "early columns",
            |s| run_verify(&c, &Cpu, s),
            |s| on_gpu(&c, s, run_verify),
            |s| on_gpu_early(&c, s, run_verify),
        )?;
        rows += i64::from(cs.ring.write_index() - c.state.ring.write_index());
        overflows += usize::from(cs.ring.dropped() > c.state.ring.dropped());
    }
    println!(
        "    {cases} random verify cases equal, each also with early columns ({rows} violation rows, {overflows} ring overflows)"
    );
    ensure!(
        cases < 1000 || (rows > 1000 && overflows > 20),
        "weak generator"
    );
    Ok(())
}

/// Paged real-KV sources on the device (issue 32): a paged engine's K and V caches in vLLM's K
/// layout, vLLM's V layout and HND, elements of 2, 4 and 8 bytes, PARTIAL and ALL, one or two
/// sources, blocks of 1-4 tokens, tokens of up to 512 bytes. Each case writes (decode-sized
/// and multi-tile requests, plain and early launches) and then verifies the written buffer
/// over the same caches with some KV bytes flipped; the GPU's buffers, counters and rows equal
/// the CPU's (which folds the tokens' logical bytes, `tests/paged_real_kv.rs`). Every layout,
/// element size and mode occurs, and flipped bytes make REAL_KV rows.
pub fn paged_real_kv(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(360).max(36);
    let (mut kv_rows, mut met) = (0usize, std::collections::BTreeSet::new());
    for seed in 0..cases {
        let mut rng = Rng::new(0x9A6E_D000_0000 + seed);
        let mut wc = random_write_case(&mut rng, seed % 6 == 0);
        let num_slots = wc.state.buf.num_slots();
        let kind = (seed % 3) as usize;
        let element = [2, 4, 8][(seed / 3 % 3) as usize];
        let mode = if seed / 9 % 2 == 0 {
            RealKvHashMode::Partial
        } else {
            RealKvHashMode::All
        };
        wc.kv = KvSetup::paged(&mut rng, num_slots, kind, element, mode);
        met.insert((kind, element, mode == RealKvHashMode::All));
        equal_three_ways(
            &format!("paged write case seed {seed}"),
            &wc.state,
            "early writes",
            |s| run_write(&wc, &Cpu, s),
            |s| on_gpu(&wc, s, run_write),
            |s| on_gpu_early(&wc, s, run_write),
        )?;
        let kv = wc.kv.copy();
        let mut vc = verify_case_over(&mut rng, wc);
        vc.kv = kv;
        for _ in 0..rng.range(1, 6) {
            let source = rng.below(vc.kv.bytes.len() as u64) as usize;
            let (bytes, _, _) = &mut vc.kv.bytes[source];
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        let cs = equal_three_ways(
            &format!("paged verify case seed {seed}"),
            &vc.state,
            "early columns",
            |s| run_verify(&vc, &Cpu, s),
            |s| on_gpu(&vc, s, run_verify),
            |s| on_gpu_early(&vc, s, run_verify),
        )?;
        let bit = kv_canary::FailReason::VERIFY_REAL_KV_HASH_MISMATCH.bits();
        let old = vc.state.ring.stored_len();
        let rows = cs.ring.rows_flat().chunks(8).take(cs.ring.stored_len());
        kv_rows += rows.skip(old).filter(|r| r[7] & bit != 0).count();
    }
    println!(
        "    {cases} paged write + verify cases equal ({} layout x element x mode kinds, {kv_rows} REAL_KV rows)",
        met.len()
    );
    ensure!(met.len() == 18, "paged cases met {} of 18 kinds", met.len());
    ensure!(kv_rows > 0, "no flipped KV byte was found");
    Ok(())
}

/// One K+V pair verify of [`verify_pair_differential`]: its shape, plan, the two halves' launch
/// settings and canary buffers (K first).
struct PairVerify<'a> {
    shape: &'a UncheckedShape,
    plan: &'a VerifyPlan<U>,
    launch: (&'a LaunchSettings<'a>, &'a LaunchSettings<'a>),
    bufs: (&'a CanaryBuffer<U>, &'a CanaryBuffer<U>),
}

/// A ring and both halves' counters (K first) that a pair verify appends to.
type PairState<'s> = (
    &'s mut ViolationRing<U>,
    &'s mut (HealthCounters, HealthCounters),
);

impl PairVerify<'_> {
    /// The pair on the CPU (its two verifies) into `cpu`, and through the GPU's pair launch
    /// (`Offload::verify_pair_launch`) into `gpu`.
    fn on_both<K: TokenCheck>(
        &self,
        check: K,
        cpu: PairState<'_>,
        gpu: PairState<'_>,
    ) -> (Result<(), Error>, Result<(), Error>) {
        let (cr, cn) = cpu;
        let on_cpu = Cpu
            .verify_pair(
                self.shape,
                self.plan,
                check,
                self.launch,
                self.bufs,
                cr,
                (&mut cn.0, &mut cn.1),
            )
            .map(drop);
        let (gr, gn) = gpu;
        let on_gpu = Offload::with_default(|g| {
            g.verify_pair_launch(
                self.shape,
                self.plan,
                check,
                self.launch,
                self.bufs,
                gr,
                (&mut gn.0, &mut gn.1),
            )
        });
        (on_cpu, on_gpu)
    }
}

/// Entries a K+V pair verify of [`verify_pair_differential`] checks: more than the threads of a
/// full grid of the one-thread-an-entry kernels on an H200 (NONE: 132 SMs x 4 blocks of 512 =
/// 270,336 a half; PARTIAL: 2 blocks, 135,168), so that threads stride over several entries
/// (the verify tests of random cases fit one block), and the plan more than one block of the
/// grouped ALL kernel's.
const PAIR_ENTRIES: usize = 300_000;

/// Big K+V pair verifies (one pair launch: grid y = 2, the halves side by side), GPU against the
/// CPU's two verifies: a random case's entries repeated to [`PAIR_ENTRIES`] over a K buffer and
/// a V buffer tampered apart, each real-KV fold in turn (none, PARTIAL, ALL) on both halves, a
/// quarter of the cases with a count that stops mid-plan; the ring large enough for every row
/// (compared as a multiset), and each half's counters.
pub fn verify_pair_differential(_: &Gpu) -> Result<(), String> {
    let cases = crate::scaled(12).max(3);
    let (mut rows, mut folds) = (0i64, [0usize; 3]);
    for seed in 0..cases {
        let mut rng = Rng::new(0x0007_E21F_9A18 + seed);
        let c = random_verify_case(&mut rng, seed % 2 == 0);
        let base: Vec<VerifyEntry> = c.plan.entries().collect();
        ensure!(!base.is_empty(), "pair case seed {seed}: no entries");
        let entries: Vec<VerifyEntry> = base.iter().copied().cycle().take(PAIR_ENTRIES).collect();
        let mut plan = VerifyPlan::try_with_capacity(cap("v", PAIR_ENTRIES + 3)).unwrap();
        plan.set_entries(&entries).unwrap();
        if seed % 4 == 3 {
            // A partial count: the kernels stop at it, wherever it falls in a thread's rounds.
            *plan.parts_mut().num_valid = (PAIR_ENTRIES / 2 + 7) as i32;
        }
        let k_buf = c.state.buf.clone();
        let mut v_buf = k_buf.clone();
        for _ in 0..4 {
            let s = rng.below(v_buf.num_slots() as u64) as usize;
            let mut rec = v_buf.slot(s).unwrap();
            rec.token ^= 4;
            v_buf.set_slot(s, rec).unwrap();
        }
        let ring_rows = 2 * PAIR_ENTRIES + 16;
        let ring =
            ViolationRing::from_parts(cap("ring", ring_rows), vec![0; ring_rows * 8], 0).unwrap();
        let counters = (c.state.counters, HealthCounters::from_parts(7, 11));
        let shape = UncheckedShape::from_capacities(plan.capacity(), cap("w", 1), cap("e", 1));
        // Each fold in turn: the case's own sources when they have it (records clean but for
        // the tampering), else random sources with it (every fold then differs: REAL_KV rows).
        let fold_index = (seed % 3) as usize;
        let fold = [
            RealKvHashMode::None,
            RealKvHashMode::Partial,
            RealKvHashMode::All,
        ][fold_index];
        let kv = if c.kv.mode == fold {
            c.kv
        } else {
            let mut kv = KvSetup::sources(&mut rng, k_buf.num_slots());
            kv.mode = fold;
            kv
        };
        let (lk, lv) = (
            kv.launch::<Cpu>(LaunchTag::TailKFull, ChainPositionAssert::ON),
            kv.launch::<Cpu>(LaunchTag::TailVFull, ChainPositionAssert::ON),
        );
        let (mut cr, mut cn) = (ring.clone(), counters.clone());
        let (mut gr, mut gn) = (ring, counters);
        let pair = PairVerify {
            shape: &shape,
            plan: &plan,
            launch: (&lk, &lv),
            bufs: (&k_buf, &v_buf),
        };
        let (cpu, gpu) = if c.check {
            pair.on_both(TokenCheckOn, (&mut cr, &mut cn), (&mut gr, &mut gn))
        } else {
            pair.on_both(TokenCheckOff, (&mut cr, &mut cn), (&mut gr, &mut gn))
        };
        let label = format!("pair case seed {seed}");
        ensure!(
            cpu.is_ok() && gpu.is_ok(),
            "{label}: CPU {cpu:?}, GPU {gpu:?}"
        );
        ensure!(cn == gn, "{label}: counters differ: CPU {cn:?} GPU {gn:?}");
        ensure!(
            cr.write_index() == gr.write_index() && cr.dropped() == 0 && gr.dropped() == 0,
            "{label}: write index CPU {} GPU {} (dropped {} / {})",
            cr.write_index(),
            gr.write_index(),
            cr.dropped(),
            gr.dropped()
        );
        let sorted = |r: &ViolationRing<U>| {
            let mut v: Vec<[i64; 8]> = r.raw_rows().take(r.stored_len()).collect();
            v.sort_unstable();
            v
        };
        ensure!(sorted(&cr) == sorted(&gr), "{label}: violation rows differ");
        rows += i64::from(cr.write_index());
        folds[fold_index] += 1;
    }
    println!(
        "    {cases} K+V pair verifies of {PAIR_ENTRIES} entries equal ({rows} violation rows; \
         cases without / with PARTIAL / with ALL folds: {folds:?})"
    );
    ensure!(rows > 10_000, "weak generator: {rows} rows");
    Ok(())
}

/// Malformed device data: out-of-range slots, seeds, offsets and real-KV rows. The GPU records
/// an error of the CPU's kind and touches no memory out of bounds (the sanitizer run checks
/// that); it may still write the entries it could serve (documented difference).
pub fn malformed_write_verify(_: &Gpu) -> Result<(), String> {
    let mut kinds = std::collections::BTreeSet::new();
    for seed in 0..crate::scaled(300) {
        let mut rng = Rng::new(0xBAD2_0000 + seed);
        let mut c = random_write_case(&mut rng, false);
        let n = c.state.buf.num_slots() as i64;
        let total = *c.plan.offsets().last().unwrap();
        match rng.below(4) {
            0 if !c.slots.is_empty() => {
                let i = rng.below(c.slots.len() as u64) as usize;
                c.slots[i] = n + rng.range(0, 1 << 40);
            }
            1 => {
                let p = c.plan.parts_mut();
                p.seed_slot_indices[0] = n + 3;
            }
            2 => {
                let p = c.plan.parts_mut();
                let last = p.offsets.len() - 1;
                p.offsets[last] = total + 1000;
                *p.num_valid_reqs = last as i32;
            }
            _ => {
                // Real-KV sources shorter than the canary buffer: written slots past their rows.
                if c.kv.mode == RealKvHashMode::None {
                    c.kv.mode = RealKvHashMode::Partial;
                }
                if c.kv.bytes.is_empty() {
                    c.kv = KvSetup::sources(&mut Rng::new(seed), n as usize);
                    c.kv.mode = RealKvHashMode::All;
                }
                for (bytes, row, _) in &mut c.kv.bytes {
                    let rows = bytes.len() / *row;
                    bytes.truncate((rows / 3).max(1) * *row);
                }
            }
        }
        let (mut cs, mut gs) = (c.state.clone(), c.state.clone());
        let cpu = run_write(&c, &Cpu, &mut cs);
        let gpu = on_gpu(&c, &mut gs, run_write);
        let kind = |r: &Result<(), Error>| {
            r.as_ref().err().map(|e| {
                format!("{e:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap()
                    .to_owned()
            })
        };
        match (&cpu, &gpu) {
            (Ok(()), Ok(())) => {}
            (Err(_), Err(_)) => {
                ensure!(
                    kind(&cpu) == kind(&gpu),
                    "write seed {seed}: CPU {cpu:?}, GPU {gpu:?}"
                );
                ensure!(cs == c.state, "the CPU modified state on error");
                kinds.insert(kind(&cpu).unwrap());
            }
            _ => return Err(format!("write seed {seed}: CPU {cpu:?}, GPU {gpu:?}")),
        }
    }
    for seed in 0..crate::scaled(200) {
        let mut rng = Rng::new(0xBAD3_0000 + seed);
        let mut c = random_verify_case(&mut rng, false);
        let n = c.state.buf.num_slots() as i64;
        let active = c.plan.active_len();
        if active > 0 {
            let i = rng.below(active as u64) as usize;
            let p = c.plan.parts_mut();
            if rng.chance(50) {
                p.slot_indices[i] = rng.pick(&[-5, n, n + 77]);
            } else {
                p.slot_indices[i] = 1;
                p.prev_slot_indices[i] = n + 1;
            }
        }
        let (mut cs, mut gs) = (c.state.clone(), c.state.clone());
        let cpu = run_verify(&c, &Cpu, &mut cs);
        let gpu = on_gpu(&c, &mut gs, run_verify);
        let kind = |r: &Result<(), Error>| {
            r.as_ref().err().map(|e| {
                format!("{e:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap()
                    .to_owned()
            })
        };
        ensure!(
            kind(&cpu) == kind(&gpu),
            "verify seed {seed}: CPU {cpu:?}, GPU {gpu:?}"
        );
        if let Some(k) = kind(&cpu) {
            kinds.insert(k);
        }
    }
    println!("    error kinds reproduced on the GPU: {kinds:?}");
    ensure!(kinds.len() >= 3, "only {kinds:?}");
    Ok(())
}

/// Random scatter cases, GPU against CPU (distinct pool rows per request, so no two blocks
/// write one row).
pub fn scatter_differential(_: &Gpu) -> Result<(), String> {
    for seed in 0..crate::scaled(1000) {
        let mut rng = Rng::new(0x5CA7_0000 + seed);
        let rows = rng.range(1, 20) as usize;
        let width = rng.range(1, 1500) as usize;
        let bs = rng.range(0, rows as i64) as usize;
        let mut perm: Vec<i64> = (0..rows as i64).collect();
        for i in (1..rows).rev() {
            perm.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut offsets = vec![0i64];
        for _ in 0..bs {
            let len = if rng.chance(10) {
                rng.range(0, 2 * width as i64)
            } else {
                rng.range(0, 30)
            };
            offsets.push(offsets.last().unwrap() + len);
        }
        let flat: Vec<i64> = (0..*offsets.last().unwrap())
            .map(|_| rng.next_u64() as i64)
            .collect();
        let rpi: Vec<i64> = perm[..bs].to_vec();
        let pool = ExpectedTokenTable::from_vec(
            rows,
            width,
            (0..rows * width).map(|_| rng.range(-9, 9) as i32).collect(),
        )
        .map_err(fail("pool"))?;
        let (mut c, mut g) = (pool.clone(), pool);
        let cpu = Cpu
            .scatter_req_token_ids(&flat, &offsets, &rpi, &mut c)
            .map(drop);
        let gpu = Offload::with_default(|o| o.scatter_req_token_ids(&flat, &offsets, &rpi, &mut g));
        ensure!(cpu == gpu, "scatter seed {seed}: CPU {cpu:?} GPU {gpu:?}");
        ensure!(c == g, "scatter seed {seed}: pools differ");
    }
    println!("    {} random scatter cases equal", crate::scaled(1000));
    Ok(())
}

/// The worked example of spec §4 then §5, on the GPU through device buffers directly.
pub fn worked_example(gpu: &Gpu) -> Result<(), String> {
    use kv_canary::cuda::{self, DeviceSettings, Stream};
    use kv_canary::{Cap, Shape};
    let shape = Shape::<Cap<8>, Cap<4>, Cap<8>>::new();
    let mut buf = CanaryBuffer::<Cap<32>>::new();
    let h0 = kv_canary::hash::CHAIN_HEAD;
    let rec = |t: i64, p: i64, h: i64| CanarySlot {
        token: t,
        position: p,
        prev_hash: h,
        real_kv_hash: 0,
    };
    buf.set_slot(16, rec(7, 0, h0)).unwrap();
    buf.set_slot(17, rec(8, 1, 0xDBC1_2076_86F8_BBC5u64 as i64))
        .unwrap();
    buf.set_slot(18, rec(9, 2, 0x4EF0_9C77_85A2_1CAFu64 as i64))
        .unwrap();
    let mut plan = shape.write_plan();
    let p = plan.parts_mut();
    p.offsets[..4].copy_from_slice(&[0, 2, 2, 6]);
    p.seed_slot_indices[..3].copy_from_slice(&[18, -1, -1]);
    *p.num_valid_reqs = 3;
    let mut inputs = shape.write_inputs();
    let q = inputs.parts_mut();
    q.input_ids[..6].copy_from_slice(&[20, 21, 30, 31, 32, 33]);
    q.positions[..6].copy_from_slice(&[3, 4, 0, 1, 2, 3]);
    q.out_cache_loc[..6].copy_from_slice(&[19, 20, 8, 9, -1, 11]);
    let stream = Stream::new(gpu).map_err(fail("stream"))?;
    let dbuf = buf.to_device(gpu).map_err(fail("upload"))?;
    let ring = ViolationRing::<Cap<4>>::new()
        .to_device(gpu)
        .map_err(fail("ring"))?;
    let counters = HealthCounters::new()
        .to_device(gpu)
        .map_err(fail("counters"))?;
    let (dplan, dinputs) = (
        plan.to_device(gpu).map_err(fail("plan"))?,
        inputs.to_device(gpu).map_err(fail("inputs"))?,
    );
    let launch = DeviceSettings::new(LaunchTag::HeadKFull);
    cuda::write(
        &stream, &shape, &dplan, &dinputs, &launch, &dbuf, &ring, &counters,
    )
    .map_err(fail("write"))?;
    stream.status().map_err(fail("status"))?;
    let out = dbuf.to_host().map_err(fail("download"))?;
    let want = [
        (19, rec(20, 3, 0xDC37_D74B_D8DF_50E3u64 as i64)),
        (20, rec(21, 4, 0x6D4C_2E18_6F09_8B17u64 as i64)),
        (8, rec(30, 0, h0)),
        (9, rec(31, 1, 0x4C6A_3ABC_57D1_43F3u64 as i64)),
        (11, rec(33, 3, 0xC299_A846_AE16_7CF3u64 as i64)),
    ];
    for (s, r) in want {
        ensure!(
            out.slot(s) == Some(r),
            "slot {s}: {:?}, want {r:?}",
            out.slot(s)
        );
    }
    let c = counters.to_host().map_err(fail("counters"))?;
    ensure!(
        (c.slot_run_counter(), c.kernel_run_counter()) == (5, 1),
        "counters {c:?}"
    );
    // §5: verify the three prefix entries with the token check on: two TOKEN rows.
    let mut vplan = shape.verify_plan();
    vplan
        .set_entries(&[
            VerifyEntry {
                slot: 16,
                expected_token: 200,
                expected_position: 0,
                prev_slot: -1,
            },
            VerifyEntry {
                slot: 17,
                expected_token: 201,
                expected_position: 1,
                prev_slot: 16,
            },
            VerifyEntry {
                slot: 18,
                expected_token: -1,
                expected_position: 2,
                prev_slot: 17,
            },
        ])
        .map_err(fail("entries"))?;
    let dv = vplan.to_device(gpu).map_err(fail("plan"))?;
    cuda::verify(
        &stream,
        &shape,
        &dv,
        TokenCheckOn,
        &launch,
        &dbuf,
        &ring,
        &counters,
    )
    .map_err(fail("verify"))?;
    stream.status().map_err(fail("status"))?;
    let r = ring.to_host().map_err(fail("ring"))?;
    let mut rows: Vec<_> = r.raw_rows().collect();
    rows.sort_unstable();
    ensure!(
        rows == vec![
            [0, 16, 0, 7, 200, h0, h0, 32],
            [
                0,
                17,
                1,
                8,
                201,
                -2611770615455499323,
                -2611770615455499323,
                32
            ]
        ],
        "verify rows {rows:?}"
    );
    println!("    spec §4 and §5 worked examples reproduced on the GPU");
    Ok(())
}

/// `ViolationRing::clear_on` (one `kv_canary_ring_clear` launch) against the CPU ring's
/// `clear`: rings of 1 to 300,000 rows (one block to the grid-stride of 1024 blocks) full of
/// random fields, with write indices inside, at and past the capacity and negative (wrapped),
/// come back all zero with write index 0, as the CPU's; one launch is queued a clear. (The step
/// tests cover the rows recorded behind a clear: every report reads its rows from row 0.)
pub fn ring_clear_matches_cpu(gpu: &Gpu) -> Result<(), String> {
    let mut rng = Rng::new(0xC1EA_0000);
    let stream = kv_canary::cuda::Stream::new(gpu).map_err(fail("stream"))?;
    for (case, rows) in [1usize, 2, 15, 16, 17, 1024, 5000, 300_000]
        .into_iter()
        .enumerate()
    {
        let capacity = cap("ring rows", rows);
        let fields = (0..rows * 8).map(|_| rng.next_u64() as i64 | 1).collect();
        let index = match case % 4 {
            0 => rows as i32,
            1 => rng.range(0, rows as i64) as i32,
            2 => rows as i32 + 7,
            _ => i32::MIN + 3,
        };
        let mut host = ViolationRing::from_parts(capacity, fields, index).map_err(fail("ring"))?;
        let device = host.to_device(gpu).map_err(fail("device ring"))?;
        let before = kv_canary::cuda::launches_queued();
        device.clear_on(&stream).map_err(fail("clear_on"))?;
        let launches = kv_canary::cuda::launches_queued() - before;
        ensure!(
            launches == 1,
            "{rows} rows: clear_on queued {launches} launches, want 1"
        );
        stream.synchronize().map_err(fail("sync"))?;
        host.clear();
        let back = device.to_host().map_err(fail("ring back"))?;
        ensure!(
            back.write_index() == host.write_index() && back.rows_flat() == host.rows_flat(),
            "{rows} rows (write index {index}): the cleared device ring is not the CPU's \
             (write index {}, {} nonzero fields)",
            back.write_index(),
            back.rows_flat().iter().filter(|&&f| f != 0).count()
        );
    }
    Ok(())
}
