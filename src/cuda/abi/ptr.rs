//! [`DevPtr`]: a typed device address, the ABI of a pointer field of a kernel argument struct.
//!
//! Plain Rust without paths into the crate (`build.rs` includes it to lay out the argument
//! structs); the constructors from device buffers live in the driver layer.

use core::marker::PhantomData;

/// The device address of a `T` (or of the first of an array of them), as a kernel reads it: the
/// same 8 bytes as the C++ `T*` field (`#[repr(transparent)]` over `u64`), 0 for none.
///
/// The type keeps an `i64` array from being passed where the kernel reads `i32`s; it carries no
/// lifetime (the launch functions borrow the buffers themselves).
#[repr(transparent)]
pub struct DevPtr<T> {
    addr: u64,
    element: PhantomData<*const T>,
}

impl<T> DevPtr<T> {
    /// The null pointer (a field the kernel does not read, such as a missing LUT).
    pub const NULL: DevPtr<T> = DevPtr::from_addr(0);

    /// A pointer at `addr`.
    pub const fn from_addr(addr: u64) -> Self {
        DevPtr {
            addr,
            element: PhantomData,
        }
    }

    /// The raw address.
    pub const fn addr(self) -> u64 {
        self.addr
    }
}

impl<T> Clone for DevPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DevPtr<T> {}
impl<T> Default for DevPtr<T> {
    fn default() -> Self {
        DevPtr::NULL
    }
}
impl<T> core::fmt::Debug for DevPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "DevPtr({:#x})", self.addr)
    }
}
