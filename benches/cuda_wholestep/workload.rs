//! The whole-step workloads of issue 10 item 9, built on the host (no device needed): the
//! `req_to_token` table, the setup step that stamps every request's prefix, the measured step,
//! the real-KV layout, SGLang's numbers and the step's floor formula.

use kv_canary::hash::splitmix64;
use kv_canary::{
    Batch, BatchRow, Error, PagedShape, RealKvHashMode, RealKvParams, ReqToToken, RowLayout,
    TokenLayout, UncheckedCapacity, UncheckedShape, WriteInputs,
};

/// Bytes of one token's KV row in one half: layer 0, 8 KV heads x 128 dims x 2 bytes.
pub const KV_ROW_BYTES: usize = 8 * 128 * 2;
/// Bytes a PARTIAL fold reads of each strip (spec §2.10: the first two words).
pub const PARTIAL_BYTES: usize = 16;
/// Rows of the violation ring (a clean step records none).
pub const RING_ROWS: usize = 1024;

/// The steps of the table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepKind {
    /// The table's name of the step.
    pub name: &'static str,
    /// Requests in the batch.
    pub bs: usize,
    /// `Some(tokens)`: one request prefilling that many tokens (no prefix); `None`: a decode
    /// of one token per request after a prefix of about 2k tokens.
    pub prefill: Option<usize>,
    /// SGLang's step on the H200, µs (K+V PARTIAL, K+V ALL, K only PARTIAL).
    pub sglang_us: [f64; 3],
    /// The same on the H100 80GB HBM3.
    pub sglang_h100_us: [f64; 3],
}

impl StepKind {
    /// SGLang's step on the card named `device` (its H100 rows on an H100, else the H200's).
    pub fn sglang_on(&self, device: &str) -> [f64; 3] {
        if device.contains("H100") {
            self.sglang_h100_us
        } else {
            self.sglang_us
        }
    }
}

/// The four steps of issue 10 item 9, with SGLang's numbers on the H200 and the H100 (warm L2,
/// one CUDA graph per step; `../shared/research/sglang-step-times.md`).
pub const STEPS: [StepKind; 4] = [
    StepKind {
        name: "decode bs 1, ~2k prefix",
        bs: 1,
        prefill: None,
        sglang_us: [32.9, 124.9, 20.1],
        sglang_h100_us: [32.8, 125.1, 20.7],
    },
    StepKind {
        name: "decode bs 64, ~2k prefix",
        bs: 64,
        prefill: None,
        sglang_us: [78.1, 715.0, 45.8],
        sglang_h100_us: [80.6, 710.3, 48.4],
    },
    StepKind {
        name: "decode bs 256, ~2k prefix",
        bs: 256,
        prefill: None,
        sglang_us: [195.5, 2728.0, 110.8],
        sglang_h100_us: [203.8, 2705.7, 115.9],
    },
    StepKind {
        name: "prefill 8192 tokens",
        bs: 1,
        prefill: Some(8192),
        sglang_us: [15212.0, 288276.0, 7617.0],
        sglang_h100_us: [15031.0, 300221.0, 7519.0],
    },
];

/// Where a token's K and V bytes lie in the two pools (`--kv-layout`): SGLang's token-major
/// strips (2 KB a slot), or a paged engine's blocks of [`PAGED_SHAPE`] (16 tokens of 8 heads x
/// 128 bf16) in vLLM's K and V layouts or FlashInfer's HND. Slot `s` is token `s % 16` of block
/// `s / 16`; the fingerprints are the same in every layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvLayout {
    /// `[slots, 8, 128]` bf16, page size 1.
    #[default]
    Strip,
    /// K `[blocks, 8, 128 / 8, 16, 8]`, V `[blocks, 8, 128, 16]` bf16.
    Vllm,
    /// K and V `[blocks, 8, 16, 128]` bf16.
    Hnd,
}

/// The paged layouts' shape: 8 KV heads of 128 bf16, blocks of 16 tokens (one 2 KB token).
pub const PAGED_SHAPE: PagedShape = PagedShape::new(8, 128, 2, 16);

impl KvLayout {
    /// The option's values.
    pub const ALL: [KvLayout; 3] = [KvLayout::Strip, KvLayout::Vllm, KvLayout::Hnd];

    /// The `--kv-layout` value.
    pub fn name(self) -> &'static str {
        match self {
            KvLayout::Strip => "strip",
            KvLayout::Vllm => "vllm",
            KvLayout::Hnd => "hnd",
        }
    }

    /// What the layout is, for the output.
    pub fn describe(self) -> &'static str {
        match self {
            KvLayout::Strip => "token-major strips (SGLang's pools), 2 KB a slot",
            KvLayout::Vllm => {
                "vLLM's paged K [blocks, 8, 16, 16, 8] and V [blocks, 8, 128, 16] (bf16, blocks of 16)"
            }
            KvLayout::Hnd => "FlashInfer's HND [blocks, 8, 16, 128] for K and V (bf16, blocks of 16)",
        }
    }

    /// The token layouts of the K and V halves.
    pub fn token_layouts(self) -> Result<(TokenLayout, TokenLayout), Error> {
        Ok(match self {
            KvLayout::Strip => (TokenLayout::Strip, TokenLayout::Strip),
            KvLayout::Vllm => (
                TokenLayout::vllm_k(PAGED_SHAPE)?,
                TokenLayout::vllm_v(PAGED_SHAPE)?,
            ),
            KvLayout::Hnd => (
                TokenLayout::hnd(PAGED_SHAPE)?,
                TokenLayout::hnd(PAGED_SHAPE)?,
            ),
        })
    }
}

/// The fold of the tail launches, and which halves run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// K and V, PARTIAL fold (16 bytes a token a half).
    KvPartial,
    /// K and V, ALL fold (2 KB a token a half).
    KvAll,
    /// The K half alone (a pool without V), PARTIAL fold.
    KOnlyPartial,
}

impl Mode {
    /// In the order of the table columns.
    pub const ALL: [Mode; 3] = [Mode::KvPartial, Mode::KvAll, Mode::KOnlyPartial];

    /// The column name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::KvPartial => "K+V PARTIAL",
            Mode::KvAll => "K+V ALL",
            Mode::KOnlyPartial => "K only PARTIAL",
        }
    }

    /// The column of [`StepKind::sglang_us`].
    pub fn column(self) -> usize {
        match self {
            Mode::KvPartial => 0,
            Mode::KvAll => 1,
            Mode::KOnlyPartial => 2,
        }
    }

    /// The fold mode of the tail launches.
    pub fn hash_mode(self) -> RealKvHashMode {
        match self {
            Mode::KvAll => RealKvHashMode::All,
            Mode::KvPartial | Mode::KOnlyPartial => RealKvHashMode::Partial,
        }
    }

    /// Halves whose launches run (2 for K+V, 1 for K only).
    pub fn halves(self) -> usize {
        match self {
            Mode::KOnlyPartial => 1,
            Mode::KvPartial | Mode::KvAll => 2,
        }
    }

    /// Bytes the fold reads per token per half.
    pub fn fold_bytes(self) -> usize {
        match self.hash_mode() {
            RealKvHashMode::All => KV_ROW_BYTES,
            _ => PARTIAL_BYTES,
        }
    }
}

/// One step's host data: everything the canary needs, for the CPU and the device alike.
pub struct Workload {
    /// Which step.
    pub kind: StepKind,
    /// Where the tokens' K and V bytes lie in the pools.
    pub kv: KvLayout,
    /// Slots of the KV pool and of the canary buffers (slot 0 is the padding slot).
    pub slots: usize,
    /// Row r (1..=bs), position p: a distinct slot, scattered over the pool.
    pub table: ReqToToken,
    /// Every buffer's capacities: verify entries (the prefix tokens), request rows, write
    /// entries (the larger of the setup's and the step's tokens).
    pub shape: UncheckedShape,
    /// The step that stamps every request's prefix (a prefill of it); `None` for a prefill
    /// step, which has no prefix.
    pub setup: Option<(Batch, WriteInputs<UncheckedCapacity>)>,
    /// The measured step.
    pub step: (Batch, WriteInputs<UncheckedCapacity>),
    /// Verify entries of the measured step (its prefix tokens).
    pub verify_entries: usize,
    /// Tokens the measured step writes.
    pub write_tokens: usize,
    /// The longest request's tokens in the measured step (its write's serial chain).
    pub longest_write: usize,
}

/// A run-time capacity (never 0 here).
pub fn cap(what: &'static str, n: usize) -> Result<UncheckedCapacity, Error> {
    UncheckedCapacity::new(what, n.max(1))
}

/// The token of request row `row` at position `pos`.
fn token(row: usize, pos: usize) -> i64 {
    (splitmix64(((row as u64) << 32) | pos as u64) % 150_000) as i64
}

/// Prefix lengths of a decode batch: uniform in 1792..=2304 ("~2k"), seeded.
fn prefix_lens(bs: usize, seed: u64) -> Vec<usize> {
    (0..bs)
        .map(|i| 1792 + (splitmix64(seed ^ (i as u64 + 1)) % 513) as usize)
        .collect()
}

/// `n` slot ids `1..=n` in a seeded random order (an engine that has been running a while).
fn shuffled(n: usize, seed: u64) -> Vec<i32> {
    let mut v: Vec<i32> = (1..=n as i32).collect();
    let mut x = seed;
    for i in (1..v.len()).rev() {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let j = (splitmix64(x) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// A batch and its write inputs: request row r writes positions `from[r]..from[r] + len[r]`.
fn tokens_of(
    shape: &UncheckedShape,
    table: &ReqToToken,
    rows: &[(usize, usize, usize)],
) -> Result<(Batch, WriteInputs<UncheckedCapacity>), Error> {
    let batch: Batch = rows
        .iter()
        .map(|&(r, prefix, extend)| BatchRow {
            req_pool_index: r as i64,
            prefix_len: prefix as i64,
            extend_len: extend as i64,
        })
        .collect();
    let mut inputs = shape.try_write_inputs()?;
    let p = inputs.parts_mut();
    p.out_cache_loc.fill(-1);
    let mut i = 0;
    for &(r, prefix, extend) in rows {
        for pos in prefix..prefix + extend {
            let slot = table.get(r, pos).ok_or(Error::OutOfRange {
                what: "workload table cell",
                value: pos as i64,
                allowed: "a position inside the row",
            })?;
            p.out_cache_loc[i] = i64::from(slot);
            p.input_ids[i] = token(r, pos);
            p.positions[i] = pos as i64;
            i += 1;
        }
    }
    Ok((batch, inputs))
}

impl Workload {
    /// The host data of `kind`, seeded (every run measures the same inputs); each request's
    /// tokens in consecutive slots with `sequential_slots`, else every slot in a seeded random
    /// order.
    pub fn build(kind: StepKind, sequential_slots: bool) -> Result<Workload, Error> {
        let seed = 0x5745_0000 ^ kind.bs as u64;
        let (prefixes, extends): (Vec<usize>, Vec<usize>) = match kind.prefill {
            Some(tokens) => (vec![0; kind.bs], vec![tokens; kind.bs]),
            None => (prefix_lens(kind.bs, seed), vec![1; kind.bs]),
        };
        let lens: Vec<usize> = prefixes.iter().zip(&extends).map(|(p, e)| p + e).collect();
        let width = lens.iter().copied().max().unwrap_or(1);
        let used: usize = lens.iter().sum();
        let mut cells = vec![0i32; (kind.bs + 1) * width];
        let slots = if sequential_slots {
            // Each request from the next 16-token block on (block 0 holds the padding slot),
            // its tokens consecutive, as a fresh paged engine's requests own their blocks.
            let mut first = PAGED_SHAPE.block_size;
            for (r, &len) in lens.iter().enumerate() {
                for pos in 0..len {
                    cells[(r + 1) * width + pos] = (first + pos) as i32;
                }
                first = (first + len).next_multiple_of(PAGED_SHAPE.block_size);
            }
            first
        } else {
            let mut next = shuffled(used, seed).into_iter();
            for (r, &len) in lens.iter().enumerate() {
                for pos in 0..len {
                    cells[(r + 1) * width + pos] = next.next().unwrap_or(0);
                }
            }
            used + 1
        };
        let table = ReqToToken::from_vec(kind.bs + 1, width, cells)?;
        let verify_entries: usize = prefixes.iter().sum();
        let write_tokens: usize = extends.iter().sum();
        let shape = UncheckedShape::from_capacities(
            cap("verify entries", verify_entries)?,
            cap("request rows", kind.bs)?,
            cap("write entries", verify_entries.max(write_tokens))?,
        );
        let setup = if verify_entries > 0 {
            let rows: Vec<_> = (0..kind.bs).map(|r| (r + 1, 0, prefixes[r])).collect();
            Some(tokens_of(&shape, &table, &rows)?)
        } else {
            None
        };
        let rows: Vec<_> = (0..kind.bs)
            .map(|r| (r + 1, prefixes[r], extends[r]))
            .collect();
        let step = tokens_of(&shape, &table, &rows)?;
        Ok(Workload {
            kind,
            kv: KvLayout::Strip,
            slots,
            table,
            shape,
            setup,
            step,
            verify_entries,
            write_tokens,
            longest_write: extends.iter().copied().max().unwrap_or(0),
        })
    }

    /// The rows of one half's KV pool: one 2 KB row per slot, page size 1 (strips), or blocks
    /// of 16 tokens (the paged layouts; [`token_layouts`](Self::token_layouts) says where each
    /// token's bytes are).
    pub fn kv_layout(&self) -> (RowLayout, RealKvParams) {
        match self.kv {
            KvLayout::Strip => (
                RowLayout {
                    num_rows: self.slots,
                    row_bytes: KV_ROW_BYTES,
                    row_stride_bytes: KV_ROW_BYTES,
                },
                RealKvParams::new(1, KV_ROW_BYTES as i64, KV_ROW_BYTES as i64),
            ),
            KvLayout::Vllm | KvLayout::Hnd => (
                RowLayout::dense(
                    self.slots.div_ceil(PAGED_SHAPE.block_size),
                    PAGED_SHAPE.block_bytes(),
                ),
                RealKvParams::from_sizes(PAGED_SHAPE.block_size, KV_ROW_BYTES, KV_ROW_BYTES),
            ),
        }
    }

    /// Where a token's bytes lie in the K and the V pool's rows.
    pub fn token_layouts(&self) -> (TokenLayout, TokenLayout) {
        self.kv.token_layouts().expect("the paged shape is valid")
    }

    /// Bytes of one half's KV pool.
    pub fn kv_pool_bytes(&self) -> usize {
        let (rows, _) = self.kv_layout();
        rows.num_rows * rows.row_stride_bytes
    }

    /// The bytes the step must move besides the verify gathers ([`FLOOR_FORMULA`]).
    pub fn traffic_bytes(&self, mode: Mode) -> u64 {
        let (n, t, h) = (
            self.verify_entries as u64,
            self.write_tokens as u64,
            mode.halves() as u64,
        );
        let plan = 36 * n;
        let writes = 2 * h * 56 * t;
        // The tail writes' folds; the tail verify's too in ALL mode (whole strips at the copy
        // bandwidth), while PARTIAL's 16-byte reads are in the tail stage's gather floor.
        let verify_fold = match mode.hash_mode() {
            RealKvHashMode::All => n,
            _ => 0,
        };
        let fold = h * (t + verify_fold) * mode.fold_bytes() as u64;
        plan + writes + fold
    }

    /// Verify launches of the step (head and tail of each half).
    pub fn verify_launches(mode: Mode) -> usize {
        2 * mode.halves()
    }
}

/// How the step's floor is computed (printed with the results and in docs/benchmarks.md).
pub const FLOOR_FORMULA: &str =
    "floor = G(head) + G(tail) + bytes / copy_bw + chain(longest request); \
G(stage) = the stage floor kernel, measured on the step's own plan and buffers: one launch of \
the stage's h halves side by side (as the pair launch), per entry the slot and predecessor index \
loads and the 32-byte canary gathers on the half's buffer (the predecessor from the lane before \
when it is that lane's slot, as the verify kernel), and in a PARTIAL tail the 16 bytes of the \
entry's real-KV row in the half's pool (the random sector the fold reads); copy_bw = the \
measured device-to-device copy bandwidth (bytes read + written per second), bytes = 36 N (plan: \
4-byte table read, 32 bytes of plan written) + 2 h x 56 T (head and tail writes: 24 bytes of \
inputs read, a 32-byte slot stored) + h x T x f (tail write folds) + in ALL mode h x N x f (tail \
verify folds, whole strips), h = halves, N = verify entries, T = tokens written, f = 16 \
(PARTIAL) or 2048 (ALL) bytes; chain(k) = the chain floor kernel of k dependent mix3 steps (the \
write's serial hash chain; counted once: the four writes' chains are independent)";
