//! Real-KV fingerprints over vLLM's paged layouts (issue 32 item 3), on the CPU: a token's
//! fingerprint in every layout (vLLM's K `[blocks, heads, dim / x, B, x]`, V `[blocks, heads,
//! dim, B]`, FlashInfer's HND `[blocks, heads, B, dim]`, MLA's strips) equals the fingerprint of
//! its token-major copy (SGLang's strip); a byte flipped inside a token's folded bytes changes
//! exactly that token's fingerprint, one outside them changes none; and a canary over paged K
//! and V caches reports a flipped cached byte at the next step.

use kv_canary::step::{Canary, TailKv};
use kv_canary::{
    BatchView, Cap, PagedShape, PlanInputs, RealKv, RealKvHashMode, RealKvParams, RealKvSource,
    RealKvSources, ReqToTokenView, RowLayout, Shape, TokenLayout, WriteInputsView,
};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    VllmK,
    VllmV,
    Hnd,
    Mla,
}

/// Where element `d` of head `h` of the token at position `at` of block `b` lies in the cache,
/// as an element index, written from each layout's tensor shape (independently of the
/// library's offsets).
fn element_index(kind: Kind, s: PagedShape, b: usize, at: usize, h: usize, d: usize) -> usize {
    let (heads, dim, bs) = (s.kv_heads, s.head_dim, s.block_size);
    let x = 16 / s.element_bytes;
    match kind {
        Kind::VllmK => (((b * heads + h) * (dim / x) + d / x) * bs + at) * x + d % x,
        Kind::VllmV => ((b * heads + h) * dim + d) * bs + at,
        Kind::Hnd => ((b * heads + h) * bs + at) * dim + d,
        Kind::Mla => ((b * bs + at) * heads + h) * dim + d,
    }
}

fn layout(kind: Kind, s: PagedShape) -> TokenLayout {
    match kind {
        Kind::VllmK => TokenLayout::vllm_k(s).unwrap(),
        Kind::VllmV => TokenLayout::vllm_v(s).unwrap(),
        Kind::Hnd => TokenLayout::hnd(s).unwrap(),
        Kind::Mla => TokenLayout::Strip,
    }
}

/// A paged cache of `blocks` blocks and its token-major copy; `owner[i]` is the (slot, logical
/// byte) byte `i` of the paged cache holds.
fn caches(
    rng: &mut ChaCha8Rng,
    kind: Kind,
    s: PagedShape,
    blocks: usize,
) -> (Vec<u8>, Vec<u8>, Vec<(usize, usize)>) {
    let e = s.element_bytes;
    let token = s.token_bytes();
    let major: Vec<u8> = (0..blocks * s.block_size * token)
        .map(|_| rng.random())
        .collect();
    let mut paged = vec![0u8; major.len()];
    let mut owner = vec![(usize::MAX, 0); major.len()];
    for b in 0..blocks {
        for at in 0..s.block_size {
            let slot = b * s.block_size + at;
            for h in 0..s.kv_heads {
                for d in 0..s.head_dim {
                    let logical = (h * s.head_dim + d) * e;
                    let to = element_index(kind, s, b, at, h, d) * e;
                    paged[to..to + e].copy_from_slice(&major[slot * token + logical..][..e]);
                    for k in 0..e {
                        owner[to + k] = (slot, logical + k);
                    }
                }
            }
        }
    }
    assert!(owner.iter().all(|&(s, _)| s != usize::MAX), "a permutation");
    (paged, major, owner)
}

fn paged_source(
    bytes: &[u8],
    blocks: usize,
    layout: TokenLayout,
    s: PagedShape,
    read: usize,
) -> RealKvSource<'_> {
    RealKvSource::paged(bytes, blocks, layout, s, read).expect("a paged source")
}

fn strip_source(bytes: &[u8], slots: usize, token: usize, read: usize) -> RealKvSource<'_> {
    RealKvSource::strided(
        bytes,
        RowLayout::dense(slots, token),
        RealKvParams::from_sizes(1, token, read),
    )
    .expect("the token-major copy")
}

/// All-mode fingerprints of paged vLLM K and V caches of `blocks` blocks: `TailKv::vllm_paged`,
/// which must be the sources an engine would build by hand.
fn tail_kv<'a>(k: &'a [u8], v: &'a [u8], s: PagedShape, blocks: usize) -> TailKv<'a> {
    let kv = |bytes, layout| {
        RealKv::new(
            RealKvHashMode::All,
            RealKvSources::from_array([paged_source(bytes, blocks, layout, s, s.token_bytes())]),
        )
    };
    let by_hand = TailKv::new(
        kv(k, TokenLayout::vllm_k(s).unwrap()),
        kv(v, TokenLayout::vllm_v(s).unwrap()),
    );
    let tail = TailKv::vllm_paged(RealKvHashMode::All, k, v, blocks, s).unwrap();
    assert_eq!(tail, by_hand);
    tail
}

fn hashes(src: RealKvSource<'_>, mode: RealKvHashMode, slots: usize) -> Vec<i64> {
    let kv = RealKv::new(mode, RealKvSources::from_array([src]));
    (0..slots).map(|s| kv.hash(s)).collect()
}

#[test]
fn every_layout_fingerprints_a_token_as_its_token_major_copy() {
    let mut rng = ChaCha8Rng::seed_from_u64(323);
    let mut checked = [0usize; 4];
    let (mut covered, mut uncovered) = (0, 0);
    for round in 0..160 {
        let kind = [Kind::VllmK, Kind::VllmV, Kind::Hnd, Kind::Mla][round % 4];
        let e = [2, 4, 8][rng.random_range(0..3)];
        let dim = [16, 32, 64][rng.random_range(0..3)];
        let s = PagedShape::new(
            rng.random_range(1..=3),
            dim,
            e,
            [1, 4, 16][rng.random_range(0..3)],
        );
        let blocks = rng.random_range(1..=3);
        let (paged, major, owner) = caches(&mut rng, kind, s, blocks);
        let token = s.token_bytes();
        let read = 16 * rng.random_range(1..=token / 16);
        let slots = blocks * s.block_size;
        for mode in [RealKvHashMode::Partial, RealKvHashMode::All] {
            let got = hashes(
                paged_source(&paged, blocks, layout(kind, s), s, read),
                mode,
                slots,
            );
            assert_eq!(
                got,
                hashes(strip_source(&major, slots, token, read), mode, slots),
                "round {round}: {kind:?} {s:?} {mode:?}: fingerprints differ from the strips'"
            );
            // One byte flipped: exactly its token's fingerprint changes, when the byte is
            // among the folded ones.
            let at = rng.random_range(0..paged.len());
            let mut flipped = paged.clone();
            flipped[at] ^= 1 << rng.random_range(0..8);
            let after = hashes(
                paged_source(&flipped, blocks, layout(kind, s), s, read),
                mode,
                slots,
            );
            let (slot, logical) = owner[at];
            let folded = if mode == RealKvHashMode::Partial {
                16
            } else {
                read
            };
            for (t, (a, b)) in got.iter().zip(&after).enumerate() {
                let expect_change = t == slot && logical < folded;
                assert_eq!(
                    a != b,
                    expect_change,
                    "round {round}: {kind:?} {mode:?}: byte {at} (slot {slot}, logical byte \
                     {logical}, {folded} folded) flipped, slot {t}"
                );
            }
            if logical < folded {
                covered += 1;
            } else {
                uncovered += 1;
            }
        }
        checked[round % 4] += 1;
    }
    eprintln!(
        "160 random caches (vLLM K, vLLM V, HND, MLA: {checked:?}): fingerprints equal to the \
         token-major strips'; {covered} flips inside the folded bytes reported, {uncovered} \
         outside them not"
    );
    assert!(covered > 40 && uncovered > 40, "{covered} {uncovered}");
}

#[test]
fn layouts_past_their_rows_and_bad_shapes_are_refused() {
    let s = PagedShape::new(2, 64, 2, 16);
    let cache = vec![0u8; 2 * s.block_bytes()];
    // A row of the right size, a layout of a bigger block.
    let bigger = TokenLayout::vllm_k(PagedShape::new(2, 64, 2, 32)).unwrap();
    let err = RealKvSource::paged(&cache, 2, bigger, s, 16).unwrap_err();
    assert!(err.to_string().contains("reaches past the row"), "{err}");
    for bad in [
        PagedShape::new(2, 64, 3, 16),
        PagedShape::new(0, 64, 2, 16),
        PagedShape::new(2, 4, 2, 16),
        PagedShape::new(2, 64, 2, 0),
        PagedShape::new(1 << 20, 1 << 20, 8, 16),
    ] {
        let err = TokenLayout::vllm_v(bad).unwrap_err();
        assert!(err.to_string().starts_with("kv-canary: "), "{err}");
    }
}

/// A CPU canary over paged K (vLLM's) and V (vLLM's) caches with a block table: a byte of a
/// cached token's K flipped after its write is reported by the next step's tail verify.
#[test]
fn a_flipped_byte_of_a_paged_cache_is_reported() {
    let s = PagedShape::new(2, 32, 2, 16);
    const BLOCKS: usize = 4;
    let mut k = vec![0u8; BLOCKS * s.block_bytes()];
    let mut v = vec![0u8; BLOCKS * s.block_bytes()];
    let mut canary = Canary::full(
        Shape::<Cap<64>, Cap<2>, Cap<32>>::new(),
        Cap::<{ BLOCKS * 16 }>,
        Cap::<16>,
    );
    let blocks = [2u32, 3];
    let table = ReqToTokenView::block_table(1, 2, 16, &blocks).unwrap();
    // Step 1: prefill 20 tokens (slots 32..52); step 2: decode one more.
    let mut reports = Vec::new();
    for (step, (context, query)) in [(20u32, 20u32), (21, 1)].into_iter().enumerate() {
        let first = (context - query) as i64;
        let slots: Vec<i64> = (first..i64::from(context))
            .map(|p| i64::from(blocks[(p / 16) as usize]) * 16 + p % 16)
            .collect();
        let ids: Vec<u32> = (first..i64::from(context))
            .map(|p| 100 + p as u32)
            .collect();
        let positions: Vec<i64> = (first..i64::from(context)).collect();
        let pad = |mut a: Vec<i64>, fill| {
            a.resize(32, fill);
            a
        };
        let (slots, positions) = (pad(slots, -1), pad(positions, 0));
        let mut ids = ids;
        ids.resize(32, 0);
        let (ctx, q) = ([context], [query]);
        let batch = BatchView::from_query_lens(1, &ctx, &q).unwrap();
        let write = WriteInputsView::new(Cap::<32>, &ids, &positions, &slots).unwrap();
        let step_ = canary
            .plan(&PlanInputs::from_views(batch, table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&write)
            .unwrap();
        // The forward pass writes the new tokens' K and V bytes.
        for &slot in slots.iter().filter(|&&s| s >= 0) {
            let (b, at) = (slot as usize / 16, slot as usize % 16);
            for h in 0..s.kv_heads {
                for d in 0..s.head_dim {
                    let byte = (slot as usize * 7 + h * 31 + d) as u8;
                    let ki = element_index(Kind::VllmK, s, b, at, h, d) * 2;
                    let vi = element_index(Kind::VllmV, s, b, at, h, d) * 2;
                    k[ki..ki + 2].copy_from_slice(&[byte, !byte]);
                    v[vi..vi + 2].copy_from_slice(&[!byte, byte]);
                }
            }
        }
        let report = step_.verify_tail(tail_kv(&k, &v, s, BLOCKS)).unwrap();
        reports.push(report.violations.len());
        if step == 0 {
            // A stray write flips one byte of token 5's K (head 1, dim 9) after its stamp.
            let at = element_index(Kind::VllmK, s, 2, 5, 1, 9) * 2 + 1;
            k[at] ^= 0x40;
        }
    }
    assert_eq!(reports[0], 0, "the prefill is clean");
    assert!(reports[1] > 0, "the flipped K byte of slot 37 is reported");
    eprintln!(
        "paged K/V canary: prefill clean, the flipped byte reported by {} rows",
        reports[1]
    );
}
