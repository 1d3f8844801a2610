//! A mistral.rs-shaped engine on the CPU canary (issue 32 item 2): blocks of 16 slots with a
//! reserved null block 0, a `u32` block table per batch row, `u32` context and query lengths,
//! a bucketed batch with padding rows anywhere, `u32` input ids, `i64` positions and an `i64`
//! slot mapping with -1 padding, every array longer than the step. The canary reads them as the
//! engine holds them (no copy, no expansion): a clean run reports nothing, and a slot mapping
//! off by one for one token is caught.

use kv_canary::step::{Canary, TailKv};
use kv_canary::{BatchView, Cap, PlanInputs, ReqToTokenView, Shape, WriteInputsView};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

const BLOCK: usize = 16;
const BLOCKS: usize = 96;
const MAX_BLOCKS: usize = 6;
const BUCKET: usize = 8;
const TOKENS: usize = 64;
/// The engine's arrays are longer than the canary's capacities (graph buckets).
const ROOM: usize = TOKENS + 16;

struct Request {
    id: u32,
    blocks: Vec<u32>,
    cached: usize,
    prompt: usize,
    total: usize,
}

struct Engine {
    rng: ChaCha8Rng,
    free: Vec<u32>,
    running: Vec<Request>,
    next_id: u32,
}

/// One step's arrays, as the engine keeps them.
#[derive(Default)]
struct StepArrays {
    bs: usize,
    block_tables: Vec<u32>,
    context_lens: Vec<u32>,
    query_lens: Vec<u32>,
    input_ids: Vec<u32>,
    positions: Vec<i64>,
    slot_mapping: Vec<i64>,
    /// (batch row, request id) of the real rows.
    rows: Vec<(usize, u32)>,
}

fn token(id: u32, pos: usize) -> u32 {
    id * 1000 + pos as u32
}

impl Engine {
    fn new(seed: u64) -> Self {
        Engine {
            rng: ChaCha8Rng::seed_from_u64(seed),
            // Block 0 is the null block (mistral.rs), so slot 0 is never a token's.
            free: (1..BLOCKS as u32).rev().collect(),
            running: Vec::new(),
            next_id: 1,
        }
    }

    /// Admits requests, then lays out the next step: a chunk of prefill or one decode token per
    /// running request, padding rows at random places up to the bucket.
    fn schedule(&mut self) -> StepArrays {
        while self.running.len() < 5 && self.free.len() >= MAX_BLOCKS {
            let prompt = self.rng.random_range(1..40);
            let total = self.rng.random_range(prompt + 1..=MAX_BLOCKS * BLOCK);
            self.running.push(Request {
                id: self.next_id,
                blocks: Vec::new(),
                cached: 0,
                prompt,
                total,
            });
            self.next_id += 1;
        }
        let mut s = StepArrays {
            block_tables: vec![0; BUCKET * MAX_BLOCKS],
            context_lens: vec![0; BUCKET + 3],
            query_lens: vec![1; BUCKET + 3],
            input_ids: vec![0; ROOM],
            positions: vec![0; ROOM],
            slot_mapping: vec![-1; ROOM],
            ..StepArrays::default()
        };
        let mut real = [None; BUCKET];
        let mut places: Vec<usize> = (0..BUCKET).collect();
        for (i, _) in self.running.iter().enumerate() {
            let at = self.rng.random_range(0..places.len());
            real[places.remove(at)] = Some(i);
        }
        let last_real = real.iter().rposition(Option::is_some).unwrap_or(0);
        s.bs = last_real + 1 + self.rng.random_range(0..=BUCKET - 1 - last_real);
        let mut t = 0;
        for (row, slot) in real.iter().enumerate().take(s.bs) {
            let Some(i) = *slot else {
                // A padding row: context 0, one padding token (slot -1).
                t += 1;
                continue;
            };
            let r = &mut self.running[i];
            let query = if r.cached < r.prompt {
                (r.prompt - r.cached).min(8)
            } else {
                1
            };
            while r.blocks.len() * BLOCK < r.cached + query {
                r.blocks
                    .push(self.free.pop().expect("blocks for admitted requests"));
            }
            for pos in r.cached..r.cached + query {
                s.input_ids[t] = token(r.id, pos);
                s.positions[t] = pos as i64;
                s.slot_mapping[t] =
                    i64::from(r.blocks[pos / BLOCK]) * BLOCK as i64 + (pos % BLOCK) as i64;
                t += 1;
            }
            let cells = &mut s.block_tables[row * MAX_BLOCKS..][..r.blocks.len()];
            cells.copy_from_slice(&r.blocks);
            s.context_lens[row] = (r.cached + query) as u32;
            s.query_lens[row] = query as u32;
            s.rows.push((row, r.id));
            r.cached += query;
        }
        assert!(t <= TOKENS);
        s
    }

    /// Finished requests give their blocks back.
    fn retire(&mut self) {
        let (done, running): (Vec<_>, Vec<_>) =
            self.running.drain(..).partition(|r| r.cached >= r.total);
        self.running = running;
        for r in done {
            self.free.extend(r.blocks);
        }
    }
}

type Spec = Shape<Cap<4096>, Cap<BUCKET>, Cap<TOKENS>>;

/// Runs `steps` steps; `bug` (step, token index) shifts one token's slot by one. Returns the
/// steps whose report had violations.
fn run(seed: u64, steps: usize, bug: Option<(usize, usize)>) -> Vec<(usize, u64)> {
    let (mut entries, mut padding) = (0u64, 0usize);
    let mut engine = Engine::new(seed);
    let mut canary = Canary::full(Spec::new(), Cap::<{ BLOCKS * BLOCK }>, Cap::<64>);
    let mut flagged = Vec::new();
    for step in 0..steps {
        let mut s = engine.schedule();
        if let Some((bug_step, token)) = bug {
            if step == bug_step {
                let t = s
                    .slot_mapping
                    .iter()
                    .enumerate()
                    .filter(|(_, &x)| x >= 0)
                    .map(|(i, _)| i)
                    .nth(token)
                    .expect("a real token to misdirect");
                s.slot_mapping[t] += 1;
            }
        }
        let table = ReqToTokenView::block_table(BUCKET, MAX_BLOCKS, BLOCK, &s.block_tables)
            .expect("the engine's block table");
        let batch = BatchView::from_query_lens(s.bs, &s.context_lens, &s.query_lens)
            .expect("bucketed columns");
        let inputs = PlanInputs::from_views(batch, table);
        let write =
            WriteInputsView::new(Cap::<TOKENS>, &s.input_ids, &s.positions, &s.slot_mapping)
                .expect("bucketed write arrays");
        let report = canary
            .plan(&inputs)
            .and_then(|st| st.verify_head())
            .and_then(|st| st.write(&write))
            .and_then(|st| st.verify_tail(TailKv::NONE))
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert!(report.plan.enabled, "step {step}: over the verify capacity");
        entries += report.plan.requested_entries;
        padding += s.bs - s.rows.len();
        if !report.is_clean() {
            flagged.push((step, report.violations.len() as u64));
        }
        engine.retire();
    }
    // The run checked cached tokens and carried padding rows.
    assert!(
        entries > steps as u64 * 20 && padding > steps / 2,
        "{entries} {padding}"
    );
    flagged
}

#[test]
fn a_clean_paged_engine_reports_nothing() {
    for seed in 0..3 {
        assert_eq!(run(seed, 300, None), vec![], "seed {seed}");
    }
}

#[test]
fn a_slot_mapping_off_by_one_is_caught() {
    let mut caught = 0;
    for seed in 0..8 {
        let bug_step = 20 + seed as usize;
        let flagged = run(seed, bug_step + 3, Some((bug_step, seed as usize % 3)));
        let first = flagged.first().copied();
        eprintln!("seed {seed}: bug at step {bug_step}, reports with violations {flagged:?}");
        let (step, _) = first.expect("the misdirected write is reported");
        assert!(
            (bug_step..=bug_step + 1).contains(&step),
            "seed {seed}: first report at step {step}, the bug at {bug_step}"
        );
        caught += 1;
    }
    assert_eq!(caught, 8);
}
