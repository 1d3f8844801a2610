//! KV that moves keeps its canary (issue 33 item 6), on the CPU: a request's blocks offloaded to
//! host memory and brought back into other blocks verify there, with their canary records moved
//! along (`Canary::export_records` / `import_records`); a byte of the offloaded KV flipped on the
//! way is reported by the transfer digest and by the next verify; a request moved to another
//! canary (another instance) verifies there; digests of different layouts are refused.

use kv_canary::step::{Canary, MovedRecords, TailKv};
use kv_canary::{
    BatchView, Cap, Error, PagedShape, PlanInputs, RealKv, RealKvHashMode, RealKvSource,
    RealKvSources, ReqToTokenView, Shape, TokenLayout, TransferDigest, WriteInputsView,
};

const SHAPE: PagedShape = PagedShape::new(2, 32, 2, 16);
const BLOCKS: usize = 8;
const SLOTS: usize = BLOCKS * 16;
type Spec = Shape<Cap<64>, Cap<1>, Cap<32>>;
type Cpu = Canary<Cap<64>, Cap<1>, Cap<32>, Cap<SLOTS>, Cap<16>>;

/// One instance: a canary and its paged K and V caches (vLLM's layouts).
struct Instance {
    canary: Cpu,
    k: Vec<u8>,
    v: Vec<u8>,
}

fn source(bytes: &[u8], layout: TokenLayout) -> RealKvSource<'_> {
    RealKvSource::paged(bytes, BLOCKS, layout, SHAPE, SHAPE.token_bytes()).unwrap()
}

fn k_layout() -> TokenLayout {
    TokenLayout::vllm_k(SHAPE).unwrap()
}

fn v_layout() -> TokenLayout {
    TokenLayout::vllm_v(SHAPE).unwrap()
}

fn slot_of(blocks: &[u32], pos: usize) -> i64 {
    i64::from(blocks[pos / 16]) * 16 + (pos % 16) as i64
}

impl Instance {
    fn new() -> Self {
        Instance {
            canary: Canary::full(Spec::new(), Cap::<SLOTS>, Cap::<16>),
            k: vec![0; BLOCKS * SHAPE.block_bytes()],
            v: vec![0; BLOCKS * SHAPE.block_bytes()],
        }
    }

    /// One step of the request in `blocks`: `query` new tokens after `context - query` cached
    /// ones; the forward pass writes each new token's K and V bytes (a function of its
    /// position). Returns the step's violation rows.
    fn step(&mut self, blocks: &[u32], context: usize, query: usize) -> usize {
        let first = context - query;
        let mut slots = vec![-1i64; 32];
        let mut ids = vec![0u32; 32];
        let mut positions = vec![0i64; 32];
        for (i, pos) in (first..context).enumerate() {
            slots[i] = slot_of(blocks, pos);
            ids[i] = 100 + pos as u32;
            positions[i] = pos as i64;
        }
        let (ctx, q) = ([context as u32], [query as u32]);
        let table = ReqToTokenView::block_table(1, blocks.len(), 16, blocks).unwrap();
        let batch = BatchView::from_query_lens(1, &ctx, &q).unwrap();
        let write = WriteInputsView::new(Cap::<32>, &ids, &positions, &slots).unwrap();
        let step = self
            .canary
            .plan(&PlanInputs::from_views(batch, table))
            .unwrap()
            .verify_head()
            .unwrap()
            .write(&write)
            .unwrap();
        for pos in first..context {
            forward(&mut self.k, &mut self.v, slot_of(blocks, pos) as usize, pos);
        }
        let kv = |bytes, layout| {
            RealKv::new(
                RealKvHashMode::All,
                RealKvSources::from_array([source(bytes, layout)]),
            )
        };
        let tail = TailKv::new(kv(&self.k, k_layout()), kv(&self.v, v_layout()));
        step.verify_tail(tail).unwrap().violations.len()
    }

    /// The K or V bytes of `block`, and the same written back into `block`.
    fn block(bytes: &[u8], block: u32) -> Vec<u8> {
        let b = SHAPE.block_bytes();
        bytes[block as usize * b..][..b].to_vec()
    }
    fn put_block(bytes: &mut [u8], block: u32, data: &[u8]) {
        let b = SHAPE.block_bytes();
        bytes[block as usize * b..][..b].copy_from_slice(data);
    }
}

/// The forward pass: the K and V bytes of the token at `pos` into `slot` (a function of the
/// position, in token-major logical order).
fn forward(k: &mut [u8], v: &mut [u8], slot: usize, pos: usize) {
    let logical: Vec<u8> = (0..SHAPE.token_bytes())
        .map(|i| (pos * 13 + i * 7) as u8)
        .collect();
    scatter(k, k_layout(), slot, &logical);
    scatter(v, v_layout(), slot, &logical);
}

/// Writes a token's logical bytes where `layout` puts them (the inverse of the fingerprint's
/// gather, through the layout's strides).
fn scatter(cache: &mut [u8], layout: TokenLayout, slot: usize, logical: &[u8]) {
    let TokenLayout::Pieces(p) = layout else {
        unreachable!("paged layouts")
    };
    let (block, at) = (slot / 16, slot % 16);
    let base = block * SHAPE.block_bytes() + at * p.token_stride;
    for (j, piece) in logical.chunks_exact(16).enumerate() {
        let piece_at =
            base + (j / p.per_group) * p.group_stride + (j % p.per_group) * p.piece_stride;
        for (i, element) in piece.chunks_exact(p.element_bytes).enumerate() {
            let to = piece_at + i * p.element_stride;
            cache[to..to + p.element_bytes].copy_from_slice(element);
        }
    }
}

/// Offloads the request of 20 tokens in blocks 2, 3 to host memory, optionally flips a byte
/// of the offloaded K, and brings it back into blocks 5, 6 (blocks 2, 3 reused meanwhile).
/// Returns (the transfer digests agree, the next decode step's violation rows).
fn offload_and_back(flip: bool) -> (bool, usize) {
    let mut inst = Instance::new();
    let (old, new) = ([2u32, 3], [5u32, 6]);
    assert_eq!(inst.step(&old, 20, 20), 0, "prefill");
    let old_slots: Vec<i64> = (0..20).map(|p| slot_of(&old, p)).collect();
    let new_slots: Vec<i64> = (0..20).map(|p| slot_of(&new, p)).collect();
    // Offload: the records and the blocks' bytes, with the sending end's digest.
    let records: MovedRecords = inst.canary.export_records(&old_slots).unwrap();
    let sent = TransferDigest::of(&source(&inst.k, k_layout()), 0, &old_slots).unwrap();
    let mut host_k: Vec<Vec<u8>> = old.iter().map(|&b| Instance::block(&inst.k, b)).collect();
    let host_v: Vec<Vec<u8>> = old.iter().map(|&b| Instance::block(&inst.v, b)).collect();
    // Blocks 2, 3 are reused by another request.
    for &b in &old {
        Instance::put_block(&mut inst.k, b, &vec![0xEE; SHAPE.block_bytes()]);
        Instance::put_block(&mut inst.v, b, &vec![0xEE; SHAPE.block_bytes()]);
    }
    if flip {
        // A byte of the host copy of token 5's K changes.
        let mut token = vec![0u8; SHAPE.block_bytes()];
        let logical = vec![0u8; SHAPE.token_bytes()];
        let mut marker = logical.clone();
        marker[40] = 1;
        scatter(&mut token, k_layout(), 5, &marker);
        let at = token.iter().position(|&b| b == 1).unwrap();
        host_k[0][at] ^= 0x10;
    }
    // Back into blocks 5, 6, with the records moved to the new slots.
    for (i, &b) in new.iter().enumerate() {
        Instance::put_block(&mut inst.k, b, &host_k[i]);
        Instance::put_block(&mut inst.v, b, &host_v[i]);
    }
    inst.canary.import_records(&records, &new_slots).unwrap();
    let arrived = TransferDigest::of(&source(&inst.k, k_layout()), 0, &new_slots).unwrap();
    let agree = sent.verify(&arrived).unwrap();
    (agree, inst.step(&new, 21, 1))
}

#[test]
fn offloaded_blocks_come_back_verified_and_a_flipped_byte_is_reported() {
    assert_eq!(offload_and_back(false), (true, 0), "a clean move");
    let (agree, rows) = offload_and_back(true);
    assert!(!agree, "the transfer digest differs");
    assert!(rows > 0, "the next verify reports the flipped byte");
    eprintln!(
        "offload and back into other blocks: clean move verified; a flipped offloaded K byte: \
         digest mismatch and {rows} violation row(s) in the next step"
    );
}

#[test]
fn a_request_moves_to_another_canary() {
    let (mut a, mut b) = (Instance::new(), Instance::new());
    let (blocks_a, blocks_b) = ([1u32, 4], [7u32, 2]);
    assert_eq!(a.step(&blocks_a, 18, 18), 0);
    let slots_a: Vec<i64> = (0..18).map(|p| slot_of(&blocks_a, p)).collect();
    let slots_b: Vec<i64> = (0..18).map(|p| slot_of(&blocks_b, p)).collect();
    let records = a.canary.export_records(&slots_a).unwrap();
    let sent = TransferDigest::of(&source(&a.v, v_layout()), 0, &slots_a).unwrap();
    for (&from, &to) in blocks_a.iter().zip(&blocks_b) {
        Instance::put_block(&mut b.k, to, &Instance::block(&a.k, from));
        Instance::put_block(&mut b.v, to, &Instance::block(&a.v, from));
    }
    b.canary.import_records(&records, &slots_b).unwrap();
    let arrived = TransferDigest::of(&source(&b.v, v_layout()), 0, &slots_b).unwrap();
    assert_eq!(sent.verify(&arrived), Ok(true));
    assert_eq!(
        b.step(&blocks_b, 19, 1),
        0,
        "the moved request verifies on instance B"
    );
    // Without the records, instance B reports the request's whole prefix.
    let mut c = Instance::new();
    for (&from, &to) in blocks_a.iter().zip(&blocks_b) {
        Instance::put_block(&mut c.k, to, &Instance::block(&a.k, from));
        Instance::put_block(&mut c.v, to, &Instance::block(&a.v, from));
    }
    assert!(
        c.step(&blocks_b, 19, 1) > 0,
        "KV without its records is not verified clean"
    );
}

/// Copy-on-write inside the pool: `copy_records` moves block 1's records (slots 16..20) to block
/// 5 (slots 80..84) in every buffer, as export then import would; a bad slot list changes
/// nothing.
#[test]
fn copy_records_is_export_then_import() {
    let mut inst = Instance::new();
    inst.step(&[1, 2], 20, 20);
    let (from, to): (Vec<i64>, Vec<i64>) = ((16..20).collect(), (80..84).collect());
    let expected = inst.canary.export_records(&from).unwrap();
    inst.canary.copy_records(&from, &to).unwrap();
    assert_eq!(inst.canary.export_records(&to).unwrap(), expected);
    let before = inst.canary.export_records(&to).unwrap();
    assert!(inst.canary.copy_records(&from, &[0, 81, 82, 83]).is_err());
    assert!(inst.canary.copy_records(&from, &to[..3]).is_err());
    assert_eq!(inst.canary.export_records(&to).unwrap(), before);
}

#[test]
fn digests_of_other_layouts_and_bad_imports_are_refused() {
    let inst = Instance::new();
    let k = TransferDigest::of(&source(&inst.k, k_layout()), 0, &[16, 17]).unwrap();
    let hnd = TokenLayout::hnd(SHAPE).unwrap();
    let other = TransferDigest::of(&source(&inst.k, hnd), 0, &[16, 17]).unwrap();
    let err = k.verify(&other).unwrap_err();
    assert!(matches!(err, Error::TransferLayoutMismatch { .. }), "{err}");
    assert!(err.to_string().starts_with("kv-canary: "), "{err}");
    let shifted = TransferDigest::of(&source(&inst.k, k_layout()), 1, &[16, 17]).unwrap();
    assert!(
        k.verify(&shifted).is_err(),
        "another first position is refused too"
    );

    let mut inst = Instance::new();
    let records = inst.canary.export_records(&[16, 17]).unwrap();
    assert_eq!(records.len(), 2);
    let before = inst.canary.export_records(&[20, 21, 22]).unwrap();
    for bad in [&[20i64][..], &[20, 0], &[20, SLOTS as i64]] {
        let err = inst.canary.import_records(&records, bad).unwrap_err();
        assert!(err.to_string().starts_with("kv-canary: "), "{err}");
    }
    assert_eq!(
        inst.canary.export_records(&[20, 21, 22]).unwrap(),
        before,
        "nothing written"
    );
    assert!(
        inst.canary.export_records(&[0]).is_err(),
        "slot 0 is reserved"
    );
}
