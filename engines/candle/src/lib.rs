//! A Llama-style serving engine on candle (CPU), with vLLM's paged KV cache, guarded by
//! kv-canary (issue 34's CPU path).
//!
//! | module | what |
//! |---|---|
//! | [`config`] | every size |
//! | [`model`] | the decoder (random weights), greedy sampling |
//! | [`kv_cache`] | the paged K/V caches in vLLM's layouts, `reshape_and_cache`, block copies |
//! | [`attention`] | paged attention through block tables and context lengths |
//! | [`backend`] | what runs a step: the model and the canary (CPU; the GPU path's in `gpu_serve`) |
//! | [`block_allocator`] | reference counts, prefix cache, copy-on-write, eviction |
//! | [`scheduler`] | admission, chunked prefill, decode, preemption, forks, bucketed arrays |
//! | [`batch`] | the step arrays the model and the canary read |
//! | [`workload`] | seeded arrivals |
//! | [`canary`] | **everything the engine adds for kv-canary** (with [`canary_common`]) |
//! | [`canary_common`] | the canary helpers the CPU and GPU paths share |
//! | [`bugs`] | the bug flags |
//! | [`engine`] | the loop |
//! | [`footprint`] | the canary integration's line and name counts |
//!
//! The GPU path (issue 34 items 1-4) replaces [`kv_cache`]'s in-place ops and [`attention`]
//! with `mistralrs-paged-attn`'s kernels on candle's CUDA stream, and the canary's backend with
//! `kv_canary::cuda::Stream::from_cudarc` (feature `cuda`).

pub mod attention;
pub mod backend;
pub mod batch;
pub mod block_allocator;
pub mod bugs;
pub mod canary;
pub mod canary_common;
pub mod config;
pub mod engine;
pub mod footprint;
#[cfg(feature = "cuda")]
pub mod gpu;
#[cfg(feature = "cuda")]
pub mod gpu_canary;
#[cfg(feature = "cuda")]
pub mod gpu_graph;
#[cfg(feature = "cuda")]
pub mod gpu_serve;
pub mod kv_cache;
pub mod model;
pub mod rng;
pub mod scheduler;
pub mod workload;

/// The engine's errors: candle's and kv-canary's.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
