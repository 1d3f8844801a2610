//! Limits of SGLang's GPU plan path that the CPU reference does not share (spec §9).

use kv_canary::consts::PLAN_BS_BLOCK_SIZE;
use kv_canary::{cpu, Batch, BatchRow, Cap, PlanInputs, ReqToToken, Shape};

/// One row more than SGLang's GPU offsets kernel takes in one launch.
const BS: usize = PLAN_BS_BLOCK_SIZE + 1;

/// SGLang's GPU path rejects `bs > 4096` ("supports at most bs=4096 reqs per launch"); the limit
/// is its kernel's block size, not part of the contract, and its reference has none. The CPU op
/// accepts the batch and plans every row (`cpu::plan` docs, spec §9 item 2).
#[test]
fn bs_above_the_gpu_block_size_is_accepted() {
    let shape = Shape::<Cap<BS>, Cap<BS>, Cap<BS>>::new();
    let (mut verify, mut write) = (shape.verify_plan(), shape.write_plan());
    // Request row 1 holds slots 10, 11; every batch row reads its one-token prefix.
    let table = ReqToToken::from_vec(2, 2, vec![0, 0, 10, 11]).unwrap();
    let row = BatchRow {
        req_pool_index: 1,
        prefix_len: 1,
        extend_len: 1,
    };
    let batch: Batch = std::iter::repeat_n(row, BS).collect();
    let summary = cpu::plan(
        &shape,
        &PlanInputs::full(&batch, &table),
        &mut verify,
        &mut write,
    )
    .expect("bs = 4097 is a valid CPU plan");
    assert_eq!(summary.bs, 4097);
    assert_eq!(summary.verify_num_valid, 4097);
    assert!(summary.enabled);
    assert_eq!(write.num_valid_reqs(), 4097);
    let expected_offsets: Vec<i64> = (0..=4097).collect();
    assert_eq!(write.offsets(), expected_offsets.as_slice());
    assert!(write.seed_slot_indices().iter().all(|&s| s == 10));
    assert!(verify.slot_indices().iter().all(|&s| s == 10));
    assert!(verify.prev_slot_indices().iter().all(|&p| p == -1));
}
