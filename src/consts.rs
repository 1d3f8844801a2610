//! The exact constants of spec §2.1. Imports nothing: [`hash`](crate::hash) builds on it.

/// Chain anchor; chain heads expect `splitmix64(CANARY_CHAIN_ANCHOR)` as their prev hash.
pub const CANARY_CHAIN_ANCHOR: u64 = 0xC0FF_EE12_3456_7890;
/// `splitmix64(CANARY_CHAIN_ANCHOR)`: the stored prev hash of every chain head.
pub const CHAIN_HEAD_HASH: u64 = 0xDE7F_AE23_A9A1_B716;
/// `req_pool_indices[r] == 0` marks a CUDA-graph padding row.
pub const REQ_POOL_IDX_PADDING: i64 = 0;
/// KV/canary slot 0 is reserved (dummy writes; zero-initialised `req_to_token`).
pub const TOKEN_TO_KV_SLOT_PADDING: i64 = 0;
/// `i64` fields per canary slot: token, position, prev hash, real-KV hash.
pub const CANARY_FIELDS_PER_SLOT: usize = 4;
/// Minimum (and default) canary slot stride in bytes.
pub const CANARY_SLOT_BYTES: usize = 32;
/// `i64` fields per violation row.
pub const VIOLATION_FIELDS: usize = 8;
/// Most real-KV sources one launch can fingerprint.
pub const MAX_REAL_KV_SOURCES: usize = 4;
/// Most batch rows SGLang's GPU plan path takes per launch.
pub const PLAN_BS_BLOCK_SIZE: usize = 4096;

static_assertions::const_assert_eq!(CANARY_SLOT_BYTES, CANARY_FIELDS_PER_SLOT * 8);
// `CHAIN_HEAD_HASH == splitmix64(CANARY_CHAIN_ANCHOR)` is asserted in `hash.rs`: this module
// imports nothing, the hash functions build on it.
