//! [`CudaErrorCode`]: the driver's result code of a failed call, kept in [`Error::Cuda`].

use crate::Error;
use cust::sys::{self, CUresult};

/// The result code of a failed CUDA call: the driver's `CUresult` (every code, also those cust
/// 0.3 does not name, such as `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`), or the error cust
/// reported for a call made through it (whose codes are the driver's, except cust's own
/// `InvalidMemoryAllocation` = 100100 and `OptixError` = 100101).
///
/// Match on it with [`is`](Self::is) or [`raw`](Self::raw):
///
/// ```no_run
/// # fn f(e: kv_canary::Error) {
/// use kv_canary::cuda::CUresult;
/// if let kv_canary::Error::Cuda { call, code } = &e {
///     if code.is(CUresult::CUDA_ERROR_OUT_OF_MEMORY) {
///         eprintln!("{call} ran out of device memory");
///     }
/// }
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CudaErrorCode(Code);

#[derive(Clone, Copy, Debug)]
enum Code {
    Driver(CUresult),
    Cust(cust::error::CudaError),
    /// A cudarc call of the engine's own (feature `cudarc`): the driver's code, in cudarc's
    /// copy of the `CUresult` type.
    #[cfg(feature = "cudarc")]
    Cudarc(cudarc::driver::DriverError),
}

impl CudaErrorCode {
    /// The code of a raw driver result.
    pub fn from_result(result: CUresult) -> Self {
        CudaErrorCode(Code::Driver(result))
    }

    /// The numeric code (`2` for `CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn raw(self) -> u32 {
        match self.0 {
            Code::Driver(r) => r as u32,
            Code::Cust(e) => e as u32,
            #[cfg(feature = "cudarc")]
            Code::Cudarc(e) => e.0 as u32,
        }
    }

    /// Whether this is the driver's `result`.
    pub fn is(self, result: CUresult) -> bool {
        self.raw() == result as u32
    }
}

impl From<cust::error::CudaError> for CudaErrorCode {
    fn from(e: cust::error::CudaError) -> Self {
        CudaErrorCode(Code::Cust(e))
    }
}

/// A cust call of the engine's own (an allocation, a copy) failed: [`Error::Cuda`] with the
/// code, the call named `"cust"`, so an engine on cust returns `kv_canary::Error` with `?`.
impl From<cust::error::CudaError> for Error {
    fn from(e: cust::error::CudaError) -> Self {
        Error::Cuda {
            call: "cust",
            code: e.into(),
        }
    }
}

#[cfg(feature = "cudarc")]
impl From<cudarc::driver::DriverError> for CudaErrorCode {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaErrorCode(Code::Cudarc(e))
    }
}

/// A cudarc call of the engine's own failed (feature `cudarc`): [`Error::Cuda`] with the
/// driver's code, the call named `"cudarc"`, so an engine on cudarc returns `kv_canary::Error`
/// with `?`, as one on cust does.
#[cfg(feature = "cudarc")]
impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Cuda {
            call: "cudarc",
            code: e.into(),
        }
    }
}

impl PartialEq for CudaErrorCode {
    fn eq(&self, other: &Self) -> bool {
        self.raw() == other.raw()
    }
}
impl Eq for CudaErrorCode {}
impl core::hash::Hash for CudaErrorCode {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.raw().hash(state);
    }
}

impl core::fmt::Display for CudaErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Code::Driver(r) => {
                let mut text: *const core::ffi::c_char = core::ptr::null();
                // SAFETY: `r` is a valid CUresult; the driver writes a pointer to a static,
                // NUL-terminated string (or leaves it null for an unknown code).
                let known = unsafe { sys::cuGetErrorString(r, &mut text) };
                if known == CUresult::CUDA_SUCCESS && !text.is_null() {
                    // SAFETY: non-null and NUL-terminated, owned by the driver for the process.
                    let text = unsafe { core::ffi::CStr::from_ptr(text) };
                    write!(f, "{r:?} ({}): {}", r as u32, text.to_string_lossy())
                } else {
                    write!(f, "{r:?} ({})", r as u32)
                }
            }
            Code::Cust(e) => write!(f, "{e:?} ({}): {e}", e as u32),
            #[cfg(feature = "cudarc")]
            Code::Cudarc(e) => match e.error_string() {
                Ok(text) => write!(f, "{:?} ({}): {}", e.0, e.0 as u32, text.to_string_lossy()),
                Err(_) => write!(f, "{:?} ({})", e.0, e.0 as u32),
            },
        }
    }
}

impl std::error::Error for CudaErrorCode {}

/// `Ok` for `CUDA_SUCCESS`, else [`Error::Cuda`] naming the call and the driver's code.
pub(crate) fn check(call: &'static str, result: CUresult) -> Result<(), Error> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call,
            code: CudaErrorCode::from_result(result),
        })
    }
}

/// A cust error as [`Error::Cuda`] of `call`.
pub(crate) fn cust_error(call: &'static str) -> impl FnOnce(cust::error::CudaError) -> Error {
    move |e| Error::Cuda {
        call,
        code: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_driver_code_is_kept_matchable_and_is_the_source() {
        let err = check("cuMemAlloc", CUresult::CUDA_ERROR_OUT_OF_MEMORY).unwrap_err();
        let Error::Cuda { call, code } = &err else {
            panic!("not Error::Cuda: {err:?}");
        };
        assert_eq!(*call, "cuMemAlloc");
        assert!(code.is(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert_eq!(code.raw(), 2);
        // cust's error for the same failure is the same code.
        assert_eq!(
            *code,
            CudaErrorCode::from(cust::error::CudaError::OutOfMemory)
        );
        let source = err.source().expect("a source");
        assert!(source.downcast_ref::<CudaErrorCode>().is_some());
        assert_eq!(check("cuMemAlloc", CUresult::CUDA_SUCCESS), Ok(()));
        // Codes cust 0.3 does not name stay exact.
        let captured = CudaErrorCode::from_result(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(captured.raw(), 901);
    }

    #[cfg(feature = "cudarc")]
    #[test]
    fn a_cudarc_error_keeps_the_driver_code() {
        use cudarc::driver::{sys::CUresult as CudarcResult, DriverError};
        let err = Error::from(DriverError(CudarcResult::CUDA_ERROR_OUT_OF_MEMORY));
        let Error::Cuda { call, code } = &err else {
            panic!("not Error::Cuda: {err:?}");
        };
        assert_eq!(*call, "cudarc");
        assert!(code.is(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert_eq!(
            *code,
            CudaErrorCode::from_result(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        );
        let e = DriverError(CudarcResult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(CudaErrorCode::from(e).raw(), 901);
    }
}
