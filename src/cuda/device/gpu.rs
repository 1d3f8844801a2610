//! [`Gpu`]: one CUDA device with its context, its kernels (loaded lazily) and its tuning.

use super::tuning::KernelTuning;
use crate::cuda::abi::kernels::{Kernel, ModuleId};
use crate::cuda::abi::ptx;
use crate::cuda::driver::context::{self, DeviceInfo, PrimaryContext};
use crate::cuda::driver::module::{self, Function, Module};
use crate::Error;
use std::sync::{Arc, OnceLock};

/// A loaded kernel file: its module and the functions of its kernels, in the order of
/// `ModuleId::kernels`.
struct LoadedModule {
    functions: Vec<Function>,
    // Dropped after the functions' handles (they are plain handles; nothing uses them later).
    _module: Module,
}

/// One CUDA device: its (primary) context, the kernels of `kernels/*.cu` loaded from their
/// embedded PTX, and its multiprocessor count.
///
/// Everything CUDA in this module starts here. Each kernel file is loaded on the first launch
/// of one of its kernels (a [`Stream::capture`](super::stream::Stream::capture) loads all of
/// them first: loading is not a stream operation). The PTX is the newest target not newer than
/// the device (`sm_90` on Hopper, `sm_80` JIT-compiled on 8.x devices); devices older than 8.0
/// are [`Error::NoCudaDevice`].
///
/// Buffers are allocated in this context (their constructors make it current) and must not
/// outlive it in use (dropping them later is harmless). `Send` and `Sync`: every call of the
/// backend that reaches the driver makes the right context current on the calling thread first
/// (launches and stream calls this `Gpu`'s, transfers their buffer's), so one `Gpu` may be
/// shared by reference between threads, each driving its own [`Stream`](super::stream::Stream)
/// (see the threading rules of [`cuda`](crate::cuda)). Kernel files load once even when two
/// threads launch their first kernel at the same time.
///
/// Cheap to clone: a clone is another handle to the same context and the same loaded kernels
/// (an [`Arc`] inside), so streams, events and pending reports hold a clone and borrow
/// nothing, and an engine can keep them in its own structs. The [`KernelTuning`] is the one
/// part of a handle that is not shared: [`set_kernel_tuning`](Self::set_kernel_tuning) changes
/// this handle (and the clones made from it afterwards, e.g. by
/// [`Stream::new`](super::stream::Stream::new)), not the clones made before. Two
/// [`Gpu::new`] calls give two independent handles of the same primary context, each with its
/// own kernel table.
#[derive(Clone)]
pub struct Gpu {
    shared: Arc<SharedGpu>,
    tuning: KernelTuning,
}

/// What every clone of one [`Gpu`] shares.
struct SharedGpu {
    info: DeviceInfo,
    // Dropped before the context.
    modules: [OnceLock<LoadedModule>; ModuleId::ALL.len()],
    context: PrimaryContext,
}

static_assertions::assert_impl_all!(Gpu: Send, Sync);

impl Gpu {
    /// Device 0. Without a CUDA device (CI machines, `cuInit` reports
    /// `CUDA_ERROR_NO_DEVICE`) this is [`Error::NoCudaDevice`], which GPU tests report as
    /// skipped.
    pub fn new() -> Result<Gpu, Error> {
        Gpu::with_ordinal(0)
    }

    /// The CUDA devices this process sees (`cuInit`, then `cuDeviceGetCount`): the ordinals
    /// [`with_ordinal`](Self::with_ordinal) accepts are `0..device_count()`. `Ok(0)` where
    /// `cuInit` reports `CUDA_ERROR_NO_DEVICE` (CI machines); other driver failures are errors.
    /// Ask it before opening a second device, rather than probing ordinals.
    pub fn device_count() -> Result<u32, Error> {
        context::device_count()
    }

    /// Device `ordinal`. An ordinal past the [`device_count`](Self::device_count) is
    /// [`Error::NoCudaDevice`] naming both (checked before `cuDeviceGet` is called).
    pub fn with_ordinal(ordinal: u32) -> Result<Gpu, Error> {
        let (context, info) = PrimaryContext::retain(ordinal)?;
        let (major, minor) = info.compute_capability;
        if major * 10 + minor < ptx::oldest_target() {
            return Err(Error::NoCudaDevice {
                detail: format!(
                    "device {ordinal} ({}) has compute capability {major}.{minor}; the kernels \
                     are built for {:?} (8.0 and newer)",
                    info.name,
                    ptx::TARGETS
                        .iter()
                        .map(|(_, arch)| *arch)
                        .collect::<Vec<_>>()
                ),
            });
        }
        Ok(Gpu {
            shared: Arc::new(SharedGpu {
                info,
                modules: Default::default(),
                context,
            }),
            tuning: KernelTuning::default(),
        })
    }

    /// The device ordinal (`0` for [`Gpu::new`]).
    pub fn ordinal(&self) -> u32 {
        self.shared.info.ordinal
    }

    /// Blocks the host until everything queued in this device's context, on every stream, has
    /// run (`cuCtxSynchronize`): the fence between the crate's synchronous transfers and work
    /// on a non-blocking or foreign stream (the ordering rules of [`cuda`](crate::cuda)).
    pub fn synchronize(&self) -> Result<(), Error> {
        self.shared.context.synchronize()
    }

    /// The device's name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.shared.info.name
    }

    /// Streaming multiprocessors (132 on an H200).
    pub fn sm_count(&self) -> u32 {
        self.shared.info.sm_count
    }

    /// The compute capability (`(9, 0)` on an H200).
    pub fn compute_capability(&self) -> (u32, u32) {
        self.shared.info.compute_capability
    }

    /// The kernel tuning launches use.
    pub fn kernel_tuning(&self) -> KernelTuning {
        self.tuning
    }

    /// Whether the library's launches through this handle are programmatic dependent launches
    /// ([`KernelTuning::overlap_launches`], on a device of compute capability 9.0 or later).
    pub(crate) fn early_start(&self) -> bool {
        self.tuning.overlap_launches && self.compute_capability().0 >= 9
    }

    /// Changes the tuning of later launches through this handle and the clones made from it
    /// afterwards (each count is clamped to at least 1); streams made before keep theirs.
    pub fn set_kernel_tuning(&mut self, tuning: KernelTuning) {
        self.tuning = tuning.clamped();
    }

    /// Makes this device's (primary) context current on the calling thread: every allocation
    /// and module load of the backend does it first, so buffers land on the device they are
    /// allocated for. Call it before allocating with cust directly.
    pub fn make_current(&self) -> Result<(), Error> {
        self.shared.context.make_current()
    }

    /// The primary context, for the driver calls that must run in it.
    pub(crate) fn context(&self) -> &PrimaryContext {
        &self.shared.context
    }

    /// Shared memory of one multiprocessor, in bytes (228 KB on an H200).
    pub(crate) fn shared_bytes_per_sm(&self) -> u32 {
        self.shared.info.shared_bytes_per_sm
    }

    /// The function of `kernel`, loading its module on first use.
    pub(crate) fn function(&self, kernel: Kernel) -> Result<Function, Error> {
        let loaded = self.module(kernel.module())?;
        loaded
            .functions
            .get(kernel.index_in_module())
            .copied()
            .ok_or_else(|| Error::Malformed {
                detail: format!("kernel {kernel:?} is missing from its module"),
            })
    }

    /// Loads every kernel file not loaded yet (before a capture).
    pub(crate) fn load_all(&self) -> Result<(), Error> {
        for m in ModuleId::ALL {
            self.module(m)?;
        }
        Ok(())
    }

    fn module(&self, id: ModuleId) -> Result<&LoadedModule, Error> {
        let cell = &self.shared.modules[id.index()];
        if let Some(loaded) = cell.get() {
            return Ok(loaded);
        }
        // Two threads may both get here and both load the file; the first `set` wins and the
        // other module is unloaded when `loaded` drops (`OnceLock::get_or_try_init` is not
        // stable yet). Either way every caller gets the one stored module.
        let loaded = self.load(id)?;
        let _ = cell.set(loaded);
        cell.get().ok_or_else(|| Error::Malformed {
            detail: format!("module {} did not load", id.file()),
        })
    }

    fn load(&self, id: ModuleId) -> Result<LoadedModule, Error> {
        self.make_current()?;
        let (major, minor) = self.shared.info.compute_capability;
        let (_, text) = ptx::for_device(id, major, minor).ok_or_else(|| Error::NoCudaDevice {
            detail: format!(
                "no PTX of {} for compute capability {major}.{minor}",
                id.file()
            ),
        })?;
        let module = Module::from_ptx(text)?;
        let mut functions = Vec::new();
        for kernel in id.kernels() {
            let f = module.function(&kernel.name())?;
            let shared = kernel.max_shared_bytes();
            if shared > 0 {
                // Plan blocks keep up to 4096 rows (144 KB), staged verify blocks 72 KB; a
                // device that offers less serves the launches that fit.
                let bytes = shared.min(self.shared.info.shared_bytes_per_block_optin);
                // SAFETY: `f` is a function of `module`, loaded above and kept with it.
                unsafe { module::set_max_dynamic_shared(f, bytes) }?;
            }
            functions.push(f);
        }
        Ok(LoadedModule {
            functions,
            _module: module,
        })
    }
}

impl Drop for SharedGpu {
    fn drop(&mut self) {
        // The modules unload (a driver call in the current context) before the context is
        // released: make it current, also when the last handle is dropped on another thread.
        let _ = self.context.make_current();
    }
}

impl core::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.shared.info.name)
            .field("sm_count", &self.shared.info.sm_count)
            .field("compute_capability", &self.shared.info.compute_capability)
            .field("tuning", &self.tuning)
            .finish_non_exhaustive()
    }
}
