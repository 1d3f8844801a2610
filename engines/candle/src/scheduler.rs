//! The scheduler (vLLM v1's, simplified): admits waiting requests into free rows with their
//! cached prefix, schedules one token per decoding request and prompt chunks (chunked prefill)
//! within a token budget, allocates blocks (copy-on-write for shared partial blocks), preempts
//! the newest request when the pool runs out (its blocks freed, recomputed later, its full
//! blocks likely still cached), and lays out the step's bucketed arrays.

use crate::batch::StepArrays;
use crate::block_allocator::{block_hash, BlockAllocator, Cached};
use crate::bugs::{Bug, BugState};
use crate::config::{
    bucket, BLOCK_SIZE, MAX_CONTEXT, MAX_ROWS, MAX_RUNNING, ROW_BUCKETS, TOKEN_BUCKETS,
    TOKEN_BUDGET,
};
use crate::workload::Request;
use std::collections::VecDeque;

/// A request in the engine.
#[derive(Clone, Debug)]
pub struct Sequence {
    /// The request id.
    pub id: u64,
    /// Its transcript: prompt and generated tokens.
    pub tokens: Vec<u32>,
    /// Prompt length.
    pub prompt_len: usize,
    /// Tokens to generate at most.
    pub max_new: usize,
    /// Tokens whose K and V are in the cache.
    pub computed: usize,
    /// Its blocks, in position order.
    pub blocks: Vec<u32>,
    /// The hashes of its full, registered blocks.
    pub hashes: Vec<u64>,
    /// Its row in the persistent batch while it runs.
    pub row: Option<usize>,
    /// Whether it still has to fork after its first token.
    pub fork: bool,
    /// Whether its last token waits in `last_sampled[row]` (the next input id).
    pub fed: bool,
}

impl Sequence {
    fn new(r: Request) -> Self {
        Sequence {
            id: r.id,
            prompt_len: r.prompt.len(),
            tokens: r.prompt,
            max_new: r.max_new,
            computed: 0,
            blocks: Vec::new(),
            hashes: Vec::new(),
            row: None,
            fork: r.fork,
            fed: false,
        }
    }

    /// The slot of position `p`.
    pub fn slot(&self, p: usize) -> i64 {
        i64::from(self.blocks[p / BLOCK_SIZE]) * BLOCK_SIZE as i64 + (p % BLOCK_SIZE) as i64
    }

    fn done(&self) -> bool {
        self.tokens.len() - self.prompt_len >= self.max_new || self.tokens.len() >= MAX_CONTEXT
    }
}

/// A scheduled sequence of the step: its index in `running` and its new tokens.
#[derive(Clone, Copy, Debug)]
pub struct Scheduled {
    /// Index in [`Scheduler::running`].
    pub index: usize,
    /// New tokens this step.
    pub query: usize,
}

/// The scheduler's state.
#[derive(Debug, Default)]
pub struct Scheduler {
    /// Requests waiting (new, or preempted).
    pub waiting: VecDeque<Sequence>,
    /// Running requests, oldest first.
    pub running: Vec<Sequence>,
    /// The block pool.
    pub alloc: BlockAllocator,
    /// Block copies (from, to) the next forward pass must make first (copy-on-write).
    pub copies: Vec<(u32, u32)>,
    /// This step's scheduled sequences.
    pub scheduled: Vec<Scheduled>,
    /// Requests finished.
    pub finished: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Forks.
    pub forks: u64,
    /// Finished requests' transcripts (id, prompt and output tokens), in finishing order.
    pub transcripts: Vec<(u64, Vec<u32>)>,
}

fn free_row(running: &[Sequence]) -> Option<usize> {
    (0..MAX_ROWS).find(|r| running.iter().all(|s| s.row != Some(*r)))
}

impl Scheduler {
    /// Queues a new request.
    pub fn add(&mut self, r: Request) {
        self.waiting.push_back(Sequence::new(r));
    }

    /// The running sequence of `id`.
    pub fn seq(&self, id: u64) -> Option<&Sequence> {
        self.running.iter().find(|s| s.id == id)
    }

    fn admit(&mut self, arrays: &mut StepArrays) {
        while self.running.len() < MAX_RUNNING {
            let (Some(row), Some(next)) = (free_row(&self.running), self.waiting.front()) else {
                break;
            };
            let first_chunk = next.tokens.len().min(TOKEN_BUDGET).div_ceil(BLOCK_SIZE);
            if self.alloc.free_blocks() < first_chunk + 1 {
                break;
            }
            let mut seq = self.waiting.pop_front().expect("checked");
            let limit = seq.tokens.len() - 1;
            seq.blocks = self.alloc.take_prefix(&seq.tokens, limit);
            seq.computed = seq.blocks.len() * BLOCK_SIZE;
            let mut parent = None;
            seq.hashes = seq.tokens[..seq.computed]
                .chunks_exact(BLOCK_SIZE)
                .map(|c| {
                    let h = block_hash(parent, c);
                    parent = Some(h);
                    h
                })
                .collect();
            seq.row = Some(row);
            seq.fed = false;
            arrays.reset_row(row);
            self.running.push(seq);
        }
    }

    fn preempt(&mut self, index: usize) {
        let mut seq = self.running.remove(index);
        self.alloc.release_all(&seq.blocks);
        seq.blocks.clear();
        seq.hashes.clear();
        (seq.computed, seq.row, seq.fed) = (0, None, false);
        self.preemptions += 1;
        self.waiting.push_front(seq);
    }

    /// Blocks for positions `from..to` of `running[i]`: new blocks past its last, a copy of a
    /// shared partial block it appends to. `false` when the pool is out of blocks.
    fn ensure_blocks(
        &mut self,
        i: usize,
        from: usize,
        to: usize,
        arrays: &mut StepArrays,
        bugs: &mut BugState,
        step: u64,
    ) -> bool {
        let seq = &mut self.running[i];
        for idx in from / BLOCK_SIZE..to.div_ceil(BLOCK_SIZE) {
            if idx == seq.blocks.len() {
                let Some(b) = self.alloc.allocate() else {
                    return false;
                };
                seq.blocks.push(b);
            } else if self.alloc.refs(seq.blocks[idx]) > 1 {
                let old = seq.blocks[idx];
                let Some(fresh) = self.alloc.copy_on_write(old) else {
                    return false;
                };
                self.copies.push((old, fresh));
                seq.blocks[idx] = fresh;
                let row = seq.row.expect("a running sequence has a row");
                if bugs.due(Bug::StaleRowAfterCow, step) {
                    // The bug: the row's cells are "current" up to their count, which did
                    // not change, so the copied block's cell keeps the old block.
                    bugs.record(
                        step,
                        vec![seq.id],
                        None,
                        format!(
                            "row {row} keeps block {old}, the request now writes block {fresh}"
                        ),
                    );
                } else {
                    arrays.table_synced[row] = arrays.table_synced[row].min(idx);
                }
            }
        }
        true
    }

    /// Schedules step `step` and lays out its arrays.
    pub fn schedule(&mut self, arrays: &mut StepArrays, bugs: &mut BugState, step: u64) {
        if bugs.due(Bug::FreedWhileHeld, step) {
            self.free_while_held(bugs, step);
        }
        self.admit(arrays);
        self.copies.clear();
        self.scheduled.clear();
        let mut budget = TOKEN_BUDGET;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let seq = &self.running[i];
            let query = (seq.tokens.len() - seq.computed).min(budget);
            let from = seq.computed;
            if self.ensure_blocks(i, from, from + query, arrays, bugs, step) {
                self.scheduled.push(Scheduled { index: i, query });
                budget -= query;
                i += 1;
            } else {
                // Out of blocks: preempt the newest request (this one, if it is the newest).
                self.preempt(self.running.len() - 1);
            }
        }
        self.lay_out(arrays);
    }

    fn lay_out(&self, a: &mut StepArrays) {
        let mut by_row: [Option<Scheduled>; MAX_ROWS] = [None; MAX_ROWS];
        for s in &self.scheduled {
            by_row[self.running[s.index].row.expect("running")] = Some(*s);
        }
        let last = by_row.iter().rposition(Option::is_some).unwrap_or(0);
        a.bs = bucket(&ROW_BUCKETS, last + 1);
        a.sample.clear();
        a.sample_rows.clear();
        let mut t = 0;
        for (row, s) in by_row.iter().enumerate().take(a.bs) {
            let Some(s) = s else {
                // A padding row: no context, one padding token.
                (a.context_lens[row], a.query_lens[row], a.requests[row]) = (0, 1, None);
                (a.input_ids[t], a.positions[t], a.slot_mapping[t]) = (0, 0, -1);
                (a.expected_ids[t], a.expected_positions[t]) = (0, 0);
                t += 1;
                continue;
            };
            let seq = &self.running[s.index];
            a.sync_row(row, &seq.blocks, &seq.tokens);
            let end = seq.computed + s.query;
            a.context_lens[row] = end as u32;
            a.query_lens[row] = s.query as u32;
            a.requests[row] = Some(seq.id);
            for p in seq.computed..end {
                let fed = seq.fed && p + 1 == seq.tokens.len();
                a.input_ids[t] = if fed {
                    a.last_sampled[row]
                } else {
                    seq.tokens[p]
                };
                a.positions[t] = p as i64;
                a.slot_mapping[t] = seq.slot(p);
                (a.expected_ids[t], a.expected_positions[t]) = (seq.tokens[p], p as i64);
                t += 1;
            }
            if end == seq.tokens.len() {
                a.sample.push(t as u32 - 1);
                a.sample_rows.push(row);
            }
        }
        a.tokens = bucket(&TOKEN_BUCKETS, t);
        for u in t..a.tokens {
            (a.input_ids[u], a.positions[u], a.slot_mapping[u]) = (0, 0, -1);
            (a.expected_ids[u], a.expected_positions[u]) = (0, 0);
        }
    }

    /// After the forward pass: the scheduled sequences' tokens are cached, full blocks
    /// registered in the prefix cache, sampled tokens (by row in `a.sample_rows`) appended,
    /// forks made, finished requests retired.
    pub fn update(&mut self, a: &mut StepArrays, sampled: &[(u32, u32)]) {
        for s in &self.scheduled {
            let seq = &mut self.running[s.index];
            seq.computed += s.query;
            seq.fed = false;
            for idx in seq.hashes.len()..seq.computed / BLOCK_SIZE {
                let parent = idx.checked_sub(1).map(|p| (seq.blocks[p], seq.hashes[p]));
                let h = block_hash(
                    parent.map(|p| p.1),
                    &seq.tokens[idx * BLOCK_SIZE..(idx + 1) * BLOCK_SIZE],
                );
                let cached = Cached {
                    hash: h,
                    index: idx,
                    parent,
                };
                self.alloc.register(seq.blocks[idx], cached);
                seq.hashes.push(h);
            }
        }
        let rows = a.sample_rows.clone();
        for (&row, &(best, second)) in rows.iter().zip(sampled) {
            let i = self
                .running
                .iter()
                .position(|s| s.row == Some(row))
                .expect("a sampled row runs");
            let seq = &mut self.running[i];
            seq.tokens.push(best);
            seq.fed = true;
            a.last_sampled[row] = best;
            if std::mem::take(&mut seq.fork) && self.running.len() < MAX_RUNNING {
                if let Some(child_row) = free_row(&self.running) {
                    let mut child = self.running[i].clone();
                    *child.tokens.last_mut().expect("sampled") = second;
                    child.id = child.id * 1000 + 1;
                    child.row = Some(child_row);
                    self.alloc.fork(&child.blocks);
                    a.reset_row(child_row);
                    a.last_sampled[child_row] = second;
                    self.running.push(child);
                    self.forks += 1;
                }
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].done() {
                let seq = self.running.remove(i);
                self.alloc.release_all(&seq.blocks);
                self.finished += 1;
                self.transcripts.push((seq.id, seq.tokens));
            } else {
                i += 1;
            }
        }
    }

    /// The refcount bug: a full block of the running request with the most blocks is freed
    /// while the request still holds it (put at the head of the free queue, so the next
    /// allocation reuses it).
    fn free_while_held(&mut self, bugs: &mut BugState, step: u64) {
        let victim = self
            .running
            .iter()
            .filter(|s| s.computed >= 2 * BLOCK_SIZE)
            .find_map(|s| {
                let b = s.blocks[s.computed / BLOCK_SIZE - 1];
                (self.alloc.refs(b) == 1).then_some((s.id, b))
            });
        if let Some((id, block)) = victim {
            self.alloc.free_while_held(block);
            bugs.record(
                step,
                vec![id],
                None,
                format!("block {block} freed, request {id} holds it"),
            );
        }
    }
}
