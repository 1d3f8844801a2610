//! [`Gpu`]: one CUDA device with its context and the kernels loaded.

use super::driver::{check, cust_error};
use super::ptx;
use crate::Error;
use cust::context::Context;
use cust::device::{Device, DeviceAttribute};
use cust::error::CudaError;
use cust::module::Module;
use cust::sys::CUfunction;
use cust::CudaFlags;

/// Which plan kernel a launch uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKernel {
    /// The lean kernel (256 threads) for plans of at most 1024 rows, the large one (512
    /// threads) above.
    Auto,
    /// Always blocks of 128 threads (at most 1024 write requests; larger plans use `Large`).
    Small,
    /// Always blocks of 512 threads.
    Large,
    /// Entries in grid-strided rounds, one at a time instead of software-pipelined, so fewer
    /// registers (at most 64) and more warps per multiprocessor: blocks of 256 threads for at
    /// most 1024 rows, of 512 threads above.
    Lean,
}

/// Grid sizes of the launches, in blocks per multiprocessor (the write op always runs one block
/// per request row). The defaults fill an H200 at full occupancy; the benchmark sweeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Plan kernel choice.
    pub plan_kernel: PlanKernel,
    /// Plan, large kernel: at most this many blocks of 512 threads per SM (one fits with 4096
    /// rows: 144 KB of shared memory, up to 124 registers). Every plan grid also shrinks to
    /// what the verify capacity needs; with a checked LUT (every block must be resident) the
    /// large and small kernels take at most one block per SM, the lean one as many as its
    /// registers and shared memory are sure to leave room for.
    pub plan_blocks_per_sm: u32,
    /// Plan: at most this many blocks of 128 threads per SM (the small kernel).
    pub plan_small_blocks_per_sm: u32,
    /// Plan, lean kernel: at most this many blocks of 256 threads per SM (half as many of 512
    /// threads); four fit by registers, two measured best (the default).
    pub plan_lean_blocks_per_sm: u32,
    /// Verify without real-KV folds: blocks of 512 threads per SM (four fit: 32 registers).
    pub verify_blocks_per_sm: u32,
    /// Verify with PARTIAL real-KV folds: blocks of 512 threads per SM (two fit: 64 registers).
    pub verify_fold_blocks_per_sm: u32,
    /// Verify with ALL real-KV folds, unstaged (strips over 128 bytes, or a slot stride that
    /// is not a multiple of 16): blocks of 512 threads per SM (one fits: up to 128 registers, a
    /// source's strip in flight per lane).
    pub verify_all_blocks_per_sm: u32,
    /// Verify with ALL real-KV folds staged through shared memory (strips of at most 128
    /// bytes): whether to use that kernel at all (else the unstaged one).
    pub verify_all_staged: bool,
    /// Verify, staged ALL: blocks of 256 threads per SM (three fit: 72 KB of shared memory,
    /// 64 registers).
    pub verify_all_staged_blocks_per_sm: u32,
}

impl Default for LaunchConfig {
    fn default() -> Self {
        LaunchConfig {
            plan_kernel: PlanKernel::Auto,
            plan_blocks_per_sm: 1,
            plan_small_blocks_per_sm: 4,
            plan_lean_blocks_per_sm: 2,
            verify_blocks_per_sm: 4,
            verify_fold_blocks_per_sm: 2,
            verify_all_blocks_per_sm: 1,
            verify_all_staged: true,
            verify_all_staged_blocks_per_sm: 3,
        }
    }
}

/// The kernel entry points of one loaded set of modules.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    /// `[small, large, lean, lean_large]` x `[full, pool, lut_clamp, pool_lut_clamp, lut,
    /// pool_lut]`.
    pub(crate) plan: [[CUfunction; 6]; 4],
    /// `[none, none_tokens, partial, partial_tokens, all, all_tokens]`.
    pub(crate) verify: [CUfunction; 6],
    /// `[all_staged, all_staged_tokens]`.
    pub(crate) verify_all_staged: [CUfunction; 2],
    /// `[none, none_assert, partial, partial_assert, all, all_assert]`.
    pub(crate) write: [CUfunction; 6],
    pub(crate) scatter: CUfunction,
    pub(crate) gather_floor: CUfunction,
    pub(crate) chain_floor: CUfunction,
    pub(crate) chain_floor_vector: CUfunction,
    pub(crate) empty: CUfunction,
    pub(crate) spin: CUfunction,
    pub(crate) lut_floor: CUfunction,
    pub(crate) dependent_loads: CUfunction,
}

/// One CUDA device: its (primary) context, the kernels of `kernels/*.cu` loaded from their
/// embedded PTX, and its multiprocessor count.
///
/// Everything CUDA in this module starts here. Buffers are allocated in this context and must
/// not outlive it in use (dropping them later is harmless). Not `Send`: the context is current
/// on the thread that made it.
pub struct Gpu {
    kernels: Kernels,
    config: LaunchConfig,
    sm_count: u32,
    name: String,
    // Dropped after the kernels' handles are gone, before the context.
    _modules: Vec<Module>,
    _context: Context,
}

impl Gpu {
    /// Device 0. Without a CUDA device (CI machines, `cuInit` reports
    /// `CUDA_ERROR_NO_DEVICE`) this is [`Error::NoCudaDevice`], which GPU tests report as
    /// skipped.
    pub fn new() -> Result<Gpu, Error> {
        Gpu::with_ordinal(0)
    }

    /// Device `ordinal`.
    pub fn with_ordinal(ordinal: u32) -> Result<Gpu, Error> {
        cust::init(CudaFlags::empty()).map_err(|e| match e {
            CudaError::NoDevice => Error::NoCudaDevice {
                detail: "cuInit reported CUDA_ERROR_NO_DEVICE".to_owned(),
            },
            other => cust_error("cuInit")(other),
        })?;
        let device = Device::get_device(ordinal).map_err(|e| match e {
            CudaError::NoDevice | CudaError::InvalidDevice => Error::NoCudaDevice {
                detail: format!("no CUDA device {ordinal}: {e}"),
            },
            other => cust_error("cuDeviceGet")(other),
        })?;
        let context = Context::new(device).map_err(cust_error("cuDevicePrimaryCtxRetain"))?;
        let sm_count = device
            .get_attribute(DeviceAttribute::MultiprocessorCount)
            .map_err(cust_error("cuDeviceGetAttribute"))?;
        let name = device.name().map_err(cust_error("cuDeviceGetName"))?;
        let load = |ptx: &str| Module::from_ptx(ptx, &[]).map_err(cust_error("cuModuleLoadDataEx"));
        let modules = vec![
            load(ptx::PLAN)?,
            load(ptx::VERIFY)?,
            load(ptx::WRITE)?,
            load(ptx::SCATTER)?,
            load(ptx::BENCH)?,
        ];
        let f = |m: &Module, name: &str| -> Result<CUfunction, Error> {
            Ok(m.get_function(name)
                .map_err(cust_error("cuModuleGetFunction"))?
                .to_raw())
        };
        let (pm, vm, wm, sm, bm) = (
            &modules[0],
            &modules[1],
            &modules[2],
            &modules[3],
            &modules[4],
        );
        let plan_family = |size: &str| -> Result<[CUfunction; 6], Error> {
            let mut out = [core::ptr::null_mut(); 6];
            for (slot, suffix) in out.iter_mut().zip([
                "",
                "_pool",
                "_lut_clamp",
                "_pool_lut_clamp",
                "_lut",
                "_pool_lut",
            ]) {
                *slot = f(pm, &format!("kv_canary_plan_{size}{suffix}"))?;
            }
            Ok(out)
        };
        let kernels = Kernels {
            plan: [
                plan_family("small")?,
                plan_family("large")?,
                plan_family("lean")?,
                plan_family("leanl")?,
            ],
            verify: [
                f(vm, "kv_canary_verify")?,
                f(vm, "kv_canary_verify_tokens")?,
                f(vm, "kv_canary_verify_partial")?,
                f(vm, "kv_canary_verify_partial_tokens")?,
                f(vm, "kv_canary_verify_all")?,
                f(vm, "kv_canary_verify_all_tokens")?,
            ],
            verify_all_staged: [
                f(vm, "kv_canary_verify_all_staged")?,
                f(vm, "kv_canary_verify_all_staged_tokens")?,
            ],
            write: [
                f(wm, "kv_canary_write")?,
                f(wm, "kv_canary_write_assert")?,
                f(wm, "kv_canary_write_partial")?,
                f(wm, "kv_canary_write_partial_assert")?,
                f(wm, "kv_canary_write_all")?,
                f(wm, "kv_canary_write_all_assert")?,
            ],
            scatter: f(sm, "kv_canary_scatter")?,
            gather_floor: f(bm, "kv_canary_gather_floor")?,
            chain_floor: f(bm, "kv_canary_chain_floor")?,
            chain_floor_vector: f(bm, "kv_canary_chain_floor_vector")?,
            empty: f(bm, "kv_canary_empty")?,
            spin: f(bm, "kv_canary_spin")?,
            lut_floor: f(bm, "kv_canary_lut_floor")?,
            dependent_loads: f(bm, "kv_canary_dependent_loads")?,
        };
        // The plan kernels keep up to 4096 rows in dynamic shared memory (144 KB a block).
        let plan_shared = super::plan::plan_shared_bytes(crate::consts::PLAN_BS_BLOCK_SIZE, 512);
        for &k in kernels.plan.iter().flatten() {
            // SAFETY: `k` is a live function of a loaded module; the attribute only raises the
            // dynamic shared memory a launch may request (launches never ask for more).
            check("cuFuncSetAttribute", unsafe {
                cust::sys::cuFuncSetAttribute(
                    k,
                    cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    plan_shared as i32,
                )
            })?;
        }
        for &k in &kernels.verify_all_staged {
            // SAFETY: as above (72 KB of staging buffers a block).
            check("cuFuncSetAttribute", unsafe {
                cust::sys::cuFuncSetAttribute(
                    k,
                    cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    super::verify::STAGED_SHARED_BYTES as i32,
                )
            })?;
        }
        Ok(Gpu {
            kernels,
            config: LaunchConfig::default(),
            sm_count: sm_count.max(1) as u32,
            name,
            _modules: modules,
            _context: context,
        })
    }

    /// The device's name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Streaming multiprocessors (132 on an H200).
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The grid sizes launches use.
    pub fn launch_config(&self) -> LaunchConfig {
        self.config
    }

    /// Changes the grid sizes of later launches (each count is clamped to at least 1).
    pub fn set_launch_config(&mut self, config: LaunchConfig) {
        self.config = LaunchConfig {
            plan_kernel: config.plan_kernel,
            plan_blocks_per_sm: config.plan_blocks_per_sm.max(1),
            plan_small_blocks_per_sm: config.plan_small_blocks_per_sm.max(1),
            plan_lean_blocks_per_sm: config.plan_lean_blocks_per_sm.max(1),
            verify_blocks_per_sm: config.verify_blocks_per_sm.max(1),
            verify_fold_blocks_per_sm: config.verify_fold_blocks_per_sm.max(1),
            verify_all_blocks_per_sm: config.verify_all_blocks_per_sm.max(1),
            verify_all_staged: config.verify_all_staged,
            verify_all_staged_blocks_per_sm: config.verify_all_staged_blocks_per_sm.max(1),
        };
    }

    pub(crate) fn kernels(&self) -> &Kernels {
        &self.kernels
    }
}

impl core::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.name)
            .field("sm_count", &self.sm_count)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
