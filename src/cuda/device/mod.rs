//! The device layer: the [`Gpu`](gpu::Gpu) handle, its kernel tuning, streams and graphs, and
//! the device twins of the host buffers and settings. Imports the driver and ABI layers below.

pub(crate) mod canary_state;
pub(crate) mod custom_module;
pub(crate) mod gpu;
pub(crate) mod plan_buffers;
pub(crate) mod plan_inputs;
pub(crate) mod settings;
pub(crate) mod stream;
pub(crate) mod tuning;
pub(crate) mod write_inputs;
