//! Where a buffer lives: [`Host`] memory now, device memory with the `cuda` feature.
//!
//! Buffers are generic over a [`Memory`], so the same `VerifyPlan<C, M>` type describes a plan
//! in host memory (what the CPU reference takes) and one in device memory (what a CUDA launch
//! takes). The CPU ops are implemented for `Host` only and the CUDA launches for the device only,
//! so handing a buffer to the wrong backend is a type error.

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

/// An element type of a canary buffer: `i32`, `i64` or `u8`. Fixed by each buffer's type, so
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
elements!(i32, i64, u8);

/// A memory space. Sealed: [`Host`], and `Device` memory with the `cuda` feature.
pub trait Memory: sealed::Sealed + 'static {
    /// A fixed-length array of `T` in this memory.
    type Array<T: Element>;
    /// One `T` in this memory (a plan's `verify_num_valid`, `enable`, ...).
    type Scalar<T: Element>;
}

/// Ordinary host memory: arrays are boxed slices, scalars plain values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Host;

impl sealed::Sealed for Host {}
impl Memory for Host {
    type Array<T: Element> = Box<[T]>;
    type Scalar<T: Element> = T;
}

/// CUDA device memory (feature `cuda`): arrays are `cust` device buffers, scalars one-element
/// device boxes. Buffers in it are filled and read through the typed transfers of
/// [`cuda`](crate::cuda) and handed to its launches; the CPU ops do not accept them.
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Device;

#[cfg(feature = "cuda")]
impl sealed::Sealed for Device {}
#[cfg(feature = "cuda")]
impl Memory for Device {
    type Array<T: Element> = cust::memory::DeviceBuffer<T>;
    type Scalar<T: Element> = cust::memory::DeviceBox<T>;
}

#[cfg(test)]
mod tests {
    use super::*;
    static_assertions::assert_impl_all!(Host: Memory, Copy, Send, Sync);
    static_assertions::assert_impl_all!(i64: Element);
}
