//! Requests, the rows of the request pool they occupy, and the stream of arriving prompts.

use rand::RngExt as _;
use rand_chacha::ChaCha8Rng;

/// One request being served.
#[derive(Clone, Debug)]
pub struct Request {
    /// Arrival number, for reports.
    pub id: u64,
    /// Its `req_to_token` row (its `req_pool_index`; never 0, the padding row).
    pub row: usize,
    /// Prompt, then every sampled token. The last sampled token is not yet in the KV cache.
    pub tokens: Vec<i64>,
    /// Tokens of the prompt.
    pub prompt_len: usize,
    /// Tokens to sample before the request is finished.
    pub output_len: usize,
    /// `slots[p]`: the KV slot of position `p`, for every position already written (or being
    /// written this step).
    pub slots: Vec<i64>,
    /// Finished, but (through a bug) still scheduled.
    pub stale: bool,
}

impl Request {
    /// Tokens sampled so far.
    pub fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Whether part of the prompt still waits for its prefill.
    pub fn in_prefill(&self) -> bool {
        self.slots.len() < self.prompt_len
    }

    /// Whether every output token has been sampled.
    pub fn is_done(&self) -> bool {
        self.generated() >= self.output_len
    }
}

/// The free rows of the request pool (`req_to_token` and the expected-token pool share them).
/// Row 0 is the padding row and never handed out; the most recently freed row comes back first.
#[derive(Debug)]
pub struct Rows {
    free: Vec<usize>,
}

impl Rows {
    /// Rows `1..rows` free.
    pub fn new(rows: usize) -> Self {
        Rows {
            free: (1..rows).rev().collect(),
        }
    }

    /// A free row, if any.
    pub fn alloc(&mut self) -> Option<usize> {
        self.free.pop()
    }

    /// Gives `row` back.
    pub fn release(&mut self, row: usize) {
        self.free.push(row);
    }
}

/// A prompt waiting for admission.
#[derive(Clone, Debug)]
pub struct Prompt {
    /// Arrival number.
    pub id: u64,
    /// Token ids.
    pub tokens: Vec<i64>,
    /// Tokens to sample.
    pub output_len: usize,
}

/// Vocabulary size of the fake model.
pub const VOCAB: usize = 32_000;

/// Arriving prompts: most start with one of a few shared "system prompts" (so later requests
/// can reuse the KV of earlier ones), then a random question.
#[derive(Debug)]
pub struct Arrivals {
    templates: Vec<Vec<i64>>,
    next_id: u64,
}

impl Arrivals {
    /// Six system prompts of 8 to 40 tokens.
    pub fn new(rng: &mut ChaCha8Rng) -> Self {
        let templates = (0..6)
            .map(|_| {
                let n = rng.random_range(8..=40);
                random_tokens(rng, n)
            })
            .collect();
        Arrivals {
            templates,
            next_id: 1,
        }
    }

    /// The next prompt: 70 % a system prompt and 2 to 24 more tokens, 30 % 4 to 48 random
    /// tokens; 4 to 40 tokens to sample.
    pub fn next(&mut self, rng: &mut ChaCha8Rng) -> Prompt {
        let mut tokens = if rng.random_bool(0.7) {
            let t = rng.random_range(0..self.templates.len());
            let mut tokens = self.templates[t].clone();
            let n = rng.random_range(2..=24);
            tokens.extend(random_tokens(rng, n));
            tokens
        } else {
            let n = rng.random_range(4..=48);
            random_tokens(rng, n)
        };
        tokens.shrink_to_fit();
        let id = self.next_id;
        self.next_id += 1;
        Prompt {
            id,
            tokens,
            output_len: rng.random_range(4..=40),
        }
    }
}

fn random_tokens(rng: &mut ChaCha8Rng, n: usize) -> Vec<i64> {
    (0..n)
        .map(|_| rng.random_range(1..=VOCAB - 1) as i64)
        .collect()
}
