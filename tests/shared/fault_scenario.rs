//! The fault-detection scenario's fixed parts, shared by the CPU test (`tests/faults.rs`) and
//! the GPU test (`tests/cuda_gpu/faults.rs`, the same scenario on a device canary): the paged
//! cache's shape, the detectors, which detector each perturbation must reach, slots of a
//! request's blocks, and the forward pass's bytes of a token.

use kv_canary::guard::faults::{Fault, FaultPlan};
use kv_canary::{LaunchTag, PagedShape, TokenLayout, Violation};

/// One KV head of 16 bf16 a token, blocks of 16 tokens.
pub const SHAPE: PagedShape = PagedShape::new(1, 16, 2, 16);
/// Blocks in each cache.
pub const BLOCKS: usize = 8;

/// Where a detector fired (the detection table's columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detector {
    HeadVerify,
    TailVerify,
    WriteInputCheck,
    Sweep,
}

/// The detector that recorded `row`.
pub fn detector(row: &Violation) -> Detector {
    match row.launch_tag() {
        _ if row.is_write() => Detector::WriteInputCheck,
        Some(LaunchTag::HeadKFull | LaunchTag::HeadVFull) => Detector::HeadVerify,
        Some(LaunchTag::SweepKFull | LaunchTag::SweepVFull) => Detector::Sweep,
        _ => Detector::TailVerify,
    }
}

/// Each perturbation and the detectors that may catch it first.
pub const EXPECTED: [(Fault, &[Detector]); 5] = [
    (Fault::TableCell, &[Detector::HeadVerify]),
    (Fault::LiveKv, &[Detector::TailVerify]),
    (Fault::IdleKv, &[Detector::Sweep]),
    (
        Fault::AfterStamp,
        &[Detector::HeadVerify, Detector::TailVerify, Detector::Sweep],
    ),
    (Fault::TokenSwap, &[Detector::WriteInputCheck]),
];

/// The table's plan of `fault`: always, once, from step 3.
pub fn plan(fault: Fault) -> FaultPlan {
    FaultPlan {
        fault,
        probability: 1.0,
        warmup: 3,
        limit: 1,
    }
}

/// The slot of position `pos` of a request holding `blocks`.
pub fn block_slot(blocks: &[u32], pos: usize) -> i64 {
    i64::from(blocks[pos / 16]) * 16 + (pos % 16) as i64
}

/// The forward pass: a token's K or V bytes, a function of its position, at their places in
/// `layout` (vLLM's K or V layout) of `cache`.
pub fn forward_token(cache: &mut [u8], layout: TokenLayout, slot: i64, pos: usize) {
    let TokenLayout::Pieces(p) = layout else {
        return;
    };
    let (b, at) = (slot as usize / 16, slot as usize % 16);
    let base = b * SHAPE.block_bytes() + at * p.token_stride;
    for j in 0..SHAPE.token_bytes() / 16 {
        let piece = base + (j / p.per_group) * p.group_stride + (j % p.per_group) * p.piece_stride;
        for i in 0..16 / p.element_bytes {
            for e in 0..p.element_bytes {
                cache[piece + i * p.element_stride + e] = (pos * 31 + j * 7 + i * 3 + e) as u8;
            }
        }
    }
}
