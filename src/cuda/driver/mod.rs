//! The driver layer: every raw CUDA driver call of the backend, each behind a checked wrapper,
//! and the one launch function. Imports only the ABI layer below it.
//!
//! * [`error`]: [`CudaErrorCode`](error::CudaErrorCode) and the result checks;
//! * [`context`]: initialisation, the device's attributes and its primary context;
//! * [`module`]: modules loaded from PTX and their functions;
//! * [`memory`]: allocation, synchronous transfers, typed addresses;
//! * [`pinned`]: pinned host memory and stream-ordered readbacks into it (async reports);
//! * [`stream`]: streams, events, capture and executable graphs;
//! * [`staged_upload`]: stream-ordered uploads from pageable host memory (sweep entries);
//! * [`launch`]: [`launch`](launch::launch), the one call that queues a kernel.

pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod pinned;
pub(crate) mod staged_upload;
pub(crate) mod stream;
