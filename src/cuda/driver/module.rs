//! Modules loaded from PTX and their functions.

use super::error::check;
use crate::Error;
use cust::sys::{self, CUfunction, CUmodule};
use std::ffi::CString;

/// A loaded module (`cuModuleLoadData`), unloaded on drop.
#[derive(Debug)]
pub(crate) struct Module {
    raw: CUmodule,
}

// SAFETY: a `CUmodule` is a handle into the driver's per-process state, not memory this thread
// owns: the driver API is thread-safe, and a module loaded into a context may be used (its
// functions looked up, launched, the module unloaded) from any thread of the process, as long as
// that context is current there (every launch of the backend makes it current first). The
// handle is only read after `from_ptx` and unloaded once, in `drop`, which takes `&mut self`.
unsafe impl Send for Module {}
// SAFETY: as above; `&Module` only lets `function` look up entry points, which the driver
// serialises internally.
unsafe impl Sync for Module {}

/// A kernel of a loaded module (`cuModuleGetFunction`): a plain handle, valid while its module
/// stays loaded (its holder keeps the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Function(CUfunction);

// SAFETY: a `CUfunction` is an immutable handle into the driver's per-process state: launching
// it (or setting its attributes) is allowed from any thread of the process whose current context
// is the module's (the launch function makes it current); the driver API is thread-safe. The
// handle itself is never written after `cuModuleGetFunction`.
unsafe impl Send for Function {}
// SAFETY: as above; a shared `Function` is only copied out and passed to the driver.
unsafe impl Sync for Function {}

impl Function {
    /// The raw handle.
    pub(crate) fn raw(self) -> CUfunction {
        self.0
    }
}

impl Module {
    /// Loads `ptx` into the current context (the driver JIT-compiles it for the device).
    pub(crate) fn from_ptx(ptx: &str) -> Result<Module, Error> {
        let text = CString::new(ptx).map_err(|_| Error::Malformed {
            detail: "PTX text holds a NUL byte".to_owned(),
        })?;
        let mut raw: CUmodule = core::ptr::null_mut();
        // SAFETY: `text` is a NUL-terminated PTX image that lives across the call; the driver
        // copies what it needs and writes the new module's handle into `raw`.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut raw, text.as_ptr().cast())
        })?;
        Ok(Module { raw })
    }

    /// The entry point `name`; valid while the module is loaded.
    pub(crate) fn function(&self, name: &str) -> Result<Function, Error> {
        let name = CString::new(name).map_err(|_| Error::Malformed {
            detail: "a kernel name holds a NUL byte".to_owned(),
        })?;
        let mut f: CUfunction = core::ptr::null_mut();
        // SAFETY: `self.raw` is a loaded module; `name` is NUL-terminated; the handle written
        // to `f` stays valid until the module is unloaded (in `drop`).
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, self.raw, name.as_ptr())
        })?;
        Ok(Function(f))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the module is loaded and unloaded once; its functions are not used after
        // (whoever holds them holds the module, and drops them first).
        unsafe { sys::cuModuleUnload(self.raw) };
    }
}

/// Raises the dynamic shared memory `f`'s launches may request to `bytes`.
///
/// # Safety
///
/// `f` must be a function of a module that is still loaded.
pub(crate) unsafe fn set_max_dynamic_shared(f: Function, bytes: u32) -> Result<(), Error> {
    // SAFETY: `f` is a live function of a loaded module (the caller's contract); the attribute
    // only raises the dynamic shared memory a launch may request.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(
            f.raw(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    })
}
