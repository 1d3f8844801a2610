//! kv-canary's adapter for engines on candle: [`TensorMemory`], a candle CUDA tensor's memory
//! as the `cudarc` [`DevicePtr`](cudarc::driver::DevicePtr) that kv-canary's `from_cudarc`
//! views read (feature `cuda`; without it only [`ElementRun`], the checks it makes, which need
//! no device).
//!
//! candle keeps a tensor's `CudaSlice` behind its storage lock, so a view cannot borrow it
//! for longer than one call; kv-canary's views are made once and kept (`Arc`s of the engine's
//! memory) while the engine keeps writing the same tensors in place every step. A
//! [`TensorMemory`] keeps the tensor alive (a clone: candle's `Arc` of its storage), holds no
//! lock, and hands out the device address of the tensor's first element. It records no cudarc
//! event: the engine and the canary share candle's one stream, whose order orders every use.
//!
//! ```ignore
//! use kv_canary::cuda::PagedStepViews;
//! use kv_canary::PagedStepArrays;
//! use kv_canary_candle::TensorMemory;
//! let arrays = PagedStepArrays {
//!     block_tables: TensorMemory::<u32>::shared(&block_tables)?, // a [rows, width] u32 tensor
//!     blocks_per_row: width,
//!     block_size: 16,
//!     context_lens: TensorMemory::<u32>::shared(&context_lens)?,
//!     // ...
//! };
//! let views = PagedStepViews::from_cudarc(&gpu, Cap, Cap, arrays)?;
//! ```

mod element_run;
#[cfg(feature = "cuda")]
mod tensor_memory;

pub use element_run::{ElementRun, NotARun};

#[cfg(feature = "cuda")]
pub use tensor_memory::TensorMemory;

/// The `cudarc` candle-core was built with (one cudarc for candle and kv-canary's `cudarc`
/// feature: `scripts/candle-probe.sh`).
#[cfg(feature = "cuda")]
pub use candle_core::cuda_backend::cudarc;
