//! Test and benchmark support of `kv-canary`, kept out of the published library: nothing here
//! is for engines.
//!
//! With the `cuda` feature:
//! * `floors`: the hardware floors the CUDA benchmark measures beside the ops (device copies,
//!   the verify gathers alone, the write chain alone, an L2 flush, raw launches), with their
//!   kernels (`kernels/bench.cu`, compiled by this crate's build script and loaded through
//!   `kv_canary::cuda::CustomModule`);
//! * `Offload`: the CUDA ops on *host* buffers, for the conformance runner and the GPU-vs-CPU
//!   differential tests.
//!
//! Without it the crate is empty, so that `cargo test` of the workspace needs no CUDA.
#![cfg_attr(feature = "cuda", deny(clippy::undocumented_unsafe_blocks))]
#![warn(missing_docs)]

#[cfg(feature = "cuda")]
pub mod floors;
#[cfg(feature = "cuda")]
mod offload;

#[cfg(feature = "cuda")]
pub use offload::Offload;
