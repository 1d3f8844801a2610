//! [`CustomModule`]: PTX of the caller's own, loaded into a [`Gpu`]'s context, and its
//! [`CustomKernel`]s (queued by [`launch_custom`](crate::cuda::launch_custom)).
//!
//! Like candle's custom PTX: kernels that are not this crate's (the benchmark floors of
//! `kv-canary-testkit`, or an engine's own) launched through the same driver layer.

use super::gpu::Gpu;
use crate::cuda::driver::module::{Function, Module};
use crate::Error;
use cust::sys::CUfunction;

/// A module loaded from caller-supplied PTX into `gpu`'s context; unloaded on drop. It keeps a
/// clone of its [`Gpu`] (as a [`Stream`](crate::cuda::Stream) does), so it borrows nothing and an
/// engine can store it in its own structs. `Send` and `Sync` like its [`Gpu`].
#[derive(Debug)]
pub struct CustomModule {
    // Before the `Gpu`: the module unloads while the context is alive (its `Gpu` may hold the
    // last handle of it).
    module: Module,
    gpu: Gpu,
}

impl CustomModule {
    /// Loads `ptx` into `gpu`'s context (the driver JIT-compiles it for the device; PTX newer
    /// than the driver is [`Error::Cuda`] of `cuModuleLoadData`). Keeps a clone of `gpu`.
    pub fn from_ptx(gpu: &Gpu, ptx: &str) -> Result<Self, Error> {
        gpu.make_current()?;
        Ok(CustomModule {
            module: Module::from_ptx(ptx)?,
            gpu: gpu.clone(),
        })
    }

    /// The device it is loaded on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The entry point `name` (`extern "C" __global__`). Look kernels up before a capture:
    /// the lookup is a driver call.
    pub fn kernel(&self, name: &str) -> Result<CustomKernel, Error> {
        Ok(CustomKernel {
            function: self.module.function(name)?,
        })
    }
}

/// An entry point of a [`CustomModule`], valid while the module is loaded (launching it later
/// is excluded by [`launch_custom`](crate::cuda::launch_custom)'s contract). `Send` and `Sync`.
#[derive(Clone, Copy, Debug)]
pub struct CustomKernel {
    function: Function,
}

impl CustomKernel {
    /// The raw function handle (for a bare driver launch to compare with).
    pub fn as_raw(&self) -> CUfunction {
        self.function.raw()
    }

    /// The function, for the launch.
    pub(crate) fn function(&self) -> Function {
        self.function
    }
}

impl Drop for CustomModule {
    fn drop(&mut self) {
        // The module unloads in the current context: make its `Gpu`'s current first, also when
        // it is dropped on another thread.
        let _ = self.gpu.make_current();
    }
}

static_assertions::assert_impl_all!(CustomModule: Send, Sync);
static_assertions::assert_impl_all!(CustomKernel: Send, Sync);
