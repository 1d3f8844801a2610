//! The kernel ABI, the bottom layer of the backend: what Rust and `kernels/*.cu` agree on.
//!
//! * [`shared`]: every constant both sides use (the source of the generated C++ header);
//! * [`ptr`]: [`DevPtr`](ptr::DevPtr), a typed device address;
//! * [`args`]: the kernels' argument structs (their layouts are asserted in the `.cu` files);
//! * [`status`]: the sticky status word and its decoding into [`Error`](crate::Error);
//! * [`kernels`]: the kernel table (names, modules, block sizes, shared memory), keyed by enums;
//! * [`ptx`]: the embedded PTX of every target.
//!
//! Imports nothing from the other CUDA layers (and nothing from `cust`).

pub(crate) mod args;
pub(crate) mod kernels;
pub(crate) mod ptr;
pub(crate) mod ptx;
pub(crate) mod shared;
pub(crate) mod status;

// The crate's other definitions of shared values agree with the ABI's.
static_assertions::const_assert_eq!(crate::consts::CHAIN_HEAD_HASH, shared::CHAIN_HEAD);
static_assertions::const_assert_eq!(crate::consts::VIOLATION_FIELDS, shared::VIOLATION_FIELDS);
static_assertions::const_assert_eq!(
    crate::consts::MAX_REAL_KV_SOURCES,
    shared::MAX_REAL_KV_SOURCES
);
static_assertions::const_assert_eq!(crate::consts::PLAN_BS_BLOCK_SIZE, shared::PLAN_MAX_ROWS);
// Every field of the argument structs is 8 bytes: no padding on either side.
static_assertions::const_assert_eq!(core::mem::size_of::<args::ScatterArgs>(), 8 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<args::RealKv>(), 50 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<args::PlanArgs>(), 37 * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<args::VerifyArgs>(), (18 + 50) * 8);
static_assertions::const_assert_eq!(core::mem::size_of::<args::WriteArgs>(), (24 + 50) * 8);

// FailReason bits and RealKvHashMode values of the host types are the ABI's.
static_assertions::const_assert_eq!(
    crate::canary::FailReason::VERIFY_CHAIN_HASH_MISMATCH.bits(),
    shared::VERIFY_CHAIN_HASH_MISMATCH
);
static_assertions::const_assert_eq!(
    crate::canary::FailReason::VERIFY_POSITION_MISMATCH.bits(),
    shared::VERIFY_POSITION_MISMATCH
);
static_assertions::const_assert_eq!(
    crate::canary::FailReason::VERIFY_REAL_KV_HASH_MISMATCH.bits(),
    shared::VERIFY_REAL_KV_HASH_MISMATCH
);
static_assertions::const_assert_eq!(
    crate::canary::FailReason::WRITE_TOKEN_MISMATCH.bits(),
    shared::WRITE_TOKEN_MISMATCH
);
static_assertions::const_assert_eq!(
    crate::canary::FailReason::WRITE_POSITION_MISMATCH.bits(),
    shared::WRITE_POSITION_MISMATCH
);
static_assertions::const_assert_eq!(
    crate::canary::FailReason::VERIFY_TOKEN_MISMATCH.bits(),
    shared::VERIFY_TOKEN_MISMATCH
);
static_assertions::const_assert_eq!(
    crate::real_kv::RealKvHashMode::None.value(),
    shared::REAL_KV_NONE
);
static_assertions::const_assert_eq!(
    crate::real_kv::RealKvHashMode::Partial.value(),
    shared::REAL_KV_PARTIAL
);
