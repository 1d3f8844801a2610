//! Test and benchmark support of `kv-canary`, kept out of the published library: nothing here
//! is for engines.
//!
//! Always: [`HostBackend`], what the conformance runner and the differential tests ask of a
//! backend (host buffers, every op), implemented by `kv_canary::backend::Cpu`; and
//! [`TestSelection`], the tests that libtest's command line selects, for the harnesses of our
//! own (the GPU tests, the fuzz targets).
//!
//! With the `cuda` feature:
//! * `floors`: the hardware floors the CUDA benchmark measures beside the ops (device copies,
//!   the verify gathers alone, the write chain alone, an L2 flush, raw launches), with their
//!   kernels (`kernels/bench.cu`, compiled by this crate's build script and loaded through
//!   `kv_canary::cuda::CustomModule`);
//! * `Offload`: the CUDA ops on *host* buffers, a [`HostBackend`] for the conformance runner and
//!   the GPU-vs-CPU differential tests.
//!
//! Without it the crate holds only [`HostBackend`] and [`TestSelection`], so that `cargo test` of the workspace needs no CUDA.
#![cfg_attr(feature = "cuda", deny(clippy::undocumented_unsafe_blocks))]
#![warn(missing_docs)]

#[cfg(feature = "cuda")]
pub mod floors;
mod host_backend;
#[cfg(feature = "cuda")]
mod offload;
mod test_selection;

pub use host_backend::HostBackend;
#[cfg(feature = "cuda")]
pub use offload::Offload;
pub use test_selection::TestSelection;
