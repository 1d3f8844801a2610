//! Where a buffer lives: [`Host`] memory now, device memory with the `cuda` feature.
//!
//! Buffers are generic over a [`Memory`], so the same `VerifyPlan<C, M>` type describes a plan
//! in host memory (what the CPU reference takes) and one in device memory (what a CUDA launch
//! takes). The CPU ops are implemented for `Host` only and the CUDA launches for the device only,
//! so handing a buffer to the wrong backend is a type error.

use crate::Error;
use core::fmt::Debug;

mod sealed {
    pub trait Sealed {}

    /// Element types; with the `cuda` feature they can live in device memory too.
    #[cfg(feature = "cuda")]
    pub trait ElementSealed: cust::memory::DeviceCopy {}
    /// Element types; with the `cuda` feature they can live in device memory too.
    #[cfg(not(feature = "cuda"))]
    pub trait ElementSealed {}
}

/// An element type of a canary buffer or a device input: `i32`, `i64`, `u8` or `u32`. Fixed by each buffer's type, so
/// SGLang's dtype checks have no counterpart here.
pub trait Element:
    Copy + Default + Debug + PartialEq + Send + Sync + 'static + sealed::ElementSealed
{
}

macro_rules! elements {
    ($($t:ty),*) => {$(
        impl sealed::ElementSealed for $t {}
        impl Element for $t {}
    )*};
}
elements!(i32, i64, u8, u32);

/// A memory space. Sealed: [`Host`], and `Device` memory with the `cuda` feature.
pub trait Memory: sealed::Sealed + 'static {
    /// A fixed-length array of `T` in this memory.
    type Array<T: Element>;
    /// One `T` in this memory (a plan's `verify_num_valid`, `enable`, ...).
    type Scalar<T: Element>;
    /// An array of index values (token ids, positions, slots, lengths): `i64`s in host
    /// memory; in device memory a view keeps the engine's element type (`i64`, `i32` or
    /// `u32`), which the kernels read it in.
    type IndexArray;
}

/// Ordinary host memory: arrays are boxed slices, scalars plain values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Host;

impl sealed::Sealed for Host {}
impl Memory for Host {
    type Array<T: Element> = Box<[T]>;
    type Scalar<T: Element> = T;
    type IndexArray = Box<[i64]>;
}

/// CUDA device memory (feature `cuda`): arrays are [`DeviceArray`](crate::cuda::DeviceArray)s,
/// scalars [`DeviceScalar`](crate::cuda::DeviceScalar)s, each either allocated by the crate or a
/// view of memory the engine owns. Buffers in it are filled and read through the typed transfers of
/// [`cuda`](crate::cuda) and handed to its launches; the CPU ops do not accept them.
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Device;

/// The seal of [`Memory`], for the CUDA driver layer's `impl Memory for Device` (its arrays
/// and scalars are the driver layer's `DeviceArray` and `DeviceScalar`).
#[cfg(feature = "cuda")]
pub(crate) use sealed::Sealed as DeviceMemorySealed;

/// A host array of `len` copies of `fill`, allocated fallibly: a length whose byte size overflows
/// or exceeds `isize::MAX`, or an allocation the allocator refuses, is
/// [`Error::AllocationFailed`] naming `what` and the size, never an abort.
///
/// The memory is written once (zeroed or filled), so a buffer of an engine's size costs its
/// pages at construction, not at first use.
pub(crate) fn host_array<T: Element>(
    what: &'static str,
    len: usize,
    fill: T,
) -> Result<Box<[T]>, Error> {
    host_table(what, len, 1, fill)
}

/// A host array of `rows x cols` copies of `fill` (row-major), allocated fallibly as
/// [`host_array`]; a product that overflows names both factors.
pub(crate) fn host_table<T: Element>(
    what: &'static str,
    rows: usize,
    cols: usize,
    fill: T,
) -> Result<Box<[T]>, Error> {
    let failed = || Error::AllocationFailed {
        what,
        rows: rows as u128,
        cols: cols as u128,
        element_bytes: core::mem::size_of::<T>(),
    };
    let len = rows.checked_mul(cols).ok_or_else(failed)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| failed())?;
    v.resize(len, fill);
    Ok(v.into_boxed_slice())
}

/// The buffer of a static capacity (`Cap<N>`): its size is fixed when the engine is compiled,
/// like a `Box<[T; N]>`'s, so a failed allocation panics with the error's message (naming the
/// size) instead of returning it. Run-time capacities take the `try_` constructors.
pub(crate) fn static_size<T>(buffer: Result<T, Error>) -> T {
    match buffer {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_are_errors_naming_the_size() {
        // Byte size past isize::MAX (deterministic: no allocator involved).
        let err = host_array::<i64>("verify_slot_indices", 1 << 61, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv-canary: cannot allocate verify_slot_indices: 2305843009213693952 elements of 8 bytes = 18446744073709551616 bytes"
        );
        // rows x cols overflows usize: both factors named.
        let err = host_table::<i32>("req_to_token", 1 << 40, 1 << 40, 0).unwrap_err();
        assert_eq!(
            err,
            Error::AllocationFailed {
                what: "req_to_token",
                rows: 1 << 40,
                cols: 1 << 40,
                element_bytes: 4
            }
        );
        // 2^50 bytes (1 PiB): below isize::MAX, so it reaches the allocator, and beyond the
        // default user address space of x86-64 and aarch64 Linux (47 or 48 bits), so the
        // allocator refuses it on every machine this runs on, overcommit or not.
        let err = host_array::<u8>("canary_buf", 1 << 50, 0).unwrap_err();
        assert!(
            err.to_string().contains("1125899906842624 elements"),
            "{err}"
        );
        assert_eq!(&*host_table("t", 2, 3, 7i32).unwrap(), &[7; 6]);
    }
    static_assertions::assert_impl_all!(Host: Memory, Copy, Send, Sync);
    static_assertions::assert_impl_all!(i64: Element);
}
