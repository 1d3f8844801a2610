//! The simulated serving engine: admission with prefix sharing, chunked prefill and decode
//! scheduling, the `req_to_token` and expected-token tables, the forward pass and retirement.
//! Each bug is a detour from one of these paths ([`bugs`]).

mod bugs;

pub use bugs::BugState;

use super::kv_pool::{swa_permutation, KvBytes, SlotPool};
use super::requests::{Arrivals, Prompt, Request, Rows, VOCAB};
use super::{Bug, CHUNK, MAX_BS, MAX_SEQ_LEN, POOL_SLOTS, REQ_ROWS};
use kv_canary::cpu::scatter_req_token_ids;
use kv_canary::{Batch, BatchRow, Capacity, ExpectedTokenTable, ReqToToken, WriteInputs};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

const TABLE: &str = "the constant sizes form a valid table";

/// One scheduled request of this step: it writes positions `[prefix, prefix + extend)`.
#[derive(Clone, Copy, Debug)]
struct Scheduled {
    req: usize,
    prefix: usize,
    extend: usize,
}

/// Counters of the engine's work.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Requests admitted.
    pub admitted: u64,
    /// Requests that finished.
    pub served: u64,
    /// Tokens whose KV the forward passes wrote.
    pub tokens_written: u64,
    /// Prompt tokens whose KV was reused from another request instead of computed.
    pub shared_tokens: u64,
}

/// The engine's state.
#[derive(Debug)]
pub struct Engine {
    /// `req_to_token [REQ_ROWS, MAX_SEQ_LEN]`: the KV slot of every (row, position).
    pub req_to_token: ReqToToken,
    /// The expected-token pool: every scheduled request's tokens, scattered each step.
    pub expected: ExpectedTokenTable,
    /// This step's batch.
    pub batch: Batch,
    /// How many tokens of each batch row the expected-token pool holds.
    pub valid_lens: Vec<i64>,
    /// `full_to_swa_index_mapping`: full-pool slot -> SWA sub-pool slot (a fixed permutation).
    pub lut: Vec<i64>,
    /// K and V bytes of the full pool.
    pub kv: KvBytes,
    /// K and V bytes of the SWA sub-pool.
    pub swa_kv: KvBytes,
    /// The bug and its progress.
    pub bug: BugState,
    /// Work done.
    pub stats: Stats,
    /// Sanity failures of the simulation itself (a slot handed out twice without any bug).
    pub anomalies: Vec<String>,
    slots: SlotPool,
    rows: Rows,
    running: Vec<Request>,
    waiting: VecDeque<Prompt>,
    arrivals: Arrivals,
    rng: ChaCha8Rng,
    scheduled: Vec<Scheduled>,
}

impl Engine {
    /// An idle engine; `bug` strikes at its first chance from step `armed_at` on.
    pub fn new(seed: u64, bug: Option<Bug>, armed_at: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let arrivals = Arrivals::new(&mut rng);
        Engine {
            req_to_token: ReqToToken::zeros(REQ_ROWS, MAX_SEQ_LEN).expect(TABLE),
            expected: ExpectedTokenTable::zeros(REQ_ROWS, MAX_SEQ_LEN).expect(TABLE),
            batch: Batch::try_with_capacity(MAX_BS).expect(TABLE),
            valid_lens: Vec::with_capacity(MAX_BS),
            lut: swa_permutation(POOL_SLOTS),
            kv: KvBytes::new(POOL_SLOTS),
            swa_kv: KvBytes::new(POOL_SLOTS),
            bug: BugState {
                bug,
                armed_at,
                ..BugState::default()
            },
            stats: Stats::default(),
            anomalies: Vec::new(),
            slots: SlotPool::new(POOL_SLOTS),
            rows: Rows::new(REQ_ROWS),
            running: Vec::with_capacity(MAX_BS),
            waiting: VecDeque::new(),
            arrivals,
            rng,
            scheduled: Vec::with_capacity(MAX_BS),
        }
    }

    /// Requests running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The request of every row of this step's batch (`None` for a padding row): what the
    /// guard's verdicts name.
    pub fn batch_requests(&self) -> Vec<Option<u64>> {
        let mut ids: Vec<Option<u64>> = self
            .scheduled
            .iter()
            .map(|s| Some(self.running[s.req].id))
            .collect();
        ids.resize(self.batch.len(), None);
        ids
    }

    /// The scheduler: new arrivals, at most one admission, then every running request gets its
    /// next prefill chunk or decode token, a KV slot per token and its `req_to_token` cells.
    /// Builds the batch (padded to a multiple of 4, like CUDA-graph buckets) and scatters every
    /// row's tokens into the expected-token pool.
    pub fn schedule(&mut self, step: u64) {
        if self.rng.random_bool(0.4) && self.waiting.len() < 32 {
            let prompt = self.arrivals.next(&mut self.rng);
            self.waiting.push_back(prompt);
        }
        self.admit(step);
        self.batch.clear();
        self.scheduled.clear();
        for req in 0..self.running.len() {
            let r = &self.running[req];
            let prefix = r.slots.len();
            let extend = if r.in_prefill() {
                CHUNK.min(r.prompt_len - prefix)
            } else {
                1
            };
            for p in prefix..prefix + extend {
                let (slot, still_held) = self.slots.alloc().expect("the pool never runs dry");
                if still_held {
                    let what = format!(
                        "slot {slot} handed to request #{} (position {p}) while {} still holds it",
                        self.running[req].id,
                        self.describe_slot(slot)
                    );
                    self.corrupted(step, what);
                }
                self.running[req].slots.push(slot);
            }
            self.write_req_to_token(step, req, prefix, extend);
            self.scheduled.push(Scheduled {
                req,
                prefix,
                extend,
            });
            self.batch.push(BatchRow {
                req_pool_index: self.running[req].row as i64,
                prefix_len: prefix as i64,
                extend_len: extend as i64,
            });
        }
        let padded = self.batch.len().next_multiple_of(4).min(MAX_BS);
        while self.batch.len() < padded {
            self.batch.push(BatchRow::PADDING);
        }
        self.scatter_expected_tokens();
    }

    /// Admits the oldest waiting prompt if a row is free, no other request is mid-prefill (so
    /// every running request fits in each step's token budget) and the pool can hold it. Reuses
    /// the KV of the longest prompt prefix it shares with a running request.
    fn admit(&mut self, step: u64) {
        let busy = self.running.iter().any(Request::in_prefill);
        let Some(prompt) = self.waiting.front() else {
            return;
        };
        let need = prompt.tokens.len() + prompt.output_len + 2 * MAX_BS;
        if busy || self.running.len() >= MAX_BS || self.slots.free_count() < need {
            return;
        }
        let Some(row) = self.rows.alloc() else {
            return;
        };
        if let Some(owner) = self.running.iter().find(|r| r.row == row) {
            let what = format!(
                "row {row} handed to a new request while request #{} still runs in it",
                owner.id
            );
            self.corrupted(step, what);
        }
        let prompt = self.waiting.pop_front().expect("checked above");
        let (donor, shared) = self.longest_shared_prefix(&prompt.tokens);
        let slots: Vec<i64> =
            donor.map_or(Vec::new(), |d| self.running[d].slots[..shared].to_vec());
        for (p, &slot) in slots.iter().enumerate() {
            self.slots.share(slot);
            self.req_to_token
                .set(row, p, slot as i32)
                .expect("inside the table");
        }
        self.stats.admitted += 1;
        self.stats.shared_tokens += shared as u64;
        self.running.push(Request {
            id: prompt.id,
            row,
            prompt_len: prompt.tokens.len(),
            tokens: prompt.tokens,
            output_len: prompt.output_len,
            slots,
            stale: false,
        });
    }

    /// The running request sharing the longest written prefix with `prompt` (leaving at least
    /// one prompt token to compute), and that length.
    fn longest_shared_prefix(&self, prompt: &[i64]) -> (Option<usize>, usize) {
        let mut best = (None, 0);
        for (i, r) in self.running.iter().enumerate().filter(|(_, r)| !r.stale) {
            let written = &r.tokens[..r.slots.len()];
            let common = written
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            let common = common.min(prompt.len() - 1);
            if common > best.1 {
                best = (Some(i), common);
            }
        }
        best
    }

    /// Writes `req_to_token[row][p] = slot` for the new positions. The off-by-one bug writes
    /// each cell one column to the right, once, at its first chance to do harm.
    fn write_req_to_token(&mut self, step: u64, req: usize, prefix: usize, extend: usize) {
        let r = &self.running[req];
        let end = prefix + extend;
        let continues = r.in_prefill() || r.generated() + 1 < r.output_len;
        let shift = self.armed(Bug::OffByOne, step) && continues && end < MAX_SEQ_LEN;
        let row = self
            .req_to_token
            .row_mut(r.row)
            .expect("rows are inside the table");
        for p in prefix..end {
            row[p + usize::from(shift)] = r.slots[p] as i32;
        }
        if !shift {
            return;
        }
        let wrong = (prefix..end).find(|&p| row[p] != r.slots[p] as i32);
        if let Some(p) = wrong {
            let what = format!(
                "request #{} (row {}): req_to_token[{}][{prefix}..{end}] written one column to \
                 the right; position {p} now maps to slot {} instead of {}",
                r.id, r.row, r.row, row[p], r.slots[p]
            );
            self.bug.fired = Some((step, what.clone()));
            self.corrupted(step, what);
        }
    }

    /// Every batch row's visible tokens into its row of the expected-token pool
    /// (`scatter_req_token_ids`), and their counts as `valid_lens`.
    fn scatter_expected_tokens(&mut self) {
        let mut flat = Vec::new();
        let mut offsets = vec![0i64];
        self.valid_lens.clear();
        for s in &self.scheduled {
            let tokens = &self.running[s.req].tokens[..s.prefix + s.extend];
            flat.extend_from_slice(tokens);
            offsets.push(flat.len() as i64);
            self.valid_lens.push(tokens.len() as i64);
        }
        for _ in self.scheduled.len()..self.batch.len() {
            offsets.push(flat.len() as i64);
            self.valid_lens.push(0);
        }
        scatter_req_token_ids(
            &flat,
            &offsets,
            self.batch.req_pool_indices(),
            &mut self.expected,
        )
        .expect("offsets and rows come from the batch");
    }

    /// The per-token write inputs of this step (for the SWA group, `out_cache_loc` translated
    /// through the lookup table, as SGLang's callers do).
    pub fn fill_write_inputs<E: Capacity>(&self, inputs: &mut WriteInputs<E>, swa: bool) {
        let p = inputs.parts_mut();
        let mut i = 0;
        for s in &self.scheduled {
            let r = &self.running[s.req];
            for pos in s.prefix..s.prefix + s.extend {
                let slot = r.slots[pos];
                p.input_ids[i] = r.tokens[pos];
                p.positions[i] = pos as i64;
                p.out_cache_loc[i] = if swa { self.lut[slot as usize] } else { slot };
                i += 1;
            }
        }
    }

    /// The forward pass: writes the K and V bytes of every scheduled token (full pool and SWA
    /// sub-pool), then samples one token for every request past its prompt. The kv-scribble bug
    /// lets one store land on a slot another request still reads.
    pub fn forward(&mut self, step: u64) {
        for s in &self.scheduled {
            let r = &self.running[s.req];
            for pos in s.prefix..s.prefix + s.extend {
                let (slot, token) = (r.slots[pos], r.tokens[pos]);
                let prev = if pos == 0 { -1 } else { r.tokens[pos - 1] };
                self.kv.write(slot, token, pos as i64, prev);
                self.swa_kv
                    .write(self.lut[slot as usize], token, pos as i64, prev);
            }
            self.stats.tokens_written += s.extend as u64;
        }
        if self.armed(Bug::KvScribble, step) {
            self.scribble(step);
        }
        for i in 0..self.scheduled.len() {
            let req = self.scheduled[i].req;
            if !self.running[req].in_prefill() {
                let token = self.rng.random_range(1..=VOCAB - 1) as i64;
                self.running[req].tokens.push(token);
            }
        }
    }

    /// Retires finished requests: frees their row and their slots (a slot goes back to the pool
    /// when no request references it). The use-after-free and stale-row bugs live here.
    pub fn finish(&mut self, step: u64) {
        let mut i = 0;
        while i < self.running.len() {
            let r = &self.running[i];
            let out_of_room = r.slots.len() + 1 >= MAX_SEQ_LEN;
            if r.stale && out_of_room {
                let r = self.running.remove(i);
                r.slots
                    .iter()
                    .rev()
                    .for_each(|&s| self.slots.release(s, false));
                continue;
            }
            if r.stale || !r.is_done() {
                i += 1;
                continue;
            }
            self.stats.served += 1;
            if self.armed(Bug::UseAfterFree, step) && self.sharer_of(i).is_some() {
                self.free_ignoring_refcounts(step, i);
            } else if self.armed(Bug::StaleRow, step) && r.slots.len() + 8 < MAX_SEQ_LEN {
                self.keep_scheduling_after_finish(step, i);
                i += 1;
                continue;
            } else {
                let r = &self.running[i];
                self.rows.release(r.row);
                r.slots
                    .iter()
                    .rev()
                    .for_each(|&s| self.slots.release(s, false));
            }
            self.running.remove(i);
        }
    }

    /// Which running requests hold `slot`, in words.
    pub fn describe_slot(&self, slot: i64) -> String {
        let holders: Vec<String> = self
            .running
            .iter()
            .filter_map(|r| {
                let pos = r.slots.iter().position(|&s| s == slot)?;
                let stale = if r.stale { ", finished" } else { "" };
                Some(format!(
                    "request #{} (row {}, position {pos}{stale})",
                    r.id, r.row
                ))
            })
            .collect();
        if holders.is_empty() {
            "no running request".to_owned()
        } else {
            holders.join(" and ")
        }
    }
}
