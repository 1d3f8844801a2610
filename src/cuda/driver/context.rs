//! The device and its primary context.

use super::error::{check, cust_error};
use crate::Error;
use cust::context::Context;
use cust::device::{Device, DeviceAttribute};
use cust::error::CudaError;
use cust::sys::{self, CUcontext};
use cust::CudaFlags;

/// What the backend needs to know about a device.
#[derive(Clone, Debug)]
pub(crate) struct DeviceInfo {
    /// The device ordinal.
    pub(crate) ordinal: u32,
    /// `NVIDIA H200`.
    pub(crate) name: String,
    /// Streaming multiprocessors.
    pub(crate) sm_count: u32,
    /// Compute capability.
    pub(crate) compute_capability: (u32, u32),
    /// Shared memory of one multiprocessor, in bytes.
    pub(crate) shared_bytes_per_sm: u32,
    /// The most shared memory one block may opt into, in bytes.
    pub(crate) shared_bytes_per_block_optin: u32,
}

/// Initialises the driver (`cuInit`, cheap after the first call); without a device
/// [`Error::NoCudaDevice`].
fn init() -> Result<(), Error> {
    cust::init(CudaFlags::empty()).map_err(|e| match e {
        CudaError::NoDevice => Error::NoCudaDevice {
            detail: "cuInit reported CUDA_ERROR_NO_DEVICE".to_owned(),
        },
        other => cust_error("cuInit")(other),
    })
}

/// `cuDeviceGetCount`, the driver initialised first.
fn count_devices() -> Result<u32, Error> {
    Device::num_devices().map_err(cust_error("cuDeviceGetCount"))
}

/// The CUDA devices present (`cuInit`, then `cuDeviceGetCount`): 0 where `cuInit` reports
/// `CUDA_ERROR_NO_DEVICE`; other driver failures are errors.
pub(crate) fn device_count() -> Result<u32, Error> {
    match init() {
        Ok(()) => count_devices(),
        Err(Error::NoCudaDevice { .. }) => Ok(0),
        Err(e) => Err(e),
    }
}

/// A device's retained primary context: the context every buffer, stream and module of one
/// `Gpu` lives in. `Send` and `Sync` (cust's `Context` is: a context may be made current on
/// any thread of the process, and on several at once).
#[derive(Debug)]
pub(crate) struct PrimaryContext {
    context: Context,
}

impl PrimaryContext {
    /// Initialises the driver and retains device `ordinal`'s primary context (current on this
    /// thread afterwards). Without a device: [`Error::NoCudaDevice`].
    /// Without device `ordinal` (fewer devices present, asked with `cuDeviceGetCount`
    /// first, so `cuDeviceGet` never sees a missing ordinal): [`Error::NoCudaDevice`] naming
    /// both.
    pub(crate) fn retain(ordinal: u32) -> Result<(PrimaryContext, DeviceInfo), Error> {
        init()?;
        let count = count_devices()?;
        if ordinal >= count {
            return Err(Error::NoCudaDevice {
                detail: format!(
                    "no CUDA device {ordinal}: cuDeviceGetCount reports {count} device(s)"
                ),
            });
        }
        let device = Device::get_device(ordinal).map_err(|e| match e {
            CudaError::NoDevice | CudaError::InvalidDevice => Error::NoCudaDevice {
                detail: format!("no CUDA device {ordinal}: {e}"),
            },
            other => cust_error("cuDeviceGet")(other),
        })?;
        let context = Context::new(device).map_err(cust_error("cuDevicePrimaryCtxRetain"))?;
        let attribute = |a: DeviceAttribute| -> Result<u32, Error> {
            let v = device
                .get_attribute(a)
                .map_err(cust_error("cuDeviceGetAttribute"))?;
            Ok(u32::try_from(v).unwrap_or(0))
        };
        let info = DeviceInfo {
            ordinal,
            name: device.name().map_err(cust_error("cuDeviceGetName"))?,
            sm_count: attribute(DeviceAttribute::MultiprocessorCount)?.max(1),
            compute_capability: (
                attribute(DeviceAttribute::ComputeCapabilityMajor)?,
                attribute(DeviceAttribute::ComputeCapabilityMinor)?,
            ),
            shared_bytes_per_sm: attribute(DeviceAttribute::MaxSharedMemoryPerMultiprocessor)?,
            shared_bytes_per_block_optin: optin_shared_bytes(device)?,
        };
        Ok((PrimaryContext { context }, info))
    }

    /// Makes this context current on the calling thread (`cuCtxSetCurrent`, skipped when it
    /// already is: one `cuCtxGetCurrent`, a thread-local read, on the hot path of a launch).
    pub(crate) fn make_current(&self) -> Result<(), Error> {
        make_raw_current(self.context.as_raw())
    }

    /// The raw context handle (to compare with a stream's context).
    pub(crate) fn raw(&self) -> CUcontext {
        self.context.as_raw()
    }

    /// Blocks the host until everything queued in this context, on every stream, has run
    /// (`cuCtxSynchronize`).
    pub(crate) fn synchronize(&self) -> Result<(), Error> {
        self.make_current()?;
        // SAFETY: the context is current (above); this only blocks the thread.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }
}

/// Makes `context` current on the calling thread unless it already is.
fn make_raw_current(context: CUcontext) -> Result<(), Error> {
    let mut current: CUcontext = core::ptr::null_mut();
    // SAFETY: the driver writes one context handle (or null) into `current`.
    check("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&mut current)
    })?;
    if current != context {
        // SAFETY: `context` is a live context (a retained primary context, or the context of a
        // live allocation, see `make_owner_current`); setting it current only changes which
        // context this thread's later driver calls use.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(context) })?;
    }
    Ok(())
}

/// Makes the context that owns the device allocation at `addr` current on the calling thread:
/// every transfer of `driver::memory` runs in its buffer's own context, whatever this thread
/// did before (a new thread has no current context at all).
pub(crate) fn make_owner_current(addr: u64) -> Result<(), Error> {
    let mut context: CUcontext = core::ptr::null_mut();
    // SAFETY: `CU_POINTER_ATTRIBUTE_CONTEXT` writes one `CUcontext` into `context`; an address
    // that no live allocation owns is an error (`CUDA_ERROR_INVALID_VALUE`), not a crash.
    check("cuPointerGetAttribute", unsafe {
        sys::cuPointerGetAttribute(
            (&mut context as *mut CUcontext).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_CONTEXT,
            addr,
        )
    })?;
    if context.is_null() {
        // Memory the driver ties to no context (stream-ordered pools, `cuMemAllocAsync`, and
        // virtual-memory mappings, as engines allocate): keep the thread's current context.
        return Ok(());
    }
    make_raw_current(context)
}

/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` (cust 0.3 does not name it).
fn optin_shared_bytes(device: Device) -> Result<u32, Error> {
    let mut value = 0i32;
    // SAFETY: `device` is a valid device handle (from cuDeviceGet); the driver writes one int.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(
            &mut value,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            device.as_raw(),
        )
    })?;
    Ok(u32::try_from(value).unwrap_or(0))
}
