//! An engine that keeps every index array in its own types (`u32` here, as many Rust engines
//! do) and drives the canary through views of them: no copy of any array, no cast.
//!
//! Shared by `examples/engine_views.rs` (which prints what it did) and `tests/engine_views.rs`
//! (which checks that the views give exactly the reports of the owned inputs, and that a bug is
//! caught). [`Engine::step_views`] is the whole integration; [`Engine::step_owned`] is what the
//! same engine had to write before views existed (copy every array into the crate's `i64`/`i32`
//! types, one cast per element kind), kept to compare against.

use kv_canary::step::{Canary, StepReport, TailKv};
use kv_canary::{
    Batch, BatchRow, BatchView, Cap, Error, ExpectedTokenTable, ExpectedTokenTableView, PlanInputs,
    ReqToToken, ReqToTokenView, Shape, WriteInputs, WriteInputsView,
};

/// Rows of the request pool (row 0 is the padding row).
pub const ROWS: usize = 8;
/// Width of `req_to_token`: the longest request.
pub const WIDTH: usize = 64;
/// KV slots (slot 0 reserved).
pub const SLOTS: usize = 512;
/// Most requests per batch.
pub const MAX_BS: usize = 4;
/// Token budget of one step.
pub const ENTRIES: usize = 16;

/// Verify `3 x slots` entries, `MAX_BS` requests, `ENTRIES` tokens per step.
pub type Spec = Shape<Cap<{ 3 * SLOTS }>, Cap<MAX_BS>, Cap<ENTRIES>>;
/// The engine's canary: `SLOTS` slots, a 32-row ring.
pub type EngineCanary = Canary<Cap<{ 3 * SLOTS }>, Cap<MAX_BS>, Cap<ENTRIES>, Cap<SLOTS>, Cap<32>>;

/// One running request.
#[derive(Clone, Debug)]
struct Request {
    row: u32,
    prompt_len: u32,
    tokens: Vec<u32>,
    /// Positions whose KV is written.
    written: u32,
}

/// The engine's state: every array in its own element type.
#[derive(Debug)]
pub struct Engine {
    /// `req_to_token [ROWS, WIDTH]`, row-major, `u32` slots.
    pub req_to_token: Vec<u32>,
    /// The expected-token pool `[ROWS, WIDTH]`, `u32` token ids.
    pub expected: Vec<u32>,
    /// This step's batch columns.
    pub req_rows: Vec<u32>,
    /// Tokens of each batch row already in the cache.
    pub prefix_lens: Vec<u32>,
    /// Tokens each batch row writes this step.
    pub extend_lens: Vec<u32>,
    /// Tokens of each batch row the expected-token pool holds.
    pub valid_lens: Vec<u32>,
    /// This step's per-token arrays, `ENTRIES` each.
    pub input_ids: Vec<u32>,
    /// Positions of this step's tokens.
    pub positions: Vec<u32>,
    /// Slots of this step's tokens.
    pub out_cache_loc: Vec<u32>,
    running: Vec<Request>,
    free_slots: Vec<u32>,
    free_rows: Vec<u32>,
    next_token: u32,
    /// The step at which `req_to_token` gets one wrong cell, if any.
    bug_at: Option<u64>,
}

impl Engine {
    /// An idle engine; with `bug_at`, one `req_to_token` cell of a running request is
    /// overwritten at that step (a bookkeeping bug the head verify reports).
    pub fn new(bug_at: Option<u64>) -> Self {
        Engine {
            req_to_token: vec![0; ROWS * WIDTH],
            expected: vec![0; ROWS * WIDTH],
            req_rows: Vec::with_capacity(MAX_BS),
            prefix_lens: Vec::with_capacity(MAX_BS),
            extend_lens: Vec::with_capacity(MAX_BS),
            valid_lens: Vec::with_capacity(MAX_BS),
            input_ids: vec![0; ENTRIES],
            positions: vec![0; ENTRIES],
            out_cache_loc: vec![0; ENTRIES],
            running: Vec::new(),
            free_slots: (1..SLOTS as u32).rev().collect(),
            free_rows: (1..ROWS as u32).rev().collect(),
            next_token: 1,
            bug_at,
        }
    }

    /// Admits requests, gives every running one its next tokens (a prefill chunk of up to 4, or
    /// one decode token), their slots and `req_to_token` cells, and fills the batch, the
    /// expected-token pool and the per-token arrays.
    pub fn schedule(&mut self, step: u64) {
        if self.running.len() < MAX_BS && self.free_slots.len() > WIDTH {
            if let Some(row) = self.free_rows.pop() {
                let prompt_len = 3 + (step % 7) as u32;
                let tokens = (0..prompt_len).map(|i| self.next_token + i).collect();
                self.next_token += prompt_len;
                self.running.push(Request {
                    row,
                    prompt_len,
                    tokens,
                    written: 0,
                });
            }
        }
        self.req_rows.clear();
        self.prefix_lens.clear();
        self.extend_lens.clear();
        self.valid_lens.clear();
        let mut at = 0;
        for r in &mut self.running {
            let prefix = r.written;
            let extend = if prefix < r.prompt_len {
                (r.prompt_len - prefix).min(4)
            } else {
                1
            };
            let base = r.row as usize * WIDTH;
            for p in prefix..prefix + extend {
                let slot = self.free_slots.pop().expect("admission keeps slots free");
                self.req_to_token[base + p as usize] = slot;
                self.input_ids[at] = r.tokens[p as usize];
                self.positions[at] = p;
                self.out_cache_loc[at] = slot;
                at += 1;
            }
            let visible = prefix + extend;
            self.expected[base..base + visible as usize]
                .copy_from_slice(&r.tokens[..visible as usize]);
            self.req_rows.push(r.row);
            self.prefix_lens.push(prefix);
            self.extend_lens.push(extend);
            self.valid_lens.push(visible);
        }
        if self.bug_at == Some(step) {
            if let Some(r) = self.running.iter().find(|r| r.written > 1) {
                // A stray store: position 0 of this request now names a slot it never wrote.
                self.req_to_token[r.row as usize * WIDTH] = self.free_slots[0];
            }
        }
    }

    /// The step through views of the engine's own arrays: no copy, no cast.
    pub fn step_views(&self, canary: &mut EngineCanary) -> Result<StepReport, Error> {
        let batch = BatchView::new(&self.req_rows, &self.prefix_lens, &self.extend_lens)?;
        let table = ReqToTokenView::new(ROWS, WIDTH, &self.req_to_token)?;
        let pool = ExpectedTokenTableView::new(ROWS, WIDTH, &self.expected)?;
        let plan = PlanInputs::from_views(batch, table)
            .with_expected(pool.with_valid_lens(&self.valid_lens));
        let writes = WriteInputsView::new(
            canary.shape().write_entry_capacity(),
            &self.input_ids,
            &self.positions,
            &self.out_cache_loc,
        )?;
        let step = canary.plan(&plan)?.verify_head()?.write(&writes)?;
        // ... the forward pass runs here ...
        step.verify_tail(TailKv::NONE)
    }

    /// The same step as the engine had to write it before views: every array copied into the
    /// crate's owned types, each element kind cast (`as i64`, `as i32`).
    pub fn step_owned(&self, canary: &mut EngineCanary) -> Result<StepReport, Error> {
        let batch: Batch = (0..self.req_rows.len())
            .map(|r| BatchRow {
                req_pool_index: self.req_rows[r] as i64,
                prefix_len: self.prefix_lens[r] as i64,
                extend_len: self.extend_lens[r] as i64,
            })
            .collect();
        let table = ReqToToken::from_vec(
            ROWS,
            WIDTH,
            self.req_to_token.iter().map(|&s| s as i32).collect(),
        )?;
        let pool = ExpectedTokenTable::from_vec(
            ROWS,
            WIDTH,
            self.expected.iter().map(|&t| t as i32).collect(),
        )?;
        let valid_lens: Vec<i64> = self.valid_lens.iter().map(|&l| l as i64).collect();
        let plan =
            PlanInputs::full(&batch, &table).with_expected(pool.with_valid_lens(&valid_lens));
        let mut writes = canary.write_inputs();
        let p = writes.parts_mut();
        for i in 0..ENTRIES {
            p.input_ids[i] = self.input_ids[i] as i64;
            p.positions[i] = self.positions[i] as i64;
            p.out_cache_loc[i] = self.out_cache_loc[i] as i64;
        }
        let _: &WriteInputs<Cap<ENTRIES>> = &writes;
        let step = canary.plan(&plan)?.verify_head()?.write(&writes)?;
        step.verify_tail(TailKv::NONE)
    }

    /// Ends the step: the written tokens are in the cache; a finished request frees its row
    /// and slots; a decoding request samples its next token.
    pub fn finish(&mut self) {
        let n = self.extend_lens.clone();
        for (r, extend) in self.running.iter_mut().zip(n) {
            r.written += extend;
            if r.written >= r.prompt_len {
                r.tokens.push(self.next_token);
                self.next_token += 1;
            }
        }
        let (done, running): (Vec<Request>, Vec<Request>) = self
            .running
            .drain(..)
            .partition(|r| r.written as usize >= (r.prompt_len as usize + 6).min(WIDTH - 1));
        self.running = running;
        for r in done {
            let base = r.row as usize * WIDTH;
            self.free_slots.extend(
                self.req_to_token[base..base + r.written as usize]
                    .iter()
                    .rev(),
            );
            self.free_rows.push(r.row);
        }
    }
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Steps run.
    pub steps: u64,
    /// Slots verified by all launches.
    pub entries_checked: u64,
    /// Slots stamped by all launches.
    pub entries_written: u64,
    /// The first step whose report was not clean.
    pub detected_at: Option<u64>,
}

/// Runs `steps` steps through views (`views`) or the owned copies, until a report is not clean.
pub fn run(
    steps: u64,
    bug_at: Option<u64>,
    views: bool,
) -> Result<(Outcome, Vec<StepReport>), Error> {
    let mut engine = Engine::new(bug_at);
    let mut canary = Canary::full(Spec::new(), Cap::<SLOTS>, Cap::<32>);
    let mut out = Outcome::default();
    let mut reports = Vec::new();
    for step in 0..steps {
        engine.schedule(step);
        let report = if views {
            engine.step_views(&mut canary)?
        } else {
            engine.step_owned(&mut canary)?
        };
        out.steps = step + 1;
        out.entries_checked += report.entries_checked();
        out.entries_written += report.entries_written();
        let clean = report.is_clean();
        reports.push(report);
        if !clean {
            out.detected_at = Some(step);
            break;
        }
        engine.finish();
    }
    Ok((out, reports))
}
