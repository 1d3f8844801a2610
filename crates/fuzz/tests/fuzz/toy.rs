//! A toy engine for the step-level targets (`sweep`, `k_only`, `views`): a `req_to_token` table
//! of 4 rows x 8 positions, random batches that mostly follow it, the tokens they write, and
//! 16 bytes of K and of V per slot.

use crate::gen::val;
use arbitrary::{Result, Unstructured};
use kv_canary::{RealKv, RealKvHashMode, RealKvParams, RealKvSource, RealKvSources, ReqToToken};

/// Rows of the toy table.
pub const ROWS: usize = 4;
/// Positions per row of the toy table.
pub const WIDTH: usize = 8;
/// Bytes of one slot's K or V strip.
pub const STRIP: usize = 16;

/// The toy table over `slots` slots: row `r`, position `p` -> slot `1 + (8r + p) mod (slots - 1)`
/// (`slots >= 2`).
pub fn table(slots: usize) -> ReqToToken {
    let data = (0..ROWS * WIDTH)
        .map(|i| 1 + (i % (slots - 1)) as i32)
        .collect();
    ReqToToken::from_vec(ROWS, WIDTH, data).expect("rows x width cells")
}

/// One step of the toy engine: the batch's columns and the tokens it writes, in order.
pub struct ToyStep {
    /// `req_pool_indices`.
    pub rows: Vec<i64>,
    /// `prefix_lens`.
    pub prefixes: Vec<i64>,
    /// `extend_seq_lens`.
    pub extends: Vec<i64>,
    /// (slot, token id, position) of every entry of the write inputs (at most `entries`).
    pub tokens: Vec<(i64, i64, i64)>,
}

/// A random step of at most `max_bs + 1` rows and `entries` tokens over `table`; `lens` holds
/// the tokens each row has so far (updated as if the step finished).
pub fn step(
    u: &mut Unstructured<'_>,
    table: &ReqToToken,
    max_bs: usize,
    entries: usize,
    slots: usize,
    lens: &mut [i64; ROWS],
) -> Result<ToyStep> {
    let bs = u.int_in_range(0..=max_bs + 1)?;
    let mut s = ToyStep {
        rows: Vec::new(),
        prefixes: Vec::new(),
        extends: Vec::new(),
        tokens: Vec::new(),
    };
    for _ in 0..bs {
        let rp = if u.ratio(1, 16)? {
            val(u, 0, ROWS as i64)?
        } else {
            u.int_in_range(0..=ROWS as i64 - 1)?
        };
        let known = usize::try_from(rp)
            .ok()
            .and_then(|r| lens.get(r).copied())
            .unwrap_or(0);
        let prefix = if u.ratio(1, 16)? {
            val(u, 0, WIDTH as i64)?
        } else {
            known
        };
        let extend = if u.ratio(1, 16)? {
            val(u, 0, 3)?
        } else {
            u.int_in_range(0..=2)?
        };
        for i in 0..extend.clamp(0, 8) {
            if s.tokens.len() >= entries {
                break;
            }
            let pos = prefix.saturating_add(i);
            let slot = usize::try_from(rp)
                .ok()
                .and_then(|r| usize::try_from(pos).ok().and_then(|c| table.get(r, c)))
                .map_or(-1, i64::from);
            let slot = if u.ratio(1, 16)? {
                val(u, -1, slots as i64)?
            } else {
                slot
            };
            s.tokens.push((slot, u.int_in_range(0..=9)?, pos));
        }
        if let Some(len) = usize::try_from(rp).ok().and_then(|r| lens.get_mut(r)) {
            *len = prefix
                .max(0)
                .saturating_add(extend.max(0))
                .min(WIDTH as i64);
        }
        s.rows.push(rp);
        s.prefixes.push(prefix);
        s.extends.push(extend);
    }
    Ok(s)
}

/// K or V bytes of `slots` slots (one time in 16 too few rows: an error of the launches that
/// fold them), filled from the input.
pub fn kv_bytes(u: &mut Unstructured<'_>, slots: usize) -> Result<Vec<u8>> {
    let rows = if u.ratio(1, 16)? { slots / 2 } else { slots };
    let mut bytes = vec![0u8; rows * STRIP];
    u.fill_buffer(&mut bytes)?;
    Ok(bytes)
}

/// The real-KV sources over `bytes` (one source, rows of [`STRIP`] bytes).
pub fn source(bytes: &[u8], mode: RealKvHashMode) -> RealKv<'_> {
    let src = RealKvSource::new(
        bytes,
        STRIP,
        RealKvParams::new(1, STRIP as i64, STRIP as i64),
    );
    RealKv::new(
        mode,
        RealKvSources::from_array([src.expect("rows of 16 bytes")]),
    )
}

/// A hash mode.
pub fn mode(u: &mut Unstructured<'_>) -> Result<RealKvHashMode> {
    Ok(if u.ratio(1, 2)? {
        RealKvHashMode::All
    } else {
        RealKvHashMode::Partial
    })
}

/// Flips one random bit of `bytes` (if any).
pub fn flip(u: &mut Unstructured<'_>, bytes: &mut [u8]) -> Result<()> {
    if !bytes.is_empty() {
        let i = u.int_in_range(0..=bytes.len() - 1)?;
        bytes[i] ^= 1 << u.int_in_range(0..=7)?;
    }
    Ok(())
}
