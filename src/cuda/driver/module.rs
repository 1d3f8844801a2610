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

impl Module {
    /// Loads `ptx` into the current context (the driver JIT-compiles it for the device).
    pub(crate) fn from_ptx(ptx: &str) -> Result<Module, Error> {
        let text = CString::new(ptx).map_err(|_| Error::Malformed {
            detail: "kv-canary: PTX text holds a NUL byte".to_owned(),
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
    pub(crate) fn function(&self, name: &str) -> Result<CUfunction, Error> {
        let name = CString::new(name).map_err(|_| Error::Malformed {
            detail: "kv-canary: a kernel name holds a NUL byte".to_owned(),
        })?;
        let mut f: CUfunction = core::ptr::null_mut();
        // SAFETY: `self.raw` is a loaded module; `name` is NUL-terminated; the handle written
        // to `f` stays valid until the module is unloaded (in `drop`).
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, self.raw, name.as_ptr())
        })?;
        Ok(f)
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
pub(crate) unsafe fn set_max_dynamic_shared(f: CUfunction, bytes: u32) -> Result<(), Error> {
    // SAFETY: `f` is a live function of a loaded module (the caller's contract); the attribute
    // only raises the dynamic shared memory a launch may request.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(
            f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    })
}
