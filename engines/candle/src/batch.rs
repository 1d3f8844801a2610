//! The engine's step arrays, as a vLLM-style engine keeps them: a persistent batch (each
//! running request owns a row while it runs; rows of requests not in the step are padding),
//! its block table and token table updated in place, and per-step columns padded to buckets.
//!
//! Everything the model and the canary read lives here, in the element types mistral.rs and
//! vLLM use: u32 block tables `[rows, max_blocks]`, u32 context and query lengths, u32 token
//! ids, i64 positions, an i64 slot mapping with -1 padding.

use crate::config::{MAX_BLOCKS, MAX_CONTEXT, MAX_ROWS, MAX_TOKENS};

/// One engine's step arrays (allocated once, reused every step).
#[derive(Clone, Debug)]
pub struct StepArrays {
    /// This step's batch rows (a bucket size).
    pub bs: usize,
    /// This step's tokens (a bucket size, padding included).
    pub tokens: usize,
    /// `[MAX_ROWS, MAX_BLOCKS]` u32 block ids by row, updated in place (vLLM v1's
    /// `InputBatch.block_table`).
    pub block_tables: Vec<u32>,
    /// Cells of each row's table known to be current.
    pub table_synced: [usize; MAX_ROWS],
    /// `[MAX_ROWS, MAX_CONTEXT]` u32 token ids by row (vLLM v1's `token_ids_cpu`).
    pub token_table: Vec<u32>,
    /// Tokens of each row's table known to be current.
    pub tokens_synced: [usize; MAX_ROWS],
    /// Whole context per row, new tokens included (0: padding row).
    pub context_lens: Vec<u32>,
    /// New tokens per row (a padding row carries one padding token).
    pub query_lens: Vec<u32>,
    /// Token ids.
    pub input_ids: Vec<u32>,
    /// Positions.
    pub positions: Vec<i64>,
    /// Slots of the tokens' K and V (-1: padding).
    pub slot_mapping: Vec<i64>,
    /// What each token should be: the request's own transcript (the write-input check).
    pub expected_ids: Vec<u32>,
    /// What each token's position should be.
    pub expected_positions: Vec<i64>,
    /// The sampler's output by row: the next step's input id of a decoding row (the tokens
    /// stay where they were sampled, as in an engine that feeds them back on the device).
    pub last_sampled: Vec<u32>,
    /// The request each batch row serves this step (`None`: a padding row).
    pub requests: Vec<Option<u64>>,
    /// Flat indices of the tokens whose logits are sampled, and their rows.
    pub sample: Vec<u32>,
    /// The rows of `sample`.
    pub sample_rows: Vec<usize>,
}

impl Default for StepArrays {
    fn default() -> Self {
        Self::new()
    }
}

impl StepArrays {
    /// Empty arrays of the largest bucket.
    pub fn new() -> Self {
        StepArrays {
            bs: 0,
            tokens: 0,
            block_tables: vec![0; MAX_ROWS * MAX_BLOCKS],
            table_synced: [0; MAX_ROWS],
            token_table: vec![0; MAX_ROWS * MAX_CONTEXT],
            tokens_synced: [0; MAX_ROWS],
            context_lens: vec![0; MAX_ROWS],
            query_lens: vec![0; MAX_ROWS],
            input_ids: vec![0; MAX_TOKENS],
            positions: vec![0; MAX_TOKENS],
            slot_mapping: vec![-1; MAX_TOKENS],
            expected_ids: vec![0; MAX_TOKENS],
            expected_positions: vec![0; MAX_TOKENS],
            last_sampled: vec![0; MAX_ROWS],
            requests: vec![None; MAX_ROWS],
            sample: Vec::new(),
            sample_rows: Vec::new(),
        }
    }

    /// Brings row `row`'s block-table cells and token-table cells up to `blocks` and
    /// `tokens` (only the cells past what is known to be current are written).
    pub fn sync_row(&mut self, row: usize, blocks: &[u32], tokens: &[u32]) {
        let cells = &mut self.block_tables[row * MAX_BLOCKS..][..MAX_BLOCKS];
        let from = self.table_synced[row];
        cells[from..blocks.len()].copy_from_slice(&blocks[from..]);
        self.table_synced[row] = blocks.len();
        let cells = &mut self.token_table[row * MAX_CONTEXT..][..MAX_CONTEXT];
        let from = self.tokens_synced[row];
        cells[from..tokens.len()].copy_from_slice(&tokens[from..]);
        self.tokens_synced[row] = tokens.len();
    }

    /// Row `row` has a new owner: all its cells are stale.
    pub fn reset_row(&mut self, row: usize) {
        self.table_synced[row] = 0;
        self.tokens_synced[row] = 0;
    }

    /// The flat index of row `row`'s first token this step.
    pub fn first_token_of(&self, row: usize) -> usize {
        self.query_lens[..row].iter().map(|&q| q as usize).sum()
    }
}
